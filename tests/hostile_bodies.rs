//! Hostile request bodies through HTTP: what an anonymous client can make the gateway do with one
//! body of at most `limits.body_bytes` (1 MiB by default).
//!
//! * A body of ~60,000 distinct keys (at the top level or inside `params`) costs time linear in its
//!   size: two of them at once no longer hold both runtime threads while other clients wait.
//! * The request a node receives is never much larger than the body the client sent (the
//!   re-encoding for the node does not turn each `<` into the six bytes of `\u003c`).
#![allow(clippy::unwrap_used)]

mod support;

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
