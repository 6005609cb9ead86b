//! The cache's shared tier: immutable and head-class answers also kept in the fleet's Redis
//! (`crate::shared`), so that a miss on one instance is a hit on the others.
//!
//! Reads go memory, then Redis, then a node; a Redis hit is stored in memory too. Writes never
//! delay an answer: they run in tasks of their own, bounded in bytes ([`WRITE_BUDGET`]), and are
//! dropped (counted) when the budget is spent or Redis is down.
//!
//! Anyone who can write to the Redis can write to these keys, so a value is trusted only when:
//! * it is in this format, version [`VERSION`] (a value of another format or version is a miss and
//!   is overwritten by the next store);
//! * it carries the full key it was stored under (`[redis] key_prefix`, the network ID, the
//!   canonical call), compared byte for byte with the one asked for: the Redis key is only a hash
//!   of it, and two calls sharing a hash never share an answer;
//! * its digest (SHA-256 over everything else, truncated to [`DIGEST_LEN`] bytes) matches, so a
//!   flipped or truncated byte is caught even where the answer would still read as JSON;
//! * it passes the checks a node's answer passes before it is cached: a result (never an error),
//!   one whole JSON value, within the size a node may answer, that the cache rules would keep;
//! * it is held against its call as a node's answer is (`verify::check`: a block or tx in hex
//!   must hash to the ID asked, a block carry the height asked, a json one name them), whatever
//!   this instance's `[cache] verify`: a value that contradicts its call is dropped from Redis
//!   and counted (`refuted`), never served;
//! * it was kept at a level ([`Kept`], stored in the value) at least as strong as this
//!   instance's `[cache] verify` asks of a node's answer before it keeps one
//!   (`verify::serves_from_shared`): a `hash` instance never serves an `off` instance's unchecked
//!   word nor an unreadable answer no second node returned, and a `quorum` instance nothing that
//!   was not seconded. A weaker value is left alone (counted `untrusted`): the call goes to a
//!   node, and the answer this instance then keeps overwrites it.
//!
//! A Redis hit thus costs one check of the answer (for a block or tx in hex, the SHA-256 of its
//! bytes and of its checksum); a memory hit costs nothing more, as it was checked when kept.
//!
//! The digest protects against corruption and mix-ups, not against someone who writes to Redis
//! on purpose: such a writer can compute it, and can claim any level. What is proved on read
//! (a block or tx in hex) is safe from such a writer; what only names or carries the ID or
//! height asked is not. Redis must be as trusted as the nodes (see the README's "Running a
//! fleet").
//!
//! Answers larger than `[cache] shared_max_bytes` (1 MiB) are not shared: they stay in each
//! instance's memory. A value is read by a small script that checks its length first, so a value
//! larger than any this instance writes (or not a string at all) is refused without being copied
//! out of Redis, and a large transfer never holds up the quota scripts on the same connection for
//! long.
//!
//! Keys carry the network ID ([`NetworkScope`], the shared tier's: `crate::shared::network`): the
//! pool's *settled* network, never whichever node answered first. Until the pool's network is
//! settled nothing is read from or written to Redis: a node of another network alone up at start
//! would otherwise file its answers where that network's fleet reads them. Told two different
//! networks (which the pool, settling once, never does), the tier stops sharing for good and says
//! so: an error in the log, `snowgate_shared_cache_network_conflict` at 1.
//!
//! Format: `[VERSION][kind][level][full key length, u32 big-endian][full key][digest][answer]`
//! (the level as [`Kept::byte`]); a value of the previous version is a miss. The Redis key is
//! `{key_prefix}{network ID}:c:{first 32 hex digits of SHA-256 of the canonical key}`.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::call::{AnswerKind, Kept};
use crate::metrics::Metrics;
pub use crate::shared::network::{NetworkScope, Settled};
use crate::shared::{Shared, SharedError};

/// The format's version byte: bumped when the layout changes, so that old values are misses.
pub const VERSION: u8 = 2;

/// Bytes of the SHA-256 digest kept in a value.
pub const DIGEST_LEN: usize = 16;

/// The most bytes of writes to Redis in flight at once; beyond, writes are dropped.
pub const WRITE_BUDGET: usize = 32 * 1024 * 1024;

const HEADER: usize = 1 + 1 + 1 + 4;

/// Why a value read from Redis is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not this format or version.
    Format,
    /// The format's previous version (before the level was stored): a miss, overwritten by the
    /// next store.
    Outdated,
    /// Stored under another key (a shared hash, another network or prefix).
    OtherKey,
    /// The digest does not match: corrupted or truncated.
    Digest,
    /// An error answer: never cached.
    NotAResult,
    /// Not one whole JSON value, or larger than a node's answer may be.
    NotAnAnswer,
}

/// The Redis key of `full_key` (`network_prefix` + canonical key) under `network_prefix`.
pub fn redis_key(network_prefix: &str, canonical: &str) -> Vec<u8> {
    let digest = Sha256::digest(canonical.as_bytes());
    let mut key = Vec::with_capacity(network_prefix.len() + 3 + 32);
    key.extend_from_slice(network_prefix.as_bytes());
    key.extend_from_slice(b"c:");
    for b in &digest[..16] {
        key.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    key
}

fn digest(kind: u8, kept: u8, full_key: &[&str], payload: &[u8]) -> [u8; DIGEST_LEN] {
    let mut h = Sha256::new();
    h.update([VERSION, kind, kept]);
    for part in full_key {
        h.update(part.as_bytes());
    }
    h.update(payload);
    let mut out = [0; DIGEST_LEN];
    out.copy_from_slice(&h.finalize()[..DIGEST_LEN]);
    out
}

fn kind_byte(kind: AnswerKind) -> u8 {
    match kind {
        AnswerKind::Result => 0,
        AnswerKind::Error => 1,
    }
}

/// The value stored for an answer kept at `kept` under the full key `network_prefix` +
/// `canonical`.
pub fn encode(
    network_prefix: &str,
    canonical: &str,
    kind: AnswerKind,
    kept: Kept,
    payload: &[u8],
) -> Vec<u8> {
    let key_len = network_prefix.len() + canonical.len();
    let mut v = Vec::with_capacity(HEADER + key_len + DIGEST_LEN + payload.len());
    v.push(VERSION);
    v.push(kind_byte(kind));
    v.push(kept.byte());
    v.extend_from_slice(&u32::try_from(key_len).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(network_prefix.as_bytes());
    v.extend_from_slice(canonical.as_bytes());
    v.extend_from_slice(&digest(
        kind_byte(kind),
        kept.byte(),
        &[network_prefix, canonical],
        payload,
    ));
    v.extend_from_slice(payload);
    v
}

/// The answer in `value`, and the level it was kept at, if it is one this instance may serve for
/// the full key `network_prefix` + `canonical`, at most `max_answer` bytes long (the check against
/// the call, the level this instance requires and the cache rules are the caller's to apply).
pub fn decode<'v>(
    value: &'v [u8],
    network_prefix: &str,
    canonical: &str,
    max_answer: usize,
) -> Result<(Kept, &'v [u8]), Rejected> {
    if value.first() == Some(&(VERSION - 1)) {
        return Err(Rejected::Outdated);
    }
    let header = value.get(..HEADER).ok_or(Rejected::Format)?;
    if header[0] != VERSION || header[1] > 1 {
        return Err(Rejected::Format);
    }
    let (kind, kept_byte) = (header[1], header[2]);
    let kept = Kept::from_byte(kept_byte).ok_or(Rejected::Format)?;
    let key_len = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    let rest = &value[HEADER..];
    let stored_key = rest.get(..key_len).ok_or(Rejected::Format)?;
    let wanted = [network_prefix.as_bytes(), canonical.as_bytes()];
    if key_len != wanted[0].len() + wanted[1].len()
        || &stored_key[..wanted[0].len()] != wanted[0]
        || &stored_key[wanted[0].len()..] != wanted[1]
    {
        return Err(Rejected::OtherKey);
    }
    let rest = &rest[key_len..];
    let stored_digest = rest.get(..DIGEST_LEN).ok_or(Rejected::Format)?;
    let payload = &rest[DIGEST_LEN..];
    if stored_digest != digest(kind, kept_byte, &[network_prefix, canonical], payload) {
        return Err(Rejected::Digest);
    }
    if kind != kind_byte(AnswerKind::Result) {
        return Err(Rejected::NotAResult);
    }
    let whole_value = crate::jsonrpc::gojson::scan_value(payload)
        .is_ok_and(|r| r.start == 0 && r.end == payload.len());
    if payload.len() > max_answer || !whole_value {
        return Err(Rejected::NotAnAnswer);
    }
    Ok((kept, payload))
}

/// Why the cache does not serve a well-formed value of its own key ([`SharedCache::lookup`]'s
/// `accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It contradicts its call: dropped from Redis, counted `refuted`.
    Refuted,
    /// Kept at a weaker level than this instance's `[cache] verify` requires: left in Redis,
    /// counted `untrusted`.
    Untrusted,
    /// The cache rules would not keep it: counted `rejected`.
    Rules,
}

/// The largest value a key of `key_len` bytes and an answer of `max_answer` bytes make.
pub fn max_value(key_len: usize, max_answer: usize) -> usize {
    HEADER + key_len + DIGEST_LEN + max_answer
}

/// Reads one value, unless it is larger than `ARGV[1]` bytes (answers -1) or not a string (-2):
/// neither is copied out of Redis, so a huge or foreign value planted under a key costs nothing.
/// One key: safe on a Redis Cluster.
const READ: &str = r"
local n = redis.pcall('STRLEN', KEYS[1])
if type(n) ~= 'number' then return -2 end
if n == 0 then return false end
if n > tonumber(ARGV[1]) then return -1 end
return redis.call('GET', KEYS[1])
";

/// The cache's handle on the shared tier.
pub struct SharedCache {
    shared: Arc<Shared>,
    /// How long Redis keeps an immutable answer (`[cache] shared_ttl`).
    pub immutable_ttl: Duration,
    /// The largest answer kept in Redis (`[cache] shared_max_bytes`): nothing larger is written
    /// or read.
    max_answer: usize,
    read: redis::Script,
    writes: Arc<Semaphore>,
    lookups: IntCounterVec,
    written: IntCounterVec,
}

impl SharedCache {
    pub fn new(
        shared: Arc<Shared>,
        immutable_ttl: Duration,
        max_answer: usize,
        metrics: &Metrics,
    ) -> SharedCache {
        metrics.show(crate::metrics::Part::SharedCache);
        SharedCache {
            shared,
            immutable_ttl,
            max_answer,
            read: redis::Script::new(READ),
            writes: Arc::new(Semaphore::new(WRITE_BUDGET)),
            lookups: metrics.shared_lookups.clone(),
            written: metrics.shared_writes.clone(),
        }
    }

    /// `{key_prefix}{network ID}:` while sharing, with Redis up.
    fn usable_prefix(&self) -> Option<&str> {
        self.shared
            .network()
            .prefix()
            .filter(|_| self.shared.available())
    }

    fn count(&self, result: &str) {
        self.lookups.with_label_values(&[result]).inc();
    }

    /// Looks `canonical` up in Redis (at most `[redis] timeout`): the answer, and what `accept`
    /// made of it. `accept` holds a decoded answer, kept at the level it gives, against its call,
    /// this instance's `[cache] verify` and the cache rules ([`Refusal`]: a refuted value is
    /// deleted from Redis). `None` when there is nothing usable (missing, refused, Redis down or
    /// slow): ask a node.
    pub async fn lookup<T>(
        &self,
        canonical: &str,
        accept: impl FnOnce(&[u8], Kept) -> Result<T, Refusal>,
    ) -> Option<(bytes::Bytes, T)> {
        let Some(network) = self.usable_prefix() else {
            self.count("skipped");
            return None;
        };
        let key = redis_key(network, canonical);
        let limit = max_value(network.len() + canonical.len(), self.max_answer);
        let mut read = self.read.key(&key);
        read.arg(limit);
        let value = match self.shared.invoke::<redis::Value>("cache_get", &read).await {
            Ok(redis::Value::BulkString(v)) => v,
            Ok(redis::Value::Nil) => Vec::new(),
            Ok(other) => {
                // -1: larger than any value this instance writes; -2: not a string.
                self.count("rejected");
                tracing::warn!(answer = ?other, "shared cache: a value too large or of another type, ignored unread");
                return None;
            }
            Err(SharedError::Unavailable) => {
                self.count("skipped");
                return None;
            }
            Err(_) => {
                self.count("error");
                return None;
            }
        };
        if value.is_empty() {
            self.count("miss");
            return None;
        }
        if value.len() > limit {
            self.count("rejected");
            tracing::warn!("shared cache: a value larger than any answer, ignored");
            return None;
        }
        match decode(&value, network, canonical, self.max_answer) {
            Ok((kept, answer)) => match accept(answer, kept) {
                Ok(verdict) => {
                    self.count("hit");
                    Some((bytes::Bytes::copy_from_slice(answer), verdict))
                }
                Err(Refusal::Refuted) => {
                    self.count("refuted");
                    tracing::warn!(
                        "shared cache: a value that contradicts its call, deleted from Redis"
                    );
                    self.delete(key);
                    None
                }
                Err(Refusal::Untrusted) => {
                    // Another instance's weaker setting (an old config, a canary): not wrong, so
                    // no warning; the answer this call gets from a node overwrites it if kept.
                    self.count("untrusted");
                    None
                }
                Err(Refusal::Rules) => {
                    self.count("rejected");
                    tracing::warn!("shared cache: a value the cache rules would not keep, ignored");
                    None
                }
            },
            Err(Rejected::Outdated) => {
                // Written before the level was stored: a miss, overwritten by the next store.
                self.count("miss");
                None
            }
            Err(why) => {
                self.count("rejected");
                tracing::warn!(
                    ?why,
                    "shared cache: a value that failed its checks, ignored"
                );
                None
            }
        }
    }

    /// Deletes a refuted value, in the background (a value another instance stored meanwhile may
    /// go with it: a miss, not a wrong answer). Best effort: a value left behind is refuted again
    /// at its next read.
    fn delete(&self, key: Vec<u8>) {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            // A write of the cache's keys, counted with them.
            let _ = shared.query::<()>("cache_set", &cmd).await;
        });
    }

    /// Stores an answer kept at `kept` in Redis for `ttl`, in the background; dropped when Redis
    /// is down or the write budget is spent.
    pub fn store(&self, canonical: &str, payload: &[u8], kept: Kept, ttl: Duration) {
        let Some(network) = self.usable_prefix() else {
            self.written.with_label_values(&["dropped"]).inc();
            return;
        };
        if payload.len() > self.max_answer {
            // Larger answers stay in each instance's memory only.
            self.written.with_label_values(&["too_large"]).inc();
            return;
        }
        let value = encode(network, canonical, AnswerKind::Result, kept, payload);
        let Some(permit) = u32::try_from(value.len())
            .ok()
            .and_then(|n| self.writes.clone().try_acquire_many_owned(n).ok())
        else {
            self.written.with_label_values(&["dropped"]).inc();
            return;
        };
        let key = redis_key(network, canonical);
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let shared = self.shared.clone();
        let written = self.written.clone();
        tokio::spawn(async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(value).arg("PX").arg(millis);
            let result = shared.query::<()>("cache_set", &cmd).await;
            drop(permit);
            let label = match result {
                Ok(()) => "written",
                Err(SharedError::Unavailable) => "dropped",
                Err(_) => "failed",
            };
            written.with_label_values(&[label]).inc();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: &str = "snowgate:12345:";
    const KEY: &str = "platform.getTx\u{0}{\"txID\":\"abc\"}";

    #[test]
    fn a_value_keeps_the_level_it_was_kept_at() {
        for kept in [Kept::Unjudged, Kept::Word, Kept::Seconded] {
            let v = encode(NET, KEY, AnswerKind::Result, kept, b"7");
            assert_eq!(decode(&v, NET, KEY, 1024), Ok((kept, &b"7"[..])));
        }
    }

    #[test]
    fn a_value_answers_for_its_own_key_only() {
        let v = encode(
            NET,
            KEY,
            AnswerKind::Result,
            Kept::Word,
            b"{\"tx\":\"0x00\"}",
        );
        assert_eq!(
            decode(&v, NET, KEY, 1024),
            Ok((Kept::Word, &b"{\"tx\":\"0x00\"}"[..]))
        );
        // Another call, another network, another prefix.
        let other = "platform.getTx\u{0}{\"txID\":\"abd\"}";
        assert_eq!(decode(&v, NET, other, 1024), Err(Rejected::OtherKey));
        assert_eq!(
            decode(&v, "snowgate:1:", KEY, 1024),
            Err(Rejected::OtherKey)
        );
        assert_eq!(
            decode(&v, "fleet2:12345:", KEY, 1024),
            Err(Rejected::OtherKey)
        );
    }

    #[test]
    fn every_flipped_byte_or_truncation_is_refused() {
        let v = encode(
            NET,
            KEY,
            AnswerKind::Result,
            Kept::Word,
            b"{\"tx\":\"0x00\",\"n\":12}",
        );
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad, NET, KEY, 1024).is_err(), "byte {i} flipped");
        }
        for n in 0..v.len() {
            assert!(decode(&v[..n], NET, KEY, 1024).is_err(), "cut at {n}");
        }
        let mut longer = v.clone();
        longer.push(b' ');
        assert!(decode(&longer, NET, KEY, 1024).is_err());
    }

    #[test]
    fn foreign_values_errors_and_oversized_answers_are_refused() {
        assert_eq!(decode(b"", NET, KEY, 1024), Err(Rejected::Format));
        assert_eq!(decode(b"{\"tx\":1}", NET, KEY, 1024), Err(Rejected::Format));
        let mut v2 = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"1");
        v2[0] = VERSION + 1;
        assert_eq!(decode(&v2, NET, KEY, 1024), Err(Rejected::Format));
        let e = encode(
            NET,
            KEY,
            AnswerKind::Error,
            Kept::Word,
            b"{\"code\":-32000}",
        );
        assert_eq!(decode(&e, NET, KEY, 1024), Err(Rejected::NotAResult));
        let not_json = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"{\"tx\":");
        assert_eq!(
            decode(&not_json, NET, KEY, 1024),
            Err(Rejected::NotAnAnswer)
        );
        let two = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"1 2");
        assert_eq!(decode(&two, NET, KEY, 1024), Err(Rejected::NotAnAnswer));
        let big = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"\"0123456789\"");
        assert_eq!(decode(&big, NET, KEY, 11), Err(Rejected::NotAnAnswer));
        assert!(decode(&big, NET, KEY, 12).is_ok());
        // A level byte no instance writes; a level changed without the digest.
        let mut level = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"1");
        level[2] = 3;
        assert_eq!(decode(&level, NET, KEY, 1024), Err(Rejected::Format));
        level[2] = Kept::Seconded.byte();
        assert_eq!(decode(&level, NET, KEY, 1024), Err(Rejected::Digest));
        // The previous version's values are misses.
        let mut old = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"1");
        old[0] = VERSION - 1;
        assert_eq!(decode(&old, NET, KEY, 1024), Err(Rejected::Outdated));
        // A claimed key length past the end.
        let mut lying = encode(NET, KEY, AnswerKind::Result, Kept::Word, b"1");
        lying[2..6].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&lying, NET, KEY, 1024).is_err());
    }

    #[test]
    fn redis_keys_are_under_the_network_and_hash_the_call() {
        let k = redis_key(NET, KEY);
        let k = String::from_utf8(k).unwrap();
        assert!(k.starts_with("snowgate:12345:c:"), "{k}");
        assert_eq!(k.len(), NET.len() + 2 + 32);
        assert_ne!(k, String::from_utf8(redis_key(NET, "x")).unwrap());
        assert_eq!(max_value(10, 100), 7 + 10 + 16 + 100);
    }
}
