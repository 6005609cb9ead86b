//! Response bodies as a few shared chunks, so that a large answer is held once however many
//! clients are being sent it.
//!
//! A cached (or coalesced) answer's bytes are one reference-counted buffer. A client's answer is
//! that buffer with the client's own envelope around it (`{"jsonrpc":"2.0","result":` before,
//! `,"id":ID}` after): three chunks, the middle one shared, nothing copied. Small answers are
//! written into one buffer instead, which is cheaper than three chunks for the few hundred bytes
//! most calls return.
//!
//! Hand-written rather than `http_body_util::Full` (one chunk) or a boxed stream: the common case
//! stays one chunk with no allocation beyond the answer itself.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// Answers larger than this are sent as shared chunks; smaller ones are copied into one buffer.
pub const SHARE_ABOVE: usize = 16 * 1024;

/// A response body: one buffer, or several chunks sent in order.
#[derive(Debug, Default)]
pub struct Chunks {
    parts: Parts,
}

#[derive(Debug, Default)]
enum Parts {
    #[default]
    Empty,
    One(Bytes),
    Many(VecDeque<Bytes>),
}

impl Chunks {
    /// A body of several chunks, in order (empty ones are skipped).
    pub fn many(parts: impl IntoIterator<Item = Bytes>) -> Chunks {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        Chunks {
            parts: Parts::Many(parts),
        }
    }

    /// The number of bytes left to send.
    pub fn len(&self) -> usize {
        match &self.parts {
            Parts::Empty => 0,
            Parts::One(b) => b.len(),
            Parts::Many(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }

    /// Nothing left to send.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks, in order (for joining answers into a batch without copying them).
    pub fn into_parts(self) -> Vec<Bytes> {
        match self.parts {
            Parts::Empty => Vec::new(),
            Parts::One(b) => vec![b],
            Parts::Many(parts) => parts.into(),
        }
    }

    /// The whole body in one buffer (tests and small answers).
    pub fn to_bytes(&self) -> Bytes {
        match &self.parts {
            Parts::Empty => Bytes::new(),
            Parts::One(b) => b.clone(),
            Parts::Many(parts) => {
                let mut out = Vec::with_capacity(self.len());
                for p in parts {
                    out.extend_from_slice(p);
                }
                out.into()
            }
        }
    }
}

impl From<Bytes> for Chunks {
    fn from(b: Bytes) -> Chunks {
        Chunks {
            parts: if b.is_empty() {
                Parts::Empty
            } else {
                Parts::One(b)
            },
        }
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(v: Vec<u8>) -> Chunks {
        Chunks::from(Bytes::from(v))
    }
}

impl From<&'static str> for Chunks {
    fn from(s: &'static str) -> Chunks {
        Chunks::from(Bytes::from_static(s.as_bytes()))
    }
}

impl From<String> for Chunks {
    fn from(s: String) -> Chunks {
        Chunks::from(Bytes::from(s))
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match &mut self.parts {
            Parts::Empty => None,
            Parts::One(_) => match std::mem::take(&mut self.parts) {
                Parts::One(b) => Some(b),
                _ => None,
            },
            Parts::Many(parts) => parts.pop_front(),
        };
        Poll::Ready(next.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        match &self.parts {
            Parts::Empty => true,
            Parts::One(_) => false,
            Parts::Many(parts) => parts.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn chunks_are_sent_in_order_with_an_exact_length() {
        let shared = Bytes::from(vec![b'x'; 100]);
        let body = Chunks::many([
            Bytes::from_static(b"{\"result\":"),
            shared.clone(),
            Bytes::new(),
            Bytes::from_static(b"}\n"),
        ]);
        assert_eq!(body.len(), 112);
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(112),
            "hyper frames the answer by this"
        );
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(all.len(), 112);
        assert!(all.starts_with(b"{\"result\":xxx") && all.ends_with(b"x}\n"));
        let one = Chunks::from("abc");
        assert_eq!(one.collect().await.unwrap().to_bytes(), "abc");
        assert!(http_body::Body::is_end_stream(&Chunks::from("")));
    }
}
