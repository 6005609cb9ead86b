//! Keep-alive HTTP/1.1 connections to one node, and the exchange of one request on them.
//!
//! Why not hyper's client: it runs every connection as a task of its own and passes each request,
//! its answer and the answer's body across channels (a dispatch queue, a oneshot, a body channel),
//! so a forwarded call costs two extra task wake-ups in hand-offs. The gateway only ever sends one
//! kind of request (`POST`, a JSON body with a `Content-Length`) to a node it knows, so the calling
//! task writes the request and reads the answer itself ([`Connections::post`]), with `httparse`
//! (hyper's own parser) for the answer's head (`parse_head`).
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
//! * a deadline per exchange, kept by one timer per connection that each exchange moves (tokio
//!   extends a registered timer to a later deadline with one atomic update, where a fresh timer
//!   per request visits the timer wheel twice); a connection that times out is closed.
//!
//! TLS (`https://` upstreams, [`TlsClient`]): rustls through tokio-rustls, one client config per
//! upstream built when the pool is (roots, ALPN `http/1.1`), SNI and verification from the URL's
//! host; verification is never off. A connection is a `Stream`, plain or TLS, and everything
//! above holds over both: the handshake is part of opening the connection (a failed one is a
//! [`SendError::Connect`], so the request never left, and its reason is logged at warn), the
//! deadline covers it, and "refused unsent" counts the bytes that reached the socket, not the
//! plaintext rustls took. The idle check cannot peek on TLS: a TLS 1.3 node sends records of its
//! own after the handshake (session tickets, key updates), which are bytes waiting on the socket
//! but no answer. So before a TLS connection is reused, whatever is waiting is read through
//! rustls without waiting (straight from the socket, past the reactor, as the peek does): records
//! that yield no plaintext keep the connection; a plaintext byte, a `close_notify`, end of stream
//! or an error close it.

use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::health::Fault;

/// Why a request got no answer.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be opened: the request never left. The category says why (refused,
    /// timed out, other); the text is for logs (it names the address).
    Connect(Fault, String),
    /// The connection failed, or the answer was not HTTP, after the request may have been written.
    Transport(String),
    /// The node answered something that is not a well-formed HTTP/1.1 answer (its head, its
    /// chunks); the text says what, quoting nothing of it.
    Malformed(String),
    /// The answer's body is larger than the bound the caller set (in bytes).
    TooLarge(usize),
    /// The deadline passed before the answer was complete (or before a connection opened).
    Timeout,
    /// The request path cannot be sent (not absolute, or not printable ASCII): nothing was
    /// sent and no connection was opened. The caller's mistake, not the node's: it names
    /// neither the node nor the path.
    InvalidPath,
}

/// A node's answer: its status and its whole body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Bytes,
}

/// Longest answer head accepted (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Most headers in an answer head.
const MAX_HEADERS: usize = 64;
/// What a read asks the socket for at least.
const READ_CHUNK: usize = 16 * 1024;

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
    closing: std::sync::atomic::AtomicBool,
}

/// The TLS side of an `https://` upstream, made once when the pool is built: the rustls client
/// config (the webpki roots plus the upstream's own CAs, ALPN `http/1.1`) and the name its
/// certificate must carry (the URL's host, sent as SNI when it is a DNS name).
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
    server_name: rustls::pki_types::ServerName<'static>,
    /// The upstream's configured name, for the log line of a failed handshake.
    upstream: String,
    /// The reason of the last failed handshake, logged at warn once and then at debug until a
    /// handshake succeeds or the reason changes: a node with a bad certificate fails every
    /// health check, and one warning per reason is enough.
    last_failure: Mutex<Option<String>>,
}

impl TlsClient {
    /// The client for `upstream` at `host` (a DNS name or an IP address, `[v6]` bracketed or
    /// not), trusting the webpki roots and `extra_roots`.
    pub fn new(
        upstream: &str,
        host: &str,
        extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<TlsClient, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = rustls::pki_types::ServerName::try_from(bare.to_string())
            .map_err(|_| format!("{host:?} is not a name a TLS certificate can carry"))?;
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in extra_roots {
            roots
                .add(cert)
                .map_err(|e| format!("a tls_ca_file certificate is not a usable CA: {e}"))?;
        }
        // The crate's one provider, passed explicitly: nothing process-wide needs installing.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsClient {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
            upstream: upstream.to_string(),
            last_failure: Mutex::new(None),
        })
    }

    /// Logs a failed handshake: at warn the first time a reason is seen, then at debug.
    fn failed(&self, address: &str, reason: &str) {
        // Reasons compared without their digits: an expired certificate's text carries the
        // time of each check.
        let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
        let mut last = self.last_failure.lock();
        if last.as_deref() == Some(kind.as_str()) {
            tracing::debug!(upstream = %self.upstream, address, error = reason, "TLS handshake with the upstream failed");
        } else {
            tracing::warn!(upstream = %self.upstream, address, error = reason, "TLS handshake with the upstream failed");
            *last = Some(kind);
        }
    }

    fn succeeded(&self) {
        let mut last = self.last_failure.lock();
        if last.take().is_some() {
            tracing::info!(upstream = %self.upstream, "TLS handshake with the upstream succeeded again");
        }
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl Connections {
    pub fn new(
        authority: &http::uri::Authority,
        connect_timeout: Duration,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Connections, String> {
        let host = authority.as_str();
        if host.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(format!("{host:?} is not a valid Host header"));
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
            closing: std::sync::atomic::AtomicBool::new(false),
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
    ) -> Result<Connections, String> {
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
        for (name, value) in headers {
            self.extra.extend_from_slice(name.as_str().as_bytes());
            self.extra.extend_from_slice(b": ");
            self.extra.extend_from_slice(value.as_bytes());
            self.extra.extend_from_slice(b"\r\n");
        }
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
        let request = self.encode(path, body)?;
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
        let mut conn = self.connect(deadline).await?;
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

    /// The request's bytes: head and body in one buffer, written with one system call.
    fn encode(&self, path: &str, body: &[u8]) -> Result<Vec<u8>, SendError> {
        if !path.starts_with('/') || path.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(SendError::InvalidPath);
        }
        let mut length = itoa::Buffer::new();
        let mut out =
            Vec::with_capacity(96 + path.len() + self.host.len() + self.extra.len() + body.len());
        out.extend_from_slice(b"POST ");
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.extra);
        out.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
        out.extend_from_slice(length.format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(body);
        Ok(out)
    }

    /// Returns a connection whose exchange is complete to the idle list.
    ///
    /// The list is oldest first, so the expired connections are a prefix, cut without a scan;
    /// closed ones are swept only when the list is full, and a checkout skips any it meets.
    fn release(&self, conn: Conn) {
        if self.closing.load(std::sync::atomic::Ordering::Relaxed) {
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
        self.closing
            .store(true, std::sync::atomic::Ordering::Relaxed);
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

    /// Opens a connection (and on TLS, makes the handshake) within `connect_timeout`, and by
    /// `deadline`.
    async fn connect(&self, deadline: tokio::time::Instant) -> Result<Conn, SendError> {
        let connect_by = tokio::time::Instant::now() + self.connect_timeout;
        let opening = async {
            let stream = TcpStream::connect(self.address.as_str())
                .await
                .map_err(connect_fault)?;
            let _ = stream.set_nodelay(true);
            let probe = Probe::new(&stream).map_err(connect_fault)?;
            let io = TcpIo {
                stream,
                probe,
                eager: false,
                sent: 0,
            };
            let Some(tls) = &self.tls else {
                return Ok(Stream::Plain(io));
            };
            match tls.connector.connect(tls.server_name.clone(), io).await {
                Ok(stream) => {
                    tls.succeeded();
                    Ok(Stream::Tls(Box::new(stream)))
                }
                Err(e) => {
                    tls.failed(&self.address, &e.to_string());
                    Err((Fault::TlsHandshake, format!("TLS handshake failed: {e}")))
                }
            }
        };
        let stream = match tokio::time::timeout_at(connect_by.min(deadline), opening).await {
            Ok(Ok(stream)) => stream,
            Ok(Err((fault, why))) => {
                return Err(SendError::Connect(
                    fault,
                    format!("{}: {why}", self.address),
                ));
            }
            Err(_) if deadline < connect_by => return Err(SendError::Timeout),
            Err(_) => {
                return Err(SendError::Connect(
                    Fault::ConnectTimeout,
                    format!(
                        "{}: connect timed out after {:?}",
                        self.address, self.connect_timeout
                    ),
                ))
            }
        };
        Ok(Conn {
            stream,
            buf: BytesMut::new(),
            reused: false,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
        })
    }
}

/// The category of a failure to open a TCP connection, and its text (for the log).
fn connect_fault(e: std::io::Error) -> (Fault, String) {
    let fault = if e.kind() == ErrorKind::ConnectionRefused {
        Fault::ConnectRefused
    } else {
        Fault::ConnectFailed
    };
    (fault, e.to_string())
}

/// A second handle on a connection's socket (a duplicated descriptor, made once per connection),
/// for a non-blocking `peek` that asks the kernel directly, past the reactor.
#[cfg(unix)]
struct Probe(std::net::TcpStream);

#[cfg(unix)]
impl Probe {
    fn new(stream: &TcpStream) -> std::io::Result<Probe> {
        use std::os::fd::AsFd;
        let fd = stream.as_fd().try_clone_to_owned()?;
        Ok(Probe(std::net::TcpStream::from(fd)))
    }

    /// Nothing is waiting to be read and the node has not closed the connection. The socket is
    /// non-blocking (the flag is shared with the original), so this never waits.
    fn quiet(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.0.peek(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }

    /// Reads what the kernel holds, without waiting (`WouldBlock` when nothing is there).
    fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut &self.0, buf)
    }
}

/// Elsewhere the reactor's readiness alone decides.
#[cfg(not(unix))]
struct Probe;

#[cfg(not(unix))]
impl Probe {
    fn new(_: &TcpStream) -> std::io::Result<Probe> {
        Ok(Probe)
    }

    fn quiet(&self) -> bool {
        true
    }

    fn read(&self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(ErrorKind::WouldBlock.into())
    }
}

/// A connection's socket as a stream: the TCP stream, its [`Probe`], and what the exchange and
/// the TLS idle check need to know of it.
struct TcpIo {
    stream: TcpStream,
    /// The same socket, to ask the kernel what the reactor may not have seen yet.
    probe: Probe,
    /// Reads ask the kernel directly when the reactor says nothing is there: set only while a
    /// TLS connection's idle check runs (see [`Conn::is_open`]).
    eager: bool,
    /// Bytes written to the socket so far (on TLS, the records, not the plaintext): tells a
    /// request refused unsent from one that may have left.
    sent: u64,
}

impl AsyncRead for TcpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending if this.eager => {
                // The reactor has not seen the bytes yet (or there are none): the kernel tells.
                // The waker stays registered by the read above.
                match this.probe.read(buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        Poll::Ready(Ok(()))
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e)),
                }
            }
            other => other,
        }
    }
}

impl AsyncWrite for TcpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.sent += n as u64;
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            this.sent += n as u64;
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// One connection: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpIo),
    /// Boxed: rustls's connection state is large, and most connections are plain.
    Tls(Box<tokio_rustls::client::TlsStream<TcpIo>>),
}

impl Stream {
    fn tcp(&self) -> &TcpIo {
        match self {
            Stream::Plain(io) => io,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// Bytes written to the socket so far.
    fn sent(&self) -> u64 {
        self.tcp().sent
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How an exchange failed.
enum Failure {
    /// A reused connection refused the request before any of it was written: safe to resend.
    Unsent,
    Failed(SendError),
}

fn malformed(what: impl std::fmt::Display) -> Failure {
    Failure::Failed(SendError::Malformed(what.to_string()))
}

fn transport(what: impl std::fmt::Display) -> Failure {
    Failure::Failed(SendError::Transport(what.to_string()))
}

/// How the body of an answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    /// Until the node closes the connection.
    Close,
}

/// What the head of an answer says.
#[derive(Debug)]
struct Head {
    /// Bytes of the head, status line to the empty line.
    len: usize,
    status: StatusCode,
    framing: Framing,
    /// The connection may carry another request after this answer.
    keep_alive: bool,
}

/// Reads an answer's head from `buf`: `Ok(None)` while it is incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    // Uninitialised slots: a zeroed array of them costs more than parsing a node's short head.
    let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("invalid HTTP answer: {e}")),
    };
    let code = response.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| format!("invalid HTTP status {code}"))?;
    let mut keep_alive = response.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        // The length first: most headers are none of these three and cost one comparison.
        if !matches!(h.name.len(), 10 | 14 | 17) {
            continue;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("invalid Content-Length")?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length headers".into());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is the only coding this client decodes: `gzip, chunked` is chunked gzip,
            // whose de-chunked bytes are not the answer, so any other coding in the list is
            // refused (RFC 9112 6.1), not read as plain chunked.
            let mut codings = h
                .value
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .filter(|coding| !coding.is_empty())
                .peekable();
            let named = codings.peek().is_some();
            if !named || !codings.all(|coding| coding.eq_ignore_ascii_case(b"chunked")) {
                return Err("unsupported Transfer-Encoding".into());
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && response.version == Some(0) {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Length(0)
    } else if chunked {
        // Both codings at once is how requests are smuggled: read it, then close (RFC 9112 6.3).
        if length.is_some() {
            keep_alive = false;
        }
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::Close
    };
    Ok(Some(Head {
        len,
        status,
        framing,
        keep_alive,
    }))
}

/// One connection to the node and the bytes read from it but not yet used.
struct Conn {
    stream: Stream,
    buf: BytesMut,
    /// It has carried an exchange before (so a refusal may mean the node closed it while idle).
    reused: bool,
    /// The deadline of the exchange in progress. One timer for the connection's life, moved to
    /// each new (later) deadline, which costs tokio one atomic update instead of a visit to its
    /// timer wheel per request.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Conn {
    /// Whether an idle connection can carry a request: nothing has arrived on it since its last
    /// answer (no end-of-stream, no error, no stray bytes). The reactor's readiness is not enough
    /// on its own: bytes that arrived since it last polled the kernel are not in it yet (a busy
    /// runtime polls rarely), so when it says "nothing" the kernel is asked.
    ///
    /// On TLS, waiting bytes may be the node's own records (session tickets, key updates): they
    /// are read through rustls, kernel asked directly, and only plaintext, a `close_notify`, end
    /// of stream or an error close the connection.
    fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        match &mut self.stream {
            Stream::Plain(io) => match io.stream.poll_read_ready(&mut cx) {
                Poll::Pending => io.probe.quiet(),
                Poll::Ready(Err(_)) => false,
                // Readiness can be left over from the last read; a probe tells.
                Poll::Ready(Ok(())) => {
                    let mut probe = [0u8; 1];
                    matches!(io.stream.try_read(&mut probe), Err(e) if e.kind() == ErrorKind::WouldBlock)
                }
            },
            Stream::Tls(tls) => {
                tls.get_mut().0.eager = true;
                let mut byte = [0u8; 1];
                let mut buf = ReadBuf::new(&mut byte);
                // rustls reads records until the socket has no more or a record holds
                // plaintext: `Pending` means all of it was the node's own records.
                let quiet = Pin::new(tls.as_mut())
                    .poll_read(&mut cx, &mut buf)
                    .is_pending();
                tls.get_mut().0.eager = false;
                quiet
            }
        }
    }

    /// [`ConnIo::exchange`], given up at `deadline` (the connection is then closed by the caller).
    async fn exchange_by(
        &mut self,
        request: &[u8],
        max_bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(Reply, bool), Failure> {
        self.timer.as_mut().reset(deadline);
        let Conn {
            stream,
            buf,
            reused,
            timer,
            ..
        } = self;
        let mut io = ConnIo {
            stream,
            buf,
            reused,
        };
        tokio::select! {
            biased;
            result = io.exchange(request, max_bytes) => result,
            () = timer.as_mut() => Err(Failure::Failed(SendError::Timeout)),
        }
    }
}

/// The parts of a [`Conn`] an exchange uses (its timer stays with the caller).
struct ConnIo<'a> {
    stream: &'a mut Stream,
    buf: &'a mut BytesMut,
    reused: &'a mut bool,
}

impl ConnIo<'_> {
    /// Writes `request` and reads the answer to it. Returns the answer and whether the
    /// connection may carry another request.
    async fn exchange(
        &mut self,
        request: &[u8],
        max_bytes: usize,
    ) -> Result<(Reply, bool), Failure> {
        let reused = std::mem::replace(self.reused, true);
        self.buf.clear();
        // What reached the socket before, so that a refusal with nothing of the request sent
        // is told apart on TLS too (where a write takes plaintext before any record leaves).
        let before = self.stream.sent();
        let written = match self.stream.write(request).await {
            Ok(0) if reused => return Err(Failure::Unsent),
            Ok(n) => n,
            Err(_) if reused && self.stream.sent() == before => return Err(Failure::Unsent),
            Err(e) => return Err(transport(format!("writing the request: {e}"))),
        };
        if written < request.len() {
            self.stream
                .write_all(&request[written..])
                .await
                .map_err(|e| transport(format!("writing the request: {e}")))?;
        }
        // TLS may hold records back (the socket was full); plain TCP holds nothing.
        if let Err(e) = self.stream.flush().await {
            if reused && self.stream.sent() == before {
                return Err(Failure::Unsent);
            }
            return Err(transport(format!("writing the request: {e}")));
        }
        let head = loop {
            // Nothing read yet (the usual case right after the write): nothing to parse.
            let parsed = if self.buf.is_empty() {
                None
            } else {
                parse_head(self.buf).map_err(malformed)?
            };
            if let Some(head) = parsed {
                if head.status.is_informational() {
                    // `100 Continue` and the like: the real answer follows.
                    self.buf.advance(head.len);
                    continue;
                }
                break head;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(malformed("answer head larger than 64 KiB"));
            }
            if self.fill().await? == 0 {
                return Err(transport(if self.buf.is_empty() {
                    "the node closed the connection without answering"
                } else {
                    "the node closed the connection in the middle of the answer's head"
                }));
            }
        };
        self.buf.advance(head.len);
        let (body, complete) = match head.framing {
            Framing::Length(n) => (self.read_length(n, max_bytes).await?, true),
            Framing::Chunked => (self.read_chunked(max_bytes).await?, true),
            Framing::Close => (self.read_to_end(max_bytes).await?, false),
        };
        // Bytes past the answer mean the two sides no longer agree on framing.
        let reusable = complete && head.keep_alive && self.buf.is_empty();
        Ok((
            Reply {
                status: head.status,
                body,
            },
            reusable,
        ))
    }

    /// Reads more from the socket into the buffer; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> Result<usize, Failure> {
        self.buf.reserve(READ_CHUNK);
        self.stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|e| transport(format!("reading the answer: {e}")))
    }

    async fn read_length(&mut self, n: u64, max_bytes: usize) -> Result<Bytes, Failure> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= max_bytes)
            .ok_or(Failure::Failed(SendError::TooLarge(max_bytes)))?;
        if self.buf.len() < n {
            self.buf.reserve(n - self.buf.len());
        }
        while self.buf.len() < n {
            if self.fill().await? == 0 {
                return Err(transport(
                    "the node closed the connection in the middle of the answer",
                ));
            }
        }
        Ok(self.buf.split_to(n).freeze())
    }

    async fn read_chunked(&mut self, max_bytes: usize) -> Result<Bytes, Failure> {
        let mut body = BytesMut::new();
        loop {
            let (line, size) = loop {
                match httparse::parse_chunk_size(self.buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if self.buf.len() < 1024 => {}
                    _ => return Err(malformed("invalid chunk size in the answer")),
                }
                if self.fill().await? == 0 {
                    return Err(transport("the node closed the connection inside a chunk"));
                }
            };
            self.buf.advance(line);
            let size = usize::try_from(size)
                .ok()
                .filter(|&s| body.len().saturating_add(s) <= max_bytes)
                .ok_or(Failure::Failed(SendError::TooLarge(max_bytes)))?;
            if size == 0 {
                return self.skip_trailers().await.map(|()| body.freeze());
            }
            // The chunk's data and its CRLF.
            while self.buf.len() < size + 2 {
                if self.fill().await? == 0 {
                    return Err(transport("the node closed the connection inside a chunk"));
                }
            }
            if &self.buf[size..size + 2] != b"\r\n" {
                return Err(malformed("chunk not followed by CRLF"));
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.advance(size + 2);
        }
    }

    /// After the last chunk: trailer fields (ignored) up to the empty line.
    async fn skip_trailers(&mut self) -> Result<(), Failure> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                self.buf.advance(end + 2);
                if end == 0 {
                    return Ok(());
                }
                continue;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(malformed("answer trailers larger than 64 KiB"));
            }
            if self.fill().await? == 0 {
                return Err(transport(
                    "the node closed the connection inside the trailers",
                ));
            }
        }
    }

    async fn read_to_end(&mut self, max_bytes: usize) -> Result<Bytes, Failure> {
        loop {
            if self.buf.len() > max_bytes {
                return Err(Failure::Failed(SendError::TooLarge(max_bytes)));
            }
            if self.fill().await? == 0 {
                return Ok(self.buf.split().freeze());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes())
            .expect("valid head")
            .expect("complete head")
    }

    #[test]
    fn framing_follows_the_headers() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(12), true));
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked \r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, true));
        let h = head("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(0));
        let h =
            head("HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n");
        assert!(h.keep_alive);
        // Both codings: chunked wins and the connection is not reused.
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, false));
    }

    /// Bytes a node sent unasked on an idle connection discard it, even before the reactor has
    /// seen them: here the runtime never polls between the node's write and the check.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_waiting_on_an_idle_connection_discard_it() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority: http::uri::Authority =
            listener.local_addr().unwrap().to_string().parse().unwrap();
        let connections = Connections::new(
            &authority,
            Duration::from_secs(1),
            4,
            Duration::from_secs(60),
        )
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut conn = connections.connect(deadline).await.unwrap();
        let (mut node, _) = listener.accept().unwrap();
        assert!(conn.is_open());
        node.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
        // Blocking on purpose: the loopback delivers meanwhile, and the runtime does not run.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!conn.is_open(), "unsolicited bytes were not seen");
        // A closed connection is not open either.
        let mut conn = connections.connect(deadline).await.unwrap();
        let (node, _) = listener.accept().unwrap();
        drop(node);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!conn.is_open(), "a closed connection was taken for open");
    }

    /// Over TLS, the records a node sends on its own while a connection is idle (TLS 1.3 session
    /// tickets right after the handshake, a key update later) keep it; plaintext discards it.
    /// As above, the runtime never polls between the node's write and the check, so what the
    /// reactor has not seen is read from the kernel.
    #[tokio::test(flavor = "current_thread")]
    async fn a_tls_nodes_own_records_keep_an_idle_connection_and_plaintext_discards_it() {
        use rustls::pki_types::pem::PemObject;
        use std::io::Write;
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority: http::uri::Authority =
            listener.local_addr().unwrap().to_string().parse().unwrap();
        // The node, in a thread of its own: it writes what it is told, then says so.
        let (tell, told) = std::sync::mpsc::channel::<&str>();
        let (done, wrote) = std::sync::mpsc::channel::<()>();
        let node = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let session = rustls::ServerConnection::new(Arc::new(server)).unwrap();
            let mut tls = rustls::StreamOwned::new(session, tcp);
            while tls.conn.is_handshaking() {
                tls.conn.complete_io(&mut tls.sock).unwrap();
            }
            // The session tickets.
            while tls.conn.wants_write() {
                tls.conn.write_tls(&mut tls.sock).unwrap();
            }
            done.send(()).unwrap();
            for what in told {
                if what == "key update" {
                    tls.conn.refresh_traffic_keys().unwrap();
                    while tls.conn.wants_write() {
                        tls.conn.write_tls(&mut tls.sock).unwrap();
                    }
                } else {
                    tls.write_all(what.as_bytes()).unwrap();
                    tls.flush().unwrap();
                }
                done.send(()).unwrap();
            }
        });
        let ca = rustls::pki_types::CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap();
        let tls = TlsClient::new("test", authority.host(), vec![ca]).unwrap();
        let connections = Connections::https(
            &authority,
            tls,
            Duration::from_secs(5),
            4,
            Duration::from_secs(60),
        )
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut conn = connections.connect(deadline).await.unwrap();
        wrote.recv().unwrap();
        // Blocking on purpose: the loopback delivers meanwhile, and the runtime does not run.
        std::thread::sleep(Duration::from_millis(20));
        assert!(conn.is_open(), "the session tickets closed the connection");
        tell.send("key update").unwrap();
        wrote.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(conn.is_open(), "a key update closed the connection");
        tell.send("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
        wrote.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!conn.is_open(), "unsolicited plaintext was not seen");
        drop(tell);
        node.join().unwrap();
    }

    #[test]
    fn bad_heads_are_refused() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            // Chunked gzip is not chunked JSON: de-chunking it does not give the answer.
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-"),
            Ok(None)
        ));
    }
}
