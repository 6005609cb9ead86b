//! CORS through the gateway, as avalanchego's rs/cors v1.7.0 answers it (all origins, credentials,
//! methods GET/POST/HEAD in any case, OPTIONS always), with snowgate's own request headers
//! (`Authorization`, `X-Snowgate-Upstream`) allowed too. The expectations are rs/cors's, written
//! out here; they are not taken from the devnode (which shares the gateway's code).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::{client, Cluster};

async fn preflight(url: &str, method: &str, headers: Option<&str>) -> reqwest::Response {
    let mut req = client()
        .request(reqwest::Method::OPTIONS, url)
        .header("origin", "https://wallet.example")
        .header("access-control-request-method", method);
    if let Some(h) = headers {
        req = req.header("access-control-request-headers", h);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn preflights_allow_the_node_methods_in_any_case_and_nothing_else() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |_| {}).await;
    let url = format!("{}/ext/bc/P", cluster.url());
    for method in ["POST", "post", "GET", "head", "OPTIONS"] {
        let r = preflight(&url, method, Some("content-type, authorization")).await;
        assert_eq!(r.status().as_u16(), 200, "{method}");
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], "*", "{method}");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(
            h["access-control-allow-methods"],
            method.to_ascii_uppercase().as_str()
        );
        assert_eq!(
            h["access-control-allow-headers"],
            "Content-Type, Authorization"
        );
        let vary: Vec<_> = h.get_all("vary").iter().collect();
        assert_eq!(
            vary,
            [
                "Origin",
                "Access-Control-Request-Method",
                "Access-Control-Request-Headers"
            ]
        );
        assert!(r.text().await.unwrap().is_empty());
    }
    // Substrings of "GET, POST, HEAD" are not methods; PUT is not allowed; nor is an unknown header.
    for (method, headers) in [
        ("ET", None),
        ("OST", None),
        ("PUT", None),
        ("POST", Some("x-unknown-header")),
    ] {
        let r = preflight(&url, method, headers).await;
        assert_eq!(r.status().as_u16(), 200, "{method}");
        assert!(
            r.headers().get("access-control-allow-origin").is_none(),
            "{method} {headers:?}"
        );
        assert!(r.headers().get("access-control-allow-methods").is_none());
    }
}

#[tokio::test]
async fn actual_requests_get_allow_headers_only_for_allowed_methods() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |_| {}).await;
    let url = format!("{}/ext/bc/P", cluster.url());
    let body = support::call("platform.getHeight", "{}");
    for (method, allowed, status) in [
        (reqwest::Method::POST, true, 200),
        (reqwest::Method::GET, true, 405),
        (reqwest::Method::PUT, false, 405),
        (reqwest::Method::DELETE, false, 405),
    ] {
        let r = client()
            .request(method.clone(), &url)
            .header("origin", "https://wallet.example")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{method}");
        assert_eq!(r.headers()["vary"], "Origin", "{method}");
        assert_eq!(
            r.headers().contains_key("access-control-allow-origin"),
            allowed,
            "{method}"
        );
        assert_eq!(
            r.headers().contains_key("access-control-allow-credentials"),
            allowed
        );
    }
    // Without an Origin: Vary only.
    let r = support::post(&url, &body).await;
    assert_eq!(r.header("vary"), Some("Origin"));
    assert_eq!(r.header("access-control-allow-origin"), None);
}
