//! The devnode answers byte for byte as avalanchego does (`avalanchego.md` §1-§2), over real HTTP
//! against a node on 127.0.0.1:0.
#![allow(clippy::unwrap_used)]

use crate::support::devnode as devnode_support;

use devnode_support::{
    call, client, is_bootstrapped_answer, post, raw, raw_post, raw_rpc, still_node, Raw,
};
use snowgate::devnode::{Chain, P_CHAIN_PATHS};

const EOF_DATA: &str = r#"{"jsonrpc":"","method":"","params":null,"id":null}"#;

fn parse_error(message: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":-32700,\"message\":\"{message}\",\"data\":{EOF_DATA}}},\"id\":null}}\n"
    )
}

fn method_error(message: &str, id: &str) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":-32000,\"message\":{message},\"data\":null}},\"id\":{id}}}\n")
}

/// JSON-RPC answers: HTTP 200, the JSON content type, `Node-Id` and `Vary: Origin`.
fn assert_json_answer(r: &Raw, node_id: &str) {
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("node-id"), Some(node_id));
    assert_eq!(r.header("vary"), Some("Origin"));
}

#[tokio::test]
async fn every_error_catalog_row_is_byte_exact_and_http_200() {
    let node = still_node().await;
    let batch = format!(
        "[{},{}]",
        call("platform.getHeight", 1),
        call("platform.getHeight", 2)
    );
    let rows: Vec<(&str, String, String)> = vec![
        ("/ext/bc/P", "".to_string(), parse_error("EOF")),
        ("/ext/bc/P", " \n\t ".to_string(), parse_error("EOF")),
        ("/ext/bc/P", r#"{"jsonrpc":"2.0","#.to_string(), parse_error("unexpected EOF")),
        ("/ext/bc/P", "hello".to_string(), parse_error("invalid character 'h' looking for beginning of value")),
        ("/ext/bc/P", batch.clone(), parse_error("json: cannot unmarshal array into Go value of type json2.serverRequest")),
        ("/ext/bc/P", "5".to_string(), parse_error("json: cannot unmarshal number into Go value of type json2.serverRequest")),
        ("/ext/bc/P", r#""x""#.to_string(), parse_error("json: cannot unmarshal string into Go value of type json2.serverRequest")),
        (
            "/ext/bc/P",
            r#"{"jsonrpc":2.0,"method":"platform.getHeight","id":1}"#.to_string(),
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"json: cannot unmarshal number into Go struct field serverRequest.jsonrpc of type string","data":{"jsonrpc":"","method":"platform.getHeight","params":null,"id":1}},"id":1}"#.to_string() + "\n",
        ),
        (
            "/ext/bc/P",
            r#"{"jsonrpc":"2.0","method":5,"id":1}"#.to_string(),
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"json: cannot unmarshal number into Go struct field serverRequest.method of type string","data":{"jsonrpc":"2.0","method":"","params":null,"id":1}},"id":1}"#.to_string() + "\n",
        ),
        (
            "/ext/bc/P",
            r#"{"jsonrpc":"1.0","method":"platform.getHeight","id":7}"#.to_string(),
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"jsonrpc must be 2.0","data":{"jsonrpc":"1.0","method":"platform.getHeight","params":null,"id":7}},"id":7}"#.to_string() + "\n",
        ),
        (
            "/ext/bc/P",
            r#"{"method":"platform.getHeight","id":7}"#.to_string(),
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"jsonrpc must be 2.0","data":{"jsonrpc":"","method":"platform.getHeight","params":null,"id":7}},"id":7}"#.to_string() + "\n",
        ),
        ("/ext/bc/P", call("platform.nope", 1), method_error(r#""rpc: can't find method \"platform.Nope\"""#, "1")),
        ("/ext/bc/P", call("platform.getheight", 1), method_error(r#""rpc: can't find method \"platform.Getheight\"""#, "1")),
        ("/ext/bc/P", call("platform.GetHeight", 1), method_error(r#""method must start with a non-uppercase letter""#, "1")),
        ("/ext/bc/P", call("Platform.getHeight", 1), method_error(r#""rpc: can't find service \"Platform.GetHeight\"""#, "1")),
        ("/ext/bc/P", call("info.getNetworkID", 1), method_error(r#""rpc: can't find service \"info.GetNetworkID\"""#, "1")),
        ("/ext/bc/P", call("getHeight", 1), method_error(r#""rpc: service/method request ill-formed: \"getHeight\"""#, "1")),
        ("/ext/bc/P", call("", 1), method_error(r#""rpc: service/method request ill-formed: \"\"""#, "1")),
        ("/ext/bc/P", call("platform.a.b", 1), method_error(r#""rpc: service/method request ill-formed: \"platform.A.b\"""#, "1")),
        ("/ext/bc/P", call("platform.", 1), method_error(r#""rpc: can't find method \"platform.\"""#, "1")),
        (
            "/ext/health",
            r#"{"jsonrpc":"2.0","method":"health.health","params":"x","id":1}"#.to_string(),
            method_error(r#""couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls""#, "1"),
        ),
    ];
    for (path, body, expected) in rows {
        let r = raw_rpc(node.addr(), path, &body).await;
        assert_json_answer(&r, node.node_id());
        assert_eq!(r.text(), expected, "body {body:?}");
        // No method ran for any of these rows.
        assert_eq!(r.header("x-content-type-options"), None, "body {body:?}");
    }
}

#[tokio::test]
async fn null_and_empty_objects_are_silent_notifications() {
    let node = still_node().await;
    for body in [
        "null",
        "{}",
        r#"{"jsonrpc":"1.0","method":"platform.getHeight"}"#,
    ] {
        let r = raw_rpc(node.addr(), "/ext/bc/P", body).await;
        assert_eq!((r.status, r.body.len()), (200, 0), "{body}");
        assert_eq!(r.header("content-type"), None);
        assert_eq!(r.header("content-length"), Some("0"));
    }
    // Invalid versions never reach dispatch.
    assert_eq!(node.control().total_calls(), 0);
}

#[tokio::test]
async fn success_has_the_node_headers_and_trailing_newline() {
    let node = still_node().await;
    let r = raw_rpc(node.addr(), "/ext/bc/P", &call("platform.getHeight", 1)).await;
    assert_json_answer(&r, node.node_id());
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.text(),
        "{\"jsonrpc\":\"2.0\",\"result\":{\"height\":\"1000\"},\"id\":1}\n"
    );
    let r = raw_rpc(node.addr(), "/ext/info", &call("info.getNetworkID", 2)).await;
    assert_eq!(
        r.text(),
        "{\"jsonrpc\":\"2.0\",\"result\":{\"networkID\":\"12345\"},\"id\":2}\n"
    );
    assert!(node.node_id().starts_with("NodeID-"));
}

#[tokio::test]
async fn non_post_is_405_text_without_newline() {
    let node = still_node().await;
    for method in ["GET", "PUT", "DELETE", "OPTIONS"] {
        let r = raw(
            node.addr(),
            &format!("{method} /ext/bc/P HTTP/1.1\r\nHost: localhost"),
            b"",
        )
        .await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(
            r.text(),
            format!("rpc: POST method required, received {method}")
        );
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("x-content-type-options"), None);
        assert_eq!(r.header("node-id"), Some(node.node_id()));
        assert_eq!(r.header("vary"), Some("Origin"));
    }
    let r = raw(
        node.addr(),
        "HEAD /ext/info HTTP/1.1\r\nHost: localhost",
        b"",
    )
    .await;
    assert_eq!((r.status, r.body.len()), (405, 0));
}

#[tokio::test]
async fn content_type_must_strip_to_application_json() {
    let node = still_node().await;
    let body = call("platform.getHeight", 1);
    let r = raw_post(node.addr(), "/ext/bc/P", "Host: localhost", &body).await;
    assert_eq!(r.status, 415);
    assert_eq!(r.text(), "rpc: unrecognized Content-Type: ");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-content-type-options"), None);
    assert_eq!(r.header("node-id"), Some(node.node_id()));
    for (ct, shown) in [
        ("text/plain", "text/plain"),
        ("application/json-rpc", "application/json-rpc"),
        (
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded",
        ),
        ("Text/Plain; charset=utf-8", "Text/Plain"),
    ] {
        let headers = format!("Host: localhost\r\nContent-Type: {ct}");
        let r = raw_post(node.addr(), "/ext/bc/P", &headers, &body).await;
        assert_eq!(r.status, 415, "{ct}");
        assert_eq!(r.text(), format!("rpc: unrecognized Content-Type: {shown}"));
    }
    for ct in [
        "application/json",
        "application/json;",
        "application/json; charset=utf-8",
        "APPLICATION/JSON; charset=UTF-8",
        "application/json;charset=UTF-8",
    ] {
        let headers = format!("Host: localhost\r\nContent-Type: {ct}");
        let r = raw_post(node.addr(), "/ext/bc/P", &headers, &body).await;
        assert_eq!(r.status, 200, "{ct}");
        assert!(r.text().contains("\"height\""), "{ct}");
    }
}

#[tokio::test]
async fn unknown_paths_are_404_text() {
    let node = still_node().await;
    for path in [
        "/",
        "/ext/bc/P/",
        "/ext/bc/p",
        "/ext/bc/X",
        "/ext/info/",
        "/ext/metrics",
        "/ext/admin",
    ] {
        let r = raw_rpc(node.addr(), path, &call("platform.getHeight", 1)).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.text(), "404 page not found\n");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("node-id"), Some(node.node_id()));
    }
}

#[tokio::test]
async fn unclean_paths_redirect_301_to_the_clean_path() {
    let node = still_node().await;
    for (path, location) in [
        ("//ext/bc/P", "/ext/bc/P"),
        ("/ext/bc/X/../P", "/ext/bc/P"),
        ("/ext/./info", "/ext/info"),
        ("/ext//bc/P?a=1", "/ext/bc/P?a=1"),
    ] {
        let r = raw_rpc(node.addr(), path, &call("platform.getHeight", 1)).await;
        assert_eq!(r.status, 301, "{path}");
        assert_eq!(r.header("location"), Some(location));
        assert!(r.body.is_empty());
        assert_eq!(r.header("node-id"), Some(node.node_id()));
    }
}

#[tokio::test]
async fn all_five_p_chain_routes_answer_identically_and_ignore_queries() {
    let node = still_node().await;
    let mut bodies = Vec::new();
    for path in P_CHAIN_PATHS {
        let r = post(
            &format!("{}{path}?ignored=1", node.url()),
            call("platform.getHeight", 3),
        )
        .await;
        assert_eq!(r.status(), 200, "{path}");
        bodies.push(r.text().await.unwrap());
    }
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
    assert_eq!(
        bodies[0],
        "{\"jsonrpc\":\"2.0\",\"result\":{\"height\":\"1000\"},\"id\":3}\n"
    );
    assert_eq!(node.control().call_count("platform.getHeight"), 5);
}

#[tokio::test]
async fn notifications_run_the_method_and_answer_an_empty_200() {
    let node = still_node().await;
    for body in [
        r#"{"jsonrpc":"2.0","method":"platform.getHeight"}"#,
        r#"{"jsonrpc":"2.0","method":"platform.getHeight","id":null}"#,
        r#"{"jsonrpc":"2.0","method":"platform.nope"}"#,
    ] {
        let r = raw_rpc(node.addr(), "/ext/bc/P", body).await;
        assert_eq!((r.status, r.body.len()), (200, 0), "{body}");
        assert_eq!(r.header("content-type"), None);
        assert_eq!(r.header("node-id"), Some(node.node_id()));
    }
    let control = node.control();
    assert_eq!(control.call_count("platform.getHeight"), 2);
    assert_eq!(control.call_count("platform.nope"), 1);
    assert_eq!(control.total_calls(), 3);
}

#[tokio::test]
async fn ids_are_echoed_raw() {
    let node = still_node().await;
    for (sent, echoed) in [
        (r#""abc""#, r#""abc""#),
        ("9223372036854775807", "9223372036854775807"),
        ("12345678901234567890123", "12345678901234567890123"),
        ("1.50", "1.50"),
        ("-0", "-0"),
        ("true", "true"),
        ("[1, 2]", "[1,2]"),
        (r#"{ "a" : [ 1 , "x" ] }"#, r#"{"a":[1,"x"]}"#),
        (r#""<a&b>""#, r#""\u003ca\u0026b\u003e""#),
        (r#""\u00e9""#, r#""\u00e9""#),
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"platform.getHeight","id":{sent}}}"#);
        let r = raw_rpc(node.addr(), "/ext/bc/P", &body).await;
        assert_eq!(
            r.text(),
            format!("{{\"jsonrpc\":\"2.0\",\"result\":{{\"height\":\"1000\"}},\"id\":{echoed}}}\n"),
            "id {sent}"
        );
    }
}

#[tokio::test]
async fn keys_fold_case_last_duplicate_wins_and_trailing_data_is_ignored() {
    let node = still_node().await;
    for (body, id) in [
        (
            r#"{"JSONRPC":"2.0","Method":"platform.getHeight","ID":5}"#,
            "5",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","id":1,"id":2}"#,
            "2",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.nope","method":"platform.getHeight","id":3}"#,
            "3",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","id":4} garbage"#,
            "4",
        ),
        (
            r#"  {"jsonrpc":"2.0","method":"platform.getHeight","id":6}{"x":1}"#,
            "6",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","params":[{}],"id":7}"#,
            "7",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","params":[],"id":8}"#,
            "8",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"platform.getHeight","params":null,"unknown":1,"id":9}"#,
            "9",
        ),
    ] {
        let r = raw_rpc(node.addr(), "/ext/bc/P", body).await;
        assert_eq!(
            r.text(),
            format!("{{\"jsonrpc\":\"2.0\",\"result\":{{\"height\":\"1000\"}},\"id\":{id}}}\n"),
            "{body}"
        );
    }
    // Counted under the name that was dispatched (the last `method`).
    assert_eq!(node.control().call_count("platform.nope"), 0);
}

#[tokio::test]
async fn cors_headers_and_preflight() {
    let node = still_node().await;
    let c = client();
    let url = format!("{}/ext/bc/P", node.url());
    let r = c
        .post(&url)
        .header("origin", "https://wallet.example")
        .header("content-type", "application/json")
        .body(call("platform.getHeight", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    assert_eq!(r.headers()["vary"], "Origin");

    let r = post(&url, call("platform.getHeight", 1)).await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert_eq!(r.headers()["vary"], "Origin");

    let r = c
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://wallet.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert_eq!(r.headers()["access-control-allow-methods"], "POST");
    assert_eq!(r.headers()["access-control-allow-headers"], "Content-Type");
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    assert_eq!(r.headers()["node-id"], node.node_id());
    let vary: Vec<_> = r.headers().get_all("vary").iter().collect();
    assert_eq!(
        vary,
        [
            "Origin",
            "Access-Control-Request-Method",
            "Access-Control-Request-Headers"
        ]
    );
    assert!(r.bytes().await.unwrap().is_empty());

    // Preflight is answered before the host filter and the router.
    let r = raw(
        node.addr(),
        "OPTIONS /nowhere HTTP/1.1\r\nHost: evil.example\r\nOrigin: https://x.example\r\nAccess-Control-Request-Method: POST",
        b"",
    )
    .await;
    assert_eq!((r.status, r.body.len()), (200, 0));

    let r = c
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://wallet.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.text().await.unwrap(),
        "rpc: POST method required, received OPTIONS"
    );
    // Nothing reached dispatch but the two POSTs.
    assert_eq!(node.control().total_calls(), 2);
}

#[tokio::test]
async fn host_filter_allows_only_ips_and_localhost() {
    let node = still_node().await;
    let body = call("platform.getHeight", 1);
    for host in [
        "localhost",
        "LOCALHOST:9650",
        "127.0.0.1:1",
        "10.1.2.3",
        "[::1]:9650",
        "",
    ] {
        let headers = format!("Host: {host}\r\nContent-Type: application/json");
        let r = raw_post(node.addr(), "/ext/bc/P", &headers, &body).await;
        assert_eq!(r.status, 200, "host {host:?}");
    }
    for host in ["example.com", "example.com:9650", "localhost.example"] {
        let headers = format!("Host: {host}\r\nContent-Type: application/json");
        let r = raw_post(node.addr(), "/ext/bc/P", &headers, &body).await;
        assert_eq!(r.status, 403, "host {host:?}");
        assert_eq!(r.text(), "invalid host specified\n");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("node-id"), Some(node.node_id()));
        assert_eq!(r.header("vary"), Some("Origin"));
    }
}

#[tokio::test]
async fn avalanche_api_route_header_bypasses_path_routing() {
    let node = still_node().await;
    let body = call("platform.getHeight", 1);
    for (value, status) in [
        ("", 400),
        ("P", 404),
        ("11111111111111111111111111111111LpoYY", 404),
    ] {
        let headers = format!(
            "Host: localhost\r\nContent-Type: application/json\r\nAvalanche-Api-Route: {value}"
        );
        let r = raw_post(node.addr(), "/ext/bc/P", &headers, &body).await;
        assert_eq!(r.status, status, "route {value:?}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("content-type"), None);
    }
    assert_eq!(node.control().total_calls(), 0);
}

#[tokio::test]
async fn cleartext_http2_with_prior_knowledge() {
    let node = still_node().await;
    let c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = c
        .post(format!("{}/ext/bc/P", node.url()))
        .header("content-type", "application/json")
        .body(call("platform.getHeight", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["node-id"], node.node_id());
    assert_eq!(
        r.text().await.unwrap(),
        "{\"jsonrpc\":\"2.0\",\"result\":{\"height\":\"1000\"},\"id\":1}\n"
    );
}

#[tokio::test]
async fn health_endpoints() {
    let node = still_node().await;
    let c = client();
    let r = c
        .get(format!("{}/ext/health", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["node-id"], node.node_id());
    let text = r.text().await.unwrap();
    assert!(text.ends_with("}\n"));
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["healthy"], true);
    let check = &report["checks"]["bootstrapped"];
    assert_eq!(check["message"], serde_json::json!([]));
    assert!(check["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(check["duration"].is_u64());
    assert!(check.get("error").is_none() && check.get("contiguousFailures").is_none());

    for (path, method) in [
        ("health", "PUT"),
        ("readiness", "POST"),
        ("liveness", "GET"),
    ] {
        let r = c
            .request(
                method.parse().unwrap(),
                format!("{}/ext/health/{path}", node.url()),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let report: serde_json::Value = r.json().await.unwrap();
        assert_eq!(report["healthy"], true);
    }

    for method in ["health.health", "health.readiness", "health.liveness"] {
        let r = post(
            &format!("{}/ext/health", node.url()),
            format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"tags":[]}},"id":1}}"#),
        )
        .await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        let answer: serde_json::Value = r.json().await.unwrap();
        assert_eq!(answer["result"]["healthy"], true, "{method}");
    }
    assert_eq!(node.control().call_count("health.health"), 1);

    let r = c
        .put(format!("{}/ext/health", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.text().await.unwrap(),
        "rpc: POST method required, received PUT"
    );
}

#[tokio::test]
async fn is_bootstrapped_true_when_the_chain_has_it() {
    // The skeleton chain may not have info.isBootstrapped yet; the bootstrapping test in
    // devnode_faults.rs covers the other side.
    if !Chain::has_method("info", "IsBootstrapped") {
        return;
    }
    let node = still_node().await;
    assert_eq!(
        is_bootstrapped_answer(&node.url()).await,
        "{\"jsonrpc\":\"2.0\",\"result\":{\"isBootstrapped\":true},\"id\":1}\n"
    );
}
