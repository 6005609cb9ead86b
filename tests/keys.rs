//! Keys clients present: one `Authorization: Bearer` parser for the admin keys and the rate-limit
//! keys (the scheme in any case, one or more spaces), and only the exact key unlocks anything: a
//! wrong key sharing its prefix, or the key with a byte more or less, is refused like no key.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

const SLOW_CHAIN: Duration = Duration::from_secs(60);
const RATE_KEY: &str = "explorer-team-key-0123456789";

/// Wrong keys that share the real key's bytes as far as they go.
fn near_misses(key: &str) -> Vec<String> {
    let mut last_changed = key.to_string();
    last_changed.pop();
    last_changed.push('X');
    vec![
        last_changed,
        key[..key.len() - 1].to_string(),
        format!("{key}0"),
        key.to_uppercase(),
    ]
}

#[tokio::test]
async fn admin_keys_accept_bearer_in_any_case_and_only_the_exact_key() {
    let c = Cluster::start(1, SLOW_CHAIN, |_| {}).await;
    let info = format!("{}/ext/info", c.url());
    let purge = format!("{}/snowgate/cache/purge", c.url());
    let body = call("info.getNodeID", "{}");
    let node_calls = || c.nodes[0].control().call_count("info.getNodeID");
    for scheme in ["Bearer ", "bearer ", "BEARER ", "beaRER   "] {
        let auth = format!("{scheme}{ADMIN_KEY}");
        let r = post_with(&info, &body, &[("authorization", &auth)]).await;
        assert_eq!(r.status, 200, "{auth:?}: {}", r.body);
        assert!(
            r.json()["result"]["nodeID"].is_string(),
            "{auth:?}: {}",
            r.body
        );
        let r = client()
            .post(&purge)
            .header("authorization", &auth)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{auth:?}: purge");
    }
    assert_eq!(node_calls(), 4);
    for wrong in near_misses(ADMIN_KEY) {
        for auth in [format!("Bearer {wrong}"), format!("bearer {wrong}")] {
            let r = post_with(&info, &body, &[("authorization", &auth)]).await;
            assert_eq!(r.json()["error"]["code"], -32601, "{auth:?}: {}", r.body);
            let r = client()
                .post(&purge)
                .header("authorization", &auth)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 401, "{auth:?}: purge");
        }
    }
    // Not the Bearer scheme, or no space after it.
    for auth in [format!("Basic {ADMIN_KEY}"), format!("Bearer{ADMIN_KEY}")] {
        let r = post_with(&info, &body, &[("authorization", &auth)]).await;
        assert_eq!(r.json()["error"]["code"], -32601, "{auth:?}: {}", r.body);
    }
    assert_eq!(node_calls(), 4, "a wrong key reached the node");
    c.gateway.shutdown().await;
}

/// Calls with these headers until a 429, at most 30: how many were served.
async fn served_before_429(url: &str, headers: &[(&str, &str)]) -> usize {
    let body = call("platform.sampleValidators", r#"{"size":1}"#);
    for i in 0..30 {
        let r = post_with(url, &body, headers).await;
        if r.status == 429 {
            return i;
        }
        assert_eq!(r.status, 200, "{headers:?}: {}", r.body);
    }
    30
}

#[tokio::test]
async fn rate_limit_keys_accept_bearer_in_any_case_and_only_the_exact_key() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.requests_per_second = 1;
        cfg.rate_limit.burst = 10;
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        cfg.rate_limit.keys = vec![snowgate::ratelimit::KeyQuota::new(RATE_KEY, 1000, 1000)];
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    // Each wrong-key client comes from its own forwarded address, so their IP quotas are apart.
    let mut n = 0;
    let mut from = || {
        n += 1;
        format!("198.51.100.{n}")
    };
    for scheme in ["Bearer ", "bearer ", "BEARER ", "bEaReR  "] {
        let auth = format!("{scheme}{RATE_KEY}");
        let xff = from();
        let served =
            served_before_429(&url, &[("authorization", &auth), ("x-forwarded-for", &xff)]).await;
        assert_eq!(served, 30, "{auth:?} was limited by the IP quota");
    }
    for wrong in near_misses(RATE_KEY) {
        for (header, value) in [
            ("authorization", format!("bearer {wrong}")),
            ("x-api-key", wrong.clone()),
            ("rltoken", wrong.clone()),
        ] {
            let xff = from();
            let served =
                served_before_429(&url, &[(header, &value), ("x-forwarded-for", &xff)]).await;
            assert!(served < 30, "{header}: {value:?} got the key's quota");
        }
    }
    c.gateway.shutdown().await;
}
