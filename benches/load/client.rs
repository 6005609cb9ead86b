//! The harness's own HTTP client (hyper-util's pooled client): it discovers block and transaction
//! IDs on the devnode, warms the caches with every key once, fills snowgate with many keys, and
//! reads snowgate's metrics and the devnode's call counts. None of it is timed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub type Http = Client<HttpConnector, Full<Bytes>>;

/// One answer: status, the value of one header the caller asked about, and the body.
pub struct Reply {
    pub status: u16,
    pub header: Option<String>,
    pub body: Bytes,
}

pub fn http() -> Http {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(128)
        .build_http()
}

/// `POST url` with a JSON body; `want` names a header to return.
pub async fn post(c: &Http, url: &str, body: String, want: &str) -> Result<Reply, String> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    send(c, req, want).await
}

/// The admin key every benchmark instance is given: `/metrics` on the public port needs it.
pub const ADMIN_KEY: &str = "bench-admin-key-0123456789";

/// `GET url`, with the benchmark's admin key (harmless where none is needed).
pub async fn get(c: &Http, url: &str) -> Result<Reply, String> {
    let req = Request::builder()
        .uri(url)
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    send(c, req, "").await
}

async fn send(c: &Http, req: Request<Full<Bytes>>, want: &str) -> Result<Reply, String> {
    let uri = req.uri().to_string();
    let resp = c.request(req).await.map_err(|e| format!("{uri}: {e}"))?;
    let status = resp.status().as_u16();
    let header = (!want.is_empty())
        .then(|| resp.headers().get(want))
        .flatten()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{uri}: {e}"))?
        .to_bytes();
    Ok(Reply {
        status,
        header,
        body,
    })
}

/// Sends `count` requests, `body(i)` for i in 0..count, with `concurrency` in flight; each answer
/// is handed to `check(i, reply)`. Stops at the first error.
pub async fn each<B, C>(
    c: &Http,
    url: &str,
    count: usize,
    concurrency: usize,
    want: &'static str,
    body: B,
    check: C,
) -> Result<(), String>
where
    B: Fn(usize) -> String + Send + Sync + 'static,
    C: Fn(usize, &Reply) -> Result<(), String> + Send + Sync + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let body = Arc::new(body);
    let check = Arc::new(check);
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (c, url, next, body, check) = (
            c.clone(),
            url.to_string(),
            next.clone(),
            body.clone(),
            check.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), String>(());
                }
                let reply = post(&c, &url, body(i), want).await?;
                check(i, &reply)?;
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A JSON-RPC request body (id 1 everywhere: nginx's cache would otherwise answer one client's id
/// to another, and every contestant must see the same bytes).
pub fn rpc_body(method: &str, params: &serde_json::Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

/// Block IDs and transaction IDs of every accepted block up to the devnode's current height.
pub async fn discover(c: &Http, node: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let url = format!("{node}/ext/bc/P");
    let reply = post(
        c,
        &url,
        rpc_body("platform.getHeight", &serde_json::json!({})),
        "",
    )
    .await?;
    let v: serde_json::Value = serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
    let height: u64 = v["result"]["height"]
        .as_str()
        .and_then(|h| h.parse().ok())
        .ok_or("getHeight: no height")?;
    let blocks = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let txs = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (b2, t2) = (blocks.clone(), txs.clone());
    each(
        c,
        &url,
        usize::try_from(height).unwrap_or(0) + 1,
        16,
        "",
        |i| {
            rpc_body(
                "platform.getBlockByHeight",
                &serde_json::json!({"height": i.to_string(), "encoding": "json"}),
            )
        },
        move |_, reply| {
            let v: serde_json::Value =
                serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
            let block = &v["result"]["block"];
            if let Some(id) = block["id"].as_str() {
                b2.lock().push(id.to_string());
            }
            let mut t = t2.lock();
            for tx in block["txs"].as_array().into_iter().flatten() {
                if let Some(id) = tx["id"].as_str() {
                    t.push(id.to_string());
                }
            }
            if let Some(id) = block["tx"]["id"].as_str() {
                t.push(id.to_string());
            }
            Ok(())
        },
    )
    .await?;
    let mut blocks = std::mem::take(&mut *blocks.lock());
    let mut txs = std::mem::take(&mut *txs.lock());
    blocks.sort();
    txs.sort();
    Ok((blocks, txs))
}

/// The value of a Prometheus sample whose line starts with `prefix` (labels included), summed.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
