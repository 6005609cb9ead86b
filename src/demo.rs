//! `snowgate demo`: three simulated nodes of one network (one healthy, one lagging, one flaky)
//! and the gateway in front of them, ready for curl. Built with the `devnode` feature (the
//! default).

use std::net::SocketAddr;
use std::time::Duration;

use crate::cli::{handle_hangups, serve_until_stopped};
use crate::config::{Config, UpstreamConfig};
use crate::devnode::{DevNode, DevNodeConfig, Network};
use crate::gateway::StartError;
use crate::Gateway;

/// Flags of `snowgate demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Address of the gateway.
    #[arg(long, default_value = "127.0.0.1:9650")]
    pub listen: SocketAddr,
    /// Address of the admin listener: `/metrics`, the status page, purge, reload and cordon.
    #[arg(long, default_value = "127.0.0.1:9660")]
    pub admin_listen: SocketAddr,
    /// Time between blocks of the simulated chain.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub block_interval: Duration,
}

/// Why the demo did not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A simulated node could not start (its port, its chain).
    #[error(transparent)]
    Node(#[from] std::io::Error),
    /// The gateway could not start.
    #[error(transparent)]
    Gateway(#[from] StartError),
}

/// `snowgate demo`: three simulated nodes of one network and the gateway in front of them.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    handle_hangups();
    let network = Network::start(crate::devnode::ChainConfig {
        network_id: 12345,
        seed: 1,
        block_interval: args.block_interval,
        genesis: None,
    })?;
    let mut nodes = Vec::new();
    for index in 0..3 {
        let node = DevNode::spawn_in(
            network.clone(),
            DevNodeConfig {
                node_index: index,
                block_interval: args.block_interval,
                // A pool mid-upgrade: node-c still plays avalanchego v1.12.1, the last release
                // with the keystore; the others the current one.
                version: if index == 2 {
                    crate::devnode::NodeVersion::new(1, 12, 1)
                } else {
                    crate::devnode::NodeVersion::CURRENT
                },
                ..Default::default()
            },
        )
        .await?;
        nodes.push(node);
    }
    // node-b lags: frozen for 20 s, then catching up for 20 s, over and over, so /ext/health shows
    // it leave and rejoin the pool. node-c is flaky: slow at times and failing 10% of requests.
    let lagging = nodes[1].control();
    tokio::spawn(async move {
        loop {
            lagging.freeze();
            tokio::time::sleep(Duration::from_secs(20)).await;
            lagging.unfreeze();
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
    });
    nodes[2].control().update_faults(|f| {
        f.error_rate = 0.1;
        f.latency = Duration::from_millis(2);
        f.jitter = Duration::from_millis(20);
    });
    let names = ["node-a", "node-b", "node-c"];
    let mut config = Config::default();
    config.server.listen = args.listen;
    config.upstreams = nodes
        .iter()
        .zip(names)
        .map(|(n, name)| UpstreamConfig {
            name: name.to_string(),
            url: n.url(),
            ..Default::default()
        })
        .collect();
    config.admin.api_keys = vec![DEMO_ADMIN_KEY.to_string()];
    config.admin.listen = Some(args.admin_listen);
    let gateway = Gateway::start(config).await?;
    let roles = [
        "healthy",
        "lagging: frozen for 20 s, then catching up",
        "flaky: 10% HTTP 500, 2-22 ms latency",
    ];
    let admin = gateway.admin_url().unwrap_or_default();
    print_demo_help(&gateway.url(), &admin, &nodes, &names, &roles);
    serve_until_stopped(gateway).await;
    Ok(())
}

/// The admin key of the demo (printed by the demo; never use it elsewhere).
pub const DEMO_ADMIN_KEY: &str = "demo-admin-key-not-secret";

fn print_demo_help(url: &str, admin: &str, nodes: &[DevNode], names: &[&str], roles: &[&str]) {
    println!("snowgate demo: gateway on {url}");
    println!("  status page: {admin}/snowgate/status (admin key {DEMO_ADMIN_KEY} to cordon)");
    for ((n, name), role) in nodes.iter().zip(names).zip(roles) {
        println!("  upstream {name}: {} ({role})", n.url());
    }
    let post = |path: &str, body: &str| {
        format!("curl -s {url}{path} -H 'Content-Type: application/json' -d '{body}'")
    };
    println!("\nTry:");
    println!(
        "  {}",
        post(
            "/ext/bc/P",
            r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight"}"#
        )
    );
    println!(
        "  {}",
        post(
            "/ext/info",
            r#"{"jsonrpc":"2.0","id":"a","method":"info.getNetworkID"}"#
        )
    );
    println!(
        "  {}   # refused: node-specific",
        post(
            "/ext/info",
            r#"{"jsonrpc":"2.0","id":2,"method":"info.getNodeID"}"#
        )
    );
    let pinned = r#"{"jsonrpc":"2.0","id":3,"method":"info.getNodeID"}"#;
    println!(
        "  curl -s {url}/ext/info -H 'Content-Type: application/json' -H 'Authorization: Bearer {DEMO_ADMIN_KEY}' -H 'X-Snowgate-Upstream: node-b' -d '{pinned}'"
    );
    println!("  curl -s {url}/ext/health");
    println!("  curl -s {admin}/metrics | grep snowgate_");
    println!("\nCtrl-C to stop.");
}
