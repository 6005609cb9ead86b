//! The operator's window over HTTP: the admin listener (what it serves, what the public port hides
//! then), who needs the admin key where, `GET /snowgate/status.json` (each node's state and why,
//! rates, events, the most limited clients) and cordons (no new calls, in-flight ones finish).
//! The page itself is tested in a real browser (`tests/status_page.rs`).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::window::{ask, row, status_json, with_admin_listener};
use support::{call, client, eventually, post, post_with, Cluster, ADMIN_KEY};

/// Polls the status JSON until `ok` holds (at most `limit`); the last one seen.
async fn status_until(
    base: &str,
    key: Option<&str>,
    limit: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = status_json(base, key).await;
        if ok(&s) || Instant::now() >= deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_operators_endpoints_and_the_public_port_hides_them() {
    let c = Cluster::start(1, Duration::from_secs(60), with_admin_listener).await;
    let public = c.url();
    let admin = c.gateway.admin_url().expect("an admin listener");
    for (method, path) in [
        ("GET", "/metrics"),
        ("GET", "/snowgate/status"),
        ("GET", "/snowgate/status.json"),
        ("POST", "/snowgate/cache/purge"),
        ("POST", "/snowgate/reload"),
        ("POST", "/snowgate/upstreams/node-0/cordon"),
    ] {
        // Not there at all on the public port, key or not.
        for key in [None, Some(ADMIN_KEY)] {
            let (status, _, body) = ask(method, &format!("{public}{path}"), key).await;
            assert_eq!(status, 404, "{method} {path} on the public port: {body}");
        }
    }
    // The pages need no key on the admin listener; the actions do.
    let (status, kind, body) = ask("GET", &format!("{admin}/metrics"), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(kind.starts_with("text/plain") && body.contains("snowgate_build_info"));
    let (status, kind, body) = ask("GET", &format!("{admin}/snowgate/status"), None).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/html"), "{kind}");
    assert!(body.contains("<html"), "{body}");
    let s = status_json(&admin, None).await;
    assert_eq!(row(&s, "node-0")["state"], "healthy", "{s}");
    let cordon = format!("{admin}/snowgate/upstreams/node-0/cordon");
    let (status, _, _) = ask("POST", &cordon, None).await;
    assert_eq!(status, 401, "a cordon without the key");
    let (status, _, body) = ask("POST", &cordon, Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body}");
    // Health is everyone's, everywhere; RPC is the public port's only.
    for base in [&public, &admin] {
        let (status, _, _) = ask("GET", &format!("{base}/ext/health/liveness"), None).await;
        assert_eq!(status, 200, "liveness on {base}");
    }
    let rpc = post(
        &format!("{admin}/ext/bc/P"),
        &call("platform.getTimestamp", "{}"),
    )
    .await;
    assert_eq!(rpc.status, 404, "RPC on the admin listener: {}", rpc.body);
    let reached = c.nodes[0].control().call_count("platform.getTimestamp");
    assert_eq!(reached, 0, "the RPC reached a node");
    c.gateway.shutdown().await;
}

/// The admin listener runs a stack of its own: the node's health API is a call there as on the
/// public port (decoded, counted by method), and nothing of the public port's CORS or gzip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_is_a_small_stack_of_its_own() {
    let c = Cluster::start(1, Duration::from_secs(60), with_admin_listener).await;
    let (public, admin) = (c.url(), c.gateway.admin_url().expect("an admin listener"));
    let health = r#"{"jsonrpc":"2.0","method":"health.liveness","id":7}"#;
    for base in [&public, &admin] {
        let r = post(&format!("{base}/ext/health"), health).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (
                200,
                "{\"jsonrpc\":\"2.0\",\"result\":{\"checks\":{},\"healthy\":true},\"id\":7}\n"
            ),
            "{base}"
        );
        assert!(r.header("x-cache").is_none(), "{:?}", r.headers);
        let r = post(
            &format!("{base}/ext/health"),
            r#"{"jsonrpc":"2.0","method":"health.nope","id":1}"#,
        )
        .await;
        assert!(
            r.body.contains(r#"rpc: can't find method \"health.Nope\""#),
            "{}",
            r.body
        );
    }
    // Counted like any call, by method, on both listeners.
    let metrics = support::get_text(&format!("{admin}/metrics")).await;
    let ok = support::fleet::metric(
        &metrics,
        r#"snowgate_requests_total{method="health.liveness",outcome="ok"}"#,
    );
    assert_eq!(ok, 2.0, "{metrics}");
    // A preflight and a page from another origin: the public port answers as a node (open CORS);
    // the admin listener has no CORS at all.
    let preflight = |base: &str| {
        client()
            .request(reqwest::Method::OPTIONS, format!("{base}/ext/health"))
            .header("origin", "https://evil.example")
            .header("access-control-request-method", "POST")
            .send()
    };
    let open = preflight(&public).await.unwrap();
    assert!(open.headers().get("access-control-allow-origin").is_some());
    let closed = preflight(&admin).await.unwrap();
    assert!(
        closed
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "{:?}",
        closed.headers()
    );
    let page = client()
        .get(format!("{admin}/metrics"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(
        page.headers().get("content-encoding").is_none(),
        "{:?}",
        page.headers()
    );
    assert!(
        page.text().await.unwrap().len() > 1024,
        "big enough to be compressed on the public port"
    );
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_listener_the_operators_pages_need_the_key() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let base = c.url();
    assert!(c.gateway.admin_url().is_none());
    for path in ["/metrics", "/snowgate/status.json"] {
        let (status, _, body) = ask("GET", &format!("{base}{path}"), None).await;
        assert_eq!(status, 401, "{path} without a key: {body}");
        let (status, _, _) = ask(
            "GET",
            &format!("{base}{path}"),
            Some("wrong-key-0123456789"),
        )
        .await;
        assert_eq!(status, 401, "{path} with a wrong key");
        let (status, _, _) = ask("GET", &format!("{base}{path}"), Some(ADMIN_KEY)).await;
        assert_eq!(status, 200, "{path} with the key");
    }
    // The page is static (no data): it loads, and asks for the key.
    let r = client()
        .get(format!("{base}/snowgate/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert_eq!(r.headers()["cache-control"], "no-store");
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_shows_a_lagging_node_a_dead_one_and_the_events() {
    let c = Cluster::start(3, Duration::from_millis(100), |config| {
        with_admin_listener(config);
        config.cache.enabled = false;
    })
    .await;
    let admin = c.gateway.admin_url().unwrap();
    let url = format!("{}/ext/bc/P", c.url());
    assert_eq!(
        post(&url, &call("platform.getHeight", "{}")).await.status,
        200
    );
    // Calls keep coming until the page's window holds some with their latencies (the sampler
    // copies the counters once a second, however busy the machine): at most 10,000 calls.
    let calling = tokio::spawn({
        let url = url.clone();
        async move {
            for _ in 0..10_000 {
                assert_eq!(
                    post(&url, &call("platform.getHeight", "{}")).await.status,
                    200
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let s = status_until(&admin, None, Duration::from_secs(60), |s| {
        s["upstreams"].as_array().unwrap().iter().any(|u| {
            u["callsPerSecond"].as_f64() > Some(0.0)
                && u["latencyP50Ms"].as_f64().is_some()
                && u["latencyHistoryMs"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(Value::is_f64))
        }) && s["pool"]["requestsPerSecond"]["ok"].as_f64() > Some(0.0)
    })
    .await;
    calling.abort();
    for name in ["node-0", "node-1", "node-2"] {
        let u = row(&s, name);
        assert_eq!(u["state"], "healthy", "{u}");
        assert!(u["height"].as_u64().is_some(), "{u}");
        assert_eq!(u["role"], "primary");
    }
    assert!(s["pool"]["bestHeight"].as_u64() > Some(0), "{s}");
    assert!(
        s["pool"]["requestsPerSecond"]["ok"].as_f64() > Some(0.0),
        "{s}"
    );
    let busy = s["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["latencyP50Ms"].as_f64().is_some())
        .unwrap_or_else(|| panic!("no node shows its latency: {s}"));
    assert!(busy["callsPerSecond"].as_f64() > Some(0.0), "{busy}");
    assert!(busy["latencyP99Ms"].as_f64() >= busy["latencyP50Ms"].as_f64());
    // A frozen node lags (within a few health intervals), with how far behind.
    c.nodes[1].control().freeze();
    let s = status_until(&admin, None, Duration::from_secs(60), |s| {
        row(s, "node-1")["state"] == "lagging"
    })
    .await;
    let lagging = row(&s, "node-1");
    assert_eq!(lagging["state"], "lagging", "{s}");
    assert!(
        lagging["reason"]
            .as_str()
            .unwrap()
            .ends_with("blocks behind"),
        "{lagging}"
    );
    assert!(lagging["lag"].as_u64() > Some(2), "{lagging}");
    // A node that dies is unhealthy, with the fault's category (never its address).
    c.nodes[2].control().go_down().await;
    let s = status_until(&admin, None, Duration::from_secs(60), |s| {
        row(s, "node-2")["state"] == "unhealthy"
    })
    .await;
    let dead = row(&s, "node-2");
    assert_eq!(dead["state"], "unhealthy", "{s}");
    assert!(dead["reason"].is_string(), "{dead}");
    let text = s.to_string();
    for node in &c.nodes {
        assert!(
            !text.contains(&node.addr().to_string()),
            "an address: {text}"
        );
    }
    // Both are events, newest first.
    let events = s["events"].as_array().unwrap();
    let at = |subject: &str, state: &str| {
        events
            .iter()
            .position(|e| e["subject"] == subject && e["state"] == state)
            .unwrap_or_else(|| panic!("no {state} event of {subject}: {events:?}"))
    };
    assert!(
        at("node-2", "unhealthy") < at("node-1", "lagging"),
        "{events:?}"
    );
    assert!(events.len() <= 50);
    let lag = &events[at("node-1", "lagging")];
    assert!(
        lag["message"]
            .as_str()
            .unwrap()
            .starts_with("node-1 lagging: height"),
        "{lag}"
    );
    // And back: both return to healthy.
    c.nodes[1].control().unfreeze();
    c.nodes[2].control().come_up().await.unwrap();
    let s = status_until(&admin, None, Duration::from_secs(60), |s| {
        ["node-1", "node-2"]
            .iter()
            .all(|n| row(s, n)["state"] == "healthy")
    })
    .await;
    assert_eq!(row(&s, "node-1")["state"], "healthy", "{s}");
    assert_eq!(row(&s, "node-2")["state"], "healthy", "{s}");
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_takes_no_new_calls_and_finishes_the_ones_it_has() {
    let c = Cluster::start(2, Duration::from_secs(60), |config| {
        config.cache.enabled = false;
    })
    .await;
    let base = c.url();
    let url = format!("{base}/ext/bc/P");
    let cordon = |name: &str, verb: &str| format!("{base}/snowgate/upstreams/{name}/{verb}");
    // A slow call in flight on node-0 (pinned there), then the cordon.
    c.nodes[0]
        .control()
        .update_faults(|f| f.latency = Duration::from_millis(800));
    let auth = format!("Bearer {ADMIN_KEY}");
    let slow = {
        let (url, auth) = (url.clone(), auth.clone());
        tokio::spawn(async move {
            let pinned = [
                ("authorization", auth.as_str()),
                ("x-snowgate-upstream", "node-0"),
            ];
            post_with(&url, &call("platform.getTimestamp", "{}"), &pinned).await
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || {
            c.nodes[0].control().call_count("platform.getTimestamp") == 1
        })
        .await,
        "the slow call did not reach node-0"
    );
    let (status, _, body) = ask("POST", &cordon("node-0", "cordon"), Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"upstream": "node-0", "cordoned": true, "cordonedBy": ["instance"]})
    );
    let finished = slow.await.unwrap();
    assert_eq!(finished.status, 200, "{}", finished.body);
    assert!(
        finished.json()["result"]["timestamp"].is_string(),
        "{}",
        finished.body
    );
    c.nodes[0]
        .control()
        .update_faults(|f| f.latency = Duration::ZERO);
    // New calls go to node-1 only (counted by a method the health checks do not use).
    let before = c.nodes[0].control().call_count("platform.getTimestamp");
    for _ in 0..20 {
        let r = post(&url, &call("platform.getTimestamp", "{}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        c.nodes[0].control().call_count("platform.getTimestamp"),
        before,
        "a cordoned node got new calls"
    );
    let s = status_json(&base, Some(ADMIN_KEY)).await;
    assert_eq!(row(&s, "node-0")["state"], "cordoned", "{s}");
    assert_eq!(row(&s, "node-0")["cordoned"], true);
    let events = s["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["subject"] == "node-0"
            && e["state"] == "cordoned"
            && e["reason"] == "admin"),
        "{s}"
    );
    let health = support::get_text(&format!("{base}/ext/health")).await;
    assert!(health.contains("\"cordoned\":true"), "{health}");
    let metrics = support::get_metrics(&base).await;
    assert!(
        metrics.contains("snowgate_upstream_cordoned{upstream=\"node-0\"} 1"),
        "{metrics}"
    );
    // Cordoning again changes nothing; uncordoned, it takes calls again (node-1 cordoned now, so
    // that the balancer's memory of node-0's slow call does not decide).
    let (status, _, _) = ask("POST", &cordon("node-0", "cordon"), Some(ADMIN_KEY)).await;
    assert_eq!(status, 200);
    let (status, _, body) = ask("POST", &cordon("node-0", "uncordon"), Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body}");
    // Its slow call may have failed a health check meanwhile: healthy first.
    let s = status_until(&base, Some(ADMIN_KEY), Duration::from_secs(60), |s| {
        row(s, "node-0")["state"] == "healthy"
    })
    .await;
    assert_eq!(row(&s, "node-0")["state"], "healthy", "{s}");
    ask("POST", &cordon("node-1", "cordon"), Some(ADMIN_KEY)).await;
    for _ in 0..5 {
        let r = post(&url, &call("platform.getTimestamp", "{}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        c.nodes[0].control().call_count("platform.getTimestamp"),
        before + 5,
        "uncordoned, it got no call"
    );
    // With every node cordoned, there is no node to call.
    for name in ["node-0", "node-1"] {
        ask("POST", &cordon(name, "cordon"), Some(ADMIN_KEY)).await;
    }
    let r = post(&url, &call("platform.getTimestamp", "{}")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_refuses_what_it_does_not_know() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let base = c.url();
    let cases = [
        (
            "POST",
            "/snowgate/upstreams/node-9/cordon",
            404,
            "no upstream named \"node-9\"",
        ),
        (
            "POST",
            "/snowgate/upstreams/%3Cb%3E/cordon",
            404,
            "no upstream named",
        ),
        ("POST", "/snowgate/upstreams/node-0/drain", 404, ""),
        ("POST", "/snowgate/upstreams/node-0", 404, ""),
        ("POST", "/snowgate/upstreams/", 404, ""),
        ("POST", "/snowgate/upstreams/node-0/cordon/x", 404, ""),
        ("GET", "/snowgate/upstreams/node-0/cordon", 405, ""),
    ];
    for (method, path, want, says) in cases {
        let (status, _, body) = ask(method, &format!("{base}{path}"), Some(ADMIN_KEY)).await;
        assert_eq!(status, want, "{method} {path}: {body}");
        assert!(body.contains(says), "{method} {path}: {body}");
    }
    // Without the key, nothing is said about names at all.
    let (status, _, body) = ask(
        "POST",
        &format!("{base}/snowgate/upstreams/node-9/cordon"),
        None,
    )
    .await;
    assert_eq!((status, body.contains("node-9")), (401, false), "{body}");
    let s = status_json(&base, Some(ADMIN_KEY)).await;
    assert_eq!(row(&s, "node-0")["cordoned"], false, "{s}");
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_most_limited_clients_show_addresses_and_hashed_keys_never_a_key() {
    let key = "status-page-client-key-0123456789";
    let c = Cluster::start(1, Duration::from_secs(60), |config| {
        config.rate_limit.enabled = true;
        config.rate_limit.requests_per_second = 1;
        config.rate_limit.burst = 10;
        config.rate_limit.keys = vec![snowgate::ratelimit::KeyQuota::new(key, 1, 10)];
        config.cache.enabled = false;
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let body = call("platform.getHeight", "{}");
    let (mut by_key, mut by_ip) = (0, 0);
    for _ in 0..30 {
        if post_with(&url, &body, &[("x-api-key", key)]).await.status == 429 {
            by_key += 1;
        }
    }
    for _ in 0..15 {
        if post(&url, &body).await.status == 429 {
            by_ip += 1;
        }
    }
    assert!(by_key > 0 && by_ip > 0, "{by_key} {by_ip}");
    let s = status_json(&c.url(), Some(ADMIN_KEY)).await;
    let text = s.to_string();
    assert!(!text.contains(key), "the key itself: {text}");
    let top = s["rateLimit"]["topLimited"].as_array().unwrap();
    use sha2::Digest;
    let hash = sha2::Sha256::digest(key.as_bytes());
    let label: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let label = format!("key:{label}");
    let count = |client: &str| {
        top.iter()
            .find(|t| t["client"] == client)
            .and_then(|t| t["limited"].as_u64())
    };
    assert_eq!(count(&label), Some(by_key), "{top:?}");
    assert_eq!(count("127.0.0.1"), Some(by_ip), "{top:?}");
    assert_eq!(top[0]["client"], label, "most refused first: {top:?}");
    assert_eq!(s["rateLimit"]["enabled"], true);
    c.gateway.shutdown().await;
}
