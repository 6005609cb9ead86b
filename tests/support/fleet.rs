//! A fleet for the tests: one simulated network of devnodes shared by several gateways, each on
//! its own `127.0.0.1:0` listener with the same config (which points them at one Redis), as
//! operators run snowgate behind a load balancer. Helpers call instance `i` and read what the
//! nodes saw, so a test can prove that work done by one instance spared another's.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use snowgate::config::{Config, UpstreamConfig};
use snowgate::devnode::{ChainConfig, DevNode, DevNodeConfig, Network};
use snowgate::Gateway;

use super::{client, post_with, Reply, ADMIN_KEY};

/// Devnodes sharing one chain, and several gateways in front of all of them.
pub struct Fleet {
    pub network: Network,
    pub nodes: Vec<DevNode>,
    pub gateways: Vec<Gateway>,
}

impl Fleet {
    /// `instances` gateways over `nodes` devnodes (a block every `block_interval`). Each gateway's
    /// config is `toml` (a config file without `[[upstreams]]`, e.g. its `[redis]` section),
    /// then the test settings [`super::Cluster`] uses (rate limits off, health checked every
    /// 200 ms), then `tweak(instance, &mut config)`.
    pub async fn start(
        instances: usize,
        nodes: usize,
        block_interval: Duration,
        toml: &str,
        tweak: impl Fn(usize, &mut Config),
    ) -> Fleet {
        let network = Network::start(ChainConfig {
            network_id: 12345,
            seed: 1,
            block_interval,
        });
        let mut devnodes = Vec::new();
        for i in 0..nodes {
            let node = DevNode::spawn_in(
                network.clone(),
                DevNodeConfig {
                    node_index: i as u32,
                    block_interval,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            devnodes.push(node);
        }
        let base = Config::from_toml(toml, "the fleet test's config")
            .unwrap_or_else(|e| panic!("{e}\n--- config:\n{toml}"));
        let mut gateways = Vec::new();
        for i in 0..instances {
            let mut config = base.clone();
            config.server.listen = "127.0.0.1:0".parse().unwrap();
            config.upstreams = devnodes
                .iter()
                .enumerate()
                .map(|(i, n)| UpstreamConfig {
                    name: format!("node-{i}"),
                    url: n.url(),
                })
                .collect();
            config.admin.api_keys = vec![ADMIN_KEY.to_string()];
            // As in `Cluster`: a check may take its whole interval on a loaded machine.
            config.health.interval = Duration::from_millis(200);
            config.health.timeout = Duration::from_millis(200);
            // The tests make many calls from one address; the quota tests turn it back on.
            config.rate_limit.enabled = false;
            config.limits.max_connections_per_ip = 10_000;
            tweak(i, &mut config);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let gateway = Gateway::start_on(config, listener)
                .await
                .unwrap_or_else(|e| panic!("instance {i} did not start: {e:#}"));
            gateways.push(gateway);
        }
        Fleet {
            network,
            nodes: devnodes,
            gateways,
        }
    }

    /// `http://ADDR` of instance `i`.
    pub fn url(&self, i: usize) -> String {
        self.gateways[i].url()
    }

    /// A P-chain call (`/ext/bc/P`, id 1) to instance `i`.
    pub async fn p(&self, i: usize, method: &str, params: &str) -> Reply {
        self.p_with(i, method, params, &[]).await
    }

    /// A P-chain call to instance `i` with extra headers (an API key, `X-Forwarded-For`).
    pub async fn p_with(
        &self,
        i: usize,
        method: &str,
        params: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        post_with(
            &format!("{}/ext/bc/P", self.url(i)),
            &super::call(method, params),
            headers,
        )
        .await
    }

    /// How many times the nodes (all of them) were called with `method`.
    pub fn calls(&self, method: &str) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.control().call_count(method))
            .sum()
    }

    /// Instance `i`'s `/metrics` text.
    pub async fn metrics(&self, i: usize) -> String {
        client()
            .get(format!("{}/metrics", self.url(i)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// One sample of instance `i`'s metrics, `series` written as in the exposition
    /// (`snowgate_redis_up`, `snowgate_shared_cache_total{result="hit"}`); 0 when absent.
    pub async fn metric(&self, i: usize, series: &str) -> f64 {
        metric(&self.metrics(i).await, series)
    }

    /// Instance `i`'s `/ext/health`: status and body.
    pub async fn health(&self, i: usize) -> (u16, serde_json::Value) {
        let r = client()
            .get(format!("{}/ext/health", self.url(i)))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("/ext/health is not JSON ({e}): {text:?}"));
        (status, body)
    }

    /// Stops every instance.
    pub async fn shutdown(self) {
        for g in self.gateways {
            g.shutdown().await;
        }
    }
}

/// The value of `series` (name and labels exactly as exposed) in a Prometheus text exposition;
/// 0 when it is absent (a counter not yet incremented).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let rest = l.strip_prefix(series)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .unwrap_or(0.0)
}
