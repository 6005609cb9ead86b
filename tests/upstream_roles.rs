//! `role = "fallback"` and `weight`: a fallback (an RPC provider paid per call, say) takes
//! traffic only while no primary can, and gives it back when a primary returns.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use snowgate::config::Role;
use support::Cluster;

const METHOD: &str = "platform.sampleValidators";

async fn sample(cluster: &Cluster) -> support::Reply {
    support::post(
        &format!("{}/ext/bc/P", cluster.gateway.url()),
        &support::call(METHOD, r#"{"size":1}"#),
    )
    .await
}

/// Calls until the pool sends them to node `want` (at most `limit`); true when it does.
async fn until_served_by(cluster: &Cluster, want: usize, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let before = cluster.nodes[want].control().call_count(METHOD);
        let r = sample(cluster).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if cluster.nodes[want].control().call_count(METHOD) > before {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_takes_traffic_only_while_every_primary_is_down() {
    let cluster = Cluster::start(3, Duration::from_secs(3600), |c| {
        c.upstreams[2].role = Role::Fallback;
    })
    .await;
    let count = |i: usize| cluster.nodes[i].control().call_count(METHOD);
    for _ in 0..40 {
        assert_eq!(sample(&cluster).await.status, 200);
    }
    assert_eq!(
        count(2),
        0,
        "the fallback was called while primaries were up"
    );
    assert!(
        count(0) > 0 && count(1) > 0,
        "both primaries share the calls"
    );
    let health: serde_json::Value = support::client()
        .get(format!("{}/ext/health", cluster.gateway.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["upstreams"][2]["role"], "fallback", "{health}");
    assert!(health["upstreams"][0].get("role").is_none(), "{health}");
    // One primary down: the other takes everything, still not the fallback.
    cluster.nodes[0].control().set_bootstrapping(true);
    assert!(until_served_by(&cluster, 1, Duration::from_secs(5)).await);
    let before = count(2);
    for _ in 0..20 {
        assert_eq!(sample(&cluster).await.status, 200);
    }
    assert_eq!(count(2), before, "a primary was still up");
    // Every primary down: the fallback serves.
    cluster.nodes[1].control().set_bootstrapping(true);
    assert!(
        until_served_by(&cluster, 2, Duration::from_secs(5)).await,
        "the fallback never took over"
    );
    // A primary back: the fallback is left again.
    cluster.nodes[0].control().set_bootstrapping(false);
    assert!(until_served_by(&cluster, 0, Duration::from_secs(5)).await);
    let before = count(2);
    for _ in 0..20 {
        assert_eq!(sample(&cluster).await.status, 200);
    }
    assert_eq!(
        count(2),
        before,
        "the fallback kept traffic after a primary returned"
    );
}
