//! A node's cordons: who holds one ([`Source`]), how they combine ([`CordonedBy`], plain data),
//! and the fleet's, kept in Redis ([`FleetCordons`]: its key, its two scripts, the admin's
//! writes not made yet). The pool applies them to its nodes (`cordoning.rs`).
//!
//! A cordoned node takes no new calls (those in flight finish; pinned calls still reach it; its
//! health checks go on). Three sources may cordon it, and it is cordoned while **any** does:
//! * **the file**: `[[upstreams]] cordoned = true`, at start and after each reload (a reload
//!   that flips it cordons or uncordons the node in place: it is not a new node);
//! * **this instance**: an admin's cordon (`POST /snowgate/upstreams/NAME/cordon`, or the status
//!   page) that only this instance holds: every admin cordon without `[redis]`; with `[redis]`,
//!   one that could not be written to Redis yet (it is retried at every `[health] interval`,
//!   and once written it is the fleet's);
//! * **the fleet**: a cordon in the fleet's Redis, as this instance last read it (every
//!   `[health] interval`) or wrote it. With `[redis]`, an admin's cordon is written there, so
//!   every instance follows it within one interval, and it outlives restarts.
//!
//! An admin's uncordon lifts this instance's cordon and the fleet's (in Redis too), never the
//! file's: a node the file cordons stays cordoned until the file says otherwise, and the answer
//! says so. With Redis unavailable an instance keeps the fleet's cordons as it last read them,
//! and an admin's cordon or uncordon holds here until it can be written; the last write to reach
//! Redis wins. No request ever waits for Redis over a cordon.
//!
//! The fleet's cordons are one Redis hash, [`fleet_key`] (`{key_prefix}{network ID}:cordons`), a
//! field per cordoned upstream name (its value: when it was cordoned, unix milliseconds, for
//! whoever reads Redis). One key, so a Redis Cluster is fine. The key carries the pool's settled
//! network (`crate::shared::network`): two fleets of different networks on one Redis and one
//! prefix each have their own cordons, though their nodes share names. Until the pool's network
//! is settled the fleet's cordons are neither read nor written: an admin's cordon holds on this
//! instance meanwhile and is written once it is (as while Redis is down). Anyone who can write to the Redis can cordon a
//! node (`HSET snowgate:cordons node-1 1`) or uncordon it. A value of another type under that key
//! is neither read as cordons nor overwritten ([`READ`], [`WRITE`]): the instances keep the
//! cordons they knew, and say so once, at warn. Only 0s and 1s are read out of Redis.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::shared::{Shared, SharedError};

/// The redis-errors metric's label for the cordons' commands.
const OP: &str = "cordon";

/// Who holds a cordon on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `[[upstreams]] cordoned = true`.
    File,
    /// An admin of this instance, not (yet) shared with the fleet.
    Instance,
    /// The fleet's Redis.
    Fleet,
}

impl Source {
    /// In the order `cordonedBy` lists them.
    const ALL: [Source; 3] = [Source::File, Source::Instance, Source::Fleet];

    fn bit(self) -> u8 {
        match self {
            Source::File => 1,
            Source::Instance => 2,
            Source::Fleet => 4,
        }
    }

    /// Its name in `cordonedBy` (`/ext/health`, the status page).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Instance => "instance",
            Source::Fleet => "fleet",
        }
    }
}

/// Who set or lifted a cordon, as a state change's `reason` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum By {
    /// An admin of this instance (the endpoint or the status page).
    Admin,
    /// The file, at start or by a reload.
    File,
    /// Another instance, read from the fleet's Redis.
    Fleet,
}

impl By {
    /// The `reason` label and field.
    pub(super) fn reason(self) -> &'static str {
        match self {
            By::Admin => "admin",
            By::File => "file",
            By::Fleet => "fleet",
        }
    }

    /// Who, as the status page's event line says it.
    pub(super) fn words(self) -> &'static str {
        match self {
            By::Admin => "an admin",
            By::File => "the file",
            By::Fleet => "the fleet",
        }
    }
}

/// The sources cordoning a node: none, or any of the three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CordonedBy(u8);

impl CordonedBy {
    /// From what [`CordonedBy::bits`] gave.
    pub(super) fn from_bits(bits: u8) -> CordonedBy {
        CordonedBy(bits & 7)
    }

    /// Kept in an atomic on the node.
    pub(super) fn bits(self) -> u8 {
        self.0
    }

    /// Whether `source` cordons it.
    pub(crate) fn has(self, source: Source) -> bool {
        self.0 & source.bit() != 0
    }

    /// The same, with `source` cordoning it (`on`) or not.
    pub(super) fn with(self, source: Source, on: bool) -> CordonedBy {
        if on {
            CordonedBy(self.0 | source.bit())
        } else {
            CordonedBy(self.0 & !source.bit())
        }
    }

    /// Cordoned: some source says so.
    pub(crate) fn any(self) -> bool {
        self.0 != 0
    }

    /// The sources, as `cordonedBy` lists them (`file`, `instance`, `fleet`, in that order).
    pub(crate) fn names(self) -> Vec<&'static str> {
        Source::ALL
            .iter()
            .filter(|s| self.has(**s))
            .map(|s| s.name())
            .collect()
    }

    /// What an admin's cordon (`on`) or uncordon leaves. `shared`: `None` without `[redis]`,
    /// else whether the fleet's Redis took it. A cordon Redis took is the fleet's; one it did not
    /// (or without Redis) is this instance's. An uncordon lifts both, never the file's.
    pub(super) fn by_admin(self, on: bool, shared: Option<bool>) -> CordonedBy {
        match (on, shared) {
            (true, Some(true)) => self.with(Source::Fleet, true).with(Source::Instance, false),
            (true, _) => self.with(Source::Instance, true),
            (false, _) => self
                .with(Source::Instance, false)
                .with(Source::Fleet, false),
        }
    }

    /// What this instance's cordon becomes once written to the fleet's Redis: the fleet's.
    pub(super) fn shared(self) -> CordonedBy {
        if self.has(Source::Instance) {
            self.with(Source::Instance, false).with(Source::Fleet, true)
        } else {
            self
        }
    }

    /// What a node put in this one's place by a reload holds: this one's admin and fleet cordons
    /// (the operator's word about the name), and `file` (its own table's).
    pub(super) fn carried(self, file: bool) -> CordonedBy {
        self.with(Source::File, file)
    }
}

/// The fleet's cordons under `network_prefix` (`{key_prefix}{network ID}:`): one hash.
pub(super) fn fleet_key(network_prefix: &str) -> String {
    format!("{network_prefix}cordons")
}

/// Reads whether each name of `ARGV` is cordoned in the hash `KEYS[1]`: an array of 1 or 0, in
/// order (all 0 when there is no hash), or `{-1}` when the key holds something else. Only
/// 0s and 1s are copied out of Redis, whatever its values.
pub(super) const READ: &str = r"
local t = redis.call('TYPE', KEYS[1])['ok']
local out = {}
if t == 'none' then
  for i = 1, #ARGV do out[i] = 0 end
  return out
end
if t ~= 'hash' then return {-1} end
for i, field in ipairs(ARGV) do out[i] = redis.call('HEXISTS', KEYS[1], field) end
return out
";

/// Cordons the name `ARGV[1]` in the hash `KEYS[1]` when `ARGV[2]` is `1` (its value `ARGV[3]`),
/// else uncordons it; answers 1, or -1 (writing nothing) when the key holds something else.
pub(super) const WRITE: &str = r"
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return -1 end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
";

/// What [`READ`] answered for `n` names: whether each is cordoned, or `None` when the answer is
/// not one (the key holds something else than a hash, or the reply has another shape).
pub(super) fn marks(reply: &[i64], n: usize) -> Option<Vec<bool>> {
    if reply.len() != n {
        return None;
    }
    reply
        .iter()
        .map(|m| match m {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        })
        .collect()
}

/// Why the fleet's cordons could not be read or written: the caller keeps what it knew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FleetError {
    /// Redis did not answer (the shared tier's breaker open, a timeout, an error).
    Redis(SharedError),
    /// The key holds something else than a hash of cordons.
    Foreign,
    /// The pool's network is not settled yet: the key, which carries it, is not known.
    Unsettled,
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::Redis(SharedError::Unavailable) => f.write_str("Redis unavailable"),
            FleetError::Redis(SharedError::Timeout) => f.write_str("Redis did not answer in time"),
            FleetError::Redis(SharedError::Failed) => f.write_str("Redis failed"),
            FleetError::Foreign => f.write_str("the cordons' key holds something else than a hash"),
            FleetError::Unsettled => f.write_str("the pool's network is not settled yet"),
        }
    }
}

/// The fleet's cordons in its Redis (with `[redis]`; one per gateway).
pub(super) struct FleetCordons {
    shared: Arc<Shared>,
    read: redis::Script,
    write: redis::Script,
    /// An admin's cordons (`true`) and uncordons that Redis has not taken yet, by name; written
    /// before each read. Held by whoever writes, and by a read until what it read is applied,
    /// so that a read made before a write never undoes it.
    pub(super) unsent: tokio::sync::Mutex<BTreeMap<Box<str>, bool>>,
    /// The key was last found to hold something else than a hash (said once, at warn).
    foreign: AtomicBool,
}

impl FleetCordons {
    /// The cordons under `shared`'s `[redis] key_prefix` and network.
    pub(super) fn new(shared: Arc<Shared>) -> FleetCordons {
        FleetCordons {
            shared,
            read: redis::Script::new(READ),
            write: redis::Script::new(WRITE),
            unsent: tokio::sync::Mutex::new(BTreeMap::new()),
            foreign: AtomicBool::new(false),
        }
    }

    /// [`fleet_key`] under the pool's network, once it is settled.
    fn key(&self) -> Result<String, FleetError> {
        let network = self.shared.network().prefix();
        network.map(fleet_key).ok_or(FleetError::Unsettled)
    }

    /// Cordons (`on`) or uncordons `name` for the fleet: one command, cut at `[redis] timeout`.
    pub(super) async fn write(&self, name: &str, on: bool) -> Result<(), FleetError> {
        let key = self.key()?;
        let mut invocation = self.write.prepare_invoke();
        invocation
            .key(&key)
            .arg(name)
            .arg(if on { "1" } else { "0" })
            .arg(crate::metrics::unix_ms());
        let answer: i64 = self
            .shared
            .invoke(OP, &invocation)
            .await
            .map_err(FleetError::Redis)?;
        self.judge(&key, (answer == 1).then_some(()))
    }

    /// Whether the fleet cordons each of `names`: one command, cut at `[redis] timeout`.
    pub(super) async fn read(&self, names: &[Arc<str>]) -> Result<Vec<bool>, FleetError> {
        let key = self.key()?;
        let mut invocation = self.read.prepare_invoke();
        invocation.key(&key);
        for name in names {
            invocation.arg(&**name);
        }
        let reply: Vec<i64> = self
            .shared
            .invoke(OP, &invocation)
            .await
            .map_err(FleetError::Redis)?;
        self.judge(&key, marks(&reply, names.len()))
    }

    /// `Err(Foreign)` for `None`, said once at warn until the key holds cordons again.
    fn judge<T>(&self, key: &str, answer: Option<T>) -> Result<T, FleetError> {
        let foreign = answer.is_none();
        if self.foreign.swap(foreign, Ordering::Relaxed) != foreign {
            if foreign {
                tracing::warn!(key = %key, "fleet cordons: the key holds something else than a hash of cordons; the cordons known stay until it does");
            } else {
                tracing::info!(key = %key, "fleet cordons: the key holds cordons again");
            }
        }
        answer.ok_or(FleetError::Foreign)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: CordonedBy = CordonedBy(1);

    #[test]
    fn a_node_is_cordoned_while_any_source_says_so_and_lists_them_in_order() {
        let none = CordonedBy::default();
        assert!(!none.any());
        assert!(none.names().is_empty());
        let all = none
            .with(Source::Fleet, true)
            .with(Source::File, true)
            .with(Source::Instance, true);
        assert_eq!(all.names(), ["file", "instance", "fleet"]);
        let fleet_only = all.with(Source::File, false).with(Source::Instance, false);
        assert!(fleet_only.any());
        assert_eq!(fleet_only.names(), ["fleet"]);
        assert_eq!(CordonedBy::from_bits(all.bits()), all);
        assert_eq!(CordonedBy::from_bits(0xff), all, "unknown bits are dropped");
    }

    #[test]
    fn an_admins_uncordon_lifts_the_instance_and_the_fleet_never_the_file() {
        let held = FILE.with(Source::Instance, true).with(Source::Fleet, true);
        for shared in [None, Some(true), Some(false)] {
            let after = held.by_admin(false, shared);
            assert_eq!(after, FILE, "{shared:?}");
            assert!(after.any(), "the file still cordons it");
            assert_eq!(CordonedBy::default().by_admin(false, shared), CordonedBy(0));
        }
    }

    #[test]
    fn an_admins_cordon_is_the_fleets_once_redis_took_it_else_this_instances() {
        let none = CordonedBy::default();
        assert_eq!(none.by_admin(true, None).names(), ["instance"]);
        assert_eq!(none.by_admin(true, Some(false)).names(), ["instance"]);
        assert_eq!(none.by_admin(true, Some(true)).names(), ["fleet"]);
        // An instance's cordon written later becomes the fleet's; the file's stays.
        let pending = FILE.by_admin(true, Some(false));
        assert_eq!(pending.names(), ["file", "instance"]);
        assert_eq!(pending.shared().names(), ["file", "fleet"]);
        assert_eq!(FILE.shared(), FILE);
        // Written at once, an older instance cordon is the fleet's too.
        assert_eq!(
            pending.by_admin(true, Some(true)).names(),
            ["file", "fleet"]
        );
    }

    #[test]
    fn a_replacing_node_keeps_the_names_cordons_and_takes_its_own_files() {
        let old = FILE.with(Source::Fleet, true);
        assert_eq!(old.carried(false).names(), ["fleet"]);
        assert_eq!(CordonedBy::default().carried(true).names(), ["file"]);
        assert_eq!(old.carried(true), old);
    }

    #[test]
    fn the_key_is_under_the_fleets_prefix_and_network() {
        assert_eq!(fleet_key("snowgate:1:"), "snowgate:1:cordons");
        assert_eq!(fleet_key("eu-1:5:"), "eu-1:5:cordons");
    }

    #[test]
    fn only_an_answer_of_zeros_and_ones_for_every_name_counts() {
        assert_eq!(marks(&[0, 1, 0], 3), Some(vec![false, true, false]));
        assert_eq!(marks(&[], 0), Some(vec![]));
        assert_eq!(marks(&[-1], 1), None, "not a hash");
        assert_eq!(marks(&[1], 2), None, "another shape");
        assert_eq!(marks(&[2, 0], 2), None);
    }
}
