//! Request ids: the outermost layer, so that every answer (a 404 as much as a cache hit) and every
//! log line of a request carries `x-request-id`.
//!
//! A client's id is kept when it is a short token (letters, digits, `-_.:`, at most 128 bytes):
//! enough for UUIDs and trace ids, and nothing that could forge a log field or smuggle bytes to
//! another system. Anything else is replaced by snowgate's own: a per-process counter in hex.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use tower::{Layer, Service};

use super::X_REQUEST_ID;

/// The longest client request id kept.
const MAX_REQUEST_ID: usize = 128;

/// Whether a client's `x-request-id` is kept (see the module doc).
pub fn is_request_id_token(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Makes request ids: a counter shared by every connection of a gateway.
#[derive(Clone, Default)]
pub struct RequestIdLayer {
    next: Arc<AtomicU64>,
}

impl RequestIdLayer {
    pub fn new() -> RequestIdLayer {
        RequestIdLayer::default()
    }
}

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;

    fn layer(&self, inner: S) -> RequestId<S> {
        RequestId {
            inner,
            next: self.next.clone(),
        }
    }
}

/// Sets the request's id (the client's, or a new one) and copies it onto the answer.
#[derive(Clone)]
pub struct RequestId<S> {
    inner: S,
    next: Arc<AtomicU64>,
}

impl<S> RequestId<S> {
    fn make_id(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // Formatted by hand: `format!` costs an allocation more, per request.
        let mut buf = [0u8; 16];
        let mut at = buf.len();
        let mut rest = n;
        loop {
            at -= 1;
            buf[at] = b"0123456789abcdef"[(rest & 0xf) as usize];
            rest >>= 4;
            if rest == 0 {
                break;
            }
        }
        HeaderValue::from_bytes(&buf[at..]).unwrap_or(HeaderValue::from_static("-"))
    }
}

impl<S, B, ResBody> Service<Request<B>> for RequestId<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = RequestIdFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let id = match req.headers().get(X_REQUEST_ID) {
            Some(id) if is_request_id_token(id.as_bytes()) => id.clone(),
            _ => {
                let id = self.make_id();
                req.headers_mut().insert(X_REQUEST_ID, id.clone());
                id
            }
        };
        RequestIdFuture {
            inner: self.inner.call(req),
            id: Some(id),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner answer, with the request id set on it.
    pub struct RequestIdFuture<F> {
        #[pin]
        inner: F,
        id: Option<HeaderValue>,
    }
}

impl<F, ResBody, E> Future for RequestIdFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.inner.poll(cx))?;
        if let Some(id) = this.id.take() {
            response.headers_mut().insert(X_REQUEST_ID, id);
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    async fn id_of(layer: &RequestIdLayer, sent: Option<&'static str>) -> (String, String) {
        let inner = tower::service_fn(|req: Request<()>| async move {
            let seen = req.headers()[X_REQUEST_ID]
                .to_str()
                .unwrap_or("")
                .to_string();
            Ok::<_, Infallible>(Response::new(seen))
        });
        let mut req = Request::new(());
        if let Some(id) = sent {
            req.headers_mut()
                .insert(X_REQUEST_ID, HeaderValue::from_static(id));
        }
        let r = layer
            .layer(inner)
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        let answered = r.headers()[X_REQUEST_ID].to_str().unwrap_or("").to_string();
        (r.into_body(), answered)
    }

    #[tokio::test]
    async fn a_client_token_is_kept_and_anything_else_replaced() {
        let layer = RequestIdLayer::new();
        assert_eq!(
            id_of(&layer, Some("trace-1.a:b_c")).await,
            ("trace-1.a:b_c".into(), "trace-1.a:b_c".into())
        );
        let (seen, answered) = id_of(&layer, Some("x\" forged=1")).await;
        assert_eq!(seen, answered);
        assert!(is_request_id_token(seen.as_bytes()) && !seen.contains("forged"));
        let (first, _) = id_of(&layer, None).await;
        let (second, _) = id_of(&layer, None).await;
        assert_ne!(first, second, "ids are unique");
    }

    #[test]
    fn request_ids_are_short_tokens_only() {
        assert!(is_request_id_token(b"0190c3e4-7b1a-7f00-8000-0123456789ab"));
        assert!(is_request_id_token(b"trace:1.2_3"));
        for bad in [
            &b""[..],
            b"a b",
            b"a=b",
            b"a\"b",
            &[b'a'; 129][..],
            "é".as_bytes(),
        ] {
            assert!(!is_request_id_token(bad), "{bad:?}");
        }
    }
}
