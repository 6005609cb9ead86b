//! Attacks on `[tracing]` (issue 28): hostile `traceparent`/`tracestate` values and the exact
//! bytes a node receives, spans of requests whose client goes away, what an export carries (raw
//! protobuf, searched for secrets), and a collector that lies (an endless or huge body, a hang).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use snowgate::devnode::{DevNode, DevNodeConfig};

use crate::support::binary::Served;
use crate::support::otlp::{answering, spans_counted, Receiver};
use crate::support::{call, get_metrics, post_with, slow_node, ADMIN_KEY};

const WAIT: Duration = Duration::from_secs(60);
const T: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const S: &str = "00f067aa0ba902b7";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The bytes one connection carried.
type Sent = Arc<Mutex<Vec<u8>>>;

/// A TCP relay in front of `target` that records every byte the gateway sends (per connection).
struct Capture {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<Sent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Capture {
    async fn start(target: SocketAddr) -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let all = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                let log: Sent = Arc::default();
                all.lock().unwrap().push(log.clone());
                let (mut ir, mut iw) = inbound.into_split();
                let (mut or, mut ow) = outbound.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut or, &mut iw).await;
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match ir.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                log.lock().unwrap().extend_from_slice(&buf[..n]);
                                if ow.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        Capture { addr, sent, task }
    }

    /// Every request head the gateway sent so far (lines without their CRLF).
    fn heads(&self) -> Vec<Vec<Vec<u8>>> {
        let mut heads = Vec::new();
        for conn in self.sent.lock().unwrap().iter() {
            let bytes = conn.lock().unwrap().clone();
            let mut at = 0;
            while at < bytes.len() {
                let Some(end) = find(&bytes[at..], b"\r\n\r\n") else {
                    break;
                };
                let head = &bytes[at..at + end];
                let lines: Vec<Vec<u8>> = split(head, b"\r\n");
                let length = lines
                    .iter()
                    .find_map(|l| {
                        let text = String::from_utf8_lossy(l).to_ascii_lowercase();
                        text.strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                heads.push(lines);
                at += end + 4 + length;
            }
        }
        heads
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split(bytes: &[u8], sep: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(i) = find(rest, sep) {
        out.push(rest[..i].to_vec());
        rest = &rest[i + sep.len()..];
    }
    out.push(rest.to_vec());
    out
}

/// One raw HTTP/1.1 request to the gateway (the exact header bytes a hostile client chooses);
/// returns the status line's code (0 if the gateway closed without answering).
async fn raw_post(gateway: &str, extra_headers: &[u8], body: &str) -> u16 {
    let addr = gateway.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "POST /ext/bc/P HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(extra_headers);
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body.as_bytes());
    s.write_all(&req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// How a raw collector answers each export.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// 200 with an empty protobuf body (keeps the bodies).
    Accept,
    /// 200, chunked, and an endless body of junk until the client goes away.
    Endless,
    /// 200 with a 64 MiB Content-Length and that many junk bytes.
    Huge,
    /// Reads the request and never answers.
    Hang,
    /// 500 with a 3 MiB body of control bytes and ANSI escapes (for the warning line).
    Garbage,
}

/// A raw OTLP/HTTP collector: keeps every export's body (raw protobuf) and answers as `lie`.
struct RawCollector {
    url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Connections open now (a connection ends when the gateway closes it).
    open: Arc<std::sync::atomic::AtomicUsize>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawCollector {
    async fn start(lie: Lie) -> RawCollector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = bodies.clone();
        let open: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let accepted: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let (open2, accepted2) = (open.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let kept = kept.clone();
                let open = open2.clone();
                open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                accepted2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let _open = Decrement(open);
                    let mut buf = Vec::new();
                    loop {
                        // One request: head, then Content-Length bytes.
                        let head_end = loop {
                            if let Some(i) = find(&buf, b"\r\n\r\n") {
                                break i;
                            }
                            let mut chunk = [0u8; 8192];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map(|v| v.trim().parse().unwrap())
                            .unwrap_or(0);
                        while buf.len() < head_end + 4 + length {
                            let mut chunk = [0u8; 8192];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let body = buf[head_end + 4..head_end + 4 + length].to_vec();
                        buf.drain(..head_end + 4 + length);
                        kept.lock().unwrap().push(body);
                        let junk = vec![b'x'; 64 * 1024];
                        match lie {
                            Lie::Accept => {
                                let r = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                                if s.write_all(r).await.is_err() {
                                    return;
                                }
                            }
                            Lie::Endless => {
                                let r = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ntransfer-encoding: chunked\r\n\r\n";
                                if s.write_all(r).await.is_err() {
                                    return;
                                }
                                let mut chunk = format!("{:x}\r\n", junk.len()).into_bytes();
                                chunk.extend_from_slice(&junk);
                                chunk.extend_from_slice(b"\r\n");
                                while s.write_all(&chunk).await.is_ok() {}
                                return;
                            }
                            Lie::Huge => {
                                let total = 64usize << 20;
                                let r = format!("HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {total}\r\n\r\n");
                                if s.write_all(r.as_bytes()).await.is_err() {
                                    return;
                                }
                                let mut left = total;
                                while left > 0 {
                                    let n = left.min(junk.len());
                                    if s.write_all(&junk[..n]).await.is_err() {
                                        return;
                                    }
                                    left -= n;
                                }
                            }
                            Lie::Hang => {
                                // Until the gateway hangs up.
                                let mut chunk = [0u8; 8192];
                                while let Ok(n) = s.read(&mut chunk).await {
                                    if n == 0 {
                                        break;
                                    }
                                }
                                return;
                            }
                            Lie::Garbage => {
                                let mut body = Vec::new();
                                while body.len() < 3 << 20 {
                                    body.extend_from_slice(
                                        b"\x1b[31mFORGED\r\n2026 ERROR admin\x00\x07",
                                    );
                                }
                                let r = format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n", body.len());
                                if s.write_all(r.as_bytes()).await.is_err()
                                    || s.write_all(&body).await.is_err()
                                {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        RawCollector {
            url,
            bodies,
            open,
            accepted,
            task,
        }
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }
}

struct Decrement(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn devnode_config() -> DevNodeConfig {
    DevNodeConfig {
        block_interval: Duration::from_secs(3600),
        ..Default::default()
    }
}

fn gateway_config(node_url: &str, tracing: &str, extra: &str) -> String {
    format!(
        "[health]\ninterval = \"500ms\"\ntimeout = \"500ms\"\n\
         [cache]\nenabled = false\n\
         [admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\
         [rate_limit]\nrequests_per_second = 100000\nburst = 100000\n\
         [tracing]\n{tracing}\n\
         {extra}\
         [[upstreams]]\nname = \"n\"\nurl = \"{node_url}\"\n"
    )
}

// ---------------------------------------------------------------------------------------------
// 1. Hostile trace headers: the node always gets single, valid header lines.
// ---------------------------------------------------------------------------------------------

/// Every line of every request head the node got is a well-formed `name: value` with a visible
/// ASCII value; at most one `traceparent` (strict W3C, never all-zero) and one `tracestate`
/// (at most 512 bytes, 32 members); no header the client smuggled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_trace_headers_reach_nodes_as_single_valid_lines() {
    let receiver = Receiver::start().await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let capture = Capture::start(node.addr()).await;
    // follow, ratio 0: flags 01 is recorded (new traceparent per attempt), flags 00 is passed on,
    // anything invalid is neither.
    let tracing = format!(
        "otlp_endpoint = \"{}\"\nsample_ratio = 0.0\nclient_trace = \"follow\"",
        receiver.url
    );
    let text = gateway_config(&format!("http://{}", capture.addr), &tracing, "");
    let served = Served::start(&text, "warn");
    answering(&served.url).await;

    let tp = |flags: &str| format!("traceparent: 00-{T}-{S}-{flags}\r\n");
    let many: String = (0..40)
        .map(|i| format!("k{i}=v{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let s511 = format!("k={}", "v".repeat(510));
    let s513 = format!("k={}", "v".repeat(511));
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for flags in ["01", "00"] {
        let p = tp(flags);
        for extra in [
            "tracestate: a=b\tc\r\n".to_string(),
            "tracestate: a=b c\r\n".to_string(),
            "tracestate: a=b \r\n".to_string(),
            "tracestate: A=1\r\n".to_string(),
            "tracestate: a=1,a=2\r\n".to_string(),
            format!("tracestate: {many}\r\n"),
            format!("tracestate: {s511}\r\n"),
            format!("tracestate: {s513}\r\n"),
            "tracestate: a=1\r\ntracestate: x-injected: 1\r\n".to_string(),
            "tracestate: a=1\r\ntracestate: b=2\r\n".to_string(),
            "tracestate: k=\"quoted\";x-injected:1\r\n".to_string(),
            format!("traceparent: 00-{T}-1111111111111111-00\r\n"),
        ] {
            let mut c = p.clone().into_bytes();
            c.extend_from_slice(extra.as_bytes());
            cases.push(c);
        }
        let mut c = p.clone().into_bytes();
        c.extend_from_slice(b"tracestate: a=\x80\xff\r\n");
        cases.push(c);
        // Bare CR, NUL, obs-fold: hyper should refuse these outright.
        let mut c = p.clone().into_bytes();
        c.extend_from_slice(b"tracestate: a=1\rx-injected: 1\r\n");
        cases.push(c);
        let mut c = p.clone().into_bytes();
        c.extend_from_slice(b"tracestate: a=1\x00x\r\n");
        cases.push(c);
        let mut c = p.clone().into_bytes();
        c.extend_from_slice(b"tracestate: a=1\r\n x-injected: 1\r\n");
        cases.push(c);
    }
    for parent in [
        format!("00-{T}-{S}-01 \t"),
        format!("00-{}-{S}-01", T.to_uppercase()),
        format!("ff-{T}-{S}-01"),
        format!("cc-{T}-{S}-01-what-ever"),
        format!("00-{T}-{S}-01-extra"),
        format!("00-{}-{S}-01", "0".repeat(32)),
        format!("00-{T}-{}-01", "0".repeat(16)),
        "00-1-1-01".to_string(),
        "+0-+1-+1-+1".to_string(),
        "00-1-1-00".to_string(),
        format!("00-{T}-{S}-ff"),
        format!("00-{T}-{S}-02"),
        format!("00-{T}{T}-{S}-01"),
        format!("00-{T}-{S}-{}", "1".repeat(4000)),
    ] {
        cases.push(format!("traceparent: {parent}\r\n").into_bytes());
    }
    let mut statuses = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.getBlockchains","params":{{}}}}"#
        );
        statuses.push(raw_post(&served.url, c, &body).await);
    }
    eprintln!("statuses: {statuses:?}");
    // Let the last attempts land.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let heads = capture.heads();
    assert!(heads.len() >= cases.len() / 2, "{} heads", heads.len());
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let mut seen_parents = std::collections::BTreeSet::new();
    let mut seen_states = std::collections::BTreeSet::new();
    for head in &heads {
        let mut parents = 0;
        let mut states = 0;
        for line in &head[1..] {
            let colon = line.iter().position(|&b| b == b':').unwrap_or_else(|| {
                panic!(
                    "a line without a colon: {:?}",
                    String::from_utf8_lossy(line)
                )
            });
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            assert!(
                !name.is_empty() && name.iter().all(|&b| token(b)),
                "{line:?}"
            );
            assert!(
                value.iter().all(|&b| b == b' ' || b.is_ascii_graphic()),
                "a value with a control or non-ASCII byte: {:?}",
                String::from_utf8_lossy(line)
            );
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            assert_ne!(name, "x-injected", "a smuggled header line");
            let value = String::from_utf8_lossy(value).trim().to_string();
            if name == "traceparent" {
                parents += 1;
                let parts: Vec<&str> = value.split('-').collect();
                assert_eq!(parts.len(), 4, "{value}");
                assert_eq!(parts[0], "00", "{value}");
                assert!(parts[1].len() == 32 && parts[2].len() == 16 && parts[3].len() == 2);
                for p in &parts[1..] {
                    assert!(p
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
                }
                assert_ne!(parts[1], "0".repeat(32));
                assert_ne!(parts[2], "0".repeat(16));
                assert!(parts[3] == "00" || parts[3] == "01", "{value}");
                seen_parents.insert(value.clone());
            }
            if name == "tracestate" {
                states += 1;
                assert!(value.len() <= 512, "{} bytes", value.len());
                assert!(value.split(',').count() <= 32, "{value}");
                seen_states.insert(value.clone());
            }
        }
        assert!(parents <= 1 && states <= 1, "{head:?}");
        assert!(
            states == 0 || parents == 1,
            "a tracestate without a traceparent"
        );
    }
    eprintln!("traceparents seen: {seen_parents:#?}");
    eprintln!("tracestates seen: {seen_states:#?}");
    drop(served);
}

// ---------------------------------------------------------------------------------------------
// 2. Lifetime: a client gone mid-call, coalesced and hedged calls: every trace ends.
// ---------------------------------------------------------------------------------------------

/// A sampled request whose client hangs up while the node is slow still exports its request span
/// (and its attempt): nothing is held open forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_left_still_ends_its_trace() {
    let receiver = Receiver::start().await;
    let (node, arrivals, _open) = slow_node(Duration::from_secs(3)).await;
    let tracing = format!("otlp_endpoint = \"{}\"\nsample_ratio = 1.0", receiver.url);
    let cache = "[cache]\nenabled = true\n";
    let text = gateway_config(&format!("http://{node}"), &tracing, "")
        .replace("[cache]\nenabled = false\n", cache);
    let served = Served::start(&text, "warn");
    answering(&served.url).await;
    let addr = served.url.trim_start_matches("http://").to_string();

    // Four clients: two ask the same (coalesced) miss, two a call of their own; all hang up.
    let traces: Vec<String> = (0..4).map(|i| format!("{:032x}", 0xabc000 + i)).collect();
    for (i, trace) in traces.iter().enumerate() {
        let tx = if i < 2 {
            "same".to_string()
        } else {
            format!("own{i}")
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{{"txID":"{tx}","encoding":"hex"}}}}"#
        );
        let req = format!(
            "POST /ext/bc/P HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\ntraceparent: 00-{trace}-{S}-01\r\n\r\n{body}",
            body.len()
        );
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            drop(s);
        });
    }
    let start = Instant::now();
    while arrivals.load(std::sync::atomic::Ordering::SeqCst) < 3 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for trace in &traces {
        let start = Instant::now();
        loop {
            let spans = receiver.trace(trace);
            let root = spans.iter().find(|s| s.parent == S);
            if root.is_some() {
                eprintln!(
                    "{trace}: {:?}",
                    spans
                        .iter()
                        .map(|s| (s.name.clone(), s.attr("snowgate.outcome").map(String::from)))
                        .collect::<Vec<_>>()
                );
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "the request span of {trace} never ended: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(served);
}

// ---------------------------------------------------------------------------------------------
// 3. Secrets: the raw export never carries keys, node addresses, params or the client's text.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_carry_no_secret_and_no_client_text() {
    let collector = RawCollector::start(Lie::Accept).await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let rate_key = "rate-key-SECRET-7f3a9c1e";
    let provider = "PROVIDER-HEADER-SECRET-91bd";
    let tracing = format!("otlp_endpoint = \"{}\"\nsample_ratio = 1.0", collector.url);
    let keys = format!(
        "[[rate_limit.keys]]\nkey = \"{rate_key}\"\nname = \"acme\"\nrequests_per_second = 1000\nburst = 1000\n\
         [[rate_limit.keys]]\nkey = \"{rate_key}-2\"\nrequests_per_second = 1000\nburst = 1000\n"
    );
    let mut text = gateway_config(&node.url(), &tracing, "");
    text = text.replace("[tracing]", &format!("{keys}[tracing]"));
    text.push_str(&format!(
        "[upstreams.headers]\nx-provider-key = \"{provider}\"\n"
    ));
    let served = Served::start(&text, "warn");
    answering(&served.url).await;
    let rpc = format!("{}/ext/bc/P", served.url);

    let body = r#"{"jsonrpc":"2.0","id":1,"method":"platform.getBlockchains","params":{"secretParam":"PARAMSECRET"}}"#;
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"madeUpMethodXYZ","params":{}},{"jsonrpc":"2.0","id":2,"method":"platform.getHeight","params":{"p":"PARAMSECRET"}}]"#;
    let bad_method = r#"{"jsonrpc":"2.0","id":1,"method":"platform.MADEUPvictim","params":{}}"#;
    let auth = format!("Bearer {rate_key}");
    let auth2 = format!("Bearer {rate_key}-2");
    let admin = format!("Bearer {ADMIN_KEY}");
    let headers: Vec<Vec<(&str, &str)>> = vec![
        vec![("authorization", &auth)],
        vec![("authorization", &auth2)],
        vec![("x-api-key", rate_key)],
        vec![("authorization", &admin)],
        vec![("x-request-id", "OKID-ok-id")],
        vec![("x-request-id", "CLIENTTEXT bad id with spaces")],
        vec![("x-forwarded-for", "CLIENTTEXT")],
        vec![("user-agent", "CLIENTTEXT-agent")],
        vec![
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "vnd=CLIENTSTATE"),
        ],
    ];
    for h in &headers {
        for b in [body, batch, bad_method] {
            let r = post_with(&rpc, b, h).await;
            assert!(r.status < 500, "{} {}", r.status, r.body);
        }
    }
    // Wait for the exports (three spans at least per request).
    let start = Instant::now();
    while collector.bodies().iter().map(Vec::len).sum::<usize>() < 2000 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let all: Vec<u8> = collector.bodies().concat();
    assert!(!all.is_empty(), "nothing exported");
    let port = node.addr().port().to_string();
    for secret in [
        rate_key,
        provider,
        ADMIN_KEY,
        "PARAMSECRET",
        "secretParam",
        "madeUpMethodXYZ",
        "MADEUP",
        "CLIENTTEXT",
        // The client's tracestate is its own text: passed to the nodes, never exported.
        "CLIENTSTATE",
        port.as_str(),
    ] {
        assert!(
            find(&all, secret.as_bytes()).is_none(),
            "{secret:?} is in an export"
        );
    }
    // The key names are.
    eprintln!(
        "acme: {}, key:hash: {}, CLIENTTEXT-ok-id: {}",
        find(&all, b"acme").is_some(),
        find(&all, b"key:").is_some(),
        find(&all, b"ok-id").is_some()
    );
    drop(served);
}

// ---------------------------------------------------------------------------------------------
// 4. A lying collector: answers unaffected, losses counted, memory bounded.
// ---------------------------------------------------------------------------------------------

async fn lying_collector(lie: Lie) -> (u64, u64, u64) {
    let collector = RawCollector::start(lie).await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let tracing = format!(
        "otlp_endpoint = \"{}\"\nsample_ratio = 1.0\nexport_timeout = \"1s\"",
        collector.url
    );
    let text = gateway_config(&node.url(), &tracing, "");
    let served = Served::start(&text, "warn,snowgate::otel=info");
    answering(&served.url).await;
    let rpc = format!("{}/ext/bc/P", served.url);
    let rss0 = served.rss_kib();
    let mut peak = rss0;
    let deadline = Instant::now() + Duration::from_secs(14);
    let mut i = 0u64;
    while Instant::now() < deadline {
        let mut batch = Vec::new();
        for _ in 0..16 {
            i += 1;
            let rpc = rpc.clone();
            batch.push(tokio::spawn(async move {
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.getHeight","params":{{}}}}"#
                );
                post_with(&rpc, &body, &[]).await
            }));
        }
        for b in batch {
            let r = b.await.unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            assert!(r.body.contains("\"result\""), "{}", r.body);
        }
        peak = peak.max(served.rss_kib());
    }
    let start = Instant::now();
    loop {
        let m = get_metrics(&served.url).await;
        if spans_counted(&m, "failed") > 0 || start.elapsed() > WAIT {
            eprintln!(
                "{lie:?}: {i} requests, rss {rss0} -> peak {peak} KiB, exported {} failed {} dropped {}",
                spans_counted(&m, "exported"),
                spans_counted(&m, "failed"),
                spans_counted(&m, "dropped")
            );
            assert!(spans_counted(&m, "failed") > 0, "no failed export counted");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Connections to the collector: each failed export's is closed (the gateway holds at most
    // the one in flight and one idle).
    let start = Instant::now();
    let open = |c: &RawCollector| c.open.load(std::sync::atomic::Ordering::SeqCst);
    while open(&collector) > 2 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{lie:?}: collector connections accepted {}, still open {}",
        collector.accepted.load(std::sync::atomic::Ordering::SeqCst),
        open(&collector)
    );
    assert!(
        open(&collector) <= 2,
        "{lie:?}: {} connections held open",
        open(&collector)
    );
    let logs = served.logs();
    let warn = logs
        .lines()
        .filter(|l| l.contains("could not be exported"))
        .map(|l| l.len())
        .max()
        .unwrap_or(0);
    assert!(!logs.contains("FORGED"), "collector text in the log");
    drop(served);
    (rss0, peak, warn as u64)
}

/// Collectors that answer 200 with an endless body, a 64 MiB body, never answer, or a 500 with
/// 3 MiB of control bytes: every answer is unaffected, exports counted failed, the gateway's
/// memory stays within 64 MiB of where it started, and the collector's text is never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_collector_costs_only_counted_spans() {
    for lie in [Lie::Endless, Lie::Huge, Lie::Hang, Lie::Garbage] {
        let (rss0, peak, warn) = lying_collector(lie).await;
        assert!(peak < rss0 + 64 * 1024, "{lie:?}: rss {rss0} -> {peak} KiB");
        assert!(warn < 4096, "{lie:?}: a {warn}-byte warning line");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Amplification: what a client choosing sampled=1 costs (measurement only).
// ---------------------------------------------------------------------------------------------

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // utime, stime are fields 14 and 15 (1-based) of the whole line: 12 and 13 after ") ".
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Measures the gateway's CPU per request (cache hits: the cheapest path, where the span's share
/// is largest) with no traceparent vs a sampled one in follow mode (ratio 0), and RSS after a
/// flood against a collector that hangs. Timing-dependent: `#[ignore]`, run by hand with
/// `cargo test --test integration -- --ignored attack_otel_28::cost --nocapture`.
#[ignore = "measurement: depends on machine speed"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_of_client_forced_sampling() {
    let collector = RawCollector::start(Lie::Hang).await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let tracing = format!(
        "otlp_endpoint = \"{}\"\nsample_ratio = 0.0\nmax_queued_spans = 1048576\nexport_timeout = \"60s\"",
        collector.url
    );
    let text = gateway_config(&node.url(), &tracing, "").replace(
        "[cache]\nenabled = false\n",
        "[cache]\nhead_ttl = \"10m\"\n",
    );
    let served = Served::start(&text, "warn");
    answering(&served.url).await;
    let rpc = format!("{}/ext/bc/P", served.url);
    let client = crate::support::client();
    let tick = 100.0; // USER_HZ
    let big_state: String = (0..32)
        .map(|i| format!("k{i:02}={}", "v".repeat(8)))
        .collect::<Vec<_>>()
        .join(",");
    for (label, headers) in [
        ("none", vec![]),
        (
            "sampled",
            vec![("traceparent".to_string(), format!("00-{T}-{S}-01"))],
        ),
        (
            "sampled+32-member tracestate",
            vec![
                ("traceparent".to_string(), format!("00-{T}-{S}-01")),
                ("tracestate".to_string(), big_state.clone()),
            ],
        ),
        ("none", vec![]),
    ] {
        let n = 20_000u64;
        let rss0 = served.rss_kib();
        let c0 = cpu_ticks(served.pid());
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..8 {
            let (client, rpc, headers) = (client.clone(), rpc.clone(), headers.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..n / 8 {
                    let mut r = client
                        .post(&rpc)
                        .header("content-type", "application/json")
                        .body(format!(r#"{{"jsonrpc":"2.0","id":{},"method":"platform.getHeight","params":{{}}}}"#, w * n + i));
                    for (k, v) in &headers {
                        r = r.header(k.as_str(), v.as_str());
                    }
                    let r = r.send().await.unwrap();
                    assert_eq!(r.status(), 200);
                    let _ = r.bytes().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = (cpu_ticks(served.pid()) - c0) as f64 / tick;
        let m = get_metrics(&served.url).await;
        eprintln!(
            "{label}: {n} req in {secs:.2}s, gateway cpu {cpu:.2}s = {:.1} us/req, rss {rss0} -> {} KiB, dropped {} failed {}",
            cpu * 1e6 / n as f64,
            served.rss_kib(),
            spans_counted(&m, "dropped"),
            spans_counted(&m, "failed")
        );
    }
    drop(served);
}

// ---------------------------------------------------------------------------------------------
// 6. Shutdown with a collector that hangs: bounded by one export_timeout.
// ---------------------------------------------------------------------------------------------

/// SIGTERM while the collector hangs and spans are queued: the process exits (bounded), and how
/// long the exporter held the exit is printed. The exporter holds the exit for at most one
/// `export_timeout` (4 s here) after the drain; before the attack it was two (8.01 s measured),
/// which with `export_timeout` up to 60 s went past the shipped unit's `TimeoutStopSec=45`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_hanging_collector_is_bounded() {
    let collector = RawCollector::start(Lie::Hang).await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let tracing = format!(
        "otlp_endpoint = \"{}\"\nsample_ratio = 1.0\nexport_timeout = \"4s\"",
        collector.url
    );
    let text = gateway_config(&node.url(), &tracing, "").replace(
        "[health]",
        "[server]\ndrain_grace = \"0s\"\ndrain_timeout = \"1s\"\n[health]",
    );
    let mut served = Served::start(&text, "warn");
    answering(&served.url).await;
    let rpc = format!("{}/ext/bc/P", served.url);
    // Enough spans for more than one batch, and an export in flight (hung).
    let start = Instant::now();
    while collector.bodies().is_empty() && start.elapsed() < WAIT {
        for i in 0..50 {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.getHeight","params":{{}}}}"#
            );
            let _ = post_with(&rpc, &body, &[]).await;
        }
    }
    for i in 0..1200 {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.getHeight","params":{{}}}}"#);
        let _ = post_with(&rpc, &body, &[]).await;
    }
    let t0 = Instant::now();
    served.signal("TERM");
    let status = served.wait_exit(Duration::from_secs(120));
    let took = t0.elapsed();
    eprintln!("exit {status:?} after {took:?}");
    assert!(status.is_some(), "never exited");
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// As [`cost_of_client_forced_sampling`], for requests the rate limiter refuses (429): sampling
/// is decided before the limiter, so a client over its quota still makes (and fills the queue
/// with) spans. Timing-dependent: `#[ignore]`.
#[ignore = "measurement: depends on machine speed"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_of_refused_requests_with_a_sampled_flag() {
    let collector = RawCollector::start(Lie::Accept).await;
    let node = DevNode::spawn(devnode_config()).await.unwrap();
    let tracing = format!("otlp_endpoint = \"{}\"\nsample_ratio = 0.0", collector.url);
    let text = gateway_config(&node.url(), &tracing, "").replace(
        "requests_per_second = 100000\nburst = 100000",
        "requests_per_second = 1\nburst = 10",
    );
    let served = Served::start(&text, "warn");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rpc = format!("{}/ext/bc/P", served.url);
    let client = crate::support::client();
    for (label, headers) in [
        ("none", vec![]),
        (
            "sampled",
            vec![("traceparent".to_string(), format!("00-{T}-{S}-01"))],
        ),
        ("none", vec![]),
    ] {
        let n = 20_000u64;
        let m0 = get_metrics(&served.url).await;
        let c0 = cpu_ticks(served.pid());
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (client, rpc, headers) = (client.clone(), rpc.clone(), headers.clone());
            tasks.push(tokio::spawn(async move {
                let mut refused = 0u64;
                for _ in 0..n / 8 {
                    let mut r = client
                        .post(&rpc)
                        .header("content-type", "application/json")
                        .body(call("platform.getHeight", "{}"));
                    for (k, v) in &headers {
                        r = r.header(k.as_str(), v.as_str());
                    }
                    let r = r.send().await.unwrap();
                    refused += u64::from(r.status() == 429);
                    let _ = r.bytes().await.unwrap();
                }
                refused
            }));
        }
        let mut refused = 0;
        for t in tasks {
            refused += t.await.unwrap();
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = (cpu_ticks(served.pid()) - c0) as f64 / 100.0;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let m = get_metrics(&served.url).await;
        eprintln!(
            "{label}: {n} req ({refused} refused) in {secs:.2}s, gateway cpu {cpu:.2}s = {:.1} us/req, spans exported +{} dropped +{}",
            cpu * 1e6 / n as f64,
            spans_counted(&m, "exported") - spans_counted(&m0, "exported"),
            spans_counted(&m, "dropped") - spans_counted(&m0, "dropped"),
        );
    }
    drop(served);
}

/// An upstream's configured `headers` may not name `traceparent`/`tracestate`: with `[tracing]`
/// on, the node would get two `traceparent` lines, which W3C trace context treats as invalid (a
/// tracing node drops both). Before the attack the config was accepted and two lines were sent.
#[test]
fn a_configured_traceparent_header_is_refused() {
    for name in ["traceparent", "TraceState"] {
        let text = format!(
            "[[upstreams]]\nname = \"n\"\nurl = \"http://127.0.0.1:9650\"\n\
             [upstreams.headers]\n{name} = \"00-{T}-{S}-01\"\n"
        );
        let path =
            std::env::temp_dir().join(format!("attack-otel-28-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let check = std::process::Command::new(env!("CARGO_BIN_EXE_snowgate"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let stderr = String::from_utf8_lossy(&check.stderr);
        assert!(!check.status.success(), "{name} accepted: {stderr}");
        assert!(
            stderr.contains("is set by snowgate") && stderr.contains("[tracing]"),
            "{stderr}"
        );
    }
}
