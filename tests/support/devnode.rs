//! Helpers shared by the devnode tests: nodes on 127.0.0.1:0 and a raw HTTP/1.1 client for the
//! requests reqwest would normalise (unclean paths, odd Host headers, missing Content-Type).
#![allow(clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use snowgate::devnode::{DevNode, DevNodeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every wait in these tests is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(10);

/// A node whose chain does not move during a test (height 1000 of the skeleton chain).
pub async fn still_node() -> DevNode {
    DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A reqwest client that never reuses connections (nodes go down and drop them in these tests).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(LIMIT)
        .build()
        .unwrap()
}

/// A JSON-RPC request body.
pub fn call(method: &str, id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{}},"id":{id}}}"#)
}

/// POSTs `body` as application/json to `url`.
pub async fn post(url: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    client()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// `platform.getHeight` to a node's `/ext/bc/P`; the error when no answer came.
pub async fn try_get_height(node_url: String) -> reqwest::Result<reqwest::Response> {
    client()
        .post(format!("{node_url}/ext/bc/P"))
        .header("content-type", "application/json")
        .body(call("platform.getHeight", 1))
        .send()
        .await
}

/// The body of `info.isBootstrapped {"chain":"P"}` at `node_url`.
pub async fn is_bootstrapped_answer(node_url: &str) -> String {
    post(
        &format!("{node_url}/ext/info"),
        r#"{"jsonrpc":"2.0","method":"info.isBootstrapped","params":{"chain":"P"},"id":1}"#,
    )
    .await
    .text()
    .await
    .unwrap()
}

/// The P-chain height `url` reports.
pub async fn height(url: &str) -> u64 {
    let r: serde_json::Value = post(&format!("{url}/ext/bc/P"), call("platform.getHeight", 1))
        .await
        .json()
        .await
        .unwrap();
    r["result"]["height"].as_str().unwrap().parse().unwrap()
}

/// An answer read off the wire.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

/// Sends `head` (request line and headers, without the final blank line; `Connection: close` is
/// added) and `body`, and reads the whole answer.
pub async fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{head}\r\nConnection: close\r\n");
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(buf[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    Raw {
        status,
        headers,
        body: buf[split + 4..].to_vec(),
    }
}

/// A raw POST to `path` with these header lines (`\r\n`-separated).
pub async fn raw_post(addr: SocketAddr, path: &str, headers: &str, body: &str) -> Raw {
    raw(
        addr,
        &format!("POST {path} HTTP/1.1\r\n{headers}"),
        body.as_bytes(),
    )
    .await
}

/// A raw JSON-RPC POST to `path` with `Host: 127.0.0.1`.
pub async fn raw_rpc(addr: SocketAddr, path: &str, body: &str) -> Raw {
    raw_post(
        addr,
        path,
        "Host: 127.0.0.1\r\nContent-Type: application/json",
        body,
    )
    .await
}
