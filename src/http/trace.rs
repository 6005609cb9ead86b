//! Tracing: one span per request, so that every log line of a request (a refused call, a failed
//! node) can be tied to it, and at debug level a line per answer with its status and latency.
//! Here too each request's whole duration is measured, from its arrival to its answer, into
//! `snowgate_request_duration_seconds{method,cache}` (from what the decoding layer left on the
//! answer: [`RequestSummary`]), and with `[log] access = true` written as one access line.
//!
//! Under the request id layer, whose id the span carries. Client-chosen values (method, path, id)
//! are recorded with `?`, quoted and escaped, so a path cannot write fake fields into a log line.
//! Hand-written rather than tower-http's `TraceLayer`, which wraps the response body and reads
//! the clock for every request; here, with debug off, a request costs one disabled span.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response};
use tower::{Layer, Service};
use tracing::Span;

use super::X_REQUEST_ID;
use crate::call::RequestSummary;
use crate::metrics::HistogramTable;

/// What the layer records of each request: its duration, and the access line if asked for.
pub struct RequestLog {
    pub durations: HistogramTable,
    /// `[log] access`.
    pub access: bool,
}

/// Opens a span per request and measures it.
#[derive(Clone)]
pub struct TraceLayer {
    log: Arc<RequestLog>,
}

impl TraceLayer {
    pub fn new(log: Arc<RequestLog>) -> TraceLayer {
        TraceLayer { log }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Trace<S> {
        Trace {
            inner,
            log: self.log.clone(),
        }
    }
}

/// Runs the inner service inside the request's span.
#[derive(Clone)]
pub struct Trace<S> {
    inner: S,
    log: Arc<RequestLog>,
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
        // Kept for the access line (the header value is reference-counted, not copied).
        let request_id = self.log.access.then(|| id.clone());
        let started = Instant::now();
        let inner = {
            let _entered = span.enter();
            self.inner.call(req)
        };
        TraceFuture {
            inner,
            span,
            started,
            log: self.log.clone(),
            request_id,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner future, polled inside the request's span.
    pub struct TraceFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        started: Instant,
        log: Arc<RequestLog>,
        request_id: Option<HeaderValue>,
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
            let elapsed = this.started.elapsed();
            let summary = response.extensions().get::<RequestSummary>();
            let table = &this.log.durations;
            let row = match summary {
                Some(s) if s.batch => table.batch_row(),
                Some(RequestSummary {
                    method: Some(spec), ..
                }) => spec.index,
                _ => table.none_row(),
            };
            table.observe(row, summary.and_then(|s| s.cache), elapsed.as_secs_f64());
            tracing::debug!(status = response.status().as_u16(), latency = ?elapsed, "answered");
            if let Some(id) = this.request_id.take() {
                access_line(&id, response.status().as_u16(), summary, elapsed);
            }
        }
        Poll::Ready(out)
    }
}

/// One access line: who asked what, what came of it, how long it took. Never params, never keys:
/// the method is a registered name, the upstream a configured name, the client an address.
fn access_line(id: &HeaderValue, status: u16, summary: Option<&RequestSummary>, took: Duration) {
    let none = RequestSummary::default();
    let s = summary.unwrap_or(&none);
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
