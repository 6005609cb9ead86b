//! The operator's window attacked: a hostile client, a lying node and an operator having a bad
//! day against a real gateway on loopback. Each test names what it proves: an attack that held,
//! or one that found a defect and holds since its fix.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use prometheus::core::Collector;
use serde_json::Value;
use snowgate::config::{Config, UpstreamConfig};
use snowgate::gateway::ConfigSource;
use snowgate::metrics::Metrics;
use snowgate::Gateway;
use support::window::{self, row, status_json, with_admin_listener};
use support::{call, client, eventually, post, post_with, Cluster, ADMIN_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `method url` with an optional bearer key: (status, body).
async fn ask(method: &str, url: &str, key: Option<&str>) -> (u16, String) {
    let (status, _, body) = window::ask(method, url, key).await;
    (status, body)
}

/// Writes `request` as is to `addr` and reads the answer until the gateway closes (at most 10 s).
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let out = support::read_until_closed(&mut s, Duration::from_secs(10))
        .await
        .unwrap_or_default();
    String::from_utf8_lossy(&out).into_owned()
}

/// The status line's code of a raw HTTP/1.1 answer.
fn code(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Requests measured in `snowgate_request_duration_seconds`, all labels together (each request's
/// duration and its access line are recorded by the same call).
fn measured(metrics: &Metrics) -> u64 {
    metrics
        .request_duration
        .collect()
        .iter()
        .flat_map(|f| f.get_metric().iter())
        .map(|m| m.get_histogram().get_sample_count())
        .sum()
}

/// Whether no operator data (metrics, status JSON) is in `body`.
fn no_operator_data(body: &str) -> bool {
    !body.contains("snowgate_") && !body.contains("upstreams") && !body.contains("node-0")
}

/// With `[admin] listen`, the public port answers every spelling of an operator endpoint (path
/// tricks, absolute-form targets, HEAD, HTTP/2, with or without the admin key) as a path that
/// does not exist; the admin listener serves no RPC, and no call of it reaches a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_port_hides_every_spelling_of_the_operators_endpoints() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), with_admin_listener).await;
    let public = cluster.url();
    let addr = cluster.gateway.addr();
    let admin = cluster.gateway.admin_url().unwrap();
    let (_, missing) = ask("GET", &format!("{public}/no/such/path"), None).await;
    let paths = [
        "/metrics",
        "//metrics",
        "/metrics/",
        "/METRICS",
        "/%6Detrics",
        "/metrics?format=prometheus",
        "/snowgate/status",
        "/snowgate/status.json",
        "/snowgate/status.json?x",
        "/snowgate%2Fstatus.json",
        "/snowgate/status.json/",
        "/./snowgate/status.json",
        "/snowgate/cache/purge",
        "/snowgate/reload",
        "/snowgate/upstreams/node-0/cordon",
        "/snowgate/upstreams/node-0/uncordon",
    ];
    for key in [None, Some(ADMIN_KEY)] {
        for path in paths {
            for method in ["GET", "POST", "HEAD", "PUT", "DELETE"] {
                let (status, body) = ask(method, &format!("{public}{path}"), key).await;
                assert_eq!(status, 404, "{method} {path} (key: {})", key.is_some());
                if method != "HEAD" {
                    assert_eq!(body, missing, "{method} {path}");
                }
            }
        }
    }
    // The target in absolute form, and a Host naming the admin listener.
    let admin_addr = cluster.gateway.admin_addr().unwrap();
    for target in [
        format!("http://{admin_addr}/metrics"),
        format!("http://{addr}/snowgate/status.json"),
        "/metrics".to_string(),
    ] {
        let answer = raw(
            addr,
            &format!(
                "GET {target} HTTP/1.1\r\nhost: {admin_addr}\r\nauthorization: Bearer {ADMIN_KEY}\r\nconnection: close\r\n\r\n"
            ),
        )
        .await;
        assert_eq!(code(&answer), 404, "{target}: {answer}");
        assert!(no_operator_data(&answer), "{target}: {answer}");
    }
    // HTTP/2 (prior knowledge) on the public port.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    for path in ["/metrics", "/snowgate/status.json"] {
        let r = h2
            .get(format!("{public}{path}"))
            .header("authorization", format!("Bearer {ADMIN_KEY}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.version(), reqwest::Version::HTTP_2);
        assert_eq!(r.status(), 404, "h2 {path}");
    }
    // A CORS preflight says no more about an operator path than about a path that does not exist.
    let preflight = |path: &str| {
        client()
            .request(reqwest::Method::OPTIONS, format!("{public}{path}"))
            .header("origin", "https://evil.example")
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "authorization")
            .send()
    };
    let none = preflight("/no/such/path").await.unwrap();
    for path in ["/metrics", "/snowgate/status.json", "/snowgate/reload"] {
        let r = preflight(path).await.unwrap();
        assert_eq!(r.status(), none.status(), "OPTIONS {path}");
        let mut a: Vec<_> = r.headers().keys().map(|k| k.as_str().to_string()).collect();
        let mut b: Vec<_> = none
            .headers()
            .keys()
            .map(|k| k.as_str().to_string())
            .collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "OPTIONS {path}");
    }
    // The admin listener serves no RPC, with the admin key or without, and no call reaches a node.
    for path in ["/ext/bc/P", "/ext/info", "/ext/P"] {
        let auth = format!("Bearer {ADMIN_KEY}");
        let r = post_with(
            &format!("{admin}{path}"),
            &call("platform.getTimestamp", "{}"),
            &[("authorization", &auth)],
        )
        .await;
        assert_eq!(r.status, 404, "{path} on the admin listener: {}", r.body);
    }
    // (A method the pool never asks itself: its checks and identity probes may run meanwhile.)
    assert_eq!(
        cluster.nodes[0]
            .control()
            .call_count("platform.getTimestamp"),
        0
    );
    // And it does serve the operator (the controls above are not vacuous).
    let (status, body) = ask("GET", &format!("{admin}/metrics"), None).await;
    assert_eq!(status, 200);
    assert!(body.contains("snowgate_build_info"));
    cluster.gateway.shutdown().await;
}

/// Without an admin listener, no spelling of an operator endpoint answers without the key, and
/// with a wrong key or a key in another header it is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_no_spelling_of_an_operator_endpoint_answers() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |_| {}).await;
    let public = cluster.url();
    let paths = [
        "/metrics",
        "//metrics",
        "/metrics/",
        "/%6Detrics",
        "/snowgate/status.json",
        "/snowgate/status.json?x",
        "/snowgate/cache/purge",
        "/snowgate/reload",
        "/snowgate/upstreams/node-0/cordon",
    ];
    let wrong = format!("{ADMIN_KEY}x");
    for path in paths {
        for method in ["GET", "POST", "HEAD"] {
            for key in [None, Some(wrong.as_str()), Some("")] {
                let (status, body) = ask(method, &format!("{public}{path}"), key).await;
                assert!(
                    status == 401 || status == 404,
                    "{method} {path}: {status} {body}"
                );
                assert!(no_operator_data(&body), "{method} {path}: {body}");
            }
            // The key where a rate-limit key goes is not an admin key.
            let r = client()
                .request(method.parse().unwrap(), format!("{public}{path}"))
                .header("x-api-key", ADMIN_KEY)
                .send()
                .await
                .unwrap();
            assert!(matches!(r.status().as_u16(), 401 | 404), "{method} {path}");
        }
    }
    let status = cluster.gateway.pool().status();
    assert!(status.upstreams.iter().all(|u| !u.cordoned));
    cluster.gateway.shutdown().await;
}

/// Every request on the public port is measured (and so has its access line) exactly once, however
/// it ends: refused by the router (405, 415, 413, a body that times out or breaks off), a 404, a
/// CORS preflight, health by GET and by JSON-RPC, a notification, a batch; and the operator's own
/// requests on the admin listener too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_measured_once_however_it_ends() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |c| {
        with_admin_listener(c);
        c.limits.body_bytes = 4096;
        c.limits.body_timeout = Duration::from_millis(300);
    })
    .await;
    let metrics = cluster.gateway.metrics().clone();
    let public = cluster.url();
    let addr = cluster.gateway.addr();
    let admin = cluster.gateway.admin_url().unwrap();
    let rpc = format!("{public}/ext/bc/P");
    let mut expected = measured(&metrics);
    let check = |what: &str, expected: &mut u64| {
        *expected += 1;
        assert_eq!(measured(&metrics), *expected, "after {what}");
    };
    let (status, _) = ask("GET", &rpc, None).await;
    assert_eq!(status, 405);
    check("a GET on an RPC path", &mut expected);
    let r = client()
        .post(&rpc)
        .header("content-type", "text/plain")
        .body(call("platform.getHeight", "{}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    check("a 415", &mut expected);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":{{"x":"{}"}}}}"#,
        "a".repeat(8192)
    );
    assert_eq!(post(&rpc, &big).await.status, 413);
    check("a 413", &mut expected);
    assert_eq!(ask("GET", &format!("{public}/nope"), None).await.0, 404);
    check("a 404", &mut expected);
    let r = client()
        .request(reqwest::Method::OPTIONS, &rpc)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    check("a preflight", &mut expected);
    assert_eq!(
        ask("GET", &format!("{public}/ext/health"), None).await.0,
        200
    );
    check("GET /ext/health", &mut expected);
    let r = post(
        &format!("{public}/ext/health"),
        r#"{"jsonrpc":"2.0","id":1,"method":"health.health"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    check("POST /ext/health", &mut expected);
    let r = post(&rpc, r#"{"jsonrpc":"2.0","method":"platform.getHeight"}"#).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    check("a notification", &mut expected);
    let batch = format!(
        "[{},{}]",
        call("platform.getHeight", "{}"),
        call("info.getNetworkID", "{}")
    );
    assert_eq!(post(&rpc, &batch).await.status, 200);
    check("a batch", &mut expected);
    // A body that stops coming: answered 408 after body_timeout.
    let answer = raw(
        addr,
        "POST /ext/bc/P HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\"",
    )
    .await;
    assert_eq!(code(&answer), 408, "{answer}");
    check("a body that timed out", &mut expected);
    // A client that hangs up in the middle of its body.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /ext/bc/P HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\"")
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
    }
    let target = expected + 1;
    assert!(
        eventually(Duration::from_secs(60), || measured(&metrics) >= target).await,
        "a body broken off is never measured"
    );
    check("a body broken off", &mut expected);
    // The operator's own requests on the admin listener.
    assert_eq!(ask("GET", &format!("{admin}/metrics"), None).await.0, 200);
    let target = expected + 1;
    assert!(eventually(Duration::from_secs(60), || measured(&metrics) >= target).await);
    check("a scrape", &mut expected);
    assert_eq!(ask("GET", &format!("{admin}/nope"), None).await.0, 404);
    check("a 404 on the admin listener", &mut expected);
    cluster.gateway.shutdown().await;
}

/// An RPC body sent to the admin listener is answered 404 (it serves no RPC) and, like every other
/// request, measured and logged once.
///
/// Found: the trace layer leaves every `POST` to an RPC path to the router and the decoding
/// layer, but the router's admin-listener refusal answers it with `Routes::reject`, which records
/// nothing: no access line, no duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rpc_post_to_the_admin_listener_is_measured_once() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), with_admin_listener).await;
    let metrics = cluster.gateway.metrics().clone();
    let admin = cluster.gateway.admin_url().unwrap();
    let before = measured(&metrics);
    let r = post(
        &format!("{admin}/ext/bc/P"),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        measured(&metrics),
        before + 1,
        "the refusal was not measured"
    );
    cluster.gateway.shutdown().await;
}

/// A gateway in front of one node that answers after 1.5 s (the cache off), its arrivals, and a
/// call's body.
async fn slow_gateway() -> (
    Gateway,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    String,
) {
    let (slow, arrivals, _) = support::slow_node(Duration::from_millis(1500)).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &[]);
    config.upstreams = vec![UpstreamConfig {
        name: "slow".into(),
        url: format!("http://{slow}"),
        ..Default::default()
    }];
    config.cache.enabled = false;
    let gateway = Gateway::start(config).await.unwrap();
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));
    (gateway, arrivals, body)
}

/// A client that hangs up while its call is at the node still gets its request measured and its
/// access line (as nginx logs a 499): an operator counting requests in the log must see it.
///
/// Found: the call's end was recorded by the decoding layer after the answer was made; when the
/// client went, hyper dropped the request's future and nothing was recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_call_is_still_measured() {
    let (gateway, arrivals, body) = slow_gateway().await;
    let metrics = gateway.metrics().clone();
    let before = measured(&metrics);
    {
        let mut s = TcpStream::connect(gateway.addr()).await.unwrap();
        let request = format!(
            "POST /ext/bc/P HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        assert!(
            eventually(Duration::from_secs(60), || arrivals.load(Ordering::SeqCst)
                == 1)
            .await,
            "the call never reached the node"
        );
        // Gone before the node answers.
    }
    // The node answers after 1.5 s; by then the request is over either way.
    let target = before + 1;
    assert!(
        eventually(Duration::from_secs(60), || measured(&metrics) >= target).await,
        "a request whose client hung up was never measured"
    );
    gateway.shutdown().await;
}

/// The events of `status`, as (subject, state).
fn events(status: &Value) -> Vec<(String, String)> {
    status["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["subject"].as_str().unwrap_or("-").to_string(),
                e["state"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect()
}

/// One node changing state over and over (flapping between lagging and in sync, or between up
/// and down, or an admin's cordon going on and off) cannot push the other nodes' events out of
/// the status page's last 50: a dead node's event stays listed, however much another one flaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_node_cannot_push_another_nodes_events_out() {
    let cluster = Cluster::start(2, Duration::from_secs(3600), with_admin_listener).await;
    let admin = cluster.gateway.admin_url().unwrap();
    cluster.nodes[0].control().go_down().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = status_json(&admin, None).await;
        if events(&status).contains(&("node-0".into(), "unhealthy".into())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node-0 never went down: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The fastest way to make one node change state many times: its cordon, 60 times.
    for i in 0..60 {
        let action = if i % 2 == 0 { "cordon" } else { "uncordon" };
        let (status, body) = ask(
            "POST",
            &format!("{admin}/snowgate/upstreams/node-1/{action}"),
            Some(ADMIN_KEY),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let status = status_json(&admin, None).await;
    let listed = events(&status);
    assert!(listed.len() <= 50, "{}", listed.len());
    assert_eq!(
        listed.first(),
        Some(&("node-1".into(), "uncordoned".into())),
        "the newest first: {listed:?}"
    );
    assert!(
        listed.contains(&("node-0".into(), "unhealthy".into())),
        "node-0's fall was pushed out by node-1's changes: {listed:?}"
    );
    // Still in time order, newest first.
    let at: Vec<u64> = status["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["at"].as_u64().unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] >= w[1]), "{at:?}");
    cluster.gateway.shutdown().await;
}

/// A cordon set while a reload replaces the node (its URL changed: a new node under the old name)
/// is the operator's word about the name, and is kept on the new node, as a cordon set before the
/// reload is; so is an uncordon.
///
/// Found: `Pool::reconfigure` copies each name's cordon onto the new node before that node's
/// first health check (up to `[health] timeout`), then publishes it; a cordon set meanwhile is
/// set on the old node, answered `"cordoned":true`, and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_set_while_a_reload_replaces_the_node_is_kept() {
    let (_net, nodes) = support::devnodes(12345, 2, Duration::from_secs(3600)).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    with_admin_listener(&mut config);
    config.health.interval = Duration::from_secs(3);
    config.health.timeout = Duration::from_secs(3);
    let file = Arc::new(Mutex::new(config.clone()));
    let source = {
        let file = file.clone();
        ConfigSource::new(move || Ok(file.lock().unwrap().clone()))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::start_from(source, Some(listener)).await.unwrap();
    let admin = gateway.admin_url().unwrap();
    // node-1 replaced by a node whose first check takes 1.5 s.
    let (_other, spare) = support::devnodes(12345, 1, Duration::from_secs(3600)).await;
    spare[0].control().update_faults(|f| {
        f.latency = Duration::from_millis(1500);
    });
    file.lock().unwrap().upstreams[1].url = spare[0].url();
    let cordon = async {
        // The replacement is announced before its first check.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let status = status_json(&admin, None).await;
            if events(&status).contains(&("node-1".into(), "replaced".into())) {
                break;
            }
            assert!(Instant::now() < deadline, "no replaced event: {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (status, body) = ask(
            "POST",
            &format!("{admin}/snowgate/upstreams/node-1/cordon"),
            Some(ADMIN_KEY),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"cordoned\":true"), "{body}");
    };
    let (reloaded, ()) = tokio::join!(gateway.reload(), cordon);
    let report = reloaded.unwrap();
    assert!(format!("{report:?}").contains("node-1"), "{report:?}");
    let status = status_json(&admin, None).await;
    assert_eq!(
        row(&status, "node-1")["cordoned"],
        true,
        "the cordon was lost: {status}"
    );
    gateway.shutdown().await;
}

/// Cordon names an admin (or a page) might send wrong: traversal, encoded slashes, empty, very
/// long, HTML, the action misspelt. Each is a plain-text 404 (or 405) that cordons nothing and
/// records no event; the name is echoed quoted, never as markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_names_that_are_no_upstream_cordon_nothing() {
    let cluster = Cluster::start(2, Duration::from_secs(3600), |_| {}).await;
    let public = cluster.url();
    let events_before = status_json(&public, Some(ADMIN_KEY)).await["events"]
        .as_array()
        .unwrap()
        .len();
    let long = "n".repeat(8000);
    let paths = [
        "/snowgate/upstreams/../cordon".to_string(),
        "/snowgate/upstreams/node-0/../node-1/cordon".to_string(),
        "/snowgate/upstreams/node-0%2Fcordon".to_string(),
        "/snowgate/upstreams/node%2D0/cordon".to_string(),
        "/snowgate/upstreams//cordon".to_string(),
        "/snowgate/upstreams/cordon".to_string(),
        "/snowgate/upstreams/".to_string(),
        "/snowgate/upstreams/node-0".to_string(),
        "/snowgate/upstreams/node-0/".to_string(),
        "/snowgate/upstreams/node-0/cordon/".to_string(),
        "/snowgate/upstreams/node-0/CORDON".to_string(),
        "/snowgate/upstreams/NODE-0/cordon".to_string(),
        "/snowgate/upstreams/node-0%00/cordon".to_string(),
        "/snowgate/upstreams/%3Cimg%20src=x%20onerror=alert(1)%3E/cordon".to_string(),
        format!("/snowgate/upstreams/{long}/cordon"),
    ];
    // Sent as written (a client library would resolve the dot segments first).
    let addr = cluster.gateway.addr();
    for path in &paths {
        let answer = raw(
            addr,
            &format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_KEY}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
        )
        .await;
        let shown = &path[..path.len().min(80)];
        assert_eq!(code(&answer), 404, "{shown}: {answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain"),
            "{shown}: {head}"
        );
        assert!(!body.contains('<'), "{shown}: {body}");
    }
    // GET on a real node's cordon is a 405, and cordons nothing either.
    let (status, _) = ask(
        "GET",
        &format!("{public}/snowgate/upstreams/node-0/cordon"),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(status, 405);
    let pool = cluster.gateway.pool().status();
    assert!(pool.upstreams.iter().all(|u| !u.cordoned), "{pool:?}");
    let status = status_json(&public, Some(ADMIN_KEY)).await;
    assert_eq!(status["events"].as_array().unwrap().len(), events_before);
    // A query string does not change the name: this one is node-0's, and it counts once.
    let (code, body) = ask(
        "POST",
        &format!("{public}/snowgate/upstreams/node-0/cordon?name=node-1"),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let status = status_json(&public, Some(ADMIN_KEY)).await;
    assert_eq!(row(&status, "node-0")["cordoned"], true);
    assert_eq!(row(&status, "node-1")["cordoned"], false);
    cluster.gateway.shutdown().await;
}

/// Every node cordoned: clients get the node's "no healthy upstream" answer (not a hang, not a
/// call to a cordoned node), `/ext/health` says 503 so a load balancer moves on, the status page
/// says why; an admin's pinned call still reaches the node, and an uncordon brings traffic back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_node_cordoned_clients_are_told_and_health_fails() {
    let cluster = Cluster::start(2, Duration::from_secs(3600), |c| {
        c.cache.enabled = false;
    })
    .await;
    let public = cluster.url();
    for name in ["node-0", "node-1"] {
        let (status, body) = ask(
            "POST",
            &format!("{public}/snowgate/upstreams/{name}/cordon"),
            Some(ADMIN_KEY),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let rpc = format!("{public}/ext/bc/P");
    let r = post(&rpc, &call("platform.getHeight", "{}")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("\"error\""), "{}", r.body);
    let (status, body) = ask("GET", &format!("{public}/ext/health"), None).await;
    assert_eq!(status, 503, "{body}");
    assert!(!body.contains(ADMIN_KEY));
    let status = status_json(&public, Some(ADMIN_KEY)).await;
    for name in ["node-0", "node-1"] {
        assert_eq!(row(&status, name)["state"], "cordoned", "{status}");
        assert_eq!(row(&status, name)["takesTraffic"], false);
    }
    assert_eq!(status["pool"]["healthy"], false);
    assert_eq!(
        cluster.nodes[0].control().call_count("platform.getHeight")
            + cluster.nodes[1].control().call_count("platform.getHeight"),
        0,
        "a call reached a cordoned node"
    );
    // An admin's pinned call still goes (to look at the node before putting it back).
    let auth = format!("Bearer {ADMIN_KEY}");
    let r = post_with(
        &rpc,
        &call("platform.getHeight", "{}"),
        &[("authorization", &auth), ("x-snowgate-upstream", "node-1")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (code, _) = ask(
        "POST",
        &format!("{public}/snowgate/upstreams/node-0/uncordon"),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        post(&rpc, &call("platform.getHeight", "{}")).await.status,
        200
    );
    assert_eq!(
        ask("GET", &format!("{public}/ext/health"), None).await.0,
        200
    );
    cluster.gateway.shutdown().await;
}

/// What the operator's window shows never carries a secret or a node's address: not a node URL's
/// password, not a provider's header key, not the admin key, not a rate-limit key, not the
/// node's host and port; not when the node is down, not when a reload fails on a line holding
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_shows_no_secret_and_no_node_address() {
    let (_net, nodes) = support::devnodes(12345, 2, Duration::from_secs(3600)).await;
    let password = "s3cretpw0rd";
    let provider = "providerkey0123456789";
    let limit_key = "ratelimitkey0123456789";
    let node_addr = nodes[1].addr().to_string();
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    with_admin_listener(&mut config);
    config.upstreams[1].url = format!("http://user:{password}@{node_addr}");
    config.upstreams[1]
        .headers
        .insert("x-api-key".into(), provider.into());
    config.rate_limit.enabled = true;
    config.cache.enabled = false;
    config.rate_limit.keys = vec![snowgate::config::KeyQuota::new(limit_key, 1, 10)];
    let bad: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let source = {
        let (config, bad) = (config.clone(), bad.clone());
        ConfigSource::new(move || match bad.lock().unwrap().clone() {
            Some(text) => Ok(Config::parse(&text, "snowgate.toml")?),
            None => Ok(config.clone()),
        })
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::start_from(source, Some(listener)).await.unwrap();
    let admin = gateway.admin_url().unwrap();
    let rpc = format!("{}/ext/bc/P", gateway.url());
    // The key's holder goes over quota (it is listed, hashed).
    for _ in 0..15 {
        post_with(
            &rpc,
            &call("platform.getHeight", "{}"),
            &[("x-api-key", limit_key)],
        )
        .await;
    }
    nodes[1].control().go_down().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_json(&admin, None).await["upstreams"][1]["state"] != "unhealthy" {
        assert!(Instant::now() < deadline, "node-1 never went down");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reloads that fail on the lines holding the secrets.
    let mut answers = String::new();
    for text in [
        format!("[[upstreams]]\nname = \"n\"\nurl = \"http://user:{password}@{node_addr}\n"),
        format!("[[upstreams]]\nname = \"n\"\nurl = \"ftp://user:{password}@{node_addr}\"\n"),
        format!("[admin]\napi_keys = [\"{ADMIN_KEY}\", 7]\n"),
        format!("[[rate_limit.keys]]\nkey = \"{limit_key}\"\nrequests_per_second = \"x\"\n"),
        format!(
            "[[upstreams]]\nname = \"n\"\nurl = \"http://{node_addr}\"\nheaders = {{ \"x-api-key\" = \"{provider}\", \"bad header\" = \"{provider}\" }}\n"
        ),
    ] {
        *bad.lock().unwrap() = Some(text);
        let (status, body) = ask("POST", &format!("{admin}/snowgate/reload"), Some(ADMIN_KEY)).await;
        assert_eq!(status, 422, "{body}");
        answers.push_str(&body);
    }
    let status = status_json(&admin, None).await;
    assert!(
        status["rateLimit"]["topLimited"][0]["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("key:")),
        "{status}"
    );
    assert!(
        status["events"].as_array().unwrap().len() >= 6,
        "the failed reloads are listed: {status}"
    );
    let (_, metrics) = ask("GET", &format!("{admin}/metrics"), None).await;
    let (_, health) = ask("GET", &format!("{}/ext/health", gateway.url()), None).await;
    let shown = format!("{status}\n{answers}\n{metrics}\n{health}");
    for secret in [password, provider, limit_key, ADMIN_KEY, node_addr.as_str()] {
        assert!(!shown.contains(secret), "{secret} is shown:\n{shown}");
    }
    gateway.shutdown().await;
}

/// A flood of refused clients with addresses of their choosing (through a trusted proxy's
/// `X-Forwarded-For`), more than the most-refused table keeps: every refusal is still a prompt
/// 429, the list shows at most ten, and the client refused most before the flood stays first with
/// its count (the table's eviction keeps the most refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_forged_addresses_cannot_push_the_worst_client_off_the_list() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |c| {
        with_admin_listener(c);
        c.cache.enabled = false;
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_second = 1;
        c.rate_limit.burst = 10;
        c.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let admin = cluster.gateway.admin_url().unwrap();
    let rpc = format!("{}/ext/bc/P", cluster.url());
    // Costs 10 units, the whole burst: one call each, then refusals.
    let body = call("platform.getCurrentValidators", "{}");
    let worst = "198.51.100.7";
    let mut refused = 0u64;
    for _ in 0..40 {
        let r = post_with(&rpc, &body, &[("x-forwarded-for", worst)]).await;
        if r.status == 429 {
            refused += 1;
        }
    }
    assert!(refused >= 30, "{refused}");
    // 1500 other addresses (the table keeps 1024), each refused once.
    let client = client();
    let flood = futures_util::stream::iter(0..1500u32)
        .map(|i| {
            let (client, rpc, body) = (client.clone(), rpc.clone(), body.clone());
            async move {
                let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
                let mut last = 0;
                for _ in 0..2 {
                    let r = client
                        .post(&rpc)
                        .header("content-type", "application/json")
                        .header("x-forwarded-for", &ip)
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap();
                    last = r.status().as_u16();
                    let _ = r.bytes().await;
                }
                last
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<u16>>()
        .await;
    assert!(flood.iter().all(|s| *s == 429), "each was refused once");
    let status = status_json(&admin, None).await;
    let top = status["rateLimit"]["topLimited"].as_array().unwrap();
    assert!(!top.is_empty() && top.len() <= 10, "{top:?}");
    assert_eq!(top[0]["client"], worst, "{top:?}");
    assert_eq!(top[0]["limited"], refused, "{top:?}");
    cluster.gateway.shutdown().await;
}

/// The public port full (`limits.max_connections` idle connections held open by a client) does
/// not lock the operator out of the admin listener; the admin listener full does not stop the
/// public port; shutdown closes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_public_port_does_not_lock_the_operator_out() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), |c| {
        with_admin_listener(c);
        c.limits.max_connections = 4;
    })
    .await;
    let addr = cluster.gateway.addr();
    let admin_addr = cluster.gateway.admin_addr().unwrap();
    let admin = cluster.gateway.admin_url().unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // The public port is full: the next connection is answered 503 at once.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut answer = raw(addr, "GET /ext/health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    while code(&answer) != 503 && Instant::now() < deadline {
        answer = raw(addr, "GET /ext/health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    }
    assert_eq!(code(&answer), 503, "{answer}");
    let (status, body) = ask("GET", &format!("{admin}/snowgate/status.json"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = ask("GET", &format!("{admin}/metrics"), None).await;
    assert_eq!(status, 200);
    drop(held);
    // The admin listener full (its own cap): the public port serves on.
    let mut held = Vec::new();
    for _ in 0..snowgate::gateway::ADMIN_MAX_CONNECTIONS {
        held.push(TcpStream::connect(admin_addr).await.unwrap());
    }
    let rpc = format!("{}/ext/bc/P", cluster.url());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = client()
            .post(&rpc)
            .header("content-type", "application/json")
            .body(call("platform.getHeight", "{}"))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "the public port stopped serving");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    cluster.gateway.shutdown().await;
    for a in [addr, admin_addr] {
        assert!(TcpStream::connect(a).await.is_err(), "{a} still accepts");
    }
}

/// Every access line names its client as the rate limiter sees it (behind a trusted proxy: the
/// address its `X-Forwarded-For` gives), not only JSON-RPC calls: a scanner's 404s, health
/// probes, a 415, and the operator's own actions (a purge refused, a cordon) must be
/// attributable too.
///
/// Found: the trace layer records every request that is not a JSON-RPC body with an empty
/// summary, so its line says `client="-"`; and the router's 415 names the TCP peer (the proxy),
/// not the client behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_access_line_names_its_client() {
    let node = snowgate::devnode::DevNode::spawn(Default::default())
        .await
        .unwrap();
    let config = format!(
        "[log]\naccess = true\nformat = \"json\"\n[admin]\napi_keys = [\"{ADMIN_KEY}\"]\n[rate_limit]\nenabled = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n[[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = support::binary::Served::start(&config, "info");
    let base = served.url.clone();
    let client_ip = "203.0.113.9";
    let xff = [("x-forwarded-for", client_ip)];
    let send = |method: &str, path: &str, kind: &str, key: bool| {
        let mut req = client()
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .header("x-forwarded-for", client_ip)
            .header("content-type", kind)
            .body(call("platform.getHeight", "{}"));
        if key {
            req = req.header("authorization", format!("Bearer {ADMIN_KEY}"));
        }
        req.send()
    };
    let r = post_with(
        &format!("{base}/ext/bc/P"),
        &call("platform.getHeight", "{}"),
        &xff,
    )
    .await;
    assert_eq!(r.status, 200, "the control: a call");
    let cases = [
        ("GET", "/no/such/path", "application/json", false, 404),
        ("GET", "/ext/health", "application/json", false, 200),
        ("POST", "/ext/bc/P", "text/plain", false, 415),
        ("GET", "/ext/bc/P", "application/json", false, 405),
        (
            "POST",
            "/snowgate/cache/purge",
            "application/json",
            false,
            401,
        ),
        (
            "POST",
            "/snowgate/upstreams/n/cordon",
            "application/json",
            true,
            200,
        ),
    ];
    for (method, path, kind, key, status) in cases {
        let r = send(method, path, kind, key).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
    }
    let access = |logs: &str| -> Vec<Value> {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "snowgate::access")
            .map(|v| v["fields"].clone())
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(60), || access(&served.logs()).len()
            > cases.len())
        .await,
        "{}",
        served.logs()
    );
    let lines = access(&served.logs());
    assert_eq!(lines.len(), cases.len() + 1, "{lines:?}");
    for line in &lines {
        assert_eq!(line["client"], client_ip, "{line}");
    }
}

/// A fallback can be cordoned like any node: with every primary down it then takes no call
/// either (clients are told no upstream can serve); the cordon survives a reload that keeps the
/// node, and a reload that removes the node takes its cordon (and its gauge) with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_fallback_takes_no_call_and_its_cordon_follows_reloads() {
    let (_net, nodes) = support::devnodes(12345, 2, Duration::from_secs(3600)).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &nodes);
    with_admin_listener(&mut config);
    config.cache.enabled = false;
    config.upstreams[1].role = snowgate::config::upstream::Role::Fallback;
    let file = Arc::new(Mutex::new(config.clone()));
    let source = {
        let file = file.clone();
        ConfigSource::new(move || Ok(file.lock().unwrap().clone()))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::start_from(source, Some(listener)).await.unwrap();
    let admin = gateway.admin_url().unwrap();
    let rpc = format!("{}/ext/bc/P", gateway.url());
    nodes[0].control().go_down().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while row(&status_json(&admin, None).await, "node-0")["state"] != "unhealthy" {
        assert!(Instant::now() < deadline, "node-0 never went down");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = post(&rpc, &call("platform.getHeight", "{}")).await;
    assert_eq!(r.status, 200, "the fallback serves: {}", r.body);
    let (status, body) = ask(
        "POST",
        &format!("{admin}/snowgate/upstreams/node-1/cordon"),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    nodes[1].control().reset_calls();
    let r = post(&rpc, &call("platform.getHeight", "{}")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(nodes[1].control().call_count("platform.getHeight"), 0);
    let status = status_json(&admin, None).await;
    assert_eq!(row(&status, "node-1")["role"], "fallback");
    assert_eq!(row(&status, "node-1")["state"], "cordoned");
    // A reload that keeps the node (another section changed) keeps its cordon.
    file.lock().unwrap().limits.body_bytes += 1;
    gateway.reload().await.unwrap();
    assert_eq!(
        row(&status_json(&admin, None).await, "node-1")["cordoned"],
        true
    );
    // A reload that removes it takes the cordon and its gauge along.
    file.lock().unwrap().upstreams.truncate(1);
    gateway.reload().await.unwrap();
    let (status, _) = ask(
        "POST",
        &format!("{admin}/snowgate/upstreams/node-1/uncordon"),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(status, 404);
    let (_, metrics) = ask("GET", &format!("{admin}/metrics"), None).await;
    assert!(
        !metrics.contains("snowgate_upstream_cordoned{upstream=\"node-1\"}"),
        "{metrics}"
    );
    gateway.shutdown().await;
}

/// A client cannot make the operator's window expensive: method names of its choosing (unknown,
/// long, one per call) add no metric series and no status row, so `/metrics` and the status JSON
/// stay the size the config gives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_chosen_names_add_no_series_and_no_rows() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), with_admin_listener).await;
    let admin = cluster.gateway.admin_url().unwrap();
    let rpc = format!("{}/ext/bc/P", cluster.url());
    // The series every later scrape has: one unknown method first, so its `-` row exists.
    post(&rpc, &call("platform.nope0", "{}")).await;
    let series = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| !l.starts_with("process_"))
            .map(|l| l.rsplit_once(' ').map_or(l, |(name, _)| name).to_string())
            .collect::<std::collections::BTreeSet<String>>()
    };
    let before = series(&ask("GET", &format!("{admin}/metrics"), None).await.1);
    let status_before = status_json(&admin, None).await;
    for i in 0..300 {
        let name = format!("platform.x{i}{}", "y".repeat(200));
        let r = post(&rpc, &call(&name, "{}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            r.body.contains("-32601") || r.body.contains("error"),
            "{}",
            r.body
        );
    }
    let (_, text) = ask("GET", &format!("{admin}/metrics"), None).await;
    let after = series(&text);
    let new: Vec<_> = after.difference(&before).collect();
    assert!(new.is_empty(), "new series: {new:?}");
    assert!(!text.contains("platform.x1"), "a client's name in /metrics");
    let status = status_json(&admin, None).await;
    assert!(!status.to_string().contains("platform.x1"));
    assert_eq!(
        status["upstreams"].as_array().unwrap().len(),
        status_before["upstreams"].as_array().unwrap().len()
    );
    cluster.gateway.shutdown().await;
}

/// DNS rebinding: a web page the operator visits (`http://evil.example:9660/`, its name then
/// resolved to 127.0.0.1) reads from the admin listener in the operator's own browser, which
/// sends `Host: evil.example:9660`. Without a key, the admin listener serves its pages only to a
/// Host that is an address or `localhost` (as avalanchego's `--http-allowed-hosts` does for its
/// API); any other name needs the admin key. Health stays everyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_does_not_serve_a_rebound_name_without_the_key() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), with_admin_listener).await;
    let admin_addr = cluster.gateway.admin_addr().unwrap();
    let port = admin_addr.port();
    let get = |path: &str, host: &str, key: bool| {
        let auth = if key {
            format!("authorization: Bearer {ADMIN_KEY}\r\n")
        } else {
            String::new()
        };
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{auth}connection: close\r\n\r\n")
    };
    let evil = format!("evil.example:{port}");
    for path in ["/snowgate/status.json", "/metrics"] {
        let answer = raw(admin_addr, &get(path, &evil, false)).await;
        assert_eq!(code(&answer), 401, "{path} for {evil}: {answer}");
        assert!(no_operator_data(&answer), "{answer}");
        // Absolute form names the host too.
        let target = format!("http://{evil}{path}");
        let answer = raw(admin_addr, &get(&target, &evil, false)).await;
        assert_eq!(code(&answer), 401, "{target}: {answer}");
        // The key opens it under any name (a scraper by DNS name sends its bearer token).
        let answer = raw(admin_addr, &get(path, &evil, true)).await;
        assert_eq!(code(&answer), 200, "{path} with the key");
        for host in [
            format!("127.0.0.1:{port}"),
            "127.0.0.1".to_string(),
            format!("localhost:{port}"),
            format!("LocalHost:{port}"),
            format!("[::1]:{port}"),
            format!("10.1.2.3:{port}"),
        ] {
            let answer = raw(admin_addr, &get(path, &host, false)).await;
            assert_eq!(code(&answer), 200, "{path} for {host}");
        }
        for host in [
            format!("localhost.evil.example:{port}"),
            format!("127.0.0.1.nip.io:{port}"),
            format!("0x7f000001.evil.example:{port}"),
        ] {
            let answer = raw(admin_addr, &get(path, &host, false)).await;
            assert_eq!(code(&answer), 401, "{path} for {host}");
        }
    }
    // The page (no data in it) and health answer whatever the name.
    for path in ["/snowgate/status", "/ext/health", "/ext/health/liveness"] {
        let answer = raw(admin_addr, &get(path, &evil, false)).await;
        assert_eq!(code(&answer), 200, "{path}: {answer}");
    }
    cluster.gateway.shutdown().await;
}

/// An HTTP/2 client that resets its stream while its body is still coming (`RST_STREAM` after
/// part of the body) gets its request measured and logged once, like one that breaks off an
/// HTTP/1.1 body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_reset_mid_body_is_still_measured() {
    use http_body_util::BodyExt;
    let cluster = Cluster::start(1, Duration::from_secs(3600), |_| {}).await;
    let metrics = cluster.gateway.metrics().clone();
    let before = measured(&metrics);
    let mut sender = support::h2_connect(cluster.gateway.addr(), 65_535).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>,
    >(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    let body = BodyExt::boxed(http_body_util::StreamBody::new(stream));
    let req = http::Request::post(format!("{}/ext/bc/P", cluster.url()))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    sender.ready().await.unwrap();
    let answer = sender.send_request(req);
    tx.send(Ok(http_body::Frame::data(bytes::Bytes::from_static(
        b"{\"jsonrpc\":\"2.0\",",
    ))))
    .await
    .unwrap();
    let answer = tokio::spawn(answer);
    // The gateway holds the body's first bytes (so the router is reading it) before the client
    // gives up; each scrape that shows it is a request too.
    let mut scrapes = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = support::get_metrics(&cluster.url()).await;
        scrapes += 1;
        let buffered = text
            .lines()
            .find_map(|l| l.strip_prefix("snowgate_request_body_buffered_bytes "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if buffered > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the body never reached the gateway"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    answer.abort();
    drop(tx);
    let target = before + scrapes + 1;
    assert!(
        eventually(Duration::from_secs(60), || measured(&metrics) >= target).await,
        "a stream reset mid-body was never measured"
    );
    assert_eq!(measured(&metrics), target);
    cluster.gateway.shutdown().await;
}

/// The same over HTTP/2: a stream reset while its call is at the node still has its request
/// measured and logged once.
///
/// Found: as for HTTP/1.1 (`a_client_that_hangs_up_mid_call_is_still_measured`), the reset
/// dropped the request's future and nothing was recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_reset_mid_call_is_still_measured() {
    let (gateway, arrivals, body) = slow_gateway().await;
    let metrics = gateway.metrics().clone();
    let before = measured(&metrics);
    let mut sender = support::h2_connect(gateway.addr(), 65_535).await;
    let url = format!("http://{}/ext/bc/P", gateway.addr());
    let streams = support::h2_posts(&mut sender, &url, &body, 1).await;
    assert!(
        eventually(Duration::from_secs(60), || arrivals.load(Ordering::SeqCst)
            == 1)
        .await,
        "the call never reached the node"
    );
    for s in streams {
        s.abort();
    }
    let target = before + 1;
    assert!(
        eventually(Duration::from_secs(60), || measured(&metrics) >= target).await,
        "a stream reset mid-call was never measured"
    );
    gateway.shutdown().await;
}

/// Shutdown drains both listeners: a call in flight on the public port finishes, keep-alive and
/// half-sent requests on the admin listener do not hold the shutdown past `drain_timeout`, and
/// both ports are closed at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_both_listeners() {
    let (slow, arrivals, _) = support::slow_node(Duration::from_millis(1000)).await;
    let mut config = Config::default();
    support::test_gateway(&mut config, &[]);
    with_admin_listener(&mut config);
    config.upstreams = vec![UpstreamConfig {
        name: "slow".into(),
        url: format!("http://{slow}"),
        ..Default::default()
    }];
    config.cache.enabled = false;
    // The slow node's `0x00` is a placeholder, no tx of the ID asked: left unchecked.
    config.cache.verify = snowgate::config::Verify::Off;
    config.server.drain_timeout = Duration::from_secs(3);
    let gateway = Gateway::start(config).await.unwrap();
    let (addr, admin_addr) = (gateway.addr(), gateway.admin_addr().unwrap());
    let admin = gateway.admin_url().unwrap();
    // A keep-alive connection to the admin listener (the client keeps it in its pool) and one
    // that sent half a request.
    let keep = client();
    let r = keep.get(format!("{admin}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let mut half = TcpStream::connect(admin_addr).await.unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A call in flight on the public port.
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));
    let url = format!("http://{addr}/ext/bc/P");
    let in_flight = tokio::spawn(async move { post(&url, &body).await });
    assert!(
        eventually(Duration::from_secs(60), || arrivals.load(Ordering::SeqCst)
            == 1)
        .await,
        "the call never reached the node"
    );
    let began = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), gateway.shutdown())
        .await
        .expect("shutdown waited past drain_timeout for the admin listener");
    assert!(began.elapsed() < Duration::from_secs(10));
    let r = in_flight.await.unwrap();
    assert_eq!(r.status, 200, "the call in flight finished: {}", r.body);
    for a in [addr, admin_addr] {
        assert!(TcpStream::connect(a).await.is_err(), "{a} still accepts");
    }
    drop(keep);
}

/// Any web page the operator has open (`https://evil.example`) can `fetch` from the admin
/// listener at `http://127.0.0.1:9660`: the browser sends `Origin: https://evil.example`, and the
/// gateway's CORS rules (a node's: any origin) let the page read the answer. So a request from
/// another origin needs the key for the operator's pages, as any other name does; the page
/// itself (same origin) and clients that send no `Origin` (curl, Prometheus) are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_origins_page_cannot_read_the_admin_listener() {
    let cluster = Cluster::start(1, Duration::from_secs(3600), with_admin_listener).await;
    let admin = cluster.gateway.admin_url().unwrap();
    let get = |path: &str, origin: Option<&str>| {
        let mut req = client().get(format!("{admin}{path}"));
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        req.send()
    };
    for path in ["/snowgate/status.json", "/metrics"] {
        for origin in ["https://evil.example", "null", "http://localhost:1"] {
            let r = get(path, Some(origin)).await.unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            assert_eq!(status, 401, "{path} from {origin}: {body}");
            assert!(no_operator_data(&body), "{body}");
        }
        let same = admin.clone();
        let r = get(path, Some(&same)).await.unwrap();
        assert_eq!(r.status(), 200, "{path} from its own page");
        let r = get(path, None).await.unwrap();
        assert_eq!(r.status(), 200, "{path} without Origin");
        // With the key, another origin is served (an operator's own tool).
        let r = client()
            .get(format!("{admin}{path}"))
            .header("origin", "https://tools.example")
            .header("authorization", format!("Bearer {ADMIN_KEY}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} with the key");
        // Every Origin is read, not the first only, and the browser's own Sec-Fetch-Site is
        // believed where it says another site asked.
        let r = client()
            .get(format!("{admin}{path}"))
            .header("origin", same.as_str())
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path} with a second, foreign Origin");
        for site in ["cross-site", "same-site"] {
            let r = client()
                .get(format!("{admin}{path}"))
                .header("sec-fetch-site", site)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 401, "{path} with Sec-Fetch-Site: {site}");
        }
        let r = client()
            .get(format!("{admin}{path}"))
            .header("sec-fetch-site", "same-origin")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} with Sec-Fetch-Site: same-origin");
    }
    cluster.gateway.shutdown().await;
}
