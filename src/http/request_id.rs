//! Request ids: the outermost layer, so that every answer (a 404 as much as a cache hit) and every
//! log line of a request carries `x-request-id`.
//!
//! A client's id is kept when it is a short token (letters, digits, `-_.:`, at most 128 bytes):
//! enough for UUIDs and trace ids, and nothing that could forge a log field or smuggle bytes to
//! another system. Anything else is replaced by snowgate's own, a UUIDv7 (RFC 9562): the time in
//! milliseconds, then 74 bits that are a random number drawn at start plus a per-process counter.
//! Ids sort by time, and stay unique across restarts and across the instances of a fleet that
//! write to one log store (a per-process counter alone repeated itself at every restart).
//!
//! Why not a fresh random number per request: the counter makes ids unique within a process by
//! construction (no birthday bound) and costs one atomic add instead of an RNG call; the random
//! start keeps two processes apart (2^74 starting points).

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

/// Makes request ids: a random start and a counter shared by every connection of a gateway.
#[derive(Clone)]
pub struct RequestIdLayer {
    next: Arc<AtomicU64>,
    /// The 74 bits after the version and variant, drawn at start (the high 12 go in `rand_a`).
    seed: (u16, u64),
}

impl Default for RequestIdLayer {
    fn default() -> Self {
        RequestIdLayer::new()
    }
}

impl RequestIdLayer {
    pub fn new() -> RequestIdLayer {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        RequestIdLayer {
            next: Arc::new(AtomicU64::new(0)),
            seed: (rng.gen::<u16>() & 0x0fff, rng.gen::<u64>()),
        }
    }
}

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;

    fn layer(&self, inner: S) -> RequestId<S> {
        RequestId {
            inner,
            next: self.next.clone(),
            seed: self.seed,
        }
    }
}

/// Sets the request's id (the client's, or a new one) and copies it onto the answer.
#[derive(Clone)]
pub struct RequestId<S> {
    inner: S,
    next: Arc<AtomicU64>,
    seed: (u16, u64),
}

impl<S> RequestId<S> {
    fn make_id(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        uuid_v7(ms, self.seed, n)
    }
}

/// A UUIDv7: `ms` (48 bits), version 7, `rand_a` (12 bits), variant `10`, `rand_b` (62 bits);
/// the random part is `seed` plus `n` (carried from `rand_b` into `rand_a`), so `n` values a
/// process draws never repeat. Formatted by hand: `format!` costs an allocation more, per request.
fn uuid_v7(ms: u64, seed: (u16, u64), n: u64) -> HeaderValue {
    const LOW_62: u64 = (1 << 62) - 1;
    let low = (seed.1 & LOW_62) + (n & LOW_62);
    let carry = (low >> 62) + (n >> 62);
    let rand_b = low & LOW_62;
    let rand_a = (u64::from(seed.0) + carry) & 0x0fff;
    let hi = (ms & 0xffff_ffff_ffff) << 16 | 0x7000 | rand_a;
    let lo = 0x8000_0000_0000_0000 | rand_b;
    let value = (u128::from(hi) << 64 | u128::from(lo)).to_be_bytes();
    // Two hex digits per byte, a dash before bytes 4, 6, 8 and 10 (8-4-4-4-12).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in value.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        out[at] = HEX[usize::from(byte >> 4)];
        out[at + 1] = HEX[usize::from(byte & 0xf)];
        at += 2;
    }
    HeaderValue::from_bytes(&out).unwrap_or(HeaderValue::from_static("-"))
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
    fn ids_are_uuid_v7_ordered_by_time_and_never_repeat_in_a_process() {
        let ms = 0x0190_c3e4_7b1a;
        let id = uuid_v7(ms, (0xabc, 0x0123_4567_89ab_cdef), 0);
        let text = id.to_str().unwrap_or("");
        assert_eq!(text, "0190c3e4-7b1a-7abc-8123-456789abcdef");
        assert!(is_request_id_token(id.as_bytes()));
        // Version 7, variant 10, for any seed and count (the carry stays in its 12 bits).
        for (seed, n) in [
            ((0xfff, u64::MAX), u64::MAX),
            ((0, 0), 1 << 62),
            ((0x123, 7), 9),
        ] {
            let t = uuid_v7(ms, seed, n).to_str().unwrap_or("").to_string();
            assert_eq!(&t[14..15], "7", "{t}");
            assert!(matches!(&t[19..20], "8" | "9" | "a" | "b"), "{t}");
        }
        // Consecutive counts differ; a later millisecond sorts after.
        let seed = (0x5a5, (1 << 62) - 2);
        let a = uuid_v7(ms, seed, 0);
        let b = uuid_v7(ms, seed, 1);
        let c = uuid_v7(ms, seed, 2);
        assert!(a != b && b != c && a != c);
        assert!(uuid_v7(ms + 1, seed, 0).as_bytes() > c.as_bytes());
        // Two layers (two processes) start apart.
        assert_ne!(RequestIdLayer::new().seed, RequestIdLayer::new().seed);
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
