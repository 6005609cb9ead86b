//! A fleet (issue 14): several gateways over the same devnodes share one cache and one set of
//! quotas through one real `redis-server` (a unix socket in a temporary directory), and fail in
//! the chosen, visible way when Redis dies or stalls. What the nodes saw proves the sharing; the
//! same cache and quota scenarios run against a Redis Cluster in `tests/fleet_cluster.rs`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::fleet::*;
use support::redis::{RedisServer, Resp, SharedRedis};
use support::Reply;

#[test]
fn the_redis_harness_starts_kills_restarts_and_sleeps_a_server() {
    for mut r in [RedisServer::start(), RedisServer::start_tcp()] {
        r.set_raw(b"snowgate:t:c:\x00\xff", b"\x00bytes\r\n\xff");
        assert_eq!(
            r.get_raw(b"snowgate:t:c:\x00\xff").unwrap(),
            b"\x00bytes\r\n\xff"
        );
        r.set_raw(b"other", b"x");
        assert_eq!(
            r.keys("snowgate:*:c:*"),
            vec![b"snowgate:t:c:\x00\xff".to_vec()]
        );
        assert_eq!(r.cli(&["PING"]).trim(), "PONG");
        let start = Instant::now();
        r.sleep(Duration::from_millis(800)).join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(700));
        r.kill();
        assert!(!r.is_running());
        r.restart();
        assert_eq!(r.command(&[b"DBSIZE"]), Resp::Int(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_on_one_instance_is_a_shared_hit_on_another_without_a_node_call() {
    let redis = RedisServer::start();
    a_miss_on_one_instance_is_a_hit_on_another(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_or_corrupted_shared_values_are_never_served_by_a_cold_instance() {
    let redis = RedisServer::start();
    foreign_or_corrupted_shared_values_are_never_served(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_spraying_three_instances_gets_the_global_quota_and_two_clients_get_two() {
    let redis = RedisServer::start();
    each_client_spraying_three_instances_gets_one_global_quota(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleets_of_another_network_or_key_prefix_never_get_each_others_answers() {
    let redis = RedisServer::start();
    let toml = redis.redis_toml();
    let local = Fleet::start(1, 1, SLOW_CHAIN, &toml, |_, _| {}).await;
    // The same Redis and prefix, another network (fuji): the same call has another answer.
    let fuji = Fleet::start_on_network(5, 1, 1, SLOW_CHAIN, &toml, |_, _| {}).await;
    // The same network, another fleet sharing the Redis under its own prefix.
    let other_prefix = format!("{toml}key_prefix = \"other-fleet:\"\n");
    let other = Fleet::start(1, 1, SLOW_CHAIN, &other_prefix, |_, _| {}).await;

    let first = block(&local, 0, 900).await;
    assert!(is_result(&first), "{}", first.body);
    wait_for_keys(&redis, CACHE_KEYS, 1).await;
    for (name, fleet) in [("fuji", &fuji), ("other-fleet:", &other)] {
        let r = block(fleet, 0, 900).await;
        assert!(is_result(&r), "{name}: {}", r.body);
        assert_eq!(
            x_cache(&r),
            "MISS",
            "{name} was served the local fleet's entry"
        );
        assert_eq!(fleet.calls("platform.getBlockByHeight"), 1, "{name}");
        let direct = support::post(
            &format!("{}/ext/bc/P", fleet.nodes[0].url()),
            &support::call("platform.getBlockByHeight", r#"{"height":900}"#),
        )
        .await;
        assert_eq!(r.body, direct.body, "{name}: not its own node's answer");
    }
    assert_ne!(
        block(&fuji, 0, 900).await.body,
        first.body,
        "the networks' blocks should differ, or this test proves nothing"
    );
    // Each fleet wrote its own entry: under the other prefix, and under fuji's network ID.
    let other_keys = wait_for_keys(&redis, "other-fleet:*:c:*", 1).await;
    assert_eq!(other_keys.len(), 1);
    wait_for_keys(&redis, CACHE_KEYS, 2).await;
    for f in [local, fuji, other] {
        f.shutdown().await;
    }
}

/// A fleet of `n` over `redis` with global quotas generous enough never to refuse the tests' load
/// (so any refusal is Redis's doing), and `extra` TOML after `[rate_limit]`'s numbers.
async fn generous_fleet(redis: &RedisServer, n: usize, extra: &str) -> Fleet {
    let toml = format!(
        "{}[rate_limit]\nrequests_per_second = 2000\nburst = 2000\n{extra}",
        redis.redis_toml()
    );
    Fleet::start(n, 1, SLOW_CHAIN, &toml, |_, c| c.rate_limit.enabled = true).await
}

/// Polls (at most `limit`) until a new block fetched by instance 0 is a shared hit on instance 1;
/// each try takes a fresh height from `heights`.
async fn sharing_works_within(
    fleet: &Fleet,
    heights: &mut impl Iterator<Item = u64>,
    limit: Duration,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let Some(h) = heights.next() else { break };
        let a = block(fleet, 0, h).await;
        assert!(is_result(&a), "{}", a.body);
        // The write to Redis follows A's answer.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let b = block(fleet, 1, h).await;
        assert_eq!(b.body, a.body);
        if x_cache(&b) == "HIT" {
            return true;
        }
    }
    false
}

/// Sum of one series over the fleet's instances.
async fn total(fleet: &Fleet, series: &str) -> f64 {
    let mut sum = 0.0;
    for i in 0..fleet.gateways.len() {
        sum += fleet.metric(i, series).await;
    }
    sum
}

/// The shared tier's fallback counters, summed over the fleet: (shared reads that failed or were
/// skipped, quota decisions taken locally).
async fn fallbacks(fleet: &Fleet) -> (f64, f64) {
    let cache = total(fleet, r#"snowgate_shared_cache_total{result="error"}"#).await
        + total(fleet, r#"snowgate_shared_cache_total{result="skipped"}"#).await;
    let quota = total(
        fleet,
        r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
    )
    .await;
    (cache, quota)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_fails_no_client_read_and_sharing_resumes_after_restart() {
    let mut redis = RedisServer::start();
    let fleet = generous_fleet(&redis, 2, "").await;
    let mut heights = 100..200;
    assert!(
        sharing_works_within(&fleet, &mut heights, Duration::from_secs(5)).await,
        "no shared hit before Redis was killed"
    );
    let (cache_before, quota_before) = fallbacks(&fleet).await;

    // Load: both instances, new blocks (a shared read and write each) and repeated ones (memory
    // hits), until the control below has killed Redis, seen the fallback and restarted it.
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let load = |i: usize| reads_until_stopped(&fleet, i, &stop, &reads);
    let control = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        tokio::task::block_in_place(|| redis.kill());
        let killed_at = reads.load(Ordering::Relaxed);
        let mut seen_down = false;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let up = total(&fleet, "snowgate_redis_up").await;
            let (cache, quota) = fallbacks(&fleet).await;
            if up == 0.0 && cache > cache_before && quota > quota_before {
                seen_down = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Some more load with Redis gone, then bring it back (empty).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let down_reads = reads.load(Ordering::Relaxed) - killed_at;
        tokio::task::block_in_place(|| redis.restart());
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Relaxed);
        (seen_down, down_reads)
    };
    let (failed_a, failed_b, (seen_down, down_reads)) = tokio::join!(load(0), load(1), control);
    assert!(
        failed_a.is_empty() && failed_b.is_empty(),
        "failed client reads: {:?} {:?}",
        &failed_a[..failed_a.len().min(3)],
        &failed_b[..failed_b.len().min(3)]
    );
    let (cache_after, quota_after) = fallbacks(&fleet).await;
    assert!(
        seen_down,
        "within 10 s of the kill, snowgate_redis_up did not drop to 0 on both instances or the \
         fallback counters did not move (shared reads failed/skipped {cache_before} -> \
         {cache_after}, local quota decisions {quota_before} -> {quota_after})"
    );
    assert!(
        down_reads > 20,
        "only {down_reads} reads while Redis was down"
    );
    assert!(
        sharing_works_within(&fleet, &mut heights, Duration::from_secs(10)).await,
        "sharing did not resume within 10 s of Redis's restart"
    );
    let start = Instant::now();
    while total(&fleet, "snowgate_redis_up").await < 2.0 && start.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        total(&fleet, "snowgate_redis_up").await,
        2.0,
        "snowgate_redis_up after the restart"
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_redis_fails_no_client_read_and_sharing_settles_after_it() {
    let mut redis = RedisServer::start();
    let fleet = generous_fleet(&redis, 2, "").await;
    let mut heights = 100..200;
    assert!(
        sharing_works_within(&fleet, &mut heights, Duration::from_secs(5)).await,
        "no shared hit before Redis flapped"
    );
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let control = async {
        // Four times down and up again (empty each time), a quarter of a second each.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            tokio::task::block_in_place(|| redis.kill());
            tokio::time::sleep(Duration::from_millis(250)).await;
            tokio::task::block_in_place(|| redis.restart());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Relaxed);
    };
    let (failed_a, failed_b, ()) = tokio::join!(
        reads_until_stopped(&fleet, 0, &stop, &reads),
        reads_until_stopped(&fleet, 1, &stop, &reads),
        control
    );
    assert!(
        failed_a.is_empty() && failed_b.is_empty(),
        "failed client reads: {:?} {:?}",
        &failed_a[..failed_a.len().min(3)],
        &failed_b[..failed_b.len().min(3)]
    );
    let n = reads.load(Ordering::Relaxed);
    assert!(n > 50, "only {n} reads while Redis flapped");
    assert!(
        sharing_works_within(&fleet, &mut heights, Duration::from_secs(10)).await,
        "sharing did not resume within 10 s of the last restart"
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_started_while_redis_is_down_serves_and_shares_once_redis_is_up() {
    let mut redis = RedisServer::start();
    tokio::task::block_in_place(|| redis.kill());
    let start = Instant::now();
    let fleet = generous_fleet(&redis, 2, "").await;
    let took = start.elapsed();
    // A bound, not a timing claim: a start that waited for Redis would never end.
    assert!(
        took < Duration::from_secs(10),
        "two instances took {took:?} to start"
    );
    for i in 0..2 {
        let r = block(&fleet, i, 500).await;
        assert!(
            is_result(&r),
            "instance {i} with Redis down: {} {}",
            r.status,
            r.body
        );
        let (status, v) = fleet.health(i).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["shared"]["redis"], "down", "{v}");
    }
    tokio::task::block_in_place(|| redis.restart());
    let mut heights = 510..600;
    assert!(
        sharing_works_within(&fleet, &mut heights, Duration::from_secs(10)).await,
        "no sharing within 10 s of Redis coming up"
    );
    for i in 0..2 {
        let (_, v) = fleet.health(i).await;
        assert_eq!(v["shared"]["redis"], "up", "{v}");
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_delays_no_request_beyond_its_timeout() {
    let redis = RedisServer::start();
    // `timeout` is the default, 25 ms.
    let fleet = generous_fleet(&redis, 2, "").await;
    // Shared entries instance 1 has not seen yet: its reads of them go to Redis.
    for h in 300..310 {
        assert!(is_result(&block(&fleet, 0, h).await));
    }
    wait_for_keys(&redis, CACHE_KEYS, 10).await;
    assert_eq!(x_cache(&block(&fleet, 1, 300).await), "HIT");

    // Redis stalls for 3 s; every request in its first 1.5 s must answer well before Redis
    // does: one that waited on it would take over 1.5 s.
    let sleeping = tokio::task::block_in_place(|| redis.sleep(Duration::from_secs(3)));
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(1500) && n < 1_000 {
        // A shared entry instance 1 has not read, a new block on 0, a memory hit, a new block on 1.
        let n_ = n % 200;
        for (i, h) in [(1, 301 + n % 9), (0, 400 + n_), (1, 300), (1, 600 + n_)] {
            let t = Instant::now();
            let r = block(&fleet, i, h).await;
            let took = t.elapsed();
            assert!(is_result(&r), "instance {i}, height {h}: {}", r.body);
            assert!(
                took < Duration::from_secs(1),
                "instance {i}, height {h} took {took:?} while Redis slept"
            );
        }
        n += 1;
    }
    assert!(n >= 3, "only {n} rounds in 1.5 s");
    tokio::task::block_in_place(|| sleeping.join().unwrap());
    fleet.shutdown().await;
}

/// Calls `platform.sampleValidators` on instance `i` until `done(reply)` (at most `limit`).
async fn until(fleet: &Fleet, i: usize, limit: Duration, done: impl Fn(&Reply) -> bool) -> Reply {
    let start = Instant::now();
    loop {
        let r = fleet
            .p(i, "platform.sampleValidators", r#"{"size":1}"#)
            .await;
        if done(&r) || start.elapsed() > limit {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_redis_down_deny_charged_calls_get_503_until_redis_is_back() {
    let mut redis = RedisServer::start();
    let fleet = generous_fleet(&redis, 2, "on_redis_down = \"deny\"\n").await;
    for i in 0..2 {
        let r = until(&fleet, i, Duration::from_secs(5), is_result).await;
        assert!(is_result(&r), "before the kill: {} {}", r.status, r.body);
    }
    tokio::task::block_in_place(|| redis.kill());
    let socket = redis.url().trim_start_matches("redis+unix://").to_string();
    for i in 0..2 {
        let r = until(&fleet, i, Duration::from_secs(5), |r| r.status == 503).await;
        assert_eq!(r.status, 503, "instance {i}: {}", r.body);
        for _ in 0..5 {
            let r = fleet
                .p(i, "platform.sampleValidators", r#"{"size":1}"#)
                .await;
            assert_eq!(r.status, 503, "instance {i}: {}", r.body);
            let v = r.json();
            assert_eq!(v["jsonrpc"], "2.0", "{v}");
            assert_eq!(v["id"], 1, "{v}");
            assert!(v["error"]["code"].is_i64(), "{v}");
            assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
            assert!(!r.body.contains(&socket), "the Redis address leaked: {v}");
        }
    }
    tokio::task::block_in_place(|| redis.restart());
    for i in 0..2 {
        let r = until(&fleet, i, Duration::from_secs(10), is_result).await;
        assert!(
            is_result(&r),
            "10 s after the restart: {} {}",
            r.status,
            r.body
        );
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_redis_down_local_calls_are_served_and_counted_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let fleet = generous_fleet(&redis, 2, "on_redis_down = \"local\"\n").await;
    for i in 0..2 {
        let r = until(&fleet, i, Duration::from_secs(5), is_result).await;
        assert!(is_result(&r), "before the kill: {} {}", r.status, r.body);
    }
    tokio::task::block_in_place(|| redis.kill());
    let before = total(
        &fleet,
        r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
    )
    .await;
    for i in 0..2 {
        for _ in 0..20 {
            let r = fleet
                .p(i, "platform.sampleValidators", r#"{"size":1}"#)
                .await;
            assert!(is_result(&r), "instance {i}: {} {}", r.status, r.body);
        }
    }
    // The local decisions are counted (once the instance knows Redis is gone).
    let mut counted = false;
    let start = Instant::now();
    while !counted && start.elapsed() < Duration::from_secs(5) {
        let r = fleet
            .p(0, "platform.sampleValidators", r#"{"size":1}"#)
            .await;
        assert!(is_result(&r), "{} {}", r.status, r.body);
        let now = total(
            &fleet,
            r#"snowgate_rate_limit_fallback_total{decision="allowed"}"#,
        )
        .await;
        counted = now > before;
    }
    assert!(counted, "no local quota decision counted with Redis down");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_redis_up_then_down_and_stays_200() {
    let mut redis = RedisServer::start();
    let fleet = generous_fleet(&redis, 2, "").await;
    let redis_state = |v: &serde_json::Value| v["shared"]["redis"].as_str().map(String::from);
    let wait_for = |state: &'static str, limit: Duration| {
        let fleet = &fleet;
        async move {
            let start = Instant::now();
            loop {
                let mut answers = Vec::new();
                for i in 0..fleet.gateways.len() {
                    let (status, v) = fleet.health(i).await;
                    assert_eq!(
                        status, 200,
                        "instance {i}'s /ext/health, Redis {state}?: {v}"
                    );
                    answers.push(v);
                }
                let all = answers
                    .iter()
                    .all(|v| redis_state(v).as_deref() == Some(state));
                if all || start.elapsed() > limit {
                    return answers;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    for v in wait_for("up", Duration::from_secs(5)).await {
        assert_eq!(redis_state(&v).as_deref(), Some("up"), "{v}");
    }
    tokio::task::block_in_place(|| redis.kill());
    let socket = redis.url().trim_start_matches("redis+unix://").to_string();
    for v in wait_for("down", Duration::from_secs(5)).await {
        assert_eq!(redis_state(&v).as_deref(), Some("down"), "{v}");
        assert!(
            !v.to_string().contains(&socket),
            "the Redis address leaked: {v}"
        );
    }
    tokio::task::block_in_place(|| redis.restart());
    for v in wait_for("up", Duration::from_secs(10)).await {
        assert_eq!(
            redis_state(&v).as_deref(),
            Some("up"),
            "10 s after the restart: {v}"
        );
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_foreign_typed_shared_values_are_refused_unread() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(2, 1, SLOW_CHAIN, &redis.redis_toml(), |_, _| {}).await;
    for h in 1..=3 {
        assert!(is_result(&block(&fleet, 0, h).await));
    }
    // A's writes follow its answers.
    let start = Instant::now();
    let keys = loop {
        let keys = redis.keys("snowgate:*:c:*");
        if keys.len() >= 3 || start.elapsed() > Duration::from_secs(5) {
            break keys;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(keys.len(), 3, "A shared three answers");
    // Someone plants a 100 MB string under one key, a hash and a list under the others.
    redis.command(&[b"SETRANGE", &keys[0], b"104857599", b"x"]);
    redis.command(&[b"DEL", &keys[1]]);
    redis.command(&[b"HSET", &keys[1], b"f", b"v"]);
    redis.command(&[b"DEL", &keys[2]]);
    redis.command(&[b"RPUSH", &keys[2], b"v"]);
    let before = fleet.calls("platform.getBlockByHeight");
    for h in 1..=3 {
        let r = block(&fleet, 1, h).await;
        assert!(is_result(&r), "{}", r.body);
        assert_eq!(x_cache(&r), "MISS", "height {h}");
    }
    assert_eq!(fleet.calls("platform.getBlockByHeight"), before + 3);
    let m = fleet.metrics(1).await;
    assert_eq!(
        metric(&m, r#"snowgate_shared_cache_total{result="rejected"}"#),
        3.0,
        "{m}"
    );
    // Refused unread: no error, no timeout, the breaker stays closed.
    for series in [
        r#"snowgate_redis_errors_total{kind="error",op="cache_get"}"#,
        r#"snowgate_redis_errors_total{kind="timeout",op="cache_get"}"#,
    ] {
        assert_eq!(metric(&m, series), 0.0, "{series}\n{m}");
    }
    // The breaker stays closed unless something else timed out on a machine too busy for
    // `[redis] timeout` (a probe, say): never for an error, and never for the planted values.
    if metric(&m, "snowgate_redis_up") != 1.0 {
        let errors: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("snowgate_redis_errors_total{") && !l.ends_with(" 0"))
            .collect();
        assert!(
            !errors.is_empty() && errors.iter().all(|l| l.contains("kind=\"timeout\"")),
            "the breaker opened: {errors:?}\n{m}"
        );
    }
    fleet.shutdown().await;
}
