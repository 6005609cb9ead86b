//! Global quotas: one quota per client across a fleet, held in Redis (`[rate_limit] scope =
//! "global"`, the default with `[redis]`).
//!
//! **The decision** is GCRA, as governor does it locally, run by one atomic Lua script
//! (`gcra.lua`) over one key per client, on Redis's own clock (`TIME`): instances' clocks do not
//! matter, and no script touches another key, so a Redis Cluster is fine. Units are the local
//! limiter's (tenths of a cost unit).
//!
//! **Leases.** A round trip per call would put Redis on every cache hit, so each instance leases
//! a slice of a client's budget ([`lease_size`]: about 1/2 s of the client's rate, at most a
//! quarter of its burst) and spends it locally. When a lease runs low, one background script
//! call per client refills it and reports what was spent from it; a call that finds too little
//! gives the scraps back and is decided by Redis (waiting at most `[redis] timeout`), with a lease
//! on top. Redis grants a lease only from what the client has beyond half its burst, and grants a
//! call from the units out on lease when its room is spent (they are the client's budget, held by
//! some instance): a client under its budget is never refused, from its first call, whatever the
//! number of instances; what an instance then spends of a lease granted again elsewhere is
//! charged when it reports it, and repaid by waiting (`lease.rs` has the argument). A lease
//! unused for [`RETURN_AFTER`] goes back to Redis. What Redis refuses is remembered until the
//! wait it gave has passed: a client over quota is then refused here, without a round trip per
//! call. Calls that cannot wait (refused calls, a body's bytes as they arrive) are owed: charged
//! to Redis at the lease's next script call whatever the room, so they are never free.
//!
//! **Keys**: `{key_prefix}{network ID}:q:ip:<address>` (an IPv6 client's /64),
//! `{key_prefix}{network ID}:q:key:<the first 32 hex digits of the SHA-256 of a rate-limit key>`
//! (never the key itself), `{key_prefix}{network ID}:q:net:<network>` (`198.51.100.0/24`,
//! `2001:db8:1::/48`: the shared quota of a network's addresses that found the lease table full,
//! past `max_clients`) and `{key_prefix}{network ID}:q:overflow` (the networks' beyond
//! `max_clients` networks). Each expires when its client has been idle long enough to be the same
//! as a new one. The network is the pool's settled one (`crate::shared::network`): two fleets of
//! different networks on one Redis and one prefix (a testnet's free tier, a mainnet's paid one)
//! never spend each other's budgets. Until it is settled no key is known, and calls are decided as
//! while Redis is down (`on_redis_down`; what `local` allows then is owed, and charged once the
//! network is settled and Redis answers).
//!
//! When Redis cannot answer, this module says so ([`Verdict::Down`]) and the limiter
//! (`super::Limiter`) decides by `[rate_limit] on_redis_down`.
//!
//! This file is the Redis side: the script run, a call decided by a lease or by Redis, refills,
//! debits, the sweeper and the pruning. What they compute with (the quota, the lease, the
//! script's model) is `lease.rs`, plain arithmetic tested without Redis or a runtime.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ipnet::IpNet;
use prometheus::IntCounterVec;
use redis::Script;
use sha2::{Digest, Sha256};

pub use super::lease::{
    lease_size, model, Answer, Ask, GlobalQuota, Lease, Stored, OUT_TTL_MS, RETURN_AFTER,
};
use crate::call::ClientId;
use crate::config::RateLimitConfig;
use crate::metrics::Metrics;
use crate::shared::{Shared, SharedError};

/// The script, one decision over one key (see its header for the arguments and the answer).
pub const SCRIPT: &str = include_str!("gcra.lua");

/// How often the sweeper looks for idle leases (a lease goes back 1 to 1.5 s after its last use).
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// Leases given back per sweep at most (each is one command): a sweep's work is bounded.
pub const RETURNS_PER_SWEEP: usize = 256;

/// The redis-errors metric's label for the quota script.
const OP: &str = "quota";

/// Runs the script once for `key` (one command, cut at `[redis] timeout` by the shared tier).
pub async fn run(
    shared: &Shared,
    script: &Script,
    key: &str,
    quota: &GlobalQuota,
    ask: Ask,
) -> Result<Answer, SharedError> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(key)
        .arg(quota.interval_us.to_string())
        .arg(quota.burst)
        .arg(ask.give)
        .arg(ask.spent)
        .arg(ask.force)
        .arg(ask.need)
        .arg(ask.lease)
        .arg(OUT_TTL_MS);
    let (granted, leased, wait, remaining): (i64, i64, i64, i64) =
        shared.invoke(OP, &invocation).await?;
    let whole = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Answer {
        granted: whole(granted),
        leased: whole(leased),
        wait_us: whole(wait),
        remaining,
    })
}

/// What global quotas say about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the client's global quota.
    Allowed,
    /// Over it: retry after this long.
    Over(Duration),
    /// Redis cannot decide (breaker open, timeout, error): `on_redis_down` decides.
    Down,
    /// A call that cannot wait (a refused call, charged by the front) found no lease but, as far as
    /// this instance knows, budget: decide at this instance's share too, then [`Global::owe`] the
    /// units to Redis.
    Share,
}

/// A verdict now, or once Redis has answered.
pub enum Step {
    Now(Verdict),
    Wait(Pin<Box<dyn Future<Output = Verdict> + Send>>),
}

struct LeaseMetrics {
    leases: IntCounterVec,
}

/// The global quotas of one gateway: its leases, and the shared tier they come from.
pub struct Global {
    shared: Arc<Shared>,
    script: Script,
    /// `q:`: each key is under `{key_prefix}{network ID}:` too, added when the script runs.
    prefix: String,
    ip_quota: GlobalQuota,
    ips: DashMap<IpAddr, Arc<Lease>>,
    /// The leases of `[[rate_limit.keys]]`, by position (never evicted, never in the overflow).
    keys: Vec<Arc<Lease>>,
    /// The leases of networks whose new addresses found `ips` full (`super::client::network`), at
    /// most `max_clients`.
    nets: DashMap<IpNet, Arc<Lease>>,
    /// A network's quota: four addresses' worth.
    net_quota: GlobalQuota,
    /// Networks beyond `max_clients` share this one.
    overflow: Arc<Lease>,
    max_clients: usize,
    epoch: Instant,
    metrics: LeaseMetrics,
    /// Woken when the lease table is full: the limiter's pruner forgets empty leases then, not the
    /// request that found it full.
    pub(super) prune_wanted: tokio::sync::Notify,
}

impl Global {
    /// Global quotas for `config`'s clients, held in `shared`.
    pub fn new(config: &RateLimitConfig, shared: Arc<Shared>, metrics: &Metrics) -> Global {
        let prefix = String::from("q:");
        let keys = config
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let digest = Sha256::digest(k.key.as_bytes());
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                let (rps, burst) = config.key_quota(i);
                let quota = GlobalQuota::new(rps, burst);
                Arc::new(Lease::new(format!("{prefix}key:{hex}"), quota, 0))
            })
            .collect();
        // As locally, a network's quota and the overflow one are shared by many: room for a few
        // clients' worth.
        let shared_quota = GlobalQuota::new(
            config.requests_per_second.saturating_mul(4),
            config.burst.saturating_mul(4),
        );
        Global {
            shared,
            script: Script::new(SCRIPT),
            nets: DashMap::new(),
            net_quota: shared_quota,
            overflow: Arc::new(Lease::new(format!("{prefix}overflow"), shared_quota, 0)),
            prefix,
            ip_quota: GlobalQuota::new(config.requests_per_second, config.burst),
            ips: DashMap::new(),
            keys,
            max_clients: config.max_clients,
            epoch: Instant::now(),
            metrics: LeaseMetrics {
                leases: metrics.quota_leases.clone(),
            },
            prune_wanted: tokio::sync::Notify::new(),
        }
    }

    /// `lease`'s Redis key: `{key_prefix}{network ID}:` and its own; `None` before the pool's
    /// network is settled.
    fn redis_key(&self, lease: &Lease) -> Option<String> {
        let network = self.shared.network().prefix()?;
        Some(format!("{network}{}", lease.key()))
    }

    /// Runs the script for `lease` (`Unavailable` before the network is settled).
    async fn run(&self, lease: &Lease, ask: Ask) -> Result<Answer, SharedError> {
        let key = self.redis_key(lease).ok_or(SharedError::Unavailable)?;
        run(&self.shared, &self.script, &key, lease.quota(), ask).await
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The shared tier.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Client addresses with a lease entry.
    pub fn tracked(&self) -> usize {
        self.ips.len()
    }

    /// Networks with a lease entry (past `max_clients` addresses).
    pub fn networks(&self) -> usize {
        self.nets.len()
    }

    /// The lease `client` spends from (`None`: a key index out of range, which is not limited).
    fn lease(&self, client: &ClientId, now_ms: u64) -> Option<Arc<Lease>> {
        match client {
            ClientId::Key(i) => self.keys.get(*i).cloned(),
            ClientId::Ip(ip) => {
                if let Some(l) = self.ips.get(ip) {
                    return Some(l.clone());
                }
                if self.ips.len() < self.max_clients {
                    let lease = self.ips.entry(*ip).or_insert_with(|| {
                        let key = format!("{}ip:{ip}", self.prefix);
                        Arc::new(Lease::new(key, self.ip_quota, now_ms))
                    });
                    return Some(lease.clone());
                }
                self.prune_wanted.notify_one();
                let net = super::client::network(*ip);
                if let Some(l) = self.nets.get(&net) {
                    return Some(l.clone());
                }
                if self.nets.len() < self.max_clients {
                    let lease = self.nets.entry(net).or_insert_with(|| {
                        let key = format!("{}net:{net}", self.prefix);
                        Arc::new(Lease::new(key, self.net_quota, now_ms))
                    });
                    return Some(lease.clone());
                }
                Some(self.overflow.clone())
            }
        }
    }

    /// `client`'s lease if it has one. Adds none.
    fn existing(&self, client: &ClientId) -> Option<Arc<Lease>> {
        match client {
            ClientId::Key(i) => self.keys.get(*i).cloned(),
            ClientId::Ip(ip) => {
                if let Some(lease) = self.ips.get(ip) {
                    return Some(lease.clone());
                }
                if self.ips.len() < self.max_clients {
                    return None;
                }
                let net = super::client::network(*ip);
                if let Some(lease) = self.nets.get(&net) {
                    return Some(lease.clone());
                }
                (self.nets.len() >= self.max_clients).then(|| self.overflow.clone())
            }
        }
    }

    /// Units `client`'s lease holds now (0 without one). Adds no lease.
    pub fn held(&self, client: &ClientId) -> u64 {
        self.existing(client).map_or(0, |l| l.held())
    }

    /// `client`'s budget left as this instance knows it, in units (`None`: a key out of range). A
    /// client with no lease here is taken to have its whole burst (or, once its key is read by a
    /// call, what Redis says). Adds no lease.
    pub fn remaining(&self, client: &ClientId) -> Option<u64> {
        match self.existing(client) {
            Some(lease) => Some(lease.remaining(self.now_ms())),
            None => matches!(client, ClientId::Ip(_)).then_some(self.ip_quota.burst),
        }
    }

    /// Decides a call costing `units`: from the lease when it holds enough (a refill starts in the
    /// background when it runs low), else by Redis (`Step::Wait`), or, when the call `can_wait`
    /// not, [`Verdict::Share`].
    pub fn admit(self: &Arc<Self>, client: &ClientId, units: u32, can_wait: bool) -> Step {
        if units == 0 {
            // A free call (a hit with `cached_cost_factor = 0`) must not take or hold a lease.
            return Step::Now(Verdict::Allowed);
        }
        // While Redis is down, `on_redis_down` decides every call, leases included: "deny" then
        // means every charged call, however much lease this instance holds (a slow client's lease
        // can last minutes). The lease is kept for when Redis is back.
        // Before the pool's network is settled the keys, which carry it, are not known: as down.
        if !self.shared.available() || self.shared.network().prefix().is_none() {
            return Step::Now(Verdict::Down);
        }
        let now = self.now_ms();
        let Some(lease) = self.lease(client, now) else {
            return Step::Now(Verdict::Allowed);
        };
        let units = u64::from(units);
        if lease.take(units, now) {
            if lease.low(units) {
                self.sync(&lease);
            }
            return Step::Now(Verdict::Allowed);
        }
        if let Some(wait) = lease.denied(now, units) {
            return Step::Now(Verdict::Over(wait));
        }
        if units > lease.quota().burst {
            // Costs more than the whole burst: validation prevents it; refuse rather than ask.
            return Step::Now(Verdict::Over(Duration::from_secs(1)));
        }
        if !can_wait {
            // Decided by what this instance knows of the client's budget (Redis's last word, less
            // what was spent here since): the units are owed to Redis, and its answer corrects it.
            let left = lease.balance(now);
            let units_i = i64::try_from(units).unwrap_or(i64::MAX);
            if left < units_i {
                let wait_ms = ((units_i - left) as f64 / lease.quota().per_ms())
                    .ceil()
                    .max(1.0);
                return Step::Now(Verdict::Over(Duration::from_millis(wait_ms as u64)));
            }
            return Step::Now(Verdict::Share);
        }
        let this = Arc::clone(self);
        Step::Wait(Box::pin(async move { this.decide(&lease, units).await }))
    }

    /// Decides a call of `units` the lease could not pay for, by Redis: waits for the lease's turn
    /// (a refill in flight may land enough; one that does not is granted from anyway, being out
    /// on lease), then gives back what the lease holds, reports what was spent and owed, and asks
    /// for the call and a lease on top.
    async fn decide(&self, lease: &Lease, units: u64) -> Verdict {
        // Waiting for the turn coalesces a client's calls (the first brings a lease the others
        // spend). Past `[redis] timeout` (the call in flight is slow to end, or its task slow to
        // be run), decide beside it: a second script call is as correct, only not coalesced, and
        // a slow turn is no reason to decide without Redis.
        let _turn = tokio::time::timeout(self.shared.timeout(), lease.turn.lock())
            .await
            .ok();
        let now = self.now_ms();
        if lease.take(units, now) {
            return Verdict::Allowed;
        }
        if let Some(wait) = lease.denied(now, units) {
            return Verdict::Over(wait);
        }
        let mut ask = lease.report(true);
        ask.need = units;
        ask.lease = lease.quota().lease;
        match self.run(lease, ask).await {
            Ok(answer) => {
                lease.answered(&ask, &answer, self.now_ms());
                if answer.granted == units {
                    self.metrics.leases.with_label_values(&["granted"]).inc();
                    Verdict::Allowed
                } else {
                    self.metrics.leases.with_label_values(&["refused"]).inc();
                    Verdict::Over(Duration::from_micros(answer.wait_us))
                }
            }
            Err(_) => {
                lease.unreport(&ask);
                Verdict::Down
            }
        }
    }

    /// Tells Redis what the lease spent and owes and refills it, in the background (one queued
    /// per lease; a decision in flight reports for it).
    fn sync(self: &Arc<Self>, lease: &Arc<Lease>) {
        if !self.shared.available() || !lease.start_sync() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lease.end_sync();
            return;
        };
        let (this, lease) = (Arc::clone(self), Arc::clone(lease));
        runtime.spawn(async move {
            // A decision holding the turn reports and leases for everyone.
            if let Ok(_turn) = lease.turn.try_lock() {
                let mut ask = lease.report(false);
                if lease.low(0) {
                    // A whole lease on top of what is left: topping up to one lease instead made
                    // a script call every half lease (1.5 times the calls at 10,000 clients).
                    ask.lease = lease.quota().lease;
                }
                match this.run(&lease, ask).await {
                    Ok(answer) => {
                        if answer.leased > 0 {
                            this.metrics.leases.with_label_values(&["granted"]).inc();
                        }
                        lease.answered(&ask, &answer, this.now_ms());
                    }
                    Err(_) => lease.unreport(&ask),
                }
            }
            lease.end_sync();
        });
    }

    /// Owes `units` that a call decided at this instance's share ([`Verdict::Share`]) spent: charged
    /// to Redis at the lease's next script call (started now in the background), whatever the
    /// room; if that leaves the client over its budget, its next calls wait for it.
    pub fn owe(self: &Arc<Self>, client: &ClientId, units: u32) {
        let now = self.now_ms();
        if let Some(lease) = self.lease(client, now) {
            lease.owe(u64::from(units), now);
            self.sync(&lease);
        }
    }

    /// Gives idle leases back to Redis with what they spent and owe (every lease when the instance
    /// stops: `all`), at most [`RETURNS_PER_SWEEP`]. Forgetting empty entries is the limiter's
    /// pruning ([`Global::prune`], every few seconds).
    pub async fn sweep(&self, all: bool) {
        if !self.shared.available() || self.shared.network().prefix().is_none() {
            // Keep what is leased: it is spendable here while Redis is away.
            return;
        }
        let now = self.now_ms();
        let mut due: Vec<Arc<Lease>> = Vec::new();
        let candidates = self
            .keys
            .iter()
            .cloned()
            .chain(std::iter::once(self.overflow.clone()))
            .chain(self.nets.iter().map(|e| e.value().clone()))
            .chain(self.ips.iter().map(|e| e.value().clone()));
        for lease in candidates {
            if due.len() >= RETURNS_PER_SWEEP {
                break;
            }
            let something = lease.held() > 0 || lease.unreported();
            if something && (all || lease.idle(now)) {
                due.push(lease);
            }
        }
        for lease in due {
            let Ok(_turn) = lease.turn.try_lock() else {
                continue;
            };
            let ask = lease.report(true);
            match self.run(&lease, ask).await {
                Ok(answer) => {
                    if ask.give > 0 {
                        self.metrics.leases.with_label_values(&["returned"]).inc();
                    }
                    lease.answered(&ask, &answer, self.now_ms());
                }
                Err(_) => lease.unreport(&ask),
            }
        }
    }

    /// Forgets client addresses and networks whose lease holds nothing (their state is all in
    /// Redis).
    pub fn prune(&self) {
        let now = self.now_ms();
        self.ips.retain(|_, l| !l.forgettable(now));
        self.nets.retain(|_, l| !l.forgettable(now));
    }

    /// Sweeps every [`SWEEP_EVERY`] until `stop` flips, then gives back what is still leased (an
    /// instance that stops does not take its clients' budget with it; best effort, one command
    /// per lease).
    pub fn spawn_sweeper(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => this.sweep(false).await,
                    _ = stop.changed() => break,
                }
            }
            this.sweep(true).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_never_hold_the_client_key_itself() {
        let cfg = RateLimitConfig {
            keys: vec![crate::config::KeyQuota::new(
                "a-very-secret-rate-limit-key",
                10,
                10,
            )],
            ..Default::default()
        };
        let metrics = Metrics::new();
        let shared = Shared::new(
            &crate::config::RedisConfig {
                url: Some("redis://127.0.0.1:1/0".into()),
                ..Default::default()
            },
            &metrics,
        )
        .unwrap();
        let g = Global::new(&cfg, shared, &metrics);
        // Under `{key_prefix}{network ID}:`, added when the script runs.
        let key = g.keys[0].key();
        assert!(key.starts_with("q:key:"), "{key}");
        assert_eq!(key.len(), "q:key:".len() + 32);
        assert!(!key.contains("secret"));
        assert_eq!(g.overflow.key(), "q:overflow");
    }
}
