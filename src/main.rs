//! The `snowgate` command line.

use clap::{Parser, Subcommand};

/// mimalloc: the request path allocates many small, short-lived buffers; glibc's malloc spent
/// about a tenth of a cache hit's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `snowgate --version`: the release and the commit it was built from (as `snowgate_build_info`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SNOWGATE_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "snowgate",
    version = VERSION,
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

/// How to write logs, known before the subscriber starts: `serve --log-format`, else the config
/// file's `[log] format` (a file that cannot be read is reported by `serve` itself), else text;
/// and the traces `serve`'s `[tracing]` asks for (an invalid section is reported by `serve`).
fn observing(
    command: &Command,
) -> (
    snowgate::config::LogFormat,
    Option<snowgate::otel::Settings>,
) {
    match command {
        Command::Serve(args) => {
            let config = args
                .config
                .as_deref()
                .and_then(|path| snowgate::Config::read(path).ok());
            let format = args
                .log_format
                .or(config.as_ref().map(|c| c.log.format))
                .unwrap_or_default();
            (format, config.and_then(|c| c.tracing.settings()))
        }
        _ => (snowgate::config::LogFormat::default(), None),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("{}", snowgate::cli::error_report(&*e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Check(args) = &cli.command {
        return Ok(snowgate::cli::check(args)?);
    }
    let rt = tokio::runtime::Runtime::new()?;
    let (format, traces) = observing(&cli.command);
    let exporting = {
        let _runtime = rt.enter();
        snowgate::logging::init(format, traces.as_ref())
    };
    let served = rt.block_on(async move {
        match cli.command {
            Command::Serve(args) => Ok(snowgate::cli::serve(args).await?),
            #[cfg(feature = "devnode")]
            Command::Demo(args) => Ok(snowgate::demo::run(args).await?),
            Command::Check(_) => Ok(()),
            #[cfg(feature = "devnode")]
            Command::Devnode(args) => Ok(snowgate::devnode::cli::run(args).await?),
        }
    });
    if let Some(exporting) = exporting {
        rt.block_on(exporting.shutdown());
    }
    served
}
