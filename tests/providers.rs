//! A pool of one's own nodes and paid providers (issue 26): a provider that throttles (HTTP 429
//! with `Retry-After`) is held, not ejected, and no client call fails for it; a fallback costs
//! one check call per its own interval while a primary serves, and is checked at once when none
//! does; a provider that exposes only the P-chain joins and is sent no `info.*` call.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use snowgate::config::upstream::Api;
use snowgate::config::Role;
use snowgate::devnode::Faults;
use support::window::ask;
use support::{call, eventually, fleet::metric, get_text, post, Cluster, ADMIN_KEY};

/// The uncached call the load sends (every one goes to a node).
fn sample() -> String {
    call("platform.sampleValidators", r#"{"size":"1"}"#)
}

fn upstream(cluster: &Cluster, name: &str) -> snowgate::upstream::UpstreamStatus {
    cluster
        .gateway
        .pool()
        .status()
        .upstreams
        .into_iter()
        .find(|u| u.name == name)
        .unwrap()
}

async fn healthy(cluster: &Cluster) {
    support::every_node_takes_traffic(&cluster.gateway).await;
}

/// `n` calls from `tasks` clients at once; the statuses and bodies that were not a result.
async fn load(url: &str, tasks: usize, n: usize) -> Vec<String> {
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let url = url.to_string();
        handles.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            for _ in 0..n {
                let r = post(&url, &sample()).await;
                if r.status != 200 || r.json().get("result").is_none() {
                    failed.push(format!("{} {}", r.status, r.body));
                }
            }
            failed
        }));
    }
    let mut failed = Vec::new();
    for h in handles {
        failed.extend(h.await.unwrap());
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_node_is_held_not_ejected_and_no_client_call_fails() {
    let cluster = Cluster::start(3, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        // Longer than the test, however slow the machine: the hold never ends during it.
        c.health.max_hold_off = Duration::from_secs(600);
        // Every first attempt is the throttler's (the only primary), whatever the balancer.
        c.upstreams[1].role = Role::Fallback;
        c.upstreams[2].role = Role::Fallback;
    })
    .await;
    healthy_primaries(&cluster).await;
    for name in ["node-1", "node-2"] {
        assert!(eventually(Duration::from_secs(60), || upstream(&cluster, name).standby).await);
    }
    let throttler = &cluster.nodes[0];
    throttler.control().set_faults(Faults {
        throttle_rate: 1.0,
        retry_after: Some(Duration::from_secs(600)),
        ..Faults::default()
    });
    let url = format!("{}/ext/bc/P", cluster.url());
    // Under load: every call is answered, by the other two.
    let failed = load(&url, 8, 25).await;
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    let seen = throttler.control().throttled_count();
    assert!(seen >= 1, "the throttler was never asked");
    // Held, never ejected: healthy, takes no traffic, and says why.
    let node = upstream(&cluster, "node-0");
    assert!(
        node.healthy && node.throttled && !node.takes_traffic,
        "{node:?}"
    );
    // No call, and no health check, reaches it during its hold.
    for _ in 0..5 {
        cluster.gateway.pool().check_once(0).await;
    }
    let failed = load(&url, 4, 25).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(
        throttler.control().throttled_count(),
        seen,
        "asked during its hold"
    );
    assert_eq!(throttler.control().total_calls(), 0, "a call reached it");
    assert!(upstream(&cluster, "node-0").healthy);
    // One state change, one gauge; the public sees the state, not the node's words.
    let (_, _, metrics) = ask(
        "GET",
        &format!("{}/metrics", cluster.url()),
        Some(ADMIN_KEY),
    )
    .await;
    let m = |series: &str| metric(&metrics, series);
    assert_eq!(
        m(
            r#"snowgate_upstream_state_changes_total{reason="retry_after",to="throttled",upstream="node-0"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(m(r#"snowgate_upstream_throttled{upstream="node-0"}"#), 1.0);
    let health = get_text(&format!("{}/ext/health", cluster.url())).await;
    assert!(health.contains(r#""throttled":true"#), "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_node_throttles_the_client_gets_503_with_the_soonest_retry_after() {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
    })
    .await;
    healthy(&cluster).await;
    let node = &cluster.nodes[0];
    node.control().set_faults(Faults {
        throttle_rate: 1.0,
        retry_after: Some(Duration::from_secs(2)),
        ..Faults::default()
    });
    let url = format!("{}/ext/bc/P", cluster.url());
    let r = post(&url, &sample()).await;
    assert_eq!(r.status, 503, "{}", r.body);
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "Retry-After {wait}");
    assert!(r.body.contains("throttling"), "{}", r.body);
    assert!(r.body.contains("-32603"), "{}", r.body);
    // Refused at once while on hold: the node is not asked again.
    let asked = node.control().throttled_count();
    let r = post(&url, &sample()).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(node.control().throttled_count(), asked);
    // The hold ends: it serves again (never ejected, so at once).
    node.control().set_faults(Faults::default());
    let mut served = false;
    for _ in 0..600 {
        if post(&url, &sample()).await.status == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "{:?}", cluster.gateway.pool().status());
    assert!(upstream(&cluster, "node-0").healthy);
}

/// Calls until node `want` serves one (within `limit`); true when it does.
async fn until_served_by(cluster: &Cluster, want: usize, limit: Duration) -> bool {
    let url = format!("{}/ext/bc/P", cluster.url());
    let count = || {
        cluster.nodes[want]
            .control()
            .call_count("platform.sampleValidators")
    };
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        let before = count();
        let _ = post(&url, &sample()).await;
        if count() > before {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A fallback (a metered provider) is checked at its own cadence while a primary serves: one call
/// (`platform.getHeight`) per interval, its identity not asked again; never more, however long
/// the test takes, since no timer fires early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_on_standby_costs_one_call_per_its_interval() {
    let every = Duration::from_secs(2);
    let cluster = Cluster::start(3, Duration::from_secs(60), |c| {
        c.upstreams[2].role = Role::Fallback;
        c.upstreams[2].health_interval = Some(every);
    })
    .await;
    let started = std::time::Instant::now();
    let fallback = cluster.nodes[2].control();
    let primary = cluster.nodes[0].control();
    // Until the primaries have been checked at least 25 times (5 s of their 200 ms cadence).
    assert!(
        eventually(Duration::from_secs(120), || primary
            .call_count("platform.getHeight")
            >= 25)
        .await
    );
    let elapsed = started.elapsed();
    let checks = fallback.call_count("platform.getHeight");
    let allowed = elapsed.as_millis() / every.as_millis() + 1;
    assert!(
        u128::from(checks) <= allowed,
        "{checks} checks in {elapsed:?} at one per {every:?}"
    );
    assert!(checks >= 1, "never checked in {elapsed:?}");
    assert_eq!(fallback.total_calls(), checks, "{:?}", fallback.calls());
    let status = upstream(&cluster, "node-2");
    assert!(
        status.standby && !status.takes_traffic && status.healthy,
        "{status:?}"
    );
    let health = get_text(&format!("{}/ext/health", cluster.url())).await;
    assert!(health.contains(r#""standby":true"#), "{health}");
}

/// When the primaries stop serving, a fallback is checked at once (not at its own cadence, an
/// hour here) and takes the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_is_checked_at_once_when_the_primaries_stop_serving() {
    let cluster = Cluster::start(3, Duration::from_secs(60), |c| {
        c.upstreams[2].role = Role::Fallback;
        c.upstreams[2].health_interval = Some(Duration::from_secs(3600));
    })
    .await;
    healthy_primaries(&cluster).await;
    let fallback = cluster.nodes[2].control();
    let before = fallback.call_count("platform.getHeight");
    assert!(until_served_by(&cluster, 0, Duration::from_secs(30)).await);
    assert_eq!(fallback.call_count("platform.sampleValidators"), 0);
    for node in &cluster.nodes[..2] {
        node.control().set_bootstrapping(true);
    }
    // The primaries' checks take them out; the fallback is checked then, not an hour later.
    let pool = cluster.gateway.pool().clone();
    let primaries_out = || {
        pool.status()
            .upstreams
            .iter()
            .all(|u| u.role.is_some() || !u.healthy)
    };
    assert!(eventually(Duration::from_secs(60), primaries_out).await);
    assert!(
        eventually(Duration::from_secs(60), || fallback
            .call_count("platform.getHeight")
            > before)
        .await,
        "the fallback was not checked when the primaries stopped serving"
    );
    assert!(
        until_served_by(&cluster, 2, Duration::from_secs(60)).await,
        "{:?}",
        cluster.gateway.pool().status()
    );
    assert!(!upstream(&cluster, "node-2").standby);
    // A primary back: standby again.
    cluster.nodes[0].control().set_bootstrapping(false);
    assert!(until_served_by(&cluster, 0, Duration::from_secs(60)).await);
    assert!(
        eventually(Duration::from_secs(60), || upstream(&cluster, "node-2")
            .standby)
        .await
    );
}

async fn healthy_primaries(cluster: &Cluster) {
    let pool = cluster.gateway.pool().clone();
    let up = || {
        pool.status()
            .upstreams
            .iter()
            .filter(|u| u.role.is_none())
            .all(|u| u.takes_traffic)
    };
    assert!(
        eventually(Duration::from_secs(60), up).await,
        "{:?}",
        pool.status()
    );
}

/// A provider that exposes only the P-chain (`apis = ["platform"]`, 404 on `/ext/info`): its
/// network is recognised from its staking asset, it serves `platform.*` and is sent no `info.*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_p_chain_only_provider_joins_and_gets_no_info_call() {
    let cluster = Cluster::start(2, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        c.upstreams[1].apis = vec![Api::Platform];
    })
    .await;
    let provider = cluster.nodes[1].control();
    provider.update_faults(|f| f.no_info_api = true);
    support::every_node_takes_traffic(&cluster.gateway).await;
    // Recognised by its staking asset once the info node's is known (a check or two).
    assert!(
        eventually(Duration::from_secs(60), || upstream(&cluster, "node-1")
            .network_id
            == Some(12345))
        .await,
        "{:?}",
        upstream(&cluster, "node-1")
    );
    assert!(until_served_by(&cluster, 1, Duration::from_secs(30)).await);
    let info = format!("{}/ext/info", cluster.url());
    for _ in 0..40 {
        let r = post(&info, &call("info.getNodeVersion", "{}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.json().get("result").is_some(), "{}", r.body);
    }
    let calls = provider.calls();
    assert!(
        calls.keys().all(|m| !m.starts_with("info.")),
        "an info call reached the P-chain-only provider: {calls:?}"
    );
    // Checked by the P-chain alone.
    assert!(
        eventually(Duration::from_secs(60), || provider
            .call_count("platform.getHeight")
            > 0)
        .await
    );
    // With the only info node down, an info call fails as with no node; the P-chain still serves.
    cluster.nodes[0].control().set_bootstrapping(true);
    assert!(
        eventually(Duration::from_secs(60), || !upstream(&cluster, "node-0")
            .takes_traffic)
        .await
    );
    let r = post(&info, &call("info.getNodeVersion", "{}")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("no healthy upstream"), "{}", r.body);
    let r = post(&format!("{}/ext/bc/P", cluster.url()), &sample()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(provider.calls().keys().all(|m| !m.starts_with("info.")));
}

/// The per-method breaker: a node that keeps failing one method stops getting it for a while,
/// keeps getting the others, and no client call fails for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failing_one_method_cools_for_it_and_keeps_the_others() {
    const BROKEN: &str = "platform.getCurrentSupply";
    let cluster = Cluster::start(2, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        c.health.method_failures = 3;
        // Longer than the test, however slow the machine.
        c.health.method_cooldown = Duration::from_secs(600);
        // The node is never ejected for it: its other methods keep answering in between.
        c.health.passive_failures = 1000;
    })
    .await;
    healthy(&cluster).await;
    let broken = cluster.nodes[0].control();
    broken.update_faults(|f| f.failing_methods = vec![BROKEN.to_string()]);
    let url = format!("{}/ext/bc/P", cluster.url());
    let supply = call(BROKEN, "{}");
    // Its failures, made on it whatever the balancer would choose: an admin's calls pinned to it.
    let auth = format!("Bearer {ADMIN_KEY}");
    let pinned = [
        ("authorization", auth.as_str()),
        ("x-snowgate-upstream", "node-0"),
    ];
    for _ in 0..3 {
        let r = support::post_with(&url, &supply, &pinned).await;
        assert_ne!(r.status, 200, "{}", r.body);
    }
    assert_eq!(broken.call_count(BROKEN), 3);
    // Cooled: no client call fails, and the method does not reach it again.
    let mut failed = Vec::new();
    for _ in 0..100 {
        for body in [&supply, &sample()] {
            let r = post(&url, body).await;
            if r.status != 200 || r.json().get("result").is_none() {
                failed.push(r.body);
            }
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(broken.call_count(BROKEN), 3, "{:?}", broken.calls());
    let node = upstream(&cluster, "node-0");
    assert!(node.healthy && node.takes_traffic, "{node:?}");
    assert_eq!(node.cooling_methods, [BROKEN], "{node:?}");
    let (_, _, metrics) = ask(
        "GET",
        &format!("{}/metrics", cluster.url()),
        Some(ADMIN_KEY),
    )
    .await;
    let series = format!(
        r#"snowgate_upstream_method_cooldowns_total{{method="{BROKEN}",upstream="node-0"}}"#
    );
    assert_eq!(metric(&metrics, &series), 1.0, "{metrics}");
    // With the only other node gone, the method is tried on the cooling node anyway: the breaker
    // moves a method, it never refuses one.
    cluster.nodes[1].control().set_bootstrapping(true);
    assert!(
        eventually(Duration::from_secs(60), || !upstream(&cluster, "node-1")
            .takes_traffic)
        .await
    );
    let calls = broken.call_count(BROKEN);
    let _ = post(&url, &supply).await;
    assert_eq!(broken.call_count(BROKEN), calls + 1);
}

/// Hedged reads: a read whose first node has not answered after `hedge_after` goes to a second
/// node too; the first answer wins and the other attempt is cancelled; a side-effect method is
/// never sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_is_hedged_and_the_loser_cancelled_a_side_effect_never() {
    let cluster = Cluster::start(2, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        c.upstream.hedge_after = Some(Duration::from_millis(50));
        c.upstream.hedge_max_ratio = 1.0;
        c.upstream.request_timeout = Duration::from_secs(1);
        // node-0 is every call's first choice: the only primary.
        c.upstreams[1].role = Role::Fallback;
        // Checked once, at start: its hang (below) would take it out, however fast the calls.
        c.health.interval = Duration::from_secs(3600);
        c.health.timeout = Duration::from_secs(1);
    })
    .await;
    healthy_primaries(&cluster).await;
    assert!(
        eventually(Duration::from_secs(60), || upstream(&cluster, "node-1")
            .standby)
        .await
    );
    let slow = cluster.nodes[0].control();
    // Its answers never come (until the test ends): only a hedge can answer.
    slow.update_faults(|f| f.hang = true);
    let url = format!("{}/ext/bc/P", cluster.url());
    for _ in 0..3 {
        let r = post(&url, &sample()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        // The loser was dropped when the winner answered: nothing of it is in flight.
        assert_eq!(upstream(&cluster, "node-0").in_flight, 0);
    }
    assert_eq!(
        cluster.nodes[1]
            .control()
            .call_count("platform.sampleValidators"),
        3
    );
    let (_, _, metrics) = ask(
        "GET",
        &format!("{}/metrics", cluster.url()),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(
        metric(&metrics, r#"snowgate_hedges_total{outcome="sent"}"#),
        3.0
    );
    assert_eq!(
        metric(&metrics, r#"snowgate_hedges_total{outcome="won"}"#),
        3.0
    );
    // Never cancelled: the hung node's health is not held against it.
    assert!(upstream(&cluster, "node-0").healthy);
    // A side effect goes to one node, once: the first node's timeout is the client's answer.
    let tx = call("platform.issueTx", r#"{"tx":"0x00","encoding":"hex"}"#);
    let r = post(&url, &tx).await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(cluster.nodes[1].control().call_count("platform.issueTx"), 0);
    slow.update_faults(|f| f.hang = false);
}

/// With no budget (`hedge_max_ratio = 0`), a slow read is never hedged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_budget_no_read_is_hedged() {
    let cluster = Cluster::start(2, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        c.upstream.hedge_after = Some(Duration::from_millis(50));
        c.upstream.hedge_max_ratio = 0.0;
        c.upstream.request_timeout = Duration::from_millis(500);
        c.upstream.max_attempts = 1;
        c.upstreams[1].role = Role::Fallback;
        c.health.interval = Duration::from_secs(3600);
        c.health.timeout = Duration::from_secs(1);
    })
    .await;
    healthy_primaries(&cluster).await;
    assert!(
        eventually(Duration::from_secs(60), || upstream(&cluster, "node-1")
            .standby)
        .await
    );
    cluster.nodes[0].control().update_faults(|f| f.hang = true);
    let r = post(&format!("{}/ext/bc/P", cluster.url()), &sample()).await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(
        cluster.nodes[1]
            .control()
            .call_count("platform.sampleValidators"),
        0
    );
    let (_, _, metrics) = ask(
        "GET",
        &format!("{}/metrics", cluster.url()),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(
        metric(&metrics, r#"snowgate_hedges_total{outcome="no_budget"}"#),
        1.0
    );
    cluster.nodes[0].control().update_faults(|f| f.hang = false);
}

/// `info.upgrades` depends on the node's release (a v1.15 Fuji node schedules Helicon, a v1.14
/// one says 9999): cached per release, never while the nodes taking traffic run several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_depends_on_the_release_is_cached_per_release() {
    use snowgate::methods::NodeVersion;
    let (_network, nodes) = support::devnodes(5, 2, Duration::from_secs(60)).await;
    let mut config = snowgate::Config::default();
    support::test_gateway(&mut config, &nodes);
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    support::every_node_takes_traffic(&gateway).await;
    let url = format!("{}/ext/info", gateway.url());
    let upgrades = call("info.upgrades", "{}");
    let helicon = |r: &support::Reply| {
        r.json()["result"]["heliconTime"]
            .as_str()
            .map(str::to_string)
    };
    let first = post(&url, &upgrades).await;
    let again = post(&url, &upgrades).await;
    assert_eq!(again.header("x-cache"), Some("HIT"), "one release: cached");
    assert_eq!(helicon(&first).as_deref(), Some("9999-12-01T00:00:00Z"));
    assert_eq!(helicon(&again), helicon(&first));
    let pool = gateway.pool().clone();
    let runs = |name: &str, version: &str| {
        pool.status()
            .upstreams
            .iter()
            .any(|u| u.name == name && u.takes_traffic && u.version.as_deref() == Some(version))
    };
    // An upgrade is a restart: the node leaves (a check fails), and comes back on the new release.
    let upgrade = |i: usize| {
        let (node, pool) = (&nodes[i], pool.clone());
        async move {
            node.control().go_down().await;
            let name = format!("node-{i}");
            let failed = || {
                pool.status()
                    .upstreams
                    .iter()
                    .any(|u| u.name == name && u.last_error.is_some())
            };
            assert!(eventually(Duration::from_secs(60), failed).await);
            node.control().set_version(NodeVersion::new(1, 15, 0));
            node.control().come_up().await.unwrap();
        }
    };
    upgrade(1).await;
    assert!(
        eventually(Duration::from_secs(60), || runs(
            "node-1",
            "avalanchego/1.15.0"
        ))
        .await,
        "{:?}",
        pool.status()
    );
    assert!(runs("node-0", "avalanchego/1.14.2"));
    // Mixed: every answer is its node's own, none from the cache.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let r = post(&url, &upgrades).await;
        assert_eq!(r.header("x-cache"), Some("BYPASS"), "{}", r.body);
        seen.insert(helicon(&r).unwrap_or_default());
    }
    assert!(
        seen.iter()
            .all(|h| h == "9999-12-01T00:00:00Z" || h == "2026-07-28T15:00:00Z"),
        "{seen:?}"
    );
    // One release again, the new one: its own answer, cached under it.
    upgrade(0).await;
    assert!(
        eventually(Duration::from_secs(60), || runs(
            "node-0",
            "avalanchego/1.15.0"
        ) && runs(
            "node-1",
            "avalanchego/1.15.0"
        ))
        .await,
        "{:?}",
        pool.status()
    );
    let fresh = post(&url, &upgrades).await;
    assert_eq!(fresh.header("x-cache"), Some("MISS"), "{}", fresh.body);
    assert_eq!(helicon(&fresh).as_deref(), Some("2026-07-28T15:00:00Z"));
    let again = post(&url, &upgrades).await;
    assert_eq!(again.header("x-cache"), Some("HIT"));
    assert_eq!(helicon(&again), helicon(&fresh));
    gateway.shutdown().await;
}

/// Seconding (a second node asked in the background before an answer is kept) is bounded: a
/// client sending many distinct misses, from however many addresses of its network, holds at most
/// its share (`cache::CLIENT_SECONDINGS`) of such calls, however slow the second node, so another
/// client's answers are still seconded (and kept) beside its flood; and all clients together hold
/// at most `cache::MAX_SECONDINGS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_secondings_are_bounded_per_client_and_in_all() {
    let (share, limit) = (
        snowgate::cache::CLIENT_SECONDINGS,
        snowgate::cache::MAX_SECONDINGS,
    );
    let cluster = Cluster::start(2, Duration::from_secs(60), |c| {
        c.cache.verify = snowgate::config::Verify::Quorum;
        // The second node: a fallback that never answers the method (until the test ends), and
        // passes its checks.
        c.upstreams[1].role = Role::Fallback;
        c.upstream.request_timeout = Duration::from_secs(60);
        c.limits.request_deadline = Duration::from_secs(60);
    })
    .await;
    healthy_primaries(&cluster).await;
    assert!(
        eventually(Duration::from_secs(60), || upstream(&cluster, "node-1")
            .standby)
        .await
    );
    cluster.nodes[1]
        .control()
        .update_faults(|f| f.hanging_methods = vec!["platform.getBlockByHeight".into()]);
    let url = format!("{}/ext/bc/P", cluster.url());
    // Clients told apart by their addresses (127.0.0.0/8 is all this host's); a client's share
    // is its network's (a /24), so `from(n, host)` is host `host` of network 127.n.0.0/24.
    let from = |net: u8, host: u8| {
        reqwest::Client::builder()
            .local_address(Some(std::net::IpAddr::from([127, net, 0, host])))
            .build()
            .unwrap()
    };
    let mut height = 0;
    let mut misses = |client: reqwest::Client, n: usize| {
        let bodies: Vec<String> = (0..n)
            .map(|_| {
                height += 1;
                call(
                    "platform.getBlockByHeight",
                    &format!(r#"{{"height":"{height}","encoding":"json"}}"#),
                )
            })
            .collect();
        let url = url.clone();
        async move {
            for body in bodies {
                let r = client.post(&url).header("content-type", "application/json");
                let r = r.body(body).send().await.unwrap();
                assert_eq!(r.status(), 200);
            }
        }
    };
    let held = || upstream(&cluster, "node-1").in_flight;
    // One client's flood from a dozen addresses of its network: every miss answered at once, its
    // secondings held at its network's share.
    for host in 1..=12 {
        misses(from(2, host), 10).await;
    }
    assert!(
        eventually(Duration::from_secs(60), || held() == share).await,
        "{}",
        held()
    );
    // Another client's misses beside it are seconded all the same.
    misses(from(3, 1), share).await;
    assert!(
        eventually(Duration::from_secs(60), || held() == 2 * share).await,
        "{}",
        held()
    );
    // Enough clients fill the whole bound, and no more.
    for net in 4..(4 + (limit / share) as u8) {
        misses(from(net, 1), share + 2).await;
    }
    assert!(
        eventually(Duration::from_secs(60), || held() == limit).await,
        "{}",
        held()
    );
    assert_eq!(held(), limit);
    assert!(upstream(&cluster, "node-1").healthy);
    cluster.nodes[1]
        .control()
        .update_faults(|f| f.hanging_methods.clear());
}

/// Each client hedges from its own share of the budget, and pays for its hedges: two addresses
/// whose calls are slow on every node (half a second on the first, never on the others) hedge at most the ratio of their own calls, and
/// an honest client's slow calls meanwhile are hedged as if it were alone (every second call at a
/// ratio of 0.5: 5 of 10), each hedge charged to its quota (the method's cost again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hedges_from_its_own_share_and_pays_for_its_hedges() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const ATTACK: &str = "platform.getCurrentValidators";
    let cluster = Cluster::start(3, Duration::from_secs(60), |c| {
        c.cache.enabled = false;
        c.upstream.hedge_after = Some(Duration::from_millis(20));
        c.upstream.hedge_max_ratio = 0.5;
        c.upstream.request_timeout = Duration::from_secs(2);
        c.upstream.max_attempts = 1;
        // node-0 is every call's first choice; a hedge goes to a fallback.
        c.upstreams[1].role = Role::Fallback;
        c.upstreams[2].role = Role::Fallback;
        c.health.interval = Duration::from_secs(3600);
        c.health.timeout = Duration::from_secs(5);
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 5000;
        c.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    healthy_primaries(&cluster).await;
    for name in ["node-1", "node-2"] {
        assert!(eventually(Duration::from_secs(60), || upstream(&cluster, name).standby).await);
    }
    // Every call is slow on node-0 (half a second); on the others, the attack's never answer and
    // the honest client's are fast: a hedge answers those.
    for (i, node) in cluster.nodes.iter().enumerate() {
        node.control().update_faults(|f| {
            if i == 0 {
                f.slow_rate = 1.0;
                f.slow_latency = Duration::from_millis(500);
            } else {
                f.hanging_methods = vec![ATTACK.into()];
            }
        });
        node.control().reset_calls();
    }
    let url = format!("{}/ext/bc/P", cluster.url());
    let metrics_url = format!("{}/metrics", cluster.url());
    let hedges =
        |text: &str, o: &str| metric(text, &format!(r#"snowgate_hedges_total{{outcome="{o}"}}"#));
    let stop = Arc::new(AtomicBool::new(false));
    let attack_calls = Arc::new(AtomicU64::new(0));
    let attackers: Vec<_> = (0..32u32)
        .map(|t| {
            let (url, stop, calls) = (url.clone(), stop.clone(), attack_calls.clone());
            tokio::spawn(async move {
                let who = format!("198.51.100.{}", 1 + t % 2);
                for _ in 0..50 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let body = call(ATTACK, "{}");
                    support::post_with(&url, &body, &[("x-forwarded-for", &who)]).await;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // The attack is under way: it has asked for hedges.
    let start = std::time::Instant::now();
    loop {
        let (_, _, text) = ask("GET", &metrics_url, Some(ADMIN_KEY)).await;
        if hedges(&text, "sent") + hedges(&text, "client_share") + hedges(&text, "no_budget")
            >= 16.0
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no hedge asked for"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let honest = [("x-forwarded-for", "203.0.113.7")];
    for i in 0..10 {
        let r = support::post_with(&url, &sample(), &honest).await;
        assert_eq!(r.status, 200, "honest call {i}: {}", r.body);
    }
    let fallbacks = &cluster.nodes[1..];
    let honest_hedges: u64 = fallbacks
        .iter()
        .map(|n| n.control().call_count("platform.sampleValidators"))
        .sum();
    let page = support::get_with(&format!("{}/snowgate/quota", cluster.url()), &honest).await;
    stop.store(true, Ordering::Relaxed);
    for node in &cluster.nodes {
        node.control().update_faults(|f| *f = Faults::default());
    }
    for a in attackers {
        a.await.unwrap();
    }
    let (_, _, text) = ask("GET", &metrics_url, Some(ADMIN_KEY)).await;
    let calls = attack_calls.load(Ordering::Relaxed);
    let attack_hedges = hedges(&text, "sent") as u64 - honest_hedges;
    eprintln!(
        "honest: 10 slow calls, {honest_hedges} hedged; attack: {calls} calls, {} node requests \
         ({:.2} a call); hedges: sent {}, client_share {}, no_budget {}",
        calls + attack_hedges,
        (calls + attack_hedges) as f64 / calls.max(1) as f64,
        hedges(&text, "sent"),
        hedges(&text, "client_share"),
        hedges(&text, "no_budget"),
    );
    assert_eq!(
        honest_hedges, 5,
        "the honest client's hedges, as alone: 5 of 10"
    );
    // The attack hedged at most half its calls (its own deposits).
    assert!(
        attack_hedges * 2 <= calls + 2,
        "{attack_hedges} hedges for {calls} calls"
    );
    assert!(hedges(&text, "client_share") > 0.0);
    // The honest client paid for its 10 calls and 5 hedges (cost 2 each): 30 units, less what
    // came back meanwhile (1 a second) and the quota page's own price.
    let remaining = page.json()["remaining"].as_u64().unwrap();
    assert!(
        remaining <= 5000 - 30 + 20,
        "{remaining}: the hedges were not charged"
    );
}
