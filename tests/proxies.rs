//! Per-IP quotas behind real reverse proxies (nginx, haproxy) trusted by the gateway: a client that
//! forges its forwarded address in every way a header allows is limited after the same number of
//! calls as an honest client, and two honest clients behind the same proxy keep their own quotas.
//!
//! Clients connect from distinct loopback addresses (127.0.0.N) so that each is a different client
//! to the proxy, while the proxy reaches the gateway from 127.0.0.1, the only trusted address.
#![allow(clippy::unwrap_used)]

use crate::support;
use crate::support::proxy as proxy_support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use proxy_support::Proxy;
use support::*;

const SLOW_CHAIN: Duration = Duration::from_secs(60);
/// Quota: a burst of 10 cost units, refilled at 1 per second; every call below costs 1.
const BURST: u32 = 10;
/// Calls tried per client at most.
const MAX_CALLS: usize = 4 * BURST as usize;
/// Calls a client may make beyond the burst because the bucket refilled while it was calling.
const REFILL_SLACK: usize = 3;

async fn gateway() -> Cluster {
    Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.requests_per_second = 1;
        cfg.rate_limit.burst = BURST;
        // Hits and misses cost the same, so the count does not depend on the cache.
        cfg.rate_limit.cached_cost_factor = 1.0;
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await
}

/// How a client dresses each call (`i` counts its calls).
type Forge = fn(usize, reqwest::RequestBuilder) -> reqwest::RequestBuilder;

/// The ways a client may claim another address, by name.
fn forgeries() -> Vec<(&'static str, Forge)> {
    vec![
        ("honest", |_, r| r),
        ("rotating x-forwarded-for", |i, r| {
            r.header("x-forwarded-for", format!("198.51.100.{i}"))
        }),
        ("several x-forwarded-for lines", |i, r| {
            // reqwest appends: these go out as three header lines.
            r.header("x-forwarded-for", format!("203.0.113.{i}"))
                .header("x-forwarded-for", format!("198.51.100.{i}, 192.0.2.{i}"))
                .header("x-forwarded-for", format!("10.1.2.{i}"))
        }),
        ("non-ascii x-forwarded-for, forged forwarded", |i, r| {
            let value = reqwest::header::HeaderValue::from_bytes(
                format!("\u{e9}t\u{e9}-{i}, 203.0.113.{i}").as_bytes(),
            )
            .unwrap();
            r.header("x-forwarded-for", value)
                .header("forwarded", format!("for=192.0.2.{i}"))
        }),
        ("forged forwarded", |i, r| {
            r.header("forwarded", format!("for=\"[2001:db8::{i:x}]:4711\""))
        }),
    ]
}

/// Calls through `proxy` from `source` until the first 429: how many calls that took (the 429
/// included), or `None` if none came within [`MAX_CALLS`].
async fn calls_until_limited(proxy: &Proxy, source: Ipv4Addr, forge: Forge) -> Option<usize> {
    let client = reqwest::Client::builder()
        .local_address(IpAddr::V4(source))
        .timeout(Duration::from_secs(20))
        .no_proxy()
        .build()
        .unwrap();
    let url = format!("{}/ext/info", proxy.url());
    for i in 0..MAX_CALLS {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"info.getNetworkID"}}"#);
        let req = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        let r = forge(i, req).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        match status {
            200 => {}
            429 => return Some(i + 1),
            _ => panic!("call {i} from {source}: {status} {text}\n{}", proxy.logs()),
        }
    }
    None
}

/// Every forgery through `proxy` is limited like the honest client; a fresh honest client is
/// then still served (the quota is the client's, not the proxy's).
async fn forged_addresses_are_limited_like_honest_ones(proxy: &Proxy) {
    let mut counts = Vec::new();
    for (n, (name, forge)) in forgeries().into_iter().enumerate() {
        let source = Ipv4Addr::new(127, 0, 0, 10 + n as u8);
        counts.push((name, calls_until_limited(proxy, source, forge).await));
    }
    // The figure quoted in the README: the call that first got a 429, per way of calling.
    eprintln!("through {}: first 429 at call {counts:?}", proxy.kind);
    let honest = counts[0].1.expect("the honest client was never limited");
    assert!(honest > BURST as usize, "{counts:?}");
    for (name, count) in &counts {
        let count = count.unwrap_or_else(|| {
            panic!("{name}: no 429 in {MAX_CALLS} calls (honest: {honest}): {counts:?}")
        });
        assert!(
            count <= honest + REFILL_SLACK,
            "{name}: limited after {count} calls, honest after {honest}: {counts:?}"
        );
    }
    let fresh = calls_until_limited(proxy, Ipv4Addr::new(127, 0, 0, 99), |_, r| r).await;
    assert!(
        fresh.is_some_and(|n| n > BURST as usize),
        "a new client behind the proxy shared someone's quota: {fresh:?}"
    );
}

#[tokio::test]
async fn behind_nginx_forged_addresses_get_429_like_an_honest_client() {
    let c = gateway().await;
    let proxy = Proxy::nginx(c.gateway.addr());
    forged_addresses_are_limited_like_honest_ones(&proxy).await;
    drop(proxy);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn behind_haproxy_forged_addresses_get_429_like_an_honest_client() {
    let c = gateway().await;
    let proxy = Proxy::haproxy(c.gateway.addr());
    forged_addresses_are_limited_like_honest_ones(&proxy).await;
    drop(proxy);
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn with_client_ip_header_forwarded_only_forwarded_is_read() {
    let c = Cluster::start(1, SLOW_CHAIN, |cfg| {
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.requests_per_second = 1;
        cfg.rate_limit.burst = BURST;
        cfg.rate_limit.cached_cost_factor = 1.0;
        cfg.rate_limit.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        cfg.rate_limit.client_ip_header = snowgate::ratelimit::ClientIpHeader::Forwarded;
    })
    .await;
    let url = format!("{}/ext/info", c.url());
    let body = call("info.getNetworkID", "{}");
    // One client behind a trusted proxy, rotating X-Forwarded-For: it is still one client.
    let mut limited_after = None;
    for i in 0..MAX_CALLS {
        let xff = format!("198.51.100.{i}");
        let r = post_with(
            &url,
            &body,
            &[
                ("forwarded", "for=192.0.2.1;proto=http"),
                ("x-forwarded-for", &xff),
            ],
        )
        .await;
        if r.status == 429 {
            limited_after = Some(i + 1);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(
        limited_after.is_some_and(|n| n <= BURST as usize + 1 + REFILL_SLACK),
        "{limited_after:?}"
    );
    // Another Forwarded client has its own quota.
    let r = post_with(&url, &body, &[("forwarded", "for=192.0.2.2")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    c.gateway.shutdown().await;
}
