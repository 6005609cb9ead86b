//! The fleet section of the load benchmark (issue 14): two snowgate instances sharing one
//! redis-server on a unix socket, in front of one devnode. Run alone with
//! `LOAD_ONLY=fleet cargo bench --bench load` (a few minutes), or as the last part of the full
//! run.
//!
//! It measures what decides how a fleet is built:
//!
//! 1. **a hit served from Redis against a node call**: N distinct immutable keys filled through
//!    instance A, then asked once each of instance B, whose memory has never seen them (every
//!    answer must be `X-Cache: HIT`, counted as a shared-tier hit by B, with no node call); then
//!    the same keys again (now memory hits); then N new keys (misses: a Redis lookup, then the
//!    node), and N new keys on an instance without `[redis]` (the node call alone). Each request
//!    is sent alone, one after another over one kept-alive connection, and timed by this harness:
//!    the figures are latencies, not throughput. Against a devnode answering at once, and one
//!    answering after `--latency 5ms` (a realistic node);
//! 2. **cache-hit CPU per request, global quotas against local quotas**: the main table's wrk hit
//!    load on an instance with `[redis]` and `[rate_limit] scope = "global"`, and on one with
//!    `scope = "local"`, in alternating rounds; snowgate's own CPU time per request (and the
//!    redis-server's, separately), and their ratio (the target: within 15 %). Twice: from
//!    one client with the main table's quota (finite, never exhausted by the load: the global
//!    instance leases from Redis, rarely), and from 10,000 clients (`X-Forwarded-For` from a
//!    trusted proxy, as behind a load balancer) with the shipped default quota, which each of
//!    them stays well under while every one of them needs its own leases;
//! 3. **quota accuracy**: one client spraying both instances round-robin for
//!    `LOAD_FLEET_QUOTA_SECS` (10) seconds against a global quota of 200 units/s, burst 200
//!    (`platform.sampleValidators`, never cached, 2 units; the client sends up to 2000 calls/s,
//!    20 times what it may): accepted / (burst + rate × time); then
//!    two clients (two API keys, each with that quota) at once, each on its own; and one client
//!    against two instances with `scope = "local"`, for contrast (2 × the quota expected);
//! 4. **identical cold misses across instances**: K new keys, each asked of A and B at the same
//!    moment; the devnode's call count per key says how many node calls a cross-instance miss
//!    lock in Redis would save (at most 1 − 1/2 of them with two instances). Then again with B
//!    asked 1 ms and 10 ms after A: how long the window is in which a second instance still
//!    misses (a lock only helps inside it).
//!
//! Every instance keeps snowgate's shipped defaults except its listen address, its upstream,
//! `[cache] max_bytes`, `[redis] url` and the quota under test. Keys are `platform.getTx` of one
//! transaction with a distinct `nonce` member (the node ignores it; snowgate's key includes it),
//! so every key's answer is the same size and every measured key is new to everyone.
//!
//! Knobs: `LOAD_FLEET_KEYS` (N, 1000), `LOAD_FLEET_PAIRS` (K, 200), `LOAD_FLEET_QUOTA_SECS` (10),
//! `LOAD_FLEET_ROUNDS` (part 2's rounds: `LOAD_ROUNDS`, at least 5), `LOAD_FLEET_SLOW` (the slow
//! devnode's latency, `5ms`; `0` skips that run); `LOAD_DURATION` and `LOAD_CONNECTIONS` as in
//! the main table.

use std::cell::Cell;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};

use crate::procs::{self, free_port, pinned, Proc};
use crate::wrk::{self, Load, Measured};
use crate::{addr, client, env_or, nonce_body, script_path, write_bodies, Bench, RATE_LIMIT_QUOTA};

/// The global quota of the accuracy runs: units per second, and burst.
const QUOTA_RATE: u32 = 200;
const QUOTA_BURST: u32 = 200;
/// The method the accuracy runs spend their quota on (never cached), and its cost in units.
const SPRAY_METHOD: &str = "platform.sampleValidators";
const SPRAY_COST: u32 = 2;
/// The API keys of the two-client accuracy run (fake, local to this run).
const KEYS: [&str; 2] = ["fleet-bench-client-one-0001", "fleet-bench-client-two-0002"];
/// Concurrent requests of one spraying client.
const SPRAY_CONCURRENCY: usize = 4;
/// The most calls per second one spraying client sends: 20 times what its quota allows (100
/// calls/s), so the quota, not the client, decides, without flooding the shared machine with
/// 429s.
const SPRAY_RATE: f64 = 2000.0;

/// What one instance's configuration sets beyond the shipped defaults.
struct Setup<'a> {
    /// `[redis] url` is this socket.
    redis: Option<&'a Path>,
    /// `[rate_limit] scope` (unset: the default, global when `[redis]` is set).
    scope: Option<&'static str>,
    /// `[rate_limit]` rate and burst, also the quota of each of `keys` (unset: the shipped
    /// defaults, 50 units/s and a burst of 100).
    quota: Option<(u32, u32)>,
    /// `[[rate_limit.keys]]` (only with `quota`).
    keys: &'a [&'a str],
    /// `[rate_limit] trusted_proxies = ["127.0.0.1/32"]`: the client is the address in
    /// `X-Forwarded-For`, as behind a load balancer.
    behind_proxy: bool,
}

impl Setup<'_> {
    fn text(&self, port: u16, node_port: u16) -> String {
        let mut t = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n\n[admin]\napi_keys = [\"{}\"]\n\n[[upstreams]]\nname = \"devnode\"\nurl = \"http://127.0.0.1:{node_port}\"\n\n[cache]\nmax_bytes = {}\n\n",
            client::ADMIN_KEY,
            256 * 1024 * 1024
        );
        if let Some(sock) = self.redis {
            let _ = write!(t, "[redis]\nurl = \"redis+unix://{}\"\n\n", sock.display());
        }
        t.push_str("[rate_limit]\n");
        if let Some((rate, burst)) = self.quota {
            let _ = write!(t, "requests_per_second = {rate}\nburst = {burst}\n");
        }
        if let Some(scope) = self.scope {
            let _ = writeln!(t, "scope = \"{scope}\"");
        }
        if self.behind_proxy {
            t.push_str("trusted_proxies = [\"127.0.0.1/32\"]\n");
        }
        for (key, (rate, burst)) in self.keys.iter().zip(self.quota.into_iter().cycle()) {
            let _ = write!(
                t,
                "\n[[rate_limit.keys]]\nkey = \"{key}\"\nrequests_per_second = {rate}\nburst = {burst}\n"
            );
        }
        t
    }
}

/// Nonces never asked before in this run: each measured key is new to every instance and to
/// Redis.
struct Nonces(Cell<usize>);

impl Nonces {
    fn take(&self, n: usize) -> Range<usize> {
        let start = self.0.get();
        self.0.set(start + n);
        start..start + n
    }
}

/// Latencies of one kind of request, µs.
struct Timing {
    what: String,
    samples: Vec<f64>,
    /// Node calls (getBlock + getTx) during these requests.
    node_calls: u64,
    /// What was checked about the answers, for the table.
    check: String,
}

impl Timing {
    fn percentile(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return 0.0;
        }
        let i = ((p / 100.0) * (s.len() - 1) as f64).round() as usize;
        s[i.min(s.len() - 1)]
    }

    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }
}

/// The figures of one devnode (parts 1 and 4).
struct NodeRun {
    latency: Duration,
    timings: Vec<Timing>,
    /// Part 4, for each delay of B's request after A's.
    pairs: Vec<Pairs>,
    /// What one shared entry costs Redis (the first run only: Redis holds nothing else then).
    entries: Option<Entries>,
}

/// Redis memory per shared entry, for sizing `maxmemory`.
struct Entries {
    /// The node's answer, bytes.
    answer: usize,
    /// `used_memory` growth over the fill, per key filled.
    used_per_key: Option<f64>,
    /// Mean `MEMORY USAGE` and `STRLEN` (the stored value) over the sampled keys, and how many.
    usage: Option<(f64, f64, usize)>,
}

/// Part 4 with one delay: K new keys, each asked of A and, `delay` later, of B.
struct Pairs {
    delay: Duration,
    keys: usize,
    /// Node calls (getTx) they cost.
    calls: u64,
    /// Keys that both instances answered `X-Cache: MISS`.
    both_missed: usize,
}

/// The delays of B's request after A's in part 4: at the same moment, and later.
const PAIR_DELAYS_MS: [u64; 3] = [0, 1, 10];

/// One spraying client's outcome.
#[derive(Default)]
struct Spray {
    accepted: u64,
    refused: u64,
    other: u64,
    secs: f64,
}

impl Spray {
    /// Accepted units over what the quota allows in the time: burst + rate × seconds.
    fn ratio(&self) -> f64 {
        let allowed = f64::from(QUOTA_BURST) + f64::from(QUOTA_RATE) * self.secs;
        (self.accepted * u64::from(SPRAY_COST)) as f64 / allowed
    }

    fn expected_calls(&self) -> f64 {
        (f64::from(QUOTA_BURST) + f64::from(QUOTA_RATE) * self.secs) / f64::from(SPRAY_COST)
    }
}

/// One row of the accuracy table.
struct Accuracy {
    case: String,
    sprays: Vec<Spray>,
    node_calls: u64,
    /// Global quota leases granted, refused and returned by Redis, both instances together.
    leases: [f64; 3],
}

/// Runs the fleet section; returns its markdown (a heading, the tables and notes).
pub fn run(b: &Bench, load: &Load, rounds: usize) -> Result<String, String> {
    let started = Instant::now();
    let step = |what: &str| eprintln!("[fleet {:>4}s] {what}", started.elapsed().as_secs());
    procs::ensure_redis()?;
    let n: usize = env_or("LOAD_FLEET_KEYS", 1000usize).max(1);
    let k: usize = env_or("LOAD_FLEET_PAIRS", 200usize).max(1);
    let quota_secs: u64 = env_or("LOAD_FLEET_QUOTA_SECS", 10u64).max(1);
    let slow = match std::env::var("LOAD_FLEET_SLOW") {
        Ok(v) if v.trim() == "0" => None,
        Ok(v) => {
            Some(humantime::parse_duration(v.trim()).map_err(|e| format!("LOAD_FLEET_SLOW: {e}"))?)
        }
        Err(_) => Some(Duration::from_millis(5)),
    };

    step("redis-server on a unix socket");
    let (redis, sock) = procs::start_redis(&b.dir, &b.pin.server)?;
    let redis_version = procs::redis_cli(&sock, &["INFO", "server"])
        .ok()
        .and_then(|i| {
            i.lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let nonces = Nonces(Cell::new(1_000_000_000));

    // Parts 1 and 4, on a devnode answering at once.
    let (devnode, node_port, node) = start_devnode(b, "fleet-devnode", Duration::ZERO)?;
    let (blocks, txs, mix, _) = b.bodies(&node)?;
    let txid = txs
        .first()
        .cloned()
        .ok_or("the devnode has no transactions")?;
    let mut node_runs = vec![node_run(
        b,
        &step,
        (node_port, &node),
        Duration::ZERO,
        &sock,
        &txid,
        &nonces,
        (n, k),
    )?];

    // Part 2: CPU per cache hit, global quotas against local quotas.
    let cpu_rounds: usize = env_or("LOAD_FLEET_ROUNDS", rounds.max(5)).max(1);
    let cpu = hit_cpu(b, &step, node_port, &sock, &mix, load, cpu_rounds, &redis)?;

    // Part 3: quota accuracy.
    let accuracy = quota_accuracy(b, &step, (node_port, &node), &sock, quota_secs)?;
    drop(devnode);

    // Parts 1 and 4 again behind a node with a realistic latency.
    if let Some(latency) = slow {
        let (slow_node, slow_port, slow_url) = start_devnode(b, "fleet-devnode-slow", latency)?;
        node_runs.push(node_run(
            b,
            &step,
            (slow_port, &slow_url),
            latency,
            &sock,
            &txid,
            &nonces,
            (n, k),
        )?);
        drop(slow_node);
    }
    let redis_keys = procs::redis_cli(&sock, &["DBSIZE"]).unwrap_or_default();
    drop(redis);

    Ok(report(&Report {
        b,
        load,
        rounds: cpu_rounds,
        redis_version: &redis_version,
        mix_label: format!(
            "getBlock/getTx, {} keys ({} blocks, {} txs)",
            mix.len(),
            blocks.len(),
            txs.len()
        ),
        node_runs: &node_runs,
        cpu: &cpu,
        accuracy: &accuracy,
        redis_keys: &redis_keys,
        secs: started.elapsed().as_secs(),
    }))
}

/// A devnode of the bench's build (the same chain as the main run's) adding `latency` to every
/// answer. Returns it, its port and its URL.
fn start_devnode(b: &Bench, name: &str, latency: Duration) -> Result<(Proc, u16, String), String> {
    let port = free_port();
    let mut cmd = pinned(&b.pin.server, &b.snowgate);
    cmd.args(["devnode", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--block-interval", "60s"])
        .args(["--latency", &format!("{}ms", latency.as_millis())]);
    let mut p = b.server(name, cmd)?;
    procs::wait_listening(&mut p, addr(port), Duration::from_secs(20))?;
    Ok((p, port, format!("http://127.0.0.1:{port}")))
}

/// A snowgate instance in front of the devnode on `node_port`, configured by `setup`; returns
/// once it is healthy and, with `[redis]`, says Redis is up.
fn start_instance(
    b: &Bench,
    name: &str,
    node_port: u16,
    setup: &Setup<'_>,
) -> Result<(Proc, String), String> {
    let port = free_port();
    let config = b.dir.join(format!("{name}.toml"));
    std::fs::write(&config, setup.text(port, node_port)).map_err(|e| e.to_string())?;
    let mut cmd = pinned(&b.pin.server, &b.snowgate);
    cmd.arg("serve").arg("--config").arg(&config);
    let mut p = b.server(name, cmd)?;
    procs::wait_listening(&mut p, addr(port), Duration::from_secs(20))?;
    let url = format!("http://127.0.0.1:{port}");
    b.wait_healthy(&url)?;
    if setup.redis.is_some() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = b.rt.block_on(async {
                client::get(&b.http, &format!("{url}/ext/health"))
                    .await
                    .is_ok_and(|r| String::from_utf8_lossy(&r.body).contains("\"redis\":\"up\""))
            });
            if up {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{name}: /ext/health never said redis up"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok((p, url))
}

/// Waits until `url`'s shared tier takes part: a new key's miss is looked up in Redis (counted
/// `miss`, not `skipped` as it is until the instance has learned the network ID).
fn wait_sharing(b: &Bench, url: &str, txid: &str, nonces: &Nonces) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let http = client::http();
    loop {
        let before = shared_lookups(&b.metrics(url), "miss");
        let nonce = nonces.take(1).start;
        b.rt.block_on(client::post(
            &http,
            &format!("{url}/ext/bc/P"),
            nonce_body(txid, nonce),
            "",
        ))?;
        if shared_lookups(&b.metrics(url), "miss") > before {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{url}: the shared tier never looked a miss up in Redis"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Parts 1 and 4 against one devnode: `(N, K)` keys.
#[allow(clippy::too_many_arguments)]
fn node_run(
    b: &Bench,
    step: &dyn Fn(&str),
    (node_port, node): (u16, &str),
    latency: Duration,
    sock: &Path,
    txid: &str,
    nonces: &Nonces,
    (n, k): (usize, usize),
) -> Result<NodeRun, String> {
    let tag = format!("node +{} ms", latency.as_millis());
    step(&format!("{tag}: instances A and B with [redis], C without"));
    let shared = Setup {
        redis: Some(sock),
        scope: None,
        quota: Some((RATE_LIMIT_QUOTA, RATE_LIMIT_QUOTA)),
        keys: &[],
        behind_proxy: false,
    };
    let ms = latency.as_millis();
    let (a_proc, a_url) = start_instance(b, &format!("fleet-a-{ms}ms"), node_port, &shared)?;
    let (b_proc, b_url) = start_instance(b, &format!("fleet-b-{ms}ms"), node_port, &shared)?;
    let plain = Setup {
        redis: None,
        ..shared
    };
    let (c_proc, c_url) = start_instance(b, &format!("fleet-c-{ms}ms"), node_port, &plain)?;
    wait_sharing(b, &a_url, txid, nonces)?;
    wait_sharing(b, &b_url, txid, nonces)?;

    // Fill Redis through A, and wait until A has written every key.
    step(&format!("{tag}: {n} keys filled through A"));
    let mem_before = redis_memory(sock);
    let written_before = shared_writes(&b.metrics(&a_url));
    let filled = nonces.take(n);
    b.fill(&a_url, txid, filled.clone())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while shared_writes(&b.metrics(&a_url)) < written_before + n as f64 {
        if Instant::now() > deadline {
            return Err(format!(
                "A wrote {} of {n} keys to Redis in 30 s",
                shared_writes(&b.metrics(&a_url)) - written_before
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mem_after = redis_memory(sock);
    let usage = latency.is_zero().then(|| entry_usage(sock)).flatten();

    let mut timings = Vec::new();
    let bodies = |r: Range<usize>| r.map(|i| nonce_body(txid, i)).collect::<Vec<_>>();

    // B's first sight of each key: all from Redis.
    step(&format!(
        "{tag}: B asks each of the {n} keys once (Redis hits)"
    ));
    let hits_before = shared_lookups(&b.metrics(&b_url), "hit");
    let node_before = b.node_reads(node);
    let answers = timed(b, &b_url, &bodies(filled.clone()))?;
    let node_calls = b.node_reads(node) - node_before;
    let redis_hits = shared_lookups(&b.metrics(&b_url), "hit") - hits_before;
    let not_hit = answers
        .iter()
        .filter(|(_, h)| h.as_deref() != Some("HIT"))
        .count();
    if not_hit > 0 || node_calls > 0 || (redis_hits as usize) < n {
        return Err(format!(
            "B's first sight of {n} keys filled through A: {not_hit} not X-Cache: HIT, {node_calls} node calls, {redis_hits} shared-tier hits"
        ));
    }
    timings.push(Timing {
        what: "hit from Redis (B's first sight of a key A filled)".into(),
        samples: answers.iter().map(|(t, _)| *t).collect(),
        node_calls,
        check: format!("all HIT; {redis_hits:.0} shared-tier hits"),
    });

    // The same keys again: memory hits.
    let node_before = b.node_reads(node);
    let answers = timed(b, &b_url, &bodies(filled.clone()))?;
    let node_calls = b.node_reads(node) - node_before;
    let all_hit = answers.iter().all(|(_, h)| h.as_deref() == Some("HIT"));
    timings.push(Timing {
        what: "hit from memory (the same keys again on B)".into(),
        samples: answers.iter().map(|(t, _)| *t).collect(),
        node_calls,
        check: if all_hit {
            "all HIT".into()
        } else {
            "NOT all HIT".into()
        },
    });

    // New keys on B: a Redis lookup, then the node.
    step(&format!("{tag}: {n} new keys on B and on C (misses)"));
    for (what, url) in [
        ("miss: Redis lookup, then the node (B)", &b_url),
        ("miss without [redis]: the node only (C)", &c_url),
    ] {
        let node_before = b.node_reads(node);
        let answers = timed(b, url, &bodies(nonces.take(n)))?;
        let node_calls = b.node_reads(node) - node_before;
        let misses = answers
            .iter()
            .filter(|(_, h)| h.as_deref() == Some("MISS"))
            .count();
        timings.push(Timing {
            what: what.into(),
            samples: answers.iter().map(|(t, _)| *t).collect(),
            node_calls,
            check: format!("{misses} MISS"),
        });
    }

    // Part 4: each new key asked of A and B at the same moment, then with B a little later.
    let mut pair_runs = Vec::new();
    for ms in PAIR_DELAYS_MS {
        step(&format!(
            "{tag}: {k} new keys, each asked of A and, {ms} ms later, of B"
        ));
        let delay = Duration::from_millis(ms);
        let node_before = b.node_reads(node);
        let both_missed = pairs(b, [&a_url, &b_url], &bodies(nonces.take(k)), delay)?;
        pair_runs.push(Pairs {
            delay,
            keys: k,
            calls: b.node_reads(node) - node_before,
            both_missed,
        });
    }
    drop((a_proc, b_proc, c_proc));
    let entries = latency.is_zero().then(|| {
        // The node's answer alone, as it comes back (its `result` is what Redis keeps).
        let answer =
            b.rt.block_on(client::post(
                &b.http,
                &format!("{node}/ext/bc/P"),
                nonce_body(txid, 0),
                "",
            ))
            .map(|r| r.body.len())
            .unwrap_or(0);
        Entries {
            answer,
            used_per_key: match (mem_before, mem_after) {
                (Some(x), Some(y)) if y > x => Some((y - x) as f64 / n as f64),
                _ => None,
            },
            usage,
        }
    });
    Ok(NodeRun {
        latency,
        timings,
        pairs: pair_runs,
        entries,
    })
}

/// Sends each body once to `url`, one after another over one kept-alive connection; each
/// answer's time (µs, as this harness sees it) and `X-Cache`. Fails on any status but 200.
fn timed(b: &Bench, url: &str, bodies: &[String]) -> Result<Vec<(f64, Option<String>)>, String> {
    let http = client::http();
    let base = url;
    let url = format!("{url}/ext/bc/P");
    b.rt.block_on(async {
        // The connection is opened by an untimed request: the first timed one would pay for it.
        client::get(&http, &format!("{base}/ext/health/liveness")).await?;
        let mut out = Vec::with_capacity(bodies.len());
        for body in bodies {
            let body = body.clone();
            let t = Instant::now();
            let r = client::post(&http, &url, body, "x-cache").await?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            if r.status != 200 {
                return Err(format!(
                    "{url}: HTTP {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                ));
            }
            out.push((us, r.header));
        }
        Ok(out)
    })
}

/// Asks each body of both instances, the second `delay` after the first (zero: at the same
/// moment), one key after another; returns how many keys both answered `X-Cache: MISS` (each went
/// to the node).
fn pairs(b: &Bench, urls: [&str; 2], bodies: &[String], delay: Duration) -> Result<usize, String> {
    let http = client::http();
    let [first, second] = urls.map(|u| format!("{u}/ext/bc/P"));
    b.rt.block_on(async {
        let mut both = 0;
        for body in bodies {
            let (ra, rb) = tokio::join!(
                client::post(&http, &first, body.clone(), "x-cache"),
                async {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    client::post(&http, &second, body.clone(), "x-cache").await
                },
            );
            let (ra, rb) = (ra?, rb?);
            if ra.status != 200 || rb.status != 200 {
                return Err(format!("pairs: HTTP {} and {}", ra.status, rb.status));
            }
            if ra.header.as_deref() == Some("MISS") && rb.header.as_deref() == Some("MISS") {
                both += 1;
            }
        }
        Ok(both)
    })
}

/// Client addresses of the many-clients hit load (`X-Forwarded-For`, 10.0.0.0 up).
const MANY_CLIENTS: usize = 10_000;

/// Part 2 for one shape of client: the same wrk hit load on an instance with global quotas and
/// on one with local quotas.
struct CpuCase {
    label: String,
    /// Rounds of the global instance, then of the local one.
    runs: [Vec<Measured>; 2],
    /// Leases granted, refused and returned during the global instance's runs.
    leases: [f64; 3],
}

/// Part 2: cache-hit CPU per request with global quotas against local quotas, for one client
/// (the main table's raised quota) and for [`MANY_CLIENTS`] clients behind a trusted proxy (the
/// shipped default quota, 50 units/s, which the load leaves each of them well under), in
/// alternating rounds.
#[allow(clippy::too_many_arguments)]
fn hit_cpu(
    b: &Bench,
    step: &dyn Fn(&str),
    node_port: u16,
    sock: &Path,
    mix: &[(String, String)],
    load: &Load,
    rounds: usize,
    redis: &Proc,
) -> Result<Vec<CpuCase>, String> {
    let mix_file = b.dir.join("fleet-mix.txt");
    write_bodies(&mix_file, mix)?;
    let bodies_env = ("SNOWGATE_BODIES", mix_file.display().to_string());
    let mut cases = Vec::new();
    for many in [false, true] {
        let label = if many {
            format!("{MANY_CLIENTS} clients (X-Forwarded-For from a trusted proxy), shipped default quota (50 units/s, burst 100)")
        } else {
            format!("one client, quota {RATE_LIMIT_QUOTA} units/s, burst {RATE_LIMIT_QUOTA}")
        };
        step(&format!(
            "CPU per hit, {label}: scope global and scope local"
        ));
        let setup = |scope| Setup {
            redis: Some(sock),
            scope: Some(scope),
            quota: (!many).then_some((RATE_LIMIT_QUOTA, RATE_LIMIT_QUOTA)),
            keys: &[],
            behind_proxy: many,
        };
        let tag = if many { "many" } else { "one" };
        let (global, g_url) = start_instance(
            b,
            &format!("fleet-cpu-{tag}-global"),
            node_port,
            &setup("global"),
        )?;
        let (local, l_url) = start_instance(
            b,
            &format!("fleet-cpu-{tag}-local"),
            node_port,
            &setup("local"),
        )?;
        for url in [&g_url, &l_url] {
            // Warmed from addresses outside the measured clients' (10.200.x.y), one per call:
            // behind a proxy the shipped quota would refuse one address's 5,600 calls.
            warm(b, url, mix, many)?;
            let second = warm(b, url, mix, many)?;
            if second < mix.len() {
                return Err(format!(
                    "{url} answered {second} of {} warmed keys X-Cache: HIT",
                    mix.len()
                ));
            }
        }
        // mix.lua, with $SNOWGATE_CLIENTS: each request from one of that many addresses.
        let script = script_path("mix.lua");
        let env = if many {
            vec![
                bodies_env.clone(),
                ("SNOWGATE_CLIENTS", MANY_CLIENTS.to_string()),
            ]
        } else {
            vec![bodies_env.clone()]
        };
        let before = leases(&b.metrics(&g_url));
        let mut runs: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Alternate which goes first, so that a drift in the machine's load weighs on both.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let (url, proc) = if i == 0 {
                    (&g_url, &global)
                } else {
                    (&l_url, &local)
                };
                step(&format!(
                    "round {}/{rounds}: {tag} client(s), scope {}",
                    round + 1,
                    ["global", "local"][i]
                ));
                let mut l = load.clone();
                if round > 0 {
                    l.warmup = Duration::ZERO;
                }
                runs[i].push(wrk::measure(
                    &l,
                    url,
                    &script,
                    &env,
                    &[proc, redis],
                    b.ticks,
                )?);
            }
        }
        let after = leases(&b.metrics(&g_url));
        cases.push(CpuCase {
            label,
            runs,
            leases: [0, 1, 2].map(|i| after[i] - before[i]),
        });
    }
    Ok(cases)
}

/// Sends every body of `mix` once to `url`, 16 at a time; with `spread`, each from its own
/// address in `X-Forwarded-For` (10.200.x.y). Returns how many were answered `X-Cache: HIT`;
/// fails on any status but 200.
fn warm(b: &Bench, url: &str, mix: &[(String, String)], spread: bool) -> Result<usize, String> {
    let http = client::http();
    let items: Arc<Vec<(String, String)>> = Arc::new(mix.to_vec());
    let next = Arc::new(AtomicUsize::new(0));
    let hits = Arc::new(AtomicUsize::new(0));
    b.rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (http, items, next, hits, base) = (
                http.clone(),
                items.clone(),
                next.clone(),
                hits.clone(),
                url.to_string(),
            );
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((path, body)) = items.get(i) else {
                        return Ok::<(), String>(());
                    };
                    let mut req = Request::builder()
                        .method(Method::POST)
                        .uri(format!("{base}{path}"))
                        .header(header::CONTENT_TYPE, "application/json");
                    if spread {
                        req = req.header(
                            "x-forwarded-for",
                            format!("10.200.{}.{}", (i / 256) % 256, i % 256),
                        );
                    }
                    let req = req
                        .body(Full::new(Bytes::from(body.clone())))
                        .map_err(|e| e.to_string())?;
                    let resp = http
                        .request(req)
                        .await
                        .map_err(|e| format!("{base}: {e}"))?;
                    let status = resp.status().as_u16();
                    let hit = resp
                        .headers()
                        .get("x-cache")
                        .is_some_and(|v| v.as_bytes() == b"HIT");
                    resp.into_body()
                        .collect()
                        .await
                        .map_err(|e| format!("{base}: {e}"))?;
                    if status != 200 {
                        return Err(format!("{base}{path}: HTTP {status} while warming"));
                    }
                    if hit {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        Ok::<(), String>(())
    })?;
    Ok(hits.load(Ordering::Relaxed))
}

/// Part 3: two instances with a global quota (one client; two clients with API keys), and two
/// with local quotas (one client).
fn quota_accuracy(
    b: &Bench,
    step: &dyn Fn(&str),
    (node_port, node): (u16, &str),
    sock: &Path,
    secs: u64,
) -> Result<Vec<Accuracy>, String> {
    let mut out = Vec::new();
    for scope in ["global", "local"] {
        step(&format!("quota accuracy, scope {scope}"));
        let setup = Setup {
            redis: Some(sock),
            scope: Some(scope),
            quota: Some((QUOTA_RATE, QUOTA_BURST)),
            keys: &KEYS,
            behind_proxy: false,
        };
        let (one, one_url) =
            start_instance(b, &format!("fleet-quota-{scope}-1"), node_port, &setup)?;
        let (two, two_url) =
            start_instance(b, &format!("fleet-quota-{scope}-2"), node_port, &setup)?;
        let urls = [one_url.clone(), two_url.clone()];
        let clients: &[&[Option<&str>]] = if scope == "global" {
            &[&[None], &[Some(KEYS[0]), Some(KEYS[1])]]
        } else {
            &[&[None]]
        };
        for who in clients {
            let lease_count = |b: &Bench| {
                let (x, y) = (leases(&b.metrics(&one_url)), leases(&b.metrics(&two_url)));
                [x[0] + y[0], x[1] + y[1], x[2] + y[2]]
            };
            let leases_before = lease_count(b);
            let node_before = node_calls(b, node, SPRAY_METHOD);
            let sprays = b.rt.block_on(async {
                let runs = who
                    .iter()
                    .map(|key| spray(&urls, *key, Duration::from_secs(secs)));
                futures_util::future::join_all(runs).await
            });
            let node_calls = node_calls(b, node, SPRAY_METHOD) - node_before;
            let case = match (scope, who.len()) {
                ("global", 1) => "one client (its IP), scope global".to_string(),
                ("global", _) => {
                    "two clients (two API keys) at once, scope global; each".to_string()
                }
                _ => "one client (its IP), scope local (contrast: 2 × expected)".to_string(),
            };
            out.push(Accuracy {
                case,
                sprays,
                node_calls,
                leases: {
                    let after = lease_count(b);
                    [0, 1, 2].map(|i| after[i] - leases_before[i])
                },
            });
        }
        drop((one, two));
    }
    Ok(out)
}

/// One client sending `platform.sampleValidators` to `urls` round-robin, [`SPRAY_CONCURRENCY`]
/// at a time and at most [`SPRAY_RATE`] per second, for `window`; with `key`, as `X-Api-Key`.
async fn spray(urls: &[String], key: Option<&str>, window: Duration) -> Spray {
    let http = client::http();
    let body = client::rpc_body(SPRAY_METHOD, &serde_json::json!({"size": 1}));
    let next = Arc::new(AtomicUsize::new(0));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let started = Instant::now();
    let deadline = started + window;
    let mut tasks = Vec::new();
    for _ in 0..SPRAY_CONCURRENCY {
        let (http, urls, key, body, next, counts) = (
            http.clone(),
            urls.to_vec(),
            key.map(str::to_string),
            body.clone(),
            next.clone(),
            counts.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut pace = tokio::time::interval(Duration::from_secs_f64(
                SPRAY_CONCURRENCY as f64 / SPRAY_RATE,
            ));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < deadline {
                pace.tick().await;
                let i = next.fetch_add(1, Ordering::Relaxed) % urls.len();
                let mut req = Request::builder()
                    .method(Method::POST)
                    .uri(format!("{}/ext/bc/P", urls[i]))
                    .header(header::CONTENT_TYPE, "application/json");
                if let Some(k) = &key {
                    req = req.header("x-api-key", k.as_str());
                }
                let Ok(req) = req.body(Full::new(Bytes::from(body.clone()))) else {
                    return;
                };
                let slot = match tokio::time::timeout(Duration::from_secs(5), async {
                    let resp = http.request(req).await.ok()?;
                    let status = resp.status().as_u16();
                    resp.into_body().collect().await.ok()?;
                    Some(status)
                })
                .await
                {
                    Ok(Some(200)) => 0,
                    Ok(Some(429)) => 1,
                    _ => 2,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Spray {
        accepted: counts[0].load(Ordering::Relaxed),
        refused: counts[1].load(Ordering::Relaxed),
        other: counts[2].load(Ordering::Relaxed),
        secs: started.elapsed().as_secs_f64(),
    }
}

/// The devnode's count of calls of `method`.
fn node_calls(b: &Bench, node: &str, method: &str) -> u64 {
    b.rt.block_on(async {
        let Ok(r) = client::get(&b.http, &format!("{node}/_devnode/calls")).await else {
            return 0;
        };
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        v["calls"][method].as_u64().unwrap_or(0)
    })
}

/// `snowgate_shared_cache_total{result="…"}`.
fn shared_lookups(metrics: &str, result: &str) -> f64 {
    client::metric(
        metrics,
        &format!("snowgate_shared_cache_total{{result=\"{result}\"}}"),
    )
}

/// `snowgate_shared_writes_total{result="written"}`.
fn shared_writes(metrics: &str) -> f64 {
    client::metric(metrics, "snowgate_shared_writes_total{result=\"written\"}")
}

/// Global quota leases granted, refused and returned (none where quotas are local).
fn leases(metrics: &str) -> [f64; 3] {
    ["granted", "refused", "returned"].map(|r| {
        client::metric(
            metrics,
            &format!("snowgate_quota_leases_total{{result=\"{r}\"}}"),
        )
    })
}

/// Redis's `used_memory`, bytes.
fn redis_memory(sock: &Path) -> Option<u64> {
    procs::redis_cli(sock, &["INFO", "memory"])
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Mean `MEMORY USAGE` and `STRLEN` of up to 50 of the shared cache's keys (`…:c:…`), and how
/// many were sampled.
fn entry_usage(sock: &Path) -> Option<(f64, f64, usize)> {
    let listed = procs::redis_cli(sock, &["--scan", "--pattern", "*:c:*"]).ok()?;
    let (mut usage, mut len, mut count) = (0.0, 0.0, 0);
    for key in listed.lines().take(50) {
        let u: f64 = procs::redis_cli(sock, &["MEMORY", "USAGE", key])
            .ok()?
            .parse()
            .ok()?;
        let l: f64 = procs::redis_cli(sock, &["STRLEN", key])
            .ok()?
            .parse()
            .ok()?;
        usage += u;
        len += l;
        count += 1;
    }
    (count > 0).then(|| (usage / count as f64, len / count as f64, count))
}

/// Everything the report shows.
struct Report<'a> {
    b: &'a Bench,
    load: &'a Load,
    rounds: usize,
    redis_version: &'a str,
    mix_label: String,
    node_runs: &'a [NodeRun],
    cpu: &'a [CpuCase],
    accuracy: &'a [Accuracy],
    redis_keys: &'a str,
    secs: u64,
}

fn report(r: &Report<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### Fleet: two snowgate instances, one redis-server {} (unix socket), one devnode\n",
        r.redis_version
    );
    let _ = writeln!(
        out,
        "Every process on the server CPU(s) ({}); instances with the shipped defaults plus `[redis] url`, quotas as stated. Keys: `platform.getTx` of one transaction with a distinct `nonce` (same answer for every key, new to every instance and to Redis).\n",
        if r.b.pin.server.is_empty() { "-" } else { &r.b.pin.server }
    );

    let _ = writeln!(
        out,
        "**1. A hit served from Redis against a node call** (each request alone, one after another over one kept-alive connection, timed by the harness)\n"
    );
    let _ = writeln!(
        out,
        "| node latency | request | requests | p50 | p99 | mean | node calls | answers |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---|");
    for run in r.node_runs {
        for t in &run.timings {
            let _ = writeln!(
                out,
                "| +{} ms | {} | {} | {} | {} | {} | {} | {} |",
                run.latency.as_millis(),
                t.what,
                t.samples.len(),
                crate::us(t.percentile(50.0)),
                crate::us(t.percentile(99.0)),
                crate::us(t.mean()),
                t.node_calls,
                t.check
            );
        }
    }

    let _ = writeln!(
        out,
        "\n**2. Cache-hit CPU per request, global quotas against local quotas** ({}, every key cached beforehand; wrk -t{} -c{} -d{}s; {} rounds, global and local alternating; the median round shown; snowgate's own CPU and the redis-server's read apart)\n",
        r.mix_label,
        r.load.threads,
        r.load.connections,
        r.load.duration.as_secs(),
        r.rounds
    );
    let _ = writeln!(
        out,
        "| clients | scope | req/s (median) | snowgate CPU µs/req | redis-server CPU µs/req | p50 | p99 | errors | per round: snowgate µs/req | leases granted / refused / returned |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---|---:|");
    let mut verdicts = Vec::new();
    for case in r.cpu {
        let med: Vec<Measured> = case.runs.iter().map(|runs| median_cpu(runs)).collect();
        for (i, scope) in ["global", "local"].iter().enumerate() {
            let m = &med[i];
            let own = m.first_us_per_request();
            let per_round: Vec<String> = case.runs[i]
                .iter()
                .map(|m| format!("{:.1}", m.first_us_per_request()))
                .collect();
            let errors: u64 = case.runs[i].iter().map(|m| m.errors).sum();
            let leases = if i == 0 {
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    case.leases[0], case.leases[1], case.leases[2]
                )
            } else {
                "-".into()
            };
            let _ = writeln!(
                out,
                "| {} | {scope} | {:.0} | {own:.1} | {:.1} | {} | {} | {errors} | {} | {leases} |",
                case.label,
                m.rps,
                m.cpu_us_per_request() - own,
                crate::us(m.p50_us),
                crate::us(m.p99_us),
                per_round.join(", ")
            );
        }
        let ratio = med[0].first_us_per_request() / med[1].first_us_per_request();
        let with_redis = med[0].cpu_us_per_request() / med[1].cpu_us_per_request();
        // Each round's pair (measured back to back) compared on its own, as the A/B mode does.
        let pairs: Vec<f64> = case.runs[0]
            .iter()
            .zip(&case.runs[1])
            .map(|(g, l)| g.first_us_per_request() / l.first_us_per_request())
            .collect();
        let mean = pairs.iter().sum::<f64>() / pairs.len().max(1) as f64;
        let lo = pairs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = pairs.iter().copied().fold(0.0, f64::max);
        verdicts.push(format!(
            "{}: global / local, snowgate CPU per hit **{ratio:.2} x** (target <= 1.15: {}; the rounds' pairs {mean:.2} x on average, {lo:.2}-{hi:.2}); counting redis-server's CPU too: {with_redis:.2} x{}",
            case.label,
            if ratio <= 1.15 { "pass" } else { "FAIL" },
            if case.leases[0] == 0.0 {
                " (no lease taken: this build keeps quotas local whatever the scope, so the ratio measures nothing)"
            } else {
                ""
            }
        ));
    }
    let _ = writeln!(out);
    for v in verdicts {
        let _ = writeln!(out, "* {v}");
    }

    let _ = writeln!(
        out,
        "\n**3. Quota accuracy** (two instances sprayed round-robin, {SPRAY_CONCURRENCY} requests in flight and at most {SPRAY_RATE:.0} calls/s per client; quota {QUOTA_RATE} units/s, burst {QUOTA_BURST}; `{SPRAY_METHOD}`, never cached, {SPRAY_COST} units)\n"
    );
    let _ = writeln!(
        out,
        "| case | window | accepted calls | allowed calls (burst + rate × window) | accepted / allowed | 429s | other | node calls | leases granted / refused / returned |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for a in r.accuracy {
        for (i, s) in a.sprays.iter().enumerate() {
            let who = if a.sprays.len() > 1 {
                format!("{} (client {})", a.case, i + 1)
            } else {
                a.case.clone()
            };
            let _ = writeln!(
                out,
                "| {who} | {:.1} s | {} | {:.0} | **{:.2}** | {} | {} | {} | {} |",
                s.secs,
                s.accepted,
                s.expected_calls(),
                s.ratio(),
                s.refused,
                s.other,
                if i == 0 {
                    a.node_calls.to_string()
                } else {
                    "(above)".into()
                },
                if i == 0 {
                    format!(
                        "{:.0} / {:.0} / {:.0}",
                        a.leases[0], a.leases[1], a.leases[2]
                    )
                } else {
                    "(above)".into()
                }
            );
        }
    }

    let _ = writeln!(
        out,
        "\n**4. Identical cold misses across instances** (each new key asked of A and, after the delay, of B; one key after another)\n"
    );
    let _ = writeln!(
        out,
        "| node latency | B asked after A by | keys | node calls | per key | keys both MISS | duplicate calls (a miss lock would save them) | share of node calls |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for run in r.node_runs {
        for p in &run.pairs {
            let dup = p.calls.saturating_sub(p.keys as u64);
            let _ = writeln!(
                out,
                "| +{} ms | {} ms | {} | {} | {:.2} | {} | {dup} | {:.0} % (at most 50 % with two instances) |",
                run.latency.as_millis(),
                p.delay.as_millis(),
                p.keys,
                p.calls,
                p.calls as f64 / p.keys.max(1) as f64,
                p.both_missed,
                100.0 * dup as f64 / p.calls.max(1) as f64
            );
        }
    }

    let _ = writeln!(out);
    for e in r.node_runs.iter().filter_map(|run| run.entries.as_ref()) {
        let mut line = format!(
            "* Redis memory per shared entry, for a {}-byte answer:",
            e.answer
        );
        if let Some((usage, len, count)) = e.usage {
            let _ = write!(
                line,
                " `MEMORY USAGE` {usage:.0} bytes (the value {len:.0} bytes: the answer, the full key, header and digest; mean of {count} keys);"
            );
        }
        if let Some(per) = e.used_per_key {
            let _ = write!(
                line,
                " `used_memory` grew {per:.0} bytes per key over the fill (hash table growth included)"
            );
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "* Redis held {} keys at the end; the fleet section took {} s",
        r.redis_keys, r.secs
    );
    out
}

/// The round with the median snowgate CPU per request.
fn median_cpu(runs: &[Measured]) -> Measured {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| {
        a.first_us_per_request()
            .total_cmp(&b.first_us_per_request())
    });
    sorted.get(sorted.len() / 2).cloned().unwrap_or_default()
}
