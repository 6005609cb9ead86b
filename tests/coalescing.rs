//! A coalesced cache miss belongs to every caller waiting for it, not to the one that started it:
//! when that client goes away, the one upstream call still completes and the waiters get its
//! answer, without a second call to the node.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;
use tokio::io::AsyncWriteExt;

/// How long the node takes over each `platform.getTx`.
const SLOW: Duration = Duration::from_millis(1500);

/// A node on 127.0.0.1:0 that passes health checks at once and answers `platform.getTx` after
/// [`SLOW`], counting each such call when it arrives (not when it is answered, so a call the
/// gateway gives up on still counts).
async fn slow_node() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use http_body_util::{BodyExt, Full};
    let arrivals = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let counter = counter.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let id = v["id"].clone();
                            let result = match v["method"].as_str().unwrap_or_default() {
                                "info.isBootstrapped" => r#"{"isBootstrapped":true}"#.to_string(),
                                "platform.getHeight" => r#"{"height":"100"}"#.to_string(),
                                // The pool asks who the node is when it joins: quick, not counted.
                                "info.getNetworkID" => r#"{"networkID":"12345"}"#.to_string(),
                                "info.getNodeVersion" => {
                                    r#"{"version":"avalanchego/1.14.2"}"#.to_string()
                                }
                                _ => {
                                    counter.fetch_add(1, Ordering::SeqCst);
                                    tokio::time::sleep(SLOW).await;
                                    r#"{"tx":"0x00","encoding":"hex"}"#.to_string()
                                }
                            };
                            let text =
                                format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                bytes::Bytes::from(text),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, arrivals)
}

#[tokio::test]
async fn a_coalesced_miss_completes_for_its_waiters_when_its_first_client_leaves() {
    let (node, arrivals) = slow_node().await;
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
    let gw = snowgate::Gateway::start(config).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || gw.pool().status().healthy).await,
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
        eventually(Duration::from_secs(5), || arrivals.load(Ordering::SeqCst)
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
