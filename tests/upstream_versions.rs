//! Version-aware routing (issue 15): methods carry the avalanchego releases that serve them, and
//! during a rolling upgrade a call goes only to nodes whose release serves its method; when no
//! node up does, the client gets the node's own "can't find method" without a node call. Also
//! the methods current nodes added: `platform.getAllValidatorsAt` (cached only for a numeric
//! height) and the ProposerVM path `POST /ext/bc/P/proposervm`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use snowgate::config::Config;
use snowgate::devnode::{ChainConfig, DevNode, DevNodeConfig, Network, NodeVersion};
use snowgate::methods::MethodOverride;
use snowgate::Gateway;

const ALL: &str = "platform.getAllValidatorsAt";
const OLD: NodeVersion = NodeVersion::new(1, 13, 0);
const NEW: NodeVersion = NodeVersion::new(1, 14, 2);

/// Devnodes of one network (12345), one per release in `versions` (node-0, node-1, ...), behind
/// a gateway adjusted by `tweak`. Blocks are slow: heights and proposed heights stay put.
async fn pool(
    versions: &[NodeVersion],
    tweak: impl FnOnce(&mut Config),
) -> (Network, Vec<DevNode>, Gateway) {
    let block_interval = Duration::from_secs(3600);
    let network = Network::start(ChainConfig {
        network_id: 12345,
        seed: 1,
        block_interval,
        genesis: None,
    })
    .unwrap();
    let mut nodes = Vec::new();
    for (i, &version) in versions.iter().enumerate() {
        let config = DevNodeConfig {
            node_index: i as u32,
            network_id: 12345,
            block_interval,
            version,
            ..Default::default()
        };
        nodes.push(DevNode::spawn_in(network.clone(), config).await.unwrap());
    }
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    tweak(&mut config);
    let gateway = Gateway::start(config).await.unwrap();
    (network, nodes, gateway)
}

fn counts(nodes: &[DevNode], method: &str) -> Vec<u64> {
    nodes
        .iter()
        .map(|n| n.control().call_count(method))
        .collect()
}

/// The node's own answer, asked directly (id 1).
async fn direct(node: &DevNode, path: &str, method: &str, params: &str) -> String {
    support::post(
        &format!("{}{path}", node.url()),
        &support::call(method, params),
    )
    .await
    .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_mixed_pool_get_all_validators_at_reaches_only_nodes_that_serve_it() {
    let (_net, nodes, gateway) = pool(&[OLD, NEW, OLD, NEW], |_| {}).await;
    let url = format!("{}/ext/bc/P", gateway.url());
    // Distinct heights: each call misses the cache and reaches a node.
    for height in 1..=30 {
        let r = support::post(
            &url,
            &support::call(ALL, &format!("{{\"height\":{height}}}")),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            r.json()["result"]["validatorSets"].is_object(),
            "{}",
            r.body
        );
    }
    let all = counts(&nodes, ALL);
    assert_eq!(all[0] + all[2], 0, "a v1.13 node was asked: {all:?}");
    assert_eq!(all[1] + all[3], 30, "{all:?}");
    // What every release serves still goes to all of them.
    for _ in 0..40 {
        let r = support::post(
            &url,
            &support::call("platform.sampleValidators", r#"{"size":1}"#),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let sampled = counts(&nodes, "platform.sampleValidators");
    assert!(sampled[0] + sampled[2] > 0, "{sampled:?}");
    assert!(sampled[1] + sampled[3] > 0, "{sampled:?}");
    assert_eq!(sampled.iter().sum::<u64>(), 40, "{sampled:?}");
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_old_nodes_the_client_gets_the_nodes_own_error_without_a_node_call() {
    let (_net, nodes, gateway) = pool(&[OLD, OLD], |_| {}).await;
    let expected = direct(&nodes[0], "/ext/bc/P", ALL, r#"{"height":5}"#).await;
    assert!(expected.contains("can't find method"), "{expected}");
    nodes[0].control().reset_calls();
    let url = format!("{}/ext/bc/P", gateway.url());
    for params in [r#"{"height":5}"#, r#"{"height":"proposed"}"#] {
        let r = support::post(&url, &support::call(ALL, params)).await;
        assert_eq!((r.status, r.body.as_str()), (200, expected.as_str()));
    }
    assert_eq!(counts(&nodes, ALL), [0, 0]);
    // A pinned call goes to the node the admin named, whatever its release: its own answer.
    let r = support::post_with(
        &url,
        &support::call(ALL, r#"{"height":5}"#),
        &[
            ("authorization", &format!("Bearer {}", support::ADMIN_KEY)),
            ("x-snowgate-upstream", "node-1"),
        ],
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (200, expected.as_str()));
    assert_eq!(counts(&nodes, ALL), [0, 1]);
    // Methods old releases still serve are untouched, and the ones they lost are refused too.
    let r = support::post(&url, &support::call("platform.getHeight", "{}")).await;
    assert!(r.json()["result"]["height"].is_string(), "{}", r.body);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proposervm_path_reaches_a_new_node_and_answers_as_it_does() {
    // One attempt per call: a call sent to the old node (which has no such path: 404) fails
    // instead of being retried on the new one. No cache: every call is routed.
    let (_net, nodes, gateway) = pool(&[OLD, NEW], |c| {
        c.upstream.max_attempts = 1;
        c.cache.enabled = false;
    })
    .await;
    let path = "/ext/bc/P/proposervm";
    let url = format!("{}{path}", gateway.url());
    for method in ["proposervm.getProposedHeight", "proposervm.getCurrentEpoch"] {
        let expected = direct(&nodes[1], path, method, "{}").await;
        assert!(expected.contains("\"result\""), "{expected}");
        for _ in 0..10 {
            let r = support::post(&url, &support::call(method, "{}")).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, expected.as_str()),
                "{method}"
            );
        }
        assert_eq!(nodes[1].control().call_count(method), 11, "{method}");
    }
    // A proposervm method at the P-chain path is not served there.
    let r = support::post(
        &format!("{}/ext/bc/P", gateway.url()),
        &support::call("proposervm.getProposedHeight", "{}"),
    )
    .await;
    assert!(r.json()["error"].is_object(), "{}", r.body);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numeric_height_is_cached_and_proposed_is_not() {
    let (_net, nodes, gateway) = pool(&[NEW], |_| {}).await;
    let url = format!("{}/ext/bc/P", gateway.url());
    let numeric = support::call(ALL, r#"{"height":7}"#);
    let first = support::post(&url, &numeric).await;
    assert!(
        first.json()["result"]["validatorSets"].is_object(),
        "{}",
        first.body
    );
    let second = support::post(&url, &numeric).await;
    assert_eq!(
        second.header("x-cache"),
        Some("HIT"),
        "{:?}",
        second.headers
    );
    assert_eq!(second.body, first.body);
    assert_eq!(counts(&nodes, ALL), [1]);
    let proposed = support::call(ALL, r#"{"height":"proposed"}"#);
    for _ in 0..2 {
        let r = support::post(&url, &proposed).await;
        assert!(
            r.json()["result"]["validatorSets"].is_object(),
            "{}",
            r.body
        );
        assert_ne!(r.header("x-cache"), Some("HIT"));
    }
    assert_eq!(counts(&nodes, ALL), [3]);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_override_of_the_release_makes_every_node_unfit() {
    let (_net, nodes, gateway) = pool(&[NEW, NEW], |c| {
        c.methods.insert(
            ALL.to_string(),
            MethodOverride {
                since: Some("1.15.0".into()),
                ..Default::default()
            },
        );
    })
    .await;
    let r = support::post(
        &format!("{}/ext/bc/P", gateway.url()),
        &support::call(ALL, r#"{"height":5}"#),
    )
    .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            200,
            "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"rpc: can't find method \\\"platform.GetAllValidatorsAt\\\"\",\"data\":null},\"id\":1}\n"
        )
    );
    assert_eq!(counts(&nodes, ALL), [0, 0]);
    gateway.shutdown().await;
}

#[test]
fn a_release_that_is_not_a_version_is_a_config_error_naming_the_key() {
    let text = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9650\"\n\
                [methods.\"platform.getAllValidatorsAt\"]\nsince = \"fourteen\"\n";
    let e = Config::parse(text, "t.toml").unwrap_err().to_string();
    assert!(
        e.contains("methods.\"platform.getAllValidatorsAt\".since"),
        "{e}"
    );
    let ok = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9650\"\n\
              [methods.\"platform.getAllValidatorsAt\"]\nsince = \"v1.15.0\"\nremoved_in = \"2.0.0\"\n";
    Config::parse(ok, "t.toml").unwrap();
}
