//! A fleet for the tests: one simulated network of devnodes shared by several gateways, each on
//! its own `127.0.0.1:0` listener with the same config (which points them at one Redis), as
//! operators run snowgate behind a load balancer. Helpers call instance `i` and read what the
//! nodes saw, so a test can prove that work done by one instance spared another's.
//!
//! The scenarios that must hold on one Redis and on a Redis Cluster alike (a shared hit, a
//! corrupted entry refused, one global quota) live here, written against [`SharedRedis`], and
//! `tests/fleet.rs` and `tests/fleet_cluster.rs` run them.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snowgate::config::Config;
use snowgate::devnode::{DevNode, Network};
use snowgate::Gateway;

use super::redis::SharedRedis;
use super::{client, eventually, post_with, Reply};

/// A chain that does not move during a test: immutable and head answers stay what they were.
pub const SLOW_CHAIN: Duration = Duration::from_secs(60);
/// The shared cache's keys under the default `key_prefix` (the network ID and a hash follow).
pub const CACHE_KEYS: &str = "snowgate:*:c:*";

/// Whether a Redis key is a global quota's under the default `key_prefix`: `snowgate:q:...`, or
/// with a qualifier (a network ID) before the `q:`.
pub fn is_quota_key(key: &[u8]) -> bool {
    key.strip_prefix(b"snowgate:")
        .is_some_and(|rest| rest.starts_with(b"q:") || rest.windows(3).any(|w| w == b":q:"))
}

/// Devnodes sharing one chain, and several gateways in front of all of them.
pub struct Fleet {
    pub network: Network,
    pub nodes: Vec<DevNode>,
    pub gateways: Vec<Gateway>,
    /// Each instance's config, for [`Fleet::restart`].
    configs: Vec<Config>,
}

impl Fleet {
    /// `instances` gateways over `nodes` devnodes (a block every `block_interval`). Each gateway's
    /// config is `toml` (a config file without `[[upstreams]]`, e.g. its `[redis]` section),
    /// then the test settings [`super::Cluster`] uses (rate limits off, health checked every
    /// 200 ms), then `tweak(instance, &mut config)`.
    pub async fn start(
        instances: usize,
        nodes: usize,
        block_interval: Duration,
        toml: &str,
        tweak: impl Fn(usize, &mut Config),
    ) -> Fleet {
        Fleet::start_on_network(12345, instances, nodes, block_interval, toml, tweak).await
    }

    /// [`Fleet::start`] over devnodes of network `network_id` (12345 = local, 5 = fuji).
    pub async fn start_on_network(
        network_id: u32,
        instances: usize,
        nodes: usize,
        block_interval: Duration,
        toml: &str,
        tweak: impl Fn(usize, &mut Config),
    ) -> Fleet {
        let (network, devnodes) = super::devnodes(network_id, nodes, block_interval).await;
        let base = Config::from_toml(toml, "the fleet test's config")
            .unwrap_or_else(|e| panic!("{e}\n--- config:\n{toml}"));
        let mut gateways = Vec::new();
        let mut configs = Vec::new();
        for i in 0..instances {
            let mut config = base.clone();
            super::test_gateway(&mut config, &devnodes);
            tweak(i, &mut config);
            configs.push(config.clone());
            gateways.push(instance(i, config).await);
        }
        Fleet {
            network,
            nodes: devnodes,
            gateways,
            configs,
        }
    }

    /// Stops every instance, then starts new ones (new `Gateway`s, each on a fresh
    /// `127.0.0.1:0`: nothing carried over but what the fleet's Redis holds) with the same
    /// configs over the same nodes.
    pub async fn restart(&mut self) {
        for g in self.gateways.drain(..) {
            g.shutdown().await;
        }
        for (i, config) in self.configs.iter().enumerate() {
            self.gateways.push(instance(i, config.clone()).await);
        }
    }

    /// Stops instance `i` gracefully ([`Gateway::shutdown`]) and starts a new one in its place
    /// (a fresh `127.0.0.1:0`) with the same config, as a rolling restart does.
    pub async fn restart_one(&mut self, i: usize) {
        let old = self.gateways.remove(i);
        old.shutdown().await;
        let fresh = instance(i, self.configs[i].clone()).await;
        self.gateways.insert(i, fresh);
    }

    /// `http://ADDR` of instance `i`.
    pub fn url(&self, i: usize) -> String {
        self.gateways[i].url()
    }

    /// A P-chain call (`/ext/bc/P`, id 1) to instance `i`.
    pub async fn p(&self, i: usize, method: &str, params: &str) -> Reply {
        self.p_with(i, method, params, &[]).await
    }

    /// A P-chain call to instance `i` with extra headers (an API key, `X-Forwarded-For`).
    pub async fn p_with(
        &self,
        i: usize,
        method: &str,
        params: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        post_with(
            &format!("{}/ext/bc/P", self.url(i)),
            &super::call(method, params),
            headers,
        )
        .await
    }

    /// How many times the nodes (all of them) were called with `method`.
    pub fn calls(&self, method: &str) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.control().call_count(method))
            .sum()
    }

    /// Instance `i`'s `/metrics` text.
    pub async fn metrics(&self, i: usize) -> String {
        super::get_metrics(&self.url(i)).await
    }

    /// One sample of instance `i`'s metrics, `series` written as in the exposition
    /// (`snowgate_redis_up`, `snowgate_shared_cache_total{result="hit"}`); 0 when absent.
    pub async fn metric(&self, i: usize, series: &str) -> f64 {
        metric(&self.metrics(i).await, series)
    }

    /// Instance `i`'s `/ext/health`: status and body.
    pub async fn health(&self, i: usize) -> (u16, serde_json::Value) {
        let r = client()
            .get(format!("{}/ext/health", self.url(i)))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("/ext/health is not JSON ({e}): {text:?}"));
        (status, body)
    }

    /// Stops every instance.
    pub async fn shutdown(self) {
        for g in self.gateways {
            g.shutdown().await;
        }
    }
}

/// Instance `i` of a fleet, started from `config` on `127.0.0.1:0`.
async fn instance(i: usize, config: Config) -> Gateway {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Gateway::start_on(config, listener)
        .await
        .unwrap_or_else(|e| panic!("instance {i} did not start: {e:#}"))
}

/// The value of `series` (name and labels exactly as exposed) in a Prometheus text exposition;
/// 0 when it is absent (a counter not yet incremented).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let rest = l.strip_prefix(series)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .unwrap_or(0.0)
}

/// The `X-Cache` header, `-` when absent.
pub fn x_cache(r: &Reply) -> &str {
    r.header("x-cache").unwrap_or("-")
}

/// Whether a reply is a served JSON-RPC answer: HTTP 200 with a `result`.
pub fn is_result(r: &Reply) -> bool {
    r.status == 200
        && serde_json::from_str::<serde_json::Value>(&r.body)
            .is_ok_and(|v| v.get("result").is_some_and(|x| !x.is_null()))
}

/// Waits (at most 60 s) until Redis holds at least `n` keys matching `pattern` (writes to Redis
/// happen after the client's answer); the keys.
pub async fn wait_for_keys(redis: &impl SharedRedis, pattern: &str, n: usize) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let ok = eventually(Duration::from_secs(60), || {
        keys = redis.scan_keys(pattern);
        keys.len() >= n
    })
    .await;
    assert!(
        ok,
        "Redis holds {} keys matching {pattern} after 60 s, expected at least {n}",
        keys.len()
    );
    keys
}

/// Immutable and head-class calls with their params (a head answer stays valid for the test: the
/// chain does not move and the fleet's `head_ttl` is long): a block by height, the same block by
/// ID, one of its transactions, and the current supply at the best height.
pub async fn cacheable_calls(fleet: &Fleet, height: u64) -> Vec<(&'static str, String)> {
    let by_height = format!(r#"{{"height":{height},"encoding":"json"}}"#);
    let r = fleet.p(0, "platform.getBlockByHeight", &by_height).await;
    assert!(is_result(&r), "{}", r.body);
    let block = r.json()["result"]["block"].clone();
    let block_id = block["id"].as_str().unwrap().to_string();
    let tx_id = block["txs"][0]["id"].as_str().unwrap().to_string();
    vec![
        ("platform.getBlockByHeight", by_height),
        (
            "platform.getBlock",
            format!(r#"{{"blockID":"{block_id}"}}"#),
        ),
        (
            "platform.getTx",
            format!(r#"{{"txID":"{tx_id}","encoding":"json"}}"#),
        ),
        ("platform.getCurrentSupply", "{}".to_string()),
    ]
}

/// Issue 14: a miss on instance A, then the same call on instance B is a hit (`X-Cache: HIT`,
/// counted as a shared hit) that no node sees, and its answer is A's byte for byte.
pub async fn a_miss_on_one_instance_is_a_hit_on_another(redis: &impl SharedRedis) {
    let toml = format!("{}[cache]\nhead_ttl = \"60s\"\n", redis.redis_toml());
    let fleet = Fleet::start(2, 2, SLOW_CHAIN, &toml, |_, _| {}).await;
    let calls = cacheable_calls(&fleet, 900).await;
    let mut answers = Vec::new();
    for (method, params) in &calls {
        let r = fleet.p(0, method, params).await;
        assert!(is_result(&r), "{method}: {}", r.body);
        answers.push(r);
    }
    wait_for_keys(redis, CACHE_KEYS, calls.len()).await;
    let seen: Vec<u64> = calls.iter().map(|(m, _)| fleet.calls(m)).collect();
    assert!(seen.iter().all(|&n| n == 1), "node calls after A: {seen:?}");
    for ((method, params), on_a) in calls.iter().zip(&answers) {
        let r = fleet.p(1, method, params).await;
        assert_eq!(x_cache(&r), "HIT", "{method} on B: {}", r.body);
        assert_eq!(r.body, on_a.body, "{method}: B's answer is not A's");
        assert_eq!(fleet.calls(method), 1, "{method} reached a node from B");
    }
    let hits = fleet
        .metric(1, r#"snowgate_shared_cache_total{result="hit"}"#)
        .await;
    assert!(hits >= calls.len() as f64, "B counted {hits} shared hits");
    fleet.shutdown().await;
}

/// Three ways a shared value can be wrong, each given to a cold instance.
#[derive(Debug, Clone, Copy)]
enum Corruption {
    /// Bytes that are no format at all.
    Garbage,
    /// Another key's genuine value (another call's answer, in snowgate's own format).
    Swapped,
    /// The right value with one byte of its payload changed (still valid JSON where possible).
    Flipped,
}

/// The corrupted values to write, key by key. `truth` is a piece of each answer's payload as the
/// client saw it, to find the payload inside the stored bytes.
fn corrupt(kind: Corruption, values: &[Vec<u8>], truth: &[String]) -> Vec<Vec<u8>> {
    match kind {
        Corruption::Garbage => values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut g = format!("\x00not a snowgate entry {i} \u{fffd}").into_bytes();
                g.extend((0..v.len().min(512)).map(|j| (j * 31 + i * 7) as u8));
                g
            })
            .collect(),
        Corruption::Swapped => (0..values.len())
            .map(|i| values[(i + 1) % values.len()].clone())
            .collect(),
        Corruption::Flipped => values
            .iter()
            .map(|v| {
                let mut v = v.clone();
                // A hex digit of the answer's payload turned into another hex digit keeps the
                // JSON valid: only a check over the payload can tell.
                let at = truth
                    .iter()
                    .find_map(|t| find(&v, t.as_bytes()).map(|p| p + t.len() / 2))
                    .unwrap_or(v.len() / 2);
                v[at] = match v[at] {
                    b'0' => b'1',
                    b'a' => b'b',
                    b'A' => b'B',
                    x if x.is_ascii_alphanumeric() => b'0',
                    x => x ^ 0x01,
                };
                v
            })
            .collect(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Issue 14: a foreign or corrupted value in the shared keys is never served. Instance A fills
/// Redis; then every cache key is overwritten (garbage, another key's value, one flipped byte)
/// and a cold instance asks for each call: it gets the node's true answer, counts a `rejected`
/// shared read, and the bad value is replaced.
pub async fn foreign_or_corrupted_shared_values_are_never_served(redis: &impl SharedRedis) {
    const METHOD: &str = "platform.getBlockByHeight";
    let kinds = [
        Corruption::Garbage,
        Corruption::Swapped,
        Corruption::Flipped,
    ];
    // Instance 0 fills; instance k + 1 is cold for corruption k.
    let fleet = Fleet::start(
        1 + kinds.len(),
        1,
        SLOW_CHAIN,
        &redis.redis_toml(),
        |_, _| {},
    )
    .await;
    let params: Vec<String> = (901..904).map(|h| format!(r#"{{"height":{h}}}"#)).collect();
    let mut truth = Vec::new();
    for p in &params {
        let r = fleet.p(0, METHOD, p).await;
        assert!(is_result(&r), "{}", r.body);
        truth.push(r);
    }
    let keys = wait_for_keys(redis, CACHE_KEYS, params.len()).await;
    assert_eq!(keys.len(), params.len(), "one shared entry per call");
    let values: Vec<Vec<u8>> = keys.iter().map(|k| redis.get(k).unwrap()).collect();
    // A stretch from the middle of each hex block, to find the payload in the stored value.
    let payloads: Vec<String> = truth
        .iter()
        .map(|r| {
            let hex = r.json()["result"]["block"].as_str().unwrap().to_string();
            hex[hex.len() / 2..hex.len() / 2 + 32].to_string()
        })
        .collect();
    for (k, kind) in kinds.into_iter().enumerate() {
        let b = k + 1;
        let bad = corrupt(kind, &values, &payloads);
        for (key, v) in keys.iter().zip(&bad) {
            redis.set(key, v);
        }
        let before = fleet.calls(METHOD);
        for (p, t) in params.iter().zip(&truth) {
            let r = fleet.p(b, METHOD, p).await;
            if r.body != t.body {
                // Where it differs, not two whole blocks.
                let at = r
                    .body
                    .bytes()
                    .zip(t.body.bytes())
                    .take_while(|(x, y)| x == y)
                    .count();
                panic!(
                    "{kind:?}: instance {b} served a wrong answer for {p} (X-Cache {}): byte {at} \
                     of {} differs: {:?}",
                    x_cache(&r),
                    t.body.len(),
                    String::from_utf8_lossy(
                        &r.body.as_bytes()[at.saturating_sub(20)..(at + 20).min(r.body.len())]
                    )
                );
            }
            assert_ne!(
                x_cache(&r),
                "HIT",
                "{kind:?}: a refused entry counted as a hit"
            );
        }
        assert_eq!(
            fleet.calls(METHOD) - before,
            params.len() as u64,
            "{kind:?}: every call should have gone to a node"
        );
        let rejected = fleet
            .metric(b, r#"snowgate_shared_cache_total{result="rejected"}"#)
            .await;
        assert!(
            rejected >= params.len() as f64,
            "{kind:?}: instance {b} counted {rejected} rejected shared reads"
        );
        // A refused value is overwritten with the node's answer.
        let replaced = eventually(Duration::from_secs(60), || {
            keys.iter()
                .zip(&bad)
                .all(|(key, v)| redis.get(key).as_ref() != Some(v))
        })
        .await;
        assert!(replaced, "{kind:?}: a refused value stayed in Redis");
    }
    fleet.shutdown().await;
}

/// What one client got from a spray.
#[derive(Debug)]
pub struct Spray {
    /// Calls answered with a result.
    pub served: u64,
    /// Calls refused with 429.
    pub refused: u64,
    /// Anything else (status and body).
    pub other: Vec<String>,
    /// From the first call to the last.
    pub elapsed: Duration,
}

/// One client calling `platform.sampleValidators` (never cached: every served call reaches a
/// node) on the instances in turn for `window`, with `pause` between calls (bounded in count too).
pub async fn spray(
    fleet: &Fleet,
    headers: &[(&str, &str)],
    window: Duration,
    pause: Duration,
) -> Spray {
    let start = Instant::now();
    let mut out = Spray {
        served: 0,
        refused: 0,
        other: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut i = 0;
    while start.elapsed() < window && i < 20_000 {
        out.elapsed = start.elapsed();
        let r = fleet
            .p_with(
                i % fleet.gateways.len(),
                "platform.sampleValidators",
                r#"{"size":1}"#,
                headers,
            )
            .await;
        match r.status {
            429 => out.refused += 1,
            _ if is_result(&r) => out.served += 1,
            _ => out.other.push(format!("{} {}", r.status, r.body)),
        }
        i += 1;
        tokio::time::sleep(pause).await;
    }
    out
}

/// Issue 14: one client spraying three instances gets the global quota within 10 % over 10 s
/// (counted from the node's calls and the 429s), and two clients (a key, an address) do not
/// share one quota: each gets its own whole quota at the same time.
pub async fn each_client_spraying_three_instances_gets_one_global_quota(redis: &impl SharedRedis) {
    const RATE: u32 = 40;
    const KEY: &str = "fleet-quota-test-key-0123456789";
    let cost = snowgate::methods::Registry::builtin()
        .get("platform.sampleValidators")
        .unwrap()
        .cost;
    let toml = format!(
        "{}[rate_limit]\nrequests_per_second = {RATE}\nburst = {RATE}\n\
         trusted_proxies = [\"127.0.0.1/32\"]\n\
         [[rate_limit.keys]]\nkey = \"{KEY}\"\nrequests_per_second = {RATE}\nburst = {RATE}\n",
        redis.redis_toml()
    );
    let fleet = Fleet::start(3, 1, SLOW_CHAIN, &toml, |_, c| c.rate_limit.enabled = true).await;
    let window = Duration::from_secs(10);
    // About 100 calls a second each: five times the quota of 20 calls a second.
    let pause = Duration::from_millis(10);
    let auth = format!("Bearer {KEY}");
    let keyed_headers = [("authorization", auth.as_str())];
    let address_headers = [("x-forwarded-for", "198.51.100.7")];
    let (keyed, by_address) = tokio::join!(
        spray(&fleet, &keyed_headers, window, pause),
        spray(&fleet, &address_headers, window, pause),
    );
    // Calls decided without Redis (a timeout on a machine too busy): they are the fallback's,
    // not the quota's, and are said when the count is off.
    let mut fallback = 0.0;
    for i in 0..fleet.gateways.len() {
        fallback += fleet
            .metric(
                i,
                r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
            )
            .await;
    }
    for (who, s) in [("the key", &keyed), ("the address", &by_address)] {
        assert!(
            s.other.is_empty(),
            "{who}: {:?}",
            &s.other[..s.other.len().min(5)]
        );
        assert!(s.refused > 0, "{who} was never limited: {s:?}");
        // GCRA: the burst at once, then the rate; in calls of `cost` units.
        let allowed =
            (f64::from(RATE) + f64::from(RATE) * s.elapsed.as_secs_f64()) / f64::from(cost);
        // At most half the burst is ever out on lease, unspent when the window ends (or spent
        // twice and not yet repaid): that much is not the quota's error but its design.
        let leases = f64::from(RATE) / 2.0 / f64::from(cost);
        let served = s.served as f64;
        assert!(
            served >= allowed * 0.90 && served <= allowed * 1.10 + leases,
            "{who} was served {served} calls in {:?}; the global quota allows {allowed:.0} (±10 %): \
             {s:?}; {fallback} calls were allowed without Redis",
            s.elapsed
        );
    }
    assert_eq!(
        fleet.calls("platform.sampleValidators"),
        keyed.served + by_address.served,
        "the nodes saw other calls than the served ones"
    );
    // Two clients, two quotas in Redis; the API key itself is never written there.
    let keys = redis.scan_keys("snowgate:*");
    let quotas = keys.iter().filter(|k| is_quota_key(k)).count();
    assert!(
        quotas >= 2,
        "{quotas} quota keys in Redis, expected one per client"
    );
    let shown: Vec<String> = keys
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        shown.iter().all(|k| !k.contains(KEY)),
        "an API key in a Redis key: {shown:?}"
    );
    fleet.shutdown().await;
}

/// `getBlockByHeight` at `height` on instance `i`.
pub async fn block(fleet: &Fleet, i: usize, height: u64) -> Reply {
    fleet
        .p(
            i,
            "platform.getBlockByHeight",
            &format!(r#"{{"height":{height}}}"#),
        )
        .await
}

/// Reads on instance `i` until `stop` (at most 5,000): new blocks (a shared read and write each)
/// and a repeated one (a memory hit), counted in `reads`; the reads that failed or took over 2 s.
pub async fn reads_until_stopped(
    fleet: &Fleet,
    i: usize,
    stop: &AtomicBool,
    reads: &AtomicU64,
) -> Vec<String> {
    let mut failed = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && n < 5_000 {
        // Heights 300..=899 exist (the chain holds 0..=1000); past 300 new ones, they repeat.
        let h = if n % 2 == 0 {
            300 + (i as u64 * 300 + n / 2) % 600
        } else {
            100
        };
        let t = Instant::now();
        let r = block(fleet, i, h).await;
        let took = t.elapsed();
        if !is_result(&r) {
            failed.push(format!("{} {}", r.status, r.body));
        } else if took > Duration::from_secs(2) {
            // A bound, far above `[redis] timeout`: a read that waited on a dead Redis.
            failed.push(format!("height {h} took {took:?}"));
        }
        n += 1;
        reads.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    failed
}
