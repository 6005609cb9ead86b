//! Protecting the endpoint: rate limits (per IP and per key, trusted and untrusted forwarded
//! headers, cheaper hits, bounded memory), hard limits, the per-upstream concurrency cap, batches,
//! CORS, gzip and request ids.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SLOW_CHAIN: Duration = Duration::from_secs(60);

fn limited(cfg: &mut snowgate::Config, rps: u32, burst: u32) {
    cfg.rate_limit.enabled = true;
    cfg.rate_limit.requests_per_second = rps;
    cfg.rate_limit.burst = burst;
}

#[tokio::test]
async fn a_client_over_quota_gets_429_while_another_is_served() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 10);
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let url = format!("{}/ext/info", c.url());
    let a = [("x-forwarded-for", "198.51.100.1")];
    let b = [("x-forwarded-for", "198.51.100.2")];
    // getNetworkID costs 1: ten calls fit the burst (the first is a miss, the rest are cheaper hits).
    let mut statuses = Vec::new();
    for i in 0..40 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"info.getNetworkID"}}"#);
        statuses.push(post_with(&url, &body, &a).await);
    }
    let refused: Vec<&Reply> = statuses.iter().filter(|r| r.status == 429).collect();
    assert!(!refused.is_empty(), "client A was never limited");
    assert!(statuses[0].status == 200);
    let r = refused[0];
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&secs), "{secs}");
    let v = r.json();
    assert_eq!(v["error"]["code"], -32005);
    assert!(v["id"].is_number(), "{v}");
    // Client B has its own quota.
    let r = post_with(&url, &call("info.getNetworkID", "{}"), &b).await;
    assert_eq!(r.status, 200, "{}", r.body);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn forwarded_headers_from_untrusted_peers_are_ignored() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| limited(cfg, 1, 10)).await;
    let url = format!("{}/ext/bc/P", c.url());
    let mut limited_seen = false;
    for i in 0..30 {
        // A different claimed address every time: without trust, all are the socket's peer.
        let xff = format!("203.0.113.{i}");
        let fwd = format!("for=192.0.2.{i}");
        let r = post_with(
            &url,
            &call("platform.sampleValidators", r#"{"size":1}"#),
            &[("x-forwarded-for", &xff), ("forwarded", &fwd)],
        )
        .await;
        if r.status == 429 {
            limited_seen = true;
            break;
        }
    }
    assert!(limited_seen, "spoofed X-Forwarded-For escaped the limit");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn keys_have_their_own_quota_and_admins_are_not_limited() {
    let key = "explorer-team-key-0123456789";
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 10);
        cfg.rate_limit.keys = vec![snowgate::ratelimit::KeyQuota::new(key, 1000, 1000)];
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let body = call("platform.sampleValidators", r#"{"size":1}"#);
    for header in ["authorization", "x-api-key", "rltoken"] {
        let value = if header == "authorization" {
            format!("Bearer {key}")
        } else {
            key.to_string()
        };
        for _ in 0..30 {
            let r = post_with(&url, &body, &[(header, &value)]).await;
            assert_eq!(r.status, 200, "{header}: {}", r.body);
        }
    }
    let auth = format!("Bearer {ADMIN_KEY}");
    for _ in 0..30 {
        let r = post_with(&url, &body, &[("authorization", &auth)]).await;
        assert_eq!(r.status, 200, "admin: {}", r.body);
    }
    // Without the key, the IP quota applies.
    let mut over = false;
    for _ in 0..30 {
        if post(&url, &body).await.status == 429 {
            over = true;
            break;
        }
    }
    assert!(over);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn expensive_methods_cost_more_and_hits_can_be_free() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 20);
        cfg.rate_limit.cached_cost_factor = 0.0;
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    // getUTXOs costs 10: the first is a miss (10), then hits are free.
    let addr = {
        let r = post(&url, &call("platform.getCurrentValidators", "{}")).await;
        r.json()["result"]["validators"][0]["validationRewardOwner"]["addresses"][0].clone()
    };
    let body = call(
        "platform.getUTXOs",
        &format!(r#"{{"addresses":[{addr}],"limit":5}}"#),
    );
    for i in 0..50 {
        let r = post(&url, &body).await;
        assert_eq!(r.status, 200, "call {i}: {}", r.body);
    }
    // A different, uncached getUTXOs costs 10 more: 10 (validators) + 10 + 10 > 20.
    let other = call(
        "platform.getUTXOs",
        &format!(r#"{{"addresses":[{addr}],"limit":6}}"#),
    );
    let r = post(&url, &other).await;
    assert_eq!(r.status, 429, "{}", r.body);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_client_addresses_keeps_the_limiter_bounded() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 10);
        cfg.rate_limit.max_clients = 50;
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let url = format!("{}/ext/info", c.url());
    let client = client();
    for i in 0..600u32 {
        let xff = format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256);
        let _ = client
            .post(&url)
            .header("content-type", "application/json")
            .header("x-forwarded-for", xff)
            .body(call("info.getNetworkID", "{}"))
            .send()
            .await
            .unwrap();
    }
    let tracked = c.gateway.limiter().unwrap().tracked();
    assert!(tracked <= 50, "{tracked} clients tracked");
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn hard_limits_answer_with_clear_errors() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.limits.body_bytes = 4096;
        cfg.limits.batch_len = 3;
        cfg.limits.depth = 8;
        cfg.limits.response_bytes = 2000;
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":{{"x":"{}"}}}}"#,
        "a".repeat(5000)
    );
    let r = post(&url, &big).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], -32600);
    assert!(r.body.contains("4096"), "{}", r.body);

    let batch = format!("[{}]", vec![call("platform.getHeight", "{}"); 4].join(","));
    let r = post(&url, &batch).await;
    assert_eq!(r.status, 413);
    assert!(r.body.contains("exceeds the limit of 3"), "{}", r.body);

    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","params":{{"a":{}1{}}}}}"#,
        "[".repeat(20),
        "]".repeat(20)
    );
    let r = post(&url, &deep).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32600);
    assert!(r.body.contains("deeper than 8"), "{}", r.body);

    // A json block is larger than 2000 bytes: the node's answer is refused.
    let r = post(
        &url,
        &call(
            "platform.getBlockByHeight",
            r#"{"height":5,"encoding":"json"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("larger than 2000"), "{}", r.body);
    c.gateway.shutdown().await;
}

/// Writes `bytes` one every 20 ms, for at most `limit`, then waits up to `limit` for the gateway
/// to close the connection; whether it was cut off.
async fn trickled_until_cut(
    stream: &mut tokio::net::TcpStream,
    bytes: &[u8],
    limit: Duration,
) -> bool {
    let started = std::time::Instant::now();
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        if started.elapsed() > limit {
            break;
        }
    }
    read_until_closed(stream, limit).await.is_some()
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.limits.header_timeout = Duration::from_millis(400);
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let head = b"POST /ext/bc/P HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let cut = trickled_until_cut(&mut s, head, Duration::from_secs(3)).await;
    assert!(cut, "the slow client was never cut off");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Other clients are served meanwhile and after.
    let r = post(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 200);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn a_keep_alive_connection_gets_header_timeout_for_its_next_request() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.limits.header_timeout = Duration::from_millis(400);
    })
    .await;
    let request = "POST /ext/bc/P HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 54\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"platform.getHeight\"}";
    async fn answered(s: &mut tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
    }
    // A request every 250 ms keeps the connection open well past the 400 ms header timeout.
    let mut s = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..4 {
        s.write_all(request.as_bytes()).await.unwrap();
        assert!(answered(&mut s).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(started.elapsed() > Duration::from_millis(800));
    // The next request's head trickles in: cut off, though one request was served.
    let since = std::time::Instant::now();
    let cut = trickled_until_cut(&mut s, &request.as_bytes()[..60], Duration::from_secs(2)).await;
    assert!(cut, "the trickled second request was never cut off");
    assert!(since.elapsed() < Duration::from_secs(2));
    // A kept-alive connection that sends nothing more is closed after the header timeout too.
    let mut quiet = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    quiet.write_all(request.as_bytes()).await.unwrap();
    assert!(answered(&mut quiet).await);
    let since = std::time::Instant::now();
    assert!(read_until_closed(&mut quiet, Duration::from_secs(3))
        .await
        .is_some());
    let waited = since.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn idle_connections_are_closed_and_connections_are_capped() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.limits.idle_timeout = Duration::from_millis(300);
        cfg.limits.max_connections = 2;
    })
    .await;
    let request = "POST /ext/bc/P HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 54\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"platform.getHeight\"}";
    assert_eq!(request.split("\r\n\r\n").nth(1).unwrap().len(), 54);
    let mut first = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    first.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 4096];
    let n = first.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let mut second = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A third connection is over the cap: 503 at once, then closed.
    let mut third = tokio::net::TcpStream::connect(c.gateway.addr())
        .await
        .unwrap();
    let answer = read_until_closed(&mut third, Duration::from_secs(2))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("-32603"), "{text}");
    // The idle ones are closed by the gateway.
    assert!(
        read_until_closed(&mut first, Duration::from_secs(3))
            .await
            .is_some(),
        "idle keep-alive connection not closed"
    );
    assert!(
        read_until_closed(&mut second, Duration::from_secs(3))
            .await
            .is_some(),
        "idle new connection not closed"
    );
    // With room again, new connections are served.
    let r = post(
        &format!("{}/ext/bc/P", c.url()),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 200);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn one_slow_node_cannot_absorb_every_request() {
    let c = Cluster::start(2, SLOW_CHAIN, |cfg| {
        cfg.cache.enabled = false;
        cfg.upstream.max_concurrency = 2;
        cfg.health.interval = Duration::from_secs(60);
    })
    .await;
    c.nodes[0]
        .control()
        .update_faults(|f| f.latency = Duration::from_millis(1500));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let url = format!("{}/ext/info", c.url());
        tasks.push(tokio::spawn(async move {
            post(&url, &call("info.getNetworkID", "{}")).await
        }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{} {:?}", r.body, c.gateway.pool().status());
    }
    assert!(c.nodes[0].control().call_count("info.getNetworkID") <= 2);
    c.gateway.shutdown().await;

    // One node, one slot, a request waiting beyond the deadline: 503.
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.cache.enabled = false;
        cfg.upstream.max_concurrency = 1;
        cfg.upstream.request_timeout = Duration::from_millis(800);
        cfg.limits.request_deadline = Duration::from_millis(800);
        cfg.health.interval = Duration::from_secs(60);
    })
    .await;
    c.nodes[0]
        .control()
        .update_faults(|f| f.latency = Duration::from_millis(600));
    let url = format!("{}/ext/info", c.url());
    let first = tokio::spawn({
        let url = url.clone();
        async move { post(&url, &call("info.getNetworkID", "{}")).await.status }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let body = r#"{"jsonrpc":"2.0","id":"w","method":"info.getNetworkID"}"#;
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { post(&url, body).await }
    });
    assert_eq!(first.await.unwrap(), 200);
    let r = waiting.await.unwrap();
    assert!(
        r.status == 503 || r.status == 504,
        "{} {}",
        r.status,
        r.body
    );
    assert_eq!(r.json()["error"]["code"], -32603);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn batches_mix_hits_misses_refusals_and_notifications() {
    let c = Cluster::start(1, SLOW_CHAIN, |_| {}).await;
    let url = format!("{}/ext/bc/P", c.url());
    post(&url, &call("platform.getBlockByHeight", r#"{"height":3}"#)).await; // warm: a hit below
    let batch = r#"[
        {"jsonrpc":"2.0","id":"hit","method":"platform.getBlockByHeight","params":{"height":3}},
        {"jsonrpc":"2.0","id":2,"method":"platform.getHeight"},
        {"jsonrpc":"2.0","method":"platform.getHeight"},
        {"jsonrpc":"2.0","id":{"n":4},"method":"platform.exportKey","params":{"username":"u","password":"p"}},
        {"jsonrpc":"2.0","id":5,"method":"platform.nope"},
        {"jsonrpc":"2.0","id":6,"method":"platform.getTx","params":{"txID":"2mcwQKiD8VEspmMJpL1dc7okQQ5dDVAWeCBZ7FWBFAbxpv3t7w"}},
        7,
        {"jsonrpc":"1.0","id":8,"method":"platform.getHeight"},
        {"jsonrpc":"2.0","id":9223372036854775807,"method":"platform.getHeight"}
    ]"#;
    let r = post(&url, batch).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.ends_with("]\n"));
    let v: Vec<Value> = serde_json::from_str(&r.body).unwrap();
    let ids: Vec<String> = v.iter().map(|e| e["id"].to_string()).collect();
    assert_eq!(
        ids,
        vec![
            "\"hit\"",
            "2",
            "{\"n\":4}",
            "5",
            "6",
            "null",
            "8",
            "9223372036854775807"
        ]
    );
    assert!(
        r.body.contains("\"id\":9223372036854775807}"),
        "big ids keep their digits"
    );
    assert!(v[0]["result"]["block"].is_string());
    assert!(v[1]["result"]["height"].is_string());
    assert_eq!(v[2]["error"]["code"], -32601);
    assert_eq!(v[3]["error"]["code"], -32601);
    assert!(v[4]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not found"));
    assert_eq!(v[5]["error"]["code"], -32600);
    assert_eq!(v[6]["error"]["code"], -32600);
    assert!(v[7]["result"].is_object());
    assert_eq!(c.nodes[0].control().call_count("platform.exportKey"), 0);
    // The notification still reached the node (2 getHeight calls + health checks).
    assert!(
        c.nodes[0].control().call_count("platform.getBlockByHeight") == 1,
        "the batch's first call was a hit"
    );

    let r = post(&url, "[]").await;
    assert_eq!(r.json()["error"]["code"], -32600);
    assert_eq!(r.json()["id"], Value::Null);
    let r = post(&url, r#"[{"jsonrpc":"2.0","method":"platform.getHeight"},{"jsonrpc":"2.0","method":"platform.getHeight"}]"#).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn batch_calls_are_charged_one_by_one() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| limited(cfg, 1, 20)).await;
    let url = format!("{}/ext/bc/P", c.url());
    let calls: Vec<String> = (0..12).map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"platform.sampleValidators","params":{{"size":1}}}}"#)).collect();
    let r = post(&url, &format!("[{}]", calls.join(","))).await;
    let v: Vec<Value> = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v.len(), 12);
    let limited = v.iter().filter(|e| e["error"]["code"] == -32005).count();
    let served = v.iter().filter(|e| e["result"].is_object()).count();
    // sampleValidators costs 2 units of a burst of 20: ten calls fit.
    assert_eq!((served, limited), (10, 2), "{}", r.body);
    assert!(r.header("retry-after").is_some());
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn cors_gzip_and_request_ids() {
    let c = Cluster::start(1, SLOW_CHAIN, |_| {}).await;
    let url = format!("{}/ext/bc/P", c.url());
    let r = post_with(
        &url,
        &call("platform.getHeight", "{}"),
        &[("origin", "https://wallet.example")],
    )
    .await;
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let made = r.header("x-request-id").map(str::to_string);
    assert!(made.is_some());
    // A client's own request id is kept and echoed; a new request gets a new id.
    let r = post_with(
        &url,
        &call("platform.getHeight", "{}"),
        &[("x-request-id", "client-7")],
    )
    .await;
    assert_eq!(r.header("x-request-id"), Some("client-7"));
    let r = post(&url, &call("platform.getHeight", "{}")).await;
    assert!(r.header("x-request-id").is_some());
    assert_ne!(r.header("x-request-id").map(str::to_string), made);
    let pre = client()
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://wallet.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status().as_u16(), 200);
    assert_eq!(pre.headers()["access-control-allow-origin"], "*");
    let plain = client()
        .request(reqwest::Method::OPTIONS, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 405);
    assert_eq!(
        plain.text().await.unwrap(),
        "rpc: POST method required, received OPTIONS"
    );

    let big = call(
        "platform.getBlockByHeight",
        r#"{"height":7,"encoding":"json"}"#,
    );
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept-encoding", "gzip")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let zipped = r.bytes().await.unwrap();
    assert_eq!(&zipped[..2], &[0x1f, 0x8b]);
    let plain = post(&url, &big).await;
    assert_eq!(plain.header("content-encoding"), None);
    let identity = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept-encoding", "identity")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert!(identity.headers().get("content-encoding").is_none());
    assert_eq!(identity.bytes().await.unwrap(), plain.body.as_bytes());
    assert!(
        zipped.len() < plain.body.len(),
        "{} >= {}",
        zipped.len(),
        plain.body.len()
    );
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn refused_unknown_and_unparsable_calls_cost_quota_too() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        limited(cfg, 1, 10);
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let url = format!("{}/ext/bc/P", c.url());
    let bodies = [
        r#"{"jsonrpc":"2.0","id":1,"method":"platform.noSuchMethod"}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"info.getNodeID"}"#.to_string(),
        format!("[{}]", vec!["1"; 101].join(",")),
    ];
    for (i, body) in bodies.iter().enumerate() {
        // A client of its own for each kind: the first refusals are answered as refusals...
        let client_ip = format!("198.51.100.{i}");
        let from = [("x-forwarded-for", client_ip.as_str())];
        // Until the first refusal for quota: the real call below comes while the client is still
        // over its quota (each refusal before the body is held for half the client's wait, so a
        // client that keeps calling reaches the end of its wait sooner or later).
        let mut statuses = Vec::new();
        for _ in 0..30 {
            let r = post_with(&url, body, &from).await;
            let refused = r.status == 429;
            statuses.push(r);
            if refused {
                break;
            }
        }
        assert_ne!(statuses[0].status, 429, "{body}");
        // ...then the client is over its quota, as if it had made real calls.
        let over = statuses
            .iter()
            .find(|r| r.status == 429)
            .unwrap_or_else(|| panic!("refused calls were free: {body}"));
        assert!(over.header("retry-after").is_some());
        assert_eq!(over.json()["error"]["code"], -32005);
        // Its real calls are limited too.
        let r = post_with(&url, &call("platform.getHeight", "{}"), &from).await;
        assert_eq!(r.status, 429, "{}", r.body);
    }
}

/// The ids snowgate makes are UUIDv7s, unique across instances (and restarts): two gateways'
/// first requests get different ids (a per-process counter gave both `0`).
#[tokio::test]
async fn request_ids_are_unique_across_instances() {
    let a = Cluster::start(1, SLOW_CHAIN, |_| {}).await;
    let b = Cluster::start(1, SLOW_CHAIN, |_| {}).await;
    let mut ids = Vec::new();
    for c in [&a, &b] {
        let r = post(
            &format!("{}/ext/bc/P", c.url()),
            &call("platform.getHeight", "{}"),
        )
        .await;
        let id = r.header("x-request-id").unwrap().to_string();
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(&id[14..15], "7", "not a UUIDv7: {id}");
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
    a.gateway.shutdown().await;
    b.gateway.shutdown().await;
}
