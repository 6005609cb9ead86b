//! The answer cache, proved by what reached the nodes: each class keeps what it may and nothing
//! else, equivalent requests share an entry, head answers never outlive their height, identical
//! cold requests make one upstream call, and memory stays within `max_bytes`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::*;

fn calls(c: &Cluster, method: &str) -> u64 {
    c.nodes.iter().map(|n| n.control().call_count(method)).sum()
}

async fn p(c: &Cluster, method: &str, params: &str) -> Reply {
    post(&format!("{}/ext/bc/P", c.url()), &call(method, params)).await
}

fn x_cache(r: &Reply) -> &str {
    r.header("x-cache").unwrap_or("-")
}

async fn block_at(c: &Cluster, height: u64) -> Value {
    let r = p(
        c,
        "platform.getBlockByHeight",
        &format!(r#"{{"height":{height},"encoding":"json"}}"#),
    )
    .await;
    r.json()["result"]["block"].clone()
}

#[tokio::test]
async fn immutable_answers_are_fetched_from_upstream_once() {
    let c = Cluster::start(2, Duration::from_secs(60), |_| {}).await;
    let params = r#"{"height":900,"encoding":"json"}"#;
    let first = p(&c, "platform.getBlockByHeight", params).await;
    assert_eq!(x_cache(&first), "MISS");
    let second = p(&c, "platform.getBlockByHeight", params).await;
    assert_eq!(x_cache(&second), "HIT");
    assert_eq!(first.body, second.body);
    assert_eq!(calls(&c, "platform.getBlockByHeight"), 1);
    // A hit is byte for byte the node's answer (with the client's id).
    let direct = post(
        &format!("{}/ext/bc/P", c.nodes[0].url()),
        &call("platform.getBlockByHeight", params),
    )
    .await;
    assert_eq!(second.body, direct.body);

    let block = first.json()["result"]["block"].clone();
    let block_id = block["id"].as_str().unwrap().to_string();
    let tx_id = block["txs"][0]["id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        p(
            &c,
            "platform.getBlock",
            &format!(r#"{{"blockID":"{block_id}"}}"#),
        )
        .await;
        p(
            &c,
            "platform.getTx",
            &format!(r#"{{"txID":"{tx_id}","encoding":"json"}}"#),
        )
        .await;
        let s = p(
            &c,
            "platform.getTxStatus",
            &format!(r#"{{"txID":"{tx_id}"}}"#),
        )
        .await;
        assert_eq!(s.json()["result"]["status"], "Committed");
        post(
            &format!("{}/ext/info", c.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
    }
    assert_eq!(calls(&c, "platform.getBlock"), 1);
    assert_eq!(calls(&c, "platform.getTx"), 1);
    assert_eq!(calls(&c, "platform.getTxStatus"), 1);
    assert_eq!(calls(&c, "info.getNetworkID"), 1);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn equivalent_requests_share_an_entry_and_different_ones_never_do() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let id = block_at(&c, 950).await["id"].as_str().unwrap().to_string();
    let before = calls(&c, "platform.getBlock");
    let same = [
        format!(r#"{{"blockID":"{id}"}}"#),
        format!(r#"{{"blockID":"{id}","encoding":"hex"}}"#),
        format!(r#"{{"encoding":"HEX","blockID":"{id}"}}"#),
        format!(r#"[{{"blockID":"{id}"}}]"#),
        format!(r#"{{ "BlockID" : "{id}" , "encoding" : null }}"#),
    ];
    let mut bodies = Vec::new();
    for params in &same {
        let r = p(&c, "platform.getBlock", params).await;
        assert!(r.body.contains("\"result\""), "{params}: {}", r.body);
        bodies.push(r.json()["result"].clone());
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        calls(&c, "platform.getBlock") - before,
        1,
        "equivalent forms made several upstream calls"
    );
    let r = p(
        &c,
        "platform.getBlock",
        &format!(r#"{{"blockID":"{id}","encoding":"json"}}"#),
    )
    .await;
    assert_eq!(x_cache(&r), "MISS");
    assert!(r.json()["result"]["block"].is_object());
    assert_eq!(calls(&c, "platform.getBlock") - before, 2);
    // Quoted and bare heights are one entry; another height is another.
    p(&c, "platform.getBlockByHeight", r#"{"height":"940"}"#).await;
    let r = p(&c, "platform.getBlockByHeight", r#"{"height":940}"#).await;
    assert_eq!(x_cache(&r), "HIT");
    let r = p(&c, "platform.getBlockByHeight", r#"{"height":941}"#).await;
    assert_eq!(x_cache(&r), "MISS");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn errors_are_never_kept() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let unknown = "2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w";
    for _ in 0..3 {
        let r = p(&c, "platform.getTx", &format!(r#"{{"txID":"{unknown}"}}"#)).await;
        assert!(r.body.contains("not found"), "{}", r.body);
        assert_eq!(x_cache(&r), "MISS");
        let r = p(&c, "platform.getBlockByHeight", r#"{"height":99999999}"#).await;
        assert!(r.body.contains("not found"), "{}", r.body);
    }
    assert_eq!(calls(&c, "platform.getTx"), 3);
    assert_eq!(calls(&c, "platform.getBlockByHeight"), 3);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_processing_status_is_not_kept_but_the_committed_one_is() {
    let c = Cluster::start(1, Duration::from_millis(400), |_| {}).await;
    let tx = c.network.chain().read().sample_tx_hex(7);
    let r = p(&c, "platform.issueTx", &format!(r#"{{"tx":"{tx}"}}"#)).await;
    assert_eq!(x_cache(&r), "BYPASS");
    let tx_id = r.json()["result"]["txID"].as_str().unwrap().to_string();
    let status = format!(r#"{{"txID":"{tx_id}"}}"#);
    let mut processing = 0;
    let mut committed_at = None;
    for i in 0..100 {
        let r = p(&c, "platform.getTxStatus", &status).await;
        match r.json()["result"]["status"].as_str().unwrap() {
            "Processing" => {
                processing += 1;
                assert_eq!(
                    calls(&c, "platform.getTxStatus"),
                    i + 1,
                    "a Processing status was served from the cache"
                );
            }
            "Committed" => {
                committed_at.get_or_insert(calls(&c, "platform.getTxStatus"));
            }
            other => panic!("unexpected status {other}"),
        }
        if committed_at.is_some() && i > processing + 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(processing >= 1, "the tx was never seen Processing");
    let committed_at = committed_at.expect("the tx was never committed");
    assert_eq!(
        calls(&c, "platform.getTxStatus"),
        committed_at,
        "Committed is fetched once, then kept"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn no_head_answer_from_before_the_best_height_is_served() {
    let c = Cluster::start(2, Duration::from_millis(150), |cfg| {
        cfg.health.interval = Duration::from_millis(50);
        cfg.health.timeout = Duration::from_millis(50);
    })
    .await;
    let mut served = 0u64;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let best = c.gateway.pool().best_height();
        let r = p(&c, "platform.getHeight", "{}").await;
        let h: u64 = r.json()["result"]["height"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            h >= best,
            "served height {h} while the pool was at {best} ({})",
            x_cache(&r)
        );
        served += 1;
    }
    let upstream = calls(&c, "platform.getHeight");
    // The health checks call getHeight too; client calls add far fewer than were served.
    let checks = 2 * (2000 / 50) + 10;
    assert!(
        upstream < checks + served / 2,
        "served {served}, upstream {upstream}"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn identical_concurrent_cold_requests_make_one_upstream_call() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    c.nodes[0]
        .control()
        .update_faults(|f| f.latency = Duration::from_millis(300));
    let url = format!("{}/ext/bc/P", c.url());
    let client = client();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.getBlockByHeight","params":{{"height":777,"encoding":"json"}}}}"#);
            let r = client.post(&url).header("content-type", "application/json").body(body).send().await.unwrap();
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["id"], i, "a waiter got another client's id");
            v["result"]["block"]["height"].as_u64().unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 777);
    }
    assert_eq!(calls(&c, "platform.getBlockByHeight"), 1);
    let m = String::from_utf8(c.gateway.metrics().render()).unwrap();
    let coalesced: f64 = m
        .lines()
        .find(|l| l.starts_with("snowgate_cache_coalesced_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert!(coalesced >= 1.0, "{m}");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_failed_coalesced_miss_fails_every_waiter_and_stores_nothing() {
    let c = Cluster::start(1, Duration::from_secs(60), |cfg| {
        cfg.health.interval = Duration::from_millis(50);
        cfg.health.timeout = Duration::from_millis(50);
        cfg.upstream.request_timeout = Duration::from_millis(300);
        cfg.limits.request_deadline = Duration::from_millis(600);
    })
    .await;
    c.nodes[0].control().update_faults(|f| f.hang = true);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let url = c.url();
        tasks.push(tokio::spawn(async move {
            post(
                &format!("{url}/ext/bc/P"),
                &call("platform.getBlockByHeight", r#"{"height":555}"#),
            )
            .await
            .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 504);
    }
    c.nodes[0].control().update_faults(|f| f.hang = false);
    c.nodes[0].control().reset_calls();
    let mut answered = None;
    for _ in 0..100 {
        let r = p(&c, "platform.getBlockByHeight", r#"{"height":555}"#).await;
        if r.status == 200 {
            answered = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = answered.expect("the node never came back");
    assert_eq!(x_cache(&r), "MISS", "the failure was stored");
    assert_eq!(
        c.nodes[0].control().call_count("platform.getBlockByHeight"),
        1
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn conditional_classes_validators_at_and_reward_utxos() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    for _ in 0..3 {
        p(&c, "platform.getValidatorsAt", r#"{"height":"proposed"}"#).await;
        p(&c, "platform.getValidatorsAt", r#"{"height":990}"#).await;
    }
    // 3 "proposed" calls reached the node, the numeric height once.
    assert_eq!(calls(&c, "platform.getValidatorsAt"), 4);
    let current = p(&c, "platform.getCurrentValidators", "{}").await;
    let staker = current.json()["result"]["validators"][0]["txID"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..3 {
        let r = p(
            &c,
            "platform.getRewardUTXOs",
            &format!(r#"{{"txID":"{staker}"}}"#),
        )
        .await;
        assert_eq!(r.json()["result"]["numFetched"], "0");
    }
    assert_eq!(
        calls(&c, "platform.getRewardUTXOs"),
        3,
        "an empty reward answer was kept"
    );
    let ended = {
        let chain = c.network.chain().read();
        snowgate::devnode::chain::codec::id_str(&chain.state().ended[0].tx_id)
    };
    for _ in 0..3 {
        let r = p(
            &c,
            "platform.getRewardUTXOs",
            &format!(r#"{{"txID":"{ended}"}}"#),
        )
        .await;
        assert_ne!(r.json()["result"]["numFetched"], "0", "{}", r.body);
    }
    assert_eq!(
        calls(&c, "platform.getRewardUTXOs"),
        4,
        "a paid reward was not kept"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn ttl_classes_and_bypasses() {
    let c = Cluster::start(1, Duration::from_secs(60), |cfg| {
        cfg.cache.volatile_ttl = Duration::from_millis(200);
    })
    .await;
    let info = format!("{}/ext/info", c.url());
    for _ in 0..3 {
        post(&info, &call("info.getTxFee", "{}")).await;
        post(&info, &call("info.getNodeVersion", "{}")).await;
    }
    assert_eq!(calls(&c, "info.getTxFee"), 1);
    assert_eq!(calls(&c, "info.getNodeVersion"), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(&info, &call("info.getNodeVersion", "{}")).await;
    assert_eq!(
        calls(&c, "info.getNodeVersion"),
        2,
        "a volatile answer outlived its TTL"
    );
    for _ in 0..2 {
        let r = p(&c, "platform.sampleValidators", r#"{"size":2}"#).await;
        assert_eq!(x_cache(&r), "BYPASS");
    }
    assert_eq!(calls(&c, "platform.sampleValidators"), 2);
    // Pinned admin calls want that node's own answer.
    let auth = format!("Bearer {ADMIN_KEY}");
    for _ in 0..2 {
        let r = post_with(
            &info,
            &call("info.getNetworkID", "{}"),
            &[("authorization", &auth), ("x-snowgate-upstream", "node-0")],
        )
        .await;
        assert_eq!(x_cache(&r), "BYPASS");
    }
    assert_eq!(calls(&c, "info.getNetworkID"), 2);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn admins_can_purge_and_the_cache_can_be_turned_off() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let purge = format!("{}/snowgate/cache/purge", c.url());
    p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await;
    assert_eq!(
        x_cache(&p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await),
        "HIT"
    );
    let r = client().post(&purge).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        x_cache(&p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await),
        "HIT"
    );
    let r = client()
        .post(format!("{purge}?method=platform.getBlockByHeight"))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        x_cache(&p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await),
        "MISS"
    );
    // Another method's purge leaves it; a purge of everything does not.
    let purge_with = |query: &'static str| {
        client()
            .post(format!("{purge}{query}"))
            .header("authorization", format!("Bearer {ADMIN_KEY}"))
            .send()
    };
    assert_eq!(
        purge_with("?method=platform.getTx").await.unwrap().status(),
        200
    );
    assert_eq!(
        x_cache(&p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await),
        "HIT"
    );
    assert_eq!(purge_with("").await.unwrap().status(), 200);
    assert_eq!(
        x_cache(&p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await),
        "MISS"
    );
    assert_eq!(calls(&c, "platform.getBlockByHeight"), 3);
    c.gateway.shutdown().await;

    let c = Cluster::start(1, Duration::from_secs(60), |cfg| cfg.cache.enabled = false).await;
    for _ in 0..2 {
        let r = p(&c, "platform.getBlockByHeight", r#"{"height":10}"#).await;
        assert_eq!(x_cache(&r), "BYPASS");
    }
    assert_eq!(calls(&c, "platform.getBlockByHeight"), 2);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_churn_of_distinct_keys_stays_within_max_bytes() {
    let max = 1024 * 1024;
    let c = Cluster::start(1, Duration::from_secs(60), |cfg| cfg.cache.max_bytes = max).await;
    let url = format!("{}/ext/bc/P", c.url());
    let client = client();
    let mut total_bytes = 0usize;
    for height in 0..1000u64 {
        for encoding in ["hex", "json"] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getBlockByHeight","params":{{"height":{height},"encoding":"{encoding}"}}}}"#
            );
            let r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            total_bytes += r.bytes().await.unwrap().len();
        }
    }
    assert!(
        total_bytes > 2 * max as usize,
        "the churn must exceed the bound: {total_bytes}"
    );
    let cache = c.gateway.cache().unwrap();
    let usage = cache.usage().await;
    let (entries, bytes) = (usage.entries, usage.bytes);
    assert!(bytes <= max, "{bytes} > {max}");
    assert!(entries > 100, "{entries}");
    // The read index follows moka: nothing evicted stays listed (every entry here is immutable).
    assert!(usage.indexed <= entries, "{usage:?}");
    assert!(usage.indexed > 100, "{usage:?}");
    let m = String::from_utf8(c.gateway.metrics().render()).unwrap();
    assert!(m.contains("snowgate_cache_evictions_total"), "{m}");
    assert!(
        !m.contains("snowgate_cache_evictions_total 0\n"),
        "nothing was evicted"
    );
    c.gateway.shutdown().await;
}
