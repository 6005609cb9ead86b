//! Every `info.*` and `platform.*` method of the spec against an in-process devnode over HTTP:
//! result shapes and value types (quoted uint64 vs numbers), hex and json encodings, not-found and
//! bad-args errors, getUTXOs pagination, the issueTx lifecycle, block production and determinism.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};
use snowgate::devnode::{DevNode, DevNodeConfig, NodeVersion};
use snowgate::jsonrpc::Json;

const BAD_ARGS: &str = "couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls";
const EMPTY: &str = "11111111111111111111111111111111LpoYY";
/// The last release with the keystore API (removed in v1.12.2).
const KEYSTORE: NodeVersion = NodeVersion::new(1, 12, 1);
/// The last release with getPendingValidators and getMaxStakeAmount (removed in v1.11.3).
const PENDING: NodeVersion = NodeVersion::new(1, 11, 2);

struct Node {
    node: DevNode,
    http: reqwest::Client,
}

impl Node {
    async fn start() -> Node {
        Node::start_with(7).await
    }

    async fn start_with(seed: u64) -> Node {
        Node::start_version(seed, NodeVersion::CURRENT).await
    }

    /// A node playing release `version` (the keystore and pending-staker methods are only
    /// served by the releases before their removal).
    async fn start_version(seed: u64, version: NodeVersion) -> Node {
        let node = DevNode::spawn(DevNodeConfig {
            block_interval: Duration::from_millis(200),
            seed,
            version,
            ..Default::default()
        })
        .await
        .unwrap();
        Node {
            node,
            http: reqwest::Client::new(),
        }
    }

    /// The whole response body of one call.
    async fn raw(&self, path: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let resp = self
            .http
            .post(format!("{}{}", self.node.url(), path))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let bytes = resp.bytes().await.unwrap();
        record_key_orders(&Json::parse(&bytes).unwrap());
        serde_json::from_slice(&bytes).unwrap()
    }

    async fn ok(&self, method: &str, params: Value) -> Value {
        let path = if method.starts_with("info.") {
            "/ext/info"
        } else {
            "/ext/bc/P"
        };
        let v = self.raw(path, method, params).await;
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    async fn err(&self, method: &str, params: Value) -> String {
        let path = if method.starts_with("info.") {
            "/ext/info"
        } else {
            "/ext/bc/P"
        };
        let v = self.raw(path, method, params).await;
        assert_eq!(v["error"]["code"], -32000, "{method}: {v}");
        v["error"]["message"].as_str().unwrap().to_string()
    }

    async fn height(&self) -> u64 {
        let r = self.ok("platform.getHeight", json!({})).await;
        r["height"].as_str().unwrap().parse().unwrap()
    }
}

fn is_uint_str(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

fn is_pct(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let (a, b) = s.split_once('.').unwrap_or(("", ""));
        !a.is_empty() && b.len() == 4
    })
}

thread_local! {
    /// Wire key order of every object seen in answers, by its sorted key set (serde_json sorts
    /// object keys, so order is recorded from the crate's order-keeping Go JSON tree).
    static KEY_ORDERS: RefCell<HashMap<Vec<String>, Vec<String>>> = RefCell::new(HashMap::new());
}

fn record_key_orders(j: &Json) {
    match j {
        Json::Object(members) => {
            let order: Vec<String> = members.iter().map(|(k, _)| k.clone()).collect();
            let mut sorted = order.clone();
            sorted.sort();
            KEY_ORDERS.with(|m| m.borrow_mut().insert(sorted, order));
            members.iter().for_each(|(_, v)| record_key_orders(v));
        }
        Json::Array(items) => items.iter().for_each(record_key_orders),
        _ => {}
    }
}

/// The keys of `v` in the order the node wrote them.
fn keys(v: &Value) -> Vec<String> {
    let mut sorted: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    sorted.sort();
    KEY_ORDERS.with(|m| m.borrow().get(&sorted).cloned().unwrap_or(sorted))
}

#[tokio::test]
async fn info_methods_answer_like_a_node() {
    let n = Node::start().await;
    assert_eq!(
        n.ok("info.getNetworkID", json!({})).await,
        json!({"networkID": "12345"})
    );
    assert_eq!(
        n.ok("info.getNetworkName", json!({})).await,
        json!({"networkName": "local"})
    );

    let id = n.ok("info.getNodeID", Value::Null).await;
    assert!(id["nodeID"].as_str().unwrap().starts_with("NodeID-"));
    assert_eq!(id["nodePOP"]["publicKey"].as_str().unwrap().len(), 2 + 96);
    assert_eq!(
        id["nodePOP"]["proofOfPossession"].as_str().unwrap().len(),
        2 + 192
    );

    let ip = n.ok("info.getNodeIP", json!({})).await;
    assert!(ip["ip"].as_str().unwrap().contains(':'));

    let ver = n.ok("info.getNodeVersion", json!({})).await;
    assert_eq!(ver["version"], "avalanchego/1.14.2");
    assert!(is_uint_str(&ver["rpcProtocolVersion"]));
    assert_eq!(ver["vmVersions"]["platform"], "v1.14.2");

    let fee = n.ok("info.getTxFee", json!({})).await;
    assert_eq!(fee["txFee"], "1000000");
    assert_eq!(keys(&fee).len(), 9);
    assert!(fee.as_object().unwrap().values().all(is_uint_str));

    let vms = n.ok("info.getVMs", json!({})).await;
    assert_eq!(
        vms["vms"]["rWhpuQPF1kb72esV2momhMuTYGkEb1oL29pt2EBXWmSy4kxnT"],
        json!(["platform"])
    );
    assert_eq!(
        vms["fxs"]["spdxUxVJQbX85MGxMHbKw1sHxMnSqJ3QBzDyDYEP3h6TLuxqQ"],
        "secp256k1fx"
    );

    let up = n.ok("info.upgrades", json!({})).await;
    assert!(up["apricotPhase4MinPChainHeight"].is_number());
    assert!(up["etnaTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(up["cortinaXChainStopVertexID"], EMPTY);

    let uptime = n.ok("info.uptime", json!({})).await;
    assert_eq!(uptime["rewardingStakePercentage"], "100.0000");
    assert!(is_pct(&uptime["weightedAveragePercentage"]));

    let acps = n.ok("info.acps", json!({})).await;
    let acp = &acps["acps"]["247"];
    assert!(is_uint_str(&acp["supportWeight"]));
    assert!(acp["supporters"].as_array().unwrap().len() > 1);
    assert_eq!(acp["objectors"], json!([]));

    let peers = n.ok("info.peers", json!({})).await;
    let list = peers["peers"].as_array().unwrap();
    assert_eq!(peers["numPeers"], json!(list.len().to_string()));
    assert!(list.len() >= 4);
    let p0 = &list[0];
    assert_eq!(
        keys(p0),
        [
            "ip",
            "publicIP",
            "nodeID",
            "version",
            "upgradeTime",
            "lastSent",
            "lastReceived",
            "observedUptime",
            "trackedSubnets",
            "supportedACPs",
            "objectedACPs",
            "benched"
        ]
    );
    assert!(is_uint_str(&p0["observedUptime"]));
    let own = id["nodeID"].as_str().unwrap();
    assert!(list.iter().all(|p| p["nodeID"] != own));
    let one = n
        .ok("info.peers", json!({"nodeIDs": [p0["nodeID"], own]}))
        .await;
    assert_eq!(one["numPeers"], "1");
    assert_eq!(
        n.err("info.peers", json!({"nodeIDs": ["NodeID-bad"]}))
            .await,
        BAD_ARGS
    );

    let p = n.ok("info.getBlockchainID", json!({"alias": "P"})).await;
    assert_eq!(p["blockchainID"], EMPTY);
    let x = n.ok("info.getBlockchainID", json!({"alias": "X"})).await;
    let x_id = x["blockchainID"].as_str().unwrap().to_string();
    assert_eq!(
        n.ok("info.getBlockchainID", json!({"alias": "avm"})).await,
        x
    );
    assert_eq!(
        n.err("info.getBlockchainID", json!({"alias": "Q"})).await,
        "there is no ID with alias: Q"
    );
    assert_eq!(
        n.err("info.getBlockchainID", json!({})).await,
        "there is no ID with alias: "
    );

    assert_eq!(
        n.ok("info.isBootstrapped", json!({"chain": "P"})).await,
        json!({"isBootstrapped": true})
    );
    assert_eq!(
        n.ok("info.isBootstrapped", json!({"chain": x_id})).await,
        json!({"isBootstrapped": true})
    );
    assert_eq!(
        n.err("info.isBootstrapped", json!({})).await,
        "argument 'chain' not given"
    );
    assert_eq!(
        n.err("info.isBootstrapped", json!({"chain": "Q"})).await,
        "there is no chain with alias/ID 'Q'"
    );
    assert_eq!(
        n.err("info.isBootstrapped", json!({"chain": 5})).await,
        BAD_ARGS
    );
}

#[tokio::test]
async fn params_decode_like_gorilla() {
    let n = Node::start().await;
    // Absent, null, [] and [{...}] params are fine; keys match case-insensitively, last wins.
    let path = "/ext/bc/P";
    let v = n.raw(path, "platform.getHeight", Value::Null).await;
    assert!(v["result"]["height"].is_string());
    let v = n.raw(path, "platform.getHeight", json!([])).await;
    assert!(v["result"]["height"].is_string());
    let v = n.raw(path, "platform.getHeight", json!(5)).await;
    assert_eq!(v["error"]["message"], BAD_ARGS);
    let r = n
        .ok(
            "platform.getBlockByHeight",
            json!([{"HEIGHT": 3, "Height": "4"}, 9]),
        )
        .await;
    assert!(r["block"].as_str().unwrap().starts_with("0x"));
    let j = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": "4", "encoding": "JSON"}),
        )
        .await;
    assert_eq!(j["block"]["height"], 4);
    for bad in [
        json!({"height": "abc"}),
        json!({"height": -1}),
        json!({"height": 1.5}),
        json!({"height": "18446744073709551616"}),
        json!({"height": 1, "encoding": "base64"}),
        json!({"height": 1, "encoding": 5}),
        json!([5, "hex"]),
        json!("x"),
    ] {
        assert_eq!(n.err("platform.getBlockByHeight", bad).await, BAD_ARGS);
    }
    assert_eq!(
        n.err("platform.getTx", json!({"txID": "zz"})).await,
        BAD_ARGS
    );
    assert_eq!(n.err("platform.getTx", json!({"txID": 5})).await, BAD_ARGS);
    // A bad known field fails even when the method would not need it.
    assert_eq!(
        n.err("platform.getCurrentValidators", json!({"subnetID": "nope"}))
            .await,
        BAD_ARGS
    );
    // Unknown keys are ignored.
    let r = n
        .ok("platform.getMinStake", json!({"whatever": [1, 2]}))
        .await;
    assert!(is_uint_str(&r["minValidatorStake"]));
}

#[tokio::test]
async fn blocks_and_txs_in_hex_and_json() {
    let n = Node::start().await;
    let tip = n.height().await;
    assert!(tip >= 1000);

    let hex = n
        .ok("platform.getBlockByHeight", json!({"height": 1000}))
        .await;
    assert_eq!(hex["encoding"], "hex");
    let hex_block = hex["block"].as_str().unwrap();
    assert!(hex_block.starts_with("0x0000"));
    let hexnc = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": 1000, "encoding": "hexnc"}),
        )
        .await;
    assert_eq!(hexnc["encoding"], "hexnc");
    assert_eq!(hexnc["block"].as_str().unwrap().len() + 8, hex_block.len());

    let j = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": "1000", "encoding": "json"}),
        )
        .await;
    assert_eq!(j["encoding"], "json");
    let b = &j["block"];
    assert_eq!(keys(b), ["time", "parentID", "height", "id", "txs"]);
    assert_eq!(b["height"], 1000);
    assert!(b["time"].is_u64());
    let block_id = b["id"].as_str().unwrap().to_string();

    // getBlock by ID, both encodings, same content.
    let by_id = n
        .ok("platform.getBlock", json!({"blockID": block_id}))
        .await;
    assert_eq!(by_id["block"], hex["block"]);
    let by_id_json = n
        .ok(
            "platform.getBlock",
            json!({"blockID": block_id, "encoding": "json"}),
        )
        .await;
    assert_eq!(by_id_json["block"], j["block"]);
    // The parent link holds.
    let parent = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": 999, "encoding": "json"}),
        )
        .await;
    assert_eq!(parent["block"]["id"], b["parentID"]);

    // Txs inside the block JSON.
    let tx = &b["txs"][0];
    assert_eq!(keys(tx), ["unsignedTx", "credentials", "id"]);
    let u = &tx["unsignedTx"];
    assert_eq!(u["networkID"], 12345);
    assert_eq!(u["blockchainID"], EMPTY);
    let input = &u["inputs"][0];
    assert_eq!(
        keys(input),
        ["txID", "outputIndex", "assetID", "fxID", "input"]
    );
    assert!(input["input"]["amount"].is_u64());
    assert_eq!(input["input"]["signatureIndices"], json!([0]));
    let out = &u["outputs"][0]["output"];
    assert!(out["amount"].is_u64() && out["locktime"].is_u64() && out["threshold"].is_u64());
    assert!(out["addresses"][0]
        .as_str()
        .unwrap()
        .starts_with("P-local1"));
    assert_eq!(
        tx["credentials"][0]["signatures"][0]
            .as_str()
            .unwrap()
            .len(),
        2 + 130
    );

    let tx_id = tx["id"].as_str().unwrap();
    let t_hex = n.ok("platform.getTx", json!({"txID": tx_id})).await;
    assert!(t_hex["tx"].as_str().unwrap().starts_with("0x0000"));
    assert_eq!(t_hex["encoding"], "hex");
    let t_json = n
        .ok("platform.getTx", json!({"txID": tx_id, "encoding": "json"}))
        .await;
    assert_eq!(t_json["tx"], *tx);
    assert_eq!(
        n.ok("platform.getTxStatus", json!({"txID": tx_id})).await,
        json!({"status": "Committed"})
    );

    // Not found texts.
    let missing = "2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w";
    assert_eq!(
        n.err("platform.getBlock", json!({"blockID": missing}))
            .await,
        format!("couldn't get block with id {missing}: not found")
    );
    assert_eq!(
        n.err("platform.getBlockByHeight", json!({"height": 999_999_999}))
            .await,
        "couldn't get block at height 999999999: not found"
    );
    assert_eq!(
        n.err("platform.getTx", json!({"txID": missing})).await,
        "couldn't get tx: not found"
    );
    assert_eq!(
        n.ok("platform.getTxStatus", json!({"txID": missing})).await,
        json!({"status": "Unknown"})
    );
    assert_eq!(
        n.err("platform.getBlock", json!({"blockID": "x"})).await,
        BAD_ARGS
    );
}

#[tokio::test]
async fn chain_advances_and_new_blocks_are_fetchable() {
    let n = Node::start().await;
    let h0 = n.height().await;
    let ts0 = n.ok("platform.getTimestamp", json!({})).await;
    let fee0 = n.ok("platform.getFeeState", json!({})).await;
    let mut h1 = h0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        h1 = n.height().await;
        // Seven blocks at 200 ms span more than a second, so the chain time moves too.
        if h1 >= h0 + 7 {
            break;
        }
    }
    assert!(h1 >= h0 + 7, "height did not grow: {h0} -> {h1}");
    let b = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": h1, "encoding": "json"}),
        )
        .await;
    assert_eq!(b["block"]["height"], h1);
    let prev = n
        .ok(
            "platform.getBlockByHeight",
            json!({"height": h1 - 1, "encoding": "json"}),
        )
        .await;
    assert_eq!(b["block"]["parentID"], prev["block"]["id"]);
    let ts1 = n.ok("platform.getTimestamp", json!({})).await;
    assert_ne!(ts0, ts1);
    assert_ne!(fee0, n.ok("platform.getFeeState", json!({})).await);
    let supply = n.ok("platform.getCurrentSupply", json!({})).await;
    assert!(is_uint_str(&supply["supply"]) && is_uint_str(&supply["height"]));
}

#[tokio::test]
async fn same_seed_gives_identical_blocks() {
    let a = Node::start_with(42).await;
    let b = Node::start_with(42).await;
    let c = Node::start_with(43).await;
    for h in [0u64, 1, 500, 1000] {
        let x = a
            .ok("platform.getBlockByHeight", json!({"height": h}))
            .await;
        let y = b
            .ok("platform.getBlockByHeight", json!({"height": h}))
            .await;
        assert_eq!(x, y, "height {h}");
        let z = c
            .ok("platform.getBlockByHeight", json!({"height": h}))
            .await;
        assert_ne!(x, z);
    }
    let va = a.ok("platform.getCurrentValidators", json!({})).await;
    let vb = b.ok("platform.getCurrentValidators", json!({})).await;
    assert_eq!(
        va["validators"].as_array().unwrap().len(),
        vb["validators"].as_array().unwrap().len()
    );
}

#[tokio::test]
async fn get_utxos_pages_through_a_big_address_without_loss() {
    // listAddresses names the demo user's addresses: a release that still has the keystore.
    let n = Node::start_version(7, KEYSTORE).await;
    let addrs = n
        .ok(
            "platform.listAddresses",
            json!({"username": "demo", "password": "Sn0wg4te-demo!"}),
        )
        .await;
    let big = addrs["addresses"][0].as_str().unwrap().to_string();
    let balance = n
        .ok("platform.getBalance", json!({"addresses": [big]}))
        .await;
    let expected = balance["utxoIDs"].as_array().unwrap().len();
    assert!(expected > 2500, "{expected}");

    let mut all = HashSet::new();
    let mut start: Option<Value> = None;
    let mut pages = 0;
    let mut total = 0;
    loop {
        pages += 1;
        assert!(pages < 20, "pagination did not finish");
        let mut params = json!({"addresses": [big], "limit": 1000});
        if let Some(s) = &start {
            params["startIndex"] = s.clone();
        }
        let r = n.ok("platform.getUTXOs", params).await;
        assert_eq!(r["encoding"], "hex");
        let fetched: usize = r["numFetched"].as_str().unwrap().parse().unwrap();
        let utxos = r["utxos"].as_array().unwrap();
        assert_eq!(fetched, utxos.len());
        total += fetched;
        for u in utxos {
            assert!(u.as_str().unwrap().starts_with("0x0000"));
            all.insert(u.as_str().unwrap().to_string());
        }
        assert_eq!(r["endIndex"]["address"], big);
        start = Some(r["endIndex"].clone());
        if fetched < 1000 {
            break;
        }
    }
    assert!(pages >= 3);
    assert_eq!(all.len(), expected);
    assert_eq!(total, expected, "pages overlapped");

    // Default / oversized limit is 1024.
    let r = n
        .ok("platform.getUTXOs", json!({"addresses": [big], "limit": 0}))
        .await;
    assert_eq!(r["numFetched"], "1024");
    let r = n
        .ok(
            "platform.getUTXOs",
            json!({"addresses": [big], "limit": "5000"}),
        )
        .await;
    assert_eq!(r["numFetched"], "1024");
    // A small address, and an address with nothing.
    let small = addrs["addresses"][3].as_str().unwrap();
    let r = n
        .ok(
            "platform.getUTXOs",
            json!({"addresses": [small], "limit": 5}),
        )
        .await;
    assert!(r["numFetched"].as_str().unwrap().parse::<u32>().unwrap() >= 1);
    // Atomic UTXOs from X: none, end index is the empty ID.
    let r = n
        .ok(
            "platform.getUTXOs",
            json!({"addresses": [small], "sourceChain": "X"}),
        )
        .await;
    assert_eq!(r["numFetched"], "0");
    assert_eq!(r["endIndex"]["utxo"], EMPTY);
    // Errors.
    assert_eq!(
        n.err("platform.getUTXOs", json!({"addresses": []})).await,
        "no addresses provided"
    );
    let many: Vec<String> = (0..1025).map(|_| big.clone()).collect();
    assert_eq!(
        n.err("platform.getUTXOs", json!({"addresses": many})).await,
        "number of addresses given, 1025, exceeds maximum, 1024"
    );
    assert_eq!(
        n.err(
            "platform.getUTXOs",
            json!({"addresses": [big], "sourceChain": "Q"})
        )
        .await,
        "problem parsing source chainID \"Q\": there is no ID with alias: Q"
    );
    assert!(n
        .err(
            "platform.getUTXOs",
            json!({"addresses": [big], "startIndex": {"address": big, "utxo": "zz"}})
        )
        .await
        .starts_with("couldn't parse start index utxo: "));
    assert!(n
        .err("platform.getUTXOs", json!({"addresses": ["P-local1nope"]}))
        .await
        .starts_with("couldn't parse address"));
    assert_eq!(
        n.err(
            "platform.getUTXOs",
            json!({"addresses": [big], "limit": -1})
        )
        .await,
        BAD_ARGS
    );
    assert_eq!(
        n.err(
            "platform.getUTXOs",
            json!({"addresses": [big], "startIndex": 5})
        )
        .await,
        BAD_ARGS
    );
}

#[tokio::test]
async fn balances_stake_and_rewards() {
    let n = Node::start_version(7, KEYSTORE).await;
    let addrs = n
        .ok(
            "platform.listAddresses",
            json!({"username": "demo", "password": "Sn0wg4te-demo!"}),
        )
        .await;
    let a3 = addrs["addresses"][3].as_str().unwrap();
    let bal = n
        .ok("platform.getBalance", json!({"addresses": [a3]}))
        .await;
    assert_eq!(
        keys(&bal),
        [
            "balance",
            "unlocked",
            "lockedStakeable",
            "lockedNotStakeable",
            "balances",
            "unlockeds",
            "lockedStakeables",
            "lockedNotStakeables",
            "utxoIDs"
        ]
    );
    assert!(is_uint_str(&bal["balance"]));
    assert_ne!(bal["lockedNotStakeable"], "0");
    let r = &bal["utxoIDs"][0];
    assert!(r["txID"].is_string() && r["outputIndex"].is_u64());
    let empty = n.ok("platform.getBalance", json!({"addresses": []})).await;
    assert_eq!(empty["balance"], "0");
    assert_eq!(empty["utxoIDs"], Value::Null);
    assert_eq!(empty["balances"], json!({}));

    // Stake: validators' stake owners hold staked outputs.
    let vals = n.ok("platform.getCurrentValidators", json!({})).await;
    let owner = vals["validators"][0]["validationRewardOwner"]["addresses"][0].clone();
    let st = n
        .ok(
            "platform.getStake",
            json!({"addresses": [owner], "validatorsOnly": false}),
        )
        .await;
    assert_eq!(
        keys(&st),
        ["staked", "stakeds", "stakedOutputs", "encoding"]
    );
    assert!(is_uint_str(&st["staked"]));
    let none = n.ok("platform.getStake", json!({"addresses": [a3]})).await;
    assert_eq!(none["staked"], "0");
    assert_eq!(
        n.err(
            "platform.getStake",
            json!({"addresses": [a3], "validatorsOnly": "yes"})
        )
        .await,
        BAD_ARGS
    );

    // Reward UTXOs: a finished staker has them, a current one has none.
    let ended = {
        let chain = n.node.network().chain().read();
        snowgate::devnode::chain::codec::id_str(&chain.state().ended[0].tx_id)
    };
    let rw = n
        .ok("platform.getRewardUTXOs", json!({"txID": ended}))
        .await;
    assert!(rw["numFetched"].as_str().unwrap().parse::<u32>().unwrap() >= 1);
    assert!(rw["utxos"][0].as_str().unwrap().starts_with("0x"));
    let current = vals["validators"][0]["txID"].clone();
    let rw = n
        .ok("platform.getRewardUTXOs", json!({"txID": current}))
        .await;
    assert_eq!(
        rw,
        json!({"numFetched": "0", "utxos": [], "encoding": "hex"})
    );
}

#[tokio::test]
async fn validators_subnets_and_chains() {
    let n = Node::start().await;
    let vals = n.ok("platform.getCurrentValidators", json!({})).await;
    let list = vals["validators"].as_array().unwrap();
    assert!(list.len() >= 10);
    let v0 = &list[0];
    for f in [
        "txID",
        "startTime",
        "endTime",
        "weight",
        "potentialReward",
        "delegatorCount",
        "delegatorWeight",
        "accruedDelegateeReward",
    ] {
        assert!(v0[f].is_string(), "{f}");
    }
    assert!(is_uint_str(&v0["weight"]));
    assert!(is_pct(&v0["delegationFee"]) && is_pct(&v0["uptime"]));
    assert!(v0["connected"].is_boolean());
    assert!(v0.get("delegators").is_none());
    assert!(list.iter().any(|v| v.get("signer").is_some()));
    assert!(list.iter().any(|v| v.get("signer").is_none()));
    let with_delegators = list.iter().find(|v| v["delegatorCount"] != "0").unwrap();
    let one = n
        .ok(
            "platform.getCurrentValidators",
            json!({"nodeIDs": [with_delegators["nodeID"]]}),
        )
        .await;
    let d = &one["validators"][0]["delegators"][0];
    assert_eq!(
        keys(d),
        [
            "txID",
            "startTime",
            "endTime",
            "weight",
            "nodeID",
            "rewardOwner",
            "potentialReward"
        ]
    );
    let unknown = n
        .ok(
            "platform.getCurrentValidators",
            json!({"nodeIDs": ["NodeID-7Xhw2mDxuDS44j42TCB6U5579esbSt3Lg"]}),
        )
        .await;
    assert_eq!(unknown, json!({"validators": []}));

    // Subnets: two permissioned, one L1, plus the primary network.
    let subnets = n.ok("platform.getSubnets", json!({})).await;
    let subs = subnets["subnets"].as_array().unwrap();
    assert_eq!(subs.len(), 4);
    assert_eq!(
        n.ok("platform.getSubnets", json!({"ids": []})).await,
        subnets
    );
    assert_eq!(
        subs[3],
        json!({"id": EMPTY, "controlKeys": [], "threshold": "0"})
    );
    let mut l1_id = String::new();
    let mut perm_id = String::new();
    for s in &subs[..3] {
        let id = s["id"].as_str().unwrap();
        let info = n.ok("platform.getSubnet", json!({"subnetID": id})).await;
        assert_eq!(
            keys(&info),
            [
                "isPermissioned",
                "controlKeys",
                "threshold",
                "locktime",
                "subnetTransformationTxID",
                "conversionID",
                "managerChainID",
                "managerAddress"
            ]
        );
        if info["isPermissioned"] == false {
            l1_id = id.to_string();
            assert!(info["managerAddress"].as_str().unwrap().starts_with("0x"));
        } else {
            perm_id = id.to_string();
            assert_eq!(info["managerAddress"], Value::Null);
        }
    }
    assert!(!l1_id.is_empty() && !perm_id.is_empty());
    let only = n
        .ok(
            "platform.getSubnets",
            json!({"ids": [perm_id, "2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w"]}),
        )
        .await;
    assert_eq!(only["subnets"].as_array().unwrap().len(), 1);
    assert_eq!(
        n.err("platform.getSubnet", json!({})).await,
        "the primary network isn't a subnet"
    );
    assert_eq!(
        n.err("platform.getSubnet", json!({"subnetID": EMPTY}))
            .await,
        "the primary network isn't a subnet"
    );
    assert_eq!(
        n.err(
            "platform.getSubnet",
            json!({"subnetID": "2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w"})
        )
        .await,
        "not found"
    );

    // Permissioned subnet validators: the short shape.
    let pv = n
        .ok(
            "platform.getCurrentValidators",
            json!({"subnetID": perm_id}),
        )
        .await;
    assert_eq!(
        keys(&pv["validators"][0]),
        ["txID", "startTime", "endTime", "weight", "nodeID"]
    );
    // L1 validators: the L1 shape, and getL1Validator.
    let lv = n
        .ok("platform.getCurrentValidators", json!({"subnetID": l1_id}))
        .await;
    let l0 = &lv["validators"][0];
    assert_eq!(
        keys(l0),
        [
            "nodeID",
            "weight",
            "startTime",
            "validationID",
            "publicKey",
            "remainingBalanceOwner",
            "deactivationOwner",
            "minNonce",
            "balance"
        ]
    );
    let one = n
        .ok(
            "platform.getL1Validator",
            json!({"validationID": l0["validationID"]}),
        )
        .await;
    assert_eq!(one["subnetID"], l1_id.as_str());
    assert!(
        is_uint_str(&one["height"])
            && is_uint_str(&one["balance"])
            && is_uint_str(&one["minNonce"])
    );
    assert_eq!(one["remainingBalanceOwner"]["threshold"], "1");
    let missing = "2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w";
    assert_eq!(
        n.err("platform.getL1Validator", json!({"validationID": missing}))
            .await,
        format!("fetching L1 validator \"{missing}\": not found")
    );

    // Blockchains, validates / validatedBy / status.
    let chains = n.ok("platform.getBlockchains", json!({})).await;
    let cl = chains["blockchains"].as_array().unwrap();
    assert_eq!(keys(&cl[0]), ["id", "name", "subnetID", "vmID"]);
    assert_eq!(cl[cl.len() - 2]["name"], "X-Chain");
    assert_eq!(cl[cl.len() - 1]["name"], "C-Chain");
    let sub_chain = cl
        .iter()
        .find(|c| c["subnetID"] == perm_id.as_str())
        .unwrap();
    assert_eq!(
        n.ok(
            "platform.validatedBy",
            json!({"blockchainID": sub_chain["id"]})
        )
        .await,
        json!({"subnetID": perm_id})
    );
    assert_eq!(
        n.ok("platform.validatedBy", json!({"blockchainID": EMPTY}))
            .await,
        json!({"subnetID": EMPTY})
    );
    assert_eq!(
        n.err("platform.validatedBy", json!({"blockchainID": missing}))
            .await,
        format!("problem retrieving blockchain \"{missing}\": not found")
    );
    let v = n
        .ok("platform.validates", json!({"subnetID": perm_id}))
        .await;
    assert_eq!(v["blockchainIDs"], json!([sub_chain["id"]]));
    let v = n.ok("platform.validates", json!({})).await;
    assert_eq!(v["blockchainIDs"].as_array().unwrap().len(), 2);
    assert_eq!(
        n.err("platform.validates", json!({"subnetID": missing}))
            .await,
        format!("problem retrieving subnet \"{missing}\": not found")
    );
    assert_eq!(
        n.ok("platform.getBlockchainStatus", json!({"blockchainID": "X"}))
            .await,
        json!({"status": "Validating"})
    );
    assert_eq!(
        n.ok(
            "platform.getBlockchainStatus",
            json!({"blockchainID": sub_chain["id"]})
        )
        .await,
        json!({"status": "Created"})
    );
    assert_eq!(
        n.ok(
            "platform.getBlockchainStatus",
            json!({"blockchainID": missing})
        )
        .await,
        json!({"status": "Unknown"})
    );
    assert_eq!(
        n.err("platform.getBlockchainStatus", json!({})).await,
        "argument 'blockchainID' not given"
    );
    assert!(n
        .err(
            "platform.getBlockchainStatus",
            json!({"blockchainID": "zz"})
        )
        .await
        .starts_with("problem parsing blockchainID \"zz\": "));

    // getValidatorsAt: flat map, numeric or quoted height, "proposed", unfinalized height.
    let at = n
        .ok("platform.getValidatorsAt", json!({"height": 1000}))
        .await;
    let (node, entry) = at.as_object().unwrap().iter().next().unwrap();
    assert!(node.starts_with("NodeID-"));
    assert!(is_uint_str(&entry["weight"]));
    assert!(entry["publicKey"].is_string() || entry["publicKey"].is_null());
    assert_eq!(
        n.ok("platform.getValidatorsAt", json!({"height": "1000"}))
            .await,
        at
    );
    let early = n
        .ok("platform.getValidatorsAt", json!({"height": 10}))
        .await;
    assert!(early.as_object().unwrap().len() < at.as_object().unwrap().len());
    let proposed = n
        .ok("platform.getValidatorsAt", json!({"height": "proposed"}))
        .await;
    assert!(!proposed.as_object().unwrap().is_empty());
    let l1set = n
        .ok(
            "platform.getValidatorsAt",
            json!({"height": 5, "subnetID": l1_id}),
        )
        .await;
    assert_eq!(l1set.as_object().unwrap().len(), 4);
    let e = n
        .err("platform.getValidatorsAt", json!({"height": 999_999_999}))
        .await;
    assert!(e.starts_with(&format!(
        "failed to get validator set at 999999999: failed to fetch validator set at unfinalized height with SubnetID = {EMPTY}: current P-chain height ("
    )), "{e}");
    assert!(e.ends_with(") < requested P-Chain height (999999999)"));
    assert_eq!(
        n.err("platform.getValidatorsAt", json!({"height": u64::MAX}))
            .await,
        BAD_ARGS
    );
    assert_eq!(
        n.err("platform.getValidatorsAt", json!({"height": "later"}))
            .await,
        BAD_ARGS
    );

    // sampleValidators: sorted, stake-weighted, bounded by the set size.
    let s = n
        .ok("platform.sampleValidators", json!({"size": "3"}))
        .await;
    let picked: Vec<&str> = s["validators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(picked.len(), 3);
    assert_eq!(picked.iter().collect::<HashSet<_>>().len(), 3);
    assert_eq!(
        n.ok("platform.sampleValidators", json!({"size": 0})).await,
        json!({"validators": []})
    );
    assert_eq!(
        n.err("platform.sampleValidators", json!({"size": 500}))
            .await,
        format!("sampling {EMPTY} errored with insufficient weight")
    );
    assert_eq!(
        n.err("platform.sampleValidators", json!({"size": 70000}))
            .await,
        BAD_ARGS
    );

    // Stake totals, minimums, asset.
    let ts = n.ok("platform.getTotalStake", json!({})).await;
    assert_eq!(keys(&ts), ["stake", "weight"]);
    let ts = n
        .ok("platform.getTotalStake", json!({"subnetID": perm_id}))
        .await;
    assert_eq!(keys(&ts), ["weight"]);
    let ms = n.ok("platform.getMinStake", json!({})).await;
    assert_eq!(
        ms,
        json!({"minValidatorStake": "2000000000000", "minDelegatorStake": "25000000000"})
    );
    assert_eq!(
        n.err("platform.getMinStake", json!({"subnetID": perm_id}))
            .await,
        format!("failed fetching subnet transformation for {perm_id}: not found")
    );
    let asset = n.ok("platform.getStakingAssetID", json!({})).await;
    assert!(asset["assetID"].is_string());
    assert_eq!(
        n.err("platform.getStakingAssetID", json!({"subnetID": perm_id}))
            .await,
        format!("failed fetching subnet transformation for {perm_id}: not found")
    );
    assert_eq!(
        n.err("platform.getCurrentSupply", json!({"subnetID": perm_id}))
            .await,
        "fetching current supply failed: not found"
    );

    // Methods removed in v1.11.3, served by a node of the release before.
    let n = Node::start_version(7, PENDING).await;
    let pend = n.ok("platform.getPendingValidators", json!({})).await;
    assert_eq!(keys(&pend), ["validators", "delegators"]);
    assert_eq!(
        keys(&pend["validators"][0]),
        [
            "txID",
            "startTime",
            "endTime",
            "stakeAmount",
            "nodeID",
            "delegationFee",
            "connected",
            "signer"
        ]
    );
    assert_eq!(
        keys(&pend["delegators"][0]),
        ["txID", "startTime", "endTime", "stakeAmount", "nodeID"]
    );
    let far = 4_000_000_000u64;
    let m = n
        .ok(
            "platform.getMaxStakeAmount",
            json!({"nodeID": v0["nodeID"], "startTime": far, "endTime": far + 10}),
        )
        .await;
    assert!(is_uint_str(&m["amount"]));
    assert_eq!(
        n.err(
            "platform.getMaxStakeAmount",
            json!({"nodeID": v0["nodeID"], "startTime": 10, "endTime": 5})
        )
        .await,
        "start time must be before end time"
    );
}

#[tokio::test]
async fn fees_time_and_heights() {
    let n = Node::start().await;
    let fc = n.ok("platform.getFeeConfig", json!({})).await;
    assert_eq!(fc["weights"], json!([1, 1000, 1000, 4]));
    for f in [
        "maxCapacity",
        "maxPerSecond",
        "targetPerSecond",
        "minPrice",
        "excessConversionConstant",
    ] {
        assert!(fc[f].is_u64(), "{f}");
    }
    let fs = n.ok("platform.getFeeState", json!({})).await;
    assert_eq!(keys(&fs), ["capacity", "excess", "price", "timestamp"]);
    assert!(fs["capacity"].is_u64() && fs["price"].is_u64());
    let vc = n.ok("platform.getValidatorFeeConfig", json!({})).await;
    assert_eq!(
        keys(&vc),
        ["capacity", "target", "minPrice", "excessConversionConstant"]
    );
    let vs = n.ok("platform.getValidatorFeeState", json!({})).await;
    assert_eq!(keys(&vs), ["excess", "price", "timestamp"]);
    let t = n.ok("platform.getTimestamp", json!({})).await;
    let ts = t["timestamp"].as_str().unwrap();
    assert!(ts.len() == 20 && ts.ends_with('Z') && &ts[10..11] == "T");
    let h = n.height().await;
    let p = n.ok("platform.getProposedHeight", json!({})).await;
    let ph: u64 = p["height"].as_str().unwrap().parse().unwrap();
    assert!(ph <= h);
}

#[tokio::test]
async fn keystore_methods_need_the_demo_user() {
    let n = Node::start_version(7, KEYSTORE).await;
    let creds = json!({"username": "demo", "password": "Sn0wg4te-demo!"});
    let list = n.ok("platform.listAddresses", creds.clone()).await;
    let addr = list["addresses"][0].as_str().unwrap();
    assert!(addr.starts_with("P-local1"));
    let key = n
        .ok(
            "platform.exportKey",
            json!({"username": "demo", "password": "Sn0wg4te-demo!", "address": addr}),
        )
        .await;
    assert!(key["privateKey"]
        .as_str()
        .unwrap()
        .starts_with("PrivateKey-"));
    assert_eq!(
        n.err(
            "platform.listAddresses",
            json!({"username": "demo", "password": "wrong"})
        )
        .await,
        "incorrect password: user \"demo\""
    );
    assert_eq!(
        n.err("platform.listAddresses", json!({})).await,
        "empty username"
    );
    let other = n.ok("platform.getBlockchains", json!({})).await;
    let _ = other;
    assert!(n
        .err(
            "platform.exportKey",
            json!({"username": "demo", "password": "Sn0wg4te-demo!", "address": "P-local1xyz"})
        )
        .await
        .starts_with("couldn't parse"));
}

#[tokio::test]
async fn issue_tx_lifecycle() {
    let n = Node::start().await;
    let (good, other) = {
        let chain = n.node.network().chain().read();
        (chain.sample_tx_hex(1), chain.sample_tx_hex(2))
    };
    assert_ne!(good, other);
    let r = n
        .ok("platform.issueTx", json!({"tx": good, "encoding": "hex"}))
        .await;
    let id = r["txID"].as_str().unwrap().to_string();
    // Re-issuing gives the same ID.
    assert_eq!(
        n.ok("platform.issueTx", json!({"tx": good})).await["txID"],
        id.as_str()
    );
    let mut status = n.ok("platform.getTxStatus", json!({"txID": id})).await;
    // The tx may already have been committed if a block landed in between.
    if status["status"] == "Processing" {
        assert_eq!(
            n.err("platform.getTx", json!({"txID": id})).await,
            "couldn't get tx: not found"
        );
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            status = n.ok("platform.getTxStatus", json!({"txID": id})).await;
            if status["status"] != "Processing" {
                break;
            }
        }
    }
    assert_eq!(status, json!({"status": "Committed"}));
    let tx = n.ok("platform.getTx", json!({"txID": id})).await;
    assert_eq!(tx["tx"], good.as_str());
    let tj = n
        .ok("platform.getTx", json!({"txID": id, "encoding": "json"}))
        .await;
    assert_eq!(tj["tx"]["id"], id.as_str());
    assert_eq!(
        n.ok("platform.issueTx", json!({"tx": good})).await["txID"],
        id.as_str()
    );

    // Malformed: hex is fine but the bytes are no tx -> error, and Dropped with a reason.
    let junk = {
        let bytes = b"definitely not a transaction";
        snowgate::devnode::chain::codec::hex_checksum(bytes)
    };
    let e = n.err("platform.issueTx", json!({"tx": junk})).await;
    assert!(e.starts_with("couldn't parse tx: "), "{e}");
    // Its ID is sha256 of the bytes; find it through the status.
    let junk_id = snowgate::devnode::chain::codec::id_str(
        &snowgate::devnode::chain::codec::sha256(b"definitely not a transaction"),
    );
    let st = n.ok("platform.getTxStatus", json!({"txID": junk_id})).await;
    assert_eq!(st["status"], "Dropped");
    assert!(st["reason"].as_str().unwrap().contains("couldn't parse tx"));
    assert_eq!(keys(&st), ["status", "reason"]);

    // Encoding errors.
    assert_eq!(
        n.err("platform.issueTx", json!({"tx": "abcd"})).await,
        "problem decoding transaction: missing 0x prefix to hex encoding"
    );
    let mut bad = other.clone();
    let last = bad.pop().unwrap();
    bad.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        n.err("platform.issueTx", json!({"tx": bad})).await,
        "problem decoding transaction: invalid input checksum"
    );
    assert_eq!(n.err("platform.issueTx", json!({"tx": 5})).await, BAD_ARGS);
}
