//! The network check: every node's `info.getNetworkID` is read when it joins; a node on another
//! network than the pool's (`[network] id`, or the one most nodes report) never takes a call, and
//! `/ext/health` and `/metrics` say so, with the version each node reports.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use snowgate::config::{Config, UpstreamConfig};
use snowgate::devnode::DevNode;

const METHOD: &str = "platform.sampleValidators";

/// Calls [`METHOD`] `n` times through `gateway`; every call answers 200.
async fn call_method(gateway: &snowgate::Gateway, n: usize) {
    for _ in 0..n {
        let r = support::post(
            &format!("{}/ext/bc/P", gateway.url()),
            &support::call(METHOD, r#"{"size":1}"#),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

/// Two local-network (12345) devnodes and one fuji (5) devnode behind a gateway configured by
/// `tweak`; calls `METHOD` 40 times; returns the calls each node saw, `/ext/health` and `/metrics`.
async fn run(tweak: impl FnOnce(&mut Config)) -> (Vec<u64>, serde_json::Value, String) {
    let (_local, mut nodes) = support::devnodes(12345, 2, Duration::from_secs(3600)).await;
    let (_fuji, fuji) = support::devnodes(5, 1, Duration::from_secs(3600)).await;
    nodes.extend(fuji);
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    tweak(&mut config);
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    call_method(&gateway, 40).await;
    let calls = nodes
        .iter()
        .map(|n: &DevNode| n.control().call_count(METHOD))
        .collect();
    let health: serde_json::Value = support::client()
        .get(format!("{}/ext/health", gateway.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let metrics = support::get_metrics(&gateway.url()).await;
    gateway.shutdown().await;
    (calls, health, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_another_network_never_gets_a_call() {
    let (calls, health, metrics) = run(|_| {}).await;
    assert_eq!(calls[2], 0, "the fuji node was called: {calls:?}");
    assert!(calls[0] > 0 && calls[1] > 0, "{calls:?}");
    let fuji = &health["upstreams"][2];
    assert_eq!(fuji["networkMismatch"], true, "{health}");
    assert_eq!(fuji["networkId"], 5, "{health}");
    assert_eq!(fuji["takesTraffic"], false, "{health}");
    assert_eq!(health["upstreams"][0]["networkId"], 12345, "{health}");
    assert!(health["upstreams"][0].get("networkMismatch").is_none());
    assert!(health["upstreams"][0]["version"].is_string(), "{health}");
    assert!(
        metrics.contains("snowgate_upstream_network_mismatch{upstream=\"node-2\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("snowgate_upstream_info{network_id=\"12345\",upstream=\"node-0\""),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_network_wins_over_the_majority() {
    let (calls, health, _) = run(|c: &mut Config| c.network.id = Some(5)).await;
    assert_eq!(calls[0] + calls[1], 0, "a local node was called: {calls:?}");
    assert_eq!(calls[2], 40, "{calls:?}");
    assert_eq!(health["upstreams"][0]["networkMismatch"], true, "{health}");
}

#[test]
fn upstream_config_keeps_its_defaults() {
    let u = UpstreamConfig::default();
    assert_eq!(u.weight, 1);
}

/// A node that passes its health checks but whose `info.getNetworkID` answers an error: once the
/// pool's network is known, it cannot be shown to be on it and never takes a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_network_cannot_be_read_gets_no_call() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (_local, nodes) = support::devnodes(12345, 2, Duration::from_secs(3600)).await;
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let liar = support::scripted_node(1000, move |method, v| {
        let id = v["id"].clone();
        match method {
            "info.getNetworkID" => format!(
                r#"{{"jsonrpc":"2.0","error":{{"code":-32000,"message":"no","data":null}},"id":{id}}}"#
            ),
            "info.getNodeVersion" => {
                format!(r#"{{"jsonrpc":"2.0","result":{{"version":"avalanchego/1.14.2"}},"id":{id}}}"#)
            }
            _ => {
                counted.fetch_add(1, Ordering::SeqCst);
                format!(r#"{{"jsonrpc":"2.0","result":{{"validators":[]}},"id":{id}}}"#)
            }
        }
    })
    .await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    config.upstreams.push(UpstreamConfig {
        name: "liar".into(),
        url: format!("http://{liar}"),
        ..Default::default()
    });
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    call_method(&gateway, 40).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "the node of unknown network was called"
    );
    let status = gateway.pool().status();
    let liar = status.upstreams.iter().find(|u| u.name == "liar").unwrap();
    assert!(!liar.takes_traffic, "{liar:?}");
    assert_eq!(
        liar.last_error.as_deref(),
        Some("network unknown"),
        "{liar:?}"
    );
    gateway.shutdown().await;
}

/// Every node down at start: no network is known then. It is settled as soon as more than half
/// of the nodes report one, and a node of another network added later never takes a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_settled_when_the_nodes_come_up() {
    let (_local, nodes) = support::devnodes(12345, 1, Duration::from_secs(3600)).await;
    let (_fuji, fuji) = support::devnodes(5, 1, Duration::from_secs(3600)).await;
    nodes[0].control().go_down().await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    let file = std::sync::Arc::new(std::sync::Mutex::new(config.clone()));
    let source = {
        let file = file.clone();
        snowgate::gateway::ConfigSource::new(move || Ok(file.lock().unwrap().clone()))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = snowgate::Gateway::start_from(source, Some(listener))
        .await
        .unwrap();
    assert!(!gateway.pool().status().healthy);
    nodes[0].control().come_up().await.unwrap();
    assert!(
        support::eventually(Duration::from_secs(60), || gateway.pool().status().healthy).await,
        "the node never came back"
    );
    config.upstreams.push(UpstreamConfig {
        name: "fuji".into(),
        url: fuji[0].url(),
        ..Default::default()
    });
    *file.lock().unwrap() = config;
    gateway.reload().await.unwrap();
    call_method(&gateway, 20).await;
    assert_eq!(
        fuji[0].control().call_count(METHOD),
        0,
        "the fuji node was called"
    );
    let status = gateway.pool().status();
    assert!(status.upstreams[1].network_mismatch, "{status:?}");
    gateway.shutdown().await;
}
