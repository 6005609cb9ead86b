//! Keep-alive HTTP/1.1 connections to one node, and the exchange of one request on them.
//!
//! Why not hyper's client: it runs every connection as a task of its own and passes each request,
//! its answer and the answer's body across channels (a dispatch queue, a oneshot, a body channel),
//! so a forwarded call costs two extra task wake-ups in hand-offs. The gateway only ever sends one
//! kind of request (`POST`, a JSON body with a `Content-Length`) to a node it knows, so the calling
//! task writes the request and reads the answer itself ([`Connections::post`]), with `httparse`
//! (hyper's own parser) for the answer's head (`wire.rs`).
//!
//! What it saved, as measured: callgrind counted 58,300 user-space instructions per forwarded
//! call with hyper's client (4d0295a) and 41,600 after the round that brought this one
//! (92c4da2): about 29 %, of which this client is the largest part but not all (the same round
//! sliced answers out of the read buffer and sped up the JSON string scan); its share alone was
//! not measured (README, "Where the time goes").
//!
//! What it keeps of a general client:
//! * answers framed by `Content-Length`, by chunked transfer coding (the only coding it decodes:
//!   `gzip, chunked` and the like are refused), or by the end of the connection; `1xx` interim
//!   answers skipped; the answer's size bounded while it is read;
//! * keep-alive: a connection is reused only after a complete, well-framed answer on HTTP/1.1
//!   without `Connection: close`, and with nothing left over in its buffer;
//! * idle connections reused newest first, at most `max_idle` of them, none idle longer than
//!   `idle_timeout`, and none the node has closed or sent anything on meanwhile: before a request
//!   is written on a kept-alive connection, the kernel is asked (one `recv(MSG_PEEK)`) whether
//!   bytes are waiting, and if any are (an unsolicited second answer, say) the connection is
//!   closed, so they can never be read as the next request's answer;
//! * a request that a reused connection refused to take (the write failed before any byte left)
//!   moves to the next connection; "could not connect" is told apart from a failure after the
//!   request may have been sent, so side-effecting calls are resent only when it is safe;
//! * a deadline per exchange, kept by one timer per connection that each exchange moves (`io.rs`
//!   says why); a connection that times out is closed.
//!
//! TLS (`https://` upstreams, [`TlsClient`]): rustls, one client config per upstream built when
//! the pool is, verification never off; the handshake is part of opening a connection (a failed
//! one is a [`SendError::Connect`]: the request never left), and the idle check reads a TLS node's
//! own records through rustls instead of peeking.
//!
//! The files, from the bottom up:
//! * `wire.rs`: the request's bytes and the answer's framing, pure functions over byte slices
//!   (no socket, no runtime), unit-tested with any bytes a node could send;
//! * `tls.rs`: an upstream's TLS client ([`TlsClient`]) and the handshake;
//! * `io.rs`: one connection on its socket: opening it, the exchange under its deadline, reading
//!   the body by its framing, the idle check; [`SendError`] and [`Reply`] are what it gives back;
//! * this file: the connections to one node ([`Connections`]), idle ones kept and reused, why
//!   they cannot be set up ([`ConnError`]), and the API the rest of `src/upstream` uses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

mod io;
mod tls;
mod wire;

use io::{Conn, Failure};
pub use io::{Reply, RetryAfter, SendError};
pub use tls::TlsClient;

/// The idle connections to one node and how to open more.
pub struct Connections {
    /// `host:port`, as configured.
    address: String,
    /// The `Host` header's value.
    host: String,
    /// Extra header lines (`name: value\r\n` each) written with every request: a provider's key
    /// header, Basic auth. Never logged.
    extra: Vec<u8>,
    connect_timeout: Duration,
    max_idle: usize,
    idle_timeout: Duration,
    /// Oldest first: each release appends, each checkout pops the newest.
    idle: Mutex<Vec<Idle>>,
    /// `https://`: how to open TLS on each new connection.
    tls: Option<TlsClient>,
    /// Set by [`Connections::close_idle`]: connections are closed after their exchange instead
    /// of kept.
    closing: AtomicBool,
}

/// Why the connections to a node cannot be set up (its Host header, its TLS client): said when
/// the pool is built or reloaded, naming the host (never the URL: it may hold a key).
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The authority (`host:port`) cannot be sent as a `Host` header.
    #[error("{0:?} is not a valid Host header")]
    HostHeader(String),
    /// An `https://` host that is neither a DNS name nor an IP address.
    #[error("{0:?} is not a name a TLS certificate can carry")]
    TlsName(String),
    /// A certificate of the upstream's `tls_ca_file` cannot be a trust anchor.
    #[error("a tls_ca_file certificate is not a usable CA: {0}")]
    TlsCa(rustls::Error),
    /// rustls refused the client config (its protocol versions).
    #[error("TLS: {0}")]
    TlsConfig(rustls::Error),
}

/// A connection waiting for its next request, and since when.
struct Idle {
    conn: Conn,
    since: Instant,
}

impl Connections {
    /// Connections to a plain `http://` upstream at `authority` (port 80 when it names none).
    pub fn new(
        authority: &http::uri::Authority,
        connect_timeout: Duration,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Connections, ConnError> {
        let host = authority.as_str();
        if host.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(ConnError::HostHeader(host.to_string()));
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(Connections {
            address: format!("{}:{port}", authority.host()),
            host: host.to_string(),
            extra: Vec::new(),
            connect_timeout,
            max_idle,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
            tls: None,
            closing: AtomicBool::new(false),
        })
    }

    /// Connections to an `https://` upstream: as [`Connections::new`], each connection opened
    /// with `tls`, and 443 when the authority has no port.
    pub fn https(
        authority: &http::uri::Authority,
        tls: TlsClient,
        connect_timeout: Duration,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Connections, ConnError> {
        let mut connections = Connections::new(authority, connect_timeout, max_idle, idle_timeout)?;
        let port = authority.port_u16().unwrap_or(443);
        connections.address = format!("{}:{port}", authority.host());
        connections.tls = Some(tls);
        Ok(connections)
    }

    /// Sends `host` as the `Host` header instead of the URL's authority, and `headers` with every
    /// request (checked by the caller: valid names and values, none snowgate writes itself).
    pub fn with_headers(
        mut self,
        host: Option<&str>,
        headers: &[(http::HeaderName, http::HeaderValue)],
    ) -> Connections {
        if let Some(h) = host {
            self.host = h.to_string();
        }
        wire::push_header_lines(&mut self.extra, headers);
        self
    }

    /// Sends `POST path` with the JSON `body` and reads the whole answer, at most `max_bytes` of
    /// body, by `deadline` ([`SendError::Timeout`] after it). The connection goes back to the idle
    /// list when the exchange allows it; one that timed out, failed, or whose caller dropped the
    /// future mid-exchange is closed.
    pub async fn post(
        &self,
        path: &str,
        body: &[u8],
        max_bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Reply, SendError> {
        self.post_with(path, b"", body, max_bytes, deadline).await
    }

    /// [`Connections::post`] with header lines of this request's own (`name: value\r\n` each,
    /// valid: its trace context).
    pub async fn post_with(
        &self,
        path: &str,
        own_headers: &[u8],
        body: &[u8],
        max_bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Reply, SendError> {
        let headers = (&self.extra[..], own_headers);
        let request = wire::post(path, &self.host, headers, body).ok_or(SendError::InvalidPath)?;
        // Reused connections first; one that refuses the request unsent passes it on to the
        // next, and finally to a new connection.
        while let Some(mut conn) = self.checkout() {
            match conn.exchange_by(&request, max_bytes, deadline).await {
                Ok((reply, reusable)) => {
                    if reusable {
                        self.release(conn);
                    }
                    return Ok(reply);
                }
                Err(Failure::Unsent) => continue,
                Err(Failure::Failed(e)) => return Err(e),
            }
        }
        let mut conn = Conn::open(
            &self.address,
            self.tls.as_ref(),
            self.connect_timeout,
            deadline,
        )
        .await?;
        match conn.exchange_by(&request, max_bytes, deadline).await {
            Ok((reply, reusable)) => {
                if reusable {
                    self.release(conn);
                }
                Ok(reply)
            }
            Err(Failure::Unsent) => Err(SendError::Transport(format!(
                "{}: the connection closed before the request was sent",
                self.address
            ))),
            Err(Failure::Failed(e)) => Err(e),
        }
    }

    /// Returns a connection whose exchange is complete to the idle list.
    ///
    /// The list is oldest first, so the expired connections are a prefix, cut without a scan;
    /// closed ones are swept only when the list is full, and a checkout skips any it meets.
    fn release(&self, conn: Conn) {
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
        let mut idle = self.idle.lock();
        let now = Instant::now();
        let expired = idle.partition_point(|c| now.duration_since(c.since) >= self.idle_timeout);
        idle.drain(..expired);
        if idle.len() >= self.max_idle {
            idle.retain_mut(|c| c.conn.is_open());
        }
        if idle.len() < self.max_idle {
            idle.push(Idle { conn, since: now });
        }
    }

    /// Closes every idle connection, and from now on each connection after its exchange: the
    /// upstream was taken out of the pool (a reload), and its sockets must not wait for a timer.
    pub fn close_idle(&self) {
        self.closing.store(true, Ordering::Relaxed);
        let idle = std::mem::take(&mut *self.idle.lock());
        drop(idle);
    }

    /// The newest idle connection that has not expired and that the node has not closed.
    fn checkout(&self) -> Option<Conn> {
        loop {
            let Idle { mut conn, since } = self.idle.lock().pop()?;
            if since.elapsed() < self.idle_timeout && conn.is_open() {
                return Some(conn);
            }
        }
    }
}
