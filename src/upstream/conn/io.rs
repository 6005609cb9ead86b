//! One connection to a node, on its socket: opening it (TCP, then the TLS handshake on an
//! `https://` upstream), writing a request and reading its answer under the exchange's deadline,
//! and telling whether an idle connection can carry another request.
//!
//! Everything that waits on the network is here, and nothing that decides HTTP: the request's
//! bytes and the answer's framing come from `wire.rs`; this file reads until they are complete,
//! bounds the body while it reads, and says whether the connection may be kept.
//!
//! The deadline is kept by one timer per connection that each exchange moves: tokio extends a
//! registered timer to a later deadline with one atomic update, where a fresh timer per request
//! visits the timer wheel twice. A connection that times out is closed by its owner.
//!
//! A connection is a `Stream`, plain or TLS, and everything here holds over both: the handshake is
//! part of opening the connection (a failed one is a [`SendError::Connect`], so the request never
//! left), the deadline covers it, and "refused unsent" counts the bytes that reached the socket,
//! not the plaintext rustls took. The idle check cannot peek on TLS: a TLS 1.3 node sends records
//! of its own after the handshake (session tickets, key updates), which are bytes waiting on the
//! socket but no answer. So before a TLS connection is reused, whatever is waiting is read through
//! rustls without waiting (straight from the socket, past the reactor, as the peek does): records
//! that yield no plaintext keep the connection; a plaintext byte, a `close_notify`, end of stream
//! or an error close it.

use std::io::ErrorKind;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::tls::TlsClient;
pub use super::wire::RetryAfter;
use super::wire::{chunk_size, parse_head, Framing, MAX_HEAD};
use crate::upstream::health::Fault;

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
    /// The answer's `Retry-After`, when it has one.
    pub retry_after: Option<RetryAfter>,
}

/// What a read asks the socket for at least.
const READ_CHUNK: usize = 16 * 1024;

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
pub(super) enum Failure {
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

/// One connection to the node and the bytes read from it but not yet used.
pub(super) struct Conn {
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
    /// Opens a connection to `address` (and with `tls`, makes the handshake) within
    /// `connect_timeout`, and by `deadline`.
    pub(super) async fn open(
        address: &str,
        tls: Option<&TlsClient>,
        connect_timeout: Duration,
        deadline: tokio::time::Instant,
    ) -> Result<Conn, SendError> {
        let connect_by = tokio::time::Instant::now() + connect_timeout;
        let opening = async {
            let stream = TcpStream::connect(address).await.map_err(connect_fault)?;
            let _ = stream.set_nodelay(true);
            let probe = Probe::new(&stream).map_err(connect_fault)?;
            let io = TcpIo {
                stream,
                probe,
                eager: false,
                sent: 0,
            };
            let Some(tls) = tls else {
                return Ok(Stream::Plain(io));
            };
            let stream = tls.handshake(io, address).await?;
            Ok(Stream::Tls(Box::new(stream)))
        };
        let stream = match tokio::time::timeout_at(connect_by.min(deadline), opening).await {
            Ok(Ok(stream)) => stream,
            Ok(Err((fault, why))) => {
                return Err(SendError::Connect(fault, format!("{address}: {why}")));
            }
            Err(_) if deadline < connect_by => return Err(SendError::Timeout),
            Err(_) => {
                return Err(SendError::Connect(
                    Fault::ConnectTimeout,
                    format!("{address}: connect timed out after {connect_timeout:?}"),
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

    /// Whether an idle connection can carry a request: nothing has arrived on it since its last
    /// answer (no end-of-stream, no error, no stray bytes). The reactor's readiness is not enough
    /// on its own: bytes that arrived since it last polled the kernel are not in it yet (a busy
    /// runtime polls rarely), so when it says "nothing" the kernel is asked.
    ///
    /// On TLS, waiting bytes may be the node's own records (session tickets, key updates): they
    /// are read through rustls, kernel asked directly, and only plaintext, a `close_notify`, end
    /// of stream or an error close the connection.
    pub(super) fn is_open(&mut self) -> bool {
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
    pub(super) async fn exchange_by(
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
                retry_after: head.retry_after,
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
                if let Some(found) = chunk_size(self.buf).map_err(malformed)? {
                    break found;
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

    /// Bytes a node sent unasked on an idle connection discard it, even before the reactor has
    /// seen them: here the runtime never polls between the node's write and the check.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_waiting_on_an_idle_connection_discard_it() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let open = || {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            Conn::open(&address, None, Duration::from_secs(1), deadline)
        };
        let mut conn = open().await.unwrap();
        let (mut node, _) = listener.accept().unwrap();
        assert!(conn.is_open());
        node.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
        // Blocking on purpose: the loopback delivers meanwhile, and the runtime does not run.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!conn.is_open(), "unsolicited bytes were not seen");
        // A closed connection is not open either.
        let mut conn = open().await.unwrap();
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
        let server = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
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
        let address = listener.local_addr().unwrap().to_string();
        // The node, in a thread of its own: it writes what it is told, then says so.
        let (tell, told) = std::sync::mpsc::channel::<&str>();
        let (done, wrote) = std::sync::mpsc::channel::<()>();
        let node = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let session = rustls::ServerConnection::new(std::sync::Arc::new(server)).unwrap();
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
        let tls = TlsClient::new("test", "127.0.0.1", vec![ca]).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut conn = Conn::open(&address, Some(&tls), Duration::from_secs(5), deadline)
            .await
            .unwrap();
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
}
