//! Tracing: one span per request, so that every log line of a request (a refused call, a failed
//! node) can be tied to it, and at debug level a line per answer with its status and latency.
//!
//! It records (see [`super::record`]) every request that is not JSON-RPC (health, metrics, a 404,
//! a CORS preflight); a JSON-RPC request ([`super::rpc::is_rpc`]) carries its own record down.
//!
//! Under the request id layer, whose id the span carries. Client-chosen values (method, path, id)
//! are recorded with `?`, quoted and escaped, so a path cannot write fake fields into a log line.
//! Hand-written rather than tower-http's `TraceLayer`, which wraps the response body and reads
//! the clock for every request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{HeaderValue, Request, Response};
use tower::{Layer, Service};
use tracing::Span;

use super::record::RequestLog;
use super::{Surface, X_REQUEST_ID};
use crate::call::RequestSummary;
use crate::ratelimit::Quota;

/// Opens a span per request and measures it.
#[derive(Clone)]
pub struct TraceLayer {
    shared: Arc<Tracing>,
    /// The connection's peer and listener (`None`: the layer of no connection yet, see
    /// [`TraceLayer::on`]).
    conn: Option<(std::net::IpAddr, Surface)>,
}

/// What every request's trace reads (one reference count per request, as before the client was
/// in the access line).
struct Tracing {
    log: Arc<RequestLog>,
    /// Who the client is, as its quota is kept.
    quota: Quota,
}

impl TraceLayer {
    pub fn new(log: Arc<RequestLog>, quota: Quota) -> TraceLayer {
        TraceLayer {
            shared: Arc::new(Tracing { log, quota }),
            conn: None,
        }
    }

    /// This layer for the connection from `peer` to the `surface` listener.
    pub fn on(&self, peer: std::net::IpAddr, surface: Surface) -> TraceLayer {
        TraceLayer {
            conn: Some((peer, surface)),
            ..self.clone()
        }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Trace<S> {
        Trace {
            inner,
            shared: self.shared.clone(),
            conn: self.conn,
        }
    }
}

/// Runs the inner service inside the request's span.
#[derive(Clone)]
pub struct Trace<S> {
    inner: S,
    shared: Arc<Tracing>,
    conn: Option<(std::net::IpAddr, Surface)>,
}

impl<S, B, ResBody> Service<Request<B>> for Trace<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = TraceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Always set by the request id layer above; `-` only if this layer ran without it. Looked
        // up only for what uses it: the span when `debug` is on, the access line when it is on.
        let no_id = HeaderValue::from_static("-");
        let id = || req.headers().get(X_REQUEST_ID).unwrap_or(&no_id);
        let span = tracing::debug_span!(
            "request",
            id = ?id(),
            method = ?req.method(),
            path = ?req.uri().path()
        );
        // A JSON-RPC request carries its own record (see the module doc).
        let (peer, surface) = match self.conn {
            Some((peer, surface)) => (Some(peer), surface),
            None => (None, Surface::Public),
        };
        let recorded_below = super::rpc::is_rpc(surface, req.method(), req.uri().path());
        // Kept for the access line (the header value is reference-counted, not copied).
        let log = &self.shared.log;
        let request_id = (log.access && !recorded_below).then(|| id().clone());
        let started = (!recorded_below).then(Instant::now);
        // The client as its quota knows it, for the access line of a request recorded here.
        let client = match peer {
            Some(peer) if log.access && !recorded_below => {
                match self.shared.quota.identify(peer, req.headers()) {
                    crate::call::ClientId::Ip(ip) => Some(ip),
                    crate::call::ClientId::Key(_) => Some(peer),
                }
            }
            _ => None,
        };
        let inner = {
            let _entered = span.enter();
            self.inner.call(req)
        };
        TraceFuture {
            inner,
            span,
            started,
            log: log.clone(),
            request_id,
            client,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner future, polled inside the request's span.
    pub struct TraceFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        // `None`: recorded below.
        started: Option<Instant>,
        log: Arc<RequestLog>,
        request_id: Option<HeaderValue>,
        client: Option<std::net::IpAddr>,
    }
}

impl<F, ResBody, E> Future for TraceFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let out = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &out {
            tracing::debug!(status = response.status().as_u16(), "answered");
            if let Some(started) = *this.started {
                let summary = RequestSummary {
                    client: *this.client,
                    ..RequestSummary::default()
                };
                let id = this.request_id.take();
                this.log
                    .finish(started, response.status(), id.as_ref(), &summary);
            }
        }
        Poll::Ready(out)
    }
}
