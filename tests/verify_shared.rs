//! What the fleet's Redis holds is another instance's word: a value read from it is held against
//! its call as a node's answer is before it is served, and is served only if the instance that
//! kept it believed it at least as far as this one's `[cache] verify` requires.
//!
//! One instance runs `verify = "off"` (an old config, a canary) in front of a lying node and fills
//! Redis with its lies; a `hash` instance and a `quorum` instance in front of honest nodes then ask
//! the same calls: they never serve a lie, they drop it from Redis and count it, and a value
//! forged to claim the strongest level is refuted all the same. An answer that nothing proves,
//! kept on an `off` instance's unchecked word, is not served by a `hash` instance, nor one kept on
//! a single node's word by a `quorum` instance.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use sha2::Digest;
use snowgate::config::{Config, Verify};
use snowgate::devnode::{DevNode, Faults};
use support::fleet::{wait_for_keys, x_cache, Fleet, CACHE_KEYS, SLOW_CHAIN};
use support::redis::{RedisServer, SharedRedis};
use support::{call, eventually, post, Reply};

/// Instance 0: `off`, in front of node-0 alone (the liar). Instance 1: `hash`, instance 2:
/// `quorum`, each in front of node-1 and node-2 (honest).
const SETTINGS: [Verify; 3] = [Verify::Off, Verify::Hash, Verify::Quorum];

fn split(i: usize, config: &mut Config) {
    config.cache.verify = SETTINGS[i];
    config.health.interval = Duration::from_secs(60);
    match i {
        0 => config.upstreams.truncate(1),
        _ => {
            config.upstreams.remove(0);
        }
    }
}

/// A P-chain call straight to a node, not counted against the gateway's calls.
async fn direct(node: &DevNode, method: &str, params: &str) -> Reply {
    let r = post(&format!("{}/ext/bc/P", node.url()), &call(method, params)).await;
    node.control().reset_calls();
    r
}

/// Each method in hex and in json, at two heights: 12 calls.
async fn calls(honest: &DevNode) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for height in [900, 901] {
        let params = format!(r#"{{"height":{height},"encoding":"json"}}"#);
        let block = direct(honest, "platform.getBlockByHeight", &params)
            .await
            .json()["result"]["block"]
            .clone();
        let (id, tx) = (
            block["id"].as_str().unwrap(),
            block["txs"][0]["id"].as_str().unwrap(),
        );
        for enc in ["hex", "json"] {
            out.push((
                "platform.getBlock",
                format!(r#"{{"blockID":"{id}","encoding":"{enc}"}}"#),
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
    }
    out
}

/// A value of the shared tier, forged as anyone with `redis-cli` can: the same key and answer
/// (the lie), with the level byte set to `level` and the digest computed again. The layout is
/// `[version][kind][level][key length, u32 BE][key][16-byte digest][answer]`, the digest the first
/// 16 bytes of the SHA-256 of everything but itself.
fn forged(value: &[u8], level: u8) -> Vec<u8> {
    assert_eq!(value[0], 2, "not a value of the format's version 2");
    let key_len = u32::from_be_bytes(value[3..7].try_into().unwrap()) as usize;
    let key = &value[7..7 + key_len];
    let answer = &value[7 + key_len + 16..];
    let mut h = sha2::Sha256::new();
    h.update([value[0], value[1], level]);
    h.update(key);
    h.update(answer);
    let digest = h.finalize();
    let mut out = vec![value[0], value[1], level];
    out.extend_from_slice(&value[3..7 + key_len]);
    out.extend_from_slice(&digest[..16]);
    out.extend_from_slice(answer);
    out
}

/// The shared tier's results counted by instance `i`.
async fn shared(fleet: &Fleet, i: usize, result: &str) -> f64 {
    let series = format!(r#"snowgate_shared_cache_total{{result="{result}"}}"#);
    fleet.metric(i, &series).await
}

/// Asks instance `i` each call: it must answer the honest node's bytes, never from the shared
/// tier, and refute every value it read there.
async fn never_served(fleet: &Fleet, i: usize, calls: &[(&'static str, String)], lies: &[Reply]) {
    let refuted_before = shared(fleet, i, "refuted").await;
    let mut served_lies = 0;
    for ((method, params), lie) in calls.iter().zip(lies) {
        let truth = direct(&fleet.nodes[1], method, params).await;
        let r = fleet.p(i, method, params).await;
        if r.body == lie.body {
            served_lies += 1;
        }
        assert_eq!(
            r.body,
            truth.body,
            "{:?} instance served a wrong answer for {method} {params} (X-Cache {})",
            SETTINGS[i],
            x_cache(&r)
        );
        assert_eq!(x_cache(&r), "MISS", "{method} {params}");
    }
    assert_eq!(served_lies, 0);
    assert_eq!(
        shared(fleet, i, "refuted").await - refuted_before,
        calls.len() as f64,
        "{:?} instance: refuted values",
        SETTINGS[i]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weaker_instances_lies_in_redis_are_refuted_never_served() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(3, 3, SLOW_CHAIN, &redis.redis_toml(), split).await;
    fleet.nodes[0].control().set_faults(Faults {
        lie: true,
        ..Faults::default()
    });
    let calls = calls(&fleet.nodes[1]).await;

    // The `off` instance believes its lying node, and files every lie in Redis.
    let mut lies = Vec::new();
    for (method, params) in &calls {
        let lie = direct(&fleet.nodes[0], method, params).await;
        let truth = direct(&fleet.nodes[1], method, params).await;
        assert_ne!(lie.body, truth.body, "{method} {params}: the liar must lie");
        let r = fleet.p(0, method, params).await;
        assert_eq!(r.body, lie.body, "{method} {params}: off believes its node");
        lies.push(lie);
    }
    let keys = wait_for_keys(&redis, CACHE_KEYS, calls.len()).await;
    assert_eq!(keys.len(), calls.len());
    let written: Vec<Vec<u8>> = keys.iter().map(|k| redis.get(k).unwrap()).collect();

    // The `hash` instance: every lie refuted, dropped from Redis, the true answer served.
    never_served(&fleet, 1, &calls, &lies).await;
    let replaced = eventually(Duration::from_secs(60), || {
        keys.iter()
            .zip(&written)
            .all(|(k, v)| redis.get(k).as_ref() != Some(v))
    })
    .await;
    assert!(replaced, "a refuted value stayed in Redis");

    // The lies again, forged to claim the strongest level (seconded by a second node), with a
    // correct digest: the `quorum` instance refutes them all the same.
    for (k, v) in keys.iter().zip(&written) {
        redis.set(k, &forged(v, 2));
    }
    never_served(&fleet, 2, &calls, &lies).await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_kept_on_less_than_this_instances_setting_asks_is_not_served() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(3, 3, SLOW_CHAIN, &redis.redis_toml(), split).await;
    // Nothing checks a tx's status: kept by `off` unjudged, by `hash` on one node's word.
    let block = direct(
        &fleet.nodes[1],
        "platform.getBlockByHeight",
        r#"{"height":900,"encoding":"json"}"#,
    )
    .await
    .json()["result"]["block"]
        .clone();
    let params = format!(
        r#"{{"txID":"{}"}}"#,
        block["txs"][0]["id"].as_str().unwrap()
    );
    const METHOD: &str = "platform.getTxStatus";
    let first = fleet.p(0, METHOD, &params).await;
    assert!(first.body.contains("Committed"), "{}", first.body);
    wait_for_keys(&redis, CACHE_KEYS, 1).await;

    // The `hash` instance does not serve the `off` instance's word: it asks a node.
    let before = fleet.calls(METHOD);
    let r = fleet.p(1, METHOD, &params).await;
    assert_eq!((x_cache(&r), &r.body), ("MISS", &first.body));
    assert_eq!(
        fleet.calls(METHOD),
        before + 1,
        "the hash instance asked no node"
    );
    assert_eq!(shared(&fleet, 1, "untrusted").await, 1.0);

    // The `quorum` instance serves neither the `off` instance's value nor the `hash` one's (one
    // node's word): it asks a node, then another to second it.
    let r = fleet.p(2, METHOD, &params).await;
    assert_eq!((x_cache(&r), &r.body), ("MISS", &first.body));
    assert_eq!(shared(&fleet, 2, "untrusted").await, 1.0);
    assert_eq!(shared(&fleet, 2, "hit").await, 0.0);
    fleet.shutdown().await;
}
