//! Usage per key (issue 27): `GET /snowgate/usage` counts exactly the calls each rate-limit key was
//! served and the cost units they were charged, per UTC hour, in memory on one instance and
//! across a fleet through a real `redis-server`, also across a Redis restart, a Redis stall whose
//! writes land after the instances gave up on them, and a graceful restart of an instance; tiers
//! give keys their numbers, and a reload changes them.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use snowgate::config::{Config, KeyQuota, Tier};
use snowgate::gateway::ConfigSource;
use snowgate::Gateway;
use support::fleet::{is_result, x_cache, Fleet, SLOW_CHAIN};
use support::redis::{RedisServer, SharedRedis};
use support::window::{ask, status_json};
use support::{call, post_with, Cluster, ADMIN_KEY};

const KEY_A: &str = "usage-test-key-alpha-0123456789";
const KEY_B: &str = "usage-test-key-bravo-0123456789";

/// Key A in tier `gold`, key B with its own numbers: both generous.
fn keys(config: &mut Config) {
    config.rate_limit.enabled = true;
    config.rate_limit.tiers = vec![Tier {
        name: "gold".into(),
        requests_per_second: 10_000,
        burst: 10_000,
    }];
    config.rate_limit.keys = vec![KeyQuota::in_tier(KEY_A, "alpha", "gold"), {
        let mut b = KeyQuota::new(KEY_B, 10_000, 10_000);
        b.name = Some("bravo".into());
        b
    }];
}

/// `GET base/snowgate/usage?query` with the admin key: status, content type, body.
async fn usage(base: &str, query: &str) -> (u16, String, String) {
    ask(
        "GET",
        &format!("{base}/snowgate/usage?{query}"),
        Some(ADMIN_KEY),
    )
    .await
}

/// The JSON usage's total for `key`: calls and units (0 when absent).
fn total(v: &Value, key: &str) -> (u64, f64) {
    v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == key)
        .map_or((0, 0.0), |k| {
            (k["calls"].as_u64().unwrap(), k["units"].as_f64().unwrap())
        })
}

/// The tenths of a unit a `platform.getHeight` (cost 1) answered with `r` was charged: a hit
/// at the cached price (`cached_cost_factor` 0.5).
fn tenths(r: &support::Reply) -> u64 {
    if x_cache(r) == "HIT" {
        5
    } else {
        10
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_each_keys_calls_and_units_in_json_and_csv_for_admins_only() {
    let c = Cluster::start(1, SLOW_CHAIN, |config| {
        keys(config);
        config.cache.head_ttl = Duration::from_secs(60);
    })
    .await;
    let rpc = format!("{}/ext/bc/P", c.url());
    let height = call("platform.getHeight", "{}");
    let (mut a_tenths, mut b_tenths) = (0, 0);
    for _ in 0..7 {
        let r = post_with(&rpc, &height, &[("x-api-key", KEY_A)]).await;
        assert!(is_result(&r), "{r:?}");
        a_tenths += tenths(&r);
    }
    for _ in 0..4 {
        let r = post_with(
            &rpc,
            &height,
            &[("authorization", &format!("Bearer {KEY_B}"))],
        )
        .await;
        assert!(is_result(&r), "{r:?}");
        b_tenths += tenths(&r);
    }
    // A batch of three: each call is admitted, and counted, alone (all cached by now).
    let batch = format!("[{height},{height},{height}]");
    let r = post_with(&rpc, &batch, &[("x-api-key", KEY_B)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    b_tenths += 3 * 5;
    // Neither an admin's calls nor an address's count.
    post_with(
        &rpc,
        &height,
        &[("authorization", &format!("Bearer {ADMIN_KEY}"))],
    )
    .await;
    support::post(&rpc, &height).await;

    let (status, kind, body) = usage(&c.url(), "").await;
    assert_eq!(status, 200, "{body}");
    assert!(kind.starts_with("application/json"), "{kind}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["scope"], "instance");
    assert_eq!(total(&v, "alpha"), (7, a_tenths as f64 / 10.0), "{v}");
    assert_eq!(total(&v, "bravo"), (7, b_tenths as f64 / 10.0), "{v}");
    assert_eq!(v["keys"].as_array().unwrap().len(), 2, "{v}");
    assert!(!body.contains(KEY_A) && !body.contains(KEY_B), "{body}");

    // CSV: the same figures, units exact.
    let (status, kind, csv) = usage(&c.url(), "format=csv").await;
    assert_eq!(status, 200, "{csv}");
    assert!(kind.starts_with("text/csv"), "{kind}");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("hour,key,calls,units"));
    let mut by_key = std::collections::BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 4, "{line}");
        assert!(cells[0].ends_with(":00:00Z"), "{line}");
        let e = by_key.entry(cells[1].to_string()).or_insert((0u64, 0.0f64));
        e.0 += cells[2].parse::<u64>().unwrap();
        e.1 += cells[3].parse::<f64>().unwrap();
    }
    assert_eq!(by_key["alpha"].0, 7, "{csv}");
    assert!(
        (by_key["alpha"].1 - a_tenths as f64 / 10.0).abs() < 1e-9,
        "{csv}"
    );
    assert_eq!(by_key["bravo"].0, 7, "{csv}");

    // One key; a range without calls; a range that holds today.
    let (_, _, one) = usage(&c.url(), "key=bravo").await;
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["keys"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(total(&one, "bravo").0, 7);
    let (status, _, past) = usage(&c.url(), "from=2001-01-01&to=2001-01-02").await;
    assert_eq!(status, 200, "{past}");
    let past: Value = serde_json::from_str(&past).unwrap();
    assert_eq!(past["from"], "2001-01-01T00:00:00Z");
    assert_eq!(past["to"], "2001-01-02T23:00:00Z");
    assert!(past["hours"].as_array().unwrap().is_empty(), "{past}");
    let today = v["to"].as_str().unwrap()[..10].to_string();
    let (_, _, day) = usage(&c.url(), &format!("from={today}&to={today}")).await;
    let day: Value = serde_json::from_str(&day).unwrap();
    assert_eq!(total(&day, "alpha").0, 7, "{day}");

    // A bad query is a 400 saying what is wrong.
    let (status, _, why) = usage(&c.url(), "from=yesterday").await;
    assert_eq!(status, 400, "{why}");
    assert!(
        why.contains("from=\"yesterday\"") && why.contains("YYYY-MM-DD"),
        "{why}"
    );
    let (status, _, why) = usage(&c.url(), "format=xml").await;
    assert_eq!(status, 400, "{why}");

    // Not an admin: refused, as the status JSON is.
    let url = format!("{}/snowgate/usage", c.url());
    assert_eq!(ask("GET", &url, None).await.0, 401);
    assert_eq!(ask("GET", &url, Some(KEY_A)).await.0, 401);

    // The status page: this hour's top keys by name, never a key.
    let s = status_json(&c.url(), Some(ADMIN_KEY)).await;
    let top = &s["rateLimit"]["usageThisHour"];
    assert_eq!(top["scope"], "instance", "{top}");
    let names: Vec<&str> = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "bravo"], "{top}");
    assert!(!s.to_string().contains(KEY_A));
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_a_tiers_numbers_applies_them_to_its_keys() {
    let (_network, nodes) = support::devnodes(12345, 1, SLOW_CHAIN).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    config.cache.enabled = false;
    config.rate_limit.enabled = true;
    config.rate_limit.tiers = vec![Tier {
        name: "small".into(),
        requests_per_second: 1,
        burst: 10,
    }];
    config.rate_limit.keys = vec![KeyQuota::in_tier(KEY_A, "alpha", "small")];
    let current = Arc::new(Mutex::new(config));
    let source = {
        let current = current.clone();
        ConfigSource::new(move || Ok(current.lock().unwrap().clone()))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::start_from(source, Some(listener)).await.unwrap();
    let rpc = format!("{}/ext/bc/P", gateway.url());
    let height = call("platform.getHeight", "{}");
    let mut refused = 0;
    for _ in 0..20 {
        let r = post_with(&rpc, &height, &[("x-api-key", KEY_A)]).await;
        refused += u32::from(r.status == 429);
    }
    // A burst of 10, refilled at 1 a second: most of 20 quick calls are refused, however slow
    // the machine (20 calls take less than 10 s).
    assert!(refused >= 1, "the small tier refused nothing");
    current.lock().unwrap().rate_limit.tiers[0] = Tier {
        name: "small".into(),
        requests_per_second: 10_000,
        burst: 10_000,
    };
    let report = gateway.reload().await.unwrap();
    assert!(
        report.changed.iter().any(|c| c.contains("rate_limit")),
        "{:?}",
        report.changed
    );
    for i in 0..50 {
        let r = post_with(&rpc, &height, &[("x-api-key", KEY_A)]).await;
        assert!(is_result(&r), "call {i} after the reload: {r:?}");
    }
    // Usage counted every call served, by the key's name, under both configs.
    let (_, _, body) = usage(&gateway.url(), "").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(total(&v, "alpha").0, u64::from(20 - refused) + 50, "{v}");
    gateway.shutdown().await;
}

/// Polls instance 0's usage until `alpha` and `bravo` have exactly `want` calls (each charged
/// one unit: no cache), at most 60 s; then checks that nothing more arrives in a few flushes.
async fn wait_for_totals(fleet: &Fleet, want: (u64, u64)) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    loop {
        let (status, _, body) = usage(&fleet.url(0), "").await;
        if status == 200 {
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["scope"], "fleet", "{v}");
            let (a, b) = (total(&v, "alpha"), total(&v, "bravo"));
            assert!(
                a.0 <= want.0 && b.0 <= want.1,
                "more calls counted than served ({want:?}): {v}"
            );
            if (a.0, b.0) == want {
                assert_eq!((a.1, b.1), (want.0 as f64, want.1 as f64), "{v}");
                break;
            }
        }
        last = format!("{status} {body}");
        assert!(
            Instant::now() < deadline,
            "usage never reached {want:?} calls in 60 s; last answer: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few flushes later (every second), still exact: nothing was added twice. Asked of
    // another instance, whose Redis breaker may still be open after a stall (its usage is then a
    // 503 until its next probe): waited for, as long as it takes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        let (status, _, body) = usage(&fleet.url(1), "").await;
        if status == 200 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "instance 1's usage: {status} {body} (before: {last})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((total(&v, "alpha").0, total(&v, "bravo").0), want, "{v}");
}

/// Calls `n` rounds over every instance, by key A twice and key B once per instance; adds what
/// was served to `served`.
async fn spread(fleet: &Fleet, rounds: usize, served: &mut (u64, u64)) {
    let height = call("platform.getHeight", "{}");
    let url = |i: usize| format!("{}/ext/bc/P", fleet.url(i));
    for _ in 0..rounds {
        for i in 0..fleet.gateways.len() {
            for (key, count) in [(KEY_A, 2), (KEY_B, 1)] {
                for _ in 0..count {
                    let r = post_with(&url(i), &height, &[("x-api-key", key)]).await;
                    assert!(is_result(&r), "instance {i}: {r:?}");
                    if key == KEY_A {
                        served.0 += 1;
                    } else {
                        served.1 += 1;
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_usage_equals_the_calls_served_across_redis_restarts_and_stalls_and_an_instance_restart(
) {
    let mut redis = RedisServer::start_persistent();
    let toml = format!(
        "{}[rate_limit]\non_redis_down = \"local\"\nexpected_instances = 3\n",
        redis.redis_toml()
    );
    let mut fleet = Fleet::start(3, 1, SLOW_CHAIN, &toml, |_, c| {
        keys(c);
        c.cache.enabled = false;
    })
    .await;
    let mut served = (0, 0);
    spread(&fleet, 5, &mut served).await;
    wait_for_totals(&fleet, served).await;
    assert!(
        !redis.keys("snowgate:12345:usage:*").is_empty(),
        "no usage hash in Redis"
    );

    // Redis dies: calls are still served (each instance alone), counted, and wait in memory;
    // usage cannot be read meanwhile (503, not a partial figure).
    redis.kill();
    spread(&fleet, 4, &mut served).await;
    let (status, _, body) = usage(&fleet.url(0), "").await;
    assert_eq!(status, 503, "{body}");
    // It comes back with its data (AOF): the deltas are added once it answers.
    redis.restart();
    spread(&fleet, 2, &mut served).await;
    wait_for_totals(&fleet, served).await;

    // Redis stalls (DEBUG SLEEP) mid-traffic: flushes meanwhile time out or find the breaker
    // open, and the totals are exact once it wakes (a flush Redis applied but never answered:
    // `a_flush_redis_applied_but_never_answered_is_counted_once`).
    let asleep = redis.sleep(Duration::from_millis(1500));
    spread(&fleet, 2, &mut served).await;
    asleep.join().unwrap();
    wait_for_totals(&fleet, served).await;

    // A rolling restart of one instance in the middle of the traffic: its last counts are flushed
    // on its way out, and its successor counts anew.
    spread(&fleet, 2, &mut served).await;
    fleet.restart_one(1).await;
    spread(&fleet, 3, &mut served).await;
    wait_for_totals(&fleet, served).await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_redis_applied_but_never_answered_is_counted_once() {
    use snowgate::config::RedisConfig;
    use snowgate::metrics::Metrics;
    use snowgate::ratelimit::usage::Book;
    use snowgate::shared::Shared;
    use support::redis::Resp;

    let redis = RedisServer::start();
    let metrics = Metrics::new();
    let shared = Shared::new(
        &RedisConfig {
            url: Some(redis.url()),
            ..Default::default()
        },
        &metrics,
    )
    .unwrap();
    shared.check().await;
    assert!(shared.available());
    // The usage keys carry the pool's network: settled, as a gateway does once its nodes answer.
    shared.share_network(12345);
    let book = Book::new(Some(shared), &metrics);
    for _ in 0..5 {
        book.served("alpha", 10);
    }
    // Redis stalls: the flush is written to it and times out here (25 ms); Redis runs it when it
    // wakes, and the stop's flush sends the same batch again until Redis answers.
    let asleep = redis.sleep(Duration::from_millis(1500));
    book.close().await;
    asleep.join().unwrap();
    let timeouts = support::fleet::metric(
        &String::from_utf8(metrics.render()).unwrap(),
        "snowgate_redis_errors_total{kind=\"timeout\",op=\"usage\"}",
    );
    assert!(timeouts >= 1.0, "the flush never timed out");
    let keys = redis.keys("snowgate:12345:usage:*");
    let totals = keys
        .iter()
        .find(|k| !k.ends_with(b":applied"))
        .unwrap_or_else(|| panic!("no usage hash: {keys:?}"));
    let calls = redis.command(&[b"HGET", totals, b"alpha:calls"]);
    let tenths = redis.command(&[b"HGET", totals, b"alpha:tenths"]);
    assert_eq!(calls, Resp::Bulk(Some(b"5".to_vec())), "{keys:?}");
    assert_eq!(tenths, Resp::Bulk(Some(b"50".to_vec())));
    // Another stop's flush finds nothing left to send, and changes nothing.
    book.close().await;
    let calls = redis.command(&[b"HGET", totals, b"alpha:calls"]);
    assert_eq!(calls, Resp::Bulk(Some(b"5".to_vec())));
}

/// The key of this hour's usage totals in `redis` (not its `:applied` ledger), waited for.
async fn hour_key(redis: &RedisServer) -> Vec<u8> {
    let keys = support::fleet::wait_for_keys(redis, "snowgate:*usage:*", 2).await;
    keys.into_iter()
        .find(|k| !k.ends_with(b":applied"))
        .expect("a usage hash")
}

/// `HGET key field` as text (`None`: no such field).
fn hget(redis: &RedisServer, key: &[u8], field: &str) -> Option<String> {
    match redis.command(&[b"HGET", key, field.as_bytes()]) {
        support::redis::Resp::Bulk(v) => v.map(|v| String::from_utf8(v).unwrap()),
        other => panic!("HGET {field}: {other:?}"),
    }
}

/// The fields a usage answer says it skipped.
fn skipped(v: &Value) -> Vec<String> {
    let mut fields: Vec<String> = v["skipped"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["field"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    fields.sort();
    fields
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_field_in_an_hours_usage_is_skipped_and_named_and_every_call_counts_once() {
    let logs = support::logs::capture_logs();
    let redis = RedisServer::start();
    let toml = format!(
        "{}[rate_limit]\non_redis_down = \"local\"\n",
        redis.redis_toml()
    );
    const KEY_C: &str = "usage-test-key-charlie-012345678";
    let fleet = Fleet::start(1, 1, SLOW_CHAIN, &toml, |_, c| {
        keys(c);
        c.rate_limit
            .keys
            .push(KeyQuota::in_tier(KEY_C, "charlie", "gold"));
        c.cache.enabled = false;
    })
    .await;
    let height = call("platform.getHeight", "{}");
    let rpc = format!("{}/ext/bc/P", fleet.url(0));
    let served = |key: &'static str, n: usize| {
        let (rpc, height) = (rpc.clone(), height.clone());
        async move {
            for _ in 0..n {
                let r = post_with(&rpc, &height, &[("x-api-key", key)]).await;
                assert!(is_result(&r), "{r:?}");
            }
        }
    };
    // A third key's call makes this hour's hash; then someone writes two fields that are no
    // counts into it: one of the key being counted (alpha's units), one of another (bravo's calls).
    served(KEY_C, 1).await;
    let key = hour_key(&redis).await;
    redis.command(&[b"HSET", &key, b"alpha:tenths", b"ten"]);
    redis.command(&[b"HSET", &key, b"bravo:calls", b"1.5"]);
    served(KEY_A, 10).await;
    served(KEY_B, 3).await;

    // Every call counted exactly, the fields named, not a 503.
    let deadline = Instant::now() + Duration::from_secs(60);
    let v = loop {
        let (status, _, body) = usage(&fleet.url(0), "").await;
        if status == 200 {
            let v: Value = serde_json::from_str(&body).unwrap();
            let counts = (total(&v, "alpha"), total(&v, "bravo"), total(&v, "charlie"));
            assert!(
                counts.0 .0 <= 10 && counts.1 .0 <= 3 && counts.2 .0 <= 1,
                "more calls counted than served: {v}"
            );
            if counts == ((10, 10.0), (3, 3.0), (1, 1.0))
                && hget(&redis, &key, "alpha:calls").as_deref() == Some("10")
            {
                break v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "usage never showed 10, 3 and 1 calls in 60 s; last answer: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(v["scope"], "fleet", "{v}");
    assert_eq!(skipped(&v), ["alpha:tenths", "bravo:calls"], "{v}");
    // The readable fields are written, exactly, and the foreign ones left as they were.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(hget(&redis, &key, "alpha:calls").as_deref(), Some("10"));
    assert_eq!(hget(&redis, &key, "bravo:tenths").as_deref(), Some("30"));
    assert_eq!(hget(&redis, &key, "charlie:calls").as_deref(), Some("1"));
    assert_eq!(hget(&redis, &key, "alpha:tenths").as_deref(), Some("ten"));
    assert_eq!(hget(&redis, &key, "bravo:calls").as_deref(), Some("1.5"));
    let (_, _, body) = usage(&fleet.url(0), "").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (total(&v, "alpha"), total(&v, "bravo")),
        ((10, 10.0), (3, 3.0)),
        "{v}"
    );
    assert_eq!(
        fleet.metric(0, "snowgate_usage_skipped_fields_total").await,
        2.0
    );
    // Redis stayed in use: a foreign field is no Redis failure.
    assert_eq!(fleet.metric(0, "snowgate_redis_up").await, 1.0);
    let warned = |field: &str| {
        logs.text()
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(&format!("field={field}")))
            .count()
    };
    assert_eq!(warned("alpha:tenths"), 1, "{}", logs.text());
    assert_eq!(warned("bravo:calls"), 1);

    // The operator removes the foreign fields: what this instance held is written, once.
    redis.command(&[b"HDEL", &key, b"alpha:tenths", b"bravo:calls"]);
    let ok = support::eventually(Duration::from_secs(60), || {
        hget(&redis, &key, "alpha:tenths").as_deref() == Some("100")
            && hget(&redis, &key, "bravo:calls").as_deref() == Some("3")
    })
    .await;
    assert!(ok, "the held counts never reached Redis");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, _, body) = usage(&fleet.url(0), "").await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (total(&v, "alpha"), total(&v, "bravo")),
        ((10, 10.0), (3, 3.0)),
        "{v}"
    );
    assert!(skipped(&v).is_empty(), "{v}");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_with_a_foreign_field_that_timed_out_after_redis_applied_it_counts_once() {
    use snowgate::config::RedisConfig;
    use snowgate::metrics::Metrics;
    use snowgate::ratelimit::usage::{Book, Hour};
    use snowgate::shared::Shared;

    let redis = RedisServer::start();
    let metrics = Metrics::new();
    let shared = Shared::new(
        &RedisConfig {
            url: Some(redis.url()),
            ..Default::default()
        },
        &metrics,
    )
    .unwrap();
    shared.check().await;
    assert!(shared.available());
    // The usage keys carry the pool's network: settled, as a gateway does once its nodes answer.
    shared.share_network(12345);
    let book = Book::new(Some(shared), &metrics);
    // A first flush makes the hour's hash; someone writes a field that is no count into it.
    book.served("charlie", 10);
    book.close().await;
    let key = hour_key(&redis).await;
    // (A name of its own: the log is the process's, shared with the other usage tests.)
    redis.command(&[b"HSET", &key, b"delta:calls", b"many"]);
    for _ in 0..5 {
        book.served("alpha", 10);
    }
    for _ in 0..3 {
        book.served("delta", 10);
    }
    // Redis stalls: the flush is written to it and times out here (25 ms); Redis runs it when it
    // wakes, and the stop's flush sends the same batch again until Redis answers.
    let asleep = redis.sleep(Duration::from_millis(1500));
    book.close().await;
    asleep.join().unwrap();
    let timeouts = support::fleet::metric(
        &String::from_utf8(metrics.render()).unwrap(),
        "snowgate_redis_errors_total{kind=\"timeout\",op=\"usage\"}",
    );
    assert!(timeouts >= 1.0, "the flush never timed out");
    book.close().await;
    assert_eq!(hget(&redis, &key, "alpha:calls").as_deref(), Some("5"));
    assert_eq!(hget(&redis, &key, "alpha:tenths").as_deref(), Some("50"));
    assert_eq!(hget(&redis, &key, "delta:tenths").as_deref(), Some("30"));
    assert_eq!(hget(&redis, &key, "delta:calls").as_deref(), Some("many"));
    // Delta's calls, which Redis could not take, are held here and shown: none lost.
    let now = Hour::now();
    let report = book.report(now, now, None).await.unwrap();
    let calls = |name: &str| report.rows.get(&(now, name.to_string())).map(|c| c.calls);
    assert_eq!(
        (calls("alpha"), calls("delta"), calls("charlie")),
        (Some(5), Some(3), Some(1)),
        "{report:?}"
    );
    let fields: Vec<&str> = report
        .skipped
        .iter()
        .flat_map(|s| s.field.as_deref())
        .collect();
    assert_eq!(fields, ["delta:calls"], "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleets_of_two_networks_sharing_a_redis_and_prefix_keep_their_usage_apart() {
    let redis = RedisServer::start();
    let toml = format!(
        "{}[rate_limit]\non_redis_down = \"local\"\n",
        redis.redis_toml()
    );
    let tweak = |_: usize, c: &mut Config| {
        keys(c);
        c.cache.enabled = false;
    };
    let local = Fleet::start(1, 1, SLOW_CHAIN, &toml, tweak).await;
    let fuji = Fleet::start_on_network(5, 1, 1, SLOW_CHAIN, &toml, tweak).await;
    let height = call("platform.getHeight", "{}");
    // Fuji's 3 calls first, read back (a read flushes the reader's counts); then the local
    // network's 5: each reads its own, 3 and 5, not 8.
    for (fleet, n) in [(&fuji, 3), (&local, 5)] {
        for _ in 0..n {
            let r = post_with(
                &format!("{}/ext/bc/P", fleet.url(0)),
                &height,
                &[("x-api-key", KEY_A)],
            )
            .await;
            assert!(is_result(&r), "{r:?}");
        }
        let v = fleet_usage(fleet).await;
        assert_eq!(
            total(&v, "alpha").0,
            n,
            "another network's calls counted: {v}"
        );
    }
    let v = fleet_usage(&fuji).await;
    assert_eq!(
        total(&v, "alpha").0,
        3,
        "another network's calls counted: {v}"
    );
    // Each network's hash and ledger.
    let keys = redis.keys("snowgate:*usage:*");
    assert_eq!(keys.len(), 4, "{keys:?}");
    local.shutdown().await;
    fuji.shutdown().await;
}

/// Instance 0's usage answer (200, waited for while Redis is not in use yet).
async fn fleet_usage(fleet: &Fleet) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _, body) = usage(&fleet.url(0), "").await;
        if status == 200 {
            let v: Value = serde_json::from_str(&body).unwrap();
            if v["scope"] == "fleet" {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no usage answer: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_whose_key_holds_no_hash_is_held_in_memory_named_and_written_once_repaired() {
    use snowgate::config::RedisConfig;
    use snowgate::metrics::Metrics;
    use snowgate::ratelimit::usage::{Book, Hour};
    use snowgate::shared::Shared;

    let redis = RedisServer::start();
    let metrics = Metrics::new();
    let shared = Shared::new(
        &RedisConfig {
            url: Some(redis.url()),
            ..Default::default()
        },
        &metrics,
    )
    .unwrap();
    shared.share_network(12345);
    shared.check().await;
    assert!(shared.available());
    let book = Book::new(Some(shared), &metrics);
    let now = Hour::now();
    let key = format!("snowgate:12345:usage:{{{}}}", now.compact());
    // Someone put a string where this hour's totals go.
    redis.set_raw(key.as_bytes(), b"not usage");
    for _ in 0..4 {
        book.served("alpha", 10);
    }
    book.close().await;
    let report = book.report(now, now, None).await.unwrap();
    assert_eq!(
        report
            .rows
            .get(&(now, "alpha".to_string()))
            .map(|c| c.calls),
        Some(4),
        "{report:?}"
    );
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].field, None);
    assert_eq!(
        redis.get_raw(key.as_bytes()).as_deref(),
        Some(&b"not usage"[..])
    );
    let rendered = String::from_utf8(metrics.render()).unwrap();
    assert_eq!(
        support::fleet::metric(&rendered, "snowgate_usage_skipped_fields_total"),
        1.0
    );
    // A foreign ledger holds the hour too; once both are gone, the held counts land, once.
    redis.command(&[b"DEL", key.as_bytes()]);
    let ledger = format!("{key}:applied");
    redis.command(&[b"RPUSH", ledger.as_bytes(), b"x"]);
    book.close().await;
    assert_eq!(hget(&redis, key.as_bytes(), "alpha:calls"), None);
    redis.command(&[b"DEL", ledger.as_bytes()]);
    book.close().await;
    book.close().await;
    assert_eq!(
        hget(&redis, key.as_bytes(), "alpha:calls").as_deref(),
        Some("4")
    );
    assert_eq!(
        hget(&redis, key.as_bytes(), "alpha:tenths").as_deref(),
        Some("40")
    );
    let report = book.report(now, now, None).await.unwrap();
    assert_eq!(report.rows[&(now, "alpha".to_string())].calls, 4);
    assert!(report.skipped.is_empty(), "{report:?}");
}
