//! Clients that try to hold what snowgate has: bodies that never finish, one address opening every
//! connection, HTTP/2 streams full of unfinished bodies, and clients that stop reading large
//! answers. Each is bounded, and measured where memory is the point (the real binary's RSS).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// A request head for `path` declaring a body of `len` bytes.
fn request_head(path: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// An HTTP/1.1 answer split into status, headers (lower-cased) and body, checking that the body
/// is exactly as long as its `content-length` says.
fn framed(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head[9..12].parse().unwrap();
    let head = head.to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length");
    assert_eq!(
        body.len(),
        len,
        "content-length does not frame the body: {text:?}"
    );
    (status, head, body.to_string())
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_the_connection_closes() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.body_timeout = Duration::from_millis(500);
    })
    .await;
    let mut s = TcpStream::connect(addr_of(&cluster.url())).await.unwrap();
    s.write_all(request_head("/ext/bc/P", 100).as_bytes())
        .await
        .unwrap();
    s.write_all(br#"{"jsonrpc":"#).await.unwrap();
    let started = Instant::now();
    let raw = read_until_closed(&mut s, Duration::from_secs(5))
        .await
        .expect("the connection stayed open with a half-sent body");
    assert!(started.elapsed() >= Duration::from_millis(400));
    let (status, head, body) = framed(&raw);
    assert_eq!(status, 408, "{body}");
    assert!(head.contains("connection: close"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32600);
    assert!(v["error"]["message"].as_str().unwrap().contains("500ms"));

    // A body trickled a byte at a time is cut the same way, however steady the trickle.
    let mut s = TcpStream::connect(addr_of(&cluster.url())).await.unwrap();
    s.write_all(request_head("/ext/bc/P", 1000).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_secs(5) {
        if s.write_all(b" ").await.is_err() {
            cut = true;
            break;
        }
        let mut buf = [0u8; 512];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), s.read(&mut buf)).await {
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"));
            cut = true;
            break;
        }
    }
    assert!(cut, "a trickled body was never cut");
}

#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.max_connections_per_ip = 8;
        c.limits.body_timeout = Duration::from_secs(30);
    })
    .await;
    let addr = addr_of(&cluster.url());
    // Eight half-sent bodies from 127.0.0.1.
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request_head("/ext/bc/P", 100).as_bytes())
            .await
            .unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The ninth from the same address is refused at once, framed correctly.
    let mut ninth = TcpStream::connect(addr).await.unwrap();
    let raw = read_until_closed(&mut ninth, Duration::from_secs(5))
        .await
        .unwrap();
    let (status, head, body) = framed(&raw);
    assert_eq!(status, 503, "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("from this address"),
        "{body}"
    );
    // Another address is served meanwhile.
    let other = TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    let call = call("platform.getHeight", "{}");
    other
        .write_all(format!("{}{call}", request_head("/ext/bc/P", call.len())).as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), other.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Once the held connections close, the address gets its room back.
    // (The gateway sees the closes when it next reads them: asked again until then, for at most
    // a minute.)
    drop(held);
    let url = format!("{}/ext/bc/P", cluster.url());
    let mut last = None;
    for _ in 0..600 {
        let r = post(&url, &call).await;
        if r.status == 200 {
            last = None;
            break;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.is_none(), "{last:?}");
}

#[tokio::test]
async fn connections_over_max_connections_get_a_correctly_framed_503() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.max_connections = 2;
    })
    .await;
    let addr = addr_of(&cluster.url());
    let _a = TcpStream::connect(addr).await.unwrap();
    let _b = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let raw = read_until_closed(&mut c, Duration::from_secs(5))
        .await
        .unwrap();
    let (status, _, body) = framed(&raw);
    assert_eq!(status, 503);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(
        v["error"]["message"],
        "too many open connections, retry later"
    );
}

/// A body that sends `len` bytes in 16 KiB frames and then never ends.
fn unfinished_body(
    len: usize,
) -> http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible> {
    let frames = (0..len.div_ceil(16 * 1024)).map(move |i| {
        let n = (len - i * 16 * 1024).min(16 * 1024);
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(vec![b' '; n])))
    });
    let stream = futures_util::StreamExt::chain(
        futures_util::stream::iter(frames),
        futures_util::stream::pending(),
    );
    http_body_util::StreamBody::new(stream).boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_of_unfinished_bodies_cannot_buffer_more_than_the_connection_room() {
    let node = snowgate::devnode::DevNode::spawn(Default::default())
        .await
        .unwrap();
    let config = format!(
        "[limits]\nbody_timeout = \"60s\"\n[rate_limit]\nenabled = false\n[admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\
         [[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = binary::Served::start(&config, "warn");
    let addr = addr_of(&served.url);
    let before = served.rss_kib();
    // Two connections, 200 streams each, every stream sending 1 MiB - 1 of a 1 MiB body.
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mut sender = h2_connect(addr, 65_535).await;
        for _ in 0..200 {
            let req = http::Request::post(format!("{}/ext/bc/P", served.url))
                .header("content-type", "application/json")
                .header("content-length", (1 << 20).to_string())
                .body(unfinished_body((1 << 20) - 1))
                .unwrap();
            sender.ready().await.unwrap();
            let fut = sender.send_request(req);
            tasks.push(tokio::spawn(fut));
        }
    }
    // Give the bodies time to arrive as far as snowgate lets them.
    let mut peak = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        peak = peak.max(served.rss_kib().saturating_sub(before));
    }
    eprintln!(
        "RSS growth with 2 x 200 unfinished HTTP/2 bodies: {} KiB",
        peak
    );
    assert!(
        peak < 48 * 1024,
        "two HTTP/2 connections made snowgate hold {peak} KiB of request bodies"
    );
    // /metrics says how much is buffered: at most the room of the two connections.
    let metrics = client()
        .get(format!("{}/metrics", served.url))
        .header("authorization", format!("Bearer {}", support::ADMIN_KEY))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let buffered: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("snowgate_request_body_buffered_bytes "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eprintln!("request body bytes buffered: {buffered}");
    assert!(
        buffered > 0 && buffered <= 2 * 4 * 1024 * 1024,
        "{buffered}"
    );
    // Meanwhile an honest client is served.
    let r = post(
        &format!("{}/ext/bc/P", served.url),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for t in tasks {
        t.abort();
    }
}

/// A scripted node whose `platform.getTx` answer is `size` bytes long.
async fn big_answer_node(size: usize) -> SocketAddr {
    let tx = "0".repeat(size);
    scripted_node(100, move |_, req| {
        let id = &req["id"];
        format!(r#"{{"jsonrpc":"2.0","result":{{"tx":"0x{tx}","encoding":"hex"}},"id":{id}}}"#)
    })
    .await
}

const GET_TX: &str = r#"{"jsonrpc":"2.0","id":7,"method":"platform.getTx","params":{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_share_one_copy_of_an_answer_and_are_cut_after_send_timeout() {
    const ANSWER: usize = 4 * 1024 * 1024;
    let node = big_answer_node(ANSWER).await;
    let config = format!(
        "[limits]\nsend_timeout = \"2s\"\nmax_connections_per_ip = 300\n\
         [rate_limit]\nenabled = false\n[health]\ninterval = \"30s\"\n\
         [cache]\nverify = \"off\"\n\
         [[upstreams]]\nname = \"n\"\nurl = \"http://{node}\"\n"
    );
    // (`verify = "off"`: the node's 4 MiB of zeros are no tx of the ID asked.)
    let served = binary::Served::start(&config, "warn");
    let addr = addr_of(&served.url);
    let url = format!("{}/ext/bc/P", served.url);
    // Cached once, read whole.
    let first = post(&url, GET_TX).await;
    assert_eq!(first.status, 200);
    assert!(first.body.len() > ANSWER);
    assert_eq!(post(&url, GET_TX).await.header("x-cache"), Some("HIT"));
    let before = served.rss_kib();

    // 100 HTTP/1.1 clients ask for it and do not read.
    let mut readers = Vec::new();
    for _ in 0..100 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        s.write_all(format!("{}{GET_TX}", request_head("/ext/bc/P", GET_TX.len())).as_bytes())
            .await
            .unwrap();
        readers.push(s);
    }
    let mut peak = 0;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        peak = peak.max(served.rss_kib().saturating_sub(before));
    }
    eprintln!("RSS growth with 100 stalled readers of a 4 MiB answer: {peak} KiB");
    assert!(
        peak < 64 * 1024,
        "100 clients that do not read made snowgate hold {peak} KiB"
    );

    // One HTTP/2 connection, 190 requests for it, with a shut window.
    let mut sender = h2_connect(addr, 0).await;
    let streams = h2_posts(&mut sender, &url, GET_TX, 190).await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        peak = peak.max(served.rss_kib().saturating_sub(before));
    }
    eprintln!("RSS growth with the stalled HTTP/2 streams too: {peak} KiB");
    assert!(
        peak < 96 * 1024,
        "a shut HTTP/2 window made snowgate hold {peak} KiB"
    );

    // After send_timeout, every stalled connection is cut: the readers get a truncated answer
    // and the end of the stream, the HTTP/2 streams fail.
    let started = Instant::now();
    for mut s in readers {
        let left = Duration::from_secs(15).saturating_sub(started.elapsed());
        let got = read_until_closed(&mut s, left)
            .await
            .expect("a client that stopped reading was never cut off");
        assert!(got.len() < ANSWER, "the whole answer was sent after all");
    }
    for t in streams {
        let left = Duration::from_secs(15).saturating_sub(started.elapsed());
        let done = tokio::time::timeout(left, t)
            .await
            .expect("a stalled HTTP/2 stream was never ended")
            .unwrap();
        assert_eq!(done, None, "a stream with a shut window got its answer");
    }
    // And the gateway serves on.
    let r = post(&url, GET_TX).await;
    assert_eq!(r.status, 200);
}

/// A client that writes its whole oversized body before it reads (Python's `http.client` and
/// `requests` do) gets its 413, every time: snowgate reads and discards what the client still
/// sends after the answer, for a bounded time, before it closes (as nginx's lingering close), so
/// the kernel never resets the connection over unread bytes and destroys the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_its_whole_oversized_body_first_gets_its_413() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let addr = addr_of(&cluster.url());
    // As Python's http.client sends it: the head, then the body, then it reads; a write that
    // fails (the connection reset) leaves it with no answer.
    let len = 2 << 20;
    let head = request_head("/ext/bc/P", len).into_bytes();
    let body = vec![b' '; len];
    let mut answers = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let wrote = match s.write_all(&head).await {
            Ok(()) => s.write_all(&body).await.is_ok(),
            Err(_) => false,
        };
        let mut raw = Vec::new();
        if wrote {
            let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut raw)).await;
        }
        let status = String::from_utf8_lossy(&raw)
            .split(' ')
            .nth(1)
            .map(str::to_string);
        answers.push((wrote, status));
    }
    let got_413 = answers
        .iter()
        .filter(|(wrote, status)| *wrote && status.as_deref() == Some("413"))
        .count();
    assert_eq!(got_413, 20, "{answers:?}");

    // A client that keeps sending after its 413 is cut after a bounded time and amount (the
    // linger's: 5 s or 16 MiB): its writes fail well within a minute.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request_head("/ext/bc/P", 1 << 40).as_bytes())
        .await
        .unwrap();
    let chunk = vec![b' '; 1 << 20];
    let sent = tokio::time::timeout(Duration::from_secs(60), async {
        let mut sent = 0usize;
        // At most 64 GiB: bounded, and never reached.
        for _ in 0..65_536 {
            if s.write_all(&chunk).await.is_err() {
                return Some(sent);
            }
            sent += chunk.len();
        }
        None
    })
    .await;
    let sent = sent
        .expect("a client sending for ever was not cut within a minute")
        .expect("a client sending for ever was never cut");
    assert!(sent <= 64 << 20, "{sent} bytes taken after the 413");
}
