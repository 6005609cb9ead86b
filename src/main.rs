//! The `snowgate` command line.

use clap::{Parser, Subcommand};

/// mimalloc: the request path allocates many small, short-lived buffers; glibc's malloc spent
/// about a tenth of a cache hit's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Run the gateway.
    Serve(snowgate::cli::ServeArgs),
    /// Validate a config file: exits 0, or prints the offending key and exits 1.
    Check(snowgate::cli::CheckArgs),
    /// Start three simulated nodes and the gateway in front of them, ready for curl.
    #[cfg(feature = "devnode")]
    Demo(snowgate::demo::DemoArgs),
    /// Run a simulated Avalanche node.
    #[cfg(feature = "devnode")]
    Devnode(snowgate::devnode::cli::DevnodeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Check(args) = &cli.command {
        if let Err(e) = snowgate::cli::check(args) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return Ok(());
    }
    snowgate::logging::init();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        match cli.command {
            Command::Serve(args) => snowgate::cli::serve(args).await,
            #[cfg(feature = "devnode")]
            Command::Demo(args) => snowgate::demo::run(args).await,
            Command::Check(_) => Ok(()),
            #[cfg(feature = "devnode")]
            Command::Devnode(args) => snowgate::devnode::cli::run(args).await,
        }
    })
}
