//! The `snowgate` command line.

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
    Devnode(snowgate::devnode::cli::DevnodeArgs),
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
            Command::Devnode(args) => snowgate::devnode::cli::run(args).await,
        }
    })
}
