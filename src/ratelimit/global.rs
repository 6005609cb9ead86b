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

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use prometheus::IntCounterVec;
use redis::Script;
use sha2::{Digest, Sha256};

use super::SCALE;
use crate::call::ClientId;
use crate::config::RateLimitConfig;
use crate::metrics::Metrics;
use crate::shared::{Shared, SharedError};

/// The script, one decision over one key (see its header for the arguments and the answer).
pub const SCRIPT: &str = include_str!("gcra.lua");

/// A lease unused this long is given back to Redis.
pub const RETURN_AFTER: Duration = Duration::from_secs(1);

/// How often the sweeper looks for idle leases (a lease goes back 1 to 1.5 s after its last use).
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// Leases given back per sweep at most (each is one command): a sweep's work is bounded.
pub const RETURNS_PER_SWEEP: usize = 256;

/// The redis-errors metric's label for the quota script.
const OP: &str = "quota";

/// One client's global quota, as the script takes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalQuota {
    /// Microseconds per unit.
    pub interval_us: f64,
    /// Units spendable at once.
    pub burst: u64,
    /// Units an instance leases at a time (see [`lease_size`]).
    pub lease: u64,
}

impl GlobalQuota {
    /// The quota of `rps` cost units per second and `burst` cost units, for a fleet of
    /// `instances`.
    pub fn new(rps: u32, burst: u32, instances: u32) -> GlobalQuota {
        let rate = (u64::from(rps) * SCALE as u64).max(1);
        let burst = (u64::from(burst) * SCALE as u64).max(1);
        GlobalQuota {
            interval_us: 1e6 / rate as f64,
            burst,
            lease: lease_size(rate, burst, instances),
        }
    }
}

/// Units an instance leases from Redis at a time, for a client allowed `rate` units per second
/// and `burst` at once in a fleet of `instances`: half a second of the rate, at most `burst / (2 ×
/// instances)` (the instances' leases together hold at most half the burst, so they cannot starve
/// one another), at least 1. A lease is never smaller than the call it is taken for
/// ([`Lease::size_for`]).
///
/// Half a second, not less, because every lease is a script call, and with many slow clients
/// (the load benchmark's 10,000 clients at the shipped 50/s quota, about 3 hits a second each) a
/// tenth of a second's lease cost a round trip every 3 hits: 1.22 times the CPU per hit of local
/// quotas. What it costs: an instance can hold up to a lease unspent, so a client spraying the
/// fleet may find its budget elsewhere for a moment; over a 10 s window that is a few percent.
pub fn lease_size(rate: u64, burst: u64, instances: u32) -> u64 {
    let share = burst / (2 * u64::from(instances.max(1)));
    (rate / 2).min(share).max(1)
}

/// The script's state change, in Rust: what `gcra.lua` does with a key holding `tat` (`None`:
/// no key) at Redis time `now` (microseconds). The script is the authority; this model is here to
/// be property-tested, and must be kept in step with it.
pub fn model(tat: Option<f64>, now: f64, quota: &GlobalQuota, ask: Ask) -> (Option<f64>, Answer) {
    let interval = quota.interval_us;
    let tolerance = quota.burst as f64 * interval;
    // Relative to now, as the script (exact: both are whole microseconds).
    let mut ahead = tat.map_or(0.0, |t| (t - now).max(0.0).min((tolerance + 0.5).floor()));
    if ask.give > 0 {
        ahead = (ahead - ask.give as f64 * interval + 0.5).floor().max(0.0);
    }
    let room = ((tolerance - ahead) / interval + 1e-6).floor();
    let mut granted = (ask.want as f64).min(room);
    let mut wait = 0.0;
    if granted <= 0.0 || granted < ask.least as f64 {
        granted = 0.0;
        if ask.least > 0 {
            wait = (ahead + ask.least as f64 * interval - tolerance)
                .ceil()
                .max(1.0);
        }
    } else {
        ahead = (ahead + granted * interval + 0.5).floor();
    }
    let stored = (ahead > 0.0).then_some(now + ahead);
    (
        stored,
        Answer {
            granted: granted as u64,
            wait_us: wait as u64,
        },
    )
}

/// What one script call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// Units given back first.
    pub give: u64,
    /// Units wanted.
    pub want: u64,
    /// Fewest units worth taking.
    pub least: u64,
}

/// The script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Units taken: 0, or between `least` and `want`.
    pub granted: u64,
    /// When nothing was taken: microseconds until `least` units are available.
    pub wait_us: u64,
}

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

/// What an instance holds of one client's budget.
pub struct Lease {
    /// The client's Redis key.
    key: Box<str>,
    quota: GlobalQuota,
    /// Units leased and not spent yet.
    units: AtomicU64,
    /// A refill (or a call asking for a lease on top of its own units) is in flight.
    refilling: AtomicBool,
    /// When it was last used (ms since the limiter's epoch).
    last_ms: AtomicU64,
    /// Redis refused until then (ms since the epoch): refuse here without asking again.
    denied_until_ms: AtomicU64,
}

impl Lease {
    /// An empty lease of `quota` for `key`.
    pub fn new(key: String, quota: GlobalQuota, now_ms: u64) -> Lease {
        Lease {
            key: key.into_boxed_str(),
            quota,
            units: AtomicU64::new(0),
            refilling: AtomicBool::new(false),
            last_ms: AtomicU64::new(now_ms),
            denied_until_ms: AtomicU64::new(0),
        }
    }

    /// Spends `units` from the lease if it holds that many.
    pub fn take(&self, units: u64, now_ms: u64) -> bool {
        self.last_ms.store(now_ms, Ordering::Relaxed);
        self.units
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |have| {
                have.checked_sub(units)
            })
            .is_ok()
    }

    /// Adds units Redis granted.
    pub fn credit(&self, units: u64) {
        if units > 0 {
            self.units.fetch_add(units, Ordering::AcqRel);
        }
    }

    /// Units held now.
    pub fn held(&self) -> u64 {
        self.units.load(Ordering::Acquire)
    }

    /// Units to lease for calls costing `units`: the lease size, at least one such call.
    pub fn size_for(&self, units: u64) -> u64 {
        self.quota.lease.max(units)
    }

    /// Should a refill start after a call of `units` (the lease is below half its size, or
    /// would not pay for another such call)?
    pub fn low(&self, units: u64) -> bool {
        let held = self.held();
        held < self.quota.lease.div_ceil(2) || held < units
    }

    /// Takes everything the lease holds (a call that needs more spends it and asks Redis for
    /// the rest; what it does not use is credited back).
    fn take_all(&self, now_ms: u64) -> u64 {
        self.last_ms.store(now_ms, Ordering::Relaxed);
        self.units.swap(0, Ordering::AcqRel)
    }

    /// Redis refused: nothing before `now + wait` will be granted, so calls until then are
    /// refused here.
    pub fn refused(&self, now_ms: u64, wait_us: u64) {
        let until = now_ms.saturating_add(wait_us.div_ceil(1000).max(1));
        self.denied_until_ms.fetch_max(until, Ordering::AcqRel);
    }

    /// How long calls are still refused without asking Redis (`None`: ask).
    pub fn denied(&self, now_ms: u64) -> Option<Duration> {
        let until = self.denied_until_ms.load(Ordering::Acquire);
        (until > now_ms).then(|| Duration::from_millis(until - now_ms))
    }

    /// Takes the refill slot (one refill in flight per lease); false if one is under way.
    fn start_refill(&self) -> bool {
        !self.refilling.swap(true, Ordering::AcqRel)
    }

    fn end_refill(&self) {
        self.refilling.store(false, Ordering::Release);
    }

    /// Takes every unit out of an idle lease, to give back (0 when in use, refilling or empty).
    pub fn drain_idle(&self, now_ms: u64) -> u64 {
        let idle = now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed));
        if idle < RETURN_AFTER.as_millis() as u64 || self.refilling.load(Ordering::Acquire) {
            return 0;
        }
        self.units.swap(0, Ordering::AcqRel)
    }

    /// Nothing here that Redis does not know: an entry that can be forgotten.
    fn forgettable(&self, now_ms: u64) -> bool {
        self.held() == 0
            && !self.refilling.load(Ordering::Acquire)
            && self.denied(now_ms).is_none()
            && now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed))
                >= RETURN_AFTER.as_millis() as u64
    }
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
            .map(|k| {
                let digest = Sha256::digest(k.key.as_bytes());
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                let quota = GlobalQuota::new(k.requests_per_second, k.burst, n);
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
        if units > lease.quota.burst {
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
        let answer = run(&self.shared, &self.script, &lease.key, &lease.quota, ask).await;
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
            let answer = run(&this.shared, &this.script, &lease.key, &lease.quota, ask).await;
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
            let answer = run(&this.shared, &this.script, &lease.key, &lease.quota, ask).await;
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
                lease.units.swap(0, Ordering::AcqRel)
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
            if run(&self.shared, &self.script, &lease.key, &lease.quota, ask)
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
    use proptest::prelude::*;

    fn quota(rps: u32, burst: u32) -> GlobalQuota {
        GlobalQuota::new(rps, burst, 1)
    }

    #[test]
    fn leases_are_half_a_second_within_half_the_burst_per_instance() {
        // 200 cost units/s = 2000 units/s: half a second is 1000 units.
        assert_eq!(lease_size(2000, 10_000, 1), 1000);
        // Three instances share a burst of 600 units: at most 100 each.
        assert_eq!(lease_size(2000, 600, 3), 100);
        // Never nothing.
        assert_eq!(lease_size(5, 1, 8), 1);
        assert_eq!(GlobalQuota::new(200, 20, 3).lease, 33);
        assert_eq!(GlobalQuota::new(200, 20, 3).interval_us, 500.0);
    }

    #[test]
    fn a_new_client_gets_at_most_the_burst_then_waits_for_the_rate() {
        let q = quota(100, 10); // 1000 units/s, burst 100 units: 1000 us per unit.
        let ask = Ask {
            give: 0,
            want: 150,
            least: 1,
        };
        let (tat, a) = model(None, 1e12, &q, ask);
        assert_eq!(a.granted, 100);
        assert_eq!(tat, Some(1e12 + 100_000.0));
        let ask = Ask {
            give: 0,
            want: 10,
            least: 10,
        };
        let (same, a) = model(tat, 1e12, &q, ask);
        assert_eq!((same, a.granted, a.wait_us), (tat, 0, 10_000));
        let (_, a) = model(tat, 1e12 + 10_000.0, &q, ask);
        assert_eq!(a.granted, 10, "granted after the wait it gave");
    }

    #[test]
    fn returned_units_come_back_but_never_past_the_burst() {
        let q = quota(100, 10);
        let take = Ask {
            give: 0,
            want: 60,
            least: 60,
        };
        let (tat, _) = model(None, 0.0, &q, take);
        let give = Ask {
            give: 30,
            want: 0,
            least: 0,
        };
        let (tat, a) = model(tat, 0.0, &q, give);
        assert_eq!(
            a,
            Answer {
                granted: 0,
                wait_us: 0
            }
        );
        assert_eq!(tat, Some(30_000.0));
        // Giving back more than was taken only brings the client to a full burst.
        let (tat, _) = model(
            tat,
            0.0,
            &q,
            Ask {
                give: 10_000,
                ..give
            },
        );
        assert_eq!(tat, None);
        let all = Ask {
            give: 0,
            want: 1_000,
            least: 1,
        };
        assert_eq!(model(tat, 0.0, &q, all).1.granted, 100);
    }

    #[test]
    fn a_lease_spends_what_it_holds_and_remembers_a_refusal() {
        let l = Lease::new("k".into(), quota(100, 10), 0);
        assert!(!l.take(1, 0), "a new lease holds nothing");
        assert!(l.low(1));
        l.credit(100);
        assert!(!l.low(1));
        assert!(l.low(101), "would not pay for another such call");
        assert_eq!(l.size_for(1), 50);
        assert_eq!(l.size_for(80), 80, "at least one call");
        assert!(l.take(60, 5));
        assert!(!l.take(41, 5), "never below zero");
        assert!(l.take(40, 5));
        assert_eq!(l.held(), 0);
        assert_eq!(l.denied(10), None);
        l.refused(10, 2_500);
        assert_eq!(l.denied(10), Some(Duration::from_millis(3)));
        assert_eq!(l.denied(13), None);
        // A shorter refusal does not shorten a longer one.
        l.refused(10, 10_000);
        l.refused(11, 1_000);
        assert_eq!(l.denied(12), Some(Duration::from_millis(8)));
    }

    #[test]
    fn only_an_idle_lease_not_refilling_is_given_back() {
        let l = Lease::new("k".into(), quota(100, 10), 0);
        l.credit(50);
        assert!(l.take(10, 100));
        assert_eq!(l.drain_idle(600), 0, "used half a second ago");
        assert!(l.start_refill());
        assert_eq!(l.drain_idle(5_000), 0, "a refill is in flight");
        assert!(!l.start_refill(), "one refill at a time");
        l.end_refill();
        assert!(!l.forgettable(5_000), "holds units");
        assert_eq!(l.drain_idle(5_000), 40);
        assert_eq!(l.held(), 0);
        assert!(l.forgettable(5_000));
    }

    #[tokio::test]
    async fn keys_never_hold_the_client_key_itself() {
        let cfg = RateLimitConfig {
            keys: vec![crate::config::KeyQuota {
                key: "a-very-secret-rate-limit-key".into(),
                requests_per_second: 10,
                burst: 10,
            }],
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
        let key = &*g.keys[0].key;
        assert!(key.starts_with("snowgate:q:key:"), "{key}");
        assert_eq!(key.len(), "snowgate:q:key:".len() + 32);
        assert!(!key.contains("secret"));
        assert_eq!(&*g.overflow.key, "snowgate:q:overflow");
    }

    fn asks() -> impl Strategy<Value = (u64, Ask)> {
        // (microseconds since the previous call, what is asked)
        (0u64..50_000, 0u64..40, 0u64..400, 0u64..400).prop_map(|(dt, give, want, least)| {
            (
                dt,
                Ask {
                    give,
                    want,
                    least: least.min(want),
                },
            )
        })
    }

    proptest! {
        /// Whatever the calls and returns, a client never holds more than the burst plus the rate
        /// over the time elapsed plus what was given back, and every answer keeps its promises.
        #[test]
        fn the_script_never_grants_more_than_burst_plus_rate(
            rps in 1u32..2_000,
            burst in 1u32..200,
            calls in proptest::collection::vec(asks(), 1..60),
        ) {
            let q = quota(rps, burst);
            let mut tat = None;
            let mut now = 1.7e15;
            let start = now;
            let (mut granted, mut given) = (0u64, 0u64);
            for (dt, ask) in calls {
                now += dt as f64;
                let (next, a) = model(tat, now, &q, ask);
                prop_assert!(a.granted <= ask.want);
                prop_assert!(a.granted == 0 || a.granted >= ask.least);
                if a.granted == 0 && ask.least > 0 && ask.least <= q.burst {
                    // Waiting as told is enough (no one else spends meanwhile).
                    let (_, later) = model(next, now + a.wait_us as f64, &q, ask);
                    prop_assert!(later.granted >= ask.least, "{ask:?} {a:?} {later:?}");
                }
                if let Some(t) = next {
                    prop_assert!(t > now && t <= now + q.burst as f64 * q.interval_us + 1.0);
                }
                granted += a.granted;
                given += ask.give.min(granted.saturating_sub(given));
                tat = next;
            }
            let allowed = q.burst as f64 + (now - start) / q.interval_us + given as f64 + 1.0;
            prop_assert!((granted as f64) <= allowed, "{granted} > {allowed}");
        }
    }
}
