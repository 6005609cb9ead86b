//! A devnode plays one avalanchego release (`DevNodeConfig::version`, `snowgate devnode
//! --version`): `info.getNodeVersion` reports it, and it serves exactly that release's methods
//! and routes. What a release does not serve is answered as such a node answers it, byte for
//! byte: "rpc: can't find method" (-32000, HTTP 200) for a method, 404 for the ProposerVM path.
//! Also the methods current nodes added: `platform.getAllValidatorsAt` and
//! `POST /ext/bc/P/proposervm`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{json, Value};
use snowgate::devnode::{DevNode, DevNodeConfig, NodeVersion};

const EMPTY: &str = "11111111111111111111111111111111LpoYY";

async fn node(version: NodeVersion) -> DevNode {
    DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_millis(200),
        seed: 3,
        version,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Status and body of one call (id 1) at `path`.
async fn post(n: &DevNode, path: &str, method: &str, params: Value) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", n.url()))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

async fn result(n: &DevNode, path: &str, method: &str, params: Value) -> Value {
    let (status, body) = post(n, path, method, params).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("error").is_none(), "{method}: {body}");
    v["result"].clone()
}

/// The exact answer of a node that has no such method (reference §1.5).
fn not_found(shown: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":-32000,\"message\":\"rpc: can't find method \\\"{shown}\\\"\",\"data\":null}},\"id\":1}}\n"
    )
}

fn uint(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn get_node_version_reports_the_release_played() {
    let old = node(NodeVersion::new(1, 13, 0)).await;
    let v = result(&old, "/ext/info", "info.getNodeVersion", json!({})).await;
    assert_eq!(v["version"], "avalanchego/1.13.0");
    assert_eq!(v["vmVersions"]["platform"], "v1.13.0");
    let current = node(NodeVersion::default()).await;
    let v = result(&current, "/ext/info", "info.getNodeVersion", json!({})).await;
    assert_eq!(v["version"], "avalanchego/1.14.2");
}

#[tokio::test]
async fn a_v1_13_node_refuses_get_all_validators_at_and_a_v1_14_node_serves_it() {
    let old = node(NodeVersion::new(1, 13, 0)).await;
    let (status, body) = post(
        &old,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": 5}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, not_found("platform.GetAllValidatorsAt"));

    let new = node(NodeVersion::new(1, 14, 0)).await;
    let height = uint(&result(&new, "/ext/bc/P", "platform.getHeight", json!({})).await["height"]);
    let all = result(
        &new,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": height}),
    )
    .await;
    let sets = all["validatorSets"].as_object().unwrap();
    assert!(sets.len() >= 2, "{all}");
    // Go writes map keys sorted.
    let keys: Vec<&String> = sets.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    // The primary network's set holds exactly getValidatorsAt's validators and weight.
    let primary = &sets[EMPTY];
    let single = result(
        &new,
        "/ext/bc/P",
        "platform.getValidatorsAt",
        json!({"height": height}),
    )
    .await;
    let single = single.as_object().unwrap();
    let total: u64 = single.values().map(|v| uint(&v["weight"])).sum();
    assert_eq!(uint(&primary["totalWeight"]), total);
    // Field order on the wire (serde_json's Value sorts keys, so read the raw body).
    let (_, raw) = post(
        &new,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": height}),
    )
    .await;
    assert!(
        raw.starts_with(r#"{"jsonrpc":"2.0","result":{"validatorSets":{""#),
        "{raw}"
    );
    let entries = raw.matches(r#"{"publicKey":"#).count();
    let total_entries: usize = sets
        .values()
        .map(|s| s["validators"].as_array().unwrap().len())
        .sum();
    assert_eq!(entries, total_entries, "{raw}");
    assert_eq!(
        raw.matches(r#"","nodeIDs":["#).count(),
        total_entries,
        "{raw}"
    );
    assert_eq!(raw.matches(r#"],"totalWeight":""#).count(), sets.len());
    let mut listed: Vec<String> = Vec::new();
    for entry in primary["validators"].as_array().unwrap() {
        assert_eq!(entry.as_object().unwrap().len(), 3, "{entry}");
        assert!(entry["publicKey"].is_null() || entry["publicKey"].is_string());
        let mut weight = 0;
        for id in entry["nodeIDs"].as_array().unwrap() {
            let id = id.as_str().unwrap();
            assert_eq!(single[id]["publicKey"], entry["publicKey"], "{id}");
            weight += uint(&single[id]["weight"]);
            listed.push(id.to_string());
        }
        assert_eq!(uint(&entry["weight"]), weight, "{entry}");
    }
    listed.sort();
    let mut expected: Vec<String> = single.keys().cloned().collect();
    expected.sort();
    assert_eq!(listed, expected);
    // "proposed" is accepted; a height above the tip is getValidatorsAt's error.
    let proposed = result(
        &new,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": "proposed"}),
    )
    .await;
    assert!(proposed["validatorSets"][EMPTY].is_object(), "{proposed}");
    let (_, body) = post(
        &new,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": 999_999_999u64}),
    )
    .await;
    let err: Value = serde_json::from_str(&body).unwrap();
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("failed to get validator set at 999999999: failed to fetch validator set at unfinalized height with SubnetID = 11111111111111111111111111111111LpoYY: current P-chain height ("),
        "{msg}"
    );
    let (_, body) = post(
        &new,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": "abc"}),
    )
    .await;
    assert!(body.contains("couldn't unmarshal an argument"), "{body}");
}

#[tokio::test]
async fn the_proposervm_path_serves_its_two_methods_from_v1_14() {
    let n = node(NodeVersion::new(1, 14, 0)).await;
    let path = "/ext/bc/P/proposervm";
    let height = uint(&result(&n, "/ext/bc/P", "platform.getHeight", json!({})).await["height"]);
    let proposed = result(&n, path, "proposervm.getProposedHeight", json!({})).await;
    assert!(uint(&proposed["height"]) <= height, "{proposed}");
    let (_, raw) = post(&n, path, "proposervm.getCurrentEpoch", json!({})).await;
    let epoch = serde_json::from_str::<Value>(&raw).unwrap()["result"].clone();
    // Field order on the wire (serde_json's Value sorts keys, so read the raw body).
    let order = ["\"number\":\"", "\"startTime\":\"", "\"pChainHeight\":\""]
        .map(|k| raw.find(k).unwrap_or_else(|| panic!("{k} in {raw}")));
    assert!(order[0] < order[1] && order[1] < order[2], "{raw}");
    assert_eq!(epoch.as_object().unwrap().len(), 3, "{raw}");
    assert!(uint(&epoch["pChainHeight"]) <= height, "{epoch}");
    assert!(uint(&epoch["startTime"]) > 1_600_000_000, "{epoch}");
    let _ = uint(&epoch["number"]);
    // Each service answers only at its own route.
    let (_, body) = post(&n, path, "platform.getHeight", json!({})).await;
    assert!(
        body.contains(r#""message":"rpc: can't find service \"platform.GetHeight\"""#),
        "{body}"
    );
    let (_, body) = post(&n, "/ext/bc/P", "proposervm.getCurrentEpoch", json!({})).await;
    assert!(
        body.contains(r#"rpc: can't find service \"proposervm.GetCurrentEpoch\""#),
        "{body}"
    );
    // gorilla/rpc's refusals hold there too.
    let resp = reqwest::get(format!("{}{path}", n.url())).await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(
        resp.text().await.unwrap(),
        "rpc: POST method required, received GET"
    );
    // While bootstrapping, it is a chain route like /ext/bc/P.
    n.control().set_bootstrapping(true);
    let (status, body) = post(&n, path, "proposervm.getProposedHeight", json!({})).await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        "API call rejected because chain is not done bootstrapping\n"
    );
    n.control().set_bootstrapping(false);

    // Before v1.14.0 the path does not exist.
    let old = node(NodeVersion::new(1, 13, 0)).await;
    let (status, body) = post(&old, path, "proposervm.getProposedHeight", json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(body, "404 page not found\n");
}

#[tokio::test]
async fn removed_methods_are_unknown_from_their_removal_on() {
    let current = node(NodeVersion::default()).await;
    for (method, shown) in [
        ("platform.exportKey", "platform.ExportKey"),
        ("platform.listAddresses", "platform.ListAddresses"),
        (
            "platform.getPendingValidators",
            "platform.GetPendingValidators",
        ),
        ("platform.getMaxStakeAmount", "platform.GetMaxStakeAmount"),
    ] {
        let (status, body) = post(
            &current,
            "/ext/bc/P",
            method,
            json!({"username": "demo", "password": "Sn0wg4te-demo!"}),
        )
        .await;
        assert_eq!((status, body), (200, not_found(shown)), "{method}");
    }
    assert_eq!(current.control().call_count("platform.exportKey"), 1);

    // The last release with the keystore still serves it, but not the pending stakers.
    let keystore = node(NodeVersion::new(1, 12, 1)).await;
    let creds = json!({"username": "demo", "password": "Sn0wg4te-demo!"});
    let list = result(&keystore, "/ext/bc/P", "platform.listAddresses", creds).await;
    assert!(list["addresses"][0].is_string(), "{list}");
    let (_, body) = post(
        &keystore,
        "/ext/bc/P",
        "platform.getPendingValidators",
        json!({}),
    )
    .await;
    assert_eq!(body, not_found("platform.GetPendingValidators"));
    // The boundary is exact: v1.12.2 no longer has it.
    let removed = node(NodeVersion::new(1, 12, 2)).await;
    let (_, body) = post(
        &removed,
        "/ext/bc/P",
        "platform.listAddresses",
        json!({"username": "demo", "password": "Sn0wg4te-demo!"}),
    )
    .await;
    assert_eq!(body, not_found("platform.ListAddresses"));

    // v1.11.2 serves the pending stakers, and not what came later (getValidatorFeeConfig,
    // v1.12.2; getAllValidatorsAt, v1.14.0).
    let pending = node(NodeVersion::new(1, 11, 2)).await;
    let pend = result(
        &pending,
        "/ext/bc/P",
        "platform.getPendingValidators",
        json!({}),
    )
    .await;
    assert!(pend["validators"].is_array(), "{pend}");
    for (method, shown) in [
        (
            "platform.getValidatorFeeConfig",
            "platform.GetValidatorFeeConfig",
        ),
        ("platform.getAllValidatorsAt", "platform.GetAllValidatorsAt"),
    ] {
        let (_, body) = post(&pending, "/ext/bc/P", method, json!({})).await;
        assert_eq!(body, not_found(shown), "{method}");
    }
}

#[tokio::test]
async fn the_control_endpoint_upgrades_a_node_in_place() {
    let n = node(NodeVersion::new(1, 13, 0)).await;
    let http = reqwest::Client::new();
    let control = format!("{}/_devnode/version", n.url());
    let get = http.get(&control).send().await.unwrap();
    assert_eq!(get.text().await.unwrap(), "{\"version\":\"v1.13.0\"}\n");
    let (_, body) = post(
        &n,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": 1}),
    )
    .await;
    assert_eq!(body, not_found("platform.GetAllValidatorsAt"));
    // A rolling upgrade reaches this node.
    let put = http
        .put(&control)
        .body(r#"{"version":"v1.14.0"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(put.text().await.unwrap(), "{\"version\":\"v1.14.0\"}\n");
    assert_eq!(n.version(), NodeVersion::new(1, 14, 0));
    let all = result(
        &n,
        "/ext/bc/P",
        "platform.getAllValidatorsAt",
        json!({"height": 1}),
    )
    .await;
    assert!(all["validatorSets"][EMPTY].is_object(), "{all}");
    let v = result(&n, "/ext/info", "info.getNodeVersion", json!({})).await;
    assert_eq!(v["version"], "avalanchego/1.14.0");
    let status: Value = http
        .get(format!("{}/_devnode", n.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["version"], "v1.14.0");
    // A bad release changes nothing.
    for bad in [r#"{"version":"1.14"}"#, r#"{"v":"v1.14.0"}"#, "nope"] {
        let r = http.put(&control).body(bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(n.version(), NodeVersion::new(1, 14, 0));
    // And the Rust handle does the same, back down.
    n.control().set_version(NodeVersion::new(1, 13, 0));
    let (status, body) = post(
        &n,
        "/ext/bc/P/proposervm",
        "proposervm.getCurrentEpoch",
        json!({}),
    )
    .await;
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
}
