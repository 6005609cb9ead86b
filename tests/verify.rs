//! Believe no single answer (issue 26, `[cache] verify`): a node that answers another block or
//! transaction for an ID, or the block of another height, is caught before its answer is
//! returned or kept. The client gets the true answer from another node, nothing wrong reaches the
//! cache (a second call is a hit with the true bytes) nor the fleet's Redis (read directly, and
//! from a second instance), and the liar is out as `lying` (`/ext/health`, the status page, a
//! state change) until its health checks bring it back. With `verify = "off"` the lie is served
//! and kept, as before: the same setup fails.
//!
//! The liar is the only primary and the honest nodes are fallbacks, so the liar is always asked
//! first: no test depends on which node the balancer happens to pick.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use snowgate::config::upstream::Role;
use snowgate::config::{Config, Verify};
use snowgate::devnode::{DevNode, Faults};
use support::fleet::{metric, wait_for_keys, Fleet, CACHE_KEYS, SLOW_CHAIN};
use support::redis::{RedisServer, SharedRedis};
use support::window::{row, status_json};
use support::{call, get_metrics, post, Cluster, Reply, ADMIN_KEY};

/// The liar's name: the first node, the only primary.
const LIAR: &str = "node-0";

/// The settings of every gateway here: `verify`, nodes after the first as fallbacks, and health
/// checks far apart (a liar stays out for the whole test unless the test checks it itself).
fn liar_first(config: &mut Config, verify: Verify) {
    config.cache.verify = verify;
    config.health.interval = Duration::from_secs(60);
    for u in config.upstreams.iter_mut().skip(1) {
        u.role = Role::Fallback;
    }
}

fn lie(node: &DevNode) {
    node.control().set_faults(Faults {
        lie: true,
        ..Faults::default()
    });
}

/// `n` devnodes, the first a liar, behind a gateway set by [`liar_first`].
async fn liar_cluster(n: usize, verify: Verify) -> Cluster {
    let c = Cluster::start(n, SLOW_CHAIN, |config| liar_first(config, verify)).await;
    lie(&c.nodes[0]);
    c
}

/// A P-chain call straight to a node, not counted against the gateway's calls.
async fn direct(node: &DevNode, method: &str, params: &str) -> Reply {
    let r = post(&format!("{}/ext/bc/P", node.url()), &call(method, params)).await;
    node.control().reset_calls();
    r
}

async fn p(base: &str, method: &str, params: &str) -> Reply {
    post(&format!("{base}/ext/bc/P"), &call(method, params)).await
}

/// The raw `result` of an answer body, as the node wrote it.
fn result_of(reply: &Reply) -> &[u8] {
    let rest = reply
        .body
        .strip_prefix(r#"{"jsonrpc":"2.0","result":"#)
        .unwrap_or_else(|| panic!("not a result: {}", reply.body));
    &rest.as_bytes()[..rest.rfind(r#","id":"#).unwrap()]
}

fn x_cache(r: &Reply) -> &str {
    r.header("x-cache").unwrap_or("-")
}

/// The block at `height` as an honest node names it: its ID and its first tx's ID.
async fn ids_at(honest: &DevNode, height: u64) -> (String, String) {
    let params = format!(r#"{{"height":{height},"encoding":"json"}}"#);
    let block = direct(honest, "platform.getBlockByHeight", &params)
        .await
        .json()["result"]["block"]
        .clone();
    let id = |v: &Value| v.as_str().unwrap().to_string();
    (id(&block["id"]), id(&block["txs"][0]["id"]))
}

/// The calls the liar is caught on: each method, in hex and in json.
async fn cases(honest: &DevNode, height: u64) -> Vec<(&'static str, String)> {
    let (block, tx) = ids_at(honest, height).await;
    let mut out = Vec::new();
    for enc in ["hex", "json"] {
        out.push((
            "platform.getBlock",
            format!(r#"{{"blockID":"{block}","encoding":"{enc}"}}"#),
        ));
        out.push((
            "platform.getTx",
            format!(r#"{{"txID":"{tx}","encoding":"{enc}"}}"#),
        ));
        out.push((
            "platform.getBlockByHeight",
            format!(r#"{{"height":{height},"encoding":"{enc}"}}"#),
        ));
    }
    out
}

/// The entry for `name` in `GET /ext/health` of the instance at `base`.
async fn health_of(base: &str, name: &str) -> Value {
    let text = support::get_text(&format!("{base}/ext/health")).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    upstream_in(&v, name)
}

/// The entry for `name` in an `/ext/health` body.
fn upstream_in(health: &Value, name: &str) -> Value {
    let all = health["upstreams"].as_array().unwrap();
    let found = all.iter().find(|u| u["name"] == name);
    found
        .unwrap_or_else(|| panic!("no {name}: {health}"))
        .clone()
}

/// Polls `base`'s metrics (at most a minute) until `series` is at least `n`.
async fn metric_reaches(base: &str, series: &str, n: f64) {
    let start = Instant::now();
    loop {
        let value = metric(&get_metrics(base).await, series);
        if value >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{series} is {value} after 60 s, expected {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the answer of the call has been kept: at once when it was proved, once another
/// node seconded it otherwise.
async fn kept(base: &str, method: &str, params: &str) {
    let proved = !params.contains(r#""encoding":"json""#) && method != "platform.getBlockByHeight";
    if !proved {
        let series =
            format!(r#"snowgate_answer_checks_total{{method="{method}",result="agreed"}}"#);
        metric_reaches(base, &series, 1.0).await;
    }
}

#[tokio::test]
async fn a_lie_is_never_served_nor_kept_and_its_node_is_out_until_its_checks_bring_it_back() {
    let c = liar_cluster(3, Verify::Hash).await;
    let url = c.url();
    let pool = c.gateway.pool().clone();
    for (i, (method, params)) in cases(&c.nodes[1], 900).await.into_iter().enumerate() {
        let case = format!("{method} {params}");
        let truth = direct(&c.nodes[1], method, &params).await;
        let lie = direct(&c.nodes[0], method, &params).await;
        assert!(truth.json()["result"].is_object(), "{case}: {}", truth.body);
        assert_ne!(truth.body, lie.body, "{case}: the liar must lie");

        // The liar is asked first; its answer is refuted and another node's returned.
        let refuted =
            format!(r#"snowgate_answer_checks_total{{method="{method}",result="refuted"}}"#);
        let refuted_before = metric(&get_metrics(&url).await, &refuted);
        let first = p(&url, method, &params).await;
        assert_eq!(first.body, truth.body, "{case}");
        assert_eq!(x_cache(&first), "MISS", "{case}");
        assert_eq!(c.nodes[0].control().call_count(method), 1, "{case}");
        let liar = health_of(&url, LIAR).await;
        assert_eq!(liar["lying"], true, "{case}: {liar}");
        assert_eq!(liar["takesTraffic"], false, "{case}: {liar}");
        let why = liar["lastError"].as_str().unwrap_or_default();
        assert!(
            why.starts_with("wrong answer: ") && why.contains(method),
            "{why}"
        );

        // What is kept is the truth: the same call again is a hit with the true bytes, and no
        // node sees it.
        kept(&url, method, &params).await;
        let calls: u64 = c.nodes.iter().map(|n| n.control().call_count(method)).sum();
        let again = p(&url, method, &params).await;
        assert_eq!(x_cache(&again), "HIT", "{case}");
        assert_eq!(again.body, truth.body, "{case}");
        let after: u64 = c.nodes.iter().map(|n| n.control().call_count(method)).sum();
        assert_eq!(after, calls, "{case}: a hit reached a node");

        // Counted, and on the status page with why.
        let m = get_metrics(&url).await;
        assert_eq!(metric(&m, &refuted), refuted_before + 1.0, "{case}");
        let s = status_json(&url, Some(ADMIN_KEY)).await;
        assert_eq!(row(&s, LIAR)["state"], "lying", "{case}: {s}");
        let lied = s["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["state"] == "lying")
            .count();
        assert_eq!(lied, i + 1, "{case}: one event per lie");

        // Its checks bring it back (`[health] recovery_threshold`, 2): no longer lying.
        for _ in 0..2 {
            pool.check_once(0).await;
        }
        let back = health_of(&url, LIAR).await;
        assert!(back.get("lying").is_none(), "{case}: {back}");
        assert_eq!(back["takesTraffic"], true, "{case}: {back}");
        for n in &c.nodes {
            n.control().reset_calls();
        }
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn with_verify_off_the_lie_is_served_and_kept_as_before() {
    let c = liar_cluster(3, Verify::Off).await;
    let url = c.url();
    let (block, _) = ids_at(&c.nodes[1], 900).await;
    let params = format!(r#"{{"blockID":"{block}"}}"#);
    let truth = direct(&c.nodes[1], "platform.getBlock", &params).await;
    let lie = direct(&c.nodes[0], "platform.getBlock", &params).await;
    assert_ne!(truth.body, lie.body);
    let first = p(&url, "platform.getBlock", &params).await;
    assert_eq!(first.body, lie.body, "verify = off believes the first node");
    let again = p(&url, "platform.getBlock", &params).await;
    assert_eq!(
        (x_cache(&again), again.body.as_str()),
        ("HIT", lie.body.as_str())
    );
    assert!(health_of(&url, LIAR).await.get("lying").is_none());
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn one_fallbacks_word_is_served_but_never_kept_without_a_second_node() {
    // The liar and one fallback: once the liar is out, no node can second the fallback.
    let c = liar_cluster(2, Verify::Hash).await;
    let url = c.url();
    let (_, tx) = ids_at(&c.nodes[1], 900).await;
    let params = format!(r#"{{"txID":"{tx}","encoding":"json"}}"#);
    let truth = direct(&c.nodes[1], "platform.getTx", &params).await;
    let first = p(&url, "platform.getTx", &params).await;
    assert_eq!(first.body, truth.body);
    metric_reaches(
        &url,
        r#"snowgate_answer_checks_total{method="platform.getTx",result="unconfirmed"}"#,
        1.0,
    )
    .await;
    let again = p(&url, "platform.getTx", &params).await;
    assert_eq!(x_cache(&again), "MISS", "kept on one fallback's word");
    assert_eq!(again.body, truth.body);
    // A proved answer from the same fallback is kept on its own.
    let hex = format!(r#"{{"txID":"{tx}","encoding":"hex"}}"#);
    p(&url, "platform.getTx", &hex).await;
    assert_eq!(x_cache(&p(&url, "platform.getTx", &hex).await), "HIT");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn under_quorum_an_answer_is_kept_once_a_second_node_returns_the_same_bytes() {
    let c = Cluster::start(2, SLOW_CHAIN, |config| {
        config.cache.verify = Verify::Quorum;
    })
    .await;
    support::every_node_takes_traffic(&c.gateway).await;
    let url = c.url();
    let (block, _) = ids_at(&c.nodes[0], 900).await;
    let params = format!(r#"{{"blockID":"{block}"}}"#);
    let first = p(&url, "platform.getBlock", &params).await;
    assert_eq!(x_cache(&first), "MISS");
    metric_reaches(
        &url,
        r#"snowgate_answer_checks_total{method="platform.getBlock",result="agreed"}"#,
        1.0,
    )
    .await;
    let again = p(&url, "platform.getBlock", &params).await;
    assert_eq!((x_cache(&again), &again.body), ("HIT", &first.body));
    // Each node was asked once: the first answer, then its second.
    for n in &c.nodes {
        assert_eq!(n.control().call_count("platform.getBlock"), 1);
    }
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_redis_gets_only_the_true_answer_and_a_second_instance_serves_it() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(2, 3, SLOW_CHAIN, &redis.redis_toml(), |_, config| {
        liar_first(config, Verify::Hash)
    })
    .await;
    lie(&fleet.nodes[0]);
    let (block, tx) = ids_at(&fleet.nodes[1], 900).await;
    let calls = [
        ("platform.getBlock", format!(r#"{{"blockID":"{block}"}}"#)),
        (
            "platform.getTx",
            format!(r#"{{"txID":"{tx}","encoding":"json"}}"#),
        ),
    ];
    for (n, (method, params)) in calls.iter().enumerate() {
        let truth = direct(&fleet.nodes[1], method, params).await;
        let lie = direct(&fleet.nodes[0], method, params).await;
        let first = fleet.p(0, method, params).await;
        assert_eq!(first.body, truth.body, "{method}");
        kept(&fleet.url(0), method, params).await;
        // Written to Redis in the background: the true bytes, never the lie's.
        let keys = wait_for_keys(&redis, CACHE_KEYS, n + 1).await;
        let values: Vec<Vec<u8>> = keys.iter().filter_map(|k| redis.get(k)).collect();
        // A value ends with the answer's bytes as the node wrote them.
        let holds = |reply: &Reply| values.iter().any(|v| v.ends_with(result_of(reply)));
        assert!(holds(&truth), "{method}: the true answer is not in Redis");
        assert!(!holds(&lie), "{method}: the lie is in Redis");
        // Another instance, cold: a shared hit with the true bytes, and no node call.
        let before = fleet.calls(method);
        let other = fleet.p(1, method, params).await;
        assert_eq!(
            (x_cache(&other), &other.body),
            ("HIT", &truth.body),
            "{method}"
        );
        assert_eq!(fleet.calls(method), before, "{method}");
        // The liar is out on the instance that caught it; restored for the next call.
        let (_, health) = fleet.health(0).await;
        assert_eq!(upstream_in(&health, LIAR)["lying"], true, "{health}");
        for _ in 0..2 {
            fleet.gateways[0].pool().check_once(0).await;
        }
    }
    fleet.shutdown().await;
}

/// How a liar that knows the check dodges it: its wrong answer leaves out what the check reads,
/// or is of a codec version or block type the check does not know.
#[derive(Debug, Clone, Copy)]
enum Dodge {
    /// A json block or tx without its `id`.
    NoId,
    /// A json block without its `height`.
    NoHeight,
    /// A block in hex of codec version 1.
    CodecVersion,
    /// A block in hex of type 99.
    BlockType,
}

/// One call the dodging liar answers: its method and params, the true answer's body (from an
/// honest node) and the lie's `result`.
struct Dodged {
    dodge: Dodge,
    method: &'static str,
    params: String,
    truth: String,
    lie: String,
}

/// `0x` + hex of `bytes` + their checksum (the last 4 bytes of their SHA-256), as a node writes
/// a block in `hex`.
fn hex_with_checksum(bytes: &[u8]) -> String {
    use sha2::Digest;
    let sum = sha2::Sha256::digest(bytes);
    let mut out = String::from("0x");
    for b in bytes.iter().chain(&sum[28..]) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The bytes of a block in `hex` (`0x…`, checksum cut).
fn hex_block_bytes(text: &str) -> Vec<u8> {
    let digits = text.strip_prefix("0x").unwrap();
    let bytes: Vec<u8> = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect();
    bytes[..bytes.len() - 4].to_vec()
}

/// The dodges, each on a call of its own: the lie is the honest answer of the next block (or its
/// first tx) with what the check reads taken out or made unknown.
async fn dodged_calls(honest: &DevNode) -> Vec<Dodged> {
    let result = |r: Reply| r.json()["result"].clone();
    let by_height = |h: u64, enc: &str| format!(r#"{{"height":{h},"encoding":"{enc}"}}"#);
    let mut out = Vec::new();
    // getBlock and getTx in json, without `id`.
    let (block, tx) = ids_at(honest, 900).await;
    let next = result(direct(honest, "platform.getBlockByHeight", &by_height(901, "json")).await);
    let mut lie = next.clone();
    lie["block"].as_object_mut().unwrap().remove("id");
    let params = format!(r#"{{"blockID":"{block}","encoding":"json"}}"#);
    out.push(Dodged {
        dodge: Dodge::NoId,
        method: "platform.getBlock",
        truth: direct(honest, "platform.getBlock", &params).await.body,
        params,
        lie: lie.to_string(),
    });
    let (_, next_tx) = ids_at(honest, 901).await;
    let next_tx = format!(r#"{{"txID":"{next_tx}","encoding":"json"}}"#);
    let mut lie = result(direct(honest, "platform.getTx", &next_tx).await);
    lie["tx"].as_object_mut().unwrap().remove("id");
    let params = format!(r#"{{"txID":"{tx}","encoding":"json"}}"#);
    out.push(Dodged {
        dodge: Dodge::NoId,
        method: "platform.getTx",
        truth: direct(honest, "platform.getTx", &params).await.body,
        params,
        lie: lie.to_string(),
    });
    // getBlockByHeight in json, without `height`.
    let mut lie = next;
    lie["block"].as_object_mut().unwrap().remove("height");
    let params = by_height(900, "json");
    out.push(Dodged {
        dodge: Dodge::NoHeight,
        method: "platform.getBlockByHeight",
        truth: direct(honest, "platform.getBlockByHeight", &params)
            .await
            .body,
        params,
        lie: lie.to_string(),
    });
    // getBlockByHeight in hex: the next block's bytes, of another codec version or block type.
    for (h, dodge) in [(901, Dodge::CodecVersion), (902, Dodge::BlockType)] {
        let next = result(
            direct(
                honest,
                "platform.getBlockByHeight",
                &by_height(h + 1, "hex"),
            )
            .await,
        );
        let mut bytes = hex_block_bytes(next["block"].as_str().unwrap());
        match dodge {
            Dodge::CodecVersion => bytes[1] = 1,
            _ => bytes[2..6].copy_from_slice(&99u32.to_be_bytes()),
        }
        let lie = serde_json::json!({"block": hex_with_checksum(&bytes), "encoding": "hex"});
        let params = by_height(h, "hex");
        out.push(Dodged {
            dodge,
            method: "platform.getBlockByHeight",
            truth: direct(honest, "platform.getBlockByHeight", &params)
                .await
                .body,
            params,
            lie: lie.to_string(),
        });
    }
    out
}

/// A node of the devnodes' network and release that passes its health checks at `height` and
/// answers each call of `dodged` with its lie (anything else: not found).
async fn dodging_node(dodged: &[Dodged], height: u64) -> std::net::SocketAddr {
    let lies: Vec<(String, Value, String)> = dodged
        .iter()
        .map(|d| {
            let params: Value = serde_json::from_str(&d.params).unwrap();
            (d.method.to_string(), params, d.lie.clone())
        })
        .collect();
    support::scripted_node(height, move |method, v| {
        let id = v["id"].clone();
        let result = match method {
            "info.getNetworkID" => Some(r#"{"networkID":"12345"}"#.to_string()),
            "info.getNodeVersion" => Some(r#"{"version":"avalanchego/1.14.2"}"#.to_string()),
            _ => lies
                .iter()
                .find(|(m, p, _)| m == method && *p == v["params"])
                .map(|(_, _, lie)| lie.clone()),
        };
        match result {
            Some(r) => format!(r#"{{"jsonrpc":"2.0","result":{r},"id":{id}}}"#),
            None => format!(
                r#"{{"jsonrpc":"2.0","error":{{"code":-32000,"message":"not found","data":null}},"id":{id}}}"#
            ),
        }
    })
    .await
}

/// The liar leaves out what the check reads (`id`, `height`) or writes a codec version or block
/// type the check does not know, each time with a wrong block or tx. It is the only primary and an
/// honest node a fallback: its answer is one node's word, so it is never kept (the same call again
/// is never a hit with its bytes) and the honest node, asked to second it, disagrees.
#[tokio::test]
async fn an_answer_that_leaves_out_what_the_check_reads_is_never_kept_on_one_nodes_word() {
    let (_network, nodes) = support::devnodes(12345, 1, SLOW_CHAIN).await;
    let dodged = dodged_calls(&nodes[0]).await;
    let liar = dodging_node(&dodged, nodes[0].control().height()).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    config.upstreams.insert(
        0,
        snowgate::config::UpstreamConfig {
            name: LIAR.into(),
            url: format!("http://{liar}"),
            ..Default::default()
        },
    );
    config.upstreams[1].name = "node-1".into();
    liar_first(&mut config, Verify::Hash);
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    let pool = gateway.pool().clone();
    let liar_up = || {
        pool.status()
            .upstreams
            .iter()
            .any(|u| u.name == LIAR && u.takes_traffic)
    };
    assert!(support::eventually(Duration::from_secs(60), liar_up).await);
    let url = gateway.url();
    for d in &dodged {
        let case = format!("{:?}: {} {}", d.dodge, d.method, d.params);
        let lie_body = format!(r#"{{"jsonrpc":"2.0","result":{},"id":1}}"#, d.lie);
        assert_ne!(lie_body.trim(), d.truth.trim(), "{case}: the liar must lie");
        let disagreed = format!(
            r#"snowgate_answer_checks_total{{method="{}",result="disagreed"}}"#,
            d.method
        );
        let before = metric(&get_metrics(&url).await, &disagreed);
        let first = p(&url, d.method, &d.params).await;
        // The liar's answer is one node's word: the client may get it, the cache never keeps it.
        let again = p(&url, d.method, &d.params).await;
        for (n, r) in [&first, &again].into_iter().enumerate() {
            assert!(
                !(x_cache(r) == "HIT" && r.body.trim() != d.truth.trim()),
                "{case}: call {} was a hit with the liar's bytes: {}",
                n + 1,
                r.body
            );
        }
        // The honest node, asked to second it, returned other bytes: nothing kept.
        metric_reaches(&url, &disagreed, before + 1.0).await;
        let after = p(&url, d.method, &d.params).await;
        assert_ne!(x_cache(&after), "HIT", "{case}: kept on one node's word");
    }
    let m = get_metrics(&url).await;
    for method in [
        "platform.getBlock",
        "platform.getTx",
        "platform.getBlockByHeight",
    ] {
        let series =
            format!(r#"snowgate_answer_checks_total{{method="{method}",result="unreadable"}}"#);
        assert!(metric(&m, &series) >= 1.0, "{series} not counted");
    }
    // Not a lie the check can prove: the liar is not taken out (a new release's blocks are not
    // called lies either).
    assert!(health_of(&url, LIAR).await.get("lying").is_none());
    gateway.shutdown().await;
}

/// Honest nodes always name `id` and `height` in json and write blocks of the known types: their
/// answers are kept at once, with no second ask (each call reaches one node once).
#[tokio::test]
async fn an_honest_nodes_readable_answers_are_kept_at_once_without_a_second_ask() {
    let c = Cluster::start(2, SLOW_CHAIN, |config| config.cache.verify = Verify::Hash).await;
    support::every_node_takes_traffic(&c.gateway).await;
    let url = c.url();
    let (block, tx) = ids_at(&c.nodes[0], 900).await;
    let calls = [
        (
            "platform.getBlock",
            format!(r#"{{"blockID":"{block}","encoding":"json"}}"#),
        ),
        (
            "platform.getTx",
            format!(r#"{{"txID":"{tx}","encoding":"json"}}"#),
        ),
        (
            "platform.getBlockByHeight",
            r#"{"height":900,"encoding":"json"}"#.to_string(),
        ),
        (
            "platform.getBlockByHeight",
            r#"{"height":901,"encoding":"hex"}"#.to_string(),
        ),
        ("platform.getBlock", format!(r#"{{"blockID":"{block}"}}"#)),
    ];
    for (method, params) in &calls {
        let before: u64 = c.nodes.iter().map(|n| n.control().call_count(method)).sum();
        let first = p(&url, method, params).await;
        assert_eq!(x_cache(&first), "MISS", "{method} {params}: {}", first.body);
        let again = p(&url, method, params).await;
        assert_eq!(
            (x_cache(&again), &again.body),
            ("HIT", &first.body),
            "{method} {params}"
        );
        let after: u64 = c.nodes.iter().map(|n| n.control().call_count(method)).sum();
        assert_eq!(after - before, 1, "{method} {params}: a second ask");
    }
    let m = get_metrics(&url).await;
    for result in ["unreadable", "agreed", "disagreed", "unconfirmed"] {
        for method in [
            "platform.getBlock",
            "platform.getTx",
            "platform.getBlockByHeight",
        ] {
            let series =
                format!(r#"snowgate_answer_checks_total{{method="{method}",result="{result}"}}"#);
            assert_eq!(metric(&m, &series), 0.0, "{series}");
        }
    }
    c.gateway.shutdown().await;
}
