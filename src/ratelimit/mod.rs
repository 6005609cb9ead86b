//! Rate limits: a quota per client in cost units (governor), so one client flooding the endpoint
//! does not starve the others.
//!
//! * Clients presenting a key from `[[rate_limit.keys]]` (`Authorization: Bearer`, `X-Api-Key` or
//!   `rlToken`, the header `@avalanche-sdk/client` sends) get that key's own quota; everyone else is
//!   limited per IP ([`client::client_ip`]). Keys are parsed and compared as the admin keys are
//!   (`crate::keys`). Admin callers are not limited.
//! * Each call costs its method's `cost` from the registry; a cache hit costs `cost ×
//!   cached_cost_factor`. Quotas are kept in tenths of a unit so fractional costs are exact enough.
//! * A call snowgate refuses itself (unparsable, unknown method, not allowed, over the batch or
//!   nesting limits) costs `refused_cost`, charged by the front: nobody spins the parser for free.
//! * A request body costs one unit per `body_bytes_per_unit` (64 KiB) on top of its calls, charged
//!   by the router before a byte of it is read when its length is declared, else as it arrives
//!   ([`Limiter::body_units`]; a declared length up to the client's burst at once, the rest as the
//!   bytes arrive).
//! * Over quota: HTTP 429 with `Retry-After`, JSON-RPC -32005 with the client's id. A refusal is
//!   remembered until the wait it gave has passed: until then the client's requests are refused by
//!   the router before their body is read ([`Limiter::before_body`], `"id":null`), so a client over
//!   its quota cannot make snowgate read or parse anything.
//! * Memory is bounded: a client whose bucket has refilled is indistinguishable from a new one and
//!   is forgotten (pruned every few seconds, off the request path); past `max_clients` tracked
//!   addresses, a new one shares its network's quota ([`client::network`]: its IPv4 /24 or IPv6
//!   /48, four addresses' worth) instead of growing the table, and the pruner is woken (at most
//!   one prune a second). So many addresses of one network that fill the table spend their own
//!   network's quota, not that of newcomers from elsewhere. The networks' table is bounded by
//!   `max_clients` too; past it, the networks beyond share one overflow quota (what an attacker
//!   holding more networks than that can still spend for everyone).
//!
//! * With `[redis]` and `[rate_limit] scope = "global"`, each client has one quota across the
//!   fleet, held in Redis ([`global`], its arithmetic apart in `lease.rs`); the buckets here then
//!   hold this instance's share (`rate / expected_instances`), used only while Redis cannot
//!   decide and `on_redis_down = "local"`, and as a bound on calls that cannot wait for Redis
//!   (refused calls, a body's bytes as they arrive), which Redis is then told of.
//! * Every answer charged to a quota says where the caller stands (`state.rs`: the RateLimit
//!   header fields, and `GET /snowgate/quota`), from [`Limiter::state`].
//!
//! The request path reaches all of this through one handle, [`Quota`] (`quota.rs`, with the
//! per-call [`RateLimitLayer`]). The layer sits under the policy layer (refused calls cost nothing) and over the cache
//! (hits are counted, at their own price).

pub mod client;
pub mod global;
mod lease;
mod quota;
mod state;
pub mod usage;

pub use quota::{BodyCharge, Quota, RateLimit, RateLimitLayer};
pub use state::{Policy, QuotaState, POLICY_HEADER, STATE_HEADER};

use std::future::Future;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
// The std monotonic clock, not governor's default TSC-based one: that one is calibrated at start
// and can run fast on a loaded VM, refilling buckets early.
use governor::clock::{Clock, MonotonicClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota as Gcra, RateLimiter};
use ipnet::IpNet;
use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::Notify;

use crate::call::ClientId;
use crate::config::OnRedisDown;
use crate::error::ProxyError;
use crate::keys::{self, KeySet};
use crate::methods::Registry;
use crate::metrics::{Metrics, Part};
use crate::shared::Shared;
pub use client::ClientIpHeader;
// The section lives with the rest of the config; tests and benches still name it here.
pub use crate::config::{KeyQuota, RateLimitConfig};
use global::{Global, Step, Verdict};

/// Quota units are tenths of a cost unit.
const SCALE: f64 = 10.0;

/// The two headers besides `Authorization` a key may come in (names made once, not parsed per
/// lookup).
const X_API_KEY: http::HeaderName = http::HeaderName::from_static("x-api-key");
const RLTOKEN: http::HeaderName = http::HeaderName::from_static("rltoken");

/// The local quota of `rps` cost units per second and `burst` at once, divided by `share` (1: the
/// whole quota; `expected_instances`: an instance's share of a global one), its burst never below
/// `floor` cost units (the dearest method must stay affordable).
fn quota(rps: u32, burst: u32, share: u32, floor: u32) -> Gcra {
    let units = |v: u32| u64::from(v) * SCALE as u64;
    let share = u64::from(share.max(1));
    let tenths = |v: u64| {
        NonZeroU32::new(u32::try_from(v).unwrap_or(u32::MAX).max(1)).unwrap_or(NonZeroU32::MIN)
    };
    let burst = (units(burst) / share).max(units(floor));
    Gcra::per_second(tenths(units(rps) / share)).allow_burst(tenths(burst))
}

// The state-information middleware: a charge says what it left, for the RateLimit headers.
type Direct = RateLimiter<NotKeyed, InMemoryState, MonotonicClock, StateInformationMiddleware>;

/// A local bucket, and until when it is known to refuse.
struct Bucket {
    gcra: Direct,
    /// Units the bucket held after its last charge, and when (ms since the limiter's epoch):
    /// with the rate, what it holds now ([`Bucket::remaining`]).
    known: AtomicU64,
    known_ms: AtomicU64,
    /// Units back per millisecond, and the most it holds.
    per_ms: f64,
    burst: u64,
    /// The bucket refused a charge and said to wait until then (ms since the limiter's epoch):
    /// until then the client is refused before its request is read.
    denied_until_ms: AtomicU64,
    /// The units of the last charge refused (with global quotas: a lease that has since received
    /// that many may pay for the call again).
    denied_units: AtomicU64,
}

impl Bucket {
    fn new(quota: Gcra) -> Bucket {
        let per_ms = 1e-3 / quota.replenish_interval().as_secs_f64().max(1e-12);
        let burst = u64::from(quota.burst_size().get());
        Bucket {
            gcra: RateLimiter::direct_with_clock(quota, MonotonicClock)
                .with_middleware::<StateInformationMiddleware>(),
            known: AtomicU64::new(burst),
            known_ms: AtomicU64::new(0),
            per_ms,
            burst,
            denied_until_ms: AtomicU64::new(0),
            denied_units: AtomicU64::new(0),
        }
    }

    /// Notes that the bucket held `units` at `now_ms`.
    fn holds(&self, units: u64, now_ms: u64) {
        self.known.store(units, Ordering::Relaxed);
        self.known_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Units the bucket holds at `now_ms`.
    fn remaining(&self, now_ms: u64) -> u64 {
        let since = now_ms.saturating_sub(self.known_ms.load(Ordering::Relaxed));
        let back = (since as f64 * self.per_ms) as u64;
        self.known
            .load(Ordering::Relaxed)
            .saturating_add(back)
            .min(self.burst)
    }

    /// Remembers a refusal of `units` at `now_ms` that said to wait `wait`.
    fn refused(&self, now_ms: u64, wait: Duration, units: u32) {
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        self.denied_units.store(u64::from(units), Ordering::Relaxed);
        self.denied_until_ms
            .fetch_max(now_ms.saturating_add(wait), Ordering::Relaxed);
    }

    /// How long a charge of `units` is still refused without asking the bucket (`None`: ask
    /// it). A charge cheaper than the one refused waits that much less.
    fn denied(&self, now_ms: u64, units: u32) -> Option<Duration> {
        let until = self.denied_until_ms.load(Ordering::Relaxed);
        let refused = self.denied_units.load(Ordering::Relaxed);
        let sooner = refused.saturating_sub(u64::from(units)) as f64 / self.per_ms;
        let until = until.saturating_sub(sooner.ceil() as u64);
        (until > now_ms).then(|| Duration::from_millis(until - now_ms))
    }
}

/// One client address's bucket and when it was last charged.
struct Tracked {
    bucket: Bucket,
    last_ms: AtomicU64,
}

/// The quotas of every client (one per gateway).
pub struct Limiter {
    per_ip: DashMap<IpAddr, Tracked>,
    /// The quotas of the networks whose new addresses found `per_ip` full ([`client::network`]),
    /// at most `max_clients` of them.
    per_net: DashMap<IpNet, Tracked>,
    /// A network's quota: four addresses' worth.
    net_quota: Gcra,
    /// The latest end of any client's refusal (ms since `epoch`): while it is past, no client is
    /// refused before its body, and [`Limiter::before_body`] looks nobody up.
    denied_until_ms: AtomicU64,
    ip_quota: Gcra,
    /// A bucket unused this long has refilled: forgetting it changes nothing.
    refill: Duration,
    epoch: std::time::Instant,
    overflow: Bucket,
    /// The keys of `[[rate_limit.keys]]`, and each one's quota at the same position.
    keys: KeySet,
    per_key: Vec<Bucket>,
    max_clients: usize,
    /// Woken when the client table is full: the pruner runs then instead of the request.
    prune_wanted: Notify,
    /// Bytes of request body per cost unit (`body_bytes_per_unit`).
    body_bytes_per_unit: u64,
    /// The most one body costs, in units: an address's burst, and each key's.
    ip_burst: u32,
    key_bursts: Vec<u32>,
    cached_cost_factor: f64,
    refused_cost: u32,
    trusted: Vec<IpNet>,
    client_ip_header: ClientIpHeader,
    clock: MonotonicClock,
    limited: IntCounterVec,
    /// The clients refused most, for the status page.
    refusals: parking_lot::Mutex<std::collections::HashMap<ClientId, u64>>,
    /// What the status page and usage show for each key: its `name`, else `key:` and the first
    /// 12 hex digits of its SHA-256 ([`RateLimitConfig::key_name`]); never the key.
    key_labels: Vec<String>,
    /// The quotas as clients are told them: an address's, a network's, the overflow's, each key's.
    ip_policy: Arc<Policy>,
    net_policy: Arc<Policy>,
    overflow_policy: Arc<Policy>,
    key_policies: Vec<Arc<Policy>>,
    clients: IntGauge,
    /// Global quotas, when the fleet shares them through Redis.
    global: Option<Arc<Global>>,
    on_redis_down: OnRedisDown,
    /// Calls decided without Redis (global quotas only).
    fallback: Option<IntCounterVec>,
}

/// Why a call is refused: wait this long.
#[derive(Debug, Clone, Copy)]
pub struct OverQuota {
    pub retry_after: Duration,
}

impl OverQuota {
    /// The answer: 429 with `Retry-After` in whole seconds, at least 1.
    pub fn error(&self) -> ProxyError {
        ProxyError::RateLimited {
            retry_after_secs: self.retry_after.as_secs_f64().ceil().max(1.0) as u64,
        }
    }
}

/// What the limiter says about a call.
pub enum Admission {
    /// Decided now.
    Decided(Result<(), ProxyError>),
    /// Redis decides (global quotas, the client's lease ran out): wait at most `[redis] timeout`.
    Pending(Pin<Box<dyn Future<Output = Result<(), ProxyError>> + Send>>),
}

impl Limiter {
    /// Quotas kept by this instance alone.
    pub fn new(config: &RateLimitConfig, metrics: &Metrics) -> Arc<Limiter> {
        Limiter::build(config, metrics, None, 0)
    }

    /// Global quotas held in `shared`'s Redis; the local buckets hold this instance's share
    /// (`rate / expected_instances`, the burst never below the dearest method in `registry`).
    pub fn new_global(
        config: &RateLimitConfig,
        registry: &Registry,
        metrics: &Metrics,
        shared: Arc<Shared>,
    ) -> Arc<Limiter> {
        let floor = registry.all().iter().map(|m| m.cost).max().unwrap_or(1);
        if config.on_redis_down == OnRedisDown::Local && config.expected_instances == 1 {
            // Allowed alone, calls are owed to Redis and repaid; but meanwhile each instance
            // allows the whole quota, and a fleet of N its N times.
            tracing::warn!(
                "global quotas with on_redis_down = \"local\" and expected_instances = 1: while \
                 Redis cannot decide, every instance allows a client its whole quota; set \
                 [rate_limit] expected_instances to the fleet's size"
            );
        }
        let global = Arc::new(Global::new(config, shared, metrics));
        Limiter::build(config, metrics, Some(global), floor)
    }

    fn build(
        config: &RateLimitConfig,
        metrics: &Metrics,
        global: Option<Arc<Global>>,
        floor: u32,
    ) -> Arc<Limiter> {
        // The collectors are the gateway's (made once, at start): a limiter rebuilt by a reload
        // counts into the same series.
        metrics.show(Part::RateLimit);
        let fallback = global.as_ref().map(|_| {
            metrics.show(Part::GlobalQuotas);
            metrics.rate_limit_fallback.clone()
        });
        // Global quotas keep this instance's share here; local ones the whole quota.
        let share = if global.is_some() {
            config.expected_instances.max(1)
        } else {
            1
        };
        let q = quota(config.requests_per_second, config.burst, share, floor);
        let refill = Duration::from_secs_f64(
            f64::from(config.burst) / f64::from(config.requests_per_second.max(1)),
        ) + Duration::from_millis(100);
        // A network's quota and the overflow one are each shared by many: room for a few
        // clients' worth.
        let shared_quota = || {
            quota(
                config.requests_per_second.saturating_mul(4),
                config.burst.saturating_mul(4),
                share,
                floor,
            )
        };
        Arc::new(Limiter {
            per_ip: DashMap::new(),
            per_net: DashMap::new(),
            net_quota: shared_quota(),
            denied_until_ms: AtomicU64::new(0),
            ip_quota: q,
            refill,
            epoch: std::time::Instant::now(),
            overflow: Bucket::new(shared_quota()),
            keys: KeySet::new(config.keys.iter().map(|k| k.key.as_bytes())),
            per_key: (0..config.keys.len())
                .map(|i| config.key_quota(i))
                .map(|(rps, burst)| Bucket::new(quota(rps, burst, share, floor)))
                .collect(),
            max_clients: config.max_clients,
            prune_wanted: Notify::new(),
            body_bytes_per_unit: u64::from(config.body_bytes_per_unit.max(1)),
            ip_burst: config.burst,
            key_bursts: (0..config.keys.len())
                .map(|i| config.key_quota(i).1)
                .collect(),
            cached_cost_factor: config.cached_cost_factor,
            refused_cost: config.refused_cost,
            trusted: config.trusted_proxies.clone(),
            client_ip_header: config.client_ip_header,
            clock: MonotonicClock,
            limited: metrics.rate_limited.clone(),
            refusals: parking_lot::Mutex::new(std::collections::HashMap::new()),
            key_labels: (0..config.keys.len()).map(|i| config.key_name(i)).collect(),
            ip_policy: Arc::new(Policy::new(
                "address".into(),
                config.requests_per_second,
                config.burst,
            )),
            net_policy: Arc::new(Policy::new(
                "network".into(),
                config.requests_per_second.saturating_mul(4),
                config.burst.saturating_mul(4),
            )),
            overflow_policy: Arc::new(Policy::new(
                "shared".into(),
                config.requests_per_second.saturating_mul(4),
                config.burst.saturating_mul(4),
            )),
            key_policies: (0..config.keys.len())
                .map(|i| {
                    let (requests_per_second, burst) = config.key_quota(i);
                    // Its tier's name (the plan it is on), else "key": never its own name.
                    let name = config.keys[i].tier.clone().unwrap_or_else(|| "key".into());
                    Arc::new(Policy::new(name, requests_per_second, burst))
                })
                .collect(),
            clients: metrics.rate_limit_clients.clone(),
            global,
            on_redis_down: config.on_redis_down,
            fallback,
        })
    }

    /// Counts a refusal of `client`, and keeps it among the most refused. The table is bounded:
    /// when full, the less refused half goes (a flood of new addresses cannot grow it, and the
    /// clients refused most stay).
    fn refused(&self, client: &ClientId, kind: &'static str) {
        self.limited.with_label_values(&[kind]).inc();
        let mut refusals = self.refusals.lock();
        if refusals.len() >= REFUSALS_KEPT && !refusals.contains_key(client) {
            let mut counts: Vec<u64> = refusals.values().copied().collect();
            let middle = counts.len() / 2;
            let (_, median, _) = counts.select_nth_unstable(middle);
            let median = *median;
            // At most half stay (all of them above the median).
            refusals.retain(|_, n| *n > median);
        }
        *refusals.entry(client.clone()).or_insert(0) += 1;
    }

    /// The `n` clients refused most since this limiter was made (a reload that changes
    /// `[rate_limit]` starts again), most refused first: an address as the limiter sees it (an
    /// IPv6 /64), or a key's name ([`Limiter::key_name`]).
    pub fn most_refused(&self, n: usize) -> Vec<(String, u64)> {
        let mut top: Vec<(ClientId, u64)> = self
            .refusals
            .lock()
            .iter()
            .map(|(c, n)| (c.clone(), *n))
            .collect();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        top.truncate(n);
        top.into_iter()
            .map(|(client, count)| {
                let shown = match client {
                    ClientId::Ip(ip) => ip.to_string(),
                    ClientId::Key(i) => self.key_labels.get(i).cloned().unwrap_or_default(),
                };
                (shown, count)
            })
            .collect()
    }

    /// The name of key client `client` (`None`: an address, or a key of another config).
    pub fn key_name(&self, client: &ClientId) -> Option<&str> {
        match client {
            ClientId::Key(i) => self.key_labels.get(*i).map(String::as_str),
            ClientId::Ip(_) => None,
        }
    }

    /// Works out who a request comes from.
    pub fn identify(&self, peer: IpAddr, headers: &http::HeaderMap) -> ClientId {
        if let Some(i) = self.presented_key(headers) {
            return ClientId::Key(i);
        }
        ClientId::Ip(client::client_ip(
            peer,
            &self.trusted,
            self.client_ip_header,
            headers,
        ))
    }

    /// The position of the key a request presents (`Authorization: Bearer`, `X-Api-Key` or
    /// `rltoken`, in that order), if it is one of ours. With no keys configured, no header is
    /// looked up.
    fn presented_key(&self, headers: &http::HeaderMap) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        let presented = [
            headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| keys::bearer(v.as_bytes())),
            headers.get(X_API_KEY).map(|v| v.as_bytes()),
            headers.get(RLTOKEN).map(|v| v.as_bytes()),
        ];
        presented
            .into_iter()
            .flatten()
            .find_map(|token| self.keys.position(token))
    }

    /// The quota units a call costs.
    pub fn units(&self, cost: u32, cache_hit: bool) -> u32 {
        let factor = if cache_hit {
            self.cached_cost_factor
        } else {
            1.0
        };
        (f64::from(cost) * SCALE * factor).round() as u32
    }

    /// The quota units a refused call costs.
    pub fn refused_units(&self) -> u32 {
        self.units(self.refused_cost, false)
    }

    /// The quota units a request body of `bytes` costs for its size: one cost unit per whole
    /// `body_bytes_per_unit`.
    pub fn body_units(&self, bytes: u64) -> u32 {
        let units = bytes / self.body_bytes_per_unit;
        self.units(u32::try_from(units).unwrap_or(u32::MAX), false)
    }

    /// `client`'s burst in quota units: the most one charge can ever take (a declared body's size
    /// is charged up front up to it, the rest as the bytes arrive).
    pub fn burst_units(&self, client: &ClientId) -> u32 {
        let burst = match client {
            ClientId::Key(i) => self.key_bursts.get(*i).copied().unwrap_or(0),
            ClientId::Ip(_) => self.ip_burst,
        };
        self.units(burst, false)
    }

    /// Charges `units` to `client`'s bucket here: its whole quota with local quotas, this
    /// instance's share with global ones (see [`Limiter::admit`] for the decision a call gets).
    /// A refusal is remembered until the wait it gives (see [`Limiter::before_body`]).
    pub fn charge(&self, client: &ClientId, units: u32) -> Result<(), OverQuota> {
        let Some(n) = NonZeroU32::new(units) else {
            return Ok(());
        };
        let now = self.now_ms();
        let charged = self.with_bucket(client, now, |bucket| {
            let wait = match bucket.gcra.check_n(n) {
                Ok(Ok(left)) => {
                    bucket.holds(u64::from(left.remaining_burst_capacity()), now);
                    return Ok(());
                }
                Ok(Err(not_until)) => not_until.wait_time_from(self.clock.now()),
                // Costs more than the whole burst: validation prevents it, refuse rather than panic.
                Err(_) => Duration::from_secs(1),
            };
            // What it holds is what the charge lacked, less what comes back in the wait.
            let lacked = (wait.as_secs_f64() * 1000.0 * bucket.per_ms) as u64;
            bucket.holds(u64::from(units).saturating_sub(lacked), now);
            bucket.refused(now, wait, units);
            self.note_denial(now, wait);
            Err(wait)
        });
        match charged {
            None | Some(Ok(())) => Ok(()),
            Some(Err(retry_after)) => {
                self.refused(client, kind(client));
                Err(OverQuota { retry_after })
            }
        }
    }

    /// Whether `client`, about to send a request, is known to be over its quota: a call or a body
    /// of it was refused, and the wait it was given has not passed (with global quotas, unless its
    /// lease has since received enough to pay for it). The router asks before reading the body,
    /// so that a client over its quota costs no reading or parsing; the refusal is counted as any
    /// other. Changes no bucket, and adds no client to the table. (Global quotas refused for want
    /// of Redis, `on_redis_down = "deny"`, are answered after the body, with the call's id.)
    pub fn before_body(&self, client: &ClientId) -> Result<(), OverQuota> {
        let now = self.now_ms();
        // Nobody refused lately: the common case costs one load, not a lookup.
        if self.denied_until_ms.load(Ordering::Relaxed) <= now {
            return Ok(());
        }
        // The cheapest call the request may hold: refused before its body only if even that
        // would be (a client refused a dear call may still afford a cheap one).
        let cheapest = self.units(1, true).max(1);
        let denied = |bucket: &Bucket| {
            let wait = bucket.denied(now, cheapest)?;
            // A refill that landed since may pay for the call refused (global quotas).
            let leased = self.global.as_ref().map_or(0, |g| g.held(client));
            (leased < bucket.denied_units.load(Ordering::Relaxed)).then_some(wait)
        };
        let denied = match client {
            ClientId::Key(i) => self.per_key.get(*i).and_then(denied),
            ClientId::Ip(ip) => self.peek(*ip, |_, bucket| bucket.and_then(denied)),
        };
        match denied {
            None => Ok(()),
            Some(retry_after) => {
                self.refused(client, kind(client));
                Err(OverQuota { retry_after })
            }
        }
    }

    /// Decides a call costing `units` for `client`: local quotas decide now; global ones from
    /// this instance's lease, else by Redis (pending at most `[redis] timeout`), else by
    /// `on_redis_down`.
    pub fn admit(self: &Arc<Self>, client: &ClientId, units: u32) -> Admission {
        let Some(global) = &self.global else {
            return Admission::Decided(self.charge(client, units).map_err(|o| o.error()));
        };
        match global.admit(client, units, true) {
            Step::Now(verdict) => Admission::Decided(self.settle(client, units, verdict)),
            Step::Wait(decision) => {
                let (this, client) = (Arc::clone(self), client.clone());
                Admission::Pending(Box::pin(async move {
                    let verdict = decision.await;
                    this.settle(&client, units, verdict)
                }))
            }
        }
    }

    /// Charges a call snowgate refused itself ([`Limiter::refused_units`]) without waiting (see
    /// [`Limiter::charge_now`]).
    pub fn charge_refused(self: &Arc<Self>, client: &ClientId) -> Result<(), ProxyError> {
        self.charge_now(client, self.refused_units())
    }

    /// Charges `units` without waiting: from the lease if there is one, else at this instance's
    /// share, debited to Redis in the background (so that refused calls and a body's bytes as
    /// they arrive are never free, and never wait on Redis).
    pub fn charge_now(self: &Arc<Self>, client: &ClientId, units: u32) -> Result<(), ProxyError> {
        match &self.global {
            None => self.charge(client, units).map_err(|o| o.error()),
            Some(global) => match global.admit(client, units, false) {
                Step::Now(verdict) => self.settle(client, units, verdict),
                // Not asked for; the verdict without Redis is the safe one.
                Step::Wait(_) => self.settle(client, units, Verdict::Down),
            },
        }
    }

    /// Turns a global verdict into the call's answer.
    fn settle(&self, client: &ClientId, units: u32, verdict: Verdict) -> Result<(), ProxyError> {
        match verdict {
            Verdict::Allowed => Ok(()),
            Verdict::Over(wait) => {
                self.refused(client, kind(client));
                // Remembered here, as a local refusal is: a lease Redis refused may still hold
                // scraps, but a call it could not pay for was refused.
                let now = self.now_ms();
                self.with_bucket(client, now, |bucket| bucket.refused(now, wait, units));
                self.note_denial(now, wait);
                Err(OverQuota { retry_after: wait }.error())
            }
            Verdict::Share => {
                self.charge(client, units).map_err(|o| o.error())?;
                if let Some(global) = &self.global {
                    global.owe(client, units);
                }
                Ok(())
            }
            Verdict::Down => {
                let decision = match self.on_redis_down {
                    OnRedisDown::Local => self.charge(client, units).map_err(|o| o.error()),
                    OnRedisDown::Deny => Err(ProxyError::QuotaUnavailable),
                };
                // Owed to the global quota too, charged once Redis answers: what an instance
                // allows alone (Redis down, or too slow for a loaded instance) is repaid, so a
                // client cannot make its quota per instance by loading the instances.
                if let (Ok(()), Some(global)) = (&decision, &self.global) {
                    global.owe(client, units);
                }
                if let Some(fallback) = &self.fallback {
                    let label = if decision.is_ok() {
                        "allowed"
                    } else {
                        "denied"
                    };
                    fallback.with_label_values(&[label]).inc();
                }
                decision
            }
        }
    }

    /// Where `client` stands now: its policy, what it may spend and when it is whole again (see
    /// `state.rs`); `None` for a key out of range, which is not limited. With global quotas, the
    /// client's budget across the fleet as this instance knows it. Adds no client to the table.
    pub fn state(&self, client: &ClientId) -> Option<QuotaState> {
        let now = self.now_ms();
        let (policy, bucket) = match client {
            ClientId::Key(i) => (self.key_policies.get(*i)?, self.per_key.get(*i)),
            ClientId::Ip(ip) => {
                let state = |policy: &Arc<Policy>, bucket: Option<&Bucket>| {
                    self.state_of(policy, bucket, client, now)
                };
                return Some(self.peek(*ip, state));
            }
        };
        Some(self.state_of(policy, bucket, client, now))
    }

    fn state_of(
        &self,
        policy: &Arc<Policy>,
        bucket: Option<&Bucket>,
        client: &ClientId,
        now: u64,
    ) -> QuotaState {
        let refused = bucket.and_then(|b| b.denied(now, self.units(1, true).max(1)));
        let full = u64::from(policy.burst) * SCALE as u64;
        let remaining = match &self.global {
            Some(global) => global.remaining(client).unwrap_or(full),
            None => bucket.map_or(full, |b| b.remaining(now)),
        };
        QuotaState::new(policy.clone(), remaining, refused)
    }

    /// Notes a refusal that lasts `wait` from `now` for [`Limiter::before_body`]'s shortcut.
    fn note_denial(&self, now: u64, wait: Duration) {
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        self.denied_until_ms
            .fetch_max(now.saturating_add(wait), Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs `f` on the policy and the bucket address `ip` would be charged to now, without adding
    /// it to a table (`None`: a bucket it would get new, which is full).
    fn peek<R>(&self, ip: IpAddr, f: impl FnOnce(&Arc<Policy>, Option<&Bucket>) -> R) -> R {
        if let Some(t) = self.per_ip.get(&ip) {
            return f(&self.ip_policy, Some(&t.bucket));
        }
        if self.per_ip.len() < self.max_clients {
            return f(&self.ip_policy, None);
        }
        let net = client::network(ip);
        if let Some(t) = self.per_net.get(&net) {
            return f(&self.net_policy, Some(&t.bucket));
        }
        if self.per_net.len() < self.max_clients {
            return f(&self.net_policy, None);
        }
        f(&self.overflow_policy, Some(&self.overflow))
    }

    /// Runs `f` on `client`'s bucket (`None`: a key index out of range, which is not limited).
    /// A new address gets its own bucket while the table has room, else shares its network's
    /// (while the networks' table has room, else the overflow one) and wakes the pruner: the
    /// request never prunes the table itself.
    fn with_bucket<R>(
        &self,
        client: &ClientId,
        now: u64,
        f: impl FnOnce(&Bucket) -> R,
    ) -> Option<R> {
        let ip = match client {
            ClientId::Key(i) => return self.per_key.get(*i).map(f),
            ClientId::Ip(ip) => *ip,
        };
        if let Some(t) = self.per_ip.get(&ip) {
            t.last_ms.store(now, Ordering::Relaxed);
            return Some(f(&t.bucket));
        }
        if self.per_ip.len() < self.max_clients {
            let entry = self.per_ip.entry(ip).or_insert_with(|| Tracked {
                bucket: Bucket::new(self.ip_quota),
                last_ms: AtomicU64::new(now),
            });
            return Some(f(&entry.bucket));
        }
        self.prune_wanted.notify_one();
        let net = client::network(ip);
        if let Some(t) = self.per_net.get(&net) {
            t.last_ms.store(now, Ordering::Relaxed);
            return Some(f(&t.bucket));
        }
        if self.per_net.len() < self.max_clients {
            let entry = self.per_net.entry(net).or_insert_with(|| Tracked {
                bucket: Bucket::new(self.net_quota),
                last_ms: AtomicU64::new(now),
            });
            return Some(f(&entry.bucket));
        }
        Some(f(&self.overflow))
    }

    /// Forgets clients whose bucket has refilled (they are indistinguishable from new ones).
    pub fn prune(&self) {
        let now = self.now_ms();
        let refill = u64::try_from(self.refill.as_millis()).unwrap_or(u64::MAX);
        let keep = |t: &mut Tracked| {
            now.saturating_sub(t.last_ms.load(Ordering::Relaxed)) < refill
                || t.bucket.denied(now, 1).is_some()
        };
        self.per_ip.retain(|_, t| keep(t));
        self.per_ip.shrink_to_fit();
        // A network's bucket holds four addresses' worth: it refills in the same time.
        self.per_net.retain(|_, t| keep(t));
        self.per_net.shrink_to_fit();
        if let Some(global) = &self.global {
            global.prune();
        }
        self.clients.set(self.tracked() as i64);
    }

    /// Client addresses tracked now (with global quotas, those with a lease too); the networks
    /// sharing a quota past `max_clients` are [`Limiter::networks`].
    pub fn tracked(&self) -> usize {
        self.per_ip.len() + self.global.as_ref().map_or(0, |g| g.tracked())
    }

    /// Networks with a quota of their own now, past `max_clients` addresses (with global quotas,
    /// those with a lease too): at most `max_clients` (each table).
    pub fn networks(&self) -> usize {
        self.per_net.len() + self.global.as_ref().map_or(0, |g| g.networks())
    }

    /// Prunes every few seconds, and when a full table asks (at most once a second: a flood of
    /// new addresses asks on every call), until `stop` flips; with global quotas, also gives idle
    /// leases back to Redis.
    pub fn spawn_pruner(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        if let Some(global) = &self.global {
            global.spawn_sweeper(stop.clone());
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let full = async {
                    match &this.global {
                        Some(global) => {
                            tokio::select! {
                                () = this.prune_wanted.notified() => {}
                                () = global.prune_wanted.notified() => {}
                            }
                        }
                        None => this.prune_wanted.notified().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => {}
                    () = full => {}
                    _ = stop.changed() => return,
                }
                this.prune();
                tokio::select! {
                    () = tokio::time::sleep(MIN_PRUNE_GAP) => {}
                    _ = stop.changed() => return,
                }
            }
        });
    }
}

/// The shortest time between two prunes (each walks the whole table).
const MIN_PRUNE_GAP: Duration = Duration::from_secs(1);

/// How many clients [`Limiter::most_refused`] keeps counts for.
const REFUSALS_KEPT: usize = 1024;

/// The metric label of a client's kind.
fn kind(client: &ClientId) -> &'static str {
    match client {
        ClientId::Key(_) => "key",
        ClientId::Ip(_) => "ip",
    }
}

#[cfg(test)]
mod tests;
