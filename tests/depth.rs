//! `[methods."NAME"] max_depth`: a call whose height is further behind the pool's best height
//! than the method allows is refused by snowgate with -32602, reaches no node, costs
//! `refused_cost`, is counted as `outcome="beyond_max_depth"`, and the limit changes on a reload.
//! The devnodes' chain is made tall (its history thousands of blocks past the built-in 1000), so
//! that height 1 is far more than 1000 blocks back.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, SystemTime};

use snowgate::config::Config;
use snowgate::devnode::{ChainConfig, DevNode, DevNodeConfig, Network};
use snowgate::gateway::ConfigSource;
use snowgate::methods::MethodOverride;
use snowgate::Gateway;
use support::fleet::metric;
use support::{call, get_metrics, post, post_with, Cluster, ADMIN_KEY};

const METHOD: &str = "platform.getAllValidatorsAt";

/// Time between the tall chain's blocks: long, so that the tip barely moves during a test.
const INTERVAL: Duration = Duration::from_secs(10);

/// Blocks made past the built-in history when the chain starts: its tip is about 1000 + this.
const BLOCKS_PAST: u32 = 5000;

/// A network whose chain is [`BLOCKS_PAST`] blocks past its built-in history, and one devnode.
async fn tall_node() -> (Network, DevNode) {
    let genesis = SystemTime::now() - INTERVAL * BLOCKS_PAST;
    let network = Network::start(ChainConfig {
        network_id: 12345,
        seed: 1,
        block_interval: INTERVAL,
        genesis: Some(genesis),
    })
    .unwrap();
    let config = DevNodeConfig {
        block_interval: INTERVAL,
        genesis: Some(genesis),
        ..Default::default()
    };
    let node = DevNode::spawn_in(network.clone(), config).await.unwrap();
    (network, node)
}

/// One tall devnode behind a gateway with `max_depth = 1000` on [`METHOD`] (and on
/// `platform.getValidatorsAt`, for `"proposed"`); `tweak` adjusts the config. Returns once the
/// pool knows the tip.
async fn cluster(tweak: impl FnOnce(&mut Config)) -> Cluster {
    let (network, node) = tall_node().await;
    let mut config = Config::default();
    support::test_gateway(&mut config, std::slice::from_ref(&node));
    for method in [METHOD, "platform.getValidatorsAt"] {
        config.methods.insert(
            method.into(),
            MethodOverride {
                max_depth: Some(1000),
                ..Default::default()
            },
        );
    }
    tweak(&mut config);
    let gateway = Gateway::start(config).await.unwrap();
    support::every_node_takes_traffic(&gateway).await;
    let pool = gateway.pool().clone();
    let tall = || pool.best_height() > u64::from(BLOCKS_PAST);
    assert!(support::eventually(Duration::from_secs(60), tall).await);
    node.control().reset_calls();
    Cluster {
        network,
        nodes: vec![node],
        gateway,
    }
}

fn calls(c: &Cluster, method: &str) -> u64 {
    c.nodes[0].control().call_count(method)
}

fn p_chain(c: &Cluster) -> String {
    format!("{}/ext/bc/P", c.url())
}

/// The error of a refusal for depth: its code and message, checked to name the limit and no node.
fn assert_too_deep(r: &support::Reply, height: u64) {
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32602, "{}", r.body);
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("height {height} is ")),
        "{message}"
    );
    assert!(
        message.ends_with(
            " blocks behind the tip; this endpoint serves platform.getAllValidatorsAt at most \
             1000 blocks back"
        ),
        "{message}"
    );
    for node in ["127.0.0.1", "node-0", "http"] {
        assert!(!message.contains(node), "{message}");
    }
}

#[tokio::test]
async fn a_call_too_far_behind_the_tip_is_refused_and_reaches_no_node() {
    let c = cluster(|_| {}).await;
    let url = p_chain(&c);
    let tip = c.gateway.pool().best_height();
    // Recent history is served.
    let recent = post(&url, &call(METHOD, &format!(r#"{{"height":{}}}"#, tip - 5))).await;
    assert!(
        recent.json()["result"]["validatorSets"].is_object(),
        "{}",
        recent.body
    );
    assert_eq!(calls(&c, METHOD), 1);
    // Height 1 is thousands of blocks back: refused, as a number, a quoted number, in the
    // array form, inside a batch, and to an admin.
    let deep = [
        call(METHOD, r#"{"height":1}"#),
        call(METHOD, r#"{"height":"1"}"#),
        call(METHOD, r#"[{"height":1}]"#),
    ];
    for body in &deep {
        assert_too_deep(&post(&url, body).await, 1);
    }
    let admin = format!("Bearer {ADMIN_KEY}");
    let r = post_with(&url, &deep[0], &[("authorization", &admin)]).await;
    assert_too_deep(&r, 1);
    let batch = format!(
        "[{},{}]",
        deep[0],
        call("platform.getHeight", "{}").replace("\"id\":1", "\"id\":2")
    );
    let r = post(&url, &batch).await;
    let answers = r.json();
    assert_eq!(answers[0]["error"]["code"], -32602, "{}", r.body);
    assert!(answers[1]["result"]["height"].is_string(), "{}", r.body);
    assert_eq!(calls(&c, METHOD), 1, "a call too far back reached the node");
    // Above the tip is the node's to answer ("unfinalized height"), and so is "proposed".
    post(
        &url,
        &call(METHOD, &format!(r#"{{"height":{}}}"#, tip + 100)),
    )
    .await;
    assert_eq!(calls(&c, METHOD), 2);
    let proposed = call("platform.getValidatorsAt", r#"{"height":"proposed"}"#);
    let r = post(&url, &proposed).await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    assert_eq!(calls(&c, "platform.getValidatorsAt"), 1);
    // Counted with their own outcome: the three, the admin's and the batch's.
    let m = get_metrics(&c.url()).await;
    let series =
        format!("snowgate_requests_total{{method=\"{METHOD}\",outcome=\"beyond_max_depth\"}}");
    assert_eq!(metric(&m, &series), 5.0, "{series} in:\n{m}");
    c.gateway.shutdown().await;
}

/// A node reads a height left out as 0 (its args struct starts at zero), the deepest call there
/// is: every way of leaving it out is refused as height 0 and reaches no node, on both methods and
/// in every shape of params. `"proposed"` and params a node cannot read still pass.
#[tokio::test]
async fn a_height_left_out_is_judged_as_the_height_0_a_node_reads() {
    let c = cluster(|_| {}).await;
    let url = p_chain(&c);
    // What a node answers for height 0 is the deepest validator set: the call to refuse.
    let zero = post(&url, &call(METHOD, r#"{"height":0}"#)).await;
    assert_too_deep(&zero, 0);
    let envelope = |method: &str, params: Option<&str>| match params {
        Some(p) => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{p},"id":1}}"#),
        None => format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":1}}"#),
    };
    let left_out = [
        Some("{}"),
        Some("null"),
        Some("[]"),
        Some("[null]"),
        Some("[{}]"),
        Some(r#"{"height":null}"#),
        Some(r#"{"heigth":1000000}"#),
        Some(r#"{"Height":null,"subnetID":"11111111111111111111111111111111LpoYY"}"#),
        Some(r#"[{"height ":1000000}]"#),
        None,
    ];
    for params in left_out {
        let r = post(&url, &envelope(METHOD, params)).await;
        assert_too_deep(&r, 0);
        // getValidatorsAt reads its height the same way.
        let r = post(&url, &envelope("platform.getValidatorsAt", params)).await;
        let v = r.json();
        assert_eq!(v["error"]["code"], -32602, "{params:?}: {}", r.body);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("height 0 is "),
            "{params:?}: {}",
            r.body
        );
    }
    assert_eq!(calls(&c, METHOD), 0, "a height left out reached the node");
    assert_eq!(calls(&c, "platform.getValidatorsAt"), 0);
    // Params a node cannot decode are its own error to give (it does no work for them).
    let r = post(&url, &call(METHOD, r#"{"height":"abc"}"#)).await;
    assert_eq!(r.json()["error"]["code"], -32000, "{}", r.body);
    assert_eq!(calls(&c, METHOD), 1);
    // "proposed" still passes.
    let r = post(
        &url,
        &call("platform.getValidatorsAt", r#"[{"height":"proposed"}]"#),
    )
    .await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    assert_eq!(calls(&c, "platform.getValidatorsAt"), 1);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn calls_too_far_back_cost_refused_cost() {
    let c = cluster(|cfg| {
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.requests_per_second = 1;
        cfg.rate_limit.burst = 20;
        cfg.rate_limit.refused_cost = 2;
    })
    .await;
    let url = p_chain(&c);
    let deep = call(METHOD, r#"{"height":1}"#);
    let mut refused = 0;
    let limited = loop {
        let r = post(&url, &deep).await;
        if r.status == 429 {
            break r;
        }
        assert_too_deep(&r, 1);
        refused += 1;
        // Free calls would never be limited; ten units each (the method's cost) would be after
        // two.
        assert!(refused < 40, "never limited");
    };
    assert!(
        limited.header("retry-after").is_some(),
        "{:?}",
        limited.headers
    );
    // 20 units of burst at 2 a call: 10, and at most a few more for what refilled meanwhile
    // (one unit a second).
    assert!(
        (10..20).contains(&refused),
        "{refused} refusals before the 429"
    );
    assert_eq!(calls(&c, METHOD), 0);
    let m = get_metrics(&c.url()).await;
    let series =
        format!("snowgate_requests_total{{method=\"{METHOD}\",outcome=\"beyond_max_depth\"}}");
    assert_eq!(metric(&m, &series), f64::from(refused), "{m}");
    c.gateway.shutdown().await;
}

/// A config file's text for one node, with `max_depth` on [`METHOD`].
fn config_text(node: &DevNode, max_depth: u64) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\n\
         [rate_limit]\nenabled = false\n\n\
         [[upstreams]]\nname = \"node-0\"\nurl = \"{}\"\n\n\
         [methods.\"{METHOD}\"]\nmax_depth = {max_depth}\n",
        node.url()
    )
}

#[tokio::test]
async fn max_depth_changes_on_a_reload() {
    let (_network, node) = tall_node().await;
    let path = support::temp_dir("depth-reload").join("snowgate.toml");
    std::fs::write(&path, config_text(&node, 1000)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::start_from(ConfigSource::file(&path), Some(listener))
        .await
        .unwrap();
    support::every_node_takes_traffic(&gw).await;
    let pool = gw.pool().clone();
    let tall = || pool.best_height() > u64::from(BLOCKS_PAST);
    assert!(support::eventually(Duration::from_secs(60), tall).await);
    node.control().reset_calls();
    let url = format!("{}/ext/bc/P", gw.url());
    let deep = call(METHOD, r#"{"height":1}"#);
    assert_too_deep(&post(&url, &deep).await, 1);
    assert_eq!(node.control().call_count(METHOD), 0);
    // Deep enough for the whole chain: served after the reload.
    std::fs::write(&path, config_text(&node, 1_000_000)).unwrap();
    let report = gw.reload().await.unwrap();
    assert!(
        report.changed.contains(&"methods".to_string()),
        "{report:?}"
    );
    let r = post(&url, &deep).await;
    assert!(
        r.json()["result"]["validatorSets"].is_object(),
        "{}",
        r.body
    );
    assert_eq!(node.control().call_count(METHOD), 1);
    gw.shutdown().await;
}
