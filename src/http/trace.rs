//! Tracing: one span per request, so that every log line of a request (a refused call, a failed
//! node) can be tied to it, and at debug level a line per answer with its status and latency.
//!
//! [`RequestLog`] records each request's end: its whole duration, from its arrival to its answer,
//! into `snowgate_request_duration_seconds{method,cache}`, and with `[log] access = true` one
//! access line. A JSON-RPC body (`POST` to an RPC path) is recorded where its answer is made,
//! which knows its method and cache result: the decoding layer, or the router when it refuses the
//! body. Every other request (health, metrics, a 404, a CORS preflight) is recorded here. So the
//! answer carries nothing up to this layer, and a call costs no allocation for it (measured: a
//! summary handed up in the response's extensions cost 3 % of a cache hit's CPU).
//!
//! Under the request id layer, whose id the span carries. Client-chosen values (method, path, id)
//! are recorded with `?`, quoted and escaped, so a path cannot write fake fields into a log line.
//! Hand-written rather than tower-http's `TraceLayer`, which wraps the response body and reads
//! the clock for every request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, Request, Response, StatusCode};
use tower::{Layer, Service};
use tracing::Span;

use super::X_REQUEST_ID;
use crate::call::RequestSummary;
use crate::metrics::HistogramTable;

/// What is recorded of each request: its duration, and the access line if asked for.
pub struct RequestLog {
    pub durations: HistogramTable,
    /// `[log] access`.
    pub access: bool,
}

impl RequestLog {
    /// Records the end of a request that began at `started`: its duration under its method (or
    /// batch, or none) and cache result, and its access line when they are on.
    pub fn finish(
        &self,
        started: Instant,
        status: StatusCode,
        request_id: Option<&HeaderValue>,
        summary: &RequestSummary,
    ) {
        let took = started.elapsed();
        let table = &self.durations;
        let row = match summary {
            RequestSummary { batch: true, .. } => table.batch_row(),
            RequestSummary {
                method: Some(spec), ..
            } => spec.index,
            _ => table.none_row(),
        };
        table.observe(row, summary.cache, took.as_secs_f64());
        if self.access {
            let no_id = HeaderValue::from_static("-");
            let id = request_id.unwrap_or(&no_id);
            access_line(id, status.as_u16(), summary, took);
        }
    }
}

/// Opens a span per request and measures it.
#[derive(Clone)]
pub struct TraceLayer {
    shared: Arc<Tracing>,
    /// The connection's peer (`None`: the layer of no connection yet, see [`TraceLayer::on`]).
    peer: Option<std::net::IpAddr>,
}

/// What every request's trace reads (one reference count per request, as before the client was
/// in the access line).
struct Tracing {
    log: Arc<RequestLog>,
    /// Who the client is, as the rate limiter sees it (`None`: rate limiting is off, the peer).
    limiter: Option<Arc<crate::ratelimit::Limiter>>,
}

impl TraceLayer {
    pub fn new(
        log: Arc<RequestLog>,
        limiter: Option<Arc<crate::ratelimit::Limiter>>,
    ) -> TraceLayer {
        TraceLayer {
            shared: Arc::new(Tracing { log, limiter }),
            peer: None,
        }
    }

    /// This layer for the connection from `peer`.
    pub fn on(&self, peer: std::net::IpAddr) -> TraceLayer {
        TraceLayer {
            peer: Some(peer),
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
            peer: self.peer,
        }
    }
}

/// Runs the inner service inside the request's span.
#[derive(Clone)]
pub struct Trace<S> {
    inner: S,
    shared: Arc<Tracing>,
    peer: Option<std::net::IpAddr>,
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
        // Always set by the request id layer above; `-` only if this layer ran without it.
        let no_id = HeaderValue::from_static("-");
        let id = req.headers().get(X_REQUEST_ID).unwrap_or(&no_id);
        let span = tracing::debug_span!(
            "request",
            id = ?id,
            method = ?req.method(),
            path = ?req.uri().path()
        );
        // A JSON-RPC body is recorded where its answer is made (see the module doc).
        let recorded_below =
            req.method() == Method::POST && super::router::rpc_path(req.uri().path()).is_some();
        // Kept for the access line (the header value is reference-counted, not copied).
        let log = &self.shared.log;
        let request_id = (log.access && !recorded_below).then(|| id.clone());
        let started = (!recorded_below).then(Instant::now);
        // The client as the limiter sees it, for the access line of a request recorded here.
        let client = match (&self.shared.limiter, self.peer) {
            _ if recorded_below || !log.access => None,
            (Some(l), Some(peer)) => match l.identify(peer, req.headers()) {
                crate::call::ClientId::Ip(ip) => Some(ip),
                crate::call::ClientId::Key(_) => Some(peer),
            },
            (None, peer) => peer,
            (Some(_), None) => None,
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

/// One access line: who asked what, what came of it, how long it took. Never params, never keys:
/// the method is a registered name, the upstream a configured name, the client an address.
fn access_line(id: &HeaderValue, status: u16, s: &RequestSummary, took: Duration) {
    let method = match (&s.method, s.batch) {
        (_, true) => "batch",
        (Some(spec), false) => spec.name.as_str(),
        (None, false) => "-",
    };
    let client = s
        .client
        .map_or_else(|| "-".to_string(), |ip| ip.to_string());
    tracing::info!(
        target: "snowgate::access",
        request_id = id.to_str().unwrap_or("-"),
        client = client.as_str(),
        method,
        calls = s.calls,
        status,
        cache = s.cache.unwrap_or("-"),
        upstream = s.upstream.as_deref().unwrap_or("-"),
        duration_ms = (took.as_secs_f64() * 1e6).round() / 1e3,
        "request"
    );
}
