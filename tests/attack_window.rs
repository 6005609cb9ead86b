//! The operator's window attacked: a hostile client, a lying node and an operator having a bad
//! day against a real gateway on loopback. Each test names what it proves; a test marked
//! `#[ignore]` is a finding whose fix lies outside this file's slice (the reason says where), and
//! passes once that fix is in (`cargo test --test attack_window -- --ignored`).
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::Collector;
use serde_json::Value;
use snowgate::config::{Config, UpstreamConfig};
use snowgate::gateway::ConfigSource;
use snowgate::metrics::Metrics;
use snowgate::Gateway;
use support::{call, client, eventually, post, post_with, Cluster, ADMIN_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts the gateway with an admin listener on 127.0.0.1:0.
fn with_admin_listener(config: &mut Config) {
    config.admin.listen = Some("127.0.0.1:0".parse().unwrap());
}

/// `method url` with an optional bearer key: (status, body).
async fn ask(method: &str, url: &str, key: Option<&str>) -> (u16, String) {
    let mut req = client().request(method.parse().unwrap(), url);
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
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

async fn status_json(base: &str, key: Option<&str>) -> Value {
    let (status, body) = ask("GET", &format!("{base}/snowgate/status.json"), key).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn row<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("no row for {name}: {status}"))
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
            &call("platform.getHeight", "{}"),
            &[("authorization", &auth)],
        )
        .await;
        assert_eq!(r.status, 404, "{path} on the admin listener: {}", r.body);
    }
    assert_eq!(cluster.nodes[0].control().total_calls(), 0);
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
        eventually(Duration::from_secs(5), || measured(&metrics) >= target).await,
        "a body broken off is never measured"
    );
    check("a body broken off", &mut expected);
    // The operator's own requests on the admin listener.
    assert_eq!(ask("GET", &format!("{admin}/metrics"), None).await.0, 200);
    let target = expected + 1;
    assert!(eventually(Duration::from_secs(5), || measured(&metrics) >= target).await);
    check("a scrape", &mut expected);
    assert_eq!(ask("GET", &format!("{admin}/nope"), None).await.0, 404);
    check("a 404 on the admin listener", &mut expected);
    cluster.gateway.shutdown().await;
}

/// An RPC body sent to the admin listener is answered 404 (it serves no RPC) and, like every other
/// request, measured and logged once.
///
/// Finding: the trace layer leaves every `POST` to an RPC path to the router and the decoding
/// layer, but the router's admin-listener refusal answers it with `Routes::reject`, which records
/// nothing: no access line, no duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "finding: src/http/router.rs refuses an RPC POST on the admin listener without recording it (fix in the report)"]
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

/// A client that hangs up while its call is at the node still gets its request measured and its
/// access line (as nginx logs a 499): an operator counting requests in the log must see it.
///
/// Finding: the call's end is recorded by the decoding layer after the answer is made; when the
/// client goes, hyper drops the request's future and nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "finding: src/http/decode.rs records a request only when its future completes (fix in the report)"]
async fn a_client_that_hangs_up_mid_call_is_still_measured() {
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
    let metrics = gateway.metrics().clone();
    let before = measured(&metrics);
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));
    {
        let mut s = TcpStream::connect(gateway.addr()).await.unwrap();
        let request = format!(
            "POST /ext/bc/P HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || arrivals.load(Ordering::SeqCst)
                == 1)
            .await,
            "the call never reached the node"
        );
        // Gone before the node answers.
    }
    // The node answers after 1.5 s; by then the request is over either way.
    let target = before + 1;
    assert!(
        eventually(Duration::from_secs(5), || measured(&metrics) >= target).await,
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
/// Finding: `Pool::reconfigure` copies each name's cordon onto the new node before that node's
/// first health check (up to `[health] timeout`), then publishes it; a cordon set meanwhile is
/// set on the old node, answered `"cordoned":true`, and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "finding: src/upstream/pool.rs loses a cordon set during a reload's first check of a replaced node (fix in the report)"]
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
