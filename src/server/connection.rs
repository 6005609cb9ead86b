//! One connection's bookkeeping, shared by its requests, its answers and its watchdog: what is in
//! flight, the answers not yet taken (their bytes are counted per client address and for the
//! gateway in [`super::unread`]), whether it is closing; the open-connection gauges, the per-address count, and the
//! watchdog task that enforces the connection's timeouts (see the parent module's doc).

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use ipnet::IpNet;
use tokio::sync::watch;

use super::unread::{Account, Unread};

/// What a connection's watchdog needs to know, kept up to date by the connection's requests at
/// the cost of a few relaxed atomics per request (no timer is armed per request).
pub(super) struct Activity {
    pub(super) started: Instant,
    pub(super) in_flight: AtomicUsize,
    /// Milliseconds from `started` to the end of the last request.
    pub(super) last_ms: AtomicU64,
    /// Requests this connection has started.
    pub(super) requests: AtomicU64,
    /// Set once a request arrives over HTTP/2, where the header timeout does not apply.
    pub(super) http2: AtomicBool,
    /// [`OPEN`], [`CLOSE`] (finish the answers in flight, then close) or [`ABORT`] (drop it now).
    pub(super) state: AtomicU8,
    /// Milliseconds from `started` to the first ask to close (zero: never asked): where the
    /// graceful close's deadlines count from (see [`watchdog`]).
    pub(super) closing_ms: AtomicU64,
    /// The connection task, woken when `state` changes.
    pub(super) waker: AtomicWaker,
    /// Answer bodies made and not yet taken by hyper, oldest first.
    pub(super) answers: parking_lot::Mutex<Outstanding>,
    /// Milliseconds from `started` (plus one, so zero means "not blocked") to the first write the
    /// socket refused since it was last flushed: the client has stopped reading since then.
    pub(super) write_blocked_ms: AtomicU64,
    /// A request's body was left unread (refused by its size or its caller's quota): closing,
    /// the connection reads and discards what the client still sends before it goes
    /// ([`WatchedIo::poll_shutdown`]).
    pub(super) unread_body: AtomicBool,
    /// The `snowgate_open_connections` gauges this connection is counted in (kept here, not in
    /// the service, which is cloned per request).
    pub(super) gauges: OpenGauges,
    /// The answers not yet taken of this connection's address and of everyone (see
    /// [`super::unread`]).
    pub(super) unread: Unread,
}

pub(super) const OPEN: u8 = 0;
pub(super) const CLOSE: u8 = 1;
pub(super) const ABORT: u8 = 2;

impl Activity {
    pub(super) fn new(gauges: OpenGauges, unread: Unread) -> Activity {
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

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long the connection has had nothing in flight (zero while a request runs).
    pub(super) fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }

    /// Asks the connection task to close gracefully. The first ask starts the close's clock
    /// (later ones, such as one `Connection: close` answer after another, do not move it).
    pub(super) fn close(&self) {
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
    pub(super) fn closing_for(&self) -> Option<(Duration, Duration)> {
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
    pub(super) fn abort(&self) {
        self.state.store(ABORT, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once the state is at least `level`: polled on every wake of the connection task, so
    /// it is an atomic load and a waker check, where a timer would be a timer-wheel visit.
    pub(super) fn reached(&self, level: u8) -> impl Future<Output = ()> + '_ {
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
    pub(super) fn stalled_for(&self) -> Duration {
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
pub(super) struct InFlight(pub(super) Arc<Activity>);

impl InFlight {
    pub(super) fn start(activity: Arc<Activity>) -> InFlight {
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
pub(super) struct Outstanding {
    /// The sequence number of `started[0]`.
    pub(super) first: u64,
    pub(super) started: std::collections::VecDeque<Option<u64>>,
}

impl Outstanding {
    pub(super) fn begin(&mut self, now_ms: u64) -> u64 {
        self.started.push_back(Some(now_ms));
        self.first + self.started.len() as u64 - 1
    }

    pub(super) fn end(&mut self, seq: u64) {
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

    pub(super) fn oldest(&self) -> Option<u64> {
        self.started.front().copied().flatten()
    }
}

/// The `snowgate_open_connections` gauges, one per protocol, resolved once for the listener.
#[derive(Clone)]
pub(super) struct OpenGauges {
    pub(super) http1: prometheus::IntGauge,
    pub(super) http2: prometheus::IntGauge,
}

impl OpenGauges {
    pub(super) fn new(metrics: &crate::metrics::Metrics) -> OpenGauges {
        OpenGauges {
            http1: metrics.open_connections.with_label_values(&["http1"]),
            http2: metrics.open_connections.with_label_values(&["http2"]),
        }
    }
}

/// One admitted connection in `snowgate_open_connections`, until dropped: held by the connection
/// task, so every way it ends (closed, drained, cut at the drain deadline, the runtime dropped)
/// counts it closed exactly once.
pub(super) struct OpenConnection {
    pub(super) activity: Arc<Activity>,
}

impl OpenConnection {
    /// Counts an admitted connection open, as HTTP/1.1 until it shows itself HTTP/2; the guard
    /// counts it closed when dropped, under the protocol it had by then.
    pub(super) fn new(activity: Arc<Activity>) -> OpenConnection {
        activity.gauges.http1.inc();
        OpenConnection { activity }
    }

    /// Moves the connection from `http1` to `http2`, at its first HTTP/2 request (once: the flag
    /// is swapped by the first only).
    pub(super) fn saw_http2(activity: &Activity) {
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

/// Open connections per client address, for `max_connections_per_ip`, and the address's account
/// of unread answers (see [`super::unread`]). Trusted proxies are here too, for their account;
/// their connections are not limited.
pub(super) struct PerIp {
    pub(super) open: parking_lot::Mutex<HashMap<IpAddr, (usize, Arc<Account>)>>,
}

/// One connection's place in [`PerIp`], given back on drop.
pub(super) struct IpSlot {
    pub(super) table: Arc<PerIp>,
    pub(super) ip: IpAddr,
    /// The address's unread answers.
    pub(super) unread: Arc<Account>,
    /// A trusted proxy: neither its connections nor its unread answers have a bound of their own.
    pub(super) trusted: bool,
}

impl PerIp {
    /// A place for a new connection from `peer`; `Err` when its address is at the limit (never
    /// for a trusted proxy).
    pub(super) fn admit(
        table: &Arc<PerIp>,
        peer: IpAddr,
        limit: usize,
        exempt: &[IpNet],
    ) -> Result<IpSlot, ()> {
        let ip = crate::ratelimit::client::group(crate::ratelimit::client::canonical(peer));
        let trusted = exempt.iter().any(|net| net.contains(&ip));
        let mut open = table.open.lock();
        let (count, unread) = open.entry(ip).or_default();
        // (`limit` is at least one: a refused address has connections, so its entry stays.)
        if *count >= limit && !trusted {
            return Err(());
        }
        *count += 1;
        Ok(IpSlot {
            table: table.clone(),
            ip,
            unread: unread.clone(),
            trusted,
        })
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
pub(super) async fn watchdog(
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
