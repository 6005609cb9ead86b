//! `[cache]`: the answer cache's size and lifetimes, read by the cache layer; and how far an
//! immutable answer is believed before it is kept (`verify`), read by the pool, which checks it.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[cache]` in the config.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// `false` turns the layer off (every answer `X-Cache: BYPASS`).
    pub enabled: bool,
    /// Bound on the bytes of keys and answers held (plus a fixed per-entry overhead).
    pub max_bytes: u64,
    /// Cap on head-class entries (they also end when the best height moves).
    #[serde(with = "crate::duration")]
    pub head_ttl: Duration,
    /// Lifetime of network-class entries.
    #[serde(with = "crate::duration")]
    pub network_ttl: Duration,
    /// Lifetime of volatile-class entries.
    #[serde(with = "crate::duration")]
    pub volatile_ttl: Duration,
    /// Immutable and head-class answers also go to the fleet's Redis (`[redis]`); unset means
    /// `true` when `[redis]` is set.
    pub shared: Option<bool>,
    /// How long Redis keeps an immutable answer (its own `maxmemory` policy bounds the tier);
    /// head-class answers keep `head_ttl` there too.
    #[serde(with = "crate::duration")]
    pub shared_ttl: Duration,
    /// Answers larger than this stay in each instance's memory, never in Redis.
    pub shared_max_bytes: usize,
    /// How an immutable answer is checked before it is returned or kept.
    pub verify: Verify,
}

/// `[cache] verify`: how much of one node's word an immutable answer needs before the cache keeps
/// it (in memory and in the fleet's Redis), which is then every client's answer until evicted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// An answer whose bytes carry its identity is checked against the call (a block or a tx in
    /// `hex` hashes to the ID asked; a block by height carries that height); one that contradicts
    /// the call is never returned nor kept, and its node is taken out as lying. An answer with
    /// nothing to check is kept on a primary's word, and on a fallback's once a second node
    /// returns the same bytes.
    #[default]
    Hash,
    /// The same checks, and every immutable answer is kept only once a second node returns the
    /// same bytes (the client is answered at once, the cache keeps the answer when they agree).
    Quorum,
    /// Nothing is checked: an answer is kept on the word of the node that gave it.
    Off,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_bytes: 256 * 1024 * 1024,
            head_ttl: Duration::from_secs(2),
            network_ttl: Duration::from_secs(600),
            volatile_ttl: Duration::from_secs(1),
            shared: None,
            shared_ttl: Duration::from_secs(7 * 24 * 3600),
            shared_max_bytes: 1024 * 1024,
            verify: Verify::default(),
        }
    }
}

impl CacheConfig {
    /// Checks `[cache]` (also when disabled, so turning it on later needs no other change); the
    /// error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_bytes < 1024 * 1024 {
            return invalid("cache.max_bytes", "must be at least 1 MiB");
        }
        for (key, ttl) in [
            ("cache.head_ttl", self.head_ttl),
            ("cache.network_ttl", self.network_ttl),
            ("cache.volatile_ttl", self.volatile_ttl),
            ("cache.shared_ttl", self.shared_ttl),
        ] {
            if ttl.is_zero() {
                return invalid(key, "must be greater than zero");
            }
        }
        if !(1024..=512 * 1024 * 1024).contains(&self.shared_max_bytes) {
            return invalid(
                "cache.shared_max_bytes",
                "must be between 1 KiB and 512 MiB",
            );
        }
        // Redis expiries are whole milliseconds.
        if self.shared_ttl < Duration::from_millis(1) {
            return invalid("cache.shared_ttl", "must be at least 1ms");
        }
        Ok(())
    }
}
