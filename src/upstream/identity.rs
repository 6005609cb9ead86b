//! Which network a node is on and which avalanchego version it runs: asked (`info.getNetworkID`,
//! `info.getNodeVersion`) when the node joins the pool, after it comes back, and every
//! [`REFRESH`] while it stays. A node on another network than the pool's never takes traffic: its
//! answers would be another chain's. The pool's network is `[network] id`, or else the one most
//! nodes report at start ([`majority`]; with no majority, none is enforced until `[network] id`
//! is set).

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
    /// When it was last asked (`None`: never, or to be asked again).
    pub asked: Option<Instant>,
}

impl Identity {
    /// Whether to ask again now: never asked, forgotten after a failure, or stale.
    pub fn due(&self, now: Instant) -> bool {
        self.asked
            .map_or(true, |at| now.duration_since(at) >= REFRESH)
    }

    /// Whether the node is on a network other than `expected` (unknown is not a mismatch: the
    /// node is asked before it takes traffic, see `Pool::check_once`).
    pub fn mismatch(&self, expected: Option<u32>) -> bool {
        matches!((self.network_id, expected), (Some(n), Some(e)) if n != e)
    }
}

/// The network more than half of `reported` are on; `None` when nobody reported or no network
/// has a majority (two nodes that disagree: which one lies is not for snowgate to guess, and
/// `[network] id` settles it).
pub fn majority(reported: &[u32]) -> Option<u32> {
    reported
        .iter()
        .find(|id| 2 * reported.iter().filter(|n| n == id).count() > reported.len())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_majority_network_wins_and_unknown_is_no_mismatch() {
        assert_eq!(majority(&[]), None);
        assert_eq!(majority(&[5, 1, 1]), Some(1));
        assert_eq!(majority(&[1]), Some(1));
        assert_eq!(majority(&[5, 1]), None, "a tie names no network");
        assert_eq!(majority(&[5, 1, 1, 5]), None);
        let known = Identity {
            network_id: Some(5),
            ..Default::default()
        };
        assert!(known.mismatch(Some(1)));
        assert!(!known.mismatch(Some(5)));
        assert!(!known.mismatch(None));
        assert!(!Identity::default().mismatch(Some(1)));
        assert!(Identity::default().due(Instant::now()));
    }
}
