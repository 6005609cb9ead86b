//! `snowgate devnode`: run one simulated node from the command line.

use std::net::SocketAddr;
use std::time::Duration;

use super::{DevNode, DevNodeConfig};

/// Flags of `snowgate devnode`.
#[derive(Debug, clap::Args)]
pub struct DevnodeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9651")]
    pub listen: SocketAddr,
    /// Network ID (1 = mainnet, 5 = fuji, 12345 = local).
    #[arg(long, default_value_t = 12345)]
    pub network_id: u32,
    /// Time between blocks (e.g. "2s", "500ms").
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub block_interval: Duration,
    /// Seed of the deterministic chain state.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs a devnode until Ctrl-C.
pub async fn run(args: DevnodeArgs) -> anyhow::Result<()> {
    let node = DevNode::spawn(DevNodeConfig {
        listen: args.listen,
        network_id: args.network_id,
        block_interval: args.block_interval,
        seed: args.seed,
        ..Default::default()
    })
    .await?;
    tracing::info!(addr = %node.addr(), "devnode listening");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
