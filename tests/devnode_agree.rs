//! Separate `snowgate devnode` processes given one genesis are nodes of one chain, as nodes of a
//! network are: whenever each starts or restarts, they report the same height (within a block)
//! and the same block at every height. (Before, each process began its own chain at height 1000
//! when it started: a node started later lagged for ever, and block IDs differed per node.)
#![allow(clippy::unwrap_used)]

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{call, free_port, post};

/// A devnode process on a free port, killed when dropped.
struct Devnode {
    child: Child,
    url: String,
}

impl Devnode {
    async fn start(genesis: u64) -> Devnode {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_snowgate"))
            .args(["devnode", "--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--block-interval",
                "200ms",
                "--genesis",
                &genesis.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let node = Devnode {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..600 {
            if node.try_height().await.is_some() {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the devnode on port {port} never answered");
    }

    async fn try_height(&self) -> Option<u64> {
        let body = call("platform.getHeight", "{}");
        let r = support::client()
            .post(format!("{}/ext/bc/P", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&r.text().await.ok()?).ok()?;
        v["result"]["height"].as_str()?.parse().ok()
    }

    async fn height(&self) -> u64 {
        self.try_height().await.unwrap()
    }

    async fn block(&self, height: u64) -> serde_json::Value {
        let params = format!(r#"{{"height":"{height}","encoding":"hex"}}"#);
        let r = post(
            &format!("{}/ext/bc/P", self.url),
            &call("platform.getBlockByHeight", &params),
        )
        .await;
        r.json()["result"].clone()
    }
}

impl Drop for Devnode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both nodes' heights, read one after the other, differ by at most one block; their blocks at
/// the lower height and a few below it are the same bytes.
async fn agree(a: &Devnode, b: &Devnode) {
    let (ha, hb) = (a.height().await, b.height().await);
    assert!(ha.abs_diff(hb) <= 1, "heights {ha} and {hb}");
    let top = ha.min(hb);
    for h in [top, top - 1, top - 7, 1000, 1001] {
        let (x, y) = (a.block(h).await, b.block(h).await);
        assert!(x["block"].is_string(), "{x}");
        assert_eq!(x, y, "block {h}");
    }
}

#[tokio::test]
async fn devnodes_of_one_genesis_agree_whenever_they_start() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Two minutes of 200 ms blocks before either starts: 600 blocks past the history.
    let genesis = now - 120;
    let first = Devnode::start(genesis).await;
    assert!(first.height().await >= 1600, "{}", first.height().await);
    // A second node started later is at the same height, with the same blocks.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = Devnode::start(genesis).await;
    agree(&first, &second).await;
    // The first restarts: it rejoins at the chain's height, not at 1000.
    drop(first);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let restarted = Devnode::start(genesis).await;
    agree(&restarted, &second).await;
    // Both keep producing the same blocks.
    let before = second.height().await;
    for _ in 0..600 {
        if second.height().await >= before + 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    agree(&restarted, &second).await;
}
