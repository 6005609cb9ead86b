//! Faults on demand, going down and up, and the control endpoint, over real HTTP against nodes on
//! 127.0.0.1:0. Timing bounds are generous: these prove behaviour, not speed.
#![allow(clippy::unwrap_used)]

use crate::support::devnode as devnode_support;

use std::time::{Duration, Instant};

use devnode_support::{
    call, client, height, is_bootstrapped_answer, post, still_node, try_get_height, LIMIT,
};
use snowgate::devnode::{
    Chain, ChainConfig, DevNode, DevNodeConfig, Faults, Network, P_CHAIN_PATHS,
};

fn p_url(node: &DevNode) -> String {
    format!("{}/ext/bc/P", node.url())
}

async fn get_height_status(node: &DevNode) -> reqwest::Result<reqwest::StatusCode> {
    try_get_height(node.url()).await.map(|r| r.status())
}

#[tokio::test]
async fn latency_delays_answers() {
    let node = still_node().await;
    node.control().set_faults(Faults {
        latency: Duration::from_millis(300),
        jitter: Duration::from_millis(100),
        ..Faults::default()
    });
    let started = Instant::now();
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < LIMIT, "{took:?}");
}

#[tokio::test]
async fn error_rate_one_answers_500_and_control_still_works() {
    let node = still_node().await;
    node.control().set_faults(Faults {
        error_rate: 1.0,
        ..Faults::default()
    });
    let r = post(&p_url(&node), call("platform.getHeight", 1)).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["node-id"], node.node_id());
    assert!(!r.text().await.unwrap().is_empty());
    // Faulted requests never reach dispatch.
    assert_eq!(node.control().total_calls(), 0);

    let r = client()
        .get(format!("{}/_devnode/faults", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let faults: Faults = r.json().await.unwrap();
    assert_eq!(faults.error_rate, 1.0);

    node.control().set_faults(Faults::default());
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}

#[tokio::test]
async fn drop_rate_one_closes_connections_without_an_answer() {
    let node = still_node().await;
    node.control().set_faults(Faults {
        drop_rate: 1.0,
        ..Faults::default()
    });
    let err = get_height_status(&node).await.unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");
    assert!(err.status().is_none(), "{err:?}");
    node.control().set_faults(Faults::default());
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}

#[tokio::test]
async fn hang_holds_requests_until_cleared() {
    let node = still_node().await;
    let control = node.control();
    control.update_faults(|f| f.hang = true);
    let short = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = short
        .post(p_url(&node))
        .header("content-type", "application/json")
        .body(call("platform.getHeight", 1))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    // A request held now is answered once hang is cleared.
    let url = p_url(&node);
    let held =
        tokio::spawn(async move { post(&url, call("platform.getHeight", 2)).await.status() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished());
    control.update_faults(|f| f.hang = false);
    let status = tokio::time::timeout(LIMIT, held).await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}

#[tokio::test]
async fn hung_requests_are_dropped_when_the_node_goes_down_or_is_dropped() {
    let node = still_node().await;
    let control = node.control();
    control.update_faults(|f| f.hang = true);
    let held = tokio::spawn(try_get_height(node.url()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    control.go_down().await;
    let result = tokio::time::timeout(LIMIT, held).await.unwrap().unwrap();
    assert!(!result.unwrap_err().is_timeout());

    control.come_up().await.unwrap();
    let held = tokio::spawn(try_get_height(node.url()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(node);
    let result = tokio::time::timeout(LIMIT, held).await.unwrap().unwrap();
    assert!(!result.unwrap_err().is_timeout());
}

#[tokio::test]
async fn frozen_node_lags_while_its_peer_advances_then_catches_up() {
    let network = Network::start(ChainConfig {
        network_id: 12345,
        seed: 1,
        block_interval: Duration::from_millis(50),
        genesis: None,
    })
    .unwrap();
    let spawn = |index| {
        DevNode::spawn_in(
            network.clone(),
            DevNodeConfig {
                node_index: index,
                ..Default::default()
            },
        )
    };
    let lagging = spawn(0).await.unwrap();
    let peer = spawn(1).await.unwrap();
    assert_ne!(lagging.node_id(), peer.node_id());

    lagging.control().freeze();
    let frozen_at = height(&lagging.url()).await;
    let deadline = Instant::now() + LIMIT;
    while height(&peer.url()).await < frozen_at + 3 {
        assert!(Instant::now() < deadline, "the peer never advanced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(height(&lagging.url()).await, frozen_at);
    assert_eq!(lagging.control().height(), frozen_at);
    assert!(lagging.control().faults().frozen);

    let peer_height = height(&peer.url()).await;
    lagging.control().unfreeze();
    assert!(height(&lagging.url()).await >= peer_height);
}

#[tokio::test]
async fn bootstrapping_rejects_p_chain_calls_and_is_unhealthy() {
    let node = still_node().await;
    let c = client();
    node.control().set_bootstrapping(true);
    for path in P_CHAIN_PATHS {
        let r = post(
            &format!("{}{path}", node.url()),
            call("platform.getHeight", 1),
        )
        .await;
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        assert_eq!(r.headers()["node-id"], node.node_id());
        assert_eq!(
            r.text().await.unwrap(),
            "API call rejected because chain is not done bootstrapping\n"
        );
    }
    assert_eq!(node.control().call_count("platform.getHeight"), 0);

    // /ext/info keeps working.
    let r = post(
        &format!("{}/ext/info", node.url()),
        call("info.getNetworkID", 1),
    )
    .await;
    assert_eq!(r.status(), 200);
    if Chain::has_method("info", "IsBootstrapped") {
        assert_eq!(
            is_bootstrapped_answer(&node.url()).await,
            "{\"jsonrpc\":\"2.0\",\"result\":{\"isBootstrapped\":false},\"id\":1}\n"
        );
    }

    for path in ["/ext/health", "/ext/health/health", "/ext/health/readiness"] {
        let r = c.get(format!("{}{path}", node.url())).send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        let report: serde_json::Value = r.json().await.unwrap();
        assert_eq!(report["healthy"], false);
        let check = &report["checks"]["bootstrapped"];
        assert_eq!(check["error"], "subnets not bootstrapped");
        assert!(check["contiguousFailures"].as_i64().unwrap() >= 1);
        assert!(check["timeOfFirstFailure"].is_string());
    }
    let r = c
        .get(format!("{}/ext/health/liveness", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = post(
        &format!("{}/ext/health", node.url()),
        r#"{"jsonrpc":"2.0","method":"health.readiness","id":1}"#,
    )
    .await;
    assert_eq!(r.status(), 200);
    let answer: serde_json::Value = r.json().await.unwrap();
    assert_eq!(answer["result"]["healthy"], false);

    node.control().set_bootstrapping(false);
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
    let r = c
        .get(format!("{}/ext/health", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn down_refuses_connections_and_up_serves_on_the_same_port() {
    let node = still_node().await;
    let control = node.control();
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
    control.go_down().await;
    assert!(!control.is_up());
    let err = get_height_status(&node).await.unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    control.go_down().await; // idempotent

    control.come_up().await.unwrap();
    control.come_up().await.unwrap(); // idempotent
    assert_eq!(control.addr(), node.addr());
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}

#[tokio::test]
async fn calls_are_counted_by_the_name_requests_used() {
    let node = still_node().await;
    let control = node.control();
    post(&p_url(&node), call("platform.getHeight", 1)).await;
    post(&p_url(&node), call("platform.getheight", 2)).await;
    post(
        &p_url(&node),
        r#"{"jsonrpc":"2.0","method":"platform.getHeight"}"#,
    )
    .await;
    post(
        &format!("{}/ext/info", node.url()),
        call("info.getNetworkID", 3),
    )
    .await;
    let calls = control.calls();
    assert_eq!(calls.get("platform.getHeight"), Some(&2));
    assert_eq!(calls.get("platform.getheight"), Some(&1));
    assert_eq!(calls.get("info.getNetworkID"), Some(&1));
    assert_eq!(control.total_calls(), 4);
    control.reset_calls();
    assert_eq!(control.total_calls(), 0);
    assert!(control.calls().is_empty());
}

#[tokio::test]
async fn control_endpoint_over_http() {
    let node = still_node().await;
    let c = client();
    let base = format!("{}/_devnode", node.url());

    let faults: Faults = c
        .get(format!("{base}/faults"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(faults, Faults::default());

    let r = c
        .put(format!("{base}/faults"))
        .body(r#"{"latency":"20ms","error_rate":0.5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("{base}/faults"))
        .body(r#"{"frozen":true}"#)
        .send()
        .await
        .unwrap();
    let faults: Faults = r.json().await.unwrap();
    assert_eq!(faults.latency, Duration::from_millis(20));
    assert_eq!(faults.error_rate, 0.5);
    assert!(faults.frozen);
    assert_eq!(node.control().faults(), faults);

    for bad in [
        r#"{"error_rate":2}"#,
        r#"{"nope":true}"#,
        r#"{"latency":"soon"}"#,
        "not json",
    ] {
        let r = c
            .put(format!("{base}/faults"))
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["error"].is_string());
    }
    assert_eq!(node.control().faults(), faults);

    let r = c.delete(format!("{base}/faults")).send().await.unwrap();
    let cleared: Faults = r.json().await.unwrap();
    assert_eq!(cleared, Faults::default());

    post(&p_url(&node), call("platform.getHeight", 1)).await;
    post(&p_url(&node), call("platform.getHeight", 2)).await;
    let calls: serde_json::Value = c
        .get(format!("{base}/calls"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        calls,
        serde_json::json!({"total": 2, "calls": {"platform.getHeight": 2}})
    );
    let r = c.delete(format!("{base}/calls")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(node.control().total_calls(), 0);

    let status: serde_json::Value = c.get(&base).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["node_id"], node.node_id());
    assert_eq!(status["height"], 1000);
    assert_eq!(status["up"], true);

    let r = c.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = c.post(format!("{base}/down")).send().await.unwrap();
    assert_eq!(r.status(), 400);

    // Down for a while, then back on the same port.
    let r = c
        .post(format!("{base}/down?for=500ms"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let deadline = Instant::now() + LIMIT;
    while get_height_status(&node).await.is_ok() {
        assert!(Instant::now() < deadline, "never went down");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while get_height_status(&node).await.is_err() {
        assert!(Instant::now() < deadline, "never came back up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}

#[tokio::test]
async fn control_endpoint_is_not_faulted() {
    let node = still_node().await;
    node.control().set_faults(Faults {
        drop_rate: 1.0,
        hang: true,
        bootstrapping: true,
        ..Faults::default()
    });
    let r = client()
        .delete(format!("{}/_devnode/faults", node.url()))
        .header("host", "not-allowed.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(get_height_status(&node).await.unwrap(), 200);
}
