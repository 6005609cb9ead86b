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
//! Both are enforced by one watchdog task per connection that sleeps until the next deadline, not
//! by a timer per request.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::header;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::{Layer, Service, ServiceExt};
use tower_http::compression::predicate::SizeAbove;
use tower_http::compression::{CompressionBody, CompressionLayer};
use tracing::Instrument;

use crate::config::LimitsConfig;
use crate::front::{Front, X_REQUEST_ID};

/// Request ids: a per-process counter in hex, short and unique enough to grep logs by.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicU64>);

impl Counter {
    fn next(&self) -> HeaderValue {
        let n = self.0.fetch_add(1, Ordering::Relaxed);
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

/// The longest client request id kept.
const MAX_REQUEST_ID: usize = 128;

/// A client's `x-request-id` is kept only when it is a short token (letters, digits, `-_.:`, at
/// most 128 bytes): enough for UUIDs, trace ids and the like, and nothing that can forge a log field.
fn is_request_id_token(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

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
    /// Set by the watchdog when the connection should close gracefully.
    close: AtomicBool,
    /// The connection task, woken when `close` is set.
    waker: AtomicWaker,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            close: AtomicBool::new(false),
            waker: AtomicWaker::new(),
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

    /// Asks the connection task to close gracefully.
    fn close(&self) {
        self.close.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once [`Activity::close`] has been called: polled on every wake of the connection
    /// task, so it is an atomic load and a waker check, where a timer would be a timer-wheel visit.
    fn closed(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.close.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            if self.close.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// Watches one connection from its own task and asks it to close gracefully when
/// * it has had no request in flight for `idle` (HTTP/1.1 and HTTP/2),
/// * or, over HTTP/1.1 (or before its first request), for `header`: the time a client has to send
///   a request's headers, counted from the end of the previous request (or from the accept). A
///   client trickling its headers is cut off this way, and so is a keep-alive connection waiting
///   for its next request, as hyper's own header-read timer would do;
/// * or the server is shutting down.
///
/// It sleeps until the earliest deadline and looks again, so a busy connection costs it one
/// wake per `header` period, and the request path arms no timer.
async fn watchdog(
    activity: Arc<Activity>,
    mut closing: watch::Receiver<bool>,
    header: Duration,
    idle: Duration,
) {
    loop {
        let limit = if activity.http2.load(Ordering::Relaxed) {
            idle
        } else {
            idle.min(header)
        };
        let idle_for = activity.idle_for();
        if idle_for >= limit {
            tracing::debug!(idle = ?idle_for, "closing idle connection");
            break;
        }
        // While a request runs, the deadline is at least `limit` after it ends.
        let wait = limit - idle_for;
        tokio::select! {
            changed = closing.changed() => {
                // The server is closing (or gone): stop watching either way.
                let _ = changed;
                break;
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
    activity.close();
}

/// The answer to a connection over `max_connections`: written raw, then the socket is closed.
const OVERLOADED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json; charset=utf-8\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 110\r\n\r\n{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32603,\"message\":\"too many open connections, retry later\",\"data\":null},\"id\":null}\n";

/// Serves `front` on `listener` until `shutdown` completes, then drains for at most `drain`:
/// connections finish the requests they have in flight and close; the rest are cut at the deadline.
pub async fn run(
    listener: TcpListener,
    front: Arc<Front>,
    limits: LimitsConfig,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let ids = Counter::default();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        // The header timeout is the watchdog's (see [`watchdog`]): hyper's own would arm a timer
        // for every request.
        .header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection refused: max_connections reached");
            tokio::spawn(async move {
                let _ = stream.write_all(OVERLOADED).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let service = http_service(front.clone(), peer, ids.clone(), activity.clone());
        let builder = builder.clone();
        let watching = tokio::spawn(watchdog(
            activity.clone(),
            closing_rx.clone(),
            limits.header_timeout,
            limits.idle_timeout,
        ));
        // The connection task holds a receiver too, so the drain below waits for it.
        let closing = closing_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let hyper_service = hyper_util::service::TowerToHyperService::new(service);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), hyper_service);
            tokio::pin!(conn);
            let result = tokio::select! {
                biased;
                result = conn.as_mut() => result,
                () = activity.closed() => {
                    if activity.requests.load(Ordering::Relaxed) == 0 {
                        // No request yet, so no answer to finish: cut it. (hyper's graceful
                        // shutdown would wait for a first request whose head is half sent.)
                        Ok(())
                    } else {
                        // An answer being written is finished first; a connection waiting for
                        // its next request, or half-way through its head, closes at once.
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            watching.abort();
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

/// The response body: the front's bytes as they are, or gzip-compressed for a client that accepts
/// it. An enum rather than a boxed trait object: no allocation per response.
pub type Body = http_body_util::Either<Full<Bytes>, CompressionBody<Full<Bytes>>>;

/// The HTTP layers around the front, built per connection (cloned per request: three `Arc`s).
///
/// Written as one service rather than a stack of tower-http layers: request id, trace span and
/// compression are each a few lines here, and a hit's answer no longer passes through four
/// wrapper futures, two header copies and a boxed body (about a tenth of a hit's CPU).
/// * request id: the client's `x-request-id` is kept, or one is made; the answer carries it and
///   every log line of the request has it as `request_id`;
/// * trace: one span per request at debug level, and a debug event with status and latency;
/// * compression: tower-http's gzip layer, only for requests that send `Accept-Encoding`
///   (answers under 1 KiB are not worth the CPU).
fn http_service(
    front: Arc<Front>,
    peer: SocketAddr,
    ids: Counter,
    activity: Arc<Activity>,
) -> impl Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future = impl Send>
       + Clone
       + Send
       + 'static {
    let handler = tower::service_fn(move |req: Request<Incoming>| {
        let front = front.clone();
        let activity = activity.clone();
        async move {
            activity.in_flight.fetch_add(1, Ordering::Relaxed);
            activity.requests.fetch_add(1, Ordering::Relaxed);
            if req.version() == http::Version::HTTP_2 {
                activity.http2.store(true, Ordering::Relaxed);
            }
            // Boxed: the front's future is a few KiB, and hyper and the compression layer would
            // otherwise move it by value several times per request.
            let response = Box::pin(front.handle(req, peer)).await;
            activity.last_ms.store(activity.now_ms(), Ordering::Relaxed);
            activity.in_flight.fetch_sub(1, Ordering::Relaxed);
            Ok::<_, Infallible>(response)
        }
    });
    let gzip = CompressionLayer::new()
        .gzip(true)
        .compress_when(SizeAbove::new(1024));
    tower::service_fn(move |mut req: Request<Incoming>| {
        let id = match req.headers().get(X_REQUEST_ID) {
            Some(id) if is_request_id_token(id.as_bytes()) => id.clone(),
            _ => {
                // None, or something that is not a short token: ours replaces it, so nothing a
                // client wrote in it reaches a log line or another system.
                let id = ids.next();
                req.headers_mut().insert(X_REQUEST_ID, id.clone());
                id
            }
        };
        // Client-supplied values are logged quoted (`?`): a path cannot write fake fields.
        let span = tracing::debug_span!(
            "request",
            id = ?id,
            method = ?req.method(),
            path = ?req.uri().path()
        );
        let compress = req.headers().contains_key(header::ACCEPT_ENCODING);
        let handler = handler.clone();
        let gzip = gzip.clone();
        async move {
            let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
            let mut response = if compress {
                let r = gzip.layer(handler).oneshot(req).await;
                r.unwrap_or_else(|never| match never {})
                    .map(http_body_util::Either::Right)
            } else {
                let r = handler.oneshot(req).await;
                r.unwrap_or_else(|never| match never {})
                    .map(http_body_util::Either::Left)
            };
            response.headers_mut().insert(X_REQUEST_ID, id);
            if let Some(started) = started {
                tracing::debug!(status = response.status().as_u16(), latency = ?started.elapsed(), "answered");
            }
            Ok::<_, Infallible>(response)
        }
        .instrument(span)
    })
}
