//! The gateway's own HTTP/1.1 client to the nodes, driven through the gateway against a node
//! written on raw sockets, so each test chooses exactly how an answer is framed and when a
//! connection closes: chunked answers split across writes, `Connection: close`, answers delimited
//! by the end of the connection, a node that drops idle connections, and oversized answers.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{call, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the raw node frames its answers (health checks included).
#[derive(Clone, Copy, PartialEq)]
enum Style {
    /// `Content-Length`, keep-alive.
    Length,
    /// Chunked, each chunk written on its own after a short pause.
    Chunked,
    /// `Content-Length` with `Connection: close`, then close.
    CloseHeader,
    /// No length at all: the body ends when the connection does.
    UntilClose,
    /// `Content-Length`, keep-alive advertised, but the node closes the connection right after.
    DropsIdle,
    /// Not HTTP at all (health checks are answered properly, so the node is in the pool).
    NotHttp,
    /// `Transfer-Encoding: gzip, chunked` over a body that is plain JSON in chunks: a coding the
    /// gateway cannot decode, announced on an answer that would read as valid if it were ignored
    /// (health checks are answered properly, so the node is in the pool).
    GzipChunked,
}

/// What the raw node saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

/// Reads one request (head and `Content-Length` body); `None` at end of stream.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<serde_json::Value> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                let body: Vec<u8> = buf.drain(..end + 4 + length).skip(end + 4).collect();
                return serde_json::from_slice(&body).ok();
            }
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A node on raw sockets at height 10 whose answers to anything but the health checks are
/// `result` (a JSON value) written in `style`.
async fn raw_node(style: Style, result: String) -> (std::net::SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    let result = Arc::new(result);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen2.connections.fetch_add(1, Ordering::Relaxed);
            let (seen, result) = (seen2.clone(), result.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(request) = read_request(&mut stream, &mut buf).await {
                    let id = request["id"].clone();
                    let method = request["method"].as_str().unwrap_or_default();
                    let health = matches!(method, "info.isBootstrapped" | "platform.getHeight");
                    let body = match method {
                        "info.isBootstrapped" => format!(
                            r#"{{"jsonrpc":"2.0","result":{{"isBootstrapped":true}},"id":{id}}}"#
                        ),
                        "platform.getHeight" => {
                            format!(r#"{{"jsonrpc":"2.0","result":{{"height":"10"}},"id":{id}}}"#)
                        }
                        _ => {
                            seen.requests.fetch_add(1, Ordering::Relaxed);
                            format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#)
                        }
                    } + "\n";
                    let style = match style {
                        Style::NotHttp | Style::GzipChunked if health => Style::Length,
                        other => other,
                    };
                    let keep = write_answer(&mut stream, style, body.as_bytes()).await;
                    if !keep {
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Writes one answer; returns whether the connection stays open.
async fn write_answer(stream: &mut TcpStream, style: Style, body: &[u8]) -> bool {
    let ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
    let written = match style {
        Style::Length | Style::DropsIdle => {
            let head = format!("{ok}Content-Length: {}\r\n\r\n", body.len());
            stream.write_all(&[head.as_bytes(), body].concat()).await
        }
        Style::CloseHeader => {
            let head = format!(
                "{ok}Connection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(&[head.as_bytes(), body].concat()).await
        }
        Style::UntilClose => {
            let head = format!("{ok}Connection: close\r\n\r\n");
            stream.write_all(&[head.as_bytes(), body].concat()).await
        }
        Style::NotHttp => stream.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await,
        Style::GzipChunked => {
            let head = format!("{ok}Transfer-Encoding: gzip, chunked\r\n\r\n");
            let chunk = format!("{:x}\r\n", body.len());
            let answer = [head.as_bytes(), chunk.as_bytes(), body, b"\r\n0\r\n\r\n"].concat();
            stream.write_all(&answer).await
        }
        Style::Chunked => {
            let head = format!("{ok}Transfer-Encoding: chunked\r\n\r\n");
            let mut result = stream.write_all(head.as_bytes()).await;
            // Pieces of uneven size, each its own write, so chunks and their sizes arrive split.
            for piece in body.chunks(body.len() / 3 + 1) {
                let size = format!("{:x};ext=1\r\n", piece.len());
                let chunk = [size.as_bytes(), piece, b"\r\n"].concat();
                result = result.and(stream.write_all(&chunk).await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            result.and(stream.write_all(b"0\r\nX-Trailer: yes\r\n\r\n").await)
        }
    };
    written.is_ok() && matches!(style, Style::Length | Style::Chunked)
}

/// A gateway with one upstream, no cache (every call reaches the node) and `tweak` applied.
async fn gateway(
    addr: std::net::SocketAddr,
    tweak: impl FnOnce(&mut snowgate::Config),
) -> snowgate::Gateway {
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.cache.enabled = false;
    config.rate_limit.enabled = false;
    config.health.interval = Duration::from_secs(60);
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "raw".into(),
        url: format!("http://{addr}"),
        ..Default::default()
    }];
    tweak(&mut config);
    snowgate::Gateway::start(config).await.unwrap()
}

/// `info.getNetworkID` through the gateway: the node answers it with its scripted result.
async fn get_network_id(gw: &snowgate::Gateway) -> support::Reply {
    post(
        &format!("{}/ext/info", gw.url()),
        &call("info.getNetworkID", "{}"),
    )
    .await
}

/// A result of about `n` bytes.
fn big_result(n: usize) -> String {
    format!(r#"{{"blob":"{}"}}"#, "ab".repeat(n / 2))
}

#[tokio::test]
async fn every_framing_a_node_may_use_is_read_whole() {
    let result = big_result(40_000);
    for style in [
        Style::Length,
        Style::Chunked,
        Style::CloseHeader,
        Style::UntilClose,
        Style::DropsIdle,
    ] {
        let (addr, seen) = raw_node(style, result.clone()).await;
        let gw = gateway(addr, |_| {}).await;
        // The pool asked the node who it is when it joined: count the test's calls from here.
        let before = seen.requests.load(Ordering::Relaxed);
        for i in 0..5 {
            let r = get_network_id(&gw).await;
            assert_eq!(r.status, 200, "call {i}: {}", r.body);
            assert_eq!(
                r.json()["result"]["blob"].as_str().map(str::len),
                Some(40_000)
            );
            assert_eq!(r.json()["id"], 1);
        }
        assert_eq!(seen.requests.load(Ordering::Relaxed) - before, 5);
        let connections = seen.connections.load(Ordering::Relaxed);
        match style {
            // Kept alive: the calls share the health check's connections.
            Style::Length | Style::Chunked => assert!(connections <= 3, "{connections}"),
            // One connection per exchange, health checks included.
            _ => assert!(connections >= 5, "{connections}"),
        }
        gw.shutdown().await;
    }
}

#[tokio::test]
async fn an_oversized_answer_is_refused_however_it_is_framed() {
    for style in [Style::Length, Style::Chunked, Style::UntilClose] {
        let (addr, _) = raw_node(style, big_result(300_000)).await;
        let gw = gateway(addr, |c| c.limits.response_bytes = 100_000).await;
        let r = get_network_id(&gw).await;
        assert_eq!(r.status, 502, "{}", r.body);
        assert!(r.body.contains("larger than 100000 bytes"), "{}", r.body);
        gw.shutdown().await;
    }
}

#[tokio::test]
async fn a_node_speaking_no_http_is_a_502() {
    let (addr, seen) = raw_node(Style::NotHttp, "{}".into()).await;
    let gw = gateway(addr, |_| {}).await;
    let r = get_network_id(&gw).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32603);
    assert!(r.body.contains("invalid HTTP answer"), "{}", r.body);
    assert!(seen.requests.load(Ordering::Relaxed) >= 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_refused_as_invalid_http() {
    let (addr, seen) = raw_node(Style::GzipChunked, r#"{"networkID":1}"#.into()).await;
    let gw = gateway(addr, |_| {}).await;
    let r = get_network_id(&gw).await;
    // Read as plain chunked, this answer would pass as a valid `networkID`.
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32603);
    assert!(r.body.contains("invalid HTTP answer"), "{}", r.body);
    assert!(!r.body.contains("networkID"), "{}", r.body);
    assert!(seen.requests.load(Ordering::Relaxed) >= 1);
    gw.shutdown().await;
}

/// A node that answers every request on a connection except the second, on which it hangs.
async fn hangs_on_second_request() -> (std::net::SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen2.connections.fetch_add(1, Ordering::Relaxed);
            let seen = seen2.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut n = 0;
                while read_request(&mut stream, &mut buf).await.is_some() {
                    n += 1;
                    seen.requests.fetch_add(1, Ordering::Relaxed);
                    if n == 2 {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        return;
                    }
                    let body = r#"{"jsonrpc":"2.0","result":{},"id":1}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_kept_alive_connection_times_out_at_each_exchange_deadline() {
    use snowgate::upstream::conn::{Connections, SendError};
    let (addr, seen) = hangs_on_second_request().await;
    let authority: http::uri::Authority = addr.to_string().parse().unwrap();
    let connections = Connections::new(
        &authority,
        Duration::from_secs(1),
        8,
        Duration::from_secs(60),
    )
    .unwrap();
    let by = |ms| tokio::time::Instant::now() + Duration::from_millis(ms);
    // Answered at once; the connection is kept, its timer still set for 300 ms from then.
    let r = connections
        .post("/ext/bc/P", b"{}", 1 << 20, by(300))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // The node hangs on the same connection: the later deadline of this exchange holds, neither
    // the earlier one of the first exchange nor none at all.
    let started = std::time::Instant::now();
    let e = connections
        .post("/ext/bc/P", b"{}", 1 << 20, by(700))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(e, SendError::Timeout), "{e:?}");
    assert!(
        waited >= Duration::from_millis(650) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(seen.connections.load(Ordering::Relaxed), 1);
    // The timed-out connection is closed, not reused: a new one carries the next request, and a
    // deadline shorter than any before is kept too.
    let r = connections
        .post("/ext/bc/P", b"{}", 1 << 20, by(200))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(seen.connections.load(Ordering::Relaxed), 2);
    let started = std::time::Instant::now();
    let e = connections
        .post("/ext/bc/P", b"{}", 1 << 20, by(250))
        .await
        .unwrap_err();
    assert!(matches!(e, SendError::Timeout), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(seen.requests.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn an_invalid_request_path_is_its_own_error_not_a_connect_failure() {
    use snowgate::upstream::conn::{Connections, SendError};
    let (addr, seen) = raw_node(Style::Length, "{}".into()).await;
    let authority: http::uri::Authority = addr.to_string().parse().unwrap();
    let connections = Connections::new(
        &authority,
        Duration::from_secs(1),
        8,
        Duration::from_secs(60),
    )
    .unwrap();
    let by = tokio::time::Instant::now() + Duration::from_secs(5);
    for path in ["ext/bc/P", "/ext/bc/P x", "/ext/\u{e9}", ""] {
        let e = connections
            .post(path, b"{}", 1 << 20, by)
            .await
            .unwrap_err();
        // A fixed category: neither "could not connect" (it never tried) nor the node's address.
        assert!(matches!(e, SendError::InvalidPath), "{path:?}: {e:?}");
        assert!(!format!("{e:?}").contains(&addr.port().to_string()));
    }
    // Nothing was sent, so no connection was opened; a valid path still goes through.
    assert_eq!(seen.connections.load(Ordering::Relaxed), 0);
    let r = connections
        .post("/ext/bc/P", b"{\"id\":1}", 1 << 20, by)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(seen.connections.load(Ordering::Relaxed), 1);
}
