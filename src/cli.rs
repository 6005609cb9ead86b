//! The `serve`, `check` and `demo` subcommands (the `devnode` one lives in `devnode::cli`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{Config, UpstreamConfig};
use crate::devnode::{DevNode, DevNodeConfig, Network};
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

/// Flags of `snowgate demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Address of the gateway.
    #[arg(long, default_value = "127.0.0.1:9650")]
    pub listen: SocketAddr,
    /// Time between blocks of the simulated chain.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub block_interval: Duration,
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
async fn serve_until_stopped(gateway: Gateway) {
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

/// `snowgate demo`: three simulated nodes of one network and the gateway in front of them.
pub async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    ignore_hangups();
    let network = Network::start(crate::devnode::ChainConfig {
        network_id: 12345,
        seed: 1,
        block_interval: args.block_interval,
    });
    let mut nodes = Vec::new();
    for index in 0..3 {
        let node = DevNode::spawn_in(
            network.clone(),
            DevNodeConfig {
                node_index: index,
                block_interval: args.block_interval,
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
        })
        .collect();
    config.admin.api_keys = vec![DEMO_ADMIN_KEY.to_string()];
    let gateway = Gateway::start(config).await?;
    let roles = [
        "healthy",
        "lagging: frozen for 20 s, then catching up",
        "flaky: 10% HTTP 500, 2-22 ms latency",
    ];
    print_demo_help(&gateway.url(), &nodes, &names, &roles);
    serve_until_stopped(gateway).await;
    Ok(())
}

/// The admin key of the demo (printed by the demo; never use it elsewhere).
pub const DEMO_ADMIN_KEY: &str = "demo-admin-key-not-secret";

fn print_demo_help(url: &str, nodes: &[DevNode], names: &[&str], roles: &[&str]) {
    println!("snowgate demo: gateway on {url}");
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
    println!("  curl -s {url}/metrics | grep snowgate_");
    println!("\nCtrl-C to stop.");
}
