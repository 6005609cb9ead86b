//! The avalanchego release a devnode plays, and which methods each release serves.
//!
//! A rolling upgrade runs nodes of several releases behind one gateway, and releases add and
//! remove API methods (reference §5, "Version history"): a devnode set to a release answers
//! `info.getNodeVersion` with it and serves exactly that release's methods, so the gateway's
//! version-aware routing can be tested against nodes that refuse what they do not serve, with the
//! node's own "can't find method" error.

use std::fmt;
use std::str::FromStr;

/// An avalanchego release, `v1.14.2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeVersion {
    /// Major number.
    pub major: u16,
    /// Minor number.
    pub minor: u16,
    /// Patch number.
    pub patch: u16,
}

impl NodeVersion {
    /// A release by its numbers.
    pub const fn new(major: u16, minor: u16, patch: u16) -> NodeVersion {
        NodeVersion {
            major,
            minor,
            patch,
        }
    }

    /// The release the devnode plays unless told otherwise (what it reported before it had a
    /// version setting).
    pub const CURRENT: NodeVersion = NodeVersion::new(1, 14, 2);
}

impl Default for NodeVersion {
    fn default() -> Self {
        NodeVersion::CURRENT
    }
}

impl fmt::Display for NodeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a version string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a node version (expected e.g. v1.14.0)")]
pub struct BadVersion(pub String);

impl FromStr for NodeVersion {
    type Err = BadVersion;

    /// Accepts `v1.14.0`, `1.14.0` and `avalanchego/1.14.0` (the form `info.getNodeVersion`
    /// reports).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(s.to_string());
        let bare = s.strip_prefix("avalanchego/").unwrap_or(s);
        let bare = bare.strip_prefix('v').unwrap_or(bare);
        let mut parts = bare.split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse::<u16>().ok()
            }
        });
        let (Some(Some(major)), Some(Some(minor)), Some(Some(patch)), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(NodeVersion::new(major, minor, patch))
    }
}

/// The releases that serve a method: from `since` (inclusive) until `removed_in` (exclusive);
/// `None` means since before any release a devnode plays, resp. still served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// First release that serves it.
    pub since: Option<NodeVersion>,
    /// First release that no longer serves it.
    pub removed_in: Option<NodeVersion>,
}

impl Served {
    /// Served by every release.
    pub const ALWAYS: Served = Served {
        since: None,
        removed_in: None,
    };

    /// Served from `v` on.
    pub const fn since(v: NodeVersion) -> Served {
        Served {
            since: Some(v),
            removed_in: None,
        }
    }

    /// Served until `v` (exclusive).
    pub const fn removed_in(v: NodeVersion) -> Served {
        Served {
            since: None,
            removed_in: Some(v),
        }
    }

    /// Does release `v` serve it?
    pub fn serves(&self, v: NodeVersion) -> bool {
        self.since.map_or(true, |s| v >= s) && self.removed_in.map_or(true, |r| v < r)
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
    fn parses_the_forms_a_node_and_an_operator_write() {
        let v = NodeVersion::new(1, 13, 0);
        assert_eq!("v1.13.0".parse(), Ok(v));
        assert_eq!("1.13.0".parse(), Ok(v));
        assert_eq!("avalanchego/1.13.0".parse(), Ok(v));
        assert_eq!(v.to_string(), "v1.13.0");
        for bad in [
            "",
            "v1.13",
            "v1.13.0.1",
            "v1.x.0",
            "v1.-1.0",
            "v1..0",
            "w1.2.3",
        ] {
            assert!(bad.parse::<NodeVersion>().is_err(), "{bad}");
        }
        assert!(NodeVersion::new(1, 11, 13) > NodeVersion::new(1, 11, 3));
    }

    #[test]
    fn served_ranges_are_half_open() {
        let s = Served::since(V1_14_0);
        assert!(!s.serves(NodeVersion::new(1, 13, 9)) && s.serves(V1_14_0));
        let r = Served::removed_in(V1_12_2);
        assert!(r.serves(NodeVersion::new(1, 12, 1)) && !r.serves(V1_12_2));
        assert!(Served::ALWAYS.serves(NodeVersion::new(0, 0, 0)));
    }
}
