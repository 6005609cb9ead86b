//! The `snowgate` command line.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "snowgate",
    version,
    about = "A caching, load-balancing JSON-RPC gateway for Avalanche nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a simulated Avalanche node.
    Devnode {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9651")]
        listen: SocketAddr,
        /// Network ID (12345 = local).
        #[arg(long, default_value_t = 12345)]
        network_id: u32,
        /// Time between blocks (e.g. "2s", "500ms").
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        block_interval: Duration,
        /// Seed of the deterministic chain.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        match cli.command {
            Command::Devnode {
                listen,
                network_id,
                block_interval,
                seed,
            } => {
                let node = snowgate::devnode::DevNode::spawn(snowgate::devnode::DevNodeConfig {
                    listen,
                    network_id,
                    block_interval,
                    seed,
                    ..Default::default()
                })
                .await?;
                tracing::info!(addr = %node.addr(), "devnode listening");
                tokio::signal::ctrl_c().await?;
                Ok(())
            }
        }
    })
}
