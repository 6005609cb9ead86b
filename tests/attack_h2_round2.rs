//! Issue 23 (an attacker's second review), findings 1 and 6: HTTP/2 answers that wait on no node
//! (a cache hit, a 429, snowgate's own -32600) must be cut at `send_timeout` when the client never
//! opens its stream window past one byte; every graceful close ends within `send_timeout`; a
//! stream reset while its call is at the node does not keep the connection past `idle_timeout`;
//! and an id too long to echo is refused instead of being copied into every answer. The final
//! attack's F2: what one address leaves unread behind shut windows is bounded
//! (`limits.address_answer_bytes`), not only cut at `send_timeout`.
//!
//! The HTTP/2 clients here are the `h2` crate's, over a socket that can be made deaf: it goes on
//! reading (so the connection's end is seen) but hands nothing to the client, which then never
//! acknowledges a PING nor opens a window.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use support::*;

/// A socket whose reads can be swallowed: once `deaf` is set, what arrives is read and dropped,
/// and only the end of the connection is passed on.
struct DeafIo {
    inner: TcpStream,
    deaf: Arc<AtomicBool>,
}

impl AsyncRead for DeafIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.deaf.load(Ordering::SeqCst) {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let mut scratch = [0u8; 4096];
        loop {
            let mut sink = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(cx, &mut sink) {
                // The end of the connection (nothing put in `buf`).
                Poll::Ready(Ok(())) if sink.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => continue,
                other => return other,
            }
        }
    }
}

impl AsyncWrite for DeafIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One HTTP/2 connection of the `h2` client (also used by `unread_answers`).
pub(crate) struct H2 {
    sender: h2::client::SendRequest<Bytes>,
    /// The connection task: finished once the gateway has closed the connection.
    pub(crate) conn: tokio::task::JoinHandle<()>,
    deaf: Arc<AtomicBool>,
    base: String,
}

impl H2 {
    /// Connects to `addr` with this initial stream window (the client's flow control never
    /// opens it further unless a test releases what it read).
    async fn connect(addr: std::net::SocketAddr, stream_window: u32) -> H2 {
        H2::connect_from("127.0.0.1", addr, stream_window).await
    }

    /// [`H2::connect`] from the loopback address `local` (another client address: the whole of
    /// 127/8 is loopback).
    pub(crate) async fn connect_from(
        local: &str,
        addr: std::net::SocketAddr,
        stream_window: u32,
    ) -> H2 {
        let deaf = Arc::new(AtomicBool::new(false));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
        let io = DeafIo {
            inner: socket.connect(addr).await.unwrap(),
            deaf: deaf.clone(),
        };
        let (sender, conn) = h2::client::Builder::new()
            .initial_window_size(stream_window)
            .initial_connection_window_size(1024 * 1024)
            .handshake::<_, Bytes>(io)
            .await
            .unwrap();
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        H2 {
            sender,
            conn,
            deaf,
            base: format!("http://{addr}"),
        }
    }

    /// Starts a POST of `body` to `path` on a stream of its own.
    pub(crate) async fn post(&mut self, path: &str, body: &str) -> h2::client::ResponseFuture {
        let req = http::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let sender = self.sender.clone().ready().await.unwrap();
        self.sender = sender;
        let (answer, mut stream) = self.sender.send_request(req, false).unwrap();
        stream
            .send_data(Bytes::copy_from_slice(body.as_bytes()), true)
            .unwrap();
        answer
    }

    /// Whether the connection has ended within `limit`.
    async fn closed_within(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, &mut self.conn).await.is_ok()
    }
}

/// Reads a stream's body to its end without releasing any window: (bytes got, ended in error).
async fn drain(body: &mut h2::RecvStream) -> (usize, bool) {
    let mut got = 0;
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(b) => got += b.len(),
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// `snowgate_open_connections{protocol="http2"}` of the gateway.
fn open_h2(gateway: &snowgate::Gateway) -> i64 {
    gateway
        .metrics()
        .open_connections
        .with_label_values(&["http2"])
        .get()
}

const CACHED: &str = r#"{"jsonrpc":"2.0","id":1,"method":"info.getNetworkName"}"#;
const BAD_VERSION: &str = r#"{"jsonrpc":"1.0","id":1,"method":"info.getNetworkName"}"#;

#[tokio::test]
async fn one_byte_windows_holding_cache_hits_429s_and_refusals_are_cut_at_send_timeout() {
    // send_timeout alone: idle_timeout is far away.
    one_byte_windows_are_cut(Duration::from_secs(1), Duration::from_secs(120)).await;
}

#[tokio::test]
async fn one_byte_windows_are_cut_after_an_idle_close_too() {
    // The idle close first (its GOAWAY waits for the streams), then send_timeout.
    one_byte_windows_are_cut(Duration::from_secs(2), Duration::from_secs(1)).await;
}

/// One HTTP/2 connection whose streams get one byte of window each, asking for cache hits (some
/// answered 429 once the quota is spent) and for -32600s: every stream ends in an error and the
/// gateway closes the connection within 10 × `send`.
async fn one_byte_windows_are_cut(send: Duration, idle: Duration) {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = send;
        c.limits.idle_timeout = idle;
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 10;
    })
    .await;
    let url = format!("{}/ext/info", cluster.url());
    let warm = post(&url, CACHED).await;
    assert_eq!(warm.status, 200, "{}", warm.body);

    let mut h2 = H2::connect(cluster.gateway.addr(), 1).await;
    let mut answers = Vec::new();
    for i in 0..40 {
        let body = if i % 4 == 3 { BAD_VERSION } else { CACHED };
        answers.push(h2.post("/ext/info", body).await);
    }
    let mut statuses = Vec::new();
    let mut bodies = Vec::new();
    for a in answers {
        let r = tokio::time::timeout(Duration::from_secs(10), a)
            .await
            .expect("an answer's head never came")
            .unwrap();
        statuses.push(r.status().as_u16());
        bodies.push(r.into_body());
    }
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(
        cluster.nodes[0].control().call_count("info.getNetworkName"),
        1,
        "only the warm-up reached the node"
    );

    let bound = idle.min(send) + send * 10;
    let started = Instant::now();
    for body in &mut bodies {
        let left = bound.saturating_sub(started.elapsed());
        let (got, failed) = tokio::time::timeout(left, drain(body))
            .await
            .expect("a stream holding an answer behind a one-byte window was never cut");
        assert!(
            failed,
            "a stream ended normally with {got} bytes behind a one-byte window"
        );
        assert!(got <= 1, "{got} bytes passed a one-byte window");
    }
    assert!(
        h2.closed_within(bound.saturating_sub(started.elapsed()))
            .await,
        "the connection was not closed"
    );
    assert!(
        eventually(Duration::from_secs(10), || open_h2(&cluster.gateway) == 0).await,
        "the gateway still counts the connection open"
    );
}

#[tokio::test]
async fn a_client_that_never_acks_the_goaway_ping_is_closed_within_send_timeout() {
    let (idle, send) = (Duration::from_secs(1), Duration::from_secs(2));
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = send;
        c.limits.idle_timeout = idle;
    })
    .await;
    let mut h2 = H2::connect(cluster.gateway.addr(), 65_535).await;
    let answer = h2.post("/ext/info", CACHED).await;
    let mut body = answer.await.unwrap().into_body();
    let (got, failed) = drain(&mut body).await;
    assert!(got > 0 && !failed);
    // From now on the client reads nothing: the GOAWAY's PING is never acknowledged.
    h2.deaf.store(true, Ordering::SeqCst);
    assert!(
        h2.closed_within(idle + send * 10).await,
        "a graceful close whose PING was never acknowledged went on past send_timeout"
    );
    assert!(
        eventually(Duration::from_secs(10), || open_h2(&cluster.gateway) == 0).await,
        "the gateway still counts the connection open"
    );
}

#[tokio::test]
async fn a_stream_reset_while_its_call_is_at_the_node_does_not_hold_the_connection() {
    let (node, arrivals, _) = slow_node(Duration::from_secs(60)).await;
    let idle = Duration::from_secs(1);
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.rate_limit.enabled = false;
    config.health.interval = Duration::from_millis(100);
    config.health.timeout = Duration::from_millis(100);
    config.limits.idle_timeout = idle;
    config.limits.send_timeout = Duration::from_secs(2);
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "slow".into(),
        url: format!("http://{node}"),
        ..Default::default()
    }];
    let gw = snowgate::Gateway::start(config).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || gw.pool().status().healthy).await,
        "the node never became healthy"
    );
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));

    let mut h2 = H2::connect(gw.addr(), 65_535).await;
    let mut resets = Vec::new();
    for _ in 0..3 {
        let req = http::Request::post(format!("{}/ext/bc/P", h2.base))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let mut sender = h2.sender.clone().ready().await.unwrap();
        let (answer, mut stream) = sender.send_request(req, false).unwrap();
        stream
            .send_data(Bytes::copy_from_slice(body.as_bytes()), true)
            .unwrap();
        resets.push((answer, stream));
    }
    assert!(
        eventually(Duration::from_secs(10), || arrivals.load(Ordering::SeqCst)
            >= 1)
        .await,
        "no call reached the node"
    );
    // The client gives up on its calls while the node works on them.
    for (answer, mut stream) in resets {
        stream.send_reset(h2::Reason::CANCEL);
        drop(answer);
    }
    assert!(
        h2.closed_within(idle * 10).await,
        "a connection whose streams were reset was not closed for idleness"
    );
    assert!(
        eventually(Duration::from_secs(10), || open_h2(&gw) == 0).await,
        "the gateway still counts the connection open"
    );
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":{}}`.
fn with_id(id: &str, method: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{}}}}"#)
}

#[tokio::test]
async fn an_id_too_long_to_echo_is_refused_with_a_short_answer() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 1000;
    })
    .await;
    let url = format!("{}/ext/info", cluster.url());

    // 256 bytes of id are echoed as they are.
    let fits = format!("\"{}\"", "a".repeat(254));
    let r = post(&url, &with_id(&fits, "info.getNetworkName")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["id"].as_str().map(str::len),
        Some(254),
        "{}",
        r.body
    );
    assert_eq!(r.json()["result"]["networkName"], "local");
    let calls = cluster.nodes[0].control().call_count("info.getNetworkName");

    // A byte more, or a whole MiB of `<`: the short -32600, nothing echoed, nothing forwarded.
    for id in [
        format!("\"{}\"", "a".repeat(255)),
        format!("\"{}\"", "<".repeat(1000 * 1024)),
        format!("[{}1]", "1, ".repeat(200)),
    ] {
        for body in [
            with_id(&id, "info.getNetworkName"),
            with_id(&id, "info.noSuchMethod"),
            format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"info.getNetworkName"}}"#),
        ] {
            let r = post(&url, &body).await;
            assert_eq!(r.status, 200);
            assert!(
                r.body.len() < 200,
                "{} bytes: {:.300}",
                r.body.len(),
                r.body
            );
            let v = r.json();
            assert_eq!(v["error"]["code"], -32600, "{}", r.body);
            assert_eq!(v["id"], serde_json::Value::Null);
            assert_eq!(v["error"]["data"], serde_json::Value::Null);
        }
    }
    assert_eq!(
        cluster.nodes[0].control().call_count("info.getNetworkName"),
        calls
    );

    // In a batch, each element on its own.
    let big = format!("\"{}\"", "<".repeat(4096));
    let batch = format!(
        "[{},{}]",
        with_id("7", "info.getNetworkName"),
        with_id(&big, "info.getNetworkName")
    );
    let r = post(&url, &batch).await;
    assert!(r.body.len() < 400, "{:.500}", r.body);
    let v = r.json();
    assert_eq!(v[0]["id"], 7);
    assert_eq!(v[0]["result"]["networkName"], "local");
    assert_eq!(v[1]["id"], serde_json::Value::Null);
    assert_eq!(v[1]["error"]["code"], -32600);

    // Over quota, the 429 does not echo it either.
    let limited = Cluster::start(1, Duration::from_secs(60), |c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 10;
    })
    .await;
    let url = format!("{}/ext/info", limited.url());
    let mut statuses = Vec::new();
    for _ in 0..15 {
        let r = post(&url, &with_id(&big, "info.getNetworkName")).await;
        assert!(
            r.body.len() < 200,
            "{} bytes: {:.300}",
            r.body.len(),
            r.body
        );
        assert_eq!(r.json()["id"], serde_json::Value::Null);
        statuses.push(r.status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
}

#[tokio::test]
async fn snowgate_echoes_at_most_a_small_bound_of_what_the_client_sent() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let url = format!("{}/ext/bc/P", cluster.url());

    // The node's -32700 / -32600 `data` (the envelope as decoded) is kept when small...
    let small = r#"{"jsonrpc":2.0,"id":7,"method":"platform.getHeight","params":{"a":"<"}}"#;
    let r = post(&url, small).await;
    assert_eq!(
        r.json()["error"]["data"],
        serde_json::json!({"jsonrpc":"","method":"platform.getHeight","params":{"a":"<"},"id":7})
    );
    assert!(r.body.contains(r#"{"a":"\u003c"}"#), "{}", r.body);
    // ...and null when it would be large.
    let lt = "<".repeat(100 * 1024);
    for body in [
        format!(
            r#"{{"jsonrpc":2.0,"id":7,"method":"platform.getHeight","params":{{"a":"{lt}"}}}}"#
        ),
        format!(r#"{{"jsonrpc":"1.0","id":7,"method":"platform.getHeight","params":["{lt}"]}}"#),
        format!(r#"{{"jsonrpc":"1.0","id":7,"method":"{lt}"}}"#),
    ] {
        let r = post(&url, &body).await;
        assert!(
            r.body.len() < 300,
            "{} bytes: {:.300}",
            r.body.len(),
            r.body
        );
        let v = r.json();
        assert_eq!(v["error"]["data"], serde_json::Value::Null, "{}", r.body);
        assert_eq!(v["id"], 7);
    }
    // A method name or a duplicate key of any length is quoted short in the message.
    for body in [
        with_id("7", &lt),
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"platform.getHeight","params":{{"{lt}":1,"{lt}":2}}}}"#
        ),
    ] {
        let r = post(&url, &body).await;
        assert!(
            r.body.len() < 1024,
            "{} bytes: {:.300}",
            r.body.len(),
            r.body
        );
        assert!(r.json()["error"]["message"].is_string(), "{}", r.body);
    }
}

/// A batch of `n` cached calls, each with an id of 200 characters (so the answer is large).
pub(crate) fn big_answer_batch(n: usize) -> String {
    let calls: Vec<String> = (0..n)
        .map(|i| with_id(&format!("\"{i:0>200}\""), "info.getNetworkName"))
        .collect();
    format!("[{}]", calls.join(","))
}

#[tokio::test]
async fn what_one_address_leaves_unread_behind_shut_windows_is_bounded() {
    // The final attack's F2: 64 connections × 64 streams of batches whose answers the client
    // never takes were all held until send_timeout (536 MB at the shipped 30 s). With a bound of
    // 256 KiB per address, one address's streams hold at most that plus the answer that crossed
    // it (and one per worker, made at the same moment); the rest get a short 503; another
    // address is served in full meanwhile, and so is the same address once it has nothing unread.
    const BOUND: usize = 256 * 1024;
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = Duration::from_secs(120);
        c.limits.idle_timeout = Duration::from_secs(120);
        c.limits.address_answer_bytes = BOUND;
    })
    .await;
    let url = format!("{}/ext/info", cluster.url());
    let warm = post(&url, CACHED).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let batch = big_answer_batch(50);
    let reference = post(&url, &batch).await;
    assert_eq!(reference.status, 200, "{}", reference.body);
    let answer_len = reference.body.len();
    assert!(answer_len > 10_000, "{answer_len}");

    // 4 connections × 32 streams from 127.0.0.1, windows of one byte never opened: 128 answers,
    // about 1.7 MB if every one were made and held.
    const CONNS: usize = 4;
    let mut stalled = Vec::new();
    let mut heads = Vec::new();
    for _ in 0..CONNS {
        let mut h2 = H2::connect(cluster.gateway.addr(), 1).await;
        for _ in 0..32 {
            heads.push(h2.post("/ext/info", &batch).await);
        }
        stalled.push(h2);
    }
    let (mut held, mut refused) = (0usize, 0usize);
    let mut kept = Vec::new();
    for head in heads {
        let r = tokio::time::timeout(Duration::from_secs(60), head)
            .await
            .expect("an answer's head never came")
            .unwrap();
        match r.status().as_u16() {
            200 => held += 1,
            503 => {
                refused += 1;
                assert_eq!(r.headers()["retry-after"], "1");
                let mut body = r.into_body();
                let mut text = Vec::new();
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.unwrap();
                    let _ = body.flow_control().release_capacity(chunk.len());
                    text.extend_from_slice(&chunk);
                }
                let text = String::from_utf8_lossy(&text).into_owned();
                assert!(text.contains("-32603"), "{text}");
                assert!(text.contains("too many answers not read"), "{text}");
                continue;
            }
            other => panic!("status {other}"),
        }
        kept.push(r.into_body());
    }
    // (As before the bound became the address's whatever its connections: an answer per
    // connection more.)
    let most = BOUND + (CONNS + 2) * answer_len;
    assert!(
        held * answer_len <= most,
        "{held} answers of {answer_len} bytes held unread (bound {BOUND}, at most {most})"
    );
    assert!(refused > 0, "no answer was refused ({held} held)");
    assert_eq!(held + refused, CONNS * 32);
    let counted = cluster
        .gateway
        .metrics()
        .http_rejections
        .with_label_values(&["answers_unread"])
        .get();
    assert_eq!(counted, refused as u64);

    // Another address, over HTTP/2 with its windows open, gets every answer whole.
    let mut other = H2::connect_from("127.0.0.2", cluster.gateway.addr(), 1 << 20).await;
    let mut answers = Vec::new();
    for _ in 0..16 {
        answers.push(other.post("/ext/info", &batch).await);
    }
    for a in answers {
        let r = tokio::time::timeout(Duration::from_secs(60), a)
            .await
            .expect("another address's answer never came")
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut body = r.into_body();
        let mut got = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            got += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        assert_eq!(got, answer_len);
    }
    // The stalled address itself is refused on a new connection too (a connection's first
    // answer is no longer exempt: only an address holding nothing is), and served once its
    // stalled connections are gone.
    let again = post(&url, &batch).await;
    assert_eq!(again.status, 503, "{:.300}", again.body);
    assert!(again
        .body
        .contains("too many answers not read from this address"));
    drop(kept);
    for h2 in stalled {
        h2.conn.abort();
    }
    let mut again = post(&url, &batch).await;
    for _ in 0..100 {
        if again.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        again = post(&url, &batch).await;
    }
    assert_eq!(again.status, 200, "{:.300}", again.body);
    assert_eq!(again.body.len(), answer_len);
}
