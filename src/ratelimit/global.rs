//! Global quotas: one quota per client across a fleet, held in Redis (`[rate_limit] scope =
//! "global"`, the default with `[redis]`).
//!
//! **The decision** is GCRA, as governor does it locally, run by one atomic Lua script
//! (`gcra.lua`) over one key per client, on Redis's own clock (`TIME`): instances' clocks do not
//! matter, and no script touches another key, so a Redis Cluster is fine. Units are the local
//! limiter's (tenths of a cost unit).
//!
//! **Leases.** A round trip per call would put Redis on every cache hit, so each instance leases
//! a slice of a client's budget ([`lease_size`]: about 1/2 s of the client's rate, at most
//! `burst / (2 × expected_instances)`, at least the call's cost) and spends it locally. When a
//! lease runs below half (or below the cost of the call just paid), one refill per client goes
//! to Redis in the background; a call that finds too little spends what is there and waits for
//! Redis for the rest (at most `[redis] timeout`), asking for a lease on top. A lease unused for
//! [`RETURN_AFTER`] goes back to Redis (the script moves the TAT back, never below now), so an
//! instance does not sit on budget another instance needs. What Redis refuses is remembered
//! until the wait it gave has passed: a client over quota is then refused here, without a round
//! trip per call.
//!
//! **Keys**: `{key_prefix}q:ip:<address>` (an IPv6 client's /64), `{key_prefix}q:key:<the first
//! 32 hex digits of the SHA-256 of a rate-limit key>` (never the key itself) and
//! `{key_prefix}q:overflow` (the shared quota of clients beyond `max_clients`). Each expires when
//! its client has been idle long enough to be the same as a new one.
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
use prometheus::IntCounterVec;
use redis::Script;
use sha2::{Digest, Sha256};

pub use super::lease::{lease_size, model, Answer, Ask, GlobalQuota, Lease, RETURN_AFTER};
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
        .arg(ask.want)
        .arg(ask.least);
    let (granted, wait): (i64, i64) = shared.invoke(OP, &invocation).await?;
    Ok(Answer {
        granted: u64::try_from(granted).unwrap_or(0),
        wait_us: u64::try_from(wait).unwrap_or(0),
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
    /// A call that cannot wait (a refused call, charged by the front) and found no lease: decide
    /// at this instance's share, then [`Global::debit`] Redis.
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
    /// `{key_prefix}q:`.
    prefix: String,
    ip_quota: GlobalQuota,
    ips: DashMap<IpAddr, Arc<Lease>>,
    /// The leases of `[[rate_limit.keys]]`, by position (never evicted, never in the overflow).
    keys: Vec<Arc<Lease>>,
    /// Clients beyond `max_clients` share this one.
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
        let n = config.expected_instances;
        let prefix = format!("{}q:", shared.prefix());
        let keys = config
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let digest = Sha256::digest(k.key.as_bytes());
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                let (rps, burst) = config.key_quota(i);
                let quota = GlobalQuota::new(rps, burst, n);
                Arc::new(Lease::new(format!("{prefix}key:{hex}"), quota, 0))
            })
            .collect();
        // As locally, the overflow quota is shared by many: room for a few clients' worth.
        let overflow = GlobalQuota::new(
            config.requests_per_second.saturating_mul(4),
            config.burst.saturating_mul(4),
            n,
        );
        Global {
            shared,
            script: Script::new(SCRIPT),
            overflow: Arc::new(Lease::new(format!("{prefix}overflow"), overflow, 0)),
            prefix,
            ip_quota: GlobalQuota::new(config.requests_per_second, config.burst, n),
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

    /// The lease `client` spends from (`None`: a key index out of range, which is not limited).
    fn lease(&self, client: &ClientId, now_ms: u64) -> Option<Arc<Lease>> {
        match client {
            ClientId::Key(i) => self.keys.get(*i).cloned(),
            ClientId::Ip(ip) => {
                if let Some(l) = self.ips.get(ip) {
                    return Some(l.clone());
                }
                if self.ips.len() >= self.max_clients {
                    self.prune_wanted.notify_one();
                    return Some(self.overflow.clone());
                }
                let lease = self.ips.entry(*ip).or_insert_with(|| {
                    let key = format!("{}ip:{ip}", self.prefix);
                    Arc::new(Lease::new(key, self.ip_quota, now_ms))
                });
                Some(lease.clone())
            }
        }
    }

    /// Units `client`'s lease holds now (0 without one). Adds no lease.
    pub fn held(&self, client: &ClientId) -> u64 {
        let lease = match client {
            ClientId::Key(i) => self.keys.get(*i).cloned(),
            ClientId::Ip(ip) => match self.ips.get(ip) {
                Some(lease) => Some(lease.clone()),
                None if self.ips.len() >= self.max_clients => Some(self.overflow.clone()),
                None => None,
            },
        };
        lease.map_or(0, |l| l.held())
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
        if !self.shared.available() {
            return Step::Now(Verdict::Down);
        }
        let now = self.now_ms();
        let Some(lease) = self.lease(client, now) else {
            return Step::Now(Verdict::Allowed);
        };
        let units = u64::from(units);
        if lease.take(units, now) {
            if lease.low(units) {
                self.refill(&lease, units);
            }
            return Step::Now(Verdict::Allowed);
        }
        if let Some(wait) = lease.denied(now) {
            return Step::Now(Verdict::Over(wait));
        }
        if units > lease.quota().burst {
            // Costs more than the whole burst: validation prevents it; refuse rather than ask.
            return Step::Now(Verdict::Over(Duration::from_secs(1)));
        }
        if !can_wait {
            return Step::Now(Verdict::Share);
        }
        let this = Arc::clone(self);
        Step::Wait(Box::pin(async move { this.decide(&lease, units).await }))
    }

    /// Decides a call of `units` the lease could not pay for: spends what the lease holds and asks
    /// Redis for the rest, plus a lease unless a refill is under way.
    async fn decide(&self, lease: &Lease, units: u64) -> Verdict {
        let held = lease.take_all(self.now_ms());
        if held >= units {
            // A refill landed meanwhile.
            lease.credit(held - units);
            return Verdict::Allowed;
        }
        let need = units - held;
        let refill = lease.start_refill();
        let extra = if refill { lease.size_for(units) } else { 0 };
        let ask = Ask {
            give: 0,
            want: need + extra,
            least: need,
        };
        let answer = run(&self.shared, &self.script, lease.key(), lease.quota(), ask).await;
        if refill {
            lease.end_refill();
        }
        match answer {
            Ok(a) if a.granted >= need => {
                self.metrics.leases.with_label_values(&["granted"]).inc();
                lease.credit(a.granted - need);
                Verdict::Allowed
            }
            Ok(a) => {
                self.metrics.leases.with_label_values(&["refused"]).inc();
                lease.credit(held);
                lease.refused(self.now_ms(), a.wait_us);
                Verdict::Over(Duration::from_micros(a.wait_us))
            }
            Err(_) => {
                lease.credit(held);
                Verdict::Down
            }
        }
    }

    /// Refills a lease that runs low after a call of `units`, in the background (one refill per
    /// lease at a time).
    fn refill(self: &Arc<Self>, lease: &Arc<Lease>, units: u64) {
        if !self.shared.available() || !lease.start_refill() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lease.end_refill();
            return;
        };
        let (this, lease) = (Arc::clone(self), Arc::clone(lease));
        runtime.spawn(async move {
            let ask = Ask {
                give: 0,
                want: lease.size_for(units),
                least: 1,
            };
            let answer = run(&this.shared, &this.script, lease.key(), lease.quota(), ask).await;
            match answer {
                Ok(a) if a.granted > 0 => {
                    this.metrics.leases.with_label_values(&["granted"]).inc();
                    lease.credit(a.granted);
                }
                Ok(a) => {
                    this.metrics.leases.with_label_values(&["refused"]).inc();
                    lease.refused(this.now_ms(), a.wait_us);
                }
                Err(_) => {}
            }
            lease.end_refill();
        });
    }

    /// Debits `units` that a call decided at this instance's share ([`Verdict::Share`]) spent, in
    /// the background, with a lease on top (unless a refill is under way), so that the client's
    /// next such calls are paid from it; if Redis refuses, the client's next calls are refused
    /// until its wait has passed.
    pub fn debit(self: &Arc<Self>, client: &ClientId, units: u32) {
        let now = self.now_ms();
        let Some(lease) = self.lease(client, now) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = Arc::clone(self);
        let units = u64::from(units);
        runtime.spawn(async move {
            let refill = lease.start_refill();
            let extra = if refill { lease.size_for(units) } else { 0 };
            let ask = Ask {
                give: 0,
                want: units + extra,
                least: units,
            };
            let answer = run(&this.shared, &this.script, lease.key(), lease.quota(), ask).await;
            if refill {
                lease.end_refill();
            }
            match answer {
                Ok(a) if a.granted >= units => {
                    this.metrics.leases.with_label_values(&["granted"]).inc();
                    lease.credit(a.granted - units);
                }
                Ok(a) => {
                    this.metrics.leases.with_label_values(&["refused"]).inc();
                    lease.refused(this.now_ms(), a.wait_us);
                }
                Err(_) => {}
            }
        });
    }

    /// Gives idle leases back to Redis (every lease when the instance stops: `all`), at most
    /// [`RETURNS_PER_SWEEP`]. Forgetting empty entries is the limiter's pruning
    /// ([`Global::prune`], every few seconds).
    pub async fn sweep(&self, all: bool) {
        if !self.shared.available() {
            // Keep what is leased: it is spendable here while Redis is away.
            return;
        }
        let now = self.now_ms();
        let mut idle: Vec<(Arc<Lease>, u64)> = Vec::new();
        let candidates = self
            .keys
            .iter()
            .cloned()
            .chain(std::iter::once(self.overflow.clone()))
            .chain(self.ips.iter().map(|e| e.value().clone()));
        for lease in candidates {
            if idle.len() >= RETURNS_PER_SWEEP {
                break;
            }
            let units = if all {
                lease.drain()
            } else {
                lease.drain_idle(now)
            };
            if units > 0 {
                idle.push((lease, units));
            }
        }
        for (lease, units) in idle {
            let ask = Ask {
                give: units,
                want: 0,
                least: 0,
            };
            if run(&self.shared, &self.script, lease.key(), lease.quota(), ask)
                .await
                .is_ok()
            {
                self.metrics.leases.with_label_values(&["returned"]).inc();
            }
        }
    }

    /// Forgets client addresses whose lease holds nothing (their state is all in Redis).
    pub fn prune(&self) {
        let now = self.now_ms();
        self.ips.retain(|_, l| !l.forgettable(now));
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
        let key = g.keys[0].key();
        assert!(key.starts_with("snowgate:q:key:"), "{key}");
        assert_eq!(key.len(), "snowgate:q:key:".len() + 32);
        assert!(!key.contains("secret"));
        assert_eq!(g.overflow.key(), "snowgate:q:overflow");
    }
}
