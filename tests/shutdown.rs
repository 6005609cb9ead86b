//! A clean shutdown of the real binary: on SIGTERM `/ext/health` turns 503 at once, requests in
//! flight complete, the listener closes and the process exits 0.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use snowgate::devnode::{DevNode, DevNodeConfig};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_requests_in_flight_then_exits_zero() {
    let node = DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("snowgate-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("snowgate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndrain_grace = \"1s\"\ndrain_timeout = \"10s\"\n\
             [health]\ninterval = \"30s\"\ntimeout = \"5s\"\n\
             [rate_limit]\nenabled = false\n\
             [[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
            node.url()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("snowgate exited before listening")
            .unwrap();
        if let Some(url) = line.strip_prefix("snowgate listening on ") {
            break url.trim().to_string();
        }
    };
    // Every answer now takes 1.5 s: these requests are in flight when SIGTERM arrives.
    node.control()
        .update_faults(|f| f.latency = Duration::from_millis(1500));
    let mut in_flight = Vec::new();
    for i in 0..4 {
        let url = url.clone();
        in_flight.push(tokio::spawn(async move {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.sampleValidators","params":{{"size":1}}}}"#);
            post(&format!("{url}/ext/bc/P"), &body).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let term = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Within the grace period: still answering, but telling load balancers to go away.
    let health = client()
        .get(format!("{url}/ext/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 503);
    let v: serde_json::Value = health.json().await.unwrap();
    assert_eq!(v["draining"], true);
    for (i, t) in in_flight.into_iter().enumerate() {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert!(r.json()["result"]["validators"].is_array(), "{}", r.body);
    }
    let code = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(code.success(), "exit status {code:?}");
    assert!(
        term.elapsed() < Duration::from_secs(8),
        "{:?}",
        term.elapsed()
    );
    // The listener is gone.
    let gone = reqwest::Client::new()
        .get(format!("{url}/ext/health"))
        .send()
        .await;
    assert!(gone.is_err(), "still accepting after exit");
    let _ = std::fs::remove_dir_all(&dir);
}

fn one_node_config(node_url: &str, extra: &str) -> String {
    format!(
        "[server]\ndrain_timeout = \"30s\"\n[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\n\
         [rate_limit]\nenabled = false\n{extra}\n[[upstreams]]\nname = \"n\"\nurl = \"{node_url}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_and_keeps_serving() {
    let node = DevNode::spawn(DevNodeConfig::default()).await.unwrap();
    let mut served = binary::Served::start(&one_node_config(&node.url(), ""), "info");
    served.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        served.wait_exit(Duration::from_millis(10)).is_none(),
        "SIGHUP ended the process"
    );
    let r = post(
        &format!("{}/ext/bc/P", served.url),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let logs = served.logs();
    assert!(logs.contains("SIGHUP: reloading the config"), "{logs}");
    assert!(logs.contains("config reloaded"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_drain_exits_at_once() {
    let node = DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut served = binary::Served::start(&one_node_config(&node.url(), ""), "info");
    // A request that keeps the drain waiting for 20 s.
    node.control()
        .update_faults(|f| f.latency = Duration::from_secs(20));
    let url = format!("{}/ext/bc/P", served.url);
    let slow = tokio::spawn(async move {
        let _ = client()
            .post(url)
            .header("content-type", "application/json")
            .body(call("platform.sampleValidators", r#"{"size":1}"#))
            .send()
            .await;
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    served.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        served.wait_exit(Duration::from_millis(10)).is_none(),
        "the first SIGTERM must drain, not exit"
    );
    let second = Instant::now();
    served.signal("TERM");
    let status = tokio::task::spawn_blocking(move || {
        let s = served.wait_exit(Duration::from_secs(5));
        (s, served)
    })
    .await
    .unwrap();
    let (status, served) = status;
    let status = status.unwrap_or_else(|| panic!("still running 5 s after the second SIGTERM"));
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(second.elapsed() < Duration::from_secs(5));
    assert!(served.logs().contains("second signal"), "{}", served.logs());
    slow.abort();
}

#[tokio::test]
async fn liveness_answers_200_while_no_node_can_serve() {
    // Every node down: readiness and /ext/health say 503, liveness stays 200.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let cluster = Cluster::start(0, Duration::from_secs(60), |c| {
        c.upstreams = vec![snowgate::config::UpstreamConfig {
            name: "down".into(),
            url,
            ..Default::default()
        }];
    })
    .await;
    let get = |path: &str| {
        let url = format!("{}{path}", cluster.url());
        async move { client().get(url).send().await.unwrap() }
    };
    assert_eq!(get("/ext/health").await.status().as_u16(), 503);
    assert_eq!(get("/ext/health/readiness").await.status().as_u16(), 503);
    let live = get("/ext/health/liveness").await;
    assert_eq!(live.status().as_u16(), 200);
    let v: serde_json::Value = live.json().await.unwrap();
    assert_eq!(v["healthy"], true);
}
