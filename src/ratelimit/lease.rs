//! The arithmetic of global quotas, apart from Redis: the quota as the script takes it
//! ([`GlobalQuota`], sized by [`lease_size`]), what one script call asks and answers ([`Ask`],
//! [`Answer`]), the script's state change as a Rust [`model`], and what an instance holds of one
//! client's budget ([`Lease`]: the units it may spend, one refill at a time, a refusal remembered).
//!
//! Pure on purpose: plain data and atomics, no Redis, no runtime, no clock of its own (times come
//! in as milliseconds since the limiter's epoch), so every rule is tested below as a plain call
//! (the script's model under proptest). `global.rs` runs the script and decides calls with these.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::SCALE;

/// A lease unused this long is given back to Redis.
pub const RETURN_AFTER: Duration = Duration::from_secs(1);

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

    /// The client's Redis key.
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// The client's quota.
    pub(super) fn quota(&self) -> &GlobalQuota {
        &self.quota
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
    pub(super) fn take_all(&self, now_ms: u64) -> u64 {
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
    pub(super) fn start_refill(&self) -> bool {
        !self.refilling.swap(true, Ordering::AcqRel)
    }

    pub(super) fn end_refill(&self) {
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

    /// Takes every unit, idle or not, to give back (the instance stops).
    pub(super) fn drain(&self) -> u64 {
        self.units.swap(0, Ordering::AcqRel)
    }

    /// Nothing here that Redis does not know: an entry that can be forgotten.
    pub(super) fn forgettable(&self, now_ms: u64) -> bool {
        self.held() == 0
            && !self.refilling.load(Ordering::Acquire)
            && self.denied(now_ms).is_none()
            && now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed))
                >= RETURN_AFTER.as_millis() as u64
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
