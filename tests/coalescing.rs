//! A coalesced cache miss belongs to every caller waiting for it, not to the one that started it:
//! when that client goes away, the one upstream call still completes and the waiters get its
//! answer, without a second call to the node.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use support::*;
use tokio::io::AsyncWriteExt;

/// How long the node takes over each `platform.getTx`.
const SLOW: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn a_coalesced_miss_completes_for_its_waiters_when_its_first_client_leaves() {
    let (node, arrivals, _) = slow_node(SLOW).await;
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.rate_limit.enabled = false;
    config.health.interval = Duration::from_millis(100);
    config.health.timeout = Duration::from_millis(100);
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "slow".into(),
        url: format!("http://{node}"),
        ..Default::default()
    }];
    // The slow node's `0x00` is a placeholder, no tx of the ID asked: left unchecked.
    config.cache.verify = snowgate::config::Verify::Off;
    let gw = snowgate::Gateway::start(config).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || gw.pool().status().healthy).await,
        "the node never became healthy"
    );
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));

    // Client A starts the miss over a raw connection it will drop.
    let mut a = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let head = format!(
        "POST /ext/bc/P HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        gw.addr(),
        body.len()
    );
    a.write_all(head.as_bytes()).await.unwrap();
    a.write_all(body.as_bytes()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || arrivals.load(Ordering::SeqCst)
            == 1)
        .await,
        "client A's call never reached the node"
    );

    // Client B asks for the same thing and waits for A's call.
    let url = format!("{}/ext/bc/P", gw.url());
    let b = tokio::spawn({
        let body = body.clone();
        async move { post(&url, &body).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A goes away while the node is still working on its call.
    a.shutdown().await.unwrap();
    drop(a);

    let r = tokio::time::timeout(Duration::from_secs(15), b)
        .await
        .expect("client B never got an answer")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["tx"], "0x00", "{}", r.body);
    assert_eq!(
        arrivals.load(Ordering::SeqCst),
        1,
        "the node was called again when client A left"
    );
    gw.shutdown().await;
}
