//! Hostile request bodies through HTTP: what an anonymous client can make the gateway do with one
//! body of at most `limits.body_bytes` (1 MiB by default).
//!
//! * A body of ~60,000 distinct keys (at the top level or inside `params`) costs time linear in its
//!   size: two of them at once no longer hold both runtime threads while other clients wait.
//! * The request a node receives is never much larger than the body the client sent (the
//!   re-encoding for the node does not turn each `<` into the six bytes of `\u003c`); invalid
//!   UTF-8, the one thing that does grow (one byte becomes the three of U+FFFD), is counted
//!   before the body is built, and read as Go reads it (one U+FFFD per byte).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use support::{call, post, Cluster};

/// A generous bound for one answer in a debug build; the quadratic checks took minutes.
const BOUND: Duration = Duration::from_secs(10);

/// `"key00000":"abc"` members, comma-separated: 17 bytes each.
fn many_keys(n: usize) -> String {
    let mut out = String::with_capacity(n * 17);
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("\"key{i:05}\":\"abc\""));
    }
    out
}

/// Two ~1 MiB bodies of 60,000 distinct keys each, sent at once (one with the keys at the top
/// level and an unknown method, one with the keys in the params of a cacheable method), while a
/// third client asks for the height again and again: every answer comes back within [`BOUND`],
/// and the refused body gets the unknown-method error.
///
/// The gateway and its devnodes run on their own two-thread runtime (the shape of the issue's
/// report); the clients on another, so that a stalled gateway shows up as a late answer instead of
/// stalling the test's own clock.
#[test]
fn bodies_of_many_keys_do_not_stall_other_clients() {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = server.block_on(Cluster::start(2, Duration::from_secs(60), |_| {}));
    let base = cluster.url();
    let top = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"platform.noSuchMethod",{}}}"#,
        many_keys(60_000)
    );
    let in_params = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"platform.getBlockByHeight","params":{{"height":"1","encoding":"hex",{}}}}}"#,
        many_keys(60_000)
    );
    for body in [&top, &in_params] {
        assert!(body.len() > 1_000_000 && body.len() <= 1024 * 1024);
    }

    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = clients.block_on(async {
        let url = format!("{base}/ext/bc/P");
        let timed = |body: String| {
            let url = url.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let reply = tokio::time::timeout(BOUND, post(&url, &body)).await;
                (reply.ok(), started.elapsed())
            })
        };
        let hostile = [timed(top), timed(in_params)];
        // The third client: getHeight until both hostile answers are in (at least three calls,
        // at most 200, each within the bound).
        let mut heights = Vec::new();
        for _ in 0..200 {
            let done = hostile.iter().all(|h| h.is_finished());
            if done && heights.len() >= 3 {
                break;
            }
            let started = Instant::now();
            let reply =
                tokio::time::timeout(BOUND, post(&url, &call("platform.getHeight", "{}"))).await;
            let late = reply.is_err();
            heights.push((reply.ok().map(|r| r.json()), started.elapsed()));
            if late {
                break;
            }
        }
        let mut answers = Vec::new();
        for h in hostile {
            answers.push(h.await.unwrap());
        }
        (answers, heights)
    });
    let (answers, heights) = outcome;
    let stalled =
        answers.iter().any(|(r, _)| r.is_none()) || heights.iter().any(|(r, _)| r.is_none());
    if stalled {
        // Leave the spinning gateway behind rather than wait for it.
        server.shutdown_background();
        panic!(
            "an answer took longer than {BOUND:?}: hostile {:?}, getHeight {:?}",
            answers.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            heights.iter().map(|(_, t)| t).collect::<Vec<_>>()
        );
    }
    for (reply, _) in &heights {
        let v = reply.as_ref().unwrap();
        assert!(v["result"]["height"].is_string(), "{v}");
    }
    let refused = answers[0].0.as_ref().unwrap();
    assert_eq!(refused.status, 200);
    let v = refused.json();
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("platform.noSuchMethod"),
        "{v}"
    );
    let served = answers[1].0.as_ref().unwrap();
    assert_eq!(served.status, 200);
    let v = served.json();
    assert_eq!(v["id"], 2, "{v}");
    assert!(v["result"]["block"].is_string(), "{v}");
    // Every task of the gateway and the devnodes ends with their runtime.
    server.block_on(async move { drop(cluster) });
    server.shutdown_timeout(BOUND);
}

/// A node on 127.0.0.1:0 that records the size of every request other than a health check, and
/// answers health checks as a bootstrapped node at height 10 and everything else with a result.
async fn recording_node() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
) {
    use http_body_util::{BodyExt, Full};
    let sizes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = sizes.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let recorded = recorded.clone();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let recorded = recorded.clone();
                    async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let result = match v["method"].as_str().unwrap_or_default() {
                            "info.isBootstrapped" => r#"{"isBootstrapped":true}"#,
                            "platform.getHeight" => r#"{"height":"10"}"#,
                            _ => {
                                recorded.lock().unwrap().push(body.len());
                                r#"{"tx":"0x00","encoding":"hex"}"#
                            }
                        };
                        let text =
                            format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#, v["id"]);
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            bytes::Bytes::from(text),
                        )))
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
            );
        }
    });
    (addr, sizes)
}

/// A gateway (no cache, no rate limit) in front of one [`recording_node`]; with the sizes that
/// node records and the gateway's `limits.body_bytes`.
async fn recording_gateway() -> (
    snowgate::Gateway,
    std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    usize,
) {
    let (addr, sizes) = recording_node().await;
    let mut config = snowgate::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.rate_limit.enabled = false;
    config.cache.enabled = false;
    config.upstreams = vec![snowgate::config::UpstreamConfig {
        name: "recorder".into(),
        url: format!("http://{addr}"),
        ..Default::default()
    }];
    let limit = config.limits.body_bytes;
    let gw = snowgate::Gateway::start(config).await.unwrap();
    // The pool asked the node who it is when it joined: only the test's calls are measured.
    sizes.lock().unwrap().clear();
    (gw, sizes, limit)
}

/// A ~1 MiB body whose one string param is made of characters Go's encoder escapes (`<`, `>`,
/// `&`: six bytes each; U+2028 and U+2029: six bytes for three) reaches the node at most
/// `limits.body_bytes` long, where the HTML-safe re-encoding made 6 MiB of it. (The body leaves
/// room for snowgate's own request id, up to 20 digits for the client's `1`; a body without that
/// room is refused: `tests/attack_pool_round2.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_never_receives_more_than_the_body_limit() {
    let (gw, sizes, limit) = recording_gateway().await;
    let url = format!("{}/ext/bc/P", gw.url());
    for unit in ["<>&", "\u{2028}\u{2029}"] {
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"encoding":"hex","txID":""#;
        let tail = r#""}}"#;
        let fill = unit.repeat((limit - 32 - head.len() - tail.len()) / unit.len());
        let body = format!("{head}{fill}{tail}");
        assert!(body.len() > limit - 48 && body.len() <= limit - 32);
        let r = post(&url, &body).await;
        assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(300)]);
        assert_eq!(r.json()["result"]["tx"], "0x00");
    }
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    for size in sizes {
        assert!(size <= limit, "a node received {size} bytes");
    }
    gw.shutdown().await;
}

/// Invalid UTF-8 is the one thing the re-encoding cannot keep short (each stray byte becomes the
/// three bytes of U+FFFD, as a node decodes it): `upstream_len` counts it exactly and
/// `upstream_body_within` refuses it before building the body.
#[test]
fn invalid_utf8_inflation_is_counted_before_the_body_is_built() {
    let registry = snowgate::methods::Registry::builtin();
    let head = br#"{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"txID":""#;
    let mut body = head.to_vec();
    body.extend_from_slice(&[0xFF; 100_000]);
    body.extend_from_slice(br#"","encoding":"hex"}}"#);
    let decoded = snowgate::jsonrpc::decode(&body);
    assert_eq!(decoded.parse_error, None);
    let call = snowgate::call::RpcCall {
        spec: registry.get("platform.getTx").cloned().unwrap(),
        params: decoded.envelope.params,
        id: Some(bytes::Bytes::from_static(b"1")),
        caller: snowgate::call::Caller {
            admin: false,
            pin: None,
            ip: [127, 0, 0, 1].into(),
            client: snowgate::call::ClientId::Ip([127, 0, 0, 1].into()),
            request_id: None,
            trace: Default::default(),
        },
        lookup: None,
    };
    let full = call.upstream_body(u64::MAX);
    assert_eq!(call.upstream_len(u64::MAX), full.len());
    assert!(full.len() > 3 * 100_000, "{}", full.len());
    assert_eq!(call.upstream_body_within(u64::MAX, body.len() + 1024), None);
    assert_eq!(call.upstream_body_within(u64::MAX, full.len()), Some(full));
    assert_eq!(
        call.upstream_body_within(7, usize::MAX).unwrap().len(),
        call.upstream_len(7)
    );
}

/// POSTs raw body bytes (not necessarily UTF-8) to the gateway's P-chain path; the JSON answer.
async fn post_bytes(gateway: &str, body: Vec<u8>) -> serde_json::Value {
    let r = support::client()
        .post(format!("{gateway}/ext/bc/P"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

/// A cut-short UTF-8 sequence reads as one U+FFFD per byte, as Go's decoder reads it (not one for
/// the whole sequence): the envelope the gateway echoes in a -32600 error is the node's.
#[tokio::test]
async fn invalid_utf8_reads_as_go_reads_it() {
    let c = Cluster::start(1, Duration::from_secs(60), |_| {}).await;
    let body = b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"a\xE2\x80b\"}".to_vec();
    let v = post_bytes(&c.url(), body).await;
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["error"]["data"]["method"], "a\u{FFFD}\u{FFFD}b", "{v}");
    c.gateway.shutdown().await;
}

/// Invalid UTF-8 cannot be re-encoded short (each stray byte is three bytes of U+FFFD for a
/// node, as for Go): such a call is refused when its re-encoding would pass the body limit, and
/// the node never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_that_would_outgrow_the_limit_is_refused() {
    let (gw, sizes, limit) = recording_gateway().await;
    let head =
        br#"{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"encoding":"hex","txID":""#;
    let mut body = head.to_vec();
    body.resize(limit - 4, 0xFF);
    body.extend_from_slice(br#""}}"#);
    let v = post_bytes(&gw.url(), body).await;
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let sizes = sizes.lock().unwrap().clone();
    assert!(
        sizes.iter().all(|&s| s <= limit),
        "a node received {sizes:?} bytes"
    );
    gw.shutdown().await;
}
