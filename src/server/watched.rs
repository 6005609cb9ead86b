//! The connection's socket and bodies, watched: [`WatchedIo`] notes when the client stops taking
//! what is written and lingers on close; [`WatchedBody`] notes a request body left unread;
//! [`Tracked`] counts an answer outstanding until hyper has taken it (over HTTP/2, until its last
//! byte has window to leave).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::connection::*;
use crate::body::Held;

/// The client's socket, noting when it stops taking what is written (for `send_timeout`).
///
/// A write the kernel refuses (the client's window and our send buffer are full) marks the
/// connection blocked; the flush hyper makes once everything it had is written clears it.
pub(super) struct WatchedIo {
    pub(super) inner: TcpStream,
    pub(super) activity: Arc<Activity>,
    /// The lingering close under way, once hyper has shut the connection down.
    pub(super) linger: Option<Linger>,
}

/// How long, at most, a closing connection reads and discards what its client still sends after
/// an answer that left its request's body unread (nginx's lingering close): enough for a client
/// that writes its whole body before it reads (Python's `http.client`) to finish writing and read
/// its answer, where closing at once would have the kernel reset the connection over the unread
/// bytes and destroy the answer. A client that keeps sending costs at most this.
pub const LINGER_TIME: Duration = Duration::from_secs(5);
/// And at most this many bytes.
pub const LINGER_BYTES: usize = 16 << 20;

/// A lingering close: its deadline and what it has discarded.
pub(super) struct Linger {
    pub(super) deadline: Pin<Box<tokio::time::Sleep>>,
    pub(super) discarded: usize,
}

impl WatchedIo {
    pub(super) fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
        if poll.is_pending() && self.activity.write_blocked_ms.load(Ordering::Relaxed) == 0 {
            self.activity
                .write_blocked_ms
                .store(self.activity.now_ms() + 1, Ordering::Relaxed);
        }
        poll
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        if poll.is_ready() {
            self.activity.write_blocked_ms.store(0, Ordering::Relaxed);
        }
        poll
    }

    /// Sends the FIN; then, when a request's body was left unread, reads and discards what the
    /// client still sends until it closes its side, [`LINGER_TIME`] passes or [`LINGER_BYTES`]
    /// are read, so that the kernel does not answer those bytes with a reset that would destroy
    /// the answer in the client's buffer.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.linger.is_none() {
            std::task::ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            if !this.activity.unread_body.load(Ordering::Relaxed) {
                return Poll::Ready(Ok(()));
            }
            this.linger = Some(Linger {
                deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                discarded: 0,
            });
        }
        let Some(linger) = this.linger.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut scratch = [0u8; 16 * 1024];
        loop {
            if linger.deadline.as_mut().poll(cx).is_ready() || linger.discarded > LINGER_BYTES {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Pending => return Poll::Pending,
                // The client closed its side (or broke off): nothing more to wait for.
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => linger.discarded += buf.filled().len(),
            }
        }
    }
}

/// A request body, noting on its connection when it is dropped unread (see
/// [`Activity::unread_body`]). It adds nothing per frame: the check is made once, on drop.
pub struct WatchedBody {
    pub(super) inner: Incoming,
    pub(super) activity: Arc<Activity>,
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        use http_body::Body as _;
        // (HTTP/2 ends an unread stream by itself; only an HTTP/1.1 connection needs to linger.)
        if !self.inner.is_end_stream() && !self.activity.http2.load(Ordering::Relaxed) {
            self.activity.unread_body.store(true, Ordering::Relaxed);
        }
    }
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// An answer body that counts itself outstanding on its connection until its last byte has left
/// (or hyper dropped it), for `send_timeout`.
///
/// Over HTTP/1.1 that is when hyper asks past its end: hyper writes a chunk to the socket before
/// it asks for the next, and a socket that refuses writes is watched by [`WatchedIo`].
///
/// Over HTTP/2 hyper hands each chunk to h2's buffer for the stream as soon as the stream has a
/// single byte of window (hyper's `PipeToSendStream` waits only while h2's `capacity()` is zero),
/// and is done with a body once its last chunk is handed over: a client that grants one byte and
/// never more would have its whole answer counted as taken while it sits in h2's buffer, where no
/// timeout reaches it. So the answer's last byte is held back and handed over as a chunk of its
/// own: hyper hands it over only once the stream has window for everything buffered before it
/// plus that byte (h2's `capacity()` is the stream's window minus what it buffers), and only
/// then drops the body. Taken, over HTTP/2, means every byte but the last has window to leave;
/// the cost is one more poll and one more DATA frame (ten bytes) per answer.
pub struct Tracked<B: http_body::Body> {
    pub(super) inner: B,
    /// The connection, this answer's sequence number there and what it holds (counted in
    /// [`super::unread::Unread`]), until it is taken.
    pub(super) activity: Option<(Arc<Activity>, u64, Held)>,
    /// Over HTTP/2: hold back the last byte (see above).
    pub(super) hold_last: bool,
    /// A frame read from `inner` ahead of time, to learn whether the one before it was the last.
    pub(super) ahead: Option<Result<http_body::Frame<Bytes>, B::Error>>,
    /// The answer's last byte, held back until its other bytes have been handed over.
    pub(super) last: Option<Bytes>,
    /// `inner` has no more frames (it said so, or returned `None`).
    pub(super) ended: bool,
}

impl<B: http_body::Body> Tracked<B> {
    pub(super) fn new(inner: B, activity: Arc<Activity>, http2: bool, held: Held) -> Tracked<B> {
        let seq = activity.answers.lock().begin(activity.now_ms());
        activity.unread.add(&held);
        Tracked {
            inner,
            activity: Some((activity, seq, held)),
            hold_last: http2,
            ahead: None,
            last: None,
            ended: false,
        }
    }

    pub(super) fn done(&mut self) {
        if let Some((a, seq, held)) = self.activity.take() {
            a.answers.lock().end(seq);
            a.unread.sub(&held);
        }
    }

    /// The bytes read from `inner` and not yet handed over.
    pub(super) fn held(&self) -> u64 {
        let ahead = match &self.ahead {
            Some(Ok(frame)) => frame.data_ref().map_or(0, Bytes::len),
            _ => 0,
        };
        (ahead + self.last.as_ref().map_or(0, Bytes::len)) as u64
    }
}

impl<B: http_body::Body> Drop for Tracked<B> {
    fn drop(&mut self) {
        self.done();
    }
}

impl<B: http_body::Body<Data = Bytes, Error: Unpin> + Unpin> Tracked<B> {
    /// The HTTP/2 side of [`http_body::Body::poll_frame`]: the answer's frames, its last byte in a
    /// frame of its own.
    pub(super) fn poll_holding_last(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        if let Some(last) = self.last.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(last))));
        }
        let frame = match self.ahead.take() {
            Some(frame) => frame,
            None if self.ended => {
                self.done();
                return Poll::Ready(None);
            }
            None => match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(frame) => frame,
                None => {
                    self.ended = true;
                    self.done();
                    return Poll::Ready(None);
                }
            },
        };
        let mut data = match frame.map(http_body::Frame::into_data) {
            Ok(Ok(data)) => data,
            Ok(Err(trailers)) => return Poll::Ready(Some(Ok(trailers))),
            Err(e) => return Poll::Ready(Some(Err(e))),
        };
        // Is this the last chunk? The body says so, or the next poll does (gzip's body only says
        // so by returning `None`). snowgate's bodies are never pending; one that is has its
        // chunk handed over whole.
        if !self.ended && !self.inner.is_end_stream() {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(next)) => self.ahead = Some(next),
                Poll::Ready(None) => self.ended = true,
                Poll::Pending => {}
            }
        } else {
            self.ended = true;
        }
        if self.ended && data.len() > 1 {
            let end = data.len() - 1;
            self.last = Some(if data[end] == b'\n' {
                // Every JSON-RPC answer ends so: no split of a shared buffer to count.
                data.truncate(end);
                Bytes::from_static(b"\n")
            } else {
                data.split_off(end)
            });
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }
}

impl<B: http_body::Body<Data = Bytes, Error: Unpin> + Unpin> http_body::Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        if self.hold_last {
            return self.poll_holding_last(cx);
        }
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        // Taken only when hyper asks past the end or drops the body.
        if let Poll::Ready(None) = &poll {
            self.done();
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        if !self.hold_last {
            return self.inner.is_end_stream();
        }
        self.last.is_none() && self.ahead.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.inner.size_hint();
        let held = self.held();
        if held == 0 {
            return inner;
        }
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}
