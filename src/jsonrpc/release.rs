//! avalanchego releases: the number a node reports (`info.getNodeVersion`, `avalanchego/1.14.2`),
//! and the range of releases that serve an API method.
//!
//! Releases add and remove methods (`platform.getAllValidatorsAt` from v1.14.0, the keystore gone
//! in v1.12.2). The gateway's registry says which releases serve each method, so that during a
//! rolling upgrade a call goes only to nodes that serve it; the devnode plays one release and
//! serves exactly its methods. Both read releases with this one type; each keeps its own table of
//! which release serves what (the devnode stands in for the node, so it must not share the
//! gateway's facts: a wrong fact in one table is then caught by the other).

use std::fmt;
use std::str::FromStr;

/// An avalanchego release, `v1.14.2`; ordered as releases are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NodeVersion {
    /// A release by its numbers.
    pub const fn new(major: u32, minor: u32, patch: u32) -> NodeVersion {
        NodeVersion {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for NodeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a version string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a node version (expected e.g. \"1.14.0\")")]
pub struct BadVersion(pub String);

impl FromStr for NodeVersion {
    type Err = BadVersion;

    /// Accepts `1.14.0`, `v1.14.0` and `avalanchego/1.14.0` (what `info.getNodeVersion`
    /// reports): exactly three decimal numbers, nothing around them.
    fn from_str(s: &str) -> Result<NodeVersion, BadVersion> {
        let bad = || BadVersion(s.to_string());
        let bare = s.strip_prefix("avalanchego/").unwrap_or(s);
        let bare = bare.strip_prefix('v').unwrap_or(bare);
        let mut parts = bare.split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse::<u32>().ok()
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

/// The releases that serve a method: from `since` (inclusive) until `removed_in` (exclusive).
/// `None` means: since before any release that matters, resp. still served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Served {
    pub since: Option<NodeVersion>,
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

    /// Whether some release does not serve it (only then is a node's version worth reading).
    pub fn is_versioned(&self) -> bool {
        self.since.is_some() || self.removed_in.is_some()
    }

    /// Whether a node of release `version` serves it. A node whose release is not known (not
    /// asked yet, or a version string that is not a release number) is taken to serve it: it is
    /// asked when it joins, and refusing every versioned call until then would be worse than
    /// one "can't find method" from a node that turns out to be old.
    pub fn serves(&self, version: Option<NodeVersion>) -> bool {
        let Some(v) = version else { return true };
        self.since.map_or(true, |s| v >= s) && self.removed_in.map_or(true, |r| v < r)
    }

    /// Whether some release serves it at all (`since` before `removed_in`).
    pub fn possible(&self) -> bool {
        match (self.since, self.removed_in) {
            (Some(s), Some(r)) => s < r,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_a_node_and_an_operator_write() {
        let v = NodeVersion::new(1, 14, 2);
        assert_eq!("1.14.2".parse(), Ok(v));
        assert_eq!("v1.14.2".parse(), Ok(v));
        assert_eq!("avalanchego/1.14.2".parse(), Ok(v));
        for bad in [
            "",
            "1.14",
            "1.14.2.1",
            "1..2",
            "v",
            "v1.-1.0",
            "w1.2.3",
            "1.14.x",
            "avalanchego/",
            "1.14.2-rc.1",
            " 1.1.1",
            "+1.1.1",
        ] {
            assert!(bad.parse::<NodeVersion>().is_err(), "{bad:?}");
        }
        assert_eq!(v.to_string(), "v1.14.2");
        assert!(NodeVersion::new(1, 9, 12) < NodeVersion::new(1, 11, 0));
        assert!(NodeVersion::new(1, 11, 13) > NodeVersion::new(1, 11, 3));
        assert!(NodeVersion::new(1, 14, 0) < NodeVersion::new(2, 0, 0));
    }

    #[test]
    fn since_is_inclusive_removed_in_exclusive_and_unknown_serves() {
        let s = Served {
            since: Some(NodeVersion::new(1, 12, 0)),
            removed_in: Some(NodeVersion::new(1, 14, 0)),
        };
        assert!(!s.serves(Some(NodeVersion::new(1, 11, 9))));
        assert!(s.serves(Some(NodeVersion::new(1, 12, 0))));
        assert!(s.serves(Some(NodeVersion::new(1, 13, 99))));
        assert!(!s.serves(Some(NodeVersion::new(1, 14, 0))));
        assert!(s.serves(None));
        assert!(Served::ALWAYS.serves(Some(NodeVersion::new(0, 0, 0))));
        assert!(!Served::ALWAYS.is_versioned() && s.is_versioned() && s.possible());
        let never = Served {
            since: Some(NodeVersion::new(1, 14, 0)),
            removed_in: Some(NodeVersion::new(1, 14, 0)),
        };
        assert!(!never.possible());
        let from = Served::since(NodeVersion::new(1, 14, 0));
        assert!(!from.serves(Some(NodeVersion::new(1, 13, 9))));
        let until = Served::removed_in(NodeVersion::new(1, 12, 2));
        assert!(until.serves(Some(NodeVersion::new(1, 12, 1))));
        assert!(!until.serves(Some(NodeVersion::new(1, 12, 2))));
    }
}
