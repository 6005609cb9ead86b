//! Serving connections: `run(listener, service, shutdown)` accepts HTTP/1.1 and cleartext HTTP/2
//! (hyper-util's auto builder, as a node serves both) with keep-alive, and on shutdown stops
//! accepting and lets the requests in flight finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use crate::front::Front;

/// Request ids: a per-process counter, short and unique enough to grep logs by.
#[derive(Clone, Default)]
struct Counter(Arc<std::sync::atomic::AtomicU64>);

impl MakeRequestId for Counter {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        HeaderValue::from_str(&format!("{n:x}"))
            .ok()
            .map(RequestId::new)
    }
}

/// Serves `front` on `listener` until `shutdown` completes, then drains for at most `drain`.
pub async fn run(
    listener: TcpListener,
    front: Arc<Front>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let ids = Counter::default();
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = http_service(front.clone(), peer, ids.clone());
        let hyper_service = hyper_util::service::TowerToHyperService::new(service);
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), hyper_service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!("drain deadline passed; closing remaining connections"),
    }
}

/// The HTTP layers around the front, built per connection (they are cheap to clone).
fn http_service(
    front: Arc<Front>,
    peer: SocketAddr,
    ids: Counter,
) -> impl Service<
    Request<Incoming>,
    Response = Response<
        tower_http::trace::ResponseBody<
            http_body_util::Full<bytes::Bytes>,
            tower_http::classify::NeverClassifyEos<tower_http::classify::ServerErrorsFailureClass>,
        >,
    >,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    ServiceBuilder::new()
        // Outermost: every answer and log line of this request carries its id.
        .layer(SetRequestIdLayer::x_request_id(ids))
        // One span per request, including the request id, so logs can be tied together.
        .layer(
            TraceLayer::new_for_http()
                // Failures are logged by the front with their blame; the trace layer stays quiet.
                .on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG))
                .make_span_with(|req: &Request<Incoming>| {
                let id = req
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                tracing::info_span!("request", id, method = %req.method(), path = %req.uri().path())
            }),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .service(tower::service_fn(move |req: Request<Incoming>| {
            let front = front.clone();
            async move { Ok::<_, Infallible>(front.handle(req, peer).await) }
        }))
}
