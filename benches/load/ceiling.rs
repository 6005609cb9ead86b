//! The ceiling contestant: a minimal hyper server that reads each request's body and answers it
//! with the same fixed bytes, as large as snowgate's average cached answer of the request mix. It
//! does no parsing, lookup or copying, so no proxy can serve a cached answer faster; it runs with
//! the same number of tokio worker threads and on the same CPUs as snowgate.
//!
//! The load benchmark runs it by re-executing its own binary with `LOAD_BENCH_ROLE=ceiling`.

use std::convert::Infallible;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A JSON-RPC success answer of exactly `size` bytes (a padded hex string, newline-terminated as
/// a node writes it).
pub fn answer(size: usize) -> Bytes {
    let head = "{\"jsonrpc\":\"2.0\",\"result\":{\"tx\":\"0x";
    let tail = "\",\"encoding\":\"hex\"},\"id\":1}\n";
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut s = String::with_capacity(size);
    s.push_str(head);
    s.extend(std::iter::repeat('0').take(pad));
    s.push_str(tail);
    Bytes::from(s)
}

/// Serves `answer(size)` on `127.0.0.1:port` until killed.
pub fn run(port: u16, size: usize) -> Result<(), String> {
    let body = answer(size);
    serve(port, move |_request| {
        let body = body.clone();
        async move { body }
    })
}

/// An OTLP/HTTP collector that keeps nothing: every export is read and answered with an empty
/// success (an empty protobuf message is a valid `ExportTraceServiceResponse`). The tracing
/// section of the load benchmark runs it with `LOAD_BENCH_ROLE=otlp-sink`.
pub fn run_otlp_sink(port: u16) -> Result<(), String> {
    serve(port, |_request| async { Bytes::new() })
}

/// The forwarding floor of snowgate's own stack: a bare hyper server that sends every POST body
/// on to the node over snowgate's upstream connections ([`snowgate::upstream::conn`]) and copies
/// the answer back: no parsing, checking, policy, cache, metrics or balancing. The gap between it
/// and snowgate, forwarded, is what snowgate's own work costs; the gap between it and nginx is the
/// stack's (hyper and tokio).
///
/// The load benchmark runs it by re-executing its own binary with `LOAD_BENCH_ROLE=bare-proxy`.
pub fn run_bare_proxy(port: u16, node: &str) -> Result<(), String> {
    use snowgate::upstream::conn::Connections;
    use std::sync::Arc;
    use std::time::Duration;

    let node: http::uri::Authority = node.parse().map_err(|e| format!("{node}: {e}"))?;
    let connections = Arc::new(
        Connections::new(&node, Duration::from_secs(1), 256, Duration::from_secs(60))
            .map_err(|e| e.to_string())?,
    );
    serve(port, move |request| {
        let connections = connections.clone();
        // Every contestant's requests go to the P-chain path.
        async move {
            connections
                .post(
                    "/ext/bc/P",
                    &request,
                    16 * 1024 * 1024,
                    tokio::time::Instant::now() + Duration::from_secs(30),
                )
                .await
                .map(|reply| reply.body)
                .unwrap_or_default()
        }
    })
}

/// The accept loop both roles share: hyper's HTTP/1.1 server with keep-alive on
/// `127.0.0.1:port`, each request's body read in full (as any server must before answering on a
/// kept-alive connection) and answered with what `handle` makes of it, as JSON, until killed.
fn serve<F, Fut>(port: u16, handle: F) -> Result<(), String>
where
    F: Fn(Bytes) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Bytes> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let handle = handle.clone();
                    async move {
                        let request = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let mut r = Response::new(Full::new(handle(request).await));
                        r.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}
