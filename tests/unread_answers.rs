//! Answers made and not yet taken by their clients (HTTP/2 windows kept shut): what one address
//! may leave unread over all its connections (`limits.address_answer_bytes`, the one answer of an
//! address holding nothing included), what the gateway counts (a cached payload shared by many
//! answers, once) and who is refused when the gateway's total fills (`limits.total_answer_bytes`:
//! the addresses holding more than their share, never one under it). Each refusal names the
//! bound it hit.
#![allow(clippy::unwrap_used)]

use crate::attack_h2_round2::{big_answer_batch, H2};
use crate::support::*;

use std::net::SocketAddr;
use std::time::Duration;

const GET_TX: &str = r#"{"jsonrpc":"2.0","id":7,"method":"platform.getTx","params":{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}}"#;
const CACHED: &str = r#"{"jsonrpc":"2.0","id":1,"method":"info.getNetworkName"}"#;
const ADDRESS_BOUND: &str = "too many answers not read from this address";
const GATEWAY_BOUND: &str = "more than its share";

/// A gateway in front of a scripted node whose `platform.getTx` answer is `size` bytes of hex
/// (cached once asked: `verify = "off"`, the zeros are no tx of the ID asked), with these bounds
/// of unread answer bytes.
async fn big_answer_gateway(size: usize, address: usize, total: usize) -> snowgate::Gateway {
    let tx = "0".repeat(size);
    let node = scripted_node(100, move |method, req| {
        let id = &req["id"];
        match method {
            "platform.getTx" => format!(
                r#"{{"jsonrpc":"2.0","result":{{"tx":"0x{tx}","encoding":"hex"}},"id":{id}}}"#
            ),
            _ => format!(r#"{{"jsonrpc":"2.0","result":{{}},"id":{id}}}"#),
        }
    })
    .await;
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.rate_limit.enabled = false;
    config.health.interval = Duration::from_millis(100);
    config.health.timeout = Duration::from_millis(100);
    config.cache.verify = snowgate::config::Verify::Off;
    config.limits.send_timeout = Duration::from_secs(120);
    config.limits.idle_timeout = Duration::from_secs(120);
    config.limits.max_connections_per_ip = 1000;
    config.limits.address_answer_bytes = address;
    config.limits.total_answer_bytes = total;
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "n".into(),
        url: format!("http://{node}"),
        ..Default::default()
    }];
    let gw = snowgate::Gateway::start(config).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || gw.pool().status().healthy).await,
        "the node never became healthy"
    );
    let url = format!("{}/ext/bc/P", gw.url());
    let first = post(&url, GET_TX).await;
    assert_eq!(first.status, 200, "{:.300}", first.body);
    assert!(first.body.len() > size);
    assert_eq!(post(&url, GET_TX).await.header("x-cache"), Some("HIT"));
    gw
}

/// Reads an answer to its end, opening its window as it goes: (status, body).
async fn read_whole(r: http::Response<h2::RecvStream>) -> (u16, String) {
    let status = r.status().as_u16();
    let mut body = r.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// Waits for each answer's head: the answers given (kept, unread) and the messages of the
/// refusals (each a 503 with `Retry-After: 1` and JSON-RPC -32603, read whole).
async fn outcomes(
    heads: Vec<h2::client::ResponseFuture>,
) -> (Vec<http::Response<h2::RecvStream>>, Vec<String>) {
    let mut given = Vec::new();
    let mut refused = Vec::new();
    for head in heads {
        let r = tokio::time::timeout(Duration::from_secs(60), head)
            .await
            .expect("an answer's head never came")
            .unwrap();
        match r.status().as_u16() {
            200 => given.push(r),
            503 => {
                assert_eq!(r.headers()["retry-after"], "1");
                let (_, body) = read_whole(r).await;
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["error"]["code"], -32603, "{body}");
                refused.push(v["error"]["message"].as_str().unwrap().to_string());
            }
            other => panic!("status {other}"),
        }
    }
    (given, refused)
}

/// `CONNS` HTTP/2 connections from `local`, each asking once for the cached `platform.getTx` and
/// never opening its window past one byte: the connections and the outcomes.
async fn hold_one_answer_per_connection(
    gw: SocketAddr,
    local: &str,
    conns: usize,
) -> (Vec<H2>, Vec<http::Response<h2::RecvStream>>, Vec<String>) {
    let mut held = Vec::new();
    let mut heads = Vec::new();
    for _ in 0..conns {
        let mut h2 = H2::connect_from(local, gw, 1).await;
        heads.push(h2.post("/ext/bc/P", GET_TX).await);
        held.push(h2);
    }
    let (given, refused) = outcomes(heads).await;
    (held, given, refused)
}

#[tokio::test]
async fn one_address_holding_a_cached_answer_on_many_connections_leaves_others_served() {
    // The issue's attack, scaled down: one address, many HTTP/2 connections, each holding one
    // large cached answer unread (one buffer in memory, however many answers hold it). It counted
    // once per answer and exempt per connection, so it filled `total_answer_bytes` and another
    // client's calls beside its own download were refused.
    const PAYLOAD: usize = 256 * 1024;
    let gw = big_answer_gateway(PAYLOAD, 1 << 20, 2 << 20).await;
    let (attacker, kept, _) = hold_one_answer_per_connection(gw.addr(), "127.0.0.1", 16).await;

    // An honest HTTP/2 client from another address starts a download (larger than its window:
    // unread until it reads it) and makes calls beside it.
    let mut honest = H2::connect_from("127.0.0.2", gw.addr(), 65_535).await;
    let download = honest.post("/ext/bc/P", GET_TX).await;
    let download = tokio::time::timeout(Duration::from_secs(60), download)
        .await
        .expect("the download's head never came")
        .unwrap();
    assert_eq!(download.status(), 200);
    let mut calls = Vec::new();
    for _ in 0..20 {
        calls.push(
            honest
                .post("/ext/bc/P", &call("platform.getHeight", "{}"))
                .await,
        );
    }
    let (given, refused) = outcomes(calls).await;
    eprintln!(
        "honest calls beside a download: {} answered, {} refused",
        given.len(),
        refused.len()
    );
    assert!(
        refused.is_empty(),
        "{} of 20 honest calls refused: {refused:?}",
        refused.len()
    );
    for r in given {
        let (status, body) = read_whole(r).await;
        assert_eq!(status, 200);
        assert!(body.contains("\"height\""), "{body}");
    }
    let (status, body) = read_whole(download).await;
    assert_eq!(status, 200);
    assert!(body.len() > PAYLOAD, "{}", body.len());
    drop(kept);
    for h2 in attacker {
        h2.conn.abort();
    }
}

#[tokio::test]
async fn an_address_past_its_bound_is_refused_on_every_connection_with_the_bound_named() {
    // Each connection's first unread answer was exempt: 16 connections bought 16 answers past the
    // address's bound. Now only an address holding nothing gets an answer of any size; past its
    // bound, every further answer is refused, on any connection, HTTP/2 or HTTP/1.1.
    const PAYLOAD: usize = 256 * 1024;
    const BOUND: usize = 1 << 20;
    let gw = big_answer_gateway(PAYLOAD, BOUND, 2 << 20).await;
    let url = format!("{}/ext/bc/P", gw.url());
    let (attacker, kept, refused) =
        hold_one_answer_per_connection(gw.addr(), "127.0.0.1", 16).await;
    eprintln!(
        "one address, 16 connections: {} answers held, {} refused",
        kept.len(),
        refused.len()
    );
    // The bound is reached by the answer that crosses it: at most bound / answer + 1 answers.
    assert!(
        kept.len() <= BOUND / PAYLOAD + 1,
        "{} answers of {PAYLOAD} bytes held past a bound of {BOUND}",
        kept.len()
    );
    assert_eq!(kept.len() + refused.len(), 16);
    for message in &refused {
        assert!(message.starts_with(ADDRESS_BOUND), "{message}");
    }
    // A new connection from the same address, over HTTP/1.1, is refused too.
    let again = post(&url, GET_TX).await;
    assert_eq!(again.status, 503, "{:.300}", again.body);
    assert!(again.body.contains(ADDRESS_BOUND), "{}", again.body);
    let counted = gw
        .metrics()
        .http_rejections
        .with_label_values(&["answers_unread"])
        .get();
    assert_eq!(counted, refused.len() as u64 + 1);

    // Once its connections are gone (and their answers with them), the address is served again.
    drop(kept);
    for h2 in attacker {
        h2.conn.abort();
    }
    let mut served = false;
    for _ in 0..100 {
        let r = post(&url, GET_TX).await;
        if r.status == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the address was not served once it held nothing");
}

#[tokio::test]
async fn past_half_the_total_only_addresses_over_their_share_are_refused() {
    // Several addresses, each within its own bound, fill the gateway's total with answers of
    // their own (no shared payload): past half of it, an address holding more than its share
    // (half the total over the addresses holding answers) is refused, naming the gateway's bound;
    // one under its share is served.
    const TOTAL: usize = 1 << 20;
    const ADDRESS: usize = 512 * 1024;
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = Duration::from_secs(120);
        c.limits.idle_timeout = Duration::from_secs(120);
        c.limits.address_answer_bytes = ADDRESS;
        c.limits.total_answer_bytes = TOTAL;
    })
    .await;
    let url = format!("{}/ext/info", cluster.url());
    assert_eq!(post(&url, CACHED).await.status, 200);
    let batch = big_answer_batch(50);
    let answer_len = post(&url, &batch).await.body.len();
    assert!(answer_len > 10_000, "{answer_len}");

    let addr = cluster.gateway.addr();
    let mut conns = Vec::new();
    let mut kept = Vec::new();
    for (i, local) in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
        .iter()
        .enumerate()
    {
        let mut h2 = H2::connect_from(local, addr, 1).await;
        let mut heads = Vec::new();
        for _ in 0..48 {
            heads.push(h2.post("/ext/info", &batch).await);
        }
        let (given, refused) = outcomes(heads).await;
        eprintln!(
            "{local}: {} answers held, {} refused",
            given.len(),
            refused.len()
        );
        assert!(!refused.is_empty(), "{local} was never refused");
        for message in &refused {
            // The first fills its own bound before half the total; the others, their share.
            let bound = if i == 0 { ADDRESS_BOUND } else { GATEWAY_BOUND };
            assert!(message.contains(bound), "{local}: {message}");
        }
        kept.extend(given);
        conns.push(h2);
    }
    assert!(
        kept.len() * answer_len <= TOTAL + 8 * answer_len,
        "{} answers of {answer_len} bytes held past a total of {TOTAL}",
        kept.len()
    );

    // A fifth address: under its share (half the total over the five addresses holding answers,
    // itself included), every answer is given, full as the gateway is; past it, refused naming
    // the gateway's bound.
    let share = TOTAL / 2 / 5;
    let under = share / answer_len;
    let mut honest = H2::connect_from("127.0.0.6", addr, 1).await;
    let mut heads = Vec::new();
    for _ in 0..under {
        heads.push(honest.post("/ext/info", &batch).await);
    }
    let (given, refused) = outcomes(heads).await;
    assert!(
        refused.is_empty(),
        "an address under its share was refused: {refused:?}"
    );
    kept.extend(given);
    let mut heads = Vec::new();
    for _ in 0..10 {
        heads.push(honest.post("/ext/info", &batch).await);
    }
    let (given, refused) = outcomes(heads).await;
    assert!(!refused.is_empty(), "an address past its share was served");
    for message in &refused {
        assert!(message.contains(GATEWAY_BOUND), "{message}");
    }
    kept.extend(given);
    drop(kept);
    for h2 in conns {
        h2.conn.abort();
    }
    honest.conn.abort();
}

#[tokio::test]
async fn a_trusted_proxy_has_no_address_bound_but_past_half_the_total_its_share() {
    // A trusted proxy reads for many clients: the address bound does not apply to it. It is one
    // address for its share of the gateway's total: alone, half of it.
    const TOTAL: usize = 1 << 20;
    const ADDRESS: usize = 128 * 1024;
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = Duration::from_secs(120);
        c.limits.idle_timeout = Duration::from_secs(120);
        c.limits.address_answer_bytes = ADDRESS;
        c.limits.total_answer_bytes = TOTAL;
        c.rate_limit.trusted_proxies = vec!["127.0.0.7/32".parse().unwrap()];
    })
    .await;
    let url = format!("{}/ext/info", cluster.url());
    assert_eq!(post(&url, CACHED).await.status, 200);
    let batch = big_answer_batch(50);
    let answer_len = post(&url, &batch).await.body.len();

    let mut proxy = H2::connect_from("127.0.0.7", cluster.gateway.addr(), 1).await;
    let mut heads = Vec::new();
    for _ in 0..60 {
        heads.push(proxy.post("/ext/info", &batch).await);
    }
    let (given, refused) = outcomes(heads).await;
    eprintln!(
        "a trusted proxy: {} answers held, {} refused",
        given.len(),
        refused.len()
    );
    // Far past the address bound, up to half the total (and the answer that crossed it).
    assert!(given.len() * answer_len > 3 * ADDRESS, "{}", given.len());
    assert!(given.len() * answer_len <= TOTAL / 2 + answer_len);
    assert!(!refused.is_empty());
    for message in &refused {
        assert!(message.contains(GATEWAY_BOUND), "{message}");
    }
    // Another address is served meanwhile.
    let r = post(&url, &batch).await;
    assert_eq!(r.status, 200, "{:.300}", r.body);
    drop(given);
    proxy.conn.abort();
}

/// Many addresses each holding one answer of their own (an address holding nothing gets one of any
/// size): past `total_answer_bytes` every further answer is refused, newcomers included, so what
/// they make snowgate hold stays within the total (before, each address's first answer was free
/// whatever the total: memory grew with the number of addresses).
#[tokio::test]
async fn many_addresses_holding_one_answer_each_never_pass_the_total() {
    const PAYLOAD: usize = 256 * 1024;
    // Twelve answers of their own fill the total of 2 MiB and one address's 1 MiB more.
    let gw = big_answer_gateway(PAYLOAD, 1 << 20, 2 << 20).await;
    let mut held = Vec::new();
    let mut heads = Vec::new();
    for i in 1..=20u8 {
        // A txID of its own each: another cached answer, another buffer.
        let get_tx = GET_TX.replace("2QouvFWU", &format!("{i:08}"));
        let mut h2 = H2::connect_from(&format!("127.0.1.{i}"), gw.addr(), 1).await;
        heads.push(h2.post("/ext/bc/P", &get_tx).await);
        held.push(h2);
    }
    let (given, refused) = outcomes(heads).await;
    eprintln!(
        "20 addresses, one answer each: {} held, {} refused",
        given.len(),
        refused.len()
    );
    // The total is passed by the answers made at one moment at most (one per runtime worker).
    let workers = 4;
    assert!(
        given.len() <= 12 + workers,
        "{} answers of {PAYLOAD} bytes held past a total of 2 MiB and an address's 1 MiB",
        given.len()
    );
    assert!(!refused.is_empty());
    for message in &refused {
        assert!(message.contains(GATEWAY_BOUND), "{message}");
    }
    // Once they are read, newcomers are served again.
    drop(given);
    for h2 in held {
        h2.conn.abort();
    }
    let mut newcomer = H2::connect_from("127.0.2.1", gw.addr(), 65_535).await;
    let r = newcomer.post("/ext/bc/P", CACHED).await;
    let ok = |r: &Result<http::Response<h2::RecvStream>, h2::Error>| {
        r.as_ref().is_ok_and(|r| r.status() == 200)
    };
    let r = tokio::time::timeout(Duration::from_secs(60), r)
        .await
        .unwrap();
    let mut served = ok(&r);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !served && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = newcomer.post("/ext/bc/P", CACHED).await;
        served = ok(&tokio::time::timeout(Duration::from_secs(60), r)
            .await
            .unwrap());
    }
    assert!(served, "a newcomer was never served after the holders left");
}
