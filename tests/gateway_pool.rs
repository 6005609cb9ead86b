//! The pool: health checks, lag, bootstrapping, failover, timeouts, garbage answers and the rule
//! that a side-effecting call is sent twice only when its bytes never left.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::*;

fn no_cache(cfg: &mut snowgate::Config) {
    cfg.cache.enabled = false;
}

async fn takes_traffic(c: &Cluster, name: &str) -> bool {
    c.gateway
        .pool()
        .status()
        .upstreams
        .iter()
        .any(|u| u.name == name && u.takes_traffic)
}

async fn wait_traffic(c: &Cluster, name: &str, want: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if takes_traffic(c, name).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{name} takes_traffic never became {want}: {:?}",
        c.gateway.pool().status()
    );
}

#[tokio::test]
async fn a_node_killed_mid_load_fails_no_client_read() {
    let c = Arc::new(Cluster::start(3, Duration::from_millis(200), no_cache).await);
    let url = format!("{}/ext/info", c.url());
    // Each worker reads until 60 reads after the kill (at most 5,000): the kill lands mid-load
    // however fast the reads are.
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let url = url.clone();
        let killed = killed.clone();
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut failures = Vec::new();
            let mut after_kill = 0;
            for i in 0..5_000 {
                if killed.load(std::sync::atomic::Ordering::Relaxed) {
                    after_kill += 1;
                    if after_kill > 60 {
                        break;
                    }
                }
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(format!(
                        r#"{{"jsonrpc":"2.0","id":{i},"method":"info.getNetworkID"}}"#
                    ))
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let body = r.text().await.unwrap();
                if status != 200 || !body.contains("\"result\"") {
                    failures.push(format!("worker {worker} call {i}: {status} {body}"));
                }
            }
            failures
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    c.nodes[0].control().go_down().await;
    killed.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(!takes_traffic(&c, "node-0").await);
}

#[tokio::test]
async fn a_lagging_node_gets_no_traffic_until_it_catches_up() {
    let c = Cluster::start(3, Duration::from_millis(100), no_cache).await;
    c.nodes[1].control().freeze();
    wait_traffic(&c, "node-1", false).await;
    c.nodes[1].control().reset_calls();
    for _ in 0..30 {
        let r = post(
            &format!("{}/ext/info", c.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert!(r.body.contains("result"), "{}", r.body);
    }
    assert_eq!(c.nodes[1].control().call_count("info.getNetworkID"), 0);
    c.nodes[1].control().unfreeze();
    wait_traffic(&c, "node-1", true).await;
    let mut reached = false;
    for _ in 0..60 {
        post(
            &format!("{}/ext/info", c.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        if c.nodes[1].control().call_count("info.getNetworkID") > 0 {
            reached = true;
            break;
        }
    }
    assert!(reached, "the node that caught up never got traffic again");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_bootstrapping_node_gets_no_traffic() {
    let c = Cluster::start(2, Duration::from_millis(200), no_cache).await;
    c.nodes[0].control().set_bootstrapping(true);
    wait_traffic(&c, "node-0", false).await;
    c.nodes[0].control().reset_calls();
    for _ in 0..20 {
        let r = post(
            &format!("{}/ext/bc/P", c.url()),
            &call("platform.getHeight", "{}"),
        )
        .await;
        assert!(r.body.contains("result"), "{}", r.body);
        // (Not a method the pool asks itself: a node that went out is asked its network again.)
        let r = post(
            &format!("{}/ext/info", c.url()),
            &call("info.getTxFee", "{}"),
        )
        .await;
        assert!(r.body.contains("result"), "{}", r.body);
    }
    assert_eq!(c.nodes[0].control().call_count("info.getTxFee"), 0);
    let status = c.gateway.pool().status();
    let node0 = status
        .upstreams
        .iter()
        .find(|u| u.name == "node-0")
        .unwrap();
    assert!(!node0.bootstrapped);
    c.nodes[0].control().set_bootstrapping(false);
    wait_traffic(&c, "node-0", true).await;
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn server_errors_and_dropped_connections_fail_over() {
    let c = Cluster::start(3, Duration::from_secs(60), |cfg| {
        no_cache(cfg);
        // Keep the active checks out of the way: only passive signals act here.
        cfg.health.interval = Duration::from_secs(60);
    })
    .await;
    c.nodes[0].control().update_faults(|f| f.error_rate = 1.0);
    c.nodes[1].control().update_faults(|f| f.drop_rate = 1.0);
    // A node is taken out after `health.passive_failures` (5) failures in a row. The balancer
    // prefers the node with the lowest latency estimate, failures included, so a faulty node
    // that fails slower than the healthy one answers may not be tried again: slow the healthy
    // one, so every call tries the faulty ones first. Call until both are out (at most 200
    // calls); every call is answered meanwhile.
    c.nodes[2]
        .control()
        .update_faults(|f| f.latency = Duration::from_millis(20));
    for i in 0..200 {
        if !takes_traffic(&c, "node-0").await && !takes_traffic(&c, "node-1").await {
            break;
        }
        let r = post(
            &format!("{}/ext/info", c.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
        assert!(r.body.contains("result"), "call {i}: {}", r.body);
    }
    // Both faulty nodes were taken out by what real requests saw.
    assert!(!takes_traffic(&c, "node-0").await);
    assert!(
        !takes_traffic(&c, "node-1").await,
        "{}",
        String::from_utf8(c.gateway.metrics().render()).unwrap()
    );
    let m = c.gateway.metrics().render();
    let m = String::from_utf8(m).unwrap();
    assert!(m.contains("outcome=\"http_5xx\""), "{m}");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_hanging_node_times_out_with_504() {
    let c = Cluster::start(1, Duration::from_secs(60), |cfg| {
        no_cache(cfg);
        cfg.health.interval = Duration::from_secs(60);
        cfg.upstream.request_timeout = Duration::from_millis(300);
        cfg.limits.request_deadline = Duration::from_secs(1);
    })
    .await;
    c.nodes[0].control().update_faults(|f| f.hang = true);
    let started = std::time::Instant::now();
    let r = post(
        &format!("{}/ext/info", c.url()),
        r#"{"jsonrpc":"2.0","id":"t","method":"info.getNetworkID"}"#,
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32603);
    assert_eq!(r.json()["id"], "t");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A timeout alone does not take the node out (a slow call is not the node's fault)...
    assert!(takes_traffic(&c, "node-0").await);
    // ...its failing health checks do (run here by hand: the interval is 60 s).
    for _ in 0..2 {
        c.gateway.pool().check_once(0).await;
    }
    // The node was taken out: the next call has nowhere to go.
    let r = post(
        &format!("{}/ext/info", c.url()),
        &call("info.getNetworkID", "{}"),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    c.nodes[0].control().update_faults(|f| f.hang = false);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn issue_tx_is_resent_only_when_it_never_left() {
    // Node 0 is down (connection refused): the tx is sent to node 1 instead.
    let c = Cluster::start(2, Duration::from_secs(60), |cfg| {
        cfg.health.interval = Duration::from_secs(60);
    })
    .await;
    c.nodes[0].control().go_down().await;
    for i in 0..6 {
        let r = post(
            &format!("{}/ext/bc/P", c.url()),
            &call("platform.issueTx", r#"{"tx":"0x00"}"#),
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
    }
    assert_eq!(c.nodes[1].control().call_count("platform.issueTx"), 6);
    c.gateway.shutdown().await;

    // Both nodes drop the connection after reading the request: the tx may have been received,
    // so it is never sent again.
    let c = Cluster::start(2, Duration::from_secs(60), |cfg| {
        cfg.health.interval = Duration::from_secs(60);
    })
    .await;
    for n in &c.nodes {
        n.control().update_faults(|f| f.drop_rate = 1.0);
    }
    let r = post(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.issueTx", r#"{"tx":"0x00"}"#),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.body);
    // The devnode drops the connection before dispatch, so count the gateway's attempts.
    let metrics = String::from_utf8(c.gateway.metrics().render()).unwrap();
    let attempts: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("snowgate_upstream_requests_total{"))
        .filter(|l| !l.contains("outcome=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        attempts, 1.0,
        "issueTx was sent {attempts} times:\n{metrics}"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn garbage_from_a_node_is_a_502_and_a_failure() {
    // A node that passes health checks but answers anything else with another request's id.
    let addr = scripted_node(10, |_, _| {
        r#"{"jsonrpc":"2.0","result":{"networkID":"1"},"id":424242}"#.to_string()
    })
    .await;
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.cache.enabled = false;
    config.health.interval = Duration::from_secs(60);
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "liar".into(),
        url: format!("http://{addr}"),
        ..Default::default()
    }];
    let gw = snowgate::Gateway::start(config).await.unwrap();
    // Taken out after `health.passive_failures` (5) bad answers in a row, not after one.
    for i in 1..=5 {
        let r = post(
            &format!("{}/ext/info", gw.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert_eq!(r.status, 502, "{}", r.body);
        assert_eq!(r.json()["error"]["code"], -32603);
        assert!(!r.body.contains("424242"), "{}", r.body);
        let status = gw.pool().status();
        assert_eq!(status.upstreams[0].healthy, i < 5, "call {i}: {status:?}");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn a_height_goes_only_to_nodes_that_reached_it() {
    let c = Cluster::start(2, Duration::from_millis(100), |cfg| {
        no_cache(cfg);
        cfg.health.interval = Duration::from_millis(50);
        cfg.health.timeout = Duration::from_millis(50);
        // Keep the lagging node in the pool: only height-aware routing keeps it out.
        cfg.health.max_lag_blocks = 1000;
    })
    .await;
    c.nodes[1].control().freeze();
    let frozen_at = c.nodes[1].control().height();
    let target = frozen_at + 5;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = c.gateway.pool().status();
        let h0 = status.upstreams[0].height.unwrap_or(0);
        if h0 >= target && status.upstreams[1].takes_traffic {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.nodes[1].control().reset_calls();
    for _ in 0..20 {
        let r = post(
            &format!("{}/ext/bc/P", c.url()),
            &call(
                "platform.getBlockByHeight",
                &format!(r#"{{"height":{target}}}"#),
            ),
        )
        .await;
        assert!(r.json()["result"]["block"].is_string(), "{}", r.body);
    }
    assert_eq!(
        c.nodes[1].control().call_count("platform.getBlockByHeight"),
        0
    );
    // Heights it has are still served by it too.
    let mut reached = false;
    for _ in 0..40 {
        post(
            &format!("{}/ext/bc/P", c.url()),
            &call(
                "platform.getBlockByHeight",
                &format!(r#"{{"height":{frozen_at}}}"#),
            ),
        )
        .await;
        if c.nodes[1].control().call_count("platform.getBlockByHeight") > 0 {
            reached = true;
            break;
        }
    }
    assert!(reached, "the lagging node got none of the heights it has");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_not_found_below_the_best_height_is_retried_elsewhere() {
    use std::sync::atomic::{AtomicU64, Ordering};
    // A node that claims the same height as the real one but has lost its blocks.
    let real = snowgate::devnode::DevNode::spawn(snowgate::devnode::DevNodeConfig {
        block_interval: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let height = real.control().height();
    let asked = Arc::new(AtomicU64::new(0));
    let counter = asked.clone();
    let addr = scripted_node(height, move |_, v| {
        counter.fetch_add(1, Ordering::Relaxed);
        let (id, h) = (&v["id"], &v["params"]["height"]);
        format!(r#"{{"jsonrpc":"2.0","error":{{"code":-32000,"message":"couldn't get block at height {h}: not found","data":null}},"id":{id}}}"#)
    })
    .await;
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.cache.enabled = false;
    config.rate_limit.enabled = false;
    config.upstreams = vec![
        snowgate::config::UpstreamConfig {
            name: "amnesiac".into(),
            url: format!("http://{addr}"),
            ..Default::default()
        },
        snowgate::config::UpstreamConfig {
            name: "real".into(),
            url: real.url(),
            ..Default::default()
        },
    ];
    let gw = snowgate::Gateway::start(config).await.unwrap();
    for h in (1..=20).map(|i| height - 10 * i) {
        let r = post(
            &format!("{}/ext/bc/P", gw.url()),
            &call("platform.getBlockByHeight", &format!(r#"{{"height":{h}}}"#)),
        )
        .await;
        assert!(
            r.json()["result"]["block"].is_string(),
            "height {h}: {}",
            r.body
        );
    }
    assert!(
        asked.load(Ordering::Relaxed) > 0,
        "the amnesiac node was never tried"
    );
    // Above the best height a "not found" is the right answer and is not retried.
    let r = post(
        &format!("{}/ext/bc/P", gw.url()),
        &call(
            "platform.getBlockByHeight",
            &format!(r#"{{"height":{}}}"#, height + 100),
        ),
    )
    .await;
    assert!(r.body.contains("not found"), "{}", r.body);
    gw.shutdown().await;
}
