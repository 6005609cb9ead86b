//! The `serve` and `check` subcommands (`demo` is in [`crate::demo`], `devnode` in
//! `devnode::cli`), and the signal handling they share.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{Config, UpstreamConfig};
use crate::Gateway;

/// Flags of `snowgate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The TOML config file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Address to listen on (overrides `[server] listen`).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// A node base URL, repeatable (replaces the file's `[[upstreams]]`).
    #[arg(long = "upstream", value_name = "URL")]
    pub upstreams: Vec<String>,
}

/// Flags of `snowgate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The TOML config file to validate.
    #[arg(long, short)]
    pub config: PathBuf,
}

/// The effective config of `serve`: the file (if any) with the flags applied on top.
pub fn serve_config(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::read(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if !args.upstreams.is_empty() {
        config.upstreams = args
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, url)| UpstreamConfig {
                name: format!("upstream-{}", i + 1),
                url: url.clone(),
                ..Default::default()
            })
            .collect();
    }
    config.validate()?;
    Ok(config)
}

/// The signal that asked snowgate to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Interrupt,
    Terminate,
}

impl Stop {
    /// The exit status of a process killed by this signal (128 + its number), used when a second
    /// signal cuts a drain short.
    pub fn exit_code(self) -> i32 {
        match self {
            Stop::Interrupt => 130,
            Stop::Terminate => 143,
        }
    }
}

/// Waits for SIGINT or SIGTERM.
pub async fn shutdown_signal() -> Stop {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => Stop::Interrupt,
        () = term => Stop::Terminate,
    }
}

/// Takes SIGHUP over from its default action (which ends the process at once, with no drain):
/// until the config reload exists, a hangup is logged and ignored.
pub fn ignore_hangups() {
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hangups) => {
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    tracing::warn!("SIGHUP ignored: snowgate cannot reload its config yet; restart it to apply changes");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP"),
    }
}

/// Serves until SIGINT or SIGTERM, then drains the gateway; a second SIGINT or SIGTERM during the
/// drain exits at once (an operator who presses Ctrl-C twice means it).
pub(crate) async fn serve_until_stopped(gateway: Gateway) {
    let first = shutdown_signal().await;
    tracing::info!(signal = ?first, "shutting down: draining (send the signal again to exit at once)");
    tokio::select! {
        () = gateway.shutdown() => {}
        second = shutdown_signal() => {
            tracing::warn!(signal = ?second, "second signal during the drain: exiting now");
            std::process::exit(second.exit_code());
        }
    }
}

/// `snowgate serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    ignore_hangups();
    let config = serve_config(&args)?;
    let gateway = Gateway::start(config).await?;
    // One plain line for scripts (and the drain test) to find the address in.
    println!("snowgate listening on {}", gateway.url());
    tracing::info!(addr = %gateway.addr(), "snowgate listening");
    serve_until_stopped(gateway).await;
    Ok(())
}

/// `snowgate check`: validates a file; prints the offending key on failure.
pub fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    println!(
        "{}: ok ({} upstreams, {} method overrides)",
        args.config.display(),
        config.upstreams.len(),
        config.methods.len()
    );
    Ok(())
}
