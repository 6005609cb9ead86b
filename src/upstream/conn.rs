//! Keep-alive HTTP/1.1 connections to one node, over hyper's connection-level client.
//!
//! One node, one address: this needs none of a general client's pool machinery (pool keys,
//! hashing, racing a new connection against a checkout), which cost about a tenth of a forwarded
//! call's CPU with hyper-util's legacy client. What it keeps:
//! * idle connections are reused, newest first, at most `max_idle` of them, and none idle longer
//!   than `idle_timeout`;
//! * a connection is taken only once hyper says it is ready for another request;
//! * a request that never left (the connection closed before it was written) is retried on another
//!   connection, and a failure to open a connection is told apart from one after the request may
//!   have been sent, so side-effecting calls are resent only when it is safe.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

/// Why a request got no response.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be opened: the request never left.
    Connect(String),
    /// The connection failed after the request may have been written.
    Transport(String),
}

/// The idle connections to one node and how to open more.
pub struct Connections {
    /// `host:port`, as configured.
    address: String,
    host: HeaderValue,
    connect_timeout: Duration,
    max_idle: usize,
    idle_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    sender: http1::SendRequest<Full<Bytes>>,
    since: Instant,
}

/// A connection lent to one exchange. Hand it back with [`Connections::release`] once the answer
/// is read in full; dropped instead, the connection closes.
pub struct Lease(http1::SendRequest<Full<Bytes>>);

impl Connections {
    pub fn new(
        authority: &http::uri::Authority,
        connect_timeout: Duration,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Connections, String> {
        let host = HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
        let port = authority.port_u16().unwrap_or(80);
        Ok(Connections {
            address: format!("{}:{port}", authority.host()),
            host,
            connect_timeout,
            max_idle,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends `POST path` with `body` and returns the response head; its body is still to be read.
    pub async fn post(
        &self,
        path: &'static str,
        body: Bytes,
    ) -> Result<(Response<Incoming>, Lease), SendError> {
        let mut request = self.request(path, body)?;
        // Reused connections first; a request one of them turns away unsent moves on to the next,
        // and finally to a new connection.
        while let Some(mut sender) = self.checkout().await {
            match sender.try_send_request(request).await {
                Ok(response) => return Ok((response, Lease(sender))),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(SendError::Transport(error_chain(e.error()))),
                },
            }
        }
        let mut sender = self.connect().await?;
        match sender.try_send_request(request).await {
            Ok(response) => Ok((response, Lease(sender))),
            Err(e) => Err(SendError::Transport(error_chain(e.error()))),
        }
    }

    /// Returns a connection whose exchange is complete to the idle list.
    ///
    /// The list is oldest first (each release appends the newest, taking the time under the lock;
    /// checkouts pop from the end), so the expired connections are a prefix, cut without a scan.
    /// Closed ones are swept only when the list is full; a checkout skips any it meets.
    pub fn release(&self, lease: Lease) {
        if lease.0.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        let now = Instant::now();
        let expired = idle.partition_point(|c| now.duration_since(c.since) >= self.idle_timeout);
        idle.drain(..expired);
        if idle.len() >= self.max_idle {
            idle.retain(|c| !c.sender.is_closed());
        }
        if idle.len() < self.max_idle {
            idle.push(Idle {
                sender: lease.0,
                since: now,
            });
        }
    }

    fn request(&self, path: &'static str, body: Bytes) -> Result<Request<Full<Bytes>>, SendError> {
        // Parsed without a copy, and without `Uri::from_static`'s panic on a bad path.
        let uri = http::Uri::from_maybe_shared(Bytes::from_static(path.as_bytes()))
            .map_err(|e| SendError::Connect(format!("request path {path:?}: {e}")))?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.host.clone());
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(request)
    }

    /// The newest idle connection that is still open and ready.
    async fn checkout(&self) -> Option<http1::SendRequest<Full<Bytes>>> {
        loop {
            let Idle { mut sender, since } = self.idle.lock().pop()?;
            if sender.is_closed() || since.elapsed() >= self.idle_timeout {
                continue;
            }
            // Ready at once for a connection whose last exchange has been fully read.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    async fn connect(&self) -> Result<http1::SendRequest<Full<Bytes>>, SendError> {
        let connecting = TcpStream::connect(self.address.as_str());
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(SendError::Connect(format!("{}: {e}", self.address))),
            Err(_) => {
                return Err(SendError::Connect(format!(
                    "{}: connect timed out after {:?}",
                    self.address, self.connect_timeout
                )))
            }
        };
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Connect(error_chain(&e)))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// An error with its sources, `outer: inner: ...`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}
