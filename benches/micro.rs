//! Criterion micro benchmarks of snowgate's request path, no sockets on the measured path:
//!
//! * `envelope`: a typical `platform.getTx` body decoded with a node's rules, its method looked up
//!   in the registry, and its canonical cache key built (what every request pays before the cache);
//! * `cache_hit`: the whole in-process cache-hit path, the stack of one connection
//!   (`Stack::http`: request id, trace, CORS, drain, compression, router, decode, policy, rate
//!   limit off, cache) from request bytes to response bytes against a warmed cache; hyper and the
//!   server's connection bookkeeping are not included;
//! * `forward_encode`: re-encoding a forwarded call for the node (`RpcCall::upstream_body`).
//!
//! `cargo bench --bench micro`; the load benchmark is `cargo bench --bench load`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};

use snowgate::cache::key::canonical_params;
use snowgate::call::{Caller, RpcCall};
use snowgate::config::{Config, UpstreamConfig};
use snowgate::devnode::{DevNode, DevNodeConfig};
use snowgate::http::compress::Body;
use snowgate::http::ConnInfo;
use snowgate::methods::Registry;
use snowgate::stack::Stack;
use tower::{Service, ServiceExt};

/// A devnode transaction ID, the shape and length of a real one.
const TX_ID: &str = "GQoePZSB9rc6QWdEKbq7NwoSLKg3fiLnjFA7WLSFqph4hebYt";

fn get_tx_body(tx: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"platform.getTx\",\"params\":{{\"txID\":\"{tx}\",\"encoding\":\"hex\"}}}}"
    )
}

fn envelope(c: &mut Criterion) {
    let registry = Registry::builtin();
    let body = get_tx_body(TX_ID);
    let mut g = c.benchmark_group("envelope");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("decode+lookup+key getTx", |b| {
        b.iter(|| {
            let decoded = snowgate::jsonrpc::decode(black_box(body.as_bytes()));
            let spec = registry.get(&decoded.envelope.method).map(Arc::clone);
            let key = canonical_params(decoded.envelope.params.as_ref());
            black_box((spec, key))
        });
    });
    g.bench_function("decode only getTx", |b| {
        b.iter(|| black_box(snowgate::jsonrpc::decode(black_box(body.as_bytes()))));
    });
    g.finish();
}

fn forward_encode(c: &mut Criterion) {
    let registry = Registry::builtin();
    let decoded = snowgate::jsonrpc::decode(
        br#"{"jsonrpc":"2.0","id":7,"method":"platform.getValidatorsAt","params":{"height":"1000","subnetID":"11111111111111111111111111111111LpoYY"}}"#,
    );
    let call = RpcCall {
        spec: registry
            .get("platform.getValidatorsAt")
            .cloned()
            .expect("the registry has getValidatorsAt"),
        params: decoded.envelope.params,
        id: Some(Bytes::from_static(b"7")),
        caller: Caller {
            admin: false,
            pin: None,
            ip: [127, 0, 0, 1].into(),
            client: snowgate::call::ClientId::Ip([127, 0, 0, 1].into()),
            request_id: None,
            trace: Default::default(),
        },
        lookup: None,
    };
    c.bench_function("forward_encode getValidatorsAt", |b| {
        b.iter(|| black_box(call.upstream_body(black_box(42))));
    });
}

/// A stack assembled as `Gateway::start_on` assembles it, over one in-process devnode, without a
/// listener.
async fn front() -> (Arc<Stack>, DevNode) {
    let node = DevNode::spawn(DevNodeConfig::default())
        .await
        .expect("a devnode binds 127.0.0.1:0");
    let config = Config {
        upstreams: vec![UpstreamConfig {
            name: "devnode".into(),
            url: node.url(),
            ..Default::default()
        }],
        ..Config::default()
    };
    // The bench measures the request path, not the limiter.
    let config = Config {
        rate_limit: snowgate::ratelimit::RateLimitConfig {
            enabled: false,
            ..Default::default()
        },
        ..config
    };
    let front = snowgate::gateway::assemble(&config, None)
        .await
        .expect("the bench's config is valid")
        .stack;
    (front, node)
}

fn request(body: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::POST)
        .uri("/ext/bc/P")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .expect("a static request is valid")
}

/// One connection's stack, as the server builds it for each connection.
fn connection(
    stack: &Stack,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = http::Response<Body>,
    Error = std::convert::Infallible,
> + Clone {
    let conn = ConnInfo::new(SocketAddr::from(([127, 0, 0, 1], 40000)), 4 << 20);
    stack.http::<Full<Bytes>>(Arc::new(conn))
}

async fn answer(front: &Arc<Stack>, body: &str) -> (String, Bytes) {
    let resp = connection(front)
        .oneshot(request(body))
        .await
        .unwrap_or_else(|never| match never {});
    let cache = resp
        .headers()
        .get("x-cache")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    (cache, bytes)
}

fn cache_hit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime builds");
    let (front, _node) = rt.block_on(front());
    // A real transaction of the devnode, then its answer cached.
    let tx_id = rt.block_on(async {
        let (_, block) = answer(
            &front,
            r#"{"jsonrpc":"2.0","id":1,"method":"platform.getBlockByHeight","params":{"height":"5","encoding":"json"}}"#,
        )
        .await;
        let v: serde_json::Value = serde_json::from_slice(&block).expect("getBlockByHeight is JSON");
        v["result"]["block"]["txs"][0]["id"]
            .as_str()
            .expect("block 5 has a transaction")
            .to_string()
    });
    let body = get_tx_body(&tx_id);
    let (first, _) = rt.block_on(answer(&front, &body));
    let (second, bytes) = rt.block_on(answer(&front, &body));
    assert_eq!((first.as_str(), second.as_str()), ("MISS", "HIT"));
    let service = connection(&front);
    let mut g = c.benchmark_group("cache_hit");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("stack getTx (hit)", |b| {
        b.iter(|| {
            let resp = rt.block_on(service.clone().oneshot(request(black_box(&body))));
            black_box(resp)
        });
    });
    // What the harness itself costs per iteration (block_on and building the request).
    g.bench_function("harness only (block_on + request)", |b| {
        b.iter(|| black_box(rt.block_on(async { request(black_box(&body)) })));
    });
    g.finish();
}

criterion_group!(benches, envelope, forward_encode, cache_hit);
criterion_main!(benches);
