//! Issue 23, findings 4, 5, 7 and 8, attacked over HTTP: a request a node refuses as too large
//! (nginx's `client_max_body_size`) is the caller's error and ejects no node, and no node is ever
//! sent more than `limits.body_bytes`; the fleet's Redis is written under the pool's settled
//! network only; two lying nodes of four cannot set the pool's height; a provider's error that
//! echoes its own key, header and Basic credentials reaches no client and no log line.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use snowgate::config::{Config, UpstreamConfig};
use support::redis::{RedisServer, SharedRedis};
use support::*;

/// What a scripted node saw of one call its script answered: the method, the request's path, its
/// headers, and the length of its body in bytes.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: http::HeaderMap,
    len: usize,
}

type Script = Arc<dyn Fn(&Seen, &serde_json::Value) -> (u16, String) + Send + Sync>;

/// A node on 127.0.0.1:0 that passes the gateway's health checks at `height`, says it is on
/// `network`, refuses (413, as nginx does) any body longer than `max_body` after reading it, and
/// answers every other call with `script`. Every call the script sees is recorded.
struct Node {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Bodies refused with 413.
    refused: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start(height: u64, network: u32, max_body: Option<usize>, script: Script) -> Node {
        use http_body_util::{BodyExt, Full};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let refused = Arc::new(AtomicU64::new(0));
        let (record, count) = (seen.clone(), refused.clone());
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (record, count, script) = (record.clone(), count.clone(), script.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (record, count, script) =
                                (record.clone(), count.clone(), script.clone());
                            async move {
                                let path = req.uri().path().to_string();
                                let headers = req.headers().clone();
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let reply = |status: u16, text: String| {
                                    let mut r =
                                        hyper::Response::new(Full::new(bytes::Bytes::from(text)));
                                    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                    Ok::<_, std::convert::Infallible>(r)
                                };
                                if max_body.is_some_and(|max| body.len() > max) {
                                    count.fetch_add(1, Ordering::SeqCst);
                                    let mut r = reply(413, NGINX_413.to_string())?;
                                    r.headers_mut()
                                        .insert("connection", "close".parse().unwrap());
                                    return Ok(r);
                                }
                                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                let id = v["id"].clone();
                                let method = v["method"].as_str().unwrap_or_default().to_string();
                                let result = |r: &str| {
                                    format!(r#"{{"jsonrpc":"2.0","result":{r},"id":{id}}}"#)
                                };
                                match method.as_str() {
                                    "info.isBootstrapped" => {
                                        reply(200, result(r#"{"isBootstrapped":true}"#))
                                    }
                                    "platform.getHeight" => {
                                        reply(200, result(&format!(r#"{{"height":"{height}"}}"#)))
                                    }
                                    "info.getNetworkID" => reply(
                                        200,
                                        result(&format!(r#"{{"networkID":"{network}"}}"#)),
                                    ),
                                    "info.getNodeVersion" => {
                                        reply(200, result(r#"{"version":"avalanchego/1.14.2"}"#))
                                    }
                                    _ => {
                                        let s = Seen {
                                            method,
                                            path,
                                            headers,
                                            len: body.len(),
                                        };
                                        record.lock().unwrap().push(s.clone());
                                        let (status, text) = script(&s, &v);
                                        reply(status, text)
                                    }
                                }
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Node {
            addr,
            seen,
            refused,
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

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// nginx's own 413 page (`client_max_body_size`).
const NGINX_413: &str = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

/// nginx's default `client_max_body_size`: 1 MiB.
const NGINX_MAX_BODY: usize = 1024 * 1024;

/// A script answering every call with the result `{"tx":"0x00","encoding":"hex"}`.
fn answers_tx() -> Script {
    Arc::new(|_, v| {
        let text = format!(
            r#"{{"jsonrpc":"2.0","result":{{"tx":"0x00","encoding":"hex"}},"id":{}}}"#,
            v["id"]
        );
        (200, text)
    })
}

/// A gateway config for `upstreams`, checked every 100 ms, without cache or rate limits.
fn config(upstreams: Vec<UpstreamConfig>) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.upstreams = upstreams;
    config.admin.api_keys = vec![ADMIN_KEY.to_string()];
    config.cache.enabled = false;
    config.rate_limit.enabled = false;
    config.limits.max_connections_per_ip = 10_000;
    config.health.interval = Duration::from_millis(100);
    config.health.timeout = Duration::from_millis(100);
    // The scripted nodes' `0x00` is a placeholder, no tx of the ID asked: left unchecked.
    config.cache.verify = snowgate::config::Verify::Off;
    config
}

/// A `platform.getTx` body of exactly `len` bytes (id 1, a `txID` of `a`s).
fn get_tx_body(len: usize) -> String {
    let head =
        r#"{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"encoding":"hex","txID":""#;
    let tail = r#""}}"#;
    format!("{head}{}{tail}", "a".repeat(len - head.len() - tail.len()))
}

/// The sum of `snowgate_upstream_state_changes_total{to="unhealthy"}` over every upstream.
fn ejections(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("snowgate_upstream_state_changes_total{"))
        .filter(|l| l.contains(r#"to="unhealthy""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Finding 4: three nodes behind nginx's 1 MiB body limit, a gateway that accepts 2 MiB. A client
/// sending 1.5 MiB bodies gets a clear JSON-RPC error for each (the node's refusal is its own
/// error, sent once to one node, not retried on every node), no node is taken out, and another
/// client's calls all succeed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refusing_a_body_as_too_large_is_the_callers_error_and_ejects_no_node() {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Node::start(100, 12345, Some(NGINX_MAX_BODY), answers_tx()).await);
    }
    let upstreams = (0..3)
        .map(|i| nodes[i].upstream(&format!("n{i}")))
        .collect();
    let mut cfg = config(upstreams);
    cfg.limits.body_bytes = 2 * 1024 * 1024;
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    let url = format!("{}/ext/bc/P", gw.url());
    let large = get_tx_body(1536 * 1024);
    let sent = 12;
    for i in 0..sent {
        let r = post(&url, &large).await;
        assert_eq!(r.status, 200, "large call {i}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "large call {i}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("too large"), "large call {i}: {message}");
        assert_eq!(v["id"], 1, "{v}");
    }
    let refused: u64 = nodes.iter().map(|n| n.refused.load(Ordering::SeqCst)).sum();
    assert_eq!(refused, sent, "each large call reached exactly one node");
    let metrics = get_metrics(&gw.url()).await;
    assert_eq!(ejections(&metrics), 0.0, "nodes were taken out:\n{metrics}");
    assert!(gw.pool().status().upstreams.iter().all(|u| u.takes_traffic));
    // Another client, right after: every call served.
    let small = call(
        "platform.getTx",
        r#"{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}"#,
    );
    for i in 0..30 {
        let r = post(&url, &small).await;
        assert_eq!(r.status, 200, "small call {i}: {}", r.body);
        assert_eq!(
            r.json()["result"]["tx"],
            "0x00",
            "small call {i}: {}",
            r.body
        );
    }
    gw.shutdown().await;
}

/// Finding 4: a body the router accepts (exactly `limits.body_bytes`) whose re-encoding for a node
/// is longer (snowgate's own 20-digit request id for the client's `1`) never reaches a node: the
/// client is told, and the node's byte count shows nothing over the limit. A body with room for
/// the id is sent, within the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_re_encoding_would_pass_body_bytes_never_reaches_a_node() {
    let node = Node::start(100, 12345, None, answers_tx()).await;
    let cfg = config(vec![node.upstream("recorder")]);
    let limit = cfg.limits.body_bytes;
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    let url = format!("{}/ext/bc/P", gw.url());
    let r = post(&url, &get_tx_body(limit)).await;
    assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(300)]);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&limit.to_string()), "{message}");
    assert!(node.seen().is_empty(), "the node got {:?} bytes", {
        node.seen().iter().map(|s| s.len).collect::<Vec<_>>()
    });
    let r = post(&url, &get_tx_body(limit - 64)).await;
    assert_eq!(r.json()["result"]["tx"], "0x00");
    let sizes: Vec<usize> = node.seen().iter().map(|s| s.len).collect();
    assert_eq!(sizes.len(), 1, "{sizes:?}");
    assert!(sizes[0] <= limit, "a node received {} bytes", sizes[0]);
    gw.shutdown().await;
}

/// Finding 5: a pool of two local-network (12345) devnodes and one fuji (5) devnode, the local
/// ones down at start. The fuji node answers alone, but the pool's network is not settled (it
/// needs more than half of the nodes), so the fleet's Redis gets nothing at all, least of all
/// under network 5. Once the local nodes are up the pool settles on 12345, and answers are
/// shared under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_tier_writes_only_under_the_pools_settled_network() {
    let redis = RedisServer::start();
    let (_local, mut nodes) = devnodes(12345, 2, Duration::from_secs(3600)).await;
    let (_fuji, fuji) = devnodes(5, 1, Duration::from_secs(3600)).await;
    nodes.extend(fuji);
    for node in &nodes[..2] {
        node.control().go_down().await;
    }
    let mut cfg = Config::from_toml(&redis.redis_toml(), "test").unwrap();
    test_gateway(&mut cfg, &nodes);
    let gw = snowgate::Gateway::start(cfg).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || gw.pool().status().healthy).await,
        "the fuji node never took traffic: {:?}",
        gw.pool().status()
    );
    let url = format!("{}/ext/bc/P", gw.url());
    let block = |h: u64| call("platform.getBlockByHeight", &format!(r#"{{"height":{h}}}"#));
    let height = gw.pool().best_height();
    assert!(height > 10, "{height}");
    for h in 1..=5 {
        let r = post(&url, &block(h)).await;
        assert!(r.json()["result"].is_object(), "{}", r.body);
    }
    // Each answer was offered to the shared tier (written, or dropped when nothing is shared).
    let offered = r#"snowgate_shared_writes_total{result="#;
    let stores = |m: &str| -> f64 {
        m.lines()
            .filter(|l| l.starts_with(offered))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = get_metrics(&gw.url()).await;
        if stores(&metrics) >= 5.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stores(&metrics) >= 5.0, "{metrics}");
    // Writes run in the background: give any that were made the time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = redis.scan_keys("*");
    assert!(
        keys.is_empty(),
        "written before the pool's network was settled: {:?}",
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    for node in &nodes[..2] {
        node.control().come_up().await.unwrap();
    }
    let settled = eventually(Duration::from_secs(10), || {
        let s = gw.pool().status();
        s.upstreams[2].network_mismatch && s.upstreams[0].takes_traffic
    })
    .await;
    assert!(settled, "{:?}", gw.pool().status());
    // Shared from now on, under the settled network (a call not in this instance's memory).
    let mut shared = Vec::new();
    for i in 0..100 {
        let r = post(&url, &block(6 + i)).await;
        assert!(r.json()["result"].is_object(), "{}", r.body);
        shared = redis.scan_keys("snowgate:12345:c:*");
        if !shared.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !shared.is_empty(),
        "nothing shared once the network was settled"
    );
    let all = redis.scan_keys("*");
    assert!(
        all.iter().all(|k| k.starts_with(b"snowgate:12345:")),
        "{:?}",
        all.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    gw.shutdown().await;
}

/// Finding 7: four nodes, two of them lying far ahead. More than half must reach the quorum
/// height, so the liars are implausible and the honest two keep taking every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lying_nodes_of_four_cannot_set_the_height() {
    let liar_script: Script = Arc::new(|_, v| {
        let text = format!(
            r#"{{"jsonrpc":"2.0","result":{{"validators":[],"liar":true}},"id":{}}}"#,
            v["id"]
        );
        (200, text)
    });
    let liars = [
        Node::start(10_000_000, 12345, None, liar_script.clone()).await,
        Node::start(10_000_000, 12345, None, liar_script).await,
    ];
    let c = Cluster::start(2, Duration::from_secs(3600), |cfg| {
        cfg.cache.enabled = false;
        cfg.upstreams.push(liars[0].upstream("liar-0"));
        cfg.upstreams.push(liars[1].upstream("liar-1"));
    })
    .await;
    let gw = &c.gateway;
    let settled = eventually(Duration::from_secs(10), || {
        let s = gw.pool().status();
        s.upstreams
            .iter()
            .all(|u| u.takes_traffic != u.name.starts_with("liar"))
    })
    .await;
    assert!(settled, "{:?}", gw.pool().status());
    assert!(gw.pool().best_height() < 10_000_000);
    for i in 0..20 {
        let r = post(
            &format!("{}/ext/bc/P", c.url()),
            &call("platform.sampleValidators", r#"{"size":1}"#),
        )
        .await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
        assert!(
            !r.body.contains("liar"),
            "call {i} reached a liar: {}",
            r.body
        );
    }
    let honest: u64 = c
        .nodes
        .iter()
        .map(|n| n.control().call_count("platform.sampleValidators"))
        .sum();
    assert_eq!(honest, 20);
    c.gateway.shutdown().await;
}

const KEY: &str = "pk-SECRET-path-key-7731";
const USER: &str = "acct-SECRET-user-31";
const PASSWORD: &str = "pw@SECRET:9/x";
const HEADER_VALUE: &str = "hv-SECRET-header-5521";

/// `PASSWORD` as it goes in a URL (its `@ : /` percent-encoded).
fn url_password() -> String {
    PASSWORD
        .replace('@', "%40")
        .replace(':', "%3A")
        .replace('/', "%2F")
}

/// The provider's URL on `node`: Basic credentials and a key in the path.
fn provider_url(node: &Node) -> String {
    format!("http://{USER}:{}@{}/v1/{KEY}", url_password(), node.addr)
}

/// Finding 8: a provider whose JSON-RPC error echoes what it was sent (its path with the key,
/// escaped `\/` as some encoders write it, the key header, the Basic credentials raw, decoded
/// and percent-encoded, a key hidden behind a `\u` escape, the key as an object's name): none of it reaches the client, whose answer stays valid JSON with
/// the node's code, nor the logs, nor `/ext/health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_error_echoing_its_secrets_reaches_no_client_and_no_log() {
    let logs = support::logs::capture_logs();
    std::env::set_var("SNOWGATE_TEST_ROUND2_KEY", HEADER_VALUE);
    let echo: Script = Arc::new(|seen, v| {
        let header = |name: &str| {
            seen.headers
                .get(name)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let escaped_path = seen.path.replace('/', "\\/");
        let authz = header("authorization");
        let basic = authz.trim_start_matches("Basic ").to_string();
        let decoded = {
            use base64::Engine as _;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(&basic)
                .unwrap();
            String::from_utf8(raw).unwrap()
        };
        let percent = PASSWORD
            .replace('@', "%40")
            .replace(':', "%3A")
            .replace('/', "%2F");
        let hidden = format!("\\u0070{}", &KEY[1..]);
        let message = format!(
            "denied POST {escaped_path} key={} auth={authz} as {decoded} url=http:\\/\\/{USER}:{percent}@provider{escaped_path} hidden={hidden}",
            header("x-api-key")
        );
        let text = format!(
            r#"{{"jsonrpc":"2.0","error":{{"code":-32000,"message":"{message}","data":{{"{KEY}":["{basic}",{{"pw":"{}"}}],"n":"{}"}}}},"id":{}}}"#,
            PASSWORD.replace('/', "\\/"),
            HEADER_VALUE,
            v["id"]
        );
        (200, text)
    });
    let node = Node::start(100, 12345, None, echo).await;
    let provider = UpstreamConfig {
        name: "provider".into(),
        url: provider_url(&node),
        headers: [(
            "x-api-key".to_string(),
            "${SNOWGATE_TEST_ROUND2_KEY}".to_string(),
        )]
        .into(),
        ..Default::default()
    };
    let gw = snowgate::Gateway::start(config(vec![provider]))
        .await
        .unwrap();
    let r = post(
        &format!("{}/ext/bc/P", gw.url()),
        &call(
            "platform.getTx",
            r#"{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}"#,
        ),
    )
    .await;
    // The node did echo them.
    let seen = node.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, format!("/v1/{KEY}/ext/bc/P"));
    assert_eq!(seen[0].method, "platform.getTx");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"]["code"], -32000, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("denied POST "), "{message}");
    assert!(message.contains("[redacted]"), "{message}");
    let basic = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    };
    let health = get_text(&format!("{}/ext/health", gw.url())).await;
    // The raw answer, the answer as a client decodes it, the health page and every log line.
    let decoded = v.to_string();
    let logged = logs.text();
    for (what, text) in [
        ("answer", &r.body),
        ("decoded answer", &decoded),
        ("/ext/health", &health),
        ("logs", &logged),
    ] {
        for secret in [
            KEY,
            USER,
            PASSWORD,
            HEADER_VALUE,
            &basic,
            &url_password(),
            "SECRET",
        ] {
            assert!(!text.contains(secret), "{secret} in the {what}: {text}");
        }
    }
    gw.shutdown().await;
}

/// The final attack's F4: a provider echoing its secrets in disguises no list of encoded forms
/// covers (a partial percent-encoding as `encodeURIComponent` and Go's `url.PathEscape` make, a
/// double encoding, `%70` for `p`, another letter case, a zero-width space inside, an HTML
/// character reference, Basic credentials in unpadded base64, standard and URL-safe). Each call
/// gets one disguise; none reaches the client, whose answer keeps the node's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_secrets_in_disguise_reach_no_client() {
    use base64::Engine as _;
    let credentials = format!("{USER}:{PASSWORD}");
    let disguises: Vec<String> = vec![
        // encodeURIComponent: `@` and `/` escaped, `:` too, letters kept.
        PASSWORD.replace('@', "%40").replace('/', "%2F"),
        // url.PathEscape: only `/` escaped.
        PASSWORD.replace('/', "%2F"),
        // Encoded twice.
        PASSWORD
            .replace('@', "%2540")
            .replace(':', "%253A")
            .replace('/', "%252F"),
        // A letter percent-encoded.
        format!("%70{}", &KEY[1..]),
        KEY.to_lowercase(),
        format!("{}\u{200b}{}", &KEY[..6], &KEY[6..]),
        PASSWORD.replace('/', "&#x2F;"),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(&credentials),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&credentials),
    ];
    let forms = Arc::new(disguises.clone());
    // The calls in the order they come (the id a node sees is snowgate's own).
    let next = Arc::new(AtomicU64::new(0));
    let echo: Script = Arc::new(move |_seen, v| {
        let n = if v["method"] == "platform.getTx" {
            next.fetch_add(1, Ordering::SeqCst) as usize % forms.len()
        } else {
            0
        };
        let message = serde_json::to_string(&format!("denied for {}", forms[n])).unwrap();
        let text = format!(
            r#"{{"jsonrpc":"2.0","error":{{"code":-32000,"message":{message},"data":null}},"id":{}}}"#,
            v["id"]
        );
        (200, text)
    });
    let node = Node::start(100, 12345, None, echo).await;
    let provider = UpstreamConfig {
        name: "provider".into(),
        url: provider_url(&node),
        ..Default::default()
    };
    let gw = snowgate::Gateway::start(config(vec![provider]))
        .await
        .unwrap();
    for (n, disguise) in disguises.iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"platform.getTx","params":{{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}}}}"#
        );
        let r = post(&format!("{}/ext/bc/P", gw.url()), &body).await;
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["error"]["code"], -32000, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains(disguise.as_str()) && message.contains("[redacted]"),
            "disguise {n} ({disguise}) reached the client: {message}"
        );
    }
    assert_eq!(node.seen().len(), disguises.len());
    gw.shutdown().await;
}

/// The final attack's F5: a node that answers 413 to every call, however small, is broken, not
/// refusing the caller's body (no proxy limits a body of a few hundred bytes). Before, being
/// fast, it drew most calls and each of its 413s went to the client as the client's error; now
/// each such call is tried on the honest node, and the broken one is taken out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_413_to_small_bodies_is_taken_out_and_no_call_fails() {
    let honest = Node::start(100, 12345, None, answers_tx()).await;
    let refuses_all: Script = Arc::new(|_, _| (413, NGINX_413.to_string()));
    let broken = Node::start(100, 12345, None, refuses_all).await;
    let gw = snowgate::Gateway::start(config(vec![
        honest.upstream("honest"),
        broken.upstream("broken"),
    ]))
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || gw.pool().status().healthy).await,
        "the pool never became ready"
    );
    // Calls until the broken node is out (the balancer may steer away from it for a while after
    // a failure, so how many calls that takes is not fixed): every one of them succeeds.
    let url = format!("{}/ext/bc/P", gw.url());
    let mut ejected = false;
    for i in 0..2_000 {
        let r = post(
            &url,
            &call(
                "platform.getTx",
                r#"{"txID":"2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD","encoding":"hex"}"#,
            ),
        )
        .await;
        assert!(
            r.body.contains(r#""result""#),
            "call {i} failed: {} {}",
            r.status,
            r.body
        );
        if i % 10 == 9 && ejections(&get_metrics(&gw.url()).await) >= 1.0 {
            ejected = true;
            break;
        }
    }
    assert!(
        ejected,
        "the node answering 413 to everything was never taken out ({} calls reached it)",
        broken.seen().len()
    );
    gw.shutdown().await;
}
