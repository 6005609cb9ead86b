//! Provider-style upstreams: a base URL with a path prefix holding a key and credentials (Basic
//! auth), extra headers read from the environment, an overridden `Host`, and API paths of the
//! provider's own. A scripted node records exactly what it receives; the key, the password and the
//! header value appear nowhere snowgate answers (`/ext/health`, `/metrics`, errors).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use snowgate::config::{Config, UpstreamConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const KEY: &str = "pk-SECRET-path-key-7731";
const PASSWORD: &str = "pw@SECRET:9";
const HEADER_VALUE: &str = "hv-SECRET-header-5521";

/// What the node saw: each request's path and headers (lower-case names).
type Seen = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// A node that answers every JSON-RPC call with a plausible result (and HTTP 500 to
/// `platform.getTx`, so that an error answer can be checked for leaks), recording each request.
async fn scripted_node() -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request: the head, then Content-Length bytes of body.
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let path = lines.next().unwrap().split(' ').nth(1).unwrap().to_string();
                    let headers: HashMap<String, String> = lines
                        .filter_map(|l| l.split_once(": "))
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                        .collect();
                    let len: usize = headers["content-length"].parse().unwrap();
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: serde_json::Value =
                        serde_json::from_slice(&buf[head_end..head_end + len]).unwrap();
                    buf.drain(..head_end + len);
                    record.lock().push((path, headers));
                    let result = match body["method"].as_str().unwrap_or("") {
                        "info.isBootstrapped" => r#"{"isBootstrapped":true}"#,
                        "platform.getHeight" => r#"{"height":"100"}"#,
                        "info.getNetworkID" => r#"{"networkID":"12345"}"#,
                        "platform.getTx" => {
                            let answer =
                                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        _ => "{}",
                    };
                    let out = format!(
                        r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#,
                        body["id"]
                    );
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{out}",
                        out.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

#[tokio::test]
async fn a_provider_upstream_gets_its_path_headers_and_host_and_its_secrets_stay_inside() {
    // Unique to this test: the process's tests share one environment.
    std::env::set_var("SNOWGATE_TEST_PROVIDER_KEY", HEADER_VALUE);
    let (prefixed, seen_a) = scripted_node().await;
    let (own_paths, seen_b) = scripted_node().await;
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.api_keys = vec![support::ADMIN_KEY.to_string()];
    config.rate_limit.enabled = false;
    let password = PASSWORD.replace('@', "%40").replace(':', "%3A");
    config.upstreams = vec![
        UpstreamConfig {
            name: "provider".into(),
            url: format!("http://user:{password}@127.0.0.1:{prefixed}/v1/{KEY}/"),
            headers: [(
                "x-api-key".to_string(),
                "${SNOWGATE_TEST_PROVIDER_KEY}".to_string(),
            )]
            .into(),
            host_header: Some("node.internal".into()),
            ..Default::default()
        },
        UpstreamConfig {
            name: "own-paths".into(),
            url: format!("http://127.0.0.1:{own_paths}"),
            info_path: Some(format!("/rpc/{KEY}/info")),
            platform_path: Some(format!("/rpc/{KEY}/p")),
            ..Default::default()
        },
    ];
    config.cache.enabled = false;
    let debug = format!("{config:?}");
    for secret in [KEY, PASSWORD, HEADER_VALUE, "SECRET"] {
        assert!(!debug.contains(secret), "{secret} in the config's Debug");
    }
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    let base = gateway.url();
    for i in 0..6 {
        let r = support::post(
            &format!("{base}/ext/bc/P"),
            r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":{}}"#,
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
        let r = support::post(
            &format!("{base}/ext/info"),
            r#"{"jsonrpc":"2.0","id":1,"method":"info.getNetworkID"}"#,
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
    }
    // Exactly the expected paths and headers, health checks included.
    // Both APIs were asked on each node (its health checks ask both, and the calls are spread).
    let seen = seen_a.lock().clone();
    for api in ["/ext/info", "/ext/bc/P"] {
        assert!(seen.iter().any(|(p, _)| p.ends_with(api)), "{seen:?}");
    }
    for (path, headers) in &seen {
        assert!(
            path == &format!("/v1/{KEY}/ext/info") || path == &format!("/v1/{KEY}/ext/bc/P"),
            "{path}"
        );
        assert_eq!(headers["x-api-key"], HEADER_VALUE);
        assert_eq!(headers["host"], "node.internal");
        // base64("user:pw@SECRET:9")
        assert_eq!(headers["authorization"], "Basic dXNlcjpwd0BTRUNSRVQ6OQ==");
    }
    let seen = seen_b.lock().clone();
    for api in ["/info", "/p"] {
        assert!(seen.iter().any(|(p, _)| p.ends_with(api)), "{seen:?}");
    }
    for (path, headers) in &seen {
        assert!(
            path == &format!("/rpc/{KEY}/info") || path == &format!("/rpc/{KEY}/p"),
            "{path}"
        );
        assert_eq!(headers["host"], format!("127.0.0.1:{own_paths}"));
        assert!(!headers.contains_key("authorization"));
        assert!(!headers.contains_key("x-api-key"));
    }
    // An error from a node (HTTP 500), /ext/health and /metrics name no secret.
    let error = support::post(
        &format!("{base}/ext/bc/P"),
        r#"{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD"}}"#,
    )
    .await;
    assert!(error.body.contains("error"), "{}", error.body);
    let health = support::get_text(&format!("{base}/ext/health")).await;
    let metrics = support::get_metrics(&base).await;
    for text in [&error.body, &health, &metrics] {
        for secret in [KEY, PASSWORD, HEADER_VALUE, "SECRET", "node.internal"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(
            !text.contains(&prefixed.to_string()),
            "a node address leaked: {text}"
        );
    }
    gateway.shutdown().await;
}

#[test]
fn provider_config_errors_name_the_key_never_the_secret() {
    let parse = |table: &str| {
        Config::parse(&format!("[[upstreams]]\nname = \"p\"\n{table}"), "t.toml").unwrap_err()
    };
    let e = parse("url = \"http://127.0.0.1:1/v1/k\"\nheaders = { \"x-api-key\" = \"${SNOWGATE_TEST_UNSET_VAR_91}\" }\n");
    assert_eq!(e.key(), Some("upstreams[0].headers"), "{e}");
    assert!(e.to_string().contains("SNOWGATE_TEST_UNSET_VAR_91"), "{e}");
    let e = parse("url = \"http://127.0.0.1:1\"\nheaders = { \"content-length\" = \"1\" }\n");
    assert_eq!(e.key(), Some("upstreams[0].headers"), "{e}");
    let e = parse("url = \"http://u:SECRETPW@127.0.0.1:1/v1/SECRETKEY?x=1\"\n");
    assert_eq!(e.key(), Some("upstreams[0].url"), "{e}");
    assert!(!e.to_string().contains("SECRET"), "{e}");
    let e = parse("url = \"http://127.0.0.1:1\"\ninfo_path = \"ext/info\"\n");
    assert_eq!(e.key(), Some("upstreams[0].info_path"), "{e}");
    let e = parse("url = \"http://127.0.0.1:1\"\nhost_header = \"a b\"\n");
    assert_eq!(e.key(), Some("upstreams[0].host_header"), "{e}");
}
