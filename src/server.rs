//! Serving connections: [`run`] accepts HTTP/1.1 and cleartext HTTP/2 (hyper-util's auto builder,
//! as a node serves both) with keep-alive, enforces the connection-level limits, and on shutdown
//! stops accepting and lets the requests in flight finish.
//!
//! Connection limits (`[limits]`):
//! * `max_connections`: past it, a new connection is answered 503 at once and closed;
//! * `header_timeout`: an HTTP/1.1 client has this long to send a request's headers, counted from
//!   the accept or the end of its previous request, so it also bounds the wait for the next request
//!   on a keep-alive connection (as hyper's header-read timer does);
//! * `idle_timeout`: a connection (HTTP/1.1 or HTTP/2) with no request in flight for this long is
//!   closed gracefully.
//!
//! * `send_timeout`: an answer the client has not taken within it (its socket stays full, or its
//!   HTTP/2 window stays shut, even at one byte: see [`Tracked`]) ends the connection, so a client
//!   that stops reading cannot pin memory or a connection slot; and a connection closing
//!   gracefully (idle, drained, shut down) is dropped once it has had nothing in flight for
//!   `send_timeout`, and at the latest `body_timeout + request_deadline + send_timeout` after the
//!   close began, whatever its client does (an HTTP/2 client that never acknowledges the PING
//!   sent with the GOAWAY would otherwise hold the close for ever);
//! * `address_answer_bytes`, `total_answer_bytes`: answers made and not yet taken (see [`Tracked`])
//!   are counted per connection, client address and gateway; past a bound, a further answer for a
//!   connection that already has one unread is a short 503 (see `Unread`), so a client that opens
//!   many streams and never reads cannot make snowgate hold their answers until `send_timeout`;
//! * `max_connections_per_ip`: past it, a new connection from that address (an IPv4 address or an
//!   IPv6 /64) is answered 503 and closed; trusted proxies are exempt;
//! * HTTP/2: at most [`H2_MAX_STREAMS`] concurrent streams, windows of [`H2_STREAM_WINDOW`] per
//!   stream and [`H2_CONN_WINDOW`] per connection; the request bodies a connection buffers are
//!   bounded by the front (`connection_body_bytes`, `total_body_bytes`, `body_timeout`).
//!
//! They are enforced by one watchdog task per connection that sleeps until the next deadline, not
//! by a timer per request.
//!
//! Each admitted connection is counted in `snowgate_open_connections{protocol}` while its task
//! lives (refused ones never are): as `http1` until its first HTTP/2 request moves it to `http2`.
//! The gauges are touched per connection, and once more at that first HTTP/2 request: no lock, no
//! label lookup per request.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::header;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::{Service, ServiceExt};

use crate::error::ProxyError;
use crate::http::{ConnInfo, Surface};
use crate::stack::Stack;

/// HTTP/2: streams one connection may have open at once (hyper's default is 200). With the
/// windows below, what one connection can make snowgate hold is a few MiB.
pub const H2_MAX_STREAMS: u32 = 64;
/// HTTP/2: the receive window of one stream.
pub const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// HTTP/2: the receive window of one connection, all its streams together. What arrives within it
/// waits in h2's buffers, outside the body rooms, while the bodies wait for room: 256 KiB per
/// connection is 16 MiB for an address's 64 connections (1 MiB made it 64 MiB; measured, one
/// address's stalled uploads took RSS +84 MiB then, +36 MiB now). A body (at most
/// `limits.body_bytes`) still streams at 256 KiB per round trip.
pub const H2_CONN_WINDOW: u32 = 256 * 1024;

/// What a connection's watchdog needs to know, kept up to date by the connection's requests at
/// the cost of a few relaxed atomics per request (no timer is armed per request).
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `started` to the end of the last request.
    last_ms: AtomicU64,
    /// Requests this connection has started.
    requests: AtomicU64,
    /// Set once a request arrives over HTTP/2, where the header timeout does not apply.
    http2: AtomicBool,
    /// [`OPEN`], [`CLOSE`] (finish the answers in flight, then close) or [`ABORT`] (drop it now).
    state: AtomicU8,
    /// Milliseconds from `started` to the first ask to close (zero: never asked): where the
    /// graceful close's deadlines count from (see [`watchdog`]).
    closing_ms: AtomicU64,
    /// The connection task, woken when `state` changes.
    waker: AtomicWaker,
    /// Answer bodies made and not yet taken by hyper, oldest first.
    answers: parking_lot::Mutex<Outstanding>,
    /// Milliseconds from `started` (plus one, so zero means "not blocked") to the first write the
    /// socket refused since it was last flushed: the client has stopped reading since then.
    write_blocked_ms: AtomicU64,
    /// A request's body was left unread (refused by its size or its caller's quota): closing,
    /// the connection reads and discards what the client still sends before it goes
    /// ([`WatchedIo::poll_shutdown`]).
    unread_body: AtomicBool,
    /// The `snowgate_open_connections` gauges this connection is counted in (kept here, not in
    /// the service, which is cloned per request).
    gauges: OpenGauges,
    /// The bytes of this connection's answers not yet taken, and of its address's and everyone's.
    unread: Unread,
}

/// Answer bytes made and not yet taken by their clients (see [`Tracked`]): one connection's, its
/// client address's (all its connections; none for a trusted proxy, which reads for many
/// clients), and the gateway's. What `limits.address_answer_bytes` and
/// `limits.total_answer_bytes` bound: a client that opens many HTTP/2 streams and never opens
/// their windows could otherwise leave `max_connections_per_ip` × [`H2_MAX_STREAMS`] answers
/// waiting, each until `send_timeout`.
struct Unread {
    connection: AtomicU64,
    address: Option<Arc<AtomicU64>>,
    total: Arc<AtomicU64>,
    address_bound: u64,
    total_bound: u64,
}

impl Unread {
    fn add(&self, bytes: u64) {
        self.connection.fetch_add(bytes, Ordering::Relaxed);
        if let Some(address) = &self.address {
            address.fetch_add(bytes, Ordering::Relaxed);
        }
        self.total.fetch_add(bytes, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        self.connection.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(address) = &self.address {
            address.fetch_sub(bytes, Ordering::Relaxed);
        }
        self.total.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Whether another answer for this connection must be refused: it already has one unread,
    /// and its address (or the gateway) is at its bound. A connection with nothing unread always
    /// gets its answer, so one answer of any size goes, and HTTP/1.1 (one answer at a time) is
    /// never refused; what a client leaves unread past the bound is one answer per connection.
    fn full(&self) -> bool {
        self.connection.load(Ordering::Relaxed) > 0
            && (self
                .address
                .as_ref()
                .is_some_and(|a| a.load(Ordering::Relaxed) >= self.address_bound)
                || self.total.load(Ordering::Relaxed) >= self.total_bound)
    }
}

const OPEN: u8 = 0;
const CLOSE: u8 = 1;
const ABORT: u8 = 2;

impl Activity {
    fn new(gauges: OpenGauges, unread: Unread) -> Activity {
        Activity {
            gauges,
            unread,
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            state: AtomicU8::new(OPEN),
            closing_ms: AtomicU64::new(0),
            waker: AtomicWaker::new(),
            answers: parking_lot::Mutex::new(Outstanding::default()),
            write_blocked_ms: AtomicU64::new(0),
            unread_body: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long the connection has had nothing in flight (zero while a request runs).
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }

    /// Asks the connection task to close gracefully. The first ask starts the close's clock
    /// (later ones, such as one `Connection: close` answer after another, do not move it).
    fn close(&self) {
        // Set before the state, so the watchdog never sees a close without its start.
        let _ = self.closing_ms.compare_exchange(
            0,
            self.now_ms().max(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        let _ = self
            .state
            .compare_exchange(OPEN, CLOSE, Ordering::AcqRel, Ordering::Acquire);
        self.waker.wake();
    }

    /// `None` while the connection is open; once it is closing, (how long it has lingered with
    /// nothing to wait for, how long it has been closing). Lingering counts from the close or
    /// the end of the last request, whichever is later, and is zero while a request is in flight
    /// (its answer is worth waiting for); what remains then is the client's part (taking the last
    /// answers, acknowledging the GOAWAY's PING).
    fn closing_for(&self) -> Option<(Duration, Duration)> {
        if self.state.load(Ordering::Acquire) < CLOSE {
            return None;
        }
        let now = self.now_ms();
        let began = self.closing_ms.load(Ordering::Acquire);
        let closing = Duration::from_millis(now.saturating_sub(began));
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Some((Duration::ZERO, closing));
        }
        let since = began.max(self.last_ms.load(Ordering::Relaxed));
        Some((Duration::from_millis(now.saturating_sub(since)), closing))
    }

    /// Asks the connection task to drop the connection now, answers unsent or not.
    fn abort(&self) {
        self.state.store(ABORT, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once the state is at least `level`: polled on every wake of the connection task, so
    /// it is an atomic load and a waker check, where a timer would be a timer-wheel visit.
    fn reached(&self, level: u8) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.state.load(Ordering::Acquire) >= level {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            if self.state.load(Ordering::Acquire) >= level {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// How long the connection has held an answer the client does not take: its oldest answer
    /// body not yet taken, or a socket that refuses writes. (Per answer, not "any progress": a
    /// client cannot keep stuck HTTP/2 streams alive by reading others.)
    fn stalled_for(&self) -> Duration {
        let now = self.now_ms();
        let mut since = self.answers.lock().oldest();
        let blocked = self.write_blocked_ms.load(Ordering::Relaxed);
        if blocked != 0 {
            let blocked = blocked - 1;
            since = Some(since.map_or(blocked, |s: u64| s.min(blocked)));
        }
        since.map_or(Duration::ZERO, |s| {
            Duration::from_millis(now.saturating_sub(s))
        })
    }
}

/// One request in flight on its connection: counted from the service call until its answer is
/// made, or until hyper drops the request (its HTTP/2 stream was reset, the client went away),
/// so that no way out of a request can leave the connection looking busy, and so never idle.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // The end first: the watchdog reads it once nothing is in flight.
        self.0.last_ms.store(self.0.now_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The answers of one connection not yet taken, by sequence number: a ring of their start times
/// (milliseconds from the connection's start), where an answer taken early leaves a gap until every
/// older one is taken too. Steady traffic reuses the ring's room: no allocation per answer.
#[derive(Default)]
struct Outstanding {
    /// The sequence number of `started[0]`.
    first: u64,
    started: std::collections::VecDeque<Option<u64>>,
}

impl Outstanding {
    fn begin(&mut self, now_ms: u64) -> u64 {
        self.started.push_back(Some(now_ms));
        self.first + self.started.len() as u64 - 1
    }

    fn end(&mut self, seq: u64) {
        if let Some(slot) = usize::try_from(seq.wrapping_sub(self.first))
            .ok()
            .and_then(|i| self.started.get_mut(i))
        {
            *slot = None;
        }
        while self.started.front().is_some_and(Option::is_none) {
            self.started.pop_front();
            self.first += 1;
        }
    }

    fn oldest(&self) -> Option<u64> {
        self.started.front().copied().flatten()
    }
}

/// The client's socket, noting when it stops taking what is written (for `send_timeout`).
///
/// A write the kernel refuses (the client's window and our send buffer are full) marks the
/// connection blocked; the flush hyper makes once everything it had is written clears it.
struct WatchedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// The lingering close under way, once hyper has shut the connection down.
    linger: Option<Linger>,
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
struct Linger {
    deadline: Pin<Box<tokio::time::Sleep>>,
    discarded: usize,
}

impl WatchedIo {
    fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
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
    inner: Incoming,
    activity: Arc<Activity>,
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
    inner: B,
    /// The connection, this answer's sequence number there and the bytes it holds (counted in
    /// [`Unread`]), until it is taken.
    activity: Option<(Arc<Activity>, u64, u64)>,
    /// Over HTTP/2: hold back the last byte (see above).
    hold_last: bool,
    /// A frame read from `inner` ahead of time, to learn whether the one before it was the last.
    ahead: Option<Result<http_body::Frame<Bytes>, B::Error>>,
    /// The answer's last byte, held back until its other bytes have been handed over.
    last: Option<Bytes>,
    /// `inner` has no more frames (it said so, or returned `None`).
    ended: bool,
}

impl<B: http_body::Body> Tracked<B> {
    fn new(inner: B, activity: Arc<Activity>, http2: bool, bytes: u64) -> Tracked<B> {
        let seq = activity.answers.lock().begin(activity.now_ms());
        activity.unread.add(bytes);
        Tracked {
            inner,
            activity: Some((activity, seq, bytes)),
            hold_last: http2,
            ahead: None,
            last: None,
            ended: false,
        }
    }

    fn done(&mut self) {
        if let Some((a, seq, bytes)) = self.activity.take() {
            a.answers.lock().end(seq);
            a.unread.sub(bytes);
        }
    }

    /// The bytes read from `inner` and not yet handed over.
    fn held(&self) -> u64 {
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
    fn poll_holding_last(
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

/// The `snowgate_open_connections` gauges, one per protocol, resolved once for the listener.
#[derive(Clone)]
struct OpenGauges {
    http1: prometheus::IntGauge,
    http2: prometheus::IntGauge,
}

impl OpenGauges {
    fn new(metrics: &crate::metrics::Metrics) -> OpenGauges {
        OpenGauges {
            http1: metrics.open_connections.with_label_values(&["http1"]),
            http2: metrics.open_connections.with_label_values(&["http2"]),
        }
    }
}

/// One admitted connection in `snowgate_open_connections`, until dropped: held by the connection
/// task, so every way it ends (closed, drained, cut at the drain deadline, the runtime dropped)
/// counts it closed exactly once.
struct OpenConnection {
    activity: Arc<Activity>,
}

impl OpenConnection {
    /// Counts an admitted connection open, as HTTP/1.1 until it shows itself HTTP/2; the guard
    /// counts it closed when dropped, under the protocol it had by then.
    fn new(activity: Arc<Activity>) -> OpenConnection {
        activity.gauges.http1.inc();
        OpenConnection { activity }
    }

    /// Moves the connection from `http1` to `http2`, at its first HTTP/2 request (once: the flag
    /// is swapped by the first only).
    fn saw_http2(activity: &Activity) {
        if !activity.http2.swap(true, Ordering::Relaxed) {
            activity.gauges.http1.dec();
            activity.gauges.http2.inc();
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        // Every request of the connection ran its service call (which sets the flag) in the
        // connection task, before this guard is dropped there.
        let gauges = &self.activity.gauges;
        if self.activity.http2.load(Ordering::Relaxed) {
            gauges.http2.dec();
        } else {
            gauges.http1.dec();
        }
    }
}

/// Open connections per client address, for `max_connections_per_ip`, and the bytes of answers
/// the address has not taken yet (see [`Unread`]).
struct PerIp {
    open: parking_lot::Mutex<HashMap<IpAddr, (usize, Arc<AtomicU64>)>>,
}

/// One connection's place in [`PerIp`], given back on drop.
struct IpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
    /// The address's unread answer bytes.
    unread: Arc<AtomicU64>,
}

impl PerIp {
    /// A place for a new connection from `peer`; `None` when its address is at the limit. Peers
    /// that are trusted proxies need none.
    fn admit(
        table: &Arc<PerIp>,
        peer: IpAddr,
        limit: usize,
        exempt: &[IpNet],
    ) -> Result<Option<IpSlot>, ()> {
        let ip = crate::ratelimit::client::group(crate::ratelimit::client::canonical(peer));
        if exempt.iter().any(|net| net.contains(&ip)) {
            return Ok(None);
        }
        let mut open = table.open.lock();
        let (count, unread) = open.entry(ip).or_default();
        if *count >= limit {
            return Err(());
        }
        *count += 1;
        Ok(Some(IpSlot {
            table: table.clone(),
            ip,
            unread: unread.clone(),
        }))
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock();
        if let Some((count, _)) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Watches one connection from its own task and asks it to close gracefully when
/// * it has had no request in flight for `idle` (HTTP/1.1 and HTTP/2),
/// * or, over HTTP/1.1 (or before its first request), for `header`: the time a client has to send
///   a request's headers, counted from the end of the previous request (or from the accept). A
///   client trickling its headers is cut off this way, and so is a keep-alive connection waiting
///   for its next request, as hyper's own header-read timer would do;
/// * or the server is shutting down;
///
/// and drops it at once when
/// * it has held answers the client does not take for `send`;
/// * or it has been closing gracefully (asked here, by an answer, or by the shutdown) with
///   nothing in flight for `send`: a graceful close waits on the client (its last answers taken,
///   and over HTTP/2 the PING sent with the GOAWAY acknowledged), and a client that never does
///   must not keep the connection;
/// * or it has been closing for `close_cap` whatever its streams do: the longest a request that
///   began just before the close may take (its body, its call, its answer taken). An HTTP/2
///   client that never acknowledges the PING may go on opening streams; they do not keep it.
///
/// It sleeps until the earliest deadline and looks again, so a busy connection costs it one
/// wake per `header` period (a quarter of `send` at most), and the request path arms no timer.
async fn watchdog(
    activity: Arc<Activity>,
    mut closing: watch::Receiver<bool>,
    header: Duration,
    idle: Duration,
    send: Duration,
    close_cap: Duration,
) {
    // Once the server is closing (or gone), `closing` is not watched any more.
    let mut server_closing = false;
    loop {
        let stalled = activity.stalled_for();
        if stalled >= send {
            tracing::debug!(stalled = ?stalled, "closing a connection whose client does not take its answers");
            activity.abort();
            return;
        }
        let mut wait = (send - stalled).min(send / 4);
        match activity.closing_for() {
            Some((lingering, closing)) if lingering >= send || closing >= close_cap => {
                tracing::debug!(lingering = ?lingering, closing = ?closing, "closing a connection whose graceful close did not end");
                activity.abort();
                return;
            }
            Some((lingering, closing)) => {
                wait = wait.min(send - lingering).min(close_cap - closing);
            }
            None => {
                let limit = if activity.http2.load(Ordering::Relaxed) {
                    idle
                } else {
                    idle.min(header)
                };
                let idle_for = activity.idle_for();
                if idle_for >= limit || server_closing {
                    if !server_closing {
                        tracing::debug!(idle = ?idle_for, "closing idle connection");
                    }
                    activity.close();
                    continue;
                }
                // While a request runs, the deadline is at least `limit` after it ends.
                wait = wait.min(limit - idle_for);
            }
        }
        let wait = wait.max(Duration::from_millis(1));
        if server_closing {
            tokio::time::sleep(wait).await;
            continue;
        }
        tokio::select! {
            changed = closing.changed() => {
                // The server is closing (or gone): close this connection either way.
                let _ = changed;
                server_closing = true;
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Serves the stack in force (`stacks`, which a reload swaps) on `listener` (the `surface` it is:
/// the public port or the admin listener) until `shutdown` completes, then drains for at most
/// `drain`: connections finish the requests they have in flight and close; the rest are cut at
/// the deadline.
///
/// At most `max_connections` at once (fixed for the process). Each new connection takes the
/// stack's limits in force when it is accepted (per address, timeouts, body bytes); each request
/// runs on the stack in force when it arrives.
pub async fn run(
    listener: TcpListener,
    surface: Surface,
    stacks: Arc<ArcSwap<Stack>>,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    // The answers to connections over a limit, written before hyper serves them.
    let too_many = Arc::new(ProxyError::ConnectionLimit { per_address: false }.raw_http1());
    let too_many_here = Arc::new(ProxyError::ConnectionLimit { per_address: true }.raw_http1());
    let per_ip = Arc::new(PerIp {
        open: parking_lot::Mutex::new(HashMap::new()),
    });
    // The metrics live as long as the gateway, whatever reloads swap: resolved once here.
    let gauges = OpenGauges::new(stacks.load().metrics());
    // Answer bytes not yet taken by any client.
    let unread_total = Arc::new(AtomicU64::new(0));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        // The header timeout is the watchdog's (see [`watchdog`]): hyper's own would arm a timer
        // for every request.
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW);
    let builder = Arc::new(builder);
    let permits = Arc::new(Semaphore::new(max_connections));
    // Every connection task holds a receiver; the sender sees when all are gone.
    let (closing_tx, closing_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (mut stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let stack = stacks.load_full();
        let limits = &stack.limits;
        let refusal = match permits.clone().try_acquire_owned() {
            Err(_) => {
                tracing::warn!(%peer, "connection refused: max_connections reached");
                Err(too_many.clone())
            }
            Ok(permit) => match PerIp::admit(
                &per_ip,
                peer.ip(),
                limits.max_connections_per_ip,
                &stack.trusted_proxies,
            ) {
                Ok(slot) => Ok((permit, slot)),
                Err(()) => {
                    tracing::debug!(%peer, "connection refused: max_connections_per_ip reached");
                    Err(too_many_here.clone())
                }
            },
        };
        let (permit, ip_slot) = match refusal {
            Ok(admitted) => admitted,
            Err(answer) => {
                stack.count_rejection(&ProxyError::ConnectionLimit { per_address: false });
                tokio::spawn(async move {
                    // Bounded: a client that does not read cannot keep this task.
                    let write = async {
                        let _ = stream.write_all(&answer).await;
                        let _ = stream.shutdown().await;
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
                });
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let unread = Unread {
            connection: AtomicU64::new(0),
            address: ip_slot.as_ref().map(|slot| slot.unread.clone()),
            total: unread_total.clone(),
            address_bound: limits.address_answer_bytes as u64,
            total_bound: limits.total_answer_bytes as u64,
        };
        let activity = Arc::new(Activity::new(gauges.clone(), unread));
        // Counted from here (never a refused connection) until the connection task ends.
        let open = OpenConnection::new(activity.clone());
        let conn_info = Arc::new(ConnInfo::on(surface, peer, limits.connection_body_bytes));
        let service = connection_service(stacks.clone(), conn_info, activity.clone());
        let builder = builder.clone();
        let watching = tokio::spawn(watchdog(
            activity.clone(),
            closing_rx.clone(),
            limits.header_timeout,
            limits.idle_timeout,
            limits.send_timeout,
            limits.body_timeout + limits.request_deadline + limits.send_timeout,
        ));
        // The connection task holds a receiver too, so the drain below waits for it.
        let closing = closing_rx.clone();
        tokio::spawn(async move {
            let _permits = (permit, ip_slot);
            let hyper_service = hyper_util::service::TowerToHyperService::new(service);
            let io = WatchedIo {
                inner: stream,
                activity: activity.clone(),
                linger: None,
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), hyper_service);
            tokio::pin!(conn);
            let result = tokio::select! {
                biased;
                result = conn.as_mut() => result,
                () = activity.reached(CLOSE) => {
                    if activity.requests.load(Ordering::Relaxed) == 0
                        || activity.state.load(Ordering::Acquire) == ABORT
                    {
                        // No request yet, so no answer to finish: cut it. (hyper's graceful
                        // shutdown would wait for a first request whose head is half sent.)
                        Ok(())
                    } else {
                        // An answer being written is finished first (within `send_timeout`); a
                        // connection waiting for its next request, or half-way through its head,
                        // closes at once.
                        conn.as_mut().graceful_shutdown();
                        tokio::select! {
                            result = conn.as_mut() => result,
                            () = activity.reached(ABORT) => Ok(()),
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            watching.abort();
            // Counted closed before the drain can see this task gone.
            drop(open);
            drop(closing);
        });
    }
    drop(listener);
    drop(closing_rx);
    let _ = closing_tx.send(true);
    tokio::select! {
        () = closing_tx.closed() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!("drain deadline passed; closing remaining connections"),
    }
}

/// The response body: the stack's, counted outstanding until hyper has taken it.
pub type Body = Tracked<crate::http::compress::Body>;

/// The stack of one connection, with the connection's bookkeeping around each request: requests
/// in flight and the end of the last one (for the idle and header timeouts), HTTP/2 seen, the
/// answers not yet taken (for `send_timeout`), and an answer that asks its connection to close.
fn connection_service(
    stacks: Arc<ArcSwap<Stack>>,
    conn: Arc<ConnInfo>,
    activity: Arc<Activity>,
) -> impl Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future = impl Send>
       + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<Incoming>| {
        let activity = activity.clone();
        let in_flight = InFlight::start(activity.clone());
        activity.requests.fetch_add(1, Ordering::Relaxed);
        let http2 = req.version() == http::Version::HTTP_2;
        // A load first: the swap (a write) happens once per connection, not per request.
        if http2 && !activity.http2.load(Ordering::Relaxed) {
            OpenConnection::saw_http2(&activity);
        }
        // The stack in force now: a reload reaches kept-alive connections at their next request.
        let stack = stacks.load_full();
        // A client at its bound of unread answers gets no more work done for it.
        let answer = (!activity.unread.full()).then(|| {
            let req = req.map(|inner| WatchedBody {
                inner,
                activity: activity.clone(),
            });
            stack.http::<WatchedBody>(conn.clone()).oneshot(req)
        });
        async move {
            let mut response = match answer {
                // Answers made together may pass the bound before any is counted: made, but not
                // kept.
                Some(answer) => match answer.await {
                    Ok(_) if activity.unread.full() => unread_refusal(&stack),
                    Ok(response) => response,
                    Err(never) => match never {},
                },
                None => unread_refusal(&stack),
            };
            drop(in_flight);
            if response
                .headers()
                .get(header::CONNECTION)
                .is_some_and(|v| v == "close")
            {
                // The stack wants this connection closed after this answer (a body that timed
                // out, a drain): HTTP/1.1 closes by the header, HTTP/2 (where it is not allowed)
                // by GOAWAY.
                if activity.http2.load(Ordering::Relaxed) {
                    response.headers_mut().remove(header::CONNECTION);
                }
                activity.close();
            }
            Ok::<_, Infallible>(response.map(|body| {
                let bytes = body.held_bytes();
                Tracked::new(body, activity, http2, bytes)
            }))
        }
    })
}

/// The answer in place of one a client at its bound of unread answers would get (a 503, counted
/// in `snowgate_http_rejections_total{reason="answers_unread"}`).
fn unread_refusal(stack: &Stack) -> Response<crate::http::compress::Body> {
    let refusal = ProxyError::AnswersUnread;
    stack.count_rejection(&refusal);
    tracing::debug!("answer refused: its client leaves too many answers unread");
    refusal.response(None).map(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    fn activity() -> Arc<Activity> {
        let unread = Unread {
            connection: AtomicU64::new(0),
            address: None,
            total: Arc::new(AtomicU64::new(0)),
            address_bound: u64::MAX,
            total_bound: u64::MAX,
        };
        Arc::new(Activity::new(
            OpenGauges::new(&crate::metrics::Metrics::new()),
            unread,
        ))
    }

    /// Each frame of `body` with whether the body said it was the last, until it ends.
    async fn frames<B>(body: &mut Tracked<B>) -> Vec<(Bytes, bool)>
    where
        B: http_body::Body<Data = Bytes, Error: Unpin + std::fmt::Debug> + Unpin,
    {
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame
                .ok()
                .and_then(|f| f.into_data().ok())
                .unwrap_or_default();
            out.push((data, body.is_end_stream()));
            if body.is_end_stream() {
                break;
            }
        }
        out
    }

    #[tokio::test]
    async fn over_http2_an_answer_is_taken_only_after_its_last_byte_went_alone() {
        let a = activity();
        let chunks = crate::body::Chunks::many([
            Bytes::from_static(b"{\"a\":"),
            Bytes::from_static(b"1}\n"),
        ]);
        let mut body = Tracked::new(chunks, a.clone(), true, 3);
        assert_eq!(body.size_hint().exact(), Some(8));
        let got = frames(&mut body).await;
        let expected = [(&b"{\"a\":"[..], false), (b"1}", false), (b"\n", true)];
        assert_eq!(got.len(), expected.len());
        for ((data, end), (want, want_end)) in got.iter().zip(expected) {
            assert_eq!((&data[..], *end), (want, want_end));
        }
        // hyper drops the body once it has sent the last frame: until then it is outstanding.
        assert!(a.answers.lock().oldest().is_some());
        drop(body);
        assert_eq!(a.answers.lock().oldest(), None);

        // A body that tells its end only by ending (gzip's): found by reading one frame ahead.
        let stream = futures_util::stream::iter([
            Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b"ab"))),
            Ok(http_body::Frame::data(Bytes::from_static(b"cd"))),
        ]);
        let mut body = Tracked::new(http_body_util::StreamBody::new(stream), a.clone(), true, 3);
        let got: Vec<_> = frames(&mut body).await;
        let got: Vec<_> = got.iter().map(|(d, end)| (&d[..], *end)).collect();
        assert_eq!(got, [(&b"ab"[..], false), (b"c", false), (b"d", true)]);
    }

    /// Runs a watchdog (idle and header timeouts far away) until it aborts its connection, for at
    /// most `limit`; whether it did.
    async fn aborted_within(
        a: &Arc<Activity>,
        send: Duration,
        cap: Duration,
        limit: Duration,
    ) -> bool {
        let (_tx, rx) = watch::channel(false);
        let hour = Duration::from_secs(3600);
        let dog = tokio::spawn(watchdog(a.clone(), rx, hour, hour, send, cap));
        let done = tokio::time::timeout(limit, dog).await.is_ok();
        done && a.state.load(Ordering::Acquire) == ABORT
    }

    #[tokio::test]
    async fn a_graceful_close_ends_at_its_cap_whatever_is_in_flight() {
        let ms = Duration::from_millis;
        // Nothing in flight: cut `send` after the close.
        let a = activity();
        a.close();
        assert!(aborted_within(&a, ms(50), Duration::from_secs(3600), ms(5000)).await);
        // A request in flight for ever (a client opening stream after stream): cut at the cap.
        let a = activity();
        let busy = InFlight::start(a.clone());
        a.close();
        assert!(aborted_within(&a, ms(50), ms(200), ms(5000)).await);
        drop(busy);
        // An open connection with a request in flight is left alone.
        let a = activity();
        let _busy = InFlight::start(a.clone());
        assert!(!aborted_within(&a, ms(50), ms(100), ms(500)).await);
    }

    #[tokio::test]
    async fn over_http1_an_answer_goes_as_it_is() {
        let a = activity();
        let mut body = Tracked::new(crate::body::Chunks::from("abc"), a.clone(), false, 3);
        let got = frames(&mut body).await;
        assert_eq!(got, [(Bytes::from_static(b"abc"), true)]);
        assert!(
            a.answers.lock().oldest().is_some(),
            "taken when hyper asks past the end"
        );
        assert!(body.frame().await.is_none());
        assert_eq!(a.answers.lock().oldest(), None);
    }

    #[test]
    fn outstanding_answers_keep_the_oldest_start_in_any_end_order() {
        let mut o = Outstanding::default();
        let (a, b, c) = (o.begin(10), o.begin(20), o.begin(30));
        o.end(b);
        assert_eq!(
            o.oldest(),
            Some(10),
            "a later answer taken says nothing of an older one"
        );
        o.end(a);
        assert_eq!(o.oldest(), Some(30));
        o.end(a);
        o.end(c + 100);
        o.end(c);
        assert_eq!((o.oldest(), o.started.len()), (None, 0));
        assert_eq!(o.begin(40), c + 1);
    }
}
