//! Issue 23, second round on quotas and body room, attacked through a real gateway on loopback:
//!
//! * a client over its quota is refused before its body is read (declared length or chunked), and
//!   the 429 echoes nothing of it;
//! * a body is charged by its size as well as by its calls;
//! * two addresses filling bodies cannot make a third client's call wait for body room.
//!
//! `load_*` (ignored) are the load scripts behind the README's figures: run them against a release
//! gateway (see their docs).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const SLOW_CHAIN: Duration = Duration::from_secs(60);
const MIB: usize = 1024 * 1024;

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// A connection to the gateway at `url` from `local` (any address of 127.0.0.0/8 is loopback).
async fn connect_from(local: &str, url: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    socket.connect(addr_of(url)).await.unwrap()
}

/// A request head for `path` declaring a body of `len` bytes.
fn request_head(path: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// The status, lower-cased head and body of the first HTTP/1.1 answer in `raw`.
fn answer(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head[9..12].parse().unwrap();
    let head = head.to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length");
    (status, head, body[..len.min(body.len())].to_string())
}

/// Reads one whole HTTP/1.1 answer (head and `content-length` body) within `limit`; `None` if it
/// did not come.
async fn read_answer(s: &mut TcpStream, limit: Duration) -> Option<(u16, String, String)> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return Some(answer(&raw));
            }
        }
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) | Ok(Err(_)) | Ok(Ok(0)) => return None,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
        }
    }
}

/// The value of the series `series` (name and labels, as exposed) in a `/metrics` text.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn limited(cfg: &mut snowgate::Config, rps: u32, burst: u32) {
    cfg.rate_limit.enabled = true;
    cfg.rate_limit.requests_per_second = rps;
    cfg.rate_limit.burst = burst;
    // Every call costs its full cost, hit or miss: the counts below are exact.
    cfg.rate_limit.cached_cost_factor = 1.0;
}

/// Calls `platform.getHeight` until the first 429 (at most `bound` calls); the calls that passed.
async fn spend_quota(url: &str, headers: &[(&str, &str)], bound: usize) -> usize {
    let body = call("platform.getHeight", "{}");
    for passed in 0..bound {
        let r = post_with(url, &body, headers).await;
        if r.status == 429 {
            return passed;
        }
        assert_eq!(r.status, 200, "{}", r.body);
    }
    panic!("never refused in {bound} calls");
}

/// A `platform.getHeight` call padded with whitespace to exactly `len` bytes.
fn padded_call(len: usize) -> String {
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":{"#;
    let pad = len - head.len() - 2;
    format!("{head}{}}}}}", " ".repeat(pad))
}

#[tokio::test]
async fn an_over_quota_client_gets_its_429_before_sending_its_body() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 20);
        // Longer than the test waits: an answer within it was not waiting for the body.
        cfg.limits.body_timeout = Duration::from_secs(120);
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let passed = spend_quota(&url, &[], 100).await;
    assert!((19..=21).contains(&passed), "{passed}");

    // Declares 1 MiB, sends 100 bytes of it with a mark, and never the rest.
    let mut s = connect_from("127.0.0.1", &c.url()).await;
    s.write_all(request_head("/ext/bc/P", MIB).as_bytes())
        .await
        .unwrap();
    let start = format!(r#"{{"jsonrpc":"2.0","id":"MARK-{}","#, "x".repeat(60));
    s.write_all(start.as_bytes()).await.unwrap();
    let (status, head, body) = read_answer(&mut s, Duration::from_secs(30))
        .await
        .expect("no answer while the body was unfinished: it waited for the body");
    assert_eq!(status, 429, "{body}");
    assert!(head.contains("retry-after:"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32005, "{body}");
    assert!(v["id"].is_null(), "{body}");
    assert!(!body.contains("MARK"), "the 429 echoed the body: {body}");
    // The rest of the body is never read as a request: the connection closes.
    let rest = read_until_closed(&mut s, Duration::from_secs(30)).await;
    assert!(rest.is_some(), "the connection stayed open after the 429");

    // Nothing of it was buffered, and the refusal is recorded once, before any method was known.
    let metrics = get_metrics(&c.url()).await;
    assert_eq!(
        metric(&metrics, "snowgate_request_body_buffered_bytes"),
        Some(0.0)
    );
    let early = r#"snowgate_requests_total{method="-",outcome="rate_limited"}"#;
    assert_eq!(metric(&metrics, early), Some(1.0), "{metrics}");
    c.gateway.shutdown().await;
}

/// Sends a request declaring a 1 MiB body from `local`, and 100 bytes of it; the answer, which
/// must come while the body is unfinished.
async fn answer_to_an_unfinished_body(local: &str, url: &str) -> (u16, String, String) {
    let mut s = connect_from(local, url).await;
    s.write_all(request_head("/ext/bc/P", MIB).as_bytes())
        .await
        .unwrap();
    let start = format!(r#"{{"jsonrpc":"2.0","id":"MARK-{}","#, "x".repeat(60));
    s.write_all(start.as_bytes()).await.unwrap();
    read_answer(&mut s, Duration::from_secs(30))
        .await
        .expect("no answer while the body was unfinished: it waited for the body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_global_quotas_too_an_over_quota_client_is_refused_before_its_body() {
    let redis = support::redis::RedisServer::start();
    let url = redis.url();
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.redis = Some(snowgate::config::RedisConfig {
            url: Some(url),
            timeout: Duration::from_millis(500),
            ..Default::default()
        });
        limited(cfg, 1, 20);
        cfg.limits.body_timeout = Duration::from_secs(120);
    })
    .await;
    let rpc = format!("{}/ext/bc/P", c.url());
    let passed = spend_quota(&rpc, &[], 100).await;
    assert!((18..=21).contains(&passed), "{passed}");
    let (status, _, body) = answer_to_an_unfinished_body("127.0.0.1", &c.url()).await;
    assert_eq!(status, 429, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32005, "{body}");
    assert!(v["id"].is_null(), "{body}");
    assert!(!body.contains("MARK"), "the 429 echoed the body: {body}");
    // A fresh client's 1 MiB body is charged to its quota in Redis (16 units of its 20) before
    // it is read: a second one in a row cannot be paid, and is refused unread.
    let big = padded_call(MIB);
    let mut fresh = connect_from("127.0.0.2", &c.url()).await;
    fresh
        .write_all(format!("{}{big}", request_head("/ext/bc/P", big.len())).as_bytes())
        .await
        .unwrap();
    let (status, _, body) = read_answer(&mut fresh, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = answer_to_an_unfinished_body("127.0.0.2", &c.url()).await;
    assert_eq!(status, 429, "{body}");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_chunked_body_is_charged_as_it_arrives_and_cut_when_over_quota() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 20);
        cfg.limits.body_bytes = 4 * MIB;
        cfg.limits.body_timeout = Duration::from_secs(120);
    })
    .await;
    // A fresh client: 20 units of burst, one per 64 KiB. It sends 64 KiB chunks, up to 3 MiB
    // (48 units), and never the last chunk.
    let mut s = connect_from("127.0.0.1", &c.url()).await;
    s.write_all(
        b"POST /ext/bc/P HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let (mut reader, mut writer) = s.into_split();
    let sender = tokio::spawn(async move {
        let chunk = format!("10000\r\n{}\r\n", " ".repeat(64 * 1024));
        for _ in 0..48 {
            if writer.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
        // Never the terminating chunk: the body stays unfinished.
        std::future::pending::<()>().await;
    });
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, reader.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => raw.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    // The rest of the answer (its body is small).
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(5), reader.read(&mut buf)).await {
        raw.extend_from_slice(&buf[..n]);
    }
    sender.abort();
    assert!(
        !raw.is_empty(),
        "no answer while the body was unfinished: it waited for the body"
    );
    let (status, _, body) = answer(&raw);
    assert_eq!(status, 429, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32005, "{body}");
    assert!(v["id"].is_null(), "{body}");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_large_body_costs_one_unit_per_64_kib_more_than_a_small_one() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 60);
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let a = [("x-forwarded-for", "198.51.100.1")];
    let b = [("x-forwarded-for", "198.51.100.2")];
    // A: one call in a body of exactly 1 MiB (the default `body_bytes`); B: the same call, small.
    let big = padded_call(MIB);
    assert_eq!(big.len(), MIB);
    let r = post_with(&url, &big, &a).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["result"]["height"].is_string(), "{}", r.body);
    let r = post_with(&url, &call("platform.getHeight", "{}"), &b).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // What is left, each read by one batch of 60 calls (one unit each), close together in time.
    let batch = format!("[{}]", vec![call("platform.getHeight", "{}"); 60].join(","));
    let mut left = Vec::new();
    for who in [&a, &b] {
        let r = post_with(&url, &batch, who).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let answers = v.as_array().unwrap();
        assert_eq!(answers.len(), 60);
        left.push(answers.iter().filter(|a| a["result"].is_object()).count());
    }
    let (left_a, left_b) = (left[0], left[1]);
    // B: 60 - 1 = 59 (a unit may have refilled); A: 16 units fewer for its 16 × 64 KiB.
    assert!((59..=60).contains(&left_b), "B had {left_b} left");
    let diff = left_b - left_a;
    assert!(
        (15..=17).contains(&diff),
        "a 1 MiB body cost {diff} units more than a small one (A {left_a}, B {left_b})"
    );
    c.gateway.shutdown().await;
}

/// Opens `n` connections from `local`, each declaring a body of `len` bytes and sending all of it
/// but its last byte; the tasks hold them until aborted.
async fn fill_bodies(
    local: &'static str,
    url: &str,
    n: usize,
    len: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let mut s = connect_from(local, url).await;
        tasks.push(tokio::spawn(async move {
            let _ = s.write_all(request_head("/ext/bc/P", len).as_bytes()).await;
            let _ = s.write_all(&vec![b' '; len - 1]).await;
            std::future::pending::<()>().await;
        }));
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_addresses_filling_bodies_cannot_make_a_third_wait_for_room() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.limits.body_bytes = 4 * MIB;
        cfg.limits.connection_body_bytes = 4 * MIB;
        // Four times the default room per address (16 MiB): two addresses could fill it all
        // if nothing bounded an address.
        cfg.limits.total_body_bytes = 64 * MIB;
        cfg.limits.body_timeout = Duration::from_secs(120);
    })
    .await;
    let per_address = 16 * MIB;
    // Two addresses, eight connections each, each holding 4 MiB − 1 byte of an unfinished body:
    // 64 MiB wanted in all.
    let mut fill = fill_bodies("127.0.0.1", &c.url(), 8, 4 * MIB).await;
    fill.extend(fill_bodies("127.0.0.2", &c.url(), 8, 4 * MIB).await);
    // Wait until the fill is held: both addresses' room taken, but for the last frames read
    // (hyper reads at most a few hundred KiB at a time).
    let held = 2 * (per_address - MIB);
    let mut buffered = 0.0;
    for _ in 0..600 {
        buffered = metric(
            &get_metrics(&c.url()).await,
            "snowgate_request_body_buffered_bytes",
        )
        .unwrap();
        if buffered >= held as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(buffered >= held as f64, "the fill never held: {buffered}");
    // A third address's call is answered while the fill is held.
    let mut third = connect_from("127.0.0.3", &c.url()).await;
    let body = call("platform.getHeight", "{}");
    third
        .write_all(format!("{}{body}", request_head("/ext/bc/P", body.len())).as_bytes())
        .await
        .unwrap();
    let answered = read_answer(&mut third, Duration::from_secs(30)).await;
    let (status, _, text) = answered.expect("the third client waited for body room");
    assert_eq!(status, 200, "{text}");
    // The fillers hold at most their addresses' room.
    let buffered = metric(
        &get_metrics(&c.url()).await,
        "snowgate_request_body_buffered_bytes",
    )
    .unwrap();
    assert!(
        buffered <= (2 * per_address) as f64,
        "two addresses buffered {buffered} bytes"
    );
    for task in fill {
        task.abort();
    }
    c.gateway.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The load behind the README's figures (ignored: they measure, they assert nothing). Against a
// release gateway at the shipped defaults in front of a devnode:
//
//   target/release/snowgate devnode --listen 127.0.0.1:9651 &
//   printf '[server]\nlisten = "127.0.0.1:9650"\n[admin]\napi_keys = ["test-admin-key-0123456789"]\n[[upstreams]]\nname = "n"\nurl = "http://127.0.0.1:9651"\n' > /tmp/load.toml
//   target/release/snowgate serve --config /tmp/load.toml & echo $! > /tmp/gw.pid
//   SNOWGATE_LOAD_URL=http://127.0.0.1:9650 SNOWGATE_LOAD_PID=$(cat /tmp/gw.pid) \
//     cargo test --test integration -- --ignored --nocapture --test-threads 1 attack_quota_round2::load_
//
// (`SNOWGATE_LOAD_CONNECTIONS=0` runs the first without its load: the sampling client alone.)
// Each prints the gateway's CPU over the window (utime + stime from /proc/PID/stat) and the
// latencies of another client calling `platform.getHeight` every 20 ms meanwhile.
// ---------------------------------------------------------------------------------------------

/// The gateway to load, its pid, and the window (`SNOWGATE_LOAD_SECS`, 15 s by default).
fn load_target() -> Option<(String, u32, Duration)> {
    let url = std::env::var("SNOWGATE_LOAD_URL").ok()?;
    let pid = std::env::var("SNOWGATE_LOAD_PID").ok()?.parse().ok()?;
    let secs = std::env::var("SNOWGATE_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    Some((url, pid, Duration::from_secs(secs)))
}

/// CPU seconds the process `pid` has used (user + system), from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0 // CLK_TCK on Linux
}

/// Calls `platform.getHeight` from `local` every 20 ms until `until` (one keep-alive connection,
/// opened again when cut); each call's latency, and the calls that failed.
async fn sample_latency(
    local: &'static str,
    url: String,
    until: tokio::time::Instant,
) -> (Vec<Duration>, usize) {
    let body = call("platform.getHeight", "{}");
    let request = format!("{}{body}", request_head("/ext/bc/P", body.len()));
    let (mut samples, mut failed) = (Vec::new(), 0);
    let mut conn: Option<TcpStream> = None;
    while tokio::time::Instant::now() < until {
        let s = match conn.as_mut() {
            Some(s) => s,
            None => conn.insert(connect_from(local, &url).await),
        };
        let sent = std::time::Instant::now();
        let ok = s.write_all(request.as_bytes()).await.is_ok();
        match read_answer(s, Duration::from_secs(30)).await {
            Some((200, head, _)) if ok => {
                samples.push(sent.elapsed());
                if head.contains("connection: close") {
                    conn = None;
                }
            }
            _ => {
                failed += 1;
                conn = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (samples, failed)
}

/// [`sample_latency`] on a thread and runtime of its own, so that the load's tasks cannot delay
/// its own reading of the answers.
fn sample_latency_apart(
    local: &'static str,
    url: String,
    until: tokio::time::Instant,
) -> std::thread::JoinHandle<(Vec<Duration>, usize)> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(sample_latency(local, url, until))
    })
}

fn report_latency(who: &str, mut samples: Vec<Duration>, failed: usize) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    if samples.is_empty() {
        println!("{who}: no call answered ({failed} failed)");
        return;
    }
    println!(
        "{who}: {} calls, {failed} failed; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3
    );
}

/// A `platform.getHeight` call whose params object holds keys up to `len` bytes: the dearest body
/// shape to decode and key (README, "Security and limits").
fn keyed_call(len: usize) -> String {
    let mut params = String::from("{");
    let mut i = 0;
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":"#;
    while head.len() + params.len() + 16 < len {
        if i > 0 {
            params.push(',');
        }
        params.push_str(&format!("\"k{i}\":0"));
        i += 1;
    }
    params.push('}');
    let call = format!("{head}{params}}}");
    let pad = len - call.len();
    format!("{}{}", call, " ".repeat(pad))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load: run against a release gateway, see the comment above"]
async fn load_one_address_sending_1_mib_bodies() {
    let Some((url, pid, window)) = load_target() else {
        println!("set SNOWGATE_LOAD_URL and SNOWGATE_LOAD_PID (see the comment above)");
        return;
    };
    let body = keyed_call(MIB);
    let request: std::sync::Arc<[u8]> = format!("{}{body}", request_head("/ext/bc/P", body.len()))
        .into_bytes()
        .into();
    let until = tokio::time::Instant::now() + window;
    let counts = std::sync::Arc::new(parking_lot::Mutex::new(std::collections::BTreeMap::<
        String,
        usize,
    >::new()));
    let cpu_before = cpu_seconds(pid);
    let mut attackers = Vec::new();
    let connections = std::env::var("SNOWGATE_LOAD_CONNECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    for _ in 0..connections {
        let (url, request, counts) = (url.clone(), request.clone(), counts.clone());
        attackers.push(tokio::spawn(async move {
            let mut conn: Option<TcpStream> = None;
            while tokio::time::Instant::now() < until {
                let s = match conn.as_mut() {
                    Some(s) => s,
                    None => conn.insert(connect_from("127.0.0.1", &url).await),
                };
                // As fast as it can: the whole request, then its answer (an early answer cuts
                // the write short).
                let _ = s.write_all(&request).await;
                let outcome = match read_answer(s, Duration::from_secs(30)).await {
                    Some((status, head, _)) => {
                        // A refusal before the body closes the connection: open another at once.
                        if head.contains("connection: close") || status == 429 {
                            conn = None;
                        }
                        status.to_string()
                    }
                    None => {
                        conn = None;
                        "cut".to_string()
                    }
                };
                *counts.lock().entry(outcome).or_default() += 1;
            }
        }));
    }
    let sampler = sample_latency_apart("127.0.0.2", url.clone(), until);
    tokio::time::sleep_until(until).await;
    let (samples, failed) = sampler.join().unwrap();
    for a in attackers {
        a.abort();
    }
    let cpu = cpu_seconds(pid) - cpu_before;
    println!(
        "one address, 16 connections of 1 MiB bodies for {:?}: gateway CPU {:.2} s = {:.2} cores; answers {:?}",
        window,
        cpu,
        cpu / window.as_secs_f64(),
        counts.lock()
    );
    report_latency("another client (127.0.0.2)", samples, failed);
}

/// An HTTP/2 connection (prior knowledge) to the gateway at `url` from `local`.
async fn h2_from(
    local: &'static str,
    url: &str,
) -> Option<
    hyper::client::conn::http2::SendRequest<
        http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    >,
> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(format!("{local}:0").parse().ok()?).ok()?;
    let stream = socket.connect(addr_of(url)).await.ok()?;
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// A body that sends `len` bytes in 16 KiB frames and then never ends.
fn unfinished_body(
    len: usize,
) -> http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let frames = (0..len.div_ceil(16 * 1024)).map(move |i| {
        let n = (len - i * 16 * 1024).min(16 * 1024);
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(bytes::Bytes::from(vec![b' '; n])))
    });
    let stream = futures_util::StreamExt::chain(
        futures_util::stream::iter(frames),
        futures_util::stream::pending(),
    );
    http_body_util::StreamBody::new(stream).boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load: run against a release gateway, see the comment above"]
async fn load_two_addresses_filling_bodies() {
    let Some((url, pid, window)) = load_target() else {
        println!("set SNOWGATE_LOAD_URL and SNOWGATE_LOAD_PID (see the comment above)");
        return;
    };
    let until = tokio::time::Instant::now() + window;
    let cpu_before = cpu_seconds(pid);
    let mut fillers = Vec::new();
    // Each address: 64 connections (max_connections_per_ip) of 64 streams (the server's most),
    // each stream 1 MiB − 1 byte of a 1 MiB body; a connection cut (body_timeout) is opened again.
    for local in ["127.0.0.1", "127.0.0.2"] {
        for _ in 0..64 {
            let url = url.clone();
            fillers.push(tokio::spawn(async move {
                while tokio::time::Instant::now() < until {
                    let Some(mut sender) = h2_from(local, &url).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let mut streams = Vec::new();
                    for _ in 0..64 {
                        let req = http::Request::post(format!("{url}/ext/bc/P"))
                            .header("content-type", "application/json")
                            .header("content-length", MIB.to_string())
                            .body(unfinished_body(MIB - 1))
                            .unwrap();
                        if sender.ready().await.is_err() {
                            break;
                        }
                        streams.push(sender.send_request(req));
                    }
                    // Until the gateway cuts them.
                    futures_util::future::join_all(streams).await;
                }
            }));
        }
    }
    let sampler = sample_latency_apart("127.0.0.3", url.clone(), until);
    tokio::time::sleep_until(until - Duration::from_secs(1)).await;
    // Asked from the third address: the fillers' addresses are at their connection cap.
    let metrics = reqwest::Client::builder()
        .local_address(Some([127, 0, 0, 3].into()))
        .build()
        .unwrap()
        .get(format!("{url}/metrics"))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (samples, failed) = sampler.join().unwrap();
    for f in fillers {
        f.abort();
    }
    let cpu = cpu_seconds(pid) - cpu_before;
    println!(
        "two addresses filling bodies over HTTP/2 for {:?}: gateway CPU {:.2} cores; buffered at the end {:?} bytes",
        window,
        cpu / window.as_secs_f64(),
        metric(&metrics, "snowgate_request_body_buffered_bytes")
    );
    report_latency("a third client (127.0.0.3)", samples, failed);
}
