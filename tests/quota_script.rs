//! Global quotas against a real `redis-server`: the GCRA script (`src/ratelimit/gcra.lua`) through
//! the same call the limiter makes, and the leases of two limiters ("instances") sharing one
//! Redis. The HTTP tests across gateway instances are `tests/fleet.rs`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;
use snowgate::call::ClientId;
use snowgate::config::{KeyQuota, OnRedisDown, RateLimitConfig, RedisConfig};
use snowgate::error::ProxyError;
use snowgate::methods::Registry;
use snowgate::metrics::Metrics;
use snowgate::ratelimit::global::{self, Answer, Ask, GlobalQuota};
use snowgate::ratelimit::{Admission, Limiter};
use snowgate::shared::Shared;
use support::fleet::metric;
use support::redis::{RedisServer, Resp};

/// Generous: these tests are about decisions, not about `[redis] timeout` (the fleet tests are).
const TIMEOUT: Duration = Duration::from_millis(500);

async fn connect(redis: &RedisServer, metrics: &Metrics) -> Arc<Shared> {
    let config = RedisConfig {
        url: Some(redis.url()),
        timeout: TIMEOUT,
        ..Default::default()
    };
    let shared = Shared::new(&config, metrics).unwrap();
    // Quota keys carry the pool's network: settled, as a gateway does once its nodes answer.
    shared.share_network(12345);
    shared.check().await;
    assert!(
        shared.available(),
        "redis at {} did not answer",
        redis.url()
    );
    shared
}

/// A call of `need` units, and no lease.
fn take(need: u64) -> Ask {
    Ask {
        need,
        ..Ask::default()
    }
}

/// The script's answer for `key`, as the limiter asks it.
async fn ask(shared: &Shared, key: &str, quota: &GlobalQuota, ask: Ask) -> Answer {
    let script = Script::new(global::SCRIPT);
    global::run(shared, &script, key, quota, ask).await.unwrap()
}

#[tokio::test]
async fn the_script_grants_at_most_the_burst_then_the_rate() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    // 100 cost units/s = 1000 units/s (1 ms per unit), a burst of 1000 cost units = 10,000
    // units: ten seconds of units come back before the bucket is full again, so a machine that
    // stalls between two asks loses none of them.
    let q = GlobalQuota::new(100, 1000);
    let asked = Instant::now();
    let first = ask(&shared, "t:a", &q, take(10_000)).await;
    // The burst was decided between `asked` and now: units come back from then on.
    let burst_returned = Instant::now();
    assert_eq!(first.granted, 10_000, "a new client gets the burst");
    // No more than what came back since (a unit a millisecond: on a busy machine the second ask
    // may come a few milliseconds later, and find those).
    let again = ask(&shared, "t:a", &q, take(1)).await.granted;
    let since = asked.elapsed().as_millis() as u64;
    assert!(
        again <= since,
        "{again} more granted {since} ms after the burst"
    );
    let start = Instant::now();
    let mut granted = 0;
    let mut refused_last: Option<(Instant, u64)> = None;
    // For 300 ms, take 5 units whenever they have come back: the rate and no more.
    while start.elapsed() < Duration::from_millis(300) {
        let sent = Instant::now();
        let got = ask(&shared, "t:a", &q, take(5)).await.granted;
        if got == 0 {
            refused_last = Some((sent, granted));
        }
        granted += got;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // At most what came back since the burst was decided (before `burst_returned`).
    let came_back = burst_returned.elapsed().as_millis() as u64;
    assert!(
        granted + again <= came_back + 5,
        "{granted} units in {came_back} ms"
    );
    // Never withheld: an ask is refused only when less than its 5 units had come back. What had
    // come back by the time it was sent is at least the time since the burst was decided, so an
    // ask refused with more than that unspent was withheld. (A machine too slow to keep up asks
    // for less than the rate and is never refused: nothing to check then.)
    if let Some((sent, granted_before)) = refused_last {
        let by_then = (sent - burst_returned).as_millis() as u64;
        assert!(
            by_then < granted_before + again + 5 + 2,
            "the rate was withheld: an ask sent {by_then} ms after the burst was refused with \
             {granted_before} units granted"
        );
    }
}

#[tokio::test]
async fn retry_after_matches_the_wait() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    // 10 cost units/s = 100 units/s: 10 ms per unit; burst 5 cost units = 50 units.
    let q = GlobalQuota::new(10, 5);
    let began = Instant::now();
    assert_eq!(ask(&shared, "t:w", &q, take(50)).await.granted, 50);
    // Redis decided the refusal between these two instants.
    let sent = Instant::now();
    let refused = ask(&shared, "t:w", &q, take(20)).await;
    let answered = Instant::now();
    assert_eq!(refused.granted, 0);
    // 20 units at 10 ms each, less what came back between the burst and the refusal (at most
    // the time from before the first ask to after the second).
    let wait = Duration::from_micros(refused.wait_us);
    let passed = answered - began;
    assert!(
        wait <= Duration::from_millis(200) && wait + passed >= Duration::from_millis(200),
        "{wait:?} after {passed:?}"
    );
    // Before the wait is over: still refused. The wait ends no earlier than `sent + wait`; an ask
    // answered before then was decided before then (on a machine too slow for that, the ask
    // proves nothing and is not judged).
    tokio::time::sleep_until((sent + wait.mul_f64(0.5)).into()).await;
    let early = ask(&shared, "t:w", &q, take(20)).await;
    if Instant::now() < sent + wait {
        assert_eq!(early.granted, 0);
    }
    // Once it is over (counted from the latest instant Redis could have decided): granted.
    tokio::time::sleep_until((answered + wait).into()).await;
    assert_eq!(ask(&shared, "t:w", &q, take(20)).await.granted, 20);
}

#[tokio::test]
async fn returned_units_come_back_and_never_give_more_than_the_burst() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    // 1 cost unit/s = 10 units/s: nothing comes back by time within this test.
    let q = GlobalQuota::new(1, 10);
    // A call of 10 and a lease of what is spare beyond half the burst: 40.
    let first = ask(
        &shared,
        "t:r",
        &q,
        Ask {
            need: 10,
            lease: 1_000,
            ..Ask::default()
        },
    )
    .await;
    assert_eq!((first.granted, first.leased, first.remaining), (10, 40, 90));
    // 50 of room and 40 on lease: 90 for a call, no more.
    assert_eq!(ask(&shared, "t:r", &q, take(91)).await.granted, 0);
    let give = |units| Ask {
        give: units,
        ..Ask::default()
    };
    let back = ask(&shared, "t:r", &q, give(30)).await;
    assert_eq!((back.granted, back.wait_us, back.remaining), (0, 0, 90));
    assert_eq!(ask(&shared, "t:r", &q, take(80)).await.granted, 80);
    // Giving back more than is out on lease (10 left) moves the TAT back by those 10 only.
    ask(&shared, "t:r", &q, give(10_000)).await;
    assert_eq!(ask(&shared, "t:r", &q, take(10)).await.granted, 10);
    assert_eq!(ask(&shared, "t:r", &q, take(1)).await.granted, 0);
}

/// The units out on lease are granted to a call that finds no room, and what their holder then
/// spends of them is charged when it reports it.
#[tokio::test]
async fn a_call_is_granted_from_the_units_out_on_lease_and_a_double_spend_is_repaid() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    let q = GlobalQuota::new(1, 10); // 100 units; nothing comes back within the test.
    let a = Ask {
        need: 10,
        lease: 1_000,
        ..Ask::default()
    };
    assert_eq!(
        ask(&shared, "t:o", &q, a).await.leased,
        40,
        "instance A's lease"
    );
    // Another instance spends the 50 of room, then 40 more from A's lease.
    assert_eq!(ask(&shared, "t:o", &q, take(50)).await.granted, 50);
    let borrowed = ask(&shared, "t:o", &q, take(40)).await;
    assert_eq!((borrowed.granted, borrowed.remaining), (40, 0));
    let over = ask(&shared, "t:o", &q, take(10)).await;
    assert_eq!(over.granted, 0, "the budget is spent");
    assert!((900_000..=1_000_000).contains(&over.wait_us), "{over:?}");
    // A spends its lease too and says so: 40 units spent twice, charged now.
    let spent = Ask {
        spent: 40,
        ..Ask::default()
    };
    ask(&shared, "t:o", &q, spent).await;
    let later = ask(&shared, "t:o", &q, take(10)).await;
    assert!(
        (4_900_000..=5_000_000).contains(&later.wait_us),
        "{later:?}"
    );
}

/// Never more than half a burst out on lease, however many instances ask.
#[tokio::test]
async fn no_more_than_half_the_burst_is_ever_out_on_lease() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    let q = GlobalQuota::new(1, 100); // 1000 units
    let refill = Ask {
        lease: 250,
        ..Ask::default()
    };
    let mut out = 0;
    for _ in 0..10 {
        out += ask(&shared, "t:half", &q, refill).await.leased;
    }
    assert_eq!(out, 500);
}

#[tokio::test]
async fn two_keys_are_independent() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    let q = GlobalQuota::new(1, 10);
    assert_eq!(ask(&shared, "t:one", &q, take(100)).await.granted, 100);
    assert_eq!(ask(&shared, "t:one", &q, take(10)).await.granted, 0);
    assert_eq!(ask(&shared, "t:two", &q, take(100)).await.granted, 100);
}

#[tokio::test]
async fn the_key_expires_once_the_client_is_idle() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    // 100 units/s: 30 units put the TAT 300 ms ahead.
    let q = GlobalQuota::new(10, 10);
    assert_eq!(ask(&shared, "t:ttl", &q, take(30)).await.granted, 30);
    let Resp::Int(pttl) = redis.command(&[b"PTTL", b"t:ttl"]) else {
        panic!("PTTL did not answer an integer");
    };
    assert!((250..=302).contains(&pttl), "PTTL {pttl} ms");
    let start = Instant::now();
    while redis.command(&[b"EXISTS", b"t:ttl"]) != Resp::Int(0) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the key outlived its TAT"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Once gone, the client is new: a full burst.
    assert_eq!(ask(&shared, "t:ttl", &q, take(100)).await.granted, 100);
}

fn config(rps: u32, burst: u32, instances: u32, on_down: OnRedisDown) -> RateLimitConfig {
    RateLimitConfig {
        requests_per_second: rps,
        burst,
        expected_instances: instances,
        on_redis_down: on_down,
        cached_cost_factor: 1.0,
        keys: vec![KeyQuota::new("rate-limit-key-0123456789abcdef", rps, burst)],
        ..Default::default()
    }
}

/// A limiter with global quotas, as a gateway builds it, and its metrics.
async fn instance(redis: &RedisServer, config: &RateLimitConfig) -> (Arc<Limiter>, Metrics) {
    let metrics = Metrics::new();
    let shared = connect(redis, &metrics).await;
    let limiter = Limiter::new_global(config, &Registry::builtin(), &metrics, shared);
    (limiter, metrics)
}

async fn decide(limiter: &Arc<Limiter>, client: &ClientId, units: u32) -> Result<(), ProxyError> {
    match limiter.admit(client, units) {
        Admission::Decided(d) => d,
        Admission::Pending(d) => d.await,
    }
}

fn ip(text: &str) -> ClientId {
    ClientId::Ip(text.parse::<IpAddr>().unwrap())
}

fn render(metrics: &Metrics) -> String {
    String::from_utf8(metrics.render()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_sharing_one_redis_allow_the_global_quota() {
    let redis = RedisServer::start();
    // 200 calls of cost 1 per second, a burst of 20, for a fleet of two.
    let cfg = config(200, 20, 2, OnRedisDown::Local);
    let (a, metrics_a) = instance(&redis, &cfg).await;
    let (b, _) = instance(&redis, &cfg).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    a.spawn_pruner(stop_rx.clone());
    b.spawn_pruner(stop_rx);
    let client = ip("192.0.2.7");
    let units = a.units(1, false);
    // Offer about 1200 calls/s (six times the quota), alternating instances, for 3 s.
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let (mut allowed, mut refused, mut rounds) = (0u32, 0u32, 0u32);
    while start.elapsed() < Duration::from_secs(3) && rounds < 1_000 {
        tick.tick().await;
        rounds += 1;
        for limiter in [&a, &b, &a, &b, &a, &b] {
            match decide(limiter, &client, units).await {
                Ok(()) => allowed += 1,
                Err(ProxyError::RateLimited { .. }) => refused += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = stop.send(true);
    let quota = 200.0 * elapsed + 20.0;
    let off = (f64::from(allowed) - quota) / quota;
    eprintln!(
        "two instances: {allowed} allowed, {refused} refused in {elapsed:.2} s; quota {quota:.0} \
         ({:+.1} %)",
        off * 100.0
    );
    assert!(
        off.abs() <= 0.10,
        "allowed {allowed} calls (refused {refused}) in {elapsed:.2} s; the global quota is \
         {quota:.0} ({:+.1} %)",
        off * 100.0
    );
    let text = render(&metrics_a);
    assert!(
        metric(&text, "snowgate_quota_leases_total{result=\"granted\"}") > 0.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "snowgate_rate_limit_fallback_total{decision=\"allowed\"}"
        ),
        0.0,
        "Redis was up: nothing was decided without it"
    );
}

/// The TAT the script stored for `key` (microseconds of Redis's clock; the value is `"TAT OUT"`).
fn tat(redis: &RedisServer, key: &str) -> u64 {
    match redis.command(&[b"GET", key.as_bytes()]) {
        Resp::Bulk(Some(v)) => String::from_utf8(v)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap(),
        other => panic!("GET {key}: {other:?}"),
    }
}

#[tokio::test]
async fn an_idle_lease_goes_back_to_redis() {
    let redis = RedisServer::start();
    // 100 cost units/s = 1000 units/s (1 ms per unit), burst 1000 cost units: for a fleet of two,
    // leases of half a second (under a quarter of the burst), 500 units.
    let cfg = config(100, 1_000, 2, OnRedisDown::Local);
    let (a, metrics_a) = instance(&redis, &cfg).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    a.spawn_pruner(stop_rx);
    // One call on A: A now holds a lease of 500 units besides the call's 10.
    decide(&a, &ip("2001:db8:1:2::"), 10).await.unwrap();
    // Another instance takes all the rest (the TAT is then seconds ahead and stays put).
    let key = "snowgate:12345:q:ip:2001:db8:1:2::";
    let q = GlobalQuota::new(100, 1_000);
    let rest = ask(a_shared(&redis).await.as_ref(), key, &q, take(9_000)).await;
    assert!(rest.granted >= 9_000, "{rest:?}");
    let before = tat(&redis, key);
    // A goes idle: within a few seconds its lease is back in Redis.
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let text = render(&metrics_a);
        if metric(&text, "snowgate_quota_leases_total{result=\"returned\"}") >= 1.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "A never gave its lease back"
        );
    }
    let _ = stop.send(true);
    // The TAT moved back by exactly the 500 units (500 ms) A held.
    assert_eq!(before - tat(&redis, key), 500_000);
}

async fn a_shared(redis: &RedisServer) -> Arc<Shared> {
    connect(redis, &Metrics::new()).await
}

#[tokio::test]
async fn a_rate_limit_key_is_kept_under_its_hash_never_itself() {
    let redis = RedisServer::start();
    let cfg = config(10, 10, 1, OnRedisDown::Local);
    let (a, _) = instance(&redis, &cfg).await;
    decide(&a, &ClientId::Key(0), 10).await.unwrap();
    let keys = redis.keys("*");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = String::from_utf8(keys[0].clone()).unwrap();
    let hex = key.strip_prefix("snowgate:12345:q:key:").unwrap();
    assert_eq!(hex.len(), 32);
    assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()));
    assert!(!key.contains("rate-limit-key"));
}

/// Kills `redis` and makes calls until the breaker has opened (at most a few failed calls).
async fn kill_and_open(redis: &mut RedisServer, limiter: &Arc<Limiter>) {
    redis.kill();
    for i in 0..10 {
        let _ = decide(limiter, &ip(&format!("198.51.100.{i}")), 10).await;
    }
}

#[tokio::test]
async fn redis_killed_local_fallback_allows_this_instances_share() {
    let mut redis = RedisServer::start();
    // A burst of 40 for a fleet of two: 20 here while Redis is away; 1 per second refills.
    let cfg = config(1, 40, 2, OnRedisDown::Local);
    let (a, metrics) = instance(&redis, &cfg).await;
    kill_and_open(&mut redis, &a).await;
    let before = metric(
        &render(&metrics),
        "snowgate_rate_limit_fallback_total{decision=\"allowed\"}",
    );
    assert!(before >= 10.0, "the killed Redis was not noticed");
    let client = ip("192.0.2.9");
    let mut allowed = 0;
    for _ in 0..100 {
        match decide(&a, &client, 10).await {
            Ok(()) => allowed += 1,
            Err(ProxyError::RateLimited { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!((20..=21).contains(&allowed), "{allowed} allowed");
    // Refused calls too are decided at the share, never waiting.
    assert!(matches!(
        a.charge_refused(&client),
        Err(ProxyError::RateLimited { .. })
    ));
    let text = render(&metrics);
    assert_eq!(
        metric(
            &text,
            "snowgate_rate_limit_fallback_total{decision=\"allowed\"}"
        ),
        before + f64::from(allowed)
    );
    assert!(
        metric(
            &text,
            "snowgate_rate_limit_fallback_total{decision=\"denied\"}"
        ) >= f64::from(100 - allowed)
    );
}

#[tokio::test]
async fn redis_killed_deny_refuses_with_quota_unavailable() {
    let mut redis = RedisServer::start();
    let cfg = config(100, 100, 2, OnRedisDown::Deny);
    let (a, metrics) = instance(&redis, &cfg).await;
    redis.kill();
    let client = ip("192.0.2.10");
    for _ in 0..10 {
        assert!(matches!(
            decide(&a, &client, 10).await,
            Err(ProxyError::QuotaUnavailable)
        ));
    }
    assert!(matches!(
        a.charge_refused(&client),
        Err(ProxyError::QuotaUnavailable)
    ));
    assert_eq!(
        metric(
            &render(&metrics),
            "snowgate_rate_limit_fallback_total{decision=\"denied\"}"
        ),
        11.0
    );
}

#[tokio::test]
async fn a_gateway_with_global_quotas_keeps_its_clients_quota_in_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    // getNetworkID made to cost 10 of a burst of 100: ten calls fit, hits or not, and the
    // eleventh waits 10 s for its units (at 1 unit a second): however slow the machine, the calls
    // below are made long before any comes back.
    let cluster = support::Cluster::start(1, Duration::from_secs(1), |c| {
        c.redis = Some(RedisConfig {
            url: Some(url),
            timeout: TIMEOUT,
            ..Default::default()
        });
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 100;
        c.rate_limit.cached_cost_factor = 1.0;
        c.methods.insert(
            "info.getNetworkID".into(),
            snowgate::methods::MethodOverride {
                cost: Some(10),
                ..Default::default()
            },
        );
    })
    .await;
    let body = support::call("info.getNetworkID", "{}");
    let began = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..15 {
        let reply = support::post(&format!("{}/ext/info", cluster.url()), &body).await;
        if reply.status == 429 {
            assert!(reply.header("retry-after").is_some(), "{reply:?}");
            assert_eq!(reply.json()["error"]["code"], -32005);
        }
        statuses.push(reply.status);
    }
    // Never more than the burst (and what came back meanwhile, at 10 s a call); at most one of
    // the ten it pays for refused early, when a lease's refill is still on its way (the lease
    // arithmetic is not exact at the start: issue 27).
    let ok = statuses.iter().filter(|s| **s == 200).count() as u64;
    let refilled = began.elapsed().as_secs() / 10;
    assert!((9..=10 + refilled).contains(&ok), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // (A call snowgate refuses itself is charged too: `refused_calls_on_two_instances_are_charged_
    // to_one_global_quota`. It was asserted here as a 429 right after these, which holds only
    // while no lease refill lands in between: on a loaded machine one did, 1 run in 6.)
    // The quota lives in Redis, under the client's address.
    assert_eq!(
        redis.keys("snowgate:12345:q:*"),
        vec![b"snowgate:12345:q:ip:127.0.0.1".to_vec()]
    );
    cluster.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_quotas_on_a_redis_cluster() {
    let cluster = support::redis::RedisCluster::start();
    let cfg = config(10, 10, 2, OnRedisDown::Deny);
    let mut instances = Vec::new();
    for _ in 0..2 {
        let metrics = Metrics::new();
        let redis = RedisConfig {
            cluster: cluster.urls(),
            timeout: TIMEOUT,
            ..Default::default()
        };
        let shared = Shared::new(&redis, &metrics).unwrap();
        shared.share_network(12345);
        shared.check().await;
        assert!(shared.available(), "the cluster did not answer");
        instances.push(Limiter::new_global(
            &cfg,
            &Registry::builtin(),
            &metrics,
            shared,
        ));
    }
    // Clients whose keys land on different masters; each gets its own burst of 10 calls across
    // both instances, never more (deny: nothing is decided without the cluster). A refill still
    // in flight when the loop ends may leave one call's lease on each instance unspent.
    for n in 0..6 {
        let client = ip(&format!("203.0.113.{n}"));
        let mut allowed = 0;
        for i in 0..30 {
            match decide(&instances[i % 2], &client, 10).await {
                Ok(()) => allowed += 1,
                Err(ProxyError::RateLimited { .. }) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!((8..=11).contains(&allowed), "client {n}: {allowed}");
    }
    let keys = cluster.keys("snowgate:12345:q:ip:*");
    assert_eq!(keys.len(), 6, "{keys:?}");
    let holding = cluster
        .masters()
        .iter()
        .filter(|m| m.command(&[b"DBSIZE"]) != Resp::Int(0))
        .count();
    assert!(holding >= 2, "the clients' keys all landed on one master");
}

#[tokio::test]
async fn the_lease_table_is_bounded_and_clients_beyond_share_their_networks_quota() {
    let redis = RedisServer::start();
    let mut cfg = config(10, 10, 1, OnRedisDown::Local);
    cfg.max_clients = 3;
    let (a, _) = instance(&redis, &cfg).await;
    // 27 clients beyond the table share their /24's quota (four clients' worth: 40 calls).
    for n in 0..30u8 {
        let client = ClientId::Ip(IpAddr::from([198, 51, 100, n]));
        decide(&a, &client, 10).await.unwrap();
    }
    // Three more networks fill the networks' table; the fourth's clients share the overflow.
    for net in 1..=4u8 {
        let client = ClientId::Ip(IpAddr::from([203, 0, net, 1]));
        decide(&a, &client, 10).await.unwrap();
    }
    assert!(a.tracked() <= 3, "{} clients tracked", a.tracked());
    assert!(a.networks() <= 3, "{} networks tracked", a.networks());
    let mut keys: Vec<String> = redis
        .keys("snowgate:12345:q:*")
        .into_iter()
        .map(|k| String::from_utf8(k).unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "snowgate:12345:q:ip:198.51.100.0",
            "snowgate:12345:q:ip:198.51.100.1",
            "snowgate:12345:q:ip:198.51.100.2",
            "snowgate:12345:q:net:198.51.100.0/24",
            "snowgate:12345:q:net:203.0.1.0/24",
            "snowgate:12345:q:net:203.0.2.0/24",
            "snowgate:12345:q:overflow",
        ],
        "three clients, three networks and the overflow"
    );
}

#[tokio::test]
async fn free_calls_take_no_lease() {
    let redis = RedisServer::start();
    let (a, metrics) = instance(&redis, &config(10, 10, 1, OnRedisDown::Local)).await;
    let client = ip("192.0.2.20");
    for _ in 0..100 {
        decide(&a, &client, 0).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(redis.keys("*").is_empty(), "a free call took a lease");
    let text = render(&metrics);
    assert_eq!(
        metric(&text, "snowgate_quota_leases_total{result=\"granted\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_quota_key_that_is_not_ours_counts_as_new_or_spent_and_is_overwritten() {
    let redis = RedisServer::start();
    let shared = connect(&redis, &Metrics::new()).await;
    let q = GlobalQuota::new(10, 10);
    // Another type, and a string that is no number: a new client.
    redis.command(&[b"HSET", b"t:hash", b"f", b"v"]);
    redis.set_raw(b"t:text", b"\xffnot a number");
    for key in ["t:hash", "t:text"] {
        assert_eq!(ask(&shared, key, &q, take(100)).await.granted, 100);
        let stored = tat(&redis, key);
        assert!(stored > 1_600_000_000_000_000, "{key}: {stored}");
    }
    // A TAT far beyond anything the script writes: at most seven bursts spent past the first
    // (what forced charges may reach), not a client locked out for years, and the key expires
    // within a minute.
    redis.set_raw(b"t:far", b"99999999999999999999 7");
    let refused = ask(&shared, "t:far", &q, take(10)).await;
    assert_eq!(refused.granted, 0);
    assert!(refused.wait_us <= 11_000_000, "{refused:?}");
    let Resp::Int(pttl) = redis.command(&[b"PTTL", b"t:far"]) else {
        panic!("PTTL did not answer an integer");
    };
    assert!((0..=60_002).contains(&pttl), "PTTL {pttl} ms");
}

#[tokio::test]
async fn an_instance_that_stops_gives_its_leases_back() {
    let redis = RedisServer::start();
    let cfg = config(100, 1_000, 2, OnRedisDown::Local);
    let (a, metrics_a) = instance(&redis, &cfg).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    a.spawn_pruner(stop_rx);
    // A holds a lease of 500 units; another instance takes the rest.
    decide(&a, &ip("192.0.2.30"), 10).await.unwrap();
    let key = "snowgate:12345:q:ip:192.0.2.30";
    let q = GlobalQuota::new(100, 1_000);
    assert!(
        ask(a_shared(&redis).await.as_ref(), key, &q, take(9_000))
            .await
            .granted
            >= 9_000
    );
    let before = tat(&redis, key);
    // A stops while its lease is fresh (not idle): it gives it back on the way out.
    let _ = stop.send(true);
    let start = Instant::now();
    while metric(
        &render(&metrics_a),
        "snowgate_quota_leases_total{result=\"returned\"}",
    ) < 1.0
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the stopped instance kept its lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(before - tat(&redis, key), 500_000);
}

#[tokio::test]
async fn refused_calls_on_two_instances_are_charged_to_one_global_quota() {
    let redis = RedisServer::start();
    // Configured as if alone (expected_instances = 1): each instance's share is the whole burst
    // of 20, so only Redis keeps two instances to one quota.
    let cfg = config(1, 20, 1, OnRedisDown::Local);
    let (a, _) = instance(&redis, &cfg).await;
    let (b, _) = instance(&redis, &cfg).await;
    let client = ip("192.0.2.40");
    let mut allowed = 0;
    let began = Instant::now();
    for i in 0..40 {
        let limiter = if i % 2 == 0 { &a } else { &b };
        if limiter.charge_refused(&client).is_ok() {
            allowed += 1;
        }
        // Refused calls never wait on Redis; give the background debits time to land.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The burst, plus what came back at 1 a second while the calls went on (a slow machine
    // takes longer over them), plus the few an instance allows before its debits land.
    let refilled = began.elapsed().as_secs() + 1;
    assert!(
        (18..=23 + refilled).contains(&allowed),
        "{allowed} refused calls allowed across two instances in {:?}; the quota is 20",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleets_of_two_networks_sharing_a_redis_and_prefix_have_their_own_quotas() {
    use support::fleet::{Fleet, SLOW_CHAIN};
    let redis = RedisServer::start();
    let toml = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"500ms\"\n\n[rate_limit]\nexpected_instances = 1\n",
        redis.url()
    );
    // As above: ten calls of 10 units fit a burst of 100, and units come back at 1 a second.
    let tweak = |_: usize, c: &mut snowgate::config::Config| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 100;
        c.rate_limit.cached_cost_factor = 1.0;
        c.methods.insert(
            "info.getNetworkID".into(),
            snowgate::methods::MethodOverride {
                cost: Some(10),
                ..Default::default()
            },
        );
    };
    let fuji = Fleet::start_on_network(5, 1, 1, SLOW_CHAIN, &toml, tweak).await;
    let local = Fleet::start(1, 1, SLOW_CHAIN, &toml, tweak).await;
    let body = support::call("info.getNetworkID", "{}");
    let calls = |fleet: &Fleet, n: usize| {
        let (url, body) = (format!("{}/ext/info", fleet.url(0)), body.clone());
        async move {
            let mut statuses = Vec::new();
            for _ in 0..n {
                statuses.push(support::post(&url, &body).await.status);
            }
            statuses
        }
    };
    // The client spends its whole budget on Fuji's fleet...
    let spent = calls(&fuji, 15).await;
    assert_eq!(spent.last(), Some(&429), "{spent:?}");
    // ...and still has its own on the local network's.
    let statuses = calls(&local, 8).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let mut keys = redis.keys("snowgate:*q:*");
    keys.sort();
    assert_eq!(
        keys,
        [
            b"snowgate:12345:q:ip:127.0.0.1".to_vec(),
            b"snowgate:5:q:ip:127.0.0.1".to_vec()
        ]
    );
    fuji.shutdown().await;
    local.shutdown().await;
}
