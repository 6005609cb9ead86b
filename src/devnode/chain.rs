//! The simulated chain and every method over it. (Skeleton: being filled in.)

use std::time::{Duration, SystemTime};

use crate::jsonrpc::Json;

/// The fixed message avalanchego substitutes for any params decoding failure.
pub const BAD_ARGS: &str = "couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls";

/// Settings of the simulated network's chain.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    pub network_id: u32,
    pub seed: u64,
    pub block_interval: Duration,
}

/// The identity of one node of the network (node-local answers differ per node).
#[derive(Debug, Clone)]
pub struct NodeIdentity {
    pub node_id: String,
    pub ip: String,
}

impl NodeIdentity {
    /// Deterministic identity of node `index` of a network seeded with `seed`.
    pub fn generate(seed: u64, index: u32) -> NodeIdentity {
        NodeIdentity {
            node_id: format!("NodeID-Skeleton{seed}x{index}"),
            ip: format!("127.0.0.1:{}", 9651 + index),
        }
    }
}

/// How one node sees the shared chain.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// A lagging (frozen) node sees nothing above this height.
    pub height_cap: Option<u64>,
    /// False while the node pretends to bootstrap.
    pub bootstrapped: bool,
    pub identity: &'a NodeIdentity,
}

/// Why a method call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The params did not decode: answered with [`BAD_ARGS`].
    BadArgs,
    /// An application error: answered as -32000 with this message.
    App(String),
}

/// The chain state.
pub struct Chain {
    config: ChainConfig,
    height: u64,
}

impl Chain {
    pub fn new(config: &ChainConfig) -> Chain {
        Chain {
            config: config.clone(),
            height: 1000,
        }
    }

    /// Does `service` ("info" or "platform") have a Go method named `go_method` ("GetHeight")?
    pub fn has_method(service: &str, go_method: &str) -> bool {
        matches!(
            (service, go_method),
            ("platform", "GetHeight") | ("info", "GetNetworkID") | ("info", "IsBootstrapped")
        )
    }

    /// Last accepted height as seen by `view`.
    pub fn height(&self, view: &View<'_>) -> u64 {
        view.height_cap
            .map_or(self.height, |cap| cap.min(self.height))
    }

    /// Produces the next block.
    pub fn advance(&mut self, _now: SystemTime) {
        self.height += 1;
    }

    /// Runs one method; the result is compact JSON.
    pub fn call(
        &self,
        view: &View<'_>,
        service: &str,
        go_method: &str,
        _params: Option<&Json>,
    ) -> Result<String, CallError> {
        match (service, go_method) {
            ("platform", "GetHeight") => Ok(format!("{{\"height\":\"{}\"}}", self.height(view))),
            ("info", "GetNetworkID") => {
                Ok(format!("{{\"networkID\":\"{}\"}}", self.config.network_id))
            }
            ("info", "IsBootstrapped") => {
                Ok(format!("{{\"isBootstrapped\":{}}}", view.bootstrapped))
            }
            _ => Err(CallError::App("not implemented".into())),
        }
    }
}
