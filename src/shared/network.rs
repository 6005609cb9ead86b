//! The network a fleet's Redis keys carry ([`NetworkScope`]): every key snowgate writes under
//! `[redis] key_prefix` (shared answers, the fleet's cordons, usage) is written under
//! `{key_prefix}{network ID}:`, so that two fleets serving different networks from one Redis and
//! one prefix never read each other's data (an answer of Fuji served as mainnet's, a cordon of
//! Fuji's `node-a` taking mainnet's `node-a` out, their usage added up).
//!
//! The network is the pool's *settled* one (`[network] id`, or the one more than half of the
//! configured nodes report), never whichever node answered first: a node of another network alone
//! up at start would otherwise write where that network's fleet reads. Until it is settled, nothing
//! keyed by it is read or written (each user says what it does meanwhile). Told two different
//! networks (which the pool, settling once, never does), nothing is shared any more, for good.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The network the shared tier's keys carry: none until the pool's network is settled, then that
/// one for good; none again, for good, if it is ever told another.
#[derive(Debug)]
pub struct NetworkScope {
    /// `[redis] key_prefix`.
    key_prefix: Box<str>,
    /// The network and `{key_prefix}{network ID}:`, once settled.
    settled: OnceLock<(u32, Box<str>)>,
    /// Told two networks: nothing is shared any more.
    conflict: AtomicBool,
}

/// What [`NetworkScope::settle`] made of a network it was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The first network: keys carry it from now on.
    First,
    /// The network already settled: nothing changes.
    Same,
    /// Another network than the one settled (`kept`): nothing is shared from now on.
    Conflict { kept: u32, now: u32 },
}

impl NetworkScope {
    /// Keys under `key_prefix` (`[redis] key_prefix`), for no network yet: nothing is shared.
    pub fn new(key_prefix: &str) -> NetworkScope {
        NetworkScope {
            key_prefix: key_prefix.into(),
            settled: OnceLock::new(),
            conflict: AtomicBool::new(false),
        }
    }

    /// Records the pool's settled network `id`.
    pub fn settle(&self, id: u32) -> Settled {
        let mut first = false;
        let (kept, _) = self.settled.get_or_init(|| {
            first = true;
            (id, format!("{}{id}:", self.key_prefix).into_boxed_str())
        });
        match (first, *kept == id) {
            (true, _) => Settled::First,
            (false, true) => Settled::Same,
            (false, false) => {
                self.conflict.store(true, Ordering::Relaxed);
                Settled::Conflict {
                    kept: *kept,
                    now: id,
                }
            }
        }
    }

    /// `{key_prefix}{network ID}:`, or `None` while nothing may be shared (not settled yet, or
    /// told two networks).
    pub fn prefix(&self) -> Option<&str> {
        if self.conflict.load(Ordering::Relaxed) {
            return None;
        }
        self.settled.get().map(|(_, prefix)| &**prefix)
    }

    /// Told two networks.
    pub fn conflicted(&self) -> bool {
        self.conflict.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: &str = "snowgate:12345:";

    #[test]
    fn nothing_is_shared_before_the_network_is_settled_nor_after_two() {
        let scope = NetworkScope::new("snowgate:");
        assert_eq!(scope.prefix(), None);
        assert_eq!(scope.settle(12345), Settled::First);
        assert_eq!(scope.prefix(), Some(NET));
        assert_eq!(scope.settle(12345), Settled::Same);
        assert_eq!(scope.prefix(), Some(NET));
        assert!(!scope.conflicted());
        assert_eq!(
            scope.settle(5),
            Settled::Conflict {
                kept: 12345,
                now: 5
            }
        );
        assert_eq!(scope.prefix(), None);
        // For good: the first network again does not resume sharing.
        assert_eq!(scope.settle(12345), Settled::Same);
        assert_eq!(scope.prefix(), None);
        assert!(scope.conflicted());
    }
}
