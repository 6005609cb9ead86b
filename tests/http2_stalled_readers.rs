//! HTTP/2 clients that never open their flow-control window are cut after `send_timeout`, however
//! small the answers they hold, and also after their connection was closed for idleness. (Found
//! by attacking the gateway: hyper polls a one-chunk answer before it has window to send it, so
//! such an answer counted as taken at once; and the watchdog stopped watching once it had asked
//! an idle connection to close. Both tests failed on 741ebec: no stream ended within the bound.)
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

#[tokio::test]
async fn an_http2_client_with_a_shut_window_is_cut_after_send_timeout_even_for_small_answers() {
    // send_timeout first: the answer must count as not taken (the `Tracked` half of the fix).
    shut_window_streams_are_cut(Duration::from_secs(1), Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_connection_closed_for_idleness_is_still_cut_after_send_timeout() {
    // The idle close first (its GOAWAY waits for the streams): the watchdog must keep watching
    // send_timeout after it (the `watchdog` half of the fix).
    shut_window_streams_are_cut(Duration::from_secs(2), Duration::from_secs(1)).await;
}

/// Ten small answers on one HTTP/2 connection whose window stays shut all end in an error within
/// 10 s, with `send` and `idle` as the gateway's send and idle timeouts.
async fn shut_window_streams_are_cut(send: Duration, idle: Duration) {
    let cluster = Cluster::start(1, Duration::from_secs(60), |c| {
        c.limits.send_timeout = send;
        c.limits.idle_timeout = idle;
    })
    .await;
    let url = format!("{}/ext/bc/P", cluster.url());
    // The answer is small: one chunk.
    let ok = post(&url, &call("platform.getHeight", "{}")).await;
    assert_eq!(ok.status, 200);
    assert!(ok.body.len() < 1024);

    let addr: SocketAddr = cluster.url().trim_start_matches("http://").parse().unwrap();
    let mut sender = h2_connect(addr, 0).await;
    let streams = h2_posts(&mut sender, &url, &call("platform.getHeight", "{}"), 10).await;
    assert_eq!(streams.len(), 10);
    // The old code let them wait for idle_timeout, then for ever.
    let started = Instant::now();
    for t in streams {
        let left = Duration::from_secs(10).saturating_sub(started.elapsed());
        let done = tokio::time::timeout(left, t)
            .await
            .expect("an HTTP/2 stream with a shut window was not cut within 10 s")
            .unwrap();
        assert_eq!(done, None, "a stream with a shut window got its answer");
    }
    drop(sender);
    // And the gateway serves on.
    assert_eq!(
        post(&url, &call("platform.getHeight", "{}")).await.status,
        200
    );
}
