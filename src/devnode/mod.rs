//! The simulated Avalanche node (`snowgate devnode`): tests, benchmarks and the demo stand on it,
//! since no real avalanchego runs on our machines. It must read requests and write answers the way
//! a real node does (avalanchego v1.14: its HTTP stack, gorilla/rpc's JSON codec, its error
//! texts byte for byte), so a gateway that works against it works
//! against a node.
//!
//! * [`chain`]: the deterministic P-chain and node state, and every `info.*` / `platform.*` method
//!   as a plain function over it.
//! * [`server`]: HTTP on hyper with the node's wire behaviour (routes, 405/415/404/301/503 texts,
//!   envelope rules, notifications, raw id echo), health endpoints, faults and the control endpoint.
//!
//! Several devnodes can share one [`Network`] (one chain, several nodes, as in a real network), so
//! that immutable answers agree across the nodes behind the gateway.

pub mod chain;
pub mod cli;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use chain::{Chain, ChainConfig, NodeIdentity, NodeVersion, View};
pub use server::{Control, DevNode, Faults, TlsIdentity, P_CHAIN_PATHS};

/// Settings of one simulated node.
#[derive(Debug, Clone)]
pub struct DevNodeConfig {
    /// Address to listen on; `127.0.0.1:0` in tests.
    pub listen: SocketAddr,
    /// Network ID (12345 = local, 1 = mainnet, 5 = fuji, others `network-<id>`).
    pub network_id: u32,
    /// Time between blocks.
    pub block_interval: Duration,
    /// When the chain's built-in history ended (height 1000): see [`ChainConfig::genesis`].
    /// `None`: when the node starts.
    pub genesis: Option<std::time::SystemTime>,
    /// Seed of the deterministic chain state.
    pub seed: u64,
    /// Index of this node in its network: picks its node ID, BLS key and IP.
    pub node_index: u32,
    /// The avalanchego release the node plays: `info.getNodeVersion` reports it, and the node
    /// serves exactly that release's methods (others answer "rpc: can't find method").
    pub version: NodeVersion,
    /// Serve HTTPS with this certificate and key instead of HTTP (`None`: plain HTTP).
    pub tls: Option<TlsIdentity>,
    /// Faults in force from the start.
    pub faults: Faults,
}

impl Default for DevNodeConfig {
    fn default() -> Self {
        DevNodeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            network_id: 12345,
            block_interval: Duration::from_secs(2),
            genesis: None,
            seed: 1,
            node_index: 0,
            version: NodeVersion::CURRENT,
            tls: None,
            faults: Faults::default(),
        }
    }
}

/// One chain shared by the devnodes of a simulated network, advanced by a ticker task.
#[derive(Clone)]
pub struct Network {
    chain: Arc<parking_lot::RwLock<Chain>>,
}

impl Network {
    /// Builds the chain from `config` (catching up with the wall clock since its genesis) and
    /// produces each next block when it is due (the ticker stops when the last handle to the
    /// network is dropped). Refused when the genesis is too far back ([`chain::MAX_CATCH_UP`]).
    pub fn start(config: ChainConfig) -> std::io::Result<Network> {
        let chain = Chain::new(&config)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let chain = Arc::new(parking_lot::RwLock::new(chain));
        let weak = Arc::downgrade(&chain);
        tokio::spawn(async move {
            loop {
                let due = {
                    let Some(chain) = weak.upgrade() else { break };
                    let chain = chain.read();
                    chain.due_at(chain.tip() + 1)
                };
                // Slept on the wall clock's terms, so that devnodes of one genesis tick together.
                let wait = due
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                tokio::time::sleep(wait).await;
                let Some(chain) = weak.upgrade() else { break };
                chain.write().catch_up(std::time::SystemTime::now());
            }
        });
        Ok(Network { chain })
    }

    /// The chain as of now, for a call: a block that is due but not yet made (the ticker runs
    /// late on a busy machine) is made first, so that nodes of one genesis answer the same height.
    pub fn current(&self) -> parking_lot::RwLockReadGuard<'_, Chain> {
        let now = std::time::SystemTime::now();
        {
            let chain = self.chain.read();
            if chain.due_at(chain.tip() + 1) > now {
                return chain;
            }
        }
        self.chain.write().catch_up(now);
        self.chain.read()
    }

    /// The shared chain.
    pub fn chain(&self) -> &Arc<parking_lot::RwLock<Chain>> {
        &self.chain
    }
}
