//! `snowgate devnode`: run one simulated node from the command line, optionally with faults in
//! force from the start (they can be changed later at its control endpoint, `/_devnode`).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{DevNode, DevNodeConfig, Faults, NodeVersion, TlsIdentity};

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
    /// When the chain's built-in history ended (height 1000); the height then follows the wall
    /// clock, one block per --block-interval. Devnodes with the same genesis, seed and interval
    /// are nodes of one chain, whenever each starts or restarts. `today` (the default: 00:00 UTC
    /// of the day the node starts), `now`, an RFC 3339 time (`2026-11-26T00:00:00Z`) or unix
    /// seconds.
    #[arg(long, default_value = "today", value_parser = genesis)]
    pub genesis: Genesis,
    /// Seed of the deterministic chain state.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Index of this node in its network: picks its node ID.
    #[arg(long, default_value_t = 0)]
    pub node_index: u32,
    /// The avalanchego release to play (e.g. "v1.13.0"): what info.getNodeVersion reports and
    /// which methods the node serves (getAllValidatorsAt and /ext/bc/P/proposervm from v1.14.0;
    /// the keystore methods until v1.12.1; getPendingValidators and getMaxStakeAmount until
    /// v1.11.2).
    #[arg(long, default_value_t = NodeVersion::CURRENT, value_parser = node_version)]
    pub version: NodeVersion,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Fault: fixed delay added to every answer (e.g. "50ms").
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub latency: Duration,
    /// Fault: extra delay drawn uniformly from [0, jitter] per request.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub jitter: Duration,
    /// Fault: fraction of requests answered HTTP 500 (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = fraction)]
    pub error_rate: f64,
    /// Fault: fraction of requests delayed by --slow-latency, at random (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = fraction)]
    pub slow_rate: f64,
    /// Fault: the delay of those requests (e.g. "300ms").
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub slow_latency: Duration,
    /// Fault: fraction of requests whose connection is closed without an answer (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = fraction)]
    pub drop_rate: f64,
    /// Fault: fraction of requests refused with HTTP 429, as a provider over its plan's rate
    /// (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = fraction)]
    pub throttle_rate: f64,
    /// Fault: the `Retry-After` of those 429s (e.g. "5s"); none: left out.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub retry_after: Option<Duration>,
    /// Fault: start frozen (a lagging node: its height stops until unfrozen).
    #[arg(long)]
    pub frozen: bool,
    /// Fault: start bootstrapping (P-chain routes answer 503, health unhealthy).
    #[arg(long)]
    pub bootstrapping: bool,
    /// Fault: lie (getBlock and getTx answer another block's or tx's bytes, getBlockByHeight
    /// another height's block).
    #[arg(long)]
    pub lie: bool,
}

impl DevnodeArgs {
    /// The node's configuration (reads the TLS files, if any).
    pub fn config(&self) -> std::io::Result<DevNodeConfig> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsIdentity::from_files(cert, key)?),
            _ => None,
        };
        Ok(DevNodeConfig {
            listen: self.listen,
            network_id: self.network_id,
            block_interval: self.block_interval,
            genesis: self.genesis.at(SystemTime::now()),
            seed: self.seed,
            node_index: self.node_index,
            version: self.version,
            tls,
            faults: Faults {
                latency: self.latency,
                jitter: self.jitter,
                error_rate: self.error_rate,
                slow_rate: self.slow_rate,
                slow_latency: self.slow_latency,
                drop_rate: self.drop_rate,
                throttle_rate: self.throttle_rate,
                retry_after: self.retry_after,
                hang: false,
                frozen: self.frozen,
                bootstrapping: self.bootstrapping,
                no_info_api: false,
                failing_methods: Vec::new(),
                hanging_methods: Vec::new(),
                lie: self.lie,
            },
        })
    }
}

/// `--genesis`, resolved when the node starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Genesis {
    /// 00:00 UTC of the day the node starts: devnodes started the same day agree by default.
    Today,
    /// When the node starts (a chain of its own, as one process's in-process network is).
    Now,
    /// A fixed moment.
    At(SystemTime),
}

impl Genesis {
    /// The moment, for a node starting at `now` (`None`: `now` itself).
    pub fn at(self, now: SystemTime) -> Option<SystemTime> {
        match self {
            Genesis::Today => {
                let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                Some(UNIX_EPOCH + Duration::from_secs(secs - secs % 86_400))
            }
            Genesis::Now => None,
            Genesis::At(t) => Some(t),
        }
    }
}

fn genesis(s: &str) -> Result<Genesis, String> {
    match s {
        "today" => Ok(Genesis::Today),
        "now" => Ok(Genesis::Now),
        _ => {
            if let Ok(secs) = s.parse::<u64>() {
                return Ok(Genesis::At(UNIX_EPOCH + Duration::from_secs(secs)));
            }
            humantime::parse_rfc3339_weak(s)
                .map(Genesis::At)
                .map_err(|_| {
                    format!("`{s}` is not `today`, `now`, unix seconds or an RFC 3339 time (`2026-11-26T00:00:00Z`)")
                })
        }
    }
}

fn node_version(s: &str) -> Result<NodeVersion, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not between 0 and 1"))
    }
}

/// Runs a devnode until Ctrl-C.
pub async fn run(args: DevnodeArgs) -> io::Result<()> {
    let config = args.config()?;
    let listen = config.listen;
    let genesis = config
        .genesis
        .map(|g| humantime::format_rfc3339_seconds(g).to_string());
    let node = DevNode::spawn(config)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
    tracing::info!(
        addr = %node.addr(),
        node_id = node.node_id(),
        version = %node.version(),
        genesis = genesis.as_deref().unwrap_or("now"),
        control = %format!("{}/_devnode", node.url()),
        "devnode listening"
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: DevnodeArgs,
    }

    #[test]
    fn fault_flags_reach_the_config() {
        let cli = Cli::try_parse_from([
            "devnode",
            "--listen",
            "127.0.0.1:0",
            "--latency",
            "20ms",
            "--error-rate",
            "0.25",
            "--frozen",
            "--node-index",
            "2",
        ])
        .unwrap();
        let config = cli.args.config().unwrap();
        assert_eq!(config.faults.latency, Duration::from_millis(20));
        assert_eq!(config.faults.error_rate, 0.25);
        assert!(config.faults.frozen && !config.faults.bootstrapping);
        assert_eq!(config.node_index, 2);
        assert_eq!(config.version, NodeVersion::CURRENT);
        let cli = Cli::try_parse_from(["devnode", "--version", "v1.13.0"]).unwrap();
        assert_eq!(
            cli.args.config().unwrap().version,
            NodeVersion::new(1, 13, 0)
        );
        assert!(Cli::try_parse_from(["devnode", "--version", "1.13"]).is_err());
        // The certificate needs its key and the other way round.
        assert!(Cli::try_parse_from(["devnode", "--tls-cert", "c.pem"]).is_err());
        assert!(Cli::try_parse_from(["devnode", "--tls-key", "k.pem"]).is_err());
        let cli = Cli::try_parse_from([
            "devnode",
            "--tls-cert",
            "/nonexistent/c.pem",
            "--tls-key",
            "k",
        ])
        .unwrap();
        let err = cli.args.config().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/c.pem"), "{err}");
        assert!(Cli::try_parse_from(["devnode", "--drop-rate", "2"]).is_err());
    }
}
