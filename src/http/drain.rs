//! Draining: from SIGTERM until the listener closes, every answer says `connection: close`, so
//! that keep-alive clients move to another instance behind the load balancer instead of being
//! cut mid-request when the drain ends. (`/ext/health` answers 503 meanwhile: [`super::admin`].)
//!
//! Above compression and routing so that every answer, whatever made it, carries the header.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderValue, Request, Response};
use tower::{Layer, Service};

/// Adds `connection: close` while `draining` is set.
#[derive(Clone)]
pub struct DrainLayer {
    draining: Arc<AtomicBool>,
}

impl DrainLayer {
    pub fn new(draining: Arc<AtomicBool>) -> DrainLayer {
        DrainLayer { draining }
    }
}

impl<S> Layer<S> for DrainLayer {
    type Service = Drain<S>;

    fn layer(&self, inner: S) -> Drain<S> {
        Drain {
            inner,
            draining: self.draining.clone(),
        }
    }
}

/// See the module doc.
#[derive(Clone)]
pub struct Drain<S> {
    inner: S,
    draining: Arc<AtomicBool>,
}

impl<S, B, ResBody> Service<Request<B>> for Drain<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = DrainFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        DrainFuture {
            inner: self.inner.call(req),
            draining: self.draining.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner answer, closing its connection if the gateway is draining by then.
    pub struct DrainFuture<F> {
        #[pin]
        inner: F,
        draining: Arc<AtomicBool>,
    }
}

impl<F, ResBody, E> Future for DrainFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut r = std::task::ready!(this.inner.poll(cx))?;
        // Read when the answer is ready: a call that began before SIGTERM still closes.
        if this.draining.load(Ordering::Relaxed) {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(Ok(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[tokio::test]
    async fn answers_close_their_connection_only_while_draining() {
        let draining = Arc::new(AtomicBool::new(false));
        let inner =
            tower::service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
        let drain = DrainLayer::new(draining.clone()).layer(inner);
        let r = drain
            .clone()
            .oneshot(Request::new(()))
            .await
            .unwrap_or_else(|e| match e {});
        assert!(r.headers().get(header::CONNECTION).is_none());
        draining.store(true, Ordering::Relaxed);
        let r = drain
            .oneshot(Request::new(()))
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(r.headers()[header::CONNECTION], "close");
    }
}
