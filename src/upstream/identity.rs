//! Which network a node is on and which avalanchego version it runs: asked (`info.getNetworkID`,
//! `info.getNodeVersion`) when the node joins the pool, after it comes back, and every
//! [`REFRESH`] while it stays. A node on another network than the pool's never takes traffic: its
//! answers would be another chain's; nor, once the pool's network is known, does a node whose
//! network cannot be read. The pool's network is `[network] id`, or else the one more than half
//! of the configured nodes report ([`majority`]), at start or as soon as they do.

use std::time::{Duration, Instant};

/// How often a healthy node's version is asked again (an upgrade in place changes it).
pub const REFRESH: Duration = Duration::from_secs(300);

/// What a node said about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `info.getNetworkID`.
    pub network_id: Option<u32>,
    /// `info.getNodeVersion`'s `version` (`avalanchego/1.13.0`).
    pub version: Option<String>,
    /// That version as a release number, parsed once when it is read (`None`: unknown, or not a
    /// release number), for the choice of a node per versioned call.
    pub release: Option<crate::methods::NodeVersion>,
    /// When it was last asked (`None`: never, or to be asked again).
    pub asked: Option<Instant>,
    /// `platform.getStakingAssetID` of the primary network: what a P-chain-only provider's
    /// network is recognised by ([`network_of_asset`]); asked of the others only while the pool
    /// has such a provider.
    pub asset_id: Option<String>,
}

/// The primary network's staking asset (AVAX) on mainnet, as `platform.getStakingAssetID` says.
pub const MAINNET_ASSET: &str = "FvwEAhmxKfeiG8SnEvq42hc6whRyY3EFYAvebMqDNDGCgxN5Z";
/// The same on Fuji.
pub const FUJI_ASSET: &str = "U8iRqJoiJm8xZHAacmvYyZVwqQx6uDNtQeP3CQ6fcgQk3JqnK";

/// The network a node is on, from its staking asset: mainnet's (1) and Fuji's (5) are known;
/// another (a local network's, each genesis has its own) is the network of a node of the pool
/// that reported both (`known`: network and asset of the nodes that serve the info API).
pub fn network_of_asset(asset: &str, known: &[(u32, String)]) -> Option<u32> {
    match asset {
        MAINNET_ASSET => Some(1),
        FUJI_ASSET => Some(5),
        _ => known.iter().find(|(_, a)| a == asset).map(|(n, _)| *n),
    }
}

impl Identity {
    /// Whether to ask again now: never asked, forgotten after a failure, or (`periodic`) stale.
    pub fn due(&self, now: Instant, periodic: bool) -> bool {
        self.asked
            .map_or(true, |at| periodic && now.duration_since(at) >= REFRESH)
    }

    /// Whether the node is on a network other than `expected` (unknown is not a mismatch: the
    /// node is asked before it takes traffic, see `Pool::check_once`).
    pub fn mismatch(&self, expected: Option<u32>) -> bool {
        matches!((self.network_id, expected), (Some(n), Some(e)) if n != e)
    }
}

/// The network more than half of the pool's `members` nodes report (`reported` are the networks
/// of those that answered); `None` while no network has that majority: nodes down count against
/// every network, so the first node to come up cannot choose the pool's network for the others,
/// and two nodes that disagree settle nothing (which one lies is not for snowgate to guess:
/// `[network] id` settles it).
pub fn majority(reported: &[u32], members: usize) -> Option<u32> {
    reported
        .iter()
        .find(|id| 2 * reported.iter().filter(|n| n == id).count() > members)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p_chain_only_nodes_network_is_its_staking_assets() {
        let known = [(
            12345,
            "2fombhL7aGPwj3KH4bfrmJwW6PVnMobf9Y2fn9GwxiAAJyFDbe".to_string(),
        )];
        assert_eq!(network_of_asset(MAINNET_ASSET, &known), Some(1));
        assert_eq!(network_of_asset(FUJI_ASSET, &[]), Some(5));
        assert_eq!(network_of_asset(&known[0].1, &known), Some(12345));
        assert_eq!(network_of_asset("other", &known), None);
    }

    #[test]
    fn the_majority_network_wins_and_unknown_is_no_mismatch() {
        assert_eq!(majority(&[], 0), None);
        assert_eq!(majority(&[], 3), None);
        assert_eq!(majority(&[5, 1, 1], 3), Some(1));
        assert_eq!(majority(&[1], 1), Some(1));
        assert_eq!(majority(&[5, 1], 2), None, "a tie names no network");
        assert_eq!(majority(&[5, 1, 1, 5], 4), None);
        assert_eq!(majority(&[5], 3), None, "the first node up does not choose");
        assert_eq!(majority(&[1, 1], 3), Some(1));
        let known = Identity {
            network_id: Some(5),
            ..Default::default()
        };
        assert!(known.mismatch(Some(1)));
        assert!(!known.mismatch(Some(5)));
        assert!(!known.mismatch(None));
        assert!(!Identity::default().mismatch(Some(1)));
        assert!(Identity::default().due(Instant::now(), false));
        let asked = Identity {
            asked: Some(Instant::now()),
            ..Default::default()
        };
        let later = Instant::now() + REFRESH;
        assert!(asked.due(later, true) && !asked.due(later, false));
    }
}
