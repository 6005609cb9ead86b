//! The node's health API over JSON-RPC (`POST /ext/health`), as avalanchego's Go `health.Client`
//! calls it: snowgate answers it itself from the pool's state, in the node's format
//! (`{"checks":{...},"healthy":bool}`, HTTP 200 whatever the health), with the client's raw id,
//! the node's errors, and the RPC body's limits and quotas. `/ext/health/health`,
//! `/ext/health/readiness` and `/ext/health/liveness` answer any method as GET, as on a node.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use support::{client, post, post_with, Cluster, Reply, ADMIN_KEY};

/// A subnet ID as the Go client sends it in `tags`.
const TAG: &str = "11111111111111111111111111111111LpoYY";

/// `health.Result` as the Go client decodes it (`api/health`): every field typed as in Go, so a
/// shape it cannot read fails here.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // read through Debug and the checks below
struct GoResult {
    message: Option<serde_json::Value>,
    error: Option<String>,
    timestamp: String,
    duration: i64,
    contiguous_failures: Option<i64>,
    time_of_first_failure: Option<String>,
}

/// `health.APIReply`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoReply {
    checks: BTreeMap<String, GoResult>,
    healthy: bool,
}

/// The body gorilla's `EncodeClientRequest` sends: a random int63 id, `{"tags":null}` or the tags.
fn go_call(method: &str, tags: Option<&[&str]>, id: &str) -> String {
    let tags = match tags {
        None => "null".to_string(),
        Some(t) => serde_json::to_string(t).unwrap(),
    };
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"tags":{tags}}},"id":{id}}}"#)
}

/// The `result` of a health answer, read as the Go client reads it (HTTP 200 required).
fn go_reply(r: &Reply) -> GoReply {
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    let v = r.json();
    assert!(v.get("error").is_none(), "{}", r.body);
    serde_json::from_value(v["result"].clone()).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

async fn healthy_cluster(n: usize, tweak: impl FnOnce(&mut snowgate::Config)) -> Cluster {
    let cluster = Cluster::start(n, Duration::from_secs(60), tweak).await;
    support::every_node_takes_traffic(&cluster.gateway).await;
    cluster
}

#[tokio::test]
async fn the_go_clients_health_calls_are_answered_from_the_pool() {
    let cluster = healthy_cluster(2, |_| {}).await;
    let url = format!("{}/ext/health", cluster.url());
    for method in ["health.health", "health.readiness", "health.liveness"] {
        for tags in [None, Some(&[TAG][..])] {
            let id = "9223372036854775807"; // rand.Int63 can reach 2^63-1
            let r = post(&url, &go_call(method, tags, id)).await;
            let reply = go_reply(&r);
            assert!(reply.healthy, "{method}: {}", r.body);
            assert!(r.body.ends_with(&format!(",\"id\":{id}}}\n")), "{}", r.body);
            if method == "health.liveness" {
                continue;
            }
            let names: Vec<_> = reply.checks.keys().map(String::as_str).collect();
            assert_eq!(names, ["node-0", "node-1", "snowgate"], "{}", r.body);
            for (name, check) in &reply.checks {
                assert!(check.error.is_none(), "{name}: {}", r.body);
                assert!(
                    humantime::parse_rfc3339(&check.timestamp).is_ok(),
                    "{name}: {}",
                    check.timestamp
                );
                assert!(check.duration >= 0);
            }
            let node = &reply.checks["node-0"];
            assert_eq!(node.message.as_ref().unwrap()["takesTraffic"], true);
        }
    }
    // What a node is never asked: the devnodes' own health API (snowgate answers alone) and its
    // address never shows.
    let r = post(&url, &go_call("health.health", None, "1")).await;
    for node in &cluster.nodes {
        let addr = node.url().trim_start_matches("http://").to_string();
        assert!(!r.body.contains(&addr), "{}", r.body);
    }
    assert!(!r.body.contains("127.0.0.1"), "{}", r.body);
    // GET /ext/health is still snowgate's own JSON.
    let get = client().get(&url).send().await.unwrap();
    assert_eq!(get.status().as_u16(), 200);
    let v: serde_json::Value = get.json().await.unwrap();
    assert_eq!(v["healthy"], true);
    assert!(v["upstreams"].is_array(), "{v}");
}

#[tokio::test]
async fn the_clients_raw_id_comes_back_and_notifications_get_nothing() {
    let cluster = healthy_cluster(1, |_| {}).await;
    let url = format!("{}/ext/health", cluster.url());
    let ids = [
        ("12345678901234567890123", "12345678901234567890123"),
        ("1.50", "1.50"),
        (r#""abc""#, r#""abc""#),
        (r#"{"a": [1, 2]}"#, r#"{"a":[1,2]}"#),
    ];
    for (sent, echoed) in ids {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"health.health","id":{sent}}}"#);
        let r = post(&url, &body).await;
        assert_eq!(r.status, 200);
        assert!(
            r.body.ends_with(&format!(",\"id\":{echoed}}}\n")),
            "{sent}: {}",
            r.body
        );
    }
    let r = post(&url, r#"{"jsonrpc":"2.0","method":"health.health"}"#).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
}

#[tokio::test]
async fn unknown_methods_and_bad_envelopes_get_the_nodes_errors() {
    let cluster = healthy_cluster(1, |_| {}).await;
    let url = format!("{}/ext/health", cluster.url());
    let cases = [
        (
            r#"{"jsonrpc":"2.0","method":"health.nope","id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"rpc: can't find method \"health.Nope\"","data":null},"id":1}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"health.Health","id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"method must start with a non-uppercase letter","data":null},"id":1}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"rpc: can't find service \"platform.GetHeight\"","data":null},"id":1}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"health.health","params":{"tags":[1]},"id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls","data":null},"id":1}"#,
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"health.health","id":1}]"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"json: cannot unmarshal array into Go value of type json2.serverRequest","data":{"jsonrpc":"","method":"","params":null,"id":null}},"id":null}"#,
        ),
    ];
    for (body, want) in cases {
        let r = post(&url, body).await;
        assert_eq!((r.status, r.body.as_str()), (200, &*format!("{want}\n")));
    }
    // Like any RPC body: the node's 415 without a JSON content type.
    let r = client()
        .post(&url)
        .body(go_call("health.health", None, "1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
}

#[tokio::test]
async fn a_gateway_without_nodes_or_draining_says_unhealthy_with_http_200() {
    // Every node down: a failing check per node (its fault category, never its address).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let down = Cluster::start(0, Duration::from_secs(60), |c| {
        c.upstreams = vec![snowgate::config::UpstreamConfig {
            name: "down".into(),
            url: dead_url.clone(),
            ..Default::default()
        }];
    })
    .await;
    let url = format!("{}/ext/health", down.url());
    let r = post(&url, &go_call("health.readiness", None, "3")).await;
    let reply = go_reply(&r);
    assert!(!reply.healthy, "{}", r.body);
    assert!(reply.checks["down"].error.is_some(), "{}", r.body);
    assert_eq!(
        reply.checks["snowgate"].error.as_deref(),
        Some("no upstream takes traffic")
    );
    assert!(!r.body.contains(&dead_url[7..]), "{}", r.body);
    // Liveness stays healthy: the process serves.
    let r = post(&url, &go_call("health.liveness", None, "4")).await;
    assert!(go_reply(&r).healthy, "{}", r.body);
    down.gateway.shutdown().await;

    // Draining: unhealthy at once, while calls are still answered.
    let cluster = healthy_cluster(1, |c| c.server.drain_grace = Duration::from_secs(3)).await;
    let url = format!("{}/ext/health", cluster.url());
    let before = go_reply(&post(&url, &go_call("health.health", None, "5")).await);
    assert!(before.healthy);
    let Cluster { gateway, nodes, .. } = cluster;
    let shutdown = tokio::spawn(gateway.shutdown());
    let mut seen = None;
    for _ in 0..100 {
        let r = post(&url, &go_call("health.health", None, "6")).await;
        let reply = go_reply(&r);
        if !reply.healthy {
            seen = Some(reply);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = seen.expect("unhealthy while draining");
    assert_eq!(reply.checks["snowgate"].error.as_deref(), Some("draining"));
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .unwrap()
        .unwrap();
    drop(nodes);
}

#[tokio::test]
async fn health_sub_paths_answer_any_method_as_get() {
    let cluster = healthy_cluster(1, |_| {}).await;
    for path in [
        "/ext/health/health",
        "/ext/health/readiness",
        "/ext/health/liveness",
    ] {
        let url = format!("{}{path}", cluster.url());
        let get = client().get(&url).send().await.unwrap();
        assert_eq!(get.status().as_u16(), 200, "{path}");
        let get: serde_json::Value = get.json().await.unwrap();
        let r = post(&url, "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let posted = r.json();
        assert_eq!(posted["healthy"], true, "{path}");
        assert_eq!(
            posted.get("upstreams").is_some(),
            get.get("upstreams").is_some(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn health_calls_pay_quota_and_meet_the_body_limit() {
    let cluster = healthy_cluster(1, |c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 10;
        c.limits.body_bytes = 512;
    })
    .await;
    let url = format!("{}/ext/health", cluster.url());
    let call = go_call("health.health", None, "1");
    let mut statuses = Vec::new();
    for _ in 0..50 {
        let r = post(&url, &call).await;
        statuses.push(r.status);
        if r.status == 429 {
            assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
            break;
        }
    }
    // The burst of ten calls of cost 1, then (refilling at one a second) a refusal.
    assert!(statuses[..10].iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // An admin is not charged.
    let auth = format!("Bearer {ADMIN_KEY}");
    let r = post_with(&url, &call, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A body over the limit is refused before it is read to the end.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"health.health","params":{{"tags":["{}"]}},"id":1}}"#,
        "x".repeat(1024)
    );
    let r = post_with(&url, &big, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 413, "{}", r.body);
}

#[tokio::test]
async fn with_redis_the_shared_tier_is_a_check_of_its_own() {
    let redis = support::redis::RedisServer::start();
    let redis_url = redis.url();
    let cluster = healthy_cluster(1, |c| {
        c.redis = Some(snowgate::config::RedisConfig {
            url: Some(redis_url.clone()),
            ..Default::default()
        });
    })
    .await;
    let url = format!("{}/ext/health", cluster.url());
    let r = post(&url, &go_call("health.health", Some(&[TAG]), "2")).await;
    let reply = go_reply(&r);
    assert!(reply.healthy, "{}", r.body);
    let shared = &reply.checks["shared"];
    assert!(shared.error.is_none(), "{}", r.body);
    assert_eq!(
        shared.message,
        Some(serde_json::json!({"redis": "up"})),
        "{}",
        r.body
    );
    // Redis's address is no more public than a node's.
    assert!(!r.body.contains(&redis_url), "{}", r.body);
    assert!(!r.body.contains("redis+unix"), "{}", r.body);
}

/// `[admin] public_versions = false` hides each node's release from `GET /ext/health` for callers
/// without a key (an attacker learns which nodes run an old release); the admin key still sees it.
#[tokio::test]
async fn node_releases_can_be_hidden_from_the_public_health_answer() {
    let shown = healthy_cluster(1, |_| {}).await;
    let body = support::get_text(&format!("{}/ext/health", shown.url())).await;
    assert!(body.contains("\"version\":"), "shown by default: {body}");

    // The test gateway has ADMIN_KEY as its admin key.
    let hidden = healthy_cluster(1, |c| c.admin.public_versions = false).await;
    let url = format!("{}/ext/health", hidden.url());
    let public = support::get_text(&url).await;
    assert!(public.contains("\"height\":"), "{public}");
    assert!(!public.contains("\"version\""), "hidden: {public}");
    let keyed = client()
        .get(&url)
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        keyed.contains("\"version\":"),
        "the operator sees it: {keyed}"
    );
}
