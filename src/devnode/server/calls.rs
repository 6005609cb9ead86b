//! Per-method call counters, so tests can assert on what a node actually executed (e.g. that the
//! gateway answered from its cache and did not call the node again).
//!
//! Every RPC increments one counter, so the map is sharded by a cheap hash of the method name and
//! each counter is an atomic: the hot path takes one shard's read lock and does one `fetch_add`,
//! and only the first call of a new method name takes a write lock.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

const SHARDS: usize = 16;

/// FNV-1a: method names are short, so a cheap hash beats SipHash here (no HashDoS concern for a
/// test node's counters keyed by names it already accepted).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type Shard = RwLock<HashMap<Box<str>, AtomicU64, BuildHasherDefault<Fnv>>>;

/// Call counts keyed by the method string exactly as requests named it.
pub struct CallCounter {
    shards: [Shard; SHARDS],
}

impl Default for CallCounter {
    fn default() -> Self {
        CallCounter {
            shards: std::array::from_fn(|_| RwLock::new(HashMap::default())),
        }
    }
}

impl CallCounter {
    fn shard(&self, method: &str) -> &Shard {
        let mut h = Fnv::default();
        h.write(method.as_bytes());
        // The modulo keeps the index in range whatever the hash.
        &self.shards[(h.finish() % SHARDS as u64) as usize]
    }

    /// Counts one call of `method`.
    pub fn record(&self, method: &str) {
        let shard = self.shard(method);
        if let Some(n) = shard.read().get(method) {
            n.fetch_add(1, Ordering::Relaxed);
            return;
        }
        shard
            .write()
            .entry(method.into())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `method` so far.
    pub fn get(&self, method: &str) -> u64 {
        self.shard(method)
            .read()
            .get(method)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// All counts, sorted by method.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for shard in &self.shards {
            for (k, v) in shard.read().iter() {
                out.insert(k.to_string(), v.load(Ordering::Relaxed));
            }
        }
        out
    }

    /// Sum of all counts.
    pub fn total(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.read()
                    .values()
                    .map(|n| n.load(Ordering::Relaxed))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        for shard in &self.shards {
            shard.write().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_exact_name() {
        let c = CallCounter::default();
        c.record("platform.getHeight");
        c.record("platform.getHeight");
        c.record("platform.getheight");
        assert_eq!(c.get("platform.getHeight"), 2);
        assert_eq!(c.get("platform.getheight"), 1);
        assert_eq!(c.get("info.getNetworkID"), 0);
        assert_eq!(c.total(), 3);
        assert_eq!(c.snapshot().len(), 2);
        c.reset();
        assert_eq!(c.total(), 0);
        assert!(c.snapshot().is_empty());
    }
}
