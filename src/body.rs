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

/// What an answer holds in memory until it is sent: all its bytes, and of them the chunks longer
/// than [`SHARE_ABOVE`], which other answers may hold too (a cached or coalesced payload is one
/// buffer however many answers are being sent it). Counted by the server's unread-answer bounds,
/// which count such a chunk once however many answers hold it.
#[derive(Debug, Default)]
pub struct Held {
    /// All the answer's bytes.
    pub bytes: u64,
    /// Its large chunks (each a reference to its buffer, not a copy; empty for most answers).
    pub shared: Vec<Bytes>,
}

impl Held {
    /// A body of `bytes` held by this answer alone (a compressed one's state, a small answer).
    pub fn own(bytes: u64) -> Held {
        Held {
            bytes,
            shared: Vec::new(),
        }
    }

    /// The bytes no other answer can hold.
    pub fn own_bytes(&self) -> u64 {
        let shared: u64 = self.shared.iter().map(|b| b.len() as u64).sum();
        self.bytes.saturating_sub(shared)
    }
}

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

    /// What the body holds until it is sent (see [`Held`]): nothing is copied, and a body without
    /// a chunk over [`SHARE_ABOVE`] (most answers) allocates nothing.
    pub fn held(&self) -> Held {
        let large = |b: &&Bytes| b.len() > SHARE_ABOVE;
        match &self.parts {
            Parts::Empty => Held::default(),
            Parts::One(b) => Held {
                bytes: b.len() as u64,
                shared: std::iter::once(b).filter(large).cloned().collect(),
            },
            Parts::Many(parts) => Held {
                bytes: self.len() as u64,
                shared: parts.iter().filter(large).cloned().collect(),
            },
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

    #[test]
    fn what_a_body_holds_names_its_large_chunks_only() {
        let payload = Bytes::from(vec![b'x'; SHARE_ABOVE + 1]);
        let body = Chunks::many([
            Bytes::from_static(b"{\"result\":"),
            payload.clone(),
            Bytes::from_static(b"}\n"),
        ]);
        let held = body.held();
        assert_eq!(held.bytes, body.len() as u64);
        assert_eq!(held.shared.len(), 1);
        assert_eq!(held.shared[0].as_ptr(), payload.as_ptr(), "the same buffer");
        assert_eq!(held.own_bytes(), 12);
        let small = Chunks::from("abc").held();
        assert_eq!(
            (small.bytes, small.shared.len(), small.own_bytes()),
            (3, 0, 3)
        );
        assert_eq!(Chunks::default().held().bytes, 0);
    }
}
