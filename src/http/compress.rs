//! Compression: tower-http's gzip, for the requests that ask for it (`Accept-Encoding`) and
//! answers of 1 KiB up to [`COMPRESS_UP_TO`] (smaller ones are not worth the CPU; larger ones go
//! as they are: gzip runs on the connection's task, and a 4.4 MB cached answer took 111 ms of a
//! runtime worker per request, stalling every other client on that worker, at no quota cost).
//!
//! A request without `Accept-Encoding` (most RPC clients) skips tower-http's layer altogether: it
//! would otherwise wrap every answer's body and look its headers over for nothing. Under drain,
//! CORS and the request id, whose headers it does not touch; over the router, whose answers it
//! compresses.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, Request, Response};
use tower::util::Oneshot;
use tower::{Layer, Service, ServiceExt};
use tower_http::compression::predicate::SizeAbove;
use tower_http::compression::{Compression, CompressionBody, CompressionLayer};

use crate::body::Chunks;

/// Answers of at least this many bytes are compressed.
const COMPRESS_FROM: u16 = 1024;
/// Answers larger than this are sent uncompressed: about 2 ms of gzip at most per answer.
pub const COMPRESS_UP_TO: u64 = 64 * 1024;

/// At most [`COMPRESS_UP_TO`] bytes, known before the first byte is sent.
#[derive(Clone, Copy)]
pub struct SizeAtMost;

impl tower_http::compression::Predicate for SizeAtMost {
    fn should_compress<B: http_body::Body>(&self, response: &http::Response<B>) -> bool {
        response
            .body()
            .size_hint()
            .upper()
            .is_some_and(|n| n <= COMPRESS_UP_TO)
    }
}

/// What is compressed.
type Worth = tower_http::compression::predicate::And<SizeAbove, SizeAtMost>;

/// gzip when asked.
#[derive(Clone)]
pub struct CompressLayer {
    gzip: CompressionLayer<Worth>,
}

impl CompressLayer {
    pub fn new() -> CompressLayer {
        CompressLayer {
            gzip: CompressionLayer::new().gzip(true).compress_when(
                tower_http::compression::Predicate::and(SizeAbove::new(COMPRESS_FROM), SizeAtMost),
            ),
        }
    }
}

impl Default for CompressLayer {
    fn default() -> Self {
        CompressLayer::new()
    }
}

impl<S> Layer<S> for CompressLayer {
    type Service = Compress<S>;

    fn layer(&self, inner: S) -> Compress<S> {
        Compress {
            inner,
            gzip: self.gzip.clone(),
        }
    }
}

/// See the module doc.
#[derive(Clone)]
pub struct Compress<S> {
    inner: S,
    gzip: CompressionLayer<Worth>,
}

impl<S, B> Service<Request<B>> for Compress<S>
where
    S: Service<Request<B>, Response = Response<Chunks>> + Clone,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = CompressFuture<S::Future, Pin<Box<Oneshot<Compression<S, Worth>, Request<B>>>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if req.headers().contains_key(header::ACCEPT_ENCODING) {
            // The ready service goes into tower-http's layer; a clone takes its place.
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            // Boxed: held inline, tower-http's future (with the request until it is called) would
            // make this future, and every one around it, several hundred bytes larger, copied at
            // every layer on every request; gzip requests are the few.
            CompressFuture::Gzip {
                inner: Box::pin(self.gzip.layer(ready).oneshot(req)),
            }
        } else {
            CompressFuture::Plain {
                inner: self.inner.call(req),
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of either path, as one body type.
    #[project = CompressProj]
    pub enum CompressFuture<P, G> {
        Plain { #[pin] inner: P },
        Gzip { #[pin] inner: G },
    }
}

impl<P, G, E> Future for CompressFuture<P, G>
where
    P: Future<Output = Result<Response<Chunks>, E>>,
    G: Future<Output = Result<Response<CompressionBody<Chunks>>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(match self.project() {
            CompressProj::Plain { inner } => {
                std::task::ready!(inner.poll(cx))?.map(|b| Body::Plain { inner: b })
            }
            CompressProj::Gzip { inner } => {
                std::task::ready!(inner.poll(cx))?.map(|b| Body::Gzip { inner: Box::pin(b) })
            }
        }))
    }
}

pin_project_lite::pin_project! {
    /// A response body as it leaves the stack: the answer's chunks, or their gzip. An enum rather
    /// than a boxed trait object: no allocation for a plain answer. The gzip variant is boxed:
    /// inline, its compressor's state made every answer (`Response<Body>`) 448 bytes, moved
    /// layer by layer on the way out; boxed, 152. A gzip answer allocates its compressor anyway.
    #[project = BodyProj]
    pub enum Body {
        Plain { #[pin] inner: Chunks },
        Gzip { inner: Pin<Box<CompressionBody<Chunks>>> },
    }
}

impl Default for Body {
    /// An empty answer (a preflight's).
    fn default() -> Self {
        Body::Plain {
            inner: Chunks::default(),
        }
    }
}

/// What a gzip body holds until it is sent, beyond its answer: the compressor's state (miniz's
/// dictionary, hash chains and output buffers), rounded up.
const GZIP_STATE_BYTES: u64 = 256 * 1024;

impl Body {
    /// What this answer holds in memory until hyper has taken it: a plain answer, its chunks (a
    /// shared payload named as such); a compressed one, what it may still hold at most (its
    /// uncompressed bytes, up to [`COMPRESS_UP_TO`], and the compressor). What bounds the answers
    /// a client may leave unread (see `crate::server`).
    pub fn held(&self) -> crate::body::Held {
        match self {
            Body::Plain { inner } => inner.held(),
            Body::Gzip { .. } => crate::body::Held::own(COMPRESS_UP_TO + GZIP_STATE_BYTES),
        }
    }
}

impl From<Chunks> for Body {
    fn from(inner: Chunks) -> Self {
        Body::Plain { inner }
    }
}

/// The error of a body being compressed.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        match self.project() {
            BodyProj::Plain { inner } => inner.poll_frame(cx).map_err(|never| match never {}),
            BodyProj::Gzip { inner } => inner.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Plain { inner } => inner.is_end_stream(),
            Body::Gzip { inner } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Body::Plain { inner } => inner.size_hint(),
            Body::Gzip { inner } => inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;

    fn answering(
        size: usize,
    ) -> impl Service<Request<()>, Response = Response<Chunks>, Error = Infallible> + Clone {
        tower::service_fn(move |_req: Request<()>| async move {
            Ok::<_, Infallible>(Response::new(Chunks::from(vec![b'a'; size])))
        })
    }

    async fn answer(size: usize, accept: Option<&'static str>) -> (Option<String>, usize) {
        let mut req = Request::new(());
        if let Some(a) = accept {
            req.headers_mut()
                .insert(header::ACCEPT_ENCODING, http::HeaderValue::from_static(a));
        }
        let r = CompressLayer::new()
            .layer(answering(size))
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        let coding = r
            .headers()
            .get(header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap_or("").to_string());
        let body = r
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes().len())
            .unwrap_or(0);
        (coding, body)
    }

    #[tokio::test]
    async fn gzip_only_when_asked_and_worth_it() {
        assert_eq!(answer(4096, None).await, (None, 4096));
        let (coding, len) = answer(4096, Some("gzip")).await;
        assert_eq!(coding.as_deref(), Some("gzip"));
        assert!(len < 4096);
        assert_eq!(answer(100, Some("gzip")).await, (None, 100));
        // A large answer goes as it is: gzip would hold a runtime worker for it.
        let large = COMPRESS_UP_TO as usize + 1;
        assert_eq!(answer(large, Some("gzip")).await, (None, large));
    }
}
