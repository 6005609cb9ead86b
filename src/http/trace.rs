//! Tracing: one span per request, so that every log line of a request (a refused call, a failed
//! node) can be tied to it, and at debug level a line per answer with its status and latency.
//!
//! Under the request id layer, whose id the span carries. Client-chosen values (method, path, id)
//! are recorded with `?`, quoted and escaped, so a path cannot write fake fields into a log line.
//! Hand-written rather than tower-http's `TraceLayer`, which wraps the response body and reads
//! the clock for every request; here, with debug off, a request costs one disabled span.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{HeaderValue, Request, Response};
use tower::{Layer, Service};
use tracing::Span;

use super::X_REQUEST_ID;

/// Opens a span per request.
#[derive(Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Trace<S> {
        Trace { inner }
    }
}

/// Runs the inner service inside the request's span.
#[derive(Clone)]
pub struct Trace<S> {
    inner: S,
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
        let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
        let inner = {
            let _entered = span.enter();
            self.inner.call(req)
        };
        TraceFuture {
            inner,
            span,
            started,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner future, polled inside the request's span.
    pub struct TraceFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        started: Option<Instant>,
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
        if let (Some(started), Ok(response)) = (this.started.take(), &out) {
            tracing::debug!(status = response.status().as_u16(), latency = ?started.elapsed(), "answered");
        }
        Poll::Ready(out)
    }
}
