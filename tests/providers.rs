//! A pool of one's own nodes and paid providers (issue 26): a provider that throttles (HTTP 429
//! with `Retry-After`) is held, not ejected, and no client call fails for it.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use snowgate::devnode::Faults;
use support::window::ask;
use support::{call, fleet::metric, get_text, post, Cluster, ADMIN_KEY};

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
    })
    .await;
    healthy(&cluster).await;
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
