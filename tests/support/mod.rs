//! Shared helpers for the integration tests: a simulated network of devnodes on 127.0.0.1:0 with
//! the gateway in front, and a small HTTP client.
#![allow(dead_code, clippy::unwrap_used)]

pub mod binary;
pub mod browser;
pub mod devnode;
pub mod fleet;
pub mod logs;
pub mod otlp;
pub mod prometheus;
pub mod proxy;
pub mod redis;
pub mod window;

use std::time::Duration;

use snowgate::config::{Config, UpstreamConfig};
use snowgate::devnode::{ChainConfig, DevNode, DevNodeConfig, Network};
use snowgate::Gateway;

/// The admin key the test gateways accept.
pub const ADMIN_KEY: &str = "test-admin-key-0123456789";

/// Devnodes sharing one chain, and a gateway in front of them.
pub struct Cluster {
    pub network: Network,
    pub nodes: Vec<DevNode>,
    pub gateway: Gateway,
}

/// A simulated network `network_id` (seed 1) and `n` devnodes of it (node indexes 0..n).
pub async fn devnodes(
    network_id: u32,
    n: usize,
    block_interval: Duration,
) -> (Network, Vec<DevNode>) {
    let network = Network::start(ChainConfig {
        network_id,
        seed: 1,
        block_interval,
        genesis: None,
    })
    .unwrap();
    let mut nodes = Vec::new();
    for i in 0..n {
        let node = DevNode::spawn_in(
            network.clone(),
            DevNodeConfig {
                node_index: i as u32,
                network_id,
                block_interval,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        nodes.push(node);
    }
    (network, nodes)
}

/// The settings every test gateway starts from: `nodes` as its upstreams (`node-0`, ...), listening
/// on 127.0.0.1:0, the test admin key, and limits the tests do not trip by accident.
pub fn test_gateway(config: &mut Config, nodes: &[DevNode]) {
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.upstreams = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| UpstreamConfig {
            name: format!("node-{i}"),
            url: n.url(),
            ..Default::default()
        })
        .collect();
    config.admin.api_keys = vec![ADMIN_KEY.to_string()];
    // A check may take its whole interval (timeout <= interval, as validate requires): on a
    // loaded CI machine a devnode's answer can take tens of milliseconds.
    config.health.interval = Duration::from_millis(200);
    config.health.timeout = Duration::from_millis(200);
    // The tests make many calls from one address; the rate-limit tests turn it back on.
    config.rate_limit.enabled = false;
    // Likewise for the per-address connection cap; its own tests set it.
    config.limits.max_connections_per_ip = 10_000;
}

impl Cluster {
    /// `n` devnodes (blocks every `block_interval`) behind a gateway; `tweak` adjusts the config.
    pub async fn start(
        n: usize,
        block_interval: Duration,
        tweak: impl FnOnce(&mut Config),
    ) -> Cluster {
        let (network, nodes) = devnodes(12345, n, block_interval).await;
        let mut config = Config::default();
        test_gateway(&mut config, &nodes);
        tweak(&mut config);
        let gateway = Gateway::start(config).await.unwrap();
        // The pool has asked each node who it is (`info.getNetworkID`, `info.getNodeVersion`)
        // before its first request: tests count their own calls from here.
        for node in &nodes {
            node.control().reset_calls();
        }
        Cluster {
            network,
            nodes,
            gateway,
        }
    }

    pub fn url(&self) -> String {
        self.gateway.url()
    }
}

/// An HTTP answer, body as text.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .no_proxy()
        .build()
        .unwrap()
}

/// POSTs `body` with `Content-Type: application/json` and extra headers.
pub async fn post_with(url: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    Reply {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        body: r.text().await.unwrap(),
    }
}

/// A GET of `url` with `headers`.
pub async fn get_with(url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = client().get(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

/// POSTs `body` with `Content-Type: application/json`.
pub async fn post(url: &str, body: &str) -> Reply {
    post_with(url, body, &[]).await
}

/// A JSON-RPC call body with id 1.
pub fn call(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// Polls `cond` every 20 ms for at most `limit`.
/// Waits (at most a minute) until every node of `gateway`'s pool takes traffic, and fails saying
/// where the pool stands if they do not.
pub async fn every_node_takes_traffic(gateway: &Gateway) {
    let pool = gateway.pool().clone();
    let all = || pool.status().upstreams.iter().all(|u| u.takes_traffic);
    assert!(
        eventually(Duration::from_secs(60), all).await,
        "{:?}",
        pool.status()
    );
}

pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// A scripted node on 127.0.0.1:0: it passes the gateway's health checks at `height` and answers
/// every other call with the body `answer(method, request)` returns (HTTP 200).
pub async fn scripted_node(
    height: u64,
    answer: impl Fn(&str, &serde_json::Value) -> String + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use http_body_util::{BodyExt, Full};
    let answer = std::sync::Arc::new(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let id = v["id"].clone();
                            let method = v["method"].as_str().unwrap_or_default().to_string();
                            let text = match method.as_str() {
                                "info.isBootstrapped" => {
                                    format!(
                                        r#"{{"jsonrpc":"2.0","result":{{"isBootstrapped":true}},"id":{id}}}"#
                                    )
                                }
                                "platform.getHeight" => {
                                    format!(
                                        r#"{{"jsonrpc":"2.0","result":{{"height":"{height}"}},"id":{id}}}"#
                                    )
                                }
                                _ => answer(&method, &v),
                            };
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
    addr
}

/// Reads until the peer closes, for at most `limit`; `None` if it did not close in time.
pub async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    limit: Duration,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(stream, &mut buf))
            .await
        {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(out),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// An HTTP/2 connection (prior knowledge) to `addr`, with the given initial stream window (0: the
/// client takes no answer byte until it opens it).
pub async fn h2_connect(
    addr: std::net::SocketAddr,
    window: u32,
) -> hyper::client::conn::http2::SendRequest<
    http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(window)
            .initial_connection_window_size(window.max(65_535))
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// `n` streams posting `body` to `url` over `sender`, each read to its end in a task of its own:
/// the answer's length, or `None` when the stream failed (or was cut).
pub async fn h2_posts(
    sender: &mut hyper::client::conn::http2::SendRequest<
        http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    >,
    url: &str,
    body: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Option<usize>>> {
    use http_body_util::BodyExt;
    let mut streams = Vec::new();
    for _ in 0..n {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(body.as_bytes())).boxed())
            .unwrap();
        if sender.ready().await.is_err() {
            break;
        }
        let answer = sender.send_request(req);
        streams.push(tokio::spawn(async move {
            match answer.await {
                Ok(r) => r
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes().len())
                    .ok(),
                Err(_) => None,
            }
        }));
    }
    streams
}

/// A port free a moment ago on 127.0.0.1 (for a program that must be told its port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh directory under the system's temp dir (the name is short: a unix socket path in it has
/// at most 107 bytes).
pub fn temp_dir(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!(
        "sg-{what}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A private CA, and a certificate for `127.0.0.1` / `localhost` it signed (rcgen): (CA PEM, cert
/// PEM, key PEM).
pub fn private_ca() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A node on 127.0.0.1:0 that passes health checks and identity calls at once and answers every
/// other call (`{"tx":"0x00","encoding":"hex"}`) after `delay`. Returns its address, the calls
/// that arrived (counted on arrival, so a call the gateway gives up on still counts) and the
/// connections open to it now.
pub async fn slow_node(
    delay: Duration,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let arrivals = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (counter, connections) = (arrivals.clone(), open.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            let connections = connections.clone();
            connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let counter = counter.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let id = v["id"].clone();
                            let result = match v["method"].as_str().unwrap_or_default() {
                                "info.isBootstrapped" => r#"{"isBootstrapped":true}"#,
                                "platform.getHeight" => r#"{"height":"100"}"#,
                                "info.getNetworkID" => r#"{"networkID":"12345"}"#,
                                "info.getNodeVersion" => r#"{"version":"avalanchego/1.14.2"}"#,
                                _ => {
                                    counter.fetch_add(1, Ordering::SeqCst);
                                    tokio::time::sleep(delay).await;
                                    r#"{"tx":"0x00","encoding":"hex"}"#
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
                connections.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, arrivals, open)
}

/// Raises this process's soft limit of open files as far as the hard limit allows and returns
/// the limit it now has: a test that holds many sockets sizes its load to this, so it runs (with
/// less load) under a stock `ulimit -n 1024` and never asks the user to raise it.
pub fn raise_fd_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).unwrap_or_else(|_| {
        rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024)
    })
}

/// `GET url`'s body as text (the test fails if it cannot be fetched).
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The gateway at `base`'s `/metrics` text, asked with [`ADMIN_KEY`] (on the public port it needs
/// an admin key; the gateway's config must have it). The test fails if it is not a 200.
pub async fn get_metrics(base: &str) -> String {
    let r = client()
        .get(format!("{base}/metrics"))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "GET {base}/metrics");
    r.text().await.unwrap()
}
