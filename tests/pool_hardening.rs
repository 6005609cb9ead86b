//! Issue 12, "one bad or restarted node" and "what the public sees": a node that lies about its
//! height, restarts lower or leaves; slow calls and queueing that must not take nodes out; node
//! addresses and node bodies that must never reach a client, `/ext/health` or the logs; request
//! ids a node cannot predict; unsolicited bytes on a kept-alive connection.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use snowgate::config::UpstreamConfig;
use snowgate::Config;
use support::logs::capture_logs;
use support::*;

type Answer = Pin<Box<dyn Future<Output = (u16, String)> + Send>>;

/// A hostile node on 127.0.0.1:0: it passes the health checks at `height` (changeable: a node
/// that restarts lower or resets) unless `down` is set (then it drops every connection without an
/// answer: a node that left), and answers every other call with what `answer(method, request,
/// raw body)` returns, as late as that future likes.
struct Hostile {
    addr: std::net::SocketAddr,
    height: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Hostile {
    async fn start(
        height: u64,
        answer: impl Fn(String, serde_json::Value, String) -> Answer + Send + Sync + 'static,
    ) -> Hostile {
        use http_body_util::{BodyExt, Full};
        let answer = Arc::new(answer);
        let height = Arc::new(AtomicU64::new(height));
        let down = Arc::new(AtomicBool::new(false));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (h, d) = (height.clone(), down.clone());
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answer, height, down) = (answer.clone(), h.clone(), d.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (answer, height, down) =
                                (answer.clone(), height.clone(), down.clone());
                            async move {
                                if down.load(Ordering::Relaxed) {
                                    return Err("down");
                                }
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let raw = String::from_utf8_lossy(&body).into_owned();
                                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                let id = v["id"].clone();
                                let method = v["method"].as_str().unwrap_or_default().to_string();
                                let (status, text) = match method.as_str() {
                                    "info.isBootstrapped" => (
                                        200,
                                        format!(
                                            r#"{{"jsonrpc":"2.0","result":{{"isBootstrapped":true}},"id":{id}}}"#
                                        ),
                                    ),
                                    "platform.getHeight" => (
                                        200,
                                        format!(
                                            r#"{{"jsonrpc":"2.0","result":{{"height":"{}"}},"id":{id}}}"#,
                                            height.load(Ordering::Relaxed)
                                        ),
                                    ),
                                    _ => answer(method, v, raw).await,
                                };
                                let mut r =
                                    hyper::Response::new(Full::new(bytes::Bytes::from(text)));
                                *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                Ok::<_, &str>(r)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Hostile {
            addr,
            height,
            down,
            accept,
        }
    }

    fn upstream(&self, name: &str) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            url: format!("http://{}", self.addr),
            ..Default::default()
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A valid answer with `result` to the request `v`, at once.
fn answers(result: &'static str) -> impl Fn(String, serde_json::Value, String) -> Answer {
    move |_, v, _| {
        let text = format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#, v["id"]);
        Box::pin(async move { (200, text) })
    }
}

/// A gateway config for `upstreams`, checked every 100 ms, without cache or rate limits.
fn config(upstreams: Vec<UpstreamConfig>) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.upstreams = upstreams;
    config.admin.api_keys = vec![ADMIN_KEY.to_string()];
    config.cache.enabled = false;
    config.rate_limit.enabled = false;
    config.health.interval = Duration::from_millis(100);
    config.health.timeout = Duration::from_millis(100);
    config
}

fn upstream_status(gw: &snowgate::Gateway, name: &str) -> snowgate::upstream::UpstreamStatus {
    gw.pool()
        .status()
        .upstreams
        .into_iter()
        .find(|u| u.name == name)
        .unwrap()
}

async fn get_health(gw: &snowgate::Gateway) -> String {
    support::get_text(&format!("{}/ext/health", gw.url())).await
}

#[tokio::test]
async fn a_node_with_an_implausible_height_takes_no_traffic_and_the_honest_nodes_serve() {
    let liar = Hostile::start(10_000_000, answers(r#"{"networkID":"666"}"#)).await;
    let c = Cluster::start(2, Duration::from_millis(200), |cfg| {
        cfg.cache.enabled = false;
        cfg.upstreams.push(liar.upstream("liar"));
    })
    .await;
    let gw = &c.gateway;
    let settled = eventually(Duration::from_secs(60), || {
        let s = gw.pool().status();
        s.upstreams
            .iter()
            .all(|u| u.takes_traffic == (u.name != "liar"))
    })
    .await;
    assert!(settled, "{:?}", gw.pool().status());
    let liar_status = upstream_status(gw, "liar");
    assert!(liar_status.implausible_height, "{liar_status:?}");
    assert!(gw.pool().best_height() < 10_000_000);
    let health = get_health(gw).await;
    assert!(health.contains(r#""implausibleHeight":true"#), "{health}");
    for i in 0..30 {
        let r = post(
            &format!("{}/ext/info", c.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
        assert!(
            !r.body.contains("666"),
            "call {i} reached the liar: {}",
            r.body
        );
    }
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn the_pool_serves_again_when_the_highest_node_leaves() {
    // With two nodes there is no majority: the higher one is believed while it is there...
    let real = snowgate::devnode::DevNode::spawn(snowgate::devnode::DevNodeConfig {
        block_interval: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let height = real.control().height();
    let high = Hostile::start(height + 1_000, answers(r#"{"networkID":"777"}"#)).await;
    let mut cfg = config(vec![
        UpstreamConfig {
            name: "real".into(),
            url: real.url(),
            ..Default::default()
        },
        high.upstream("high"),
    ]);
    cfg.health.failure_threshold = 1;
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    let lagging = eventually(Duration::from_secs(60), || {
        !upstream_status(&gw, "real").takes_traffic && upstream_status(&gw, "high").takes_traffic
    })
    .await;
    assert!(lagging, "{:?}", gw.pool().status());
    // ...and once it leaves, the real node takes the traffic again within a few checks.
    high.down.store(true, Ordering::Relaxed);
    let back = eventually(Duration::from_secs(60), || {
        upstream_status(&gw, "real").takes_traffic
    })
    .await;
    assert!(back, "{:?}", gw.pool().status());
    assert_eq!(gw.pool().best_height(), height);
    let r = post(
        &format!("{}/ext/info", gw.url()),
        &call("info.getNetworkID", "{}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["result"]["networkID"].is_string(), "{}", r.body);
    assert_ne!(r.json()["result"]["networkID"], "777", "{}", r.body);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_node_that_restarts_lower_keeps_serving() {
    let node = Hostile::start(5_000, answers(r#"{"networkID":"1"}"#)).await;
    let gw = snowgate::Gateway::start(config(vec![node.upstream("only")]))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || gw.pool().best_height() == 5_000).await,
        "{:?}",
        gw.pool().status()
    );
    // A restart from an older snapshot, or a chain reset: the height goes down.
    node.height.store(10, Ordering::Relaxed);
    let serving = eventually(Duration::from_secs(60), || {
        let s = upstream_status(&gw, "only");
        s.height == Some(10) && s.takes_traffic
    })
    .await;
    assert!(serving, "{:?}", gw.pool().status());
    assert_eq!(gw.pool().best_height(), 10);
    let r = post(
        &format!("{}/ext/info", gw.url()),
        &call("info.getNetworkID", "{}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    gw.shutdown().await;
}

/// A node where `platform.getCurrentValidators` takes `slow` and everything else is immediate.
async fn slow_for_one_method(slow: Duration) -> Hostile {
    Hostile::start(100, move |method, v, _| {
        let id = v["id"].clone();
        Box::pin(async move {
            if method == "platform.getCurrentValidators" || method == "platform.getStake" {
                tokio::time::sleep(slow).await;
            }
            (
                200,
                format!(r#"{{"jsonrpc":"2.0","result":{{"networkID":"5"}},"id":{id}}}"#),
            )
        })
    })
    .await
}

#[tokio::test]
async fn a_client_calling_a_slow_method_takes_no_node_out() {
    let nodes = [
        slow_for_one_method(Duration::from_secs(2)).await,
        slow_for_one_method(Duration::from_secs(2)).await,
        slow_for_one_method(Duration::from_secs(2)).await,
    ];
    let mut cfg = config(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| n.upstream(&format!("n{i}")))
            .collect(),
    );
    cfg.upstream.request_timeout = Duration::from_millis(200);
    cfg.limits.request_deadline = Duration::from_secs(1);
    // A node taken out needs two good checks, 300 ms apart, to come back.
    cfg.health.interval = Duration::from_millis(300);
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || gw
            .pool()
            .status()
            .upstreams
            .iter()
            .all(|u| u.takes_traffic))
        .await
    );
    // One client keeps calling the slow method, two calls at a time (each call times out on
    // every node it tries)...
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let url = format!("{}/ext/bc/P", gw.url());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..5 {
                    statuses.push(
                        post(&url, &call("platform.getCurrentValidators", "{}"))
                            .await
                            .status,
                    );
                }
                statuses
            })
        })
        .collect();
    // ...while others make ordinary calls: none of them fails.
    let mut workers = Vec::new();
    for w in 0..4 {
        let url = format!("{}/ext/info", gw.url());
        workers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for i in 0..100 {
                let r = post(&url, &call("info.getNetworkID", "{}")).await;
                if r.status != 200 || !r.body.contains("result") {
                    failures.push(format!("worker {w} call {i}: {} {}", r.status, r.body));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for w in workers {
        failures.extend(w.await.unwrap());
    }
    let mut slow_statuses = Vec::new();
    for t in slow {
        slow_statuses.extend(t.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}",
        failures.len()
    );
    assert!(slow_statuses.iter().all(|&s| s == 504), "{slow_statuses:?}");
    let status = gw.pool().status();
    assert!(status.upstreams.iter().all(|u| u.healthy), "{status:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_method_can_carry_its_own_timeout() {
    let node = slow_for_one_method(Duration::from_millis(600)).await;
    let mut cfg = Config::from_toml(
        "[methods.\"platform.getCurrentValidators\"]\ntimeout = \"3s\"\n",
        "test.toml",
    )
    .unwrap();
    let base = config(vec![node.upstream("only")]);
    cfg.server = base.server;
    cfg.upstreams = base.upstreams;
    cfg.cache.enabled = false;
    cfg.rate_limit.enabled = false;
    cfg.health = base.health;
    cfg.upstream.request_timeout = Duration::from_millis(200);
    cfg.limits.request_deadline = Duration::from_secs(5);
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || upstream_status(&gw, "only")
            .takes_traffic)
        .await
    );
    let url = format!("{}/ext/bc/P", gw.url());
    // Its own timeout (3 s) instead of upstream.request_timeout (200 ms): answered.
    let r = post(&url, &call("platform.getCurrentValidators", "{}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("result"), "{}", r.body);
    // A method as slow without one times out.
    let r = post(&url, &call("platform.getStake", r#"{"addresses":[]}"#)).await;
    assert_eq!(r.status, 504, "{}", r.body);
    gw.shutdown().await;
}

#[tokio::test]
async fn queueing_in_the_gateway_takes_no_node_out() {
    // Two nodes answering in 200 ms, two requests in flight each: 20 calls/s at most, for 60
    // clients. Most requests queue in snowgate, many until their 1 s deadline.
    let c = Cluster::start(2, Duration::from_secs(60), |cfg| {
        cfg.cache.enabled = false;
        cfg.health.interval = Duration::from_secs(1);
        cfg.health.timeout = Duration::from_secs(1);
        cfg.upstream.max_concurrency = 2;
        cfg.upstream.request_timeout = Duration::from_secs(1);
        cfg.limits.request_deadline = Duration::from_secs(1);
    })
    .await;
    for n in &c.nodes {
        n.control()
            .update_faults(|f| f.latency = Duration::from_millis(200));
    }
    let mut clients = Vec::new();
    for _ in 0..60 {
        let url = format!("{}/ext/info", c.url());
        clients.push(tokio::spawn(async move {
            let client = client();
            let mut answers = Vec::new();
            for _ in 0..4 {
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(call("info.getNetworkID", "{}"))
                    .send()
                    .await
                    .unwrap();
                answers.push((r.status().as_u16(), r.text().await.unwrap()));
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for t in clients {
        answers.extend(t.await.unwrap());
    }
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    let no_upstream: Vec<_> = answers
        .iter()
        .filter(|(_, b)| b.contains("no healthy upstream"))
        .collect();
    assert!(
        no_upstream.is_empty(),
        "{} of {} calls found no healthy upstream ({ok} answered)",
        no_upstream.len(),
        answers.len()
    );
    assert!(ok > 0);
    let status = c.gateway.pool().status();
    assert!(
        status.upstreams.iter().all(|u| u.takes_traffic),
        "{status:?}"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn node_addresses_and_node_bodies_never_reach_the_public_or_the_logs() {
    let logs = capture_logs();

    // A node that answers every call with HTTP 500 and the request echoed back.
    let echo = Hostile::start(100, |_, _, raw| Box::pin(async move { (500, raw) })).await;
    // A node nobody listens on.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone_addr = gone.local_addr().unwrap();
    drop(gone);
    let mut cfg = config(vec![
        echo.upstream("echo"),
        UpstreamConfig {
            name: "gone".into(),
            url: format!("http://{gone_addr}"),
            ..Default::default()
        },
    ]);
    cfg.upstream.max_attempts = 1;
    // One check at start only: what /ext/health shows next is what the request left.
    cfg.health.interval = Duration::from_secs(60);
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || upstream_status(&gw, "echo")
            .takes_traffic)
        .await
    );
    let secret = "hunter2-keystore-password";
    let r = post_with(
        &format!("{}/ext/bc/P", gw.url()),
        &call(
            "platform.exportKey",
            &format!(r#"{{"username":"admin","password":"{secret}","address":"P-x"}}"#),
        ),
        &[("authorization", &format!("Bearer {ADMIN_KEY}"))],
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(
        r.json()["error"]["message"],
        "upstream echo unavailable: http 500",
        "{}",
        r.body
    );
    let health = get_health(&gw).await;
    let status: serde_json::Value = serde_json::from_str(&health).unwrap();
    let last_error = |name: &str| {
        status["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap()["lastError"]
            .clone()
    };
    assert_eq!(last_error("echo"), "http 500", "{health}");
    assert_eq!(last_error("gone"), "connect refused", "{health}");
    for public in [&r.body, &health] {
        assert!(!public.contains(secret), "{public}");
        assert!(!public.contains("127.0.0.1"), "{public}");
        assert!(!public.contains(&gone_addr.port().to_string()), "{public}");
    }
    let logged = logs.text();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("upstream attempt failed") && l.contains("upstream=echo")),
        "{logged}"
    );
    assert!(!logged.contains(secret), "{logged}");
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_request_ids_are_unpredictable() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let record = seen.clone();
    let node = Hostile::start(100, move |_, v, _| {
        record.lock().unwrap().push(v["id"].as_u64().unwrap_or(0));
        let text = format!(
            r#"{{"jsonrpc":"2.0","result":{{"networkID":"5"}},"id":{}}}"#,
            v["id"]
        );
        Box::pin(async move { (200, text) })
    })
    .await;
    let gw = snowgate::Gateway::start(config(vec![node.upstream("only")]))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || upstream_status(&gw, "only")
            .takes_traffic)
        .await
    );
    // The node's own identity calls (info.getNetworkID when it joined) are not the test's.
    seen.lock().unwrap().clear();
    for _ in 0..20 {
        let r = post(
            &format!("{}/ext/info", gw.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut ids = seen.lock().unwrap().clone();
    assert_eq!(ids.len(), 20);
    // A counter (or anything a node could guess from the last id) puts them close together;
    // 20 random 64-bit ids are all far apart.
    ids.sort_unstable();
    let closest = ids.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest > 1 << 20, "ids {ids:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn an_unsolicited_answer_on_a_kept_alive_connection_is_never_taken_for_the_next() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A node that answers each request, then 20 ms later sends another answer on the same
    // connection, unasked: one for each of the next ids a counter would give out.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reused = Arc::new(AtomicU64::new(0));
    let seen_reuse = reused.clone();
    let node = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen_reuse = seen_reuse.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut forged_before = false;
                loop {
                    // One request: head, then Content-Length bytes of body.
                    let (head_end, length) = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let length: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            break (end + 4, length);
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    while buf.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: serde_json::Value =
                        serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
                    buf.drain(..head_end + length);
                    if forged_before {
                        seen_reuse.fetch_add(1, Ordering::Relaxed);
                    }
                    let id = body["id"].as_u64().unwrap_or(0);
                    let result = match body["method"].as_str().unwrap_or_default() {
                        "info.isBootstrapped" => r#"{"isBootstrapped":true}"#.to_string(),
                        "platform.getHeight" => r#"{"height":"100"}"#.to_string(),
                        _ => r#"{"networkID":"5"}"#.to_string(),
                    };
                    let answer = |id: u64, result: &str| {
                        let body = format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#);
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    if stream
                        .write_all(answer(id, &result).as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    if body["method"] == "info.getNetworkID" {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let forged: String = (1..=3)
                            .map(|k| answer(id.wrapping_add(k), r#"{"networkID":"666"}"#))
                            .collect();
                        if stream.write_all(forged.as_bytes()).await.is_err() {
                            return;
                        }
                        forged_before = true;
                    }
                }
            });
        }
    });
    let mut cfg = config(vec![UpstreamConfig {
        name: "forger".into(),
        url: format!("http://{addr}"),
        ..Default::default()
    }]);
    cfg.health.interval = Duration::from_secs(60);
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || upstream_status(&gw, "forger")
            .takes_traffic)
        .await
    );
    // The pool's own info.getNetworkID when the node joined was forged after too: give those
    // forged answers the time the calls below give each other.
    tokio::time::sleep(Duration::from_millis(60)).await;
    for i in 0..10 {
        let r = post(
            &format!("{}/ext/info", gw.url()),
            &call("info.getNetworkID", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
        assert_eq!(r.json()["result"]["networkID"], "5", "call {i}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    // No connection that carried the forged answers was used again.
    assert_eq!(
        reused.load(Ordering::Relaxed),
        0,
        "requests were written after unsolicited bytes"
    );
    gw.shutdown().await;
    node.abort();
}
