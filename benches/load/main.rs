//! The load benchmark: `cargo bench --bench load`.
//!
//! It starts every contestant on loopback ports, drives each with the same wrk (same threads,
//! connections, duration and Lua script), and prints one markdown table of requests/s, p50 and
//! p99 latency, then the ratios against the targets of the benchmark issue:
//!
//! 1. **ceiling**: a minimal hyper server ([`ceiling`]) answering fixed bytes of the size of
//!    snowgate's average cached answer: the fastest a cached answer can be served;
//! 2. **snowgate, cache hits**: `platform.getBlock` / `platform.getTx` for every block and
//!    transaction of the devnode (thousands of distinct keys), all cached beforehand;
//! 3. **nginx proxy_cache** in front of the devnode, keyed on the request body ([`nginx`]);
//! 4. **direct**: the devnode itself;
//! 5. **snowgate, forwarded** (`platform.sampleValidators`, never cached) and **nginx plain
//!    proxy** with upstream keep-alive, on the same devnode, then both again in front of the same
//!    devnode serving HTTPS ([`tls`]: nginx with `proxy_pass https://` and session reuse);
//!
//! plus the cache-size run (hits over 100 keys, then over 1,000,000 keys in the same instance) and
//! resident memory (idle, and with `max_bytes = 64 MiB` filled past capacity), and the fleet
//! section ([`fleet`]: two instances sharing one redis-server).
//!
//! Pinning: on a machine with n >= 2 CPUs, every server (devnode, snowgate, nginx, ceiling) runs
//! on the last CPU and wrk plus this harness on the others, so the load generator never takes CPU
//! from the server it measures; each server gets as many worker threads (nginx: worker processes)
//! as it has CPUs. `LOAD_SERVER_CPUS` / `LOAD_CLIENT_CPUS` (taskset lists) override.
//!
//! snowgate runs with its shipped defaults, rate limiting on, as users run it: each instance's
//! configuration sets only its listen address, its upstream, `[cache] max_bytes` and the rate
//! limit's rate and burst, raised so that one wrk client never exhausts the quota.
//!
//! Knobs (environment): `LOAD_DURATION` (seconds per run, default 5), `LOAD_ROUNDS` (3), `LOAD_CONNECTIONS` (32),
//! `LOAD_THREADS` (wrk threads, 1), `LOAD_KEYS` (1000000), `LOAD_RUST_LOG` (snowgate's log filter,
//! default `info` as in production). It installs wrk, nginx and redis-server with apt-get when missing,
//! never talks to anything but 127.0.0.1, stops every process it started when it ends or fails,
//! and a watchdog ends the run after 20 minutes (10 for the fleet section alone) whatever happens.
//!
//! `LOAD_ONLY=fleet` runs the fleet section alone (a few minutes; its knobs are in [`fleet`]);
//! `LOAD_ONLY=hedge` the hedged-reads section ([`hedge`], a minute); `LOAD_ONLY=tracing` what
//! OpenTelemetry traces cost a hit ([`traces`], a few minutes).
//!
//! `LOAD_AB=/path/a,/path/b` runs the A/B mode instead of the full table: two snowgate builds
//! compared in alternating rounds ([`ab`]).
//!
//! It does not run under `cargo test`: without `--bench` (which `cargo bench` passes) it exits at
//! once.

mod ab;
mod ceiling;
mod client;
mod fleet;
mod hedge;
mod nginx;
mod procs;
mod tls;
mod traces;
mod wrk;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use procs::{free_port, pinned, Pinning, Proc};
use wrk::{Load, Measured};

/// Everything the run leaves on disk, removed at the end (kept with `LOAD_KEEP_TMP=1`).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("LOAD_KEEP_TMP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The rate and burst of snowgate's rate limit in every run (see `Bench::start_snowgate`).
const RATE_LIMIT_QUOTA: u32 = 4_000_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::var("LOAD_BENCH_ROLE").as_deref() == Ok("ceiling") {
        let port = env_or("LOAD_BENCH_PORT", 0u16);
        let size = env_or("LOAD_BENCH_SIZE", 1000usize);
        if let Err(e) = ceiling::run(port, size) {
            eprintln!("ceiling: {e}");
            std::process::exit(1);
        }
        return;
    }
    if std::env::var("LOAD_BENCH_ROLE").as_deref() == Ok(traces::ROLE) {
        let port = env_or("LOAD_BENCH_PORT", 0u16);
        if let Err(e) = ceiling::run_otlp_sink(port) {
            eprintln!("otlp sink: {e}");
            std::process::exit(1);
        }
        return;
    }
    if std::env::var("LOAD_BENCH_ROLE").as_deref() == Ok("bare-proxy") {
        let port = env_or("LOAD_BENCH_PORT", 0u16);
        let node = std::env::var("LOAD_BENCH_NODE").unwrap_or_default();
        if let Err(e) = ceiling::run_bare_proxy(port, &node) {
            eprintln!("bare proxy: {e}");
            std::process::exit(1);
        }
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("load benchmark: run it with `cargo bench --bench load`");
        return;
    }
    // 20 minutes for the full benchmark, of which the fleet section takes about 3 (10 when it
    // runs alone). An A/B of 3 rounds takes about 10 minutes on an idle machine, but its
    // 1,000,000-key fills slow down most when the machine is shared: 30 minutes per 3 rounds.
    let limit = if std::env::var_os("LOAD_AB").is_some() {
        30 * 60 * env_or("LOAD_ROUNDS", 3u64).max(1).div_ceil(3)
    } else if std::env::var("LOAD_ONLY").as_deref() == Ok("fleet") {
        10 * 60
    } else {
        20 * 60
    };
    procs::watchdog(Duration::from_secs(limit));
    if let Err(e) = run() {
        eprintln!("load benchmark failed: {e}");
        std::process::exit(1);
    }
}

/// Paths and settings shared by the steps.
struct Bench {
    dir: PathBuf,
    snowgate: PathBuf,
    pin: Pinning,
    ticks: f64,
    rust_log: String,
    rt: tokio::runtime::Runtime,
    http: client::Http,
}

impl Bench {
    /// A server process pinned to the server CPUs with as many tokio workers as it has CPUs.
    fn server(&self, name: &str, mut cmd: std::process::Command) -> Result<Proc, String> {
        cmd.env("TOKIO_WORKER_THREADS", self.pin.workers.to_string())
            .env("RUST_LOG", &self.rust_log);
        Proc::spawn(name, cmd, &self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("starting {name}: {e}"))
    }

    /// A snowgate instance of the bench's own build in front of the devnode with `[cache]
    /// max_bytes`.
    fn start_snowgate(
        &self,
        name: &str,
        node_port: u16,
        max_bytes: u64,
    ) -> Result<(Proc, String), String> {
        self.start_gateway(&self.snowgate, name, node_port, max_bytes)
    }

    /// The devnode, of the bench's own build: ~1000 historical blocks with their transactions.
    /// Blocks are slow so that the chain hardly moves during the run. Returns it, its port and
    /// its URL.
    fn start_devnode(&self) -> Result<(Proc, u16, String), String> {
        let node_port = free_port();
        let mut cmd = pinned(&self.pin.server, &self.snowgate);
        cmd.args(["devnode", "--listen", &format!("127.0.0.1:{node_port}")])
            .args(["--block-interval", "60s"]);
        let mut devnode = self.server("devnode", cmd)?;
        procs::wait_listening(&mut devnode, addr(node_port), Duration::from_secs(20))?;
        Ok((devnode, node_port, format!("http://127.0.0.1:{node_port}")))
    }

    /// A snowgate instance of the binary `bin` in front of the devnode with `[cache] max_bytes`.
    fn start_gateway(
        &self,
        bin: &Path,
        name: &str,
        node_port: u16,
        max_bytes: u64,
    ) -> Result<(Proc, String), String> {
        self.start_gateway_with(bin, name, node_port, max_bytes, "")
    }

    /// [`Bench::start_gateway`] with `extra` at the end of its config (whole sections).
    fn start_gateway_with(
        &self,
        bin: &Path,
        name: &str,
        node_port: u16,
        max_bytes: u64,
        extra: &str,
    ) -> Result<(Proc, String), String> {
        let upstream = format!("url = \"http://127.0.0.1:{node_port}\"");
        self.start_gateway_to(bin, name, &upstream, max_bytes, extra)
    }

    /// [`Bench::start_gateway_with`], its one upstream's keys (`url`, and `tls_ca_file` for a TLS
    /// node) given.
    fn start_gateway_to(
        &self,
        bin: &Path,
        name: &str,
        upstream: &str,
        max_bytes: u64,
        extra: &str,
    ) -> Result<(Proc, String), String> {
        let port = free_port();
        let config = self.dir.join(format!("{name}.toml"));
        // Shipped defaults, as users run snowgate, rate limiting on, except three numbers: the
        // listen address, the cache bound of each run, and the quota's rate and burst. wrk drives
        // every run from one client IP at up to ~100,000 calls/s and the fills send 1,000,000
        // calls in under a minute: the default quota (50/s, burst 100) would refuse almost all of
        // them, and the benchmark would measure 429s. RATE_LIMIT_QUOTA (20x the fastest run's
        // 200,000 cost units/s, under the validator's bound of u32::MAX / 10) keeps every check
        // and bucket update on the path without the load ever exhausting it.
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n\n[admin]\napi_keys = [\"{}\"]\n\n[[upstreams]]\nname = \"devnode\"\n{upstream}\n\n[cache]\nmax_bytes = {max_bytes}\n\n[rate_limit]\nrequests_per_second = {RATE_LIMIT_QUOTA}\nburst = {RATE_LIMIT_QUOTA}\n",
            client::ADMIN_KEY
        ) + extra;
        std::fs::write(&config, text).map_err(|e| e.to_string())?;
        let mut cmd = pinned(&self.pin.server, bin);
        cmd.arg("serve").arg("--config").arg(&config);
        let mut p = self.server(name, cmd)?;
        procs::wait_listening(&mut p, addr(port), Duration::from_secs(20))?;
        let url = format!("http://127.0.0.1:{port}");
        self.wait_healthy(&url)?;
        Ok((p, url))
    }

    /// The devnode's block and transaction IDs, the cache-hit mix (`getBlock` for every block,
    /// `getTx` for every transaction) and the forwarded bodies (`sampleValidators`, never cached).
    #[allow(clippy::type_complexity)]
    fn bodies(
        &self,
        node: &str,
    ) -> Result<
        (
            Vec<String>,
            Vec<String>,
            Vec<(String, String)>,
            Vec<(String, String)>,
        ),
        String,
    > {
        let (blocks, txs) = self.rt.block_on(client::discover(&self.http, node))?;
        if blocks.is_empty() || txs.is_empty() {
            return Err("the devnode has no blocks or transactions".into());
        }
        let mut mix: Vec<(String, String)> = Vec::new();
        for id in &blocks {
            let body = client::rpc_body("platform.getBlock", &serde_json::json!({"blockID": id}));
            mix.push(("/ext/bc/P".into(), body));
        }
        for id in &txs {
            let body = client::rpc_body("platform.getTx", &serde_json::json!({"txID": id}));
            mix.push(("/ext/bc/P".into(), body));
        }
        let forward: Vec<(String, String)> = (1..=5)
            .map(|size| {
                let body = client::rpc_body(
                    "platform.sampleValidators",
                    &serde_json::json!({"size": size}),
                );
                ("/ext/bc/P".to_string(), body)
            })
            .collect();
        Ok((blocks, txs, mix, forward))
    }

    fn wait_healthy(&self, url: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = self.rt.block_on(async {
                client::get(&self.http, &format!("{url}/ext/health"))
                    .await
                    .is_ok_and(|r| r.status == 200)
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{url}/ext/health never answered 200"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn metrics(&self, url: &str) -> String {
        self.rt.block_on(async {
            client::get(&self.http, &format!("{url}/metrics"))
                .await
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .unwrap_or_default()
        })
    }

    /// The devnode's count of getBlock + getTx calls (to prove cache hits never reached it).
    fn node_reads(&self, node: &str) -> u64 {
        self.rt.block_on(async {
            let Ok(r) = client::get(&self.http, &format!("{node}/_devnode/calls")).await else {
                return 0;
            };
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            ["platform.getBlock", "platform.getTx"]
                .iter()
                .map(|m| v["calls"][m].as_u64().unwrap_or(0))
                .sum()
        })
    }

    /// Sends every body of `bodies` once to `url` (expects 200); returns the answers' sizes and the
    /// value of header `want` of each.
    fn send_all(
        &self,
        url: &str,
        bodies: &[(String, String)],
        want: &'static str,
    ) -> Result<Vec<(usize, Option<String>)>, String> {
        let out = std::sync::Arc::new(parking_lot::Mutex::new(vec![(0, None); bodies.len()]));
        let items: std::sync::Arc<Vec<(String, String)>> = std::sync::Arc::new(bodies.to_vec());
        let o2 = out.clone();
        // Paths differ per body: send each to its own path.
        let base = url.to_string();
        self.rt.block_on(async {
            let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let (http, items, next, out, base) = (
                    self.http.clone(),
                    items.clone(),
                    next.clone(),
                    o2.clone(),
                    base.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((path, body)) = items.get(i) else {
                            return Ok::<(), String>(());
                        };
                        let r = client::post(&http, &format!("{base}{path}"), body.clone(), want)
                            .await?;
                        if r.status != 200 {
                            return Err(format!(
                                "{base}{path}: HTTP {} for {body}: {}",
                                r.status,
                                String::from_utf8_lossy(&r.body)
                            ));
                        }
                        out.lock()[i] = (r.body.len(), r.header);
                    }
                }));
            }
            for t in tasks {
                t.await.map_err(|e| e.to_string())??;
            }
            Ok::<(), String>(())
        })?;
        let v = std::mem::take(&mut *out.lock());
        Ok(v)
    }

    /// Fills snowgate with `platform.getTx {txID, nonce}` for nonces in `range`.
    ///
    /// Over a client of its own, dropped at the end: its 32 connections would otherwise stay
    /// idle in the shared pool, and with wrk's 32 they reach snowgate's default
    /// `max_connections_per_ip` (64), so wrk's new connections would be refused with 503s.
    fn fill(&self, url: &str, txid: &str, range: std::ops::Range<usize>) -> Result<(), String> {
        let txid = txid.to_string();
        let start = range.start;
        let http = client::http();
        self.rt.block_on(client::each(
            &http,
            &format!("{url}/ext/bc/P"),
            range.len(),
            32,
            "",
            move |i| nonce_body(&txid, start + i),
            |_, r| {
                if r.status == 200 {
                    Ok(())
                } else {
                    Err(format!("fill: HTTP {}", r.status))
                }
            },
        ))
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn script_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/wrk")
        .join(name)
}

fn nonce_body(txid: &str, nonce: usize) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"platform.getTx\",\"params\":{{\"txID\":\"{txid}\",\"nonce\":{nonce}}}}}"
    )
}

fn write_bodies(path: &Path, bodies: &[(String, String)]) -> Result<(), String> {
    let mut text = String::new();
    for (p, b) in bodies {
        let _ = writeln!(text, "{p}\t{b}");
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn mib(kib: Option<u64>) -> f64 {
    kib.unwrap_or(0) as f64 / 1024.0
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    // Counted from /proc/cpuinfo: this process is pinned, so available_parallelism would say 1.
    let cores = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {}", kernel.trim())
}

fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[allow(clippy::too_many_lines)]
fn run() -> Result<(), String> {
    let pin = Pinning::detect();
    pin.pin_self();
    procs::ensure_tools()?;
    let dir = std::env::temp_dir().join(format!("snowgate-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let _cleanup = TempDir(dir.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let load = Load {
        threads: env_or("LOAD_THREADS", 1),
        connections: env_or("LOAD_CONNECTIONS", 32),
        duration: Duration::from_secs(env_or("LOAD_DURATION", 5)),
        warmup: Duration::from_secs(2),
        cpus: pin.client.clone(),
    };
    let keys: usize = env_or("LOAD_KEYS", 1_000_000);
    let rounds: usize = env_or("LOAD_ROUNDS", 3).max(1);
    let b = Bench {
        dir: dir.clone(),
        snowgate: PathBuf::from(env!("CARGO_BIN_EXE_snowgate")),
        pin: pin.clone(),
        ticks: procs::ticks_per_second(),
        rust_log: std::env::var("LOAD_RUST_LOG").unwrap_or_else(|_| "info".into()),
        rt,
        http: client::http(),
    };
    if let Some(bins) = ab::binaries()? {
        eprintln!(
            "A/B load benchmark: servers on CPUs [{}], wrk on [{}]; wrk -t{} -c{} -d{}s; temp dir {}",
            pin.server,
            pin.client,
            load.threads,
            load.connections,
            load.duration.as_secs(),
            dir.display()
        );
        let out = ab::run(&b, &bins, &load)?;
        println!("{out}");
        let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-ab-report.md");
        if std::fs::write(&report, &out).is_ok() {
            eprintln!("report written to {}", report.display());
        }
        return Ok(());
    }
    match std::env::var("LOAD_ONLY").as_deref() {
        Err(_) | Ok("") => {}
        Ok("fleet") => {
            eprintln!(
                "fleet section alone: servers on CPUs [{}], wrk on [{}]; temp dir {}",
                pin.server,
                pin.client,
                dir.display()
            );
            let mut out = format!(
                "\n## snowgate load benchmark: the fleet section, {}\n\n{}; wrk ({}); RUST_LOG={}.\n",
                now_utc(),
                machine(),
                wrk::version(),
                b.rust_log
            );
            out.push_str(&fleet::run(&b, &load, rounds)?);
            println!("{out}");
            let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-fleet-report.md");
            if std::fs::write(&report, &out).is_ok() {
                eprintln!("report written to {}", report.display());
            }
            return Ok(());
        }
        Ok("hedge") => {
            eprintln!(
                "hedge section alone: servers on CPUs [{}], clients on this process's; temp dir {}",
                pin.server,
                dir.display()
            );
            let mut out = format!(
                "\n## snowgate load benchmark: the hedge section, {}\n\n{}.\n",
                now_utc(),
                machine()
            );
            out.push_str(&hedge::run(&b)?);
            println!("{out}");
            return Ok(());
        }
        Ok("tracing") => {
            eprintln!(
                "tracing section alone: servers on CPUs [{}], wrk on [{}]; temp dir {}",
                pin.server,
                pin.client,
                dir.display()
            );
            let mut out = format!(
                "\n## snowgate load benchmark: the tracing section, {}\n\n{}; wrk ({}); RUST_LOG={}.\n",
                now_utc(),
                machine(),
                wrk::version(),
                b.rust_log
            );
            out.push_str(&traces::run(&b, &load, rounds)?);
            println!("{out}");
            return Ok(());
        }
        Ok(other) => {
            return Err(format!(
                "LOAD_ONLY={other}: the sections that run alone are `fleet`, `hedge` and `tracing`"
            ))
        }
    }
    let started = Instant::now();
    eprintln!(
        "load benchmark: servers on CPUs [{}], wrk on [{}], {} worker(s) each; wrk -t{} -c{} -d{}s; temp dir {}",
        pin.server,
        pin.client,
        pin.workers,
        load.threads,
        load.connections,
        load.duration.as_secs(),
        dir.display()
    );

    // The devnode: ~1000 historical blocks with their transactions. Blocks are slow so that the
    // chain hardly moves during the run.
    let (devnode, node_port, node) = b.start_devnode()?;
    let (blocks, txs, mix, forward) = b.bodies(&node)?;
    let mix_file = dir.join("mix.txt");
    let forward_file = dir.join("forward.txt");
    write_bodies(&mix_file, &mix)?;
    write_bodies(&forward_file, &forward)?;
    let mix_env = [("SNOWGATE_BODIES", mix_file.display().to_string())];
    let fwd_env = [("SNOWGATE_BODIES", forward_file.display().to_string())];
    // A head-class call: cached until the node's next block (one a minute here).
    let head_file = dir.join("head.txt");
    let head_body = r#"{"jsonrpc":"2.0","method":"platform.getHeight","params":{},"id":1}"#;
    write_bodies(&head_file, &[("/ext/bc/P".into(), head_body.into())])?;
    let head_env = [("SNOWGATE_BODIES", head_file.display().to_string())];
    let mix_label = format!(
        "getBlock/getTx, {} keys ({} blocks, {} txs)",
        mix.len(),
        blocks.len(),
        txs.len()
    );
    eprintln!("request mix: {mix_label}");

    // snowgate, with the default cache bound; idle memory right after start.
    let (snowgate, sg_url) = b.start_snowgate("snowgate", node_port, 256 * 1024 * 1024)?;
    // The same node over TLS, and a snowgate in front of it (forwarded calls only).
    let certs = tls::certs(&dir)?;
    let (devnode_tls, tls_node_port) = b.start_tls_devnode(&certs)?;
    let tls_upstream = format!(
        "url = \"https://127.0.0.1:{tls_node_port}\"\ntls_ca_file = \"{}\"",
        certs.ca.display()
    );
    let (snowgate_tls, sg_tls_url) =
        b.start_gateway_to(&b.snowgate, "snowgate-tls", &tls_upstream, 64 << 20, "")?;
    std::thread::sleep(Duration::from_secs(1));
    let idle_rss = snowgate.rss_kib();
    b.send_all(&sg_url, &mix, "x-cache")?;
    let second = b.send_all(&sg_url, &mix, "x-cache")?;
    if let Some((i, _)) = second
        .iter()
        .enumerate()
        .find(|(_, (_, h))| h.as_deref() != Some("HIT"))
    {
        return Err(format!("snowgate did not cache {}", mix[i].1));
    }
    let answer_size = second.iter().map(|(n, _)| n).sum::<usize>() / second.len();
    eprintln!("snowgate warmed: every key a HIT; mean answer {answer_size} bytes");

    // The ceiling: the same binary in its ceiling role.
    let ceiling_port = free_port();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = pinned(&pin.server, &exe);
    cmd.env("LOAD_BENCH_ROLE", "ceiling")
        .env("LOAD_BENCH_PORT", ceiling_port.to_string())
        .env("LOAD_BENCH_SIZE", answer_size.to_string());
    let mut ceiling = b.server("ceiling", cmd)?;
    procs::wait_listening(&mut ceiling, addr(ceiling_port), Duration::from_secs(20))?;
    let ceiling_url = format!("http://127.0.0.1:{ceiling_port}");

    // The forwarding floor of snowgate's stack (hyper server + hyper-util client, nothing else).
    let bare_port = free_port();
    let mut cmd = pinned(&pin.server, &exe);
    cmd.env("LOAD_BENCH_ROLE", "bare-proxy")
        .env("LOAD_BENCH_PORT", bare_port.to_string())
        .env("LOAD_BENCH_NODE", format!("127.0.0.1:{node_port}"));
    let mut bare = b.server("bare-proxy", cmd)?;
    procs::wait_listening(&mut bare, addr(bare_port), Duration::from_secs(20))?;
    let bare_url = format!("http://127.0.0.1:{bare_port}");

    // nginx: proxy_cache and the plain proxy; warmed with every key, then checked all HITs.
    let (cache_port, plain_port, tls_port) = (free_port(), free_port(), free_port());
    let conf = dir.join("nginx.conf");
    let tls_node = nginx::TlsNode {
        port: tls_node_port,
        ca: &certs.ca,
    };
    let ports = (cache_port, plain_port, tls_port);
    std::fs::write(
        &conf,
        nginx::config(&dir, pin.workers, node_port, ports, &tls_node),
    )
    .map_err(|e| e.to_string())?;
    let mut cmd = pinned(&pin.server, &procs::nginx_binary());
    cmd.arg("-c").arg(&conf).arg("-p").arg(&dir);
    let mut nginx = b.server("nginx", cmd)?;
    procs::wait_listening(&mut nginx, addr(cache_port), Duration::from_secs(20))?;
    procs::wait_listening(&mut nginx, addr(plain_port), Duration::from_secs(20))?;
    procs::wait_listening(&mut nginx, addr(tls_port), Duration::from_secs(20))?;
    let nginx_tls_url = format!("http://127.0.0.1:{tls_port}");
    let nginx_cache_url = format!("http://127.0.0.1:{cache_port}");
    let nginx_plain_url = format!("http://127.0.0.1:{plain_port}");
    b.send_all(&nginx_cache_url, &mix, "x-cache-status")?;
    let second = b.send_all(&nginx_cache_url, &mix, "x-cache-status")?;
    let not_hit = second
        .iter()
        .filter(|(_, h)| h.as_deref() != Some("HIT"))
        .count();
    if not_hit > 0 {
        return Err(format!(
            "nginx did not cache {not_hit} of {} keys",
            mix.len()
        ));
    }
    eprintln!("nginx warmed: every key a HIT");
    let step = |what: &str| eprintln!("[{:>4}s] {what}", started.elapsed().as_secs());

    // The cache-size pair: two instances, one holding 100 keys and one holding `keys` keys, all
    // `platform.getTx` of one transaction with a distinct `nonce` member (a node ignores it; it is
    // part of snowgate's key), so both serve the same answer and differ only in cache size.
    let txid = txs[0].clone();
    let big_bytes: u64 = (keys as u64 * 2048).max(256 * 1024 * 1024);
    let (sg100, sg100_url) = b.start_snowgate("snowgate-100", node_port, big_bytes)?;
    b.fill(&sg100_url, &txid, 0..100)?;
    let (big, big_url) = b.start_snowgate("snowgate-big", node_port, big_bytes)?;
    eprintln!("filling {keys} keys");
    let fill_start = Instant::now();
    b.fill(&big_url, &txid, 0..keys)?;
    let fill_secs = fill_start.elapsed().as_secs_f64();
    let big_entries = client::metric(&b.metrics(&big_url), "snowgate_cache_entries");
    if (big_entries as usize) < keys * 99 / 100 {
        return Err(format!(
            "the big cache holds {big_entries} entries, not {keys}"
        ));
    }
    let nonce_env = |n: usize| {
        vec![
            ("SNOWGATE_TXID", txid.clone()),
            ("SNOWGATE_KEYS", n.to_string()),
        ]
    };

    // Every contestant, run in rounds (each round runs them all once, in this order), so that a
    // burst of noise from other tenants of the machine hits one round of each rather than all the
    // rounds of one contestant. The table gives the median round of each.
    let one = Load {
        connections: 1,
        ..load.clone()
    };
    let fwd_label = "sampleValidators (never cached)".to_string();
    let fwd1_label = "sampleValidators, 1 connection".to_string();
    let contestants: Vec<Contestant<'_>> = vec![
        Contestant::new(
            "ceiling (fixed bytes)",
            format!("{mix_label}; {answer_size}-byte answer"),
            &ceiling_url,
            "mix.lua",
            mix_env.to_vec(),
            vec![&ceiling],
            &load,
        ),
        Contestant::new(
            "snowgate, cache hits",
            mix_label.clone(),
            &sg_url,
            "mix.lua",
            mix_env.to_vec(),
            vec![&snowgate],
            &load,
        ),
        Contestant::new(
            "nginx proxy_cache",
            mix_label.clone(),
            &nginx_cache_url,
            "mix.lua",
            mix_env.to_vec(),
            vec![&nginx],
            &load,
        ),
        Contestant::new(
            "direct (devnode)",
            mix_label.clone(),
            &node,
            "mix.lua",
            mix_env.to_vec(),
            vec![&devnode],
            &load,
        ),
        Contestant::new(
            "direct (devnode)",
            fwd_label.clone(),
            &node,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&devnode],
            &load,
        ),
        Contestant::new(
            "snowgate, forwarded",
            fwd_label.clone(),
            &sg_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&snowgate, &devnode],
            &load,
        ),
        Contestant::new(
            "nginx plain proxy",
            fwd_label.clone(),
            &nginx_plain_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&nginx, &devnode],
            &load,
        ),
        Contestant::new(
            "bare hyper proxy (stack floor)",
            fwd_label.clone(),
            &bare_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&bare, &devnode],
            &load,
        ),
        Contestant::new(
            "direct (devnode)",
            fwd1_label.clone(),
            &node,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&devnode],
            &one,
        ),
        Contestant::new(
            "snowgate, forwarded",
            fwd1_label.clone(),
            &sg_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&snowgate, &devnode],
            &one,
        ),
        Contestant::new(
            "nginx plain proxy",
            fwd1_label.clone(),
            &nginx_plain_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&nginx, &devnode],
            &one,
        ),
        Contestant::new(
            "snowgate, forwarded over https",
            fwd_label.clone(),
            &sg_tls_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&snowgate_tls, &devnode_tls],
            &load,
        ),
        Contestant::new(
            "nginx plain proxy over https",
            fwd_label.clone(),
            &nginx_tls_url,
            "mix.lua",
            fwd_env.to_vec(),
            vec![&nginx, &devnode_tls],
            &load,
        ),
        Contestant::new(
            "snowgate, cache hits",
            "getTx + nonce, 100 keys cached".into(),
            &sg100_url,
            "nonce.lua",
            nonce_env(100),
            vec![&sg100],
            &load,
        ),
        Contestant::new(
            "snowgate, cache hits",
            format!("getTx + nonce, {keys} keys cached"),
            &big_url,
            "nonce.lua",
            nonce_env(keys),
            vec![&big],
            &load,
        ),
        Contestant::new(
            "snowgate, cache hits",
            "getHeight (head class)".into(),
            &sg_url,
            "mix.lua",
            head_env.to_vec(),
            vec![&snowgate],
            &load,
        ),
    ];
    const CEILING: usize = 0;
    const HIT: usize = 1;
    const NGX_CACHE: usize = 2;
    const DIRECT_FWD: usize = 4;
    const SG_FWD: usize = 5;
    const NGX_FWD: usize = 6;
    const BARE_FWD: usize = 7;
    const DIRECT_1: usize = 8;
    const SG_1: usize = 9;
    const NGX_1: usize = 10;
    const SG_TLS: usize = 11;
    const NGX_TLS: usize = 12;
    const SMALL: usize = 13;
    const LARGE: usize = 14;
    const HEAD: usize = 15;

    let misses = miss_count(&b.metrics(&sg_url));
    let mut node_calls = 0;
    let mut results: Vec<Vec<Measured>> = vec![Vec::new(); contestants.len()];
    for round in 0..rounds {
        for (i, c) in contestants.iter().enumerate() {
            step(&format!(
                "round {}/{rounds}: {}, {}",
                round + 1,
                c.name,
                c.mix
            ));
            let mut load = c.load.clone();
            if round > 0 {
                load.warmup = Duration::ZERO;
            }
            let env: Vec<(&str, String)> = c.env.clone();
            let before = b.node_reads(&node);
            let m = wrk::measure(
                &load,
                c.url,
                &script_path(c.script),
                &env,
                &c.servers,
                b.ticks,
            )?;
            if i == HIT || i == NGX_CACHE {
                node_calls += b.node_reads(&node) - before;
            }
            results[i].push(m);
        }
    }
    let labels: Vec<(&str, String)> = contestants
        .iter()
        .map(|c| (c.name, c.mix.clone()))
        .collect();
    drop(contestants);
    // Hits must have stayed hits: no cache miss in snowgate and no getBlock/getTx at the node
    // (the cache-size instances did their misses while filling, before this point).
    let new_misses = miss_count(&b.metrics(&sg_url)) - misses;
    let mut notes = vec![
        format!("during the runs: {new_misses} cache misses in snowgate and {node_calls} getBlock/getTx calls reached the devnode during the snowgate and nginx cache-hit runs"),
        format!("cache-size pair: {keys} keys filled in {fill_secs:.0} s; {big_entries:.0} entries held; {:.0} MiB resident (the 100-key instance: {:.0} MiB)", mib(big.rss_kib()), mib(sg100.rss_kib())),
    ];
    drop(big);
    drop(sg100);
    drop(nginx);
    drop(ceiling);
    drop(bare);

    // Memory with max_bytes = 64 MiB, filled past capacity.
    step("memory: max_bytes = 64 MiB, filled past capacity");
    let (small_sg, small_url) = b.start_snowgate("snowgate-64mib", node_port, 64 * 1024 * 1024)?;
    std::thread::sleep(Duration::from_secs(1));
    let idle_64 = small_sg.rss_kib();
    let fill_keys = 160_000;
    b.fill(&small_url, &txid, 0..fill_keys)?;
    std::thread::sleep(Duration::from_secs(2));
    let m64 = b.metrics(&small_url);
    let full_rss = small_sg.rss_kib();
    let evictions = client::metric(&m64, "snowgate_cache_evictions_total");
    let weighted = client::metric(&m64, "snowgate_cache_bytes");
    let entries = client::metric(&m64, "snowgate_cache_entries");
    notes.push(format!(
        "64 MiB instance: {:.1} MiB idle; {fill_keys} distinct answers sent, {evictions:.0} evicted, {entries:.0} entries / {:.1} MiB weighted held at the end",
        mib(idle_64),
        weighted / 1048576.0
    ));
    drop(small_sg);
    drop(snowgate);
    drop(snowgate_tls);
    drop(devnode);
    drop(devnode_tls);

    step("the fleet section");
    let fleet = fleet::run(&b, &load, rounds)?;

    let med: Vec<Measured> = results.iter().map(|r| median(r)).collect();

    // The report.
    let mut out = String::new();
    let _ = writeln!(out, "\n## snowgate load benchmark, {}", now_utc());
    let _ = writeln!(
        out,
        "\n{}; servers pinned to CPU(s) {} with {} worker(s) each, wrk ({}) pinned to CPU(s) {}; wrk -t{} -c{} -d{}s, {} rounds (the median round shown; a {}s warm-up before the first); snowgate with its shipped defaults, rate limiting on (only the quota's rate and burst raised to {RATE_LIMIT_QUOTA} units, which the load cannot exhaust), RUST_LOG={}.\n",
        machine(),
        if pin.server.is_empty() { "-" } else { &pin.server },
        pin.workers,
        wrk::version(),
        if pin.client.is_empty() { "-" } else { &pin.client },
        load.threads,
        load.connections,
        load.duration.as_secs(),
        rounds,
        load.warmup.as_secs(),
        b.rust_log
    );
    let _ = writeln!(
        out,
        "| contestant | requests | req/s (median) | req/s (min-max) | p50 | p99 | server CPU | CPU µs/req | errors |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (name, mix)) in labels.iter().enumerate() {
        let m = &med[i];
        let lo = results[i]
            .iter()
            .map(|m| m.rps)
            .fold(f64::INFINITY, f64::min);
        let hi = results[i].iter().map(|m| m.rps).fold(0.0, f64::max);
        let errors: u64 = results[i].iter().map(|m| m.errors).sum();
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {lo:.0}-{hi:.0} | {} | {} | {:.2} cores | {:.1} | {errors} |",
            name,
            mix,
            m.rps,
            us(m.p50_us),
            us(m.p99_us),
            m.server_cores,
            m.cpu_us_per_request(),
        );
    }
    let _ = writeln!(out, "\n| target | measured | verdict |\n|---|---|---|");
    let mut target = |what: &str, measured: String, ok: bool| {
        let _ = writeln!(
            out,
            "| {what} | {measured} | {} |",
            if ok { "pass" } else { "FAIL" }
        );
    };
    let (hit, ceil, ngx) = (&med[HIT], &med[CEILING], &med[NGX_CACHE]);
    let r = hit.rps / ceil.rps;
    target(
        "cache hits >= 0.90 x ceiling throughput",
        format!(
            "{r:.2} x (CPU per request: {:.2} x the ceiling's)",
            hit.cpu_us_per_request() / ceil.cpu_us_per_request()
        ),
        r >= 0.90,
    );
    // The cost of a hit against the ceiling's, on each kind of hit.
    for (what, i) in [
        ("getBlock/getTx".to_string(), HIT),
        (format!("getTx + nonce, {keys} keys"), LARGE),
        ("getHeight, head class".to_string(), HEAD),
    ] {
        let x = med[i].cpu_us_per_request() / ceil.cpu_us_per_request();
        target(
            &format!("cache hits ({what}): CPU per request <= 1.11 x the ceiling's"),
            format!(
                "{x:.2} x ({:.1} µs against {:.1} µs)",
                med[i].cpu_us_per_request(),
                ceil.cpu_us_per_request()
            ),
            x <= 1.11,
        );
    }
    let r = hit.rps / ngx.rps;
    target(
        "cache hits >= 1.10 x nginx proxy_cache throughput",
        format!("{r:.2} x (nginx: {:.2} x the ceiling)", ngx.rps / ceil.rps),
        r >= 1.10,
    );
    target(
        "cache-hit p99 no worse than nginx proxy_cache",
        format!("{} vs {}", us(hit.p99_us), us(ngx.p99_us)),
        hit.p99_us <= ngx.p99_us,
    );
    let r = med[SG_FWD].rps / med[NGX_FWD].rps;
    // CPU of the proxy alone: the devnode's share (measured direct) taken off.
    // Each process measured on its own in the same run: the proxy's share, then the node's
    // behind it.
    let own = |m: &Measured| {
        let proxy = m.first_us_per_request();
        (proxy, m.cpu_us_per_request() - proxy)
    };
    let (sg, sg_node) = own(&med[SG_FWD]);
    let (ngx, ngx_node) = own(&med[NGX_FWD]);
    let (bare, bare_node) = own(&med[BARE_FWD]);
    target(
        "forwarded >= 1.0 x nginx plain proxy throughput",
        format!(
            "{r:.2} x (proxy CPU per request: snowgate {sg:.1} µs, nginx {ngx:.1} µs, bare hyper proxy {bare:.1} µs; the devnode behind each: {sg_node:.1}, {ngx_node:.1}, {bare_node:.1} µs)",
        ),
        r >= 1.0,
    );
    target(
        "forwarded: proxy CPU per call <= 1.0 x nginx plain proxy's",
        format!("{:.2} x", sg / ngx),
        sg <= ngx,
    );
    let (sg_tls, sg_tls_node) = own(&med[SG_TLS]);
    let (ngx_tls, ngx_tls_node) = own(&med[NGX_TLS]);
    // A proxy answering errors is fast at it: the comparison holds only if neither did.
    let tls_errors: u64 = (results[SG_TLS].iter().chain(&results[NGX_TLS]))
        .map(|m| m.errors)
        .sum();
    target(
        "forwarded over https: proxy CPU per call <= 1.0 x nginx plain proxy's (proxy_pass https://, session reuse, keep-alive)",
        format!(
            "{:.2} x (snowgate {sg_tls:.1} µs, nginx {ngx_tls:.1} µs; the TLS devnode behind each: {sg_tls_node:.1}, {ngx_tls_node:.1} µs; {tls_errors} errors)",
            sg_tls / ngx_tls
        ),
        sg_tls <= ngx_tls && tls_errors == 0,
    );
    let added_1 = med[SG_1].p50_us - med[DIRECT_1].p50_us;
    target(
        "added p50 over direct <= 100 µs (1 connection: the path's own latency)",
        format!(
            "{added_1:.0} µs (nginx: {:.0} µs)",
            med[NGX_1].p50_us - med[DIRECT_1].p50_us
        ),
        added_1 <= 100.0,
    );
    let added_c = med[SG_FWD].p50_us - med[DIRECT_FWD].p50_us;
    target(
        &format!(
            "added p50 over direct <= 100 µs ({} connections: includes queueing)",
            load.connections
        ),
        format!(
            "{added_c:.0} µs (nginx: {:.0} µs)",
            med[NGX_FWD].p50_us - med[DIRECT_FWD].p50_us
        ),
        added_c <= 100.0,
    );
    let r = med[LARGE].rps / med[SMALL].rps;
    target(
        &format!("hits with {keys} keys >= 0.90 x with 100 keys"),
        format!(
            "{r:.2} x (CPU per request: {:.2} x)",
            med[LARGE].cpu_us_per_request() / med[SMALL].cpu_us_per_request()
        ),
        r >= 0.90,
    );
    target(
        "resident memory idle <= 30 MiB",
        format!("{:.1} MiB", mib(idle_rss)),
        mib(idle_rss) <= 30.0,
    );
    target(
        "resident memory with max_bytes = 64 MiB filled past capacity <= 110 MiB",
        format!("{:.1} MiB", mib(full_rss)),
        full_rss.is_some() && mib(full_rss) <= 110.0 && evictions > 0.0,
    );
    let _ = writeln!(out);
    for n in &notes {
        let _ = writeln!(out, "* {n}");
    }
    let _ = writeln!(out, "* total run time {} s", started.elapsed().as_secs());
    out.push_str(&fleet);
    println!("{out}");
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-report.md");
    if std::fs::write(&report, &out).is_ok() {
        eprintln!("report written to {}", report.display());
    }
    Ok(())
}

/// One contestant: what wrk drives, and which processes' CPU counts as the server's.
struct Contestant<'a> {
    name: &'static str,
    mix: String,
    url: &'a str,
    script: &'static str,
    env: Vec<(&'static str, String)>,
    servers: Vec<&'a Proc>,
    load: Load,
}

impl<'a> Contestant<'a> {
    fn new(
        name: &'static str,
        mix: String,
        url: &'a str,
        script: &'static str,
        env: Vec<(&'static str, String)>,
        servers: Vec<&'a Proc>,
        load: &Load,
    ) -> Contestant<'a> {
        Contestant {
            name,
            mix,
            url,
            script,
            env,
            servers,
            load: load.clone(),
        }
    }
}

/// The round with the median throughput.
fn median(runs: &[Measured]) -> Measured {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    sorted.get(sorted.len() / 2).cloned().unwrap_or_default()
}

/// Cache misses counted by snowgate's metrics.
fn miss_count(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("snowgate_cache_requests_total{") && l.contains("result=\"miss\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Microseconds, shown as µs below 10 ms and ms above.
fn us(v: f64) -> String {
    if v < 10_000.0 {
        format!("{v:.0} µs")
    } else {
        format!("{:.1} ms", v / 1000.0)
    }
}
