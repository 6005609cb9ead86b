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
//!   are counted per client address (every answer in full) and for the gateway (what is really
//!   held: a cached payload shared by many answers once); an address past its bound, or past its
//!   share once the gateway holds half its bound, gets a short 503 naming the bound instead of a
//!   further answer (see the `unread` module), so a client that opens many streams or connections
//!   and never reads cannot make snowgate hold their answers until `send_timeout`, nor crowd out
//!   the others;
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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::header;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::{Service, ServiceExt};

mod connection;
mod unread;
mod watched;

use connection::*;
use unread::{Bound, Ledger, Unread};
use watched::*;
pub use watched::{Tracked, WatchedBody};

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
    // Answers not yet taken by any client.
    let ledger = Arc::new(Ledger::default());
    // Answers refused for it, by bound, counted once resolved (the metrics outlive every reload).
    let unread_refused = UnreadRefused::new(stacks.load().metrics());
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
            address: ip_slot.unread.clone(),
            ledger: ledger.clone(),
            address_bound: if ip_slot.trusted {
                u64::MAX
            } else {
                limits.address_answer_bytes as u64
            },
            total_bound: limits.total_answer_bytes as u64,
        };
        let activity = Arc::new(Activity::new(gauges.clone(), unread));
        // Counted from here (never a refused connection) until the connection task ends.
        let open = OpenConnection::new(activity.clone());
        let conn_info = Arc::new(ConnInfo::on(surface, peer, limits.connection_body_bytes));
        let service = connection_service(
            stacks.clone(),
            conn_info,
            activity.clone(),
            unread_refused.clone(),
        );
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
    unread_refused: UnreadRefused,
) -> impl Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future = impl Send>
       + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<Incoming>| {
        let activity = activity.clone();
        let unread_refused = unread_refused.clone();
        let in_flight = InFlight::start(activity.clone());
        activity.requests.fetch_add(1, Ordering::Relaxed);
        let http2 = req.version() == http::Version::HTTP_2;
        // A load first: the swap (a write) happens once per connection, not per request.
        if http2 && !activity.http2.load(Ordering::Relaxed) {
            OpenConnection::saw_http2(&activity);
        }
        // A client at its bound of unread answers gets no more work done for it. Otherwise the
        // stack in force now: a reload reaches kept-alive connections at their next request.
        let req = req.map(|inner| WatchedBody {
            inner,
            activity: activity.clone(),
        });
        let answer = match activity.unread.refusal() {
            Some(bound) => {
                // Its body left unread: an HTTP/1.1 connection lingers on close (see
                // `WatchedBody`), so the refusal reaches a client still sending.
                drop(req);
                Err(bound)
            }
            None => Ok(stacks.load().http::<WatchedBody>(conn.clone()).oneshot(req)),
        };
        async move {
            let mut response = match answer {
                // Answers made together may pass the bound before any is counted: made, but not
                // kept. (From the check to the count below nothing awaits: what passes the bound
                // at one moment is one answer per runtime worker.)
                Ok(answer) => match answer.await {
                    Ok(response) => match activity.unread.refusal() {
                        Some(bound) => unread_refused.answer(bound),
                        None => response,
                    },
                    Err(never) => match never {},
                },
                Err(bound) => unread_refused.answer(bound),
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
                let held = body.held();
                Tracked::new(body, activity, http2, held)
            }))
        }
    })
}

/// The counters of answers refused for unread answers, by bound
/// (`snowgate_http_rejections_total{reason="answers_unread"}` for an address's own bound,
/// `reason="answers_unread_gateway"` for its share of the gateway's), resolved once.
#[derive(Clone)]
struct UnreadRefused {
    address: prometheus::IntCounter,
    gateway: prometheus::IntCounter,
}

impl UnreadRefused {
    fn new(metrics: &crate::metrics::Metrics) -> UnreadRefused {
        let counter = |gateway| {
            let (_, reason) = ProxyError::AnswersUnread { gateway }.counted();
            metrics.http_rejections.with_label_values(&[reason])
        };
        UnreadRefused {
            address: counter(false),
            gateway: counter(true),
        }
    }

    /// The answer in place of one a client past a bound of unread answers would get (a 503 that
    /// names the bound), counted.
    fn answer(&self, bound: Bound) -> Response<crate::http::compress::Body> {
        let gateway = bound == Bound::Gateway;
        if gateway {
            self.gateway.inc();
            tracing::debug!(
                bound = "gateway",
                "answer refused: its address holds more than its share of the answers left unread, or the gateway all it may"
            );
        } else {
            self.address.inc();
            tracing::debug!(
                bound = "address",
                "answer refused: its address leaves too many answers unread"
            );
        }
        ProxyError::AnswersUnread { gateway }
            .response(None)
            .map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Held;
    use bytes::Bytes;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    fn activity() -> Arc<Activity> {
        let unread = Unread {
            address: Arc::default(),
            ledger: Arc::default(),
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
        let mut body = Tracked::new(chunks, a.clone(), true, Held::own(3));
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
        let mut body = Tracked::new(
            http_body_util::StreamBody::new(stream),
            a.clone(),
            true,
            Held::own(3),
        );
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
        let mut body = Tracked::new(
            crate::body::Chunks::from("abc"),
            a.clone(),
            false,
            Held::own(3),
        );
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
