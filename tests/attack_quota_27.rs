//! Issue 27, attacked: global quotas (leases, "under budget never refused", refused calls owed to
//! Redis, RateLimit headers) against real fleets on loopback with a real `redis-server`.
//!
//! Each test prints what it measured (`--nocapture`); the assertions are on counts and on bounds
//! derived from the elapsed time measured, never on the machine's speed. The three bugs these
//! attacks found are fixed and their tests run with the others (2a, 3; 1b is a long measurement):
//! calls decided without Redis while a lease's turn was slow, refused calls answered at about N
//! times the quota over N instances, and a cheap call refused after a dear one. The long
//! measurements are `#[ignore]`d; run them with
//! `cargo test --test integration -- attack_quota_27:: --nocapture --include-ignored`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::fleet::{is_quota_key, metric, Fleet, SLOW_CHAIN};
use support::redis::{RedisServer, SharedRedis};

/// Never cached: every call served is a node call, charged in full.
const M: &str = "platform.sampleValidators";
const PARAMS: &str = r#"{"size":1}"#;

/// A fleet of `n` over one devnode and `redis`, global quotas of `rps`/`burst` cost units, `M`
/// costing `cost`, hits at full price, clients known by `X-Forwarded-For` from 127.0.0.1;
/// `rate_limit` is more lines of `[rate_limit]`.
async fn fleet(
    redis: &RedisServer,
    n: usize,
    rps: u32,
    burst: u32,
    cost: u32,
    rate_limit: &str,
) -> Fleet {
    fleet_with(redis, n, rps, burst, cost, rate_limit, |_| {}).await
}

/// [`fleet`], with `tweak` applied to each instance's config.
async fn fleet_with(
    redis: &RedisServer,
    n: usize,
    rps: u32,
    burst: u32,
    cost: u32,
    rate_limit: &str,
    tweak: impl Fn(&mut snowgate::Config),
) -> Fleet {
    let toml = format!(
        "{}[rate_limit]\nrequests_per_second = {rps}\nburst = {burst}\n\
         trusted_proxies = [\"127.0.0.1/32\"]\ncached_cost_factor = 1.0\n{rate_limit}\n\
         [methods.\"{M}\"]\ncost = {cost}\n\
         [methods.\"platform.getCurrentValidators\"]\ncost = 5\n\
         [methods.\"platform.getUTXOs\"]\ncost = 5\n\
         [methods.\"platform.getAllValidatorsAt\"]\ncost = 5\n",
        redis.redis_toml()
    );
    let fleet = Fleet::start(n, 1, SLOW_CHAIN, &toml, |_, c| {
        c.rate_limit.enabled = true;
        tweak(c);
    })
    .await;
    for node in &fleet.nodes {
        node.control().reset_calls();
    }
    // Quota keys carry the pool's network: until an instance has settled it, it decides as while
    // Redis is down (each instance its own burst, owed later). The attacks measure the fleet's
    // shared quota, so they start once every instance shares it.
    for g in &fleet.gateways {
        let shared = g.shared().expect("a fleet instance has [redis]").clone();
        let settled = || shared.network().prefix().is_some();
        assert!(
            support::eventually(Duration::from_secs(60), settled).await,
            "an instance never settled its network"
        );
    }
    fleet
}

/// A keep-alive client: its connections to each instance are pinned and reused.
fn kclient() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .timeout(Duration::from_secs(20))
        .no_proxy()
        .build()
        .unwrap()
}

fn body(method: &str, params: &str) -> String {
    support::call(method, params)
}

/// What one answer was.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    Served,
    Limited,
    /// A JSON-RPC error other than -32005 (a refused call answered with its error).
    RpcError(String),
    Other(u16, String),
}

struct Answer {
    got: Got,
    headers: reqwest::header::HeaderMap,
    body: String,
    took: Duration,
}

async fn send(c: &reqwest::Client, url: &str, text: &str, headers: &[(&str, &str)]) -> Answer {
    let t = Instant::now();
    let mut req = c
        .post(format!("{url}/ext/bc/P"))
        .header("content-type", "application/json")
        .body(text.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Answer {
                got: Got::Other(0, e.to_string()),
                headers: Default::default(),
                body: String::new(),
                took: t.elapsed(),
            }
        }
    };
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.text().await.unwrap_or_default();
    let took = t.elapsed();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let got = if status == 429 {
        Got::Limited
    } else if status == 200 && v.get("result").is_some_and(|x| !x.is_null()) {
        Got::Served
    } else if let Some(e) = v.get("error") {
        if e["code"] == -32005 {
            Got::Limited
        } else {
            Got::RpcError(format!("{status} {}", e["code"]))
        }
    } else {
        Got::Other(status, body.chars().take(200).collect())
    };
    Answer {
        got,
        headers,
        body,
        took,
    }
}

async fn call_m(c: &reqwest::Client, url: &str, who: &str) -> Answer {
    send(c, url, &body(M, PARAMS), &[("x-forwarded-for", who)]).await
}

#[derive(Default, Debug)]
struct Tally {
    served: AtomicU64,
    limited: AtomicU64,
    rpc_error: AtomicU64,
    other: AtomicU64,
    slowest_us: AtomicU64,
}

impl Tally {
    fn add(&self, a: &Answer) {
        match &a.got {
            Got::Served => &self.served,
            Got::Limited => &self.limited,
            Got::RpcError(_) => &self.rpc_error,
            Got::Other(..) => &self.other,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.slowest_us
            .fetch_max(a.took.as_micros() as u64, Ordering::Relaxed);
    }
    fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.served.load(Ordering::Relaxed),
            self.limited.load(Ordering::Relaxed),
            self.rpc_error.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        )
    }
}

/// Sum of `series` over the fleet's instances.
async fn fleet_metric(fleet: &Fleet, series: &str) -> f64 {
    let mut sum = 0.0;
    for i in 0..fleet.gateways.len() {
        sum += metric(&fleet.metrics(i).await, series);
    }
    sum
}

// ------------------------------------------------------------------------------------------------
// Attack 1: more than the quota by gaming leases.
// ------------------------------------------------------------------------------------------------

/// How a gaming client calls.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// `per` workers per instance, each calling back to back for the whole window.
    Flood { per: usize },
    /// Cycles: `idle`, then one call per instance (each takes a lease while the client is far
    /// from its budget), then `per` concurrent calls on every instance at once (the leases spent
    /// locally while Redis grants the rest from its room and the units out on lease).
    Cycles { idle: Duration, per: usize },
}

/// Runs `pattern` for `window` against a fresh fleet of `n` at `rps`/`burst` (calls of 1);
/// prints and returns served / allowed, allowed = burst + rate × elapsed (first send to last
/// answer), served counted by the node.
async fn gaming(
    redis: &RedisServer,
    n: usize,
    pattern: Pattern,
    window: Duration,
    timeout_ms: u64,
) -> f64 {
    const RPS: u32 = 20;
    const BURST: u32 = 40;
    let fleet = fleet_with(redis, n, RPS, BURST, 1, "", |c| {
        c.redis.as_mut().unwrap().timeout = Duration::from_millis(timeout_ms);
    })
    .await;
    // A client of its own each run: the fleets share one Redis, where a client's spending (and
    // debt) outlives the run (a shared one made later runs look under-served by a burst).
    static RUN: AtomicU64 = AtomicU64::new(0);
    let who = format!("198.51.101.{}", RUN.fetch_add(1, Ordering::Relaxed));
    let clients: Vec<reqwest::Client> = (0..n).map(|_| kclient()).collect();
    let urls: Vec<String> = (0..n).map(|i| fleet.url(i)).collect();
    // Warm the pinned connections with another client's calls (its own quota).
    for (c, u) in clients.iter().zip(&urls) {
        for _ in 0..4 {
            let _ = call_m(c, u, "192.0.2.250").await;
        }
    }
    fleet.nodes[0].control().reset_calls();
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let mut cycles = 0;
    match pattern {
        Pattern::Flood { per } => {
            let mut tasks = Vec::new();
            for i in 0..n {
                for _ in 0..per {
                    let (c, u, who, tally) = (
                        clients[i].clone(),
                        urls[i].clone(),
                        who.clone(),
                        tally.clone(),
                    );
                    tasks.push(tokio::spawn(async move {
                        while start.elapsed() < window {
                            tally.add(&call_m(&c, &u, &who).await);
                        }
                    }));
                }
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
        Pattern::Cycles { idle, per } => {
            let mut first = true;
            while start.elapsed() < window {
                if !first {
                    tokio::time::sleep(idle).await;
                }
                first = false;
                cycles += 1;
                for i in 0..n {
                    tally.add(&call_m(&clients[i], &urls[i], &who).await);
                }
                let mut tasks = Vec::new();
                for i in 0..n {
                    for _ in 0..per {
                        let (c, u, who, tally) = (
                            clients[i].clone(),
                            urls[i].clone(),
                            who.clone(),
                            tally.clone(),
                        );
                        tasks.push(tokio::spawn(async move {
                            tally.add(&call_m(&c, &u, &who).await);
                        }));
                    }
                }
                for t in tasks {
                    t.await.unwrap();
                }
            }
        }
    }
    let elapsed = start.elapsed();
    let served = fleet.calls(M);
    let (ok, limited, rpc_error, other) = tally.get();
    let allowed = f64::from(BURST) + f64::from(RPS) * elapsed.as_secs_f64();
    let ratio = served as f64 / allowed;
    let fallback = fleet_metric(
        &fleet,
        r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
    )
    .await;
    let leases = fleet_metric(&fleet, r#"snowgate_quota_leases_total{result="granted"}"#).await;
    println!(
        "ATTACK1 n={n} timeout={timeout_ms}ms {pattern:?} cycles={cycles}: node served {served} (answers: {ok} served, \
         {limited} limited, {rpc_error} rpc errors, {other} other) in {elapsed:.2?}; allowed \
         {allowed:.1}; ratio {ratio:.3}; fallback-allowed {fallback}; leases granted {leases}; \
         slowest {} ms",
        tally.slowest_us.load(Ordering::Relaxed) / 1000
    );
    assert_eq!(ok, served, "answers served and node calls disagree");
    fleet.shutdown().await;
    ratio
}

/// Attack 1: a client games leases on 3 and 5 instances for 10 s, several patterns; the worst
/// ratio served / (burst + rate × elapsed) is printed. The design allows half a burst out on lease
/// at the window's end (here 20 calls over an allowed ~240: 1.083).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "measurement: 100 s of lease gaming, fallbacks included"]
async fn attack1_lease_gaming_ratio() {
    let redis = RedisServer::start();
    let window = Duration::from_secs(10);
    let mut worst: f64 = 0.0;
    for n in [3, 5] {
        for pattern in [
            Pattern::Flood { per: 2 },
            Pattern::Flood { per: 32 },
            Pattern::Cycles {
                idle: Duration::from_millis(2100),
                per: 20,
            },
            Pattern::Cycles {
                idle: Duration::from_millis(900),
                per: 20,
            },
            Pattern::Cycles {
                idle: Duration::from_millis(3000),
                per: 40,
            },
        ] {
            worst = worst.max(gaming(&redis, n, pattern, window, 25).await);
        }
    }
    println!("ATTACK1 worst ratio {worst:.3}");
}

/// Attack 1c: the lease games of attack 1 with `[redis] timeout = 300ms`, so that no call falls
/// back to the local bucket (attack 1b): what the leases alone give a gaming client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "measurement: two minutes of lease gaming"]
async fn attack1c_lease_gaming_without_fallbacks() {
    let redis = RedisServer::start();
    let window = Duration::from_secs(10);
    let mut worst: f64 = 0.0;
    for n in [3, 5] {
        for pattern in [
            Pattern::Flood { per: 32 },
            Pattern::Cycles {
                idle: Duration::from_millis(2100),
                per: 20,
            },
            Pattern::Cycles {
                idle: Duration::from_millis(900),
                per: 20,
            },
            Pattern::Cycles {
                idle: Duration::from_millis(3000),
                per: 40,
            },
        ] {
            worst = worst.max(gaming(&redis, n, pattern, window, 300).await);
        }
    }
    println!("ATTACK1c worst ratio {worst:.3}");
    // The design's bound: the quota, and half a burst out on lease at the end, within 10 %.
    assert!(
        worst <= 1.10 + 20.0 / 240.0,
        "lease gaming gave {worst:.3} times the quota"
    );
}

/// Attack 1b (BUG): one client's own concurrency on one instance makes its calls wait for their
/// lease's turn past `[redis] timeout` (25 ms): `Global::decide` then says `Verdict::Down`, and
/// `on_redis_down = "local"` (the default) decides them by the instance's local bucket (the whole
/// quota with `expected_instances = 1`, the default), without ever telling Redis. The same load
/// also makes quota commands miss their 25 ms (the instance's runtime is busy: Redis itself is
/// idle), and one timeout opens the instance's breaker at once: every call of every client is
/// then decided locally, and none of it is ever owed to Redis. Measured: 1 instance 1.65-1.9x,
/// 3 instances 2.5-3.8x, 5 instances 4.95x the global quota; with `expected_instances` = 3 on 3
/// instances still 1.65x; with `[redis] timeout = 300ms`, 0.85x (no fallback).
///
/// A long measurement (ignored): the assertion at the end held once the bug was fixed (0.84 to 0.99).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "measurement: 30 s of floods (was a bug: a slow turn fell back to the local bucket, uncharged)"]
async fn attack1b_own_concurrency_turns_global_quota_into_local_ones() {
    const RPS: u32 = 20;
    const BURST: u32 = 40;
    let redis = RedisServer::start();
    let mut worst: f64 = 0.0;
    // (instances, workers per instance, expected_instances, [redis] timeout in ms)
    for (n, per, expected, timeout_ms) in [
        (1usize, 64usize, 1u32, 25u64),
        (3, 32, 1, 25),
        (3, 32, 3, 25),
        (3, 32, 3, 300),
    ] {
        let rl = format!("expected_instances = {expected}");
        let fleet = fleet_with(&redis, n, RPS, BURST, 1, &rl, |c| {
            c.redis.as_mut().unwrap().timeout = Duration::from_millis(timeout_ms);
        })
        .await;
        // A client of its own per fleet: they share one Redis (see `gaming`).
        static RUN: AtomicU64 = AtomicU64::new(0);
        let who = format!("198.51.102.{}", RUN.fetch_add(1, Ordering::Relaxed));
        let window = Duration::from_secs(10);
        let tally = Arc::new(Tally::default());
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..n {
            let c = kclient();
            for _ in 0..per {
                let (c, u, who, tally) = (c.clone(), fleet.url(i), who.clone(), tally.clone());
                tasks.push(tokio::spawn(async move {
                    while start.elapsed() < window {
                        tally.add(&call_m(&c, &u, &who).await);
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        let elapsed = start.elapsed();
        let served = fleet.calls(M);
        let allowed = f64::from(BURST) + f64::from(RPS) * elapsed.as_secs_f64();
        let ratio = served as f64 / allowed;
        let fallback = fleet_metric(
            &fleet,
            r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
        )
        .await;
        let timeouts = fleet_metric(
            &fleet,
            r#"snowgate_redis_errors_total{kind="timeout",op="quota"}"#,
        )
        .await;
        let errors = fleet_metric(
            &fleet,
            r#"snowgate_redis_errors_total{kind="error",op="quota"}"#,
        )
        .await;
        let up = fleet_metric(&fleet, "snowgate_redis_up").await;
        let (ok, limited, _, other) = tally.get();
        println!(
            "ATTACK1b n={n} per={per} expected_instances={expected} timeout={timeout_ms}ms: served {served} ({ok} answers, {limited} limited, {other} \
             other) in {elapsed:.2?}, allowed {allowed:.1}, ratio {ratio:.3}; fallback-allowed \
             {fallback}; quota command timeouts {timeouts}, errors {errors}; redis_up (sum) {up}"
        );
        worst = worst.max(ratio);
        fleet.shutdown().await;
    }
    // The design's own bound: half a burst out on lease at the end, and a few percent.
    let bound = 1.10 + f64::from(BURST) / 2.0 / (f64::from(BURST) + f64::from(RPS) * 10.0);
    assert!(worst <= bound, "served {worst:.2} times the global quota");
}

// ------------------------------------------------------------------------------------------------
// Attack 2: a client under its budget refused (claim 1).
// ------------------------------------------------------------------------------------------------

/// Attack 2a (claim 1, same instance): a fresh client spends 7 of its 10 units, asks for a call of
/// 5 (rightly refused: 3 left), then for a call of 1, which its budget affords (3 left, more
/// coming back at 1 a second): served on every instance. (It was refused on the instance that
/// refused the dear call, which remembered the refusal of 5 units for any call; a refusal now
/// stands for calls of its size, cheaper ones waiting less.)
///
/// Ignored: demonstrates a (narrow) break of claim 1 — see the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack2a_a_cheap_call_after_a_dear_refusal() {
    let redis = RedisServer::start();
    let fleet = fleet(&redis, 3, 1, 10, 1, "").await;
    let c = kclient();
    let who = "198.51.100.21";
    let mut seq = Vec::new();
    let start = Instant::now();
    for k in 0..7 {
        let a = call_m(&c, &fleet.url(k % 3), who).await;
        seq.push(format!("i{} cost1 {:?}", k % 3, a.got));
    }
    let dear = send(
        &c,
        &fleet.url(0),
        &body("platform.getCurrentValidators", "{}"),
        &[("x-forwarded-for", who)],
    )
    .await;
    seq.push(format!(
        "i0 cost5 {:?} {:?}",
        dear.got,
        dear.headers.get("ratelimit")
    ));
    let cheap0 = call_m(&c, &fleet.url(0), who).await;
    seq.push(format!(
        "i0 cost1 {:?} {:?}",
        cheap0.got,
        cheap0.headers.get("ratelimit")
    ));
    let cheap1 = call_m(&c, &fleet.url(1), who).await;
    seq.push(format!(
        "i1 cost1 {:?} {:?}",
        cheap1.got,
        cheap1.headers.get("ratelimit")
    ));
    let elapsed = start.elapsed();
    println!("ATTACK2a in {elapsed:?}: {seq:#?}");
    // Spent: 7 + 1 (the cheap call on 1) <= 10: under budget throughout but for the dear call.
    assert_eq!(dear.got, Got::Limited, "the dear call is over budget");
    assert_eq!(cheap1.got, Got::Served);
    assert_eq!(
        cheap0.got,
        Got::Served,
        "a call within budget refused on the instance that refused a dearer one"
    );
    fleet.shutdown().await;
}

/// Attack 2b (claim 1, concurrency): fresh clients send 36 calls of 1 (their burst is 40) at once,
/// all to one instance, or spread over three; with `expected_instances` 1 and 3. Counts the calls
/// not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attack2b_concurrent_calls_under_budget() {
    let redis = RedisServer::start();
    let mut refused_total = 0;
    for expected in [1u32, 3] {
        let rl = format!("expected_instances = {expected}");
        let fleet = fleet(&redis, 3, 20, 40, 1, &rl).await;
        for round in 0..6u32 {
            let who = format!("198.51.{expected}.{round}");
            let spread = round % 2 == 1;
            let c = kclient();
            let mut tasks = Vec::new();
            for k in 0..36usize {
                let i = if spread { k % 3 } else { 0 };
                let (c, u, who) = (c.clone(), fleet.url(i), who.clone());
                tasks.push(tokio::spawn(async move { (i, call_m(&c, &u, &who).await) }));
            }
            let mut bad = Vec::new();
            for t in tasks {
                let (i, a) = t.await.unwrap();
                if a.got != Got::Served {
                    bad.push(format!("i{i}: {:?} {}", a.got, a.body));
                }
            }
            println!(
                "ATTACK2b expected_instances={expected} round {round} ({}): {} of 36 not served {:?}",
                if spread { "spread" } else { "one instance" },
                bad.len(),
                &bad[..bad.len().min(3)]
            );
            refused_total += bad.len();
        }
        let fallback = fleet_metric(
            &fleet,
            r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
        )
        .await;
        let denied = fleet_metric(
            &fleet,
            r#"snowgate_rate_limit_fallback_total{decision="denied"}"#,
        )
        .await;
        println!(
            "ATTACK2b expected_instances={expected}: fallback allowed {fallback} denied {denied}"
        );
        fleet.shutdown().await;
    }
    println!("ATTACK2b refused under budget in all: {refused_total}");
}

/// Attack 2c (claim 1, refused calls then calls, `expected_instances = 3`): a fresh client sends
/// 20 malformed requests at once to one instance (20 of its 40 units), then 15 calls there
/// (35 of 40 in all). Counts 429s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attack2c_refused_calls_then_calls_under_budget() {
    let redis = RedisServer::start();
    for expected in [1u32, 3] {
        let rl = format!("expected_instances = {expected}");
        let fleet = fleet(&redis, 3, 20, 40, 1, &rl).await;
        let who = format!("198.51.100.{}", 40 + expected);
        let c = kclient();
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (c, u, who) = (c.clone(), fleet.url(0), who.clone());
            tasks.push(tokio::spawn(async move {
                send(&c, &u, "{not json", &[("x-forwarded-for", &who)]).await
            }));
        }
        let mut first = Vec::new();
        for t in tasks {
            first.push(t.await.unwrap().got);
        }
        let mut then = Vec::new();
        for _ in 0..15 {
            then.push(call_m(&c, &fleet.url(0), &who).await.got);
        }
        let limited = |v: &[Got]| v.iter().filter(|g| **g == Got::Limited).count();
        println!(
            "ATTACK2c expected_instances={expected}: malformed: {} limited of 20 ({:?}); calls: {} \
             limited of 15 ({:?})",
            limited(&first),
            first.iter().find(|g| **g != Got::Limited),
            limited(&then),
            then
        );
        fleet.shutdown().await;
    }
}

// ------------------------------------------------------------------------------------------------
// Attack 3: refused calls (and body bytes) beyond the quota (claim 4).
// ------------------------------------------------------------------------------------------------

/// Sprays `text` (a request snowgate refuses itself) from one client over `n` instances for
/// `window`, `per` workers per instance; returns answered-with-their-error per second over the
/// quota's allowance in refused calls.
async fn spray_refused(
    fleet: &Fleet,
    n: usize,
    per: usize,
    text: &'static str,
    who: &str,
    window: Duration,
) -> (u64, u64, u64, Duration) {
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let c = kclient();
        for _ in 0..per {
            let (c, u, who, tally) = (c.clone(), fleet.url(i), who.to_string(), tally.clone());
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < window {
                    let a = send(&c, &u, text, &[("x-forwarded-for", &who)]).await;
                    tally.add(&a);
                    if matches!(a.got, Got::Other(..)) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, limited, answered, other) = tally.get();
    (answered, limited, other, start.elapsed())
}

/// Attack 3 (claim 4): malformed JSON and unknown methods sprayed over 5 instances under a
/// quota of 10/s (burst 10, `refused_cost` 1): how many are answered with their error beyond
/// what the quota allows. It was about N times the quota over N instances (forced charges were
/// clipped two bursts ahead, and each instance took a client at 0 for one with budget); now the
/// script says the client's debt and the instances refuse until it is repaid: 1.03.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attack3_refused_calls_sprayed_over_instances() {
    const RPS: u32 = 10;
    const BURST: u32 = 10;
    let redis = RedisServer::start();
    let mut worst: f64 = 0.0;
    for (n, expected) in [(5usize, 1u32), (5, 5), (1, 1)] {
        let rl = format!("expected_instances = {expected}");
        // A Redis command slower than `[redis] timeout` (25 ms, easily passed on a loaded
        // machine) opens the breaker and the instances decide alone (`on_redis_down`, measured by
        // attack 1b): this attack is about the quota's arithmetic over a Redis that answers, as
        // attack 1c's, so it gives Redis 300 ms.
        let fleet = fleet_with(&redis, n, RPS, BURST, 1, &rl, |c| {
            c.redis.as_mut().unwrap().timeout = Duration::from_millis(300);
        })
        .await;
        for (what, text) in [
            ("malformed", "{not json"),
            (
                "unknown method",
                r#"{"jsonrpc":"2.0","id":1,"method":"platform.nope","params":{}}"#,
            ),
        ] {
            let who = format!("198.51.{n}{expected}.{}", what.len());
            let window = Duration::from_secs(6);
            let (answered, limited, other, elapsed) =
                spray_refused(&fleet, n, 4, text, &who, window).await;
            let allowed = f64::from(BURST) + f64::from(RPS) * elapsed.as_secs_f64();
            let ratio = answered as f64 / allowed;
            println!(
                "ATTACK3 n={n} expected_instances={expected} {what}: answered with their error \
                 {answered} ({:.1}/s), 429 {limited}, other {other}, in {elapsed:.2?}; allowed \
                 {allowed:.0} ({RPS}/s): ratio {ratio:.2}",
                answered as f64 / elapsed.as_secs_f64()
            );
            if n > 1 {
                worst = worst.max(ratio);
            }
        }
        fleet.shutdown().await;
    }
    assert!(
        worst <= 1.3,
        "refused calls answered at {worst:.2} times the quota"
    );
}

// ------------------------------------------------------------------------------------------------
// Attack 4: many addresses; Redis slow or killed mid-run.
// ------------------------------------------------------------------------------------------------

/// Attack 4: 3,000 distinct addresses (X-Forwarded-For from the trusted proxy) make one call each
/// over 3 instances (`max_clients = 1000`): Redis quota keys and tracked clients, then and later;
/// a fresh honest client's calls meanwhile. Then Redis sleeps 1 s, then is killed, while a client
/// calls: the slowest call must stay near `[redis] timeout` (25 ms) plus a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attack4_address_flood_and_redis_slow_or_killed() {
    let mut redis = RedisServer::start();
    let fleet = fleet(&redis, 3, 20, 40, 1, "max_clients = 1000").await;
    let c = kclient();
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..24usize {
        let (c, tally) = (c.clone(), tally.clone());
        let urls: Vec<String> = (0..3).map(|i| fleet.url(i)).collect();
        tasks.push(tokio::spawn(async move {
            for k in (w..3000).step_by(24) {
                let who = format!("10.{}.{}.{}", k / 65536, (k / 256) % 256, k % 256);
                tally.add(&call_m(&c, &urls[k % 3], &who).await);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (served, limited, _, other) = tally.get();
    let flood = start.elapsed();
    let keys = |r: &RedisServer| {
        r.scan_keys("snowgate:*")
            .iter()
            .filter(|k| is_quota_key(k))
            .count()
    };
    let tracked = fleet_metric(&fleet, "snowgate_rate_limit_clients").await;
    println!(
        "ATTACK4 flood of 3000 addresses in {flood:.2?}: {served} served, {limited} limited, \
         {other} other; quota keys in Redis {}; tracked (sum) {tracked}; slowest {} ms",
        keys(&redis),
        tally.slowest_us.load(Ordering::Relaxed) / 1000
    );
    // An honest fresh client, right after the flood (the tables are full).
    let mut honest = Vec::new();
    for k in 0..30 {
        honest.push(call_m(&c, &fleet.url(k % 3), "192.0.2.77").await.got);
    }
    let refused = honest.iter().filter(|g| **g != Got::Served).count();
    let page = support::get_with(
        &format!("{}/snowgate/quota", fleet.url(0)),
        &[("x-forwarded-for", "192.0.2.77")],
    )
    .await;
    println!(
        "ATTACK4 honest fresh client after the flood: {refused} of 30 not served; quota page {}",
        page.body
    );
    for wait in [2u64, 5, 10] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let tracked = fleet_metric(&fleet, "snowgate_rate_limit_clients").await;
        println!(
            "ATTACK4 +{wait}s more: quota keys in Redis {}; tracked (sum) {tracked}",
            keys(&redis)
        );
    }

    // Redis asleep for 1 s, then killed, while one client calls every instance.
    for phase in ["sleep", "kill"] {
        let asleep = if phase == "sleep" {
            Some(redis.sleep(Duration::from_secs(1)))
        } else {
            redis.kill();
            None
        };
        let mut slowest = Duration::ZERO;
        let mut got = Vec::new();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(1500) {
            for i in 0..3 {
                let a = call_m(&c, &fleet.url(i), "192.0.2.88").await;
                slowest = slowest.max(a.took);
                got.push(a.got);
            }
        }
        let served = got.iter().filter(|g| **g == Got::Served).count();
        println!(
            "ATTACK4 Redis {phase}: {} calls, {served} served, slowest {slowest:?}, others {:?}",
            got.len(),
            got.iter()
                .filter(|g| **g != Got::Served)
                .take(3)
                .collect::<Vec<_>>()
        );
        if let Some(h) = asleep {
            h.join().unwrap();
        }
        assert!(slowest < Duration::from_secs(2), "a call hung: {slowest:?}");
    }
    fleet.shutdown().await;
}

// ------------------------------------------------------------------------------------------------
// Attack 5: what the RateLimit headers and /snowgate/quota reveal.
// ------------------------------------------------------------------------------------------------

/// Attack 5: a key client, an address, an untrusted peer forging X-Forwarded-For, a wrong key;
/// every header and quota page is searched for a key, a node address, another client's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack5_headers_and_quota_page_leak_nothing() {
    const KEY_A: &str = "attack27-secret-key-aaaaaaaaaaaa";
    const KEY_B: &str = "attack27-secret-key-bbbbbbbbbbbb";
    let redis = RedisServer::start();
    let rl = format!(
        "[[rate_limit.tiers]]\nname = \"gold\"\nrequests_per_second = 50\nburst = 50\n\
         [[rate_limit.keys]]\nkey = \"{KEY_A}\"\ntier = \"gold\"\n\
         [[rate_limit.keys]]\nkey = \"{KEY_B}\"\nname = \"bob\"\nrequests_per_second = 7\nburst = 70\n"
    );
    let fleet = fleet(&redis, 2, 10, 20, 1, &rl).await;
    let nodes: Vec<String> = fleet.nodes.iter().map(|n| n.url()).collect();
    let secrets: Vec<String> = [KEY_A, KEY_B, "192.0.2.99", "198.51.100.200"]
        .iter()
        .map(|s| s.to_string())
        .chain(
            nodes
                .iter()
                .map(|u| u.trim_start_matches("http://").to_string()),
        )
        .collect();
    // Another client's activity first: 192.0.2.99 spends most of its budget.
    let c = kclient();
    for _ in 0..15 {
        call_m(&c, &fleet.url(0), "192.0.2.99").await;
    }
    let bearer_a = format!("Bearer {KEY_A}");
    let wrong = format!("Bearer {KEY_A}x");
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("key A (tier)", vec![("authorization", bearer_a.as_str())]),
        ("key B (x-api-key)", vec![("x-api-key", KEY_B)]),
        ("wrong key", vec![("authorization", wrong.as_str())]),
        ("address", vec![("x-forwarded-for", "203.0.113.5")]),
    ];
    let mut shown = Vec::new();
    for (what, headers) in &cases {
        let a = send(&c, &fleet.url(1), &body(M, PARAMS), headers).await;
        let page = support::get_with(&format!("{}/snowgate/quota", fleet.url(1)), headers).await;
        let mut all = format!("{:?} {}", a.headers, page.body);
        all.push_str(&format!("{:?}", page.headers));
        println!(
            "ATTACK5 {what}: RateLimit-Policy {:?} RateLimit {:?}; page {}",
            a.headers.get("ratelimit-policy"),
            a.headers.get("ratelimit"),
            page.body
        );
        shown.push((what.to_string(), all));
    }
    // An untrusted peer (127.0.0.2 is not in trusted_proxies) forging another client's address:
    // it must be known by its own address, and see its own (full) budget.
    let forged = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let addr: std::net::SocketAddr =
            fleet.url(0).trim_start_matches("http://").parse().unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        s.write_all(
            b"GET /snowgate/quota HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 192.0.2.99\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    println!("ATTACK5 untrusted peer forging X-Forwarded-For: {forged}");
    assert!(!forged.contains("192.0.2.99"), "{forged}");
    assert!(forged.contains("\"client\":\"127.0.0.2\""), "{forged}");
    for (what, all) in &shown {
        for s in &secrets {
            assert!(!all.contains(s.as_str()), "{what} shows {s}: {all}");
        }
    }
    // Redis never holds a key's value.
    let keys: Vec<String> = redis
        .scan_keys("snowgate:*")
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(keys.iter().all(|k| !k.contains("secret")), "{keys:?}");
    fleet.shutdown().await;
}
