//! A clean shutdown of the real binary: on SIGTERM `/ext/health` turns 503 at once, requests in
//! flight complete, the listener closes and the process exits 0.
#![allow(clippy::unwrap_used)]

mod support;

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
