//! The gateway speaks the node's wire protocol: routes, HTTP refusals, ids, notifications, and
//! the node's own error bodies for malformed envelopes; plus snowgate's error table.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

const BLOCK: Duration = Duration::from_millis(500);

#[tokio::test]
async fn unknown_paths_wrong_methods_and_content_types_are_answered_like_a_node() {
    let c = Cluster::start(1, BLOCK, |_| {}).await;
    let node = &c.nodes[0];
    for base in [c.url(), node.url()] {
        let r = post(
            &format!("{base}/ext/bc/X"),
            &call("platform.getHeight", "{}"),
        )
        .await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (404, "404 page not found\n"),
            "{base}"
        );
        let r = client()
            .get(format!("{base}/ext/bc/P"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405);
        assert_eq!(
            r.text().await.unwrap(),
            "rpc: POST method required, received GET"
        );
        let r = client()
            .post(format!("{base}/ext/info"))
            .header("content-type", "text/plain")
            .body(call("info.getNetworkID", "{}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 415);
        assert_eq!(
            r.text().await.unwrap(),
            "rpc: unrecognized Content-Type: text/plain"
        );
        let r = client()
            .post(format!("{base}/ext/info"))
            .body(call("info.getNetworkID", "{}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 415);
        assert_eq!(r.text().await.unwrap(), "rpc: unrecognized Content-Type: ");
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn every_p_chain_alias_answers_like_the_node() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let direct = post(
        &format!("{}/ext/bc/P", c.nodes[0].url()),
        &call("platform.getHeight", "{}"),
    )
    .await;
    for path in snowgate::methods::P_CHAIN_PATHS {
        let r = post(
            &format!("{}{path}", c.url()),
            &call("platform.getHeight", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, direct.body, "{path}");
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn ids_are_echoed_byte_for_byte() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let cases = [
        (r#""abc""#, r#""abc""#),
        ("9223372036854775807", "9223372036854775807"),
        ("12345678901234567890123", "12345678901234567890123"),
        ("1.50", "1.50"),
        (r#"{ "a" : [1, 2] }"#, r#"{"a":[1,2]}"#),
        (r#""<a&b>""#, r#""\u003ca\u0026b\u003e""#),
        ("-0", "-0"),
        ("true", "true"),
    ];
    for (sent, echoed) in cases {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{sent},"method":"platform.getHeight"}}"#);
        let via_gateway = post(&format!("{}/ext/bc/P", c.url()), &body).await;
        let direct = post(&format!("{}/ext/bc/P", c.nodes[0].url()), &body).await;
        assert!(
            via_gateway.body.ends_with(&format!(",\"id\":{echoed}}}\n")),
            "{sent}: {}",
            via_gateway.body
        );
        // The id is held to the catalog's bytes above (gateway and devnode echo it with the same
        // code); the rest of the body is the devnode's answer, forwarded.
        assert_eq!(via_gateway.body, direct.body, "{sent}");
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn notifications_get_an_empty_200() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    for body in [
        r#"{"jsonrpc":"2.0","method":"platform.getHeight"}"#,
        r#"{"jsonrpc":"2.0","method":"platform.getHeight","id":null}"#,
        r#"{"jsonrpc":"2.0","method":"info.getNodeID"}"#,
        r#"{"jsonrpc":"2.0","method":"platform.nope"}"#,
        r#"{}"#,
        "null",
    ] {
        let path = if body.contains("info.") {
            "/ext/info"
        } else {
            "/ext/bc/P"
        };
        let r = post(&format!("{}{path}", c.url()), body).await;
        assert_eq!((r.status, r.body.as_str()), (200, ""), "{body}");
        assert!(r.header("content-type").is_none(), "{body}");
    }
    c.gateway.shutdown().await;
}

/// The -32700 / -32600 bodies of avalanchego's error catalog (gorilla/rpc json2 over Go's
/// encoding/json, each checked byte for byte against a replica built from the versions a node
/// pins). `data` echoes the envelope as far as Go decoded it, `id` is echoed only when it was
/// decoded, and every body ends with the `\n` of Go's `json.Encoder`.
const EMPTY_DATA: &str = r#"{"jsonrpc":"","method":"","params":null,"id":null}"#;

/// A -32700 body with nothing decoded (a syntax error, or a body that is not an object).
fn parse_error(message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","error":{{"code":-32700,"message":"{message}","data":{EMPTY_DATA}}},"id":null}}"#
    ) + "\n"
}

#[tokio::test]
async fn malformed_envelopes_get_the_nodes_own_error_bodies() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    // (body sent, the catalog's answer). The gateway answers these itself, with the same `jsonrpc`
    // code the devnode uses, so each is held to the catalog rather than to the devnode.
    let cases: [(&str, String); 11] = [
        // Empty body or whitespace: Go's io.EOF.
        ("", parse_error("EOF")),
        ("   ", parse_error("EOF")),
        // Truncated JSON.
        (r#"{"jsonrpc":"2.0","#, parse_error("unexpected EOF")),
        // Not JSON.
        (
            "hello",
            parse_error("invalid character 'h' looking for beginning of value"),
        ),
        // A body that is JSON but not an object.
        (
            "5",
            parse_error("json: cannot unmarshal number into Go value of type json2.serverRequest"),
        ),
        (
            r#""x""#,
            parse_error("json: cannot unmarshal string into Go value of type json2.serverRequest"),
        ),
        // `"jsonrpc":2.0` (a number): Go goes on decoding, so `data` holds the other fields and
        // the id is echoed.
        (
            r#"{"jsonrpc":2.0,"method":"platform.getHeight","id":7}"#,
            concat!(
                r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"json: cannot unmarshal number into Go struct field serverRequest.jsonrpc of type string","#,
                r#""data":{"jsonrpc":"","method":"platform.getHeight","params":null,"id":7}},"id":7}"#,
                "\n"
            )
            .to_string(),
        ),
        // `"method":5`.
        (
            r#"{"jsonrpc":"2.0","method":5,"id":7}"#,
            concat!(
                r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"json: cannot unmarshal number into Go struct field serverRequest.method of type string","#,
                r#""data":{"jsonrpc":"2.0","method":"","params":null,"id":7}},"id":7}"#,
                "\n"
            )
            .to_string(),
        ),
        // `"jsonrpc":"1.0"` with id 7: the catalog's body as it stands.
        (
            r#"{"jsonrpc":"1.0","method":"platform.getHeight","id":7}"#,
            concat!(
                r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"jsonrpc must be 2.0","data":{"jsonrpc":"1.0","method":"platform.getHeight","params":null,"id":7}},"id":7}"#,
                "\n"
            )
            .to_string(),
        ),
        // `jsonrpc` missing: the same -32600; the params in `data` as Go's encoder writes a
        // RawMessage (compact, `<` and `>` escaped).
        (
            r#"{"method":"platform.getHeight","id":7,"params":{"a":"<>"}}"#,
            concat!(
                r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"jsonrpc must be 2.0","data":{"jsonrpc":"","method":"platform.getHeight","params":{"a":"\u003c\u003e"},"id":7}},"id":7}"#,
                "\n"
            )
            .to_string(),
        ),
        // A UTF-8 byte order mark: a parse error, its first byte named as Go's scanner names it.
        (
            "\u{feff}{}",
            parse_error("invalid character 'ï' looking for beginning of value"),
        ),
    ];
    for (body, expected) in &cases {
        for base in [c.url(), c.nodes[0].url()] {
            let r = post(&format!("{base}/ext/bc/P"), body).await;
            assert_eq!(r.status, 200, "{base} {body:?}");
            assert_eq!(&r.body, expected, "{base} {body:?}");
        }
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn the_error_table() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let p = format!("{}/ext/bc/P", c.url());
    let info = format!("{}/ext/info", c.url());

    let r = post(&info, &call("info.getNodeID", "{}")).await;
    assert_eq!(r.status, 200);
    let e = &r.json()["error"];
    assert_eq!(e["code"], -32601);
    assert!(
        e["message"].as_str().unwrap().contains("info.getNodeID"),
        "{e}"
    );
    assert_eq!(r.json()["id"], 1);

    let r = post(&p, &call("platform.nope", "{}")).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (200, Some(-32601))
    );
    assert!(r.body.contains("platform.nope"), "{}", r.body);

    let r = post(&p, &call("info.getNetworkID", "{}")).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (200, Some(-32601))
    );
    assert!(r.body.contains("/ext/info"), "{}", r.body);

    let r = post(
        &p,
        r#"{"jsonrpc":"2.0","id":"x","method":"platform.getHeight","METHOD":"platform.exportKey"}"#,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (200, Some(-32600))
    );
    assert_eq!(r.json()["id"], "x");

    c.gateway.shutdown().await;

    // No healthy upstream: a node that is not there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "gone".into(),
        url: dead_url,
        ..Default::default()
    }];
    let gw = snowgate::Gateway::start(config).await.unwrap();
    let r = post(
        &format!("{}/ext/bc/P", gw.url()),
        r#"{"jsonrpc":"2.0","id":"q","method":"platform.getHeight"}"#,
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], -32603);
    assert_eq!(r.json()["id"], "q");
    let h = client()
        .get(format!("{}/ext/health", gw.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(h.status().as_u16(), 503);
    gw.shutdown().await;
}

#[tokio::test]
async fn health_and_metrics_endpoints() {
    let c = Cluster::start(2, Duration::from_secs(60), |_| {}).await;
    let r = client()
        .get(format!("{}/ext/health", c.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["healthy"], true);
    assert_eq!(v["upstreams"].as_array().unwrap().len(), 2);
    assert!(v["upstreams"][0]["height"].as_u64().unwrap() > 0);
    assert!(
        !v.to_string().contains("127.0.0.1"),
        "node addresses are not exposed: {v}"
    );
    post(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.getHeight", "{}"),
    )
    .await;
    let m = client()
        .get(format!("{}/metrics", c.url()))
        .header("authorization", format!("Bearer {}", support::ADMIN_KEY))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "snowgate_requests_total{method=\"platform.getHeight\",outcome=\"ok\"} 1",
        "snowgate_upstream_requests_total",
        "snowgate_upstream_latency_seconds_bucket",
        "snowgate_upstream_healthy{upstream=\"node-0\"} 1",
        "snowgate_upstream_height{upstream=\"node-1\"}",
        "snowgate_best_height",
    ] {
        assert!(m.contains(name), "{name} missing from:\n{m}");
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn http2_cleartext_is_served() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .no_proxy()
        .build()
        .unwrap();
    let r = h2
        .post(format!("{}/ext/bc/P", c.url()))
        .header("content-type", "application/json")
        .body(call("platform.getHeight", "{}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["result"]["height"].is_string());
    c.gateway.shutdown().await;
}

/// The ProposerVM API under every P-chain route, as a node's router registers it: the node and
/// snowgate answer it alike on all five, with the same access and cache rules.
#[tokio::test]
async fn proposervm_is_served_under_every_p_chain_route() {
    let c = Cluster::start(1, BLOCK, |_| {}).await;
    let node = &c.nodes[0];
    let body = call("proposervm.getCurrentEpoch", "{}");
    for path in snowgate::jsonrpc::http::PROPOSERVM_PATHS {
        let direct = post(&format!("{}{path}", node.url()), &body).await;
        assert_eq!(direct.status, 200, "{path}: {}", direct.body);
        assert!(
            direct.json().get("result").is_some(),
            "{path}: {}",
            direct.body
        );
        let through = post(&format!("{}{path}", c.url()), &body).await;
        assert_eq!(through.status, 200, "{path}: {}", through.body);
        assert!(
            through.json().get("result").is_some(),
            "{path}: {}",
            through.body
        );
        // A method of another family is refused alike on each.
        let wrong = post(
            &format!("{}{path}", c.url()),
            &call("platform.getHeight", "{}"),
        )
        .await;
        assert!(
            wrong.body.contains("is not served at"),
            "{path}: {}",
            wrong.body
        );
        // A path below it is no route, on either.
        for base in [c.url(), node.url()] {
            let r = post(&format!("{base}{path}/"), &body).await;
            assert_eq!(r.status, 404, "{base}{path}/");
        }
    }
}
