//! Access rules: refused methods never reach a node, whatever form the request takes; admin keys
//! unlock them and may pin a call to one named upstream.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

const RESTRICTED: [(&str, &str); 5] = [
    ("info.getNodeID", "/ext/info"),
    ("info.getNodeIP", "/ext/info"),
    ("info.getVMs", "/ext/info"),
    ("platform.exportKey", "/ext/bc/P"),
    ("platform.listAddresses", "/ext/bc/P"),
];

fn total(c: &Cluster, method: &str) -> u64 {
    c.nodes.iter().map(|n| n.control().call_count(method)).sum()
}

#[tokio::test]
async fn refused_methods_reach_no_upstream_in_any_form() {
    let c = Cluster::start(2, Duration::from_secs(60), |_| {}).await;
    let keystore = r#"{"username":"u","password":"hunter2-secret","address":"P-local1x"}"#;
    for (method, path) in RESTRICTED {
        let mut paths = vec![path.to_string()];
        if path == "/ext/bc/P" {
            paths = snowgate::methods::P_CHAIN_PATHS
                .iter()
                .map(|p| p.to_string())
                .collect();
        }
        let escaped = method
            .replace("get", "g\\u0065t")
            .replace("list", "l\\u0069st");
        let bodies = [
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{keystore}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":[{keystore}]}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":null,"method":"{method}"}}"#),
            format!(r#"{{"JSONRPC":"2.0","ID":"x","METHOD":"{method}"}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{escaped}"}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","method":"{method}"}}"#
            ),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}} trailing"#),
        ];
        for p in &paths {
            for body in &bodies {
                let r = post(&format!("{}{p}", c.url()), body).await;
                assert_eq!(r.status, 200, "{p} {body}");
                assert!(!r.body.contains("\"result\""), "{p} {body}: {}", r.body);
                assert!(
                    !r.body.contains("hunter2"),
                    "a password was echoed: {}",
                    r.body
                );
            }
        }
        // The wrong path, too.
        let other = if path == "/ext/info" {
            "/ext/bc/P"
        } else {
            "/ext/info"
        };
        post(&format!("{}{other}", c.url()), &call(method, "{}")).await;
    }
    for (method, _) in RESTRICTED {
        assert_eq!(total(&c, method), 0, "{method} reached a node");
    }
    // Case variants are unknown methods (a node would not run them either) and are not forwarded.
    for variant in [
        "info.getNodeId",
        "info.GetNodeID",
        "Info.getNodeID",
        "platform.exportkey",
    ] {
        let r = post(&format!("{}/ext/info", c.url()), &call(variant, "{}")).await;
        assert_eq!(r.json()["error"]["code"], -32601, "{variant}");
        assert_eq!(total(&c, variant), 0, "{variant} reached a node");
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn admin_keys_unlock_and_pinning_reaches_the_named_node() {
    let c = Cluster::start(3, Duration::from_secs(60), |_| {}).await;
    let auth = format!("Bearer {ADMIN_KEY}");
    let info = format!("{}/ext/info", c.url());
    // A wrong key is refused like no key.
    let r = post_with(
        &info,
        &call("info.getNodeID", "{}"),
        &[("authorization", "Bearer wrong-key-0123456789")],
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32601);
    assert_eq!(total(&c, "info.getNodeID"), 0);
    for (i, node) in c.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let r = post_with(
            &info,
            &call("info.getNodeID", "{}"),
            &[("authorization", &auth), ("x-snowgate-upstream", &name)],
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_ne!(r.json()["error"]["code"], -32601, "{}", r.body);
        assert_eq!(node.control().call_count("info.getNodeID"), 1, "{name}");
        assert!(
            r.body.contains(node.node_id()) || r.body.contains("error"),
            "{}",
            r.body
        );
    }
    assert_eq!(total(&c, "info.getNodeID"), 3);
    // Pinning to a name that does not exist.
    let r = post_with(
        &info,
        &call("info.getNetworkID", "{}"),
        &[("authorization", &auth), ("x-snowgate-upstream", "nope")],
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32600);
    assert!(r.body.contains("nope"));
    // Public callers cannot pin: the header is ignored.
    let r = post_with(
        &info,
        &call("info.getNetworkID", "{}"),
        &[("x-snowgate-upstream", "nope")],
    )
    .await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn operators_can_add_methods_and_change_access() {
    let c = Cluster::start(1, Duration::from_secs(60), |cfg| {
        cfg.methods.insert(
            "info.getNodeVersion".into(),
            snowgate::methods::MethodOverride {
                access: Some(snowgate::methods::Access::Disabled),
                ..Default::default()
            },
        );
        cfg.methods.insert(
            "info.getVMs".into(),
            snowgate::methods::MethodOverride {
                access: Some(snowgate::methods::Access::Public),
                ..Default::default()
            },
        );
        cfg.methods.insert(
            "platform.getAllValidatorsAt".into(),
            snowgate::methods::MethodOverride::default(),
        );
    })
    .await;
    let r = post(
        &format!("{}/ext/info", c.url()),
        &call("info.getNodeVersion", "{}"),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32601);
    assert!(r.body.contains("disabled"), "{}", r.body);
    assert_eq!(c.nodes[0].control().call_count("info.getNodeVersion"), 0);
    post(&format!("{}/ext/info", c.url()), &call("info.getVMs", "{}")).await;
    assert_eq!(c.nodes[0].control().call_count("info.getVMs"), 1);
    post(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.getAllValidatorsAt", r#"{"height":1}"#),
    )
    .await;
    assert_eq!(
        c.nodes[0]
            .control()
            .call_count("platform.getAllValidatorsAt"),
        1
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn client_headers_never_reach_the_node() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    // A node acts on Avalanche-Api-Route (it would answer 404); snowgate does not pass it on.
    let r = post_with(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.getHeight", "{}"),
        &[("avalanche-api-route", "P"), ("host", "evil.example")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["result"]["height"].is_string(), "{}", r.body);
    c.gateway.shutdown().await;
}
