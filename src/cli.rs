//! The `serve` and `check` subcommands (`demo` is in [`crate::demo`], `devnode` in
//! `devnode::cli`), and the signal handling they share.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{Config, ConfigError, UpstreamConfig};
use crate::gateway::StartError;
use crate::Gateway;

/// Flags of `snowgate serve`.
#[derive(Debug, Clone, clap::Args)]
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
    /// `text` or `json` (one object per line); overrides `[log] format`.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<crate::config::LogFormat>,
    /// Address of the operator's listener (overrides `[admin] listen`): `/metrics`, the status
    /// page, purge, reload and cordon.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
}

/// Flags of `snowgate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The TOML config file to validate.
    #[arg(long, short)]
    pub config: PathBuf,
}

/// The effective config of `serve`: the file (if any) with the flags applied on top. Not validated
/// here: the gateway validates what it starts with, naming the file ([`Gateway::start`],
/// [`crate::gateway::ConfigSource::named`]).
pub fn serve_config(args: &ServeArgs) -> Result<Config, ConfigError> {
    let mut config = match &args.config {
        Some(path) => Config::read(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if let Some(admin) = args.admin_listen {
        config.admin.listen = Some(admin);
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

/// Where the `SIGHUP` task finds the gateway to reload, once there is one.
pub type HangupTarget =
    std::sync::Arc<std::sync::OnceLock<std::sync::Arc<dyn crate::call::Reload>>>;

/// Takes SIGHUP over from its default action (which ends the process at once, with no drain),
/// from the start: each hangup reloads the config through the target once it is set (the reload
/// logs its result), and is logged and ignored before that or when it is never set (the demo,
/// which has no file).
pub fn handle_hangups() -> HangupTarget {
    let target: HangupTarget = Default::default();
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hangups) => {
            let target = target.clone();
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    match target.get() {
                        Some(reload) => {
                            tracing::info!("SIGHUP: reloading the config");
                            // Logged and counted by the reload itself.
                            let _ = reload.reload().await;
                        }
                        None => tracing::warn!("SIGHUP ignored: there is no config file to reload"),
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP"),
    }
    target
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
pub async fn serve(args: ServeArgs) -> Result<(), StartError> {
    // Until the gateway runs, a hangup must not kill the process either.
    let hangups = handle_hangups();
    let gateway = match args.config.clone() {
        // A reload reads the file again, with the same flags on top.
        Some(path) => {
            let flags = args.clone();
            let source = crate::gateway::ConfigSource::new(move || serve_config(&flags))
                .named(path.display().to_string());
            let gateway = Gateway::start_from(source, None).await?;
            let _ = hangups.set(gateway.reloader());
            gateway
        }
        None => Gateway::start(serve_config(&args)?).await?,
    };
    // One plain line for scripts (and the drain test) to find the address in.
    println!("snowgate listening on {}", gateway.url());
    tracing::info!(addr = %gateway.addr(), "snowgate listening");
    serve_until_stopped(gateway).await;
    Ok(())
}

/// `error: ` and the message of a command that failed, with each cause once: a cause whose text
/// its outer error already quotes (`cannot read X: No such file`) is not said again. Never a
/// backtrace: this is what an operator reads in a terminal or the journal.
pub fn error_report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut report = format!("error: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !report.contains(&text) {
            report.push_str(": ");
            report.push_str(&text);
        }
        cause = c.source();
    }
    report
}

/// `snowgate check`: validates a file; prints the offending key on failure.
pub fn check(args: &CheckArgs) -> Result<(), ConfigError> {
    let config = Config::load(&args.config)?;
    println!(
        "{}: ok ({} upstreams, {} method overrides)",
        args.config.display(),
        config.upstreams.len(),
        config.methods.len()
    );
    Ok(())
}
