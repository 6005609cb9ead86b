//! The avalanchego release a devnode plays, and which methods each release serves.
//!
//! A rolling upgrade runs nodes of several releases behind one gateway, and releases add and
//! remove API methods (reference §5, "Version history"): a devnode set to a release answers
//! `info.getNodeVersion` with it and serves exactly that release's methods, so the gateway's
//! version-aware routing can be tested against nodes that refuse what they do not serve, with the
//! node's own "can't find method" error.

pub use crate::jsonrpc::release::{NodeVersion, Served};

impl NodeVersion {
    /// The release a devnode plays unless told otherwise (what it reported before it had a
    /// version setting).
    pub const CURRENT: NodeVersion = NodeVersion::new(1, 14, 2);
}

impl Default for NodeVersion {
    /// [`NodeVersion::CURRENT`], the devnode's release.
    fn default() -> Self {
        NodeVersion::CURRENT
    }
}

/// `platform.getAllValidatorsAt` and the ProposerVM API (`/ext/bc/P/proposervm`) appeared here.
pub const V1_14_0: NodeVersion = NodeVersion::new(1, 14, 0);
/// The keystore API (`platform.exportKey`, `platform.listAddresses`) was removed here (PR #3657).
pub const V1_12_2: NodeVersion = NodeVersion::new(1, 12, 2);
/// `platform.getPendingValidators` and `platform.getMaxStakeAmount` were removed here (ACP-41).
pub const V1_11_3: NodeVersion = NodeVersion::new(1, 11, 3);
/// `platform.getL1Validator` and `platform.getProposedHeight` appeared here.
pub const V1_11_13: NodeVersion = NodeVersion::new(1, 11, 13);
/// `info.upgrades`, `platform.getFeeConfig` and `platform.getFeeState` appeared here.
pub const V1_11_11: NodeVersion = NodeVersion::new(1, 11, 11);
/// `platform.getSubnet` appeared here.
pub const V1_11_0: NodeVersion = NodeVersion::new(1, 11, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_constants_bound_their_methods() {
        let s = Served::since(V1_14_0);
        assert!(!s.serves(Some(NodeVersion::new(1, 13, 9))) && s.serves(Some(V1_14_0)));
        let r = Served::removed_in(V1_12_2);
        assert!(r.serves(Some(NodeVersion::new(1, 12, 1))) && !r.serves(Some(V1_12_2)));
        assert!(V1_11_3 < V1_11_11 && V1_11_11 < V1_11_13 && V1_11_0 < V1_11_3);
        assert_eq!(NodeVersion::default(), NodeVersion::CURRENT);
        assert_eq!(NodeVersion::CURRENT.to_string(), "v1.14.2");
    }
}
