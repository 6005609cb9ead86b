//! A Redis connection that falls silent (a network partition, a NAT that forgot the flow): the
//! connection stays open and nothing comes back on it, while a new connection would work. redis-rs
//! reconnects on errors, not on silence; snowgate replaces the connection itself after a failed
//! probe, so sharing comes back within seconds instead of when TCP gives up (minutes).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::fleet::*;
use support::redis::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to `upstream` on 127.0.0.1:0. Once `silence` is set, the connections it already
/// carries stop forwarding in both directions (they stay open, their bytes are dropped); new
/// connections are forwarded normally.
async fn proxy(upstream: u16, silence: Arc<AtomicBool>) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                continue;
            };
            // Only connections made before the silence are silenced.
            let silenced = Arc::new(AtomicBool::new(false));
            if !silence.load(Ordering::SeqCst) {
                let (flag, silenced) = (silence.clone(), silenced.clone());
                tokio::spawn(async move {
                    while !flag.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    silenced.store(true, Ordering::SeqCst);
                });
            }
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pipe(cr, sw, silenced.clone()));
            tokio::spawn(pipe(sr, cw, silenced));
        }
    });
    (port, task)
}

/// Copies `from` to `to` until either ends; once `silenced`, reads and drops.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silenced: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silenced.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn redis_state(fleet: &Fleet, i: usize) -> String {
    let (status, health) = fleet.health(i).await;
    assert_eq!(status, 200, "{health}");
    health["shared"]["redis"].as_str().unwrap_or("").to_string()
}

/// Polls instance `i`'s `/ext/health` until it says `want` (at most `limit`).
async fn wait_for_state(fleet: &Fleet, i: usize, want: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if redis_state(fleet, i).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_connection_is_replaced_and_sharing_resumes() {
    let redis = RedisServer::start_tcp();
    let silence = Arc::new(AtomicBool::new(false));
    let (port, proxy_task) = proxy(redis.port().unwrap(), silence.clone()).await;
    let toml = format!("[redis]\nurl = \"redis://127.0.0.1:{port}/0\"\n");
    let fleet = Fleet::start(2, 1, Duration::from_secs(3600), &toml, |_, _| {}).await;
    for i in 0..2 {
        assert!(
            wait_for_state(&fleet, i, "up", Duration::from_secs(5)).await,
            "instance {i} never used Redis"
        );
    }
    // Every connection open now falls silent; new ones would work.
    silence.store(true, Ordering::SeqCst);
    for i in 0..2 {
        assert!(
            wait_for_state(&fleet, i, "down", Duration::from_secs(5)).await,
            "instance {i} did not notice the silence"
        );
    }
    // Calls are served meanwhile.
    let r = block(&fleet, 0, 7).await;
    assert!(is_result(&r), "{}", r.body);
    // The old connections stay silent for ever: only a new connection brings Redis back.
    for i in 0..2 {
        assert!(
            wait_for_state(&fleet, i, "up", Duration::from_secs(10)).await,
            "instance {i} kept its silent connection: sharing never resumed"
        );
    }
    // And sharing works again: a miss on A is a hit on B, once A's write has landed (it is made
    // after A answers: asking B before then would be a race, not a test).
    let written = r#"snowgate_shared_writes_total{result="written"}"#;
    let written_before = fleet.metric(0, written).await;
    let before = fleet.calls("platform.getBlockByHeight");
    let a = block(&fleet, 0, 9).await;
    assert_eq!(x_cache(&a), "MISS", "{}", a.body);
    let start = Instant::now();
    while fleet.metric(0, written).await <= written_before {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "A never wrote its answer to Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = block(&fleet, 1, 9).await;
    assert_eq!(x_cache(&b), "HIT", "{}", b.body);
    assert_eq!(fleet.calls("platform.getBlockByHeight"), before + 1);
    fleet.shutdown().await;
    proxy_task.abort();
}
