//! The arithmetic of global quotas, apart from Redis: the quota as the script takes it
//! ([`GlobalQuota`], its lease sized by [`lease_size`]), what one script call asks and answers
//! ([`Ask`], [`Answer`]), the script's state change as a Rust [`model`], and what an instance holds
//! of one client's budget ([`Lease`]: the units it may spend, what it spent and owes since it last
//! told Redis, what it last knew of the client's budget, a refusal remembered).
//!
//! Pure on purpose: plain data and atomics, no Redis, no runtime, no clock of its own (times come
//! in as milliseconds since the limiter's epoch), so every rule is tested below as a plain call
//! (the script's model under proptest). `global.rs` runs the script and decides calls with these.
//!
//! **Why no client under its budget is refused.** Redis keeps, per client, its TAT, which counts
//! what it spent and what instances took on lease, and, apart, the units out on lease (unspent as
//! far as Redis knows). A call that finds too little room is still granted from the units out on
//! lease: they are the client's budget. If the instance holding them spends them too, the client
//! has spent them twice; the instance reports what it spent at its next script call, what was
//! spent twice is charged then, and the client repays by waiting: exact over time, never refused
//! early. Leases are only granted while the client has more than half its burst to spare, and at
//! most half its burst is ever out on lease, whatever the number of instances; a client near its
//! budget is decided in Redis call by call.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
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
    /// The quota of `rps` cost units per second and `burst` cost units.
    pub fn new(rps: u32, burst: u32) -> GlobalQuota {
        let rate = (u64::from(rps) * SCALE as u64).max(1);
        let burst = (u64::from(burst) * SCALE as u64).max(1);
        GlobalQuota {
            interval_us: 1e6 / rate as f64,
            burst,
            lease: lease_size(rate, burst),
        }
    }

    /// Units that come back per millisecond.
    pub fn per_ms(&self) -> f64 {
        1000.0 / self.interval_us
    }
}

/// Units an instance leases from Redis at a time, for a client allowed `rate` units per second
/// and `burst` at once: half a second of the rate, at most a quarter of the burst, at least 1 (the
/// script grants less when the client has less to spare: see [`model`]). It does not depend on
/// the fleet's size: the script never leases out more than half a client's burst, whatever the
/// number of instances asking.
///
/// Half a second, not less, because every lease is a script call, and with many slow clients
/// (the load benchmark's 10,000 clients at the shipped 50/s quota, about 3 hits a second each) a
/// tenth of a second's lease cost a round trip every 3 hits: 1.22 times the CPU per hit of local
/// quotas.
pub fn lease_size(rate: u64, burst: u64) -> u64 {
    (rate / 2).min(burst / 4).max(1)
}

/// What one script call asks for (units are tenths of a cost unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// Leased units given back unspent (the TAT moves back for those still out on lease).
    pub give: u64,
    /// Leased units spent since this instance last told Redis.
    pub spent: u64,
    /// Units charged whatever the room (calls decided without waiting, and refused calls: never
    /// free); the TAT may pass the burst by them, and the client repays by waiting.
    pub force: u64,
    /// Units a call needs now: all granted, or none.
    pub need: u64,
    /// Units wanted on lease on top (granted in part, only from what the client has to spare).
    pub lease: u64,
}

/// The script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Units granted for the call: `need` or 0.
    pub granted: u64,
    /// Units granted on lease.
    pub leased: u64,
    /// When the call was refused: microseconds until it would be granted.
    pub wait_us: u64,
    /// The client's budget left after this call (the room in Redis plus what is out on lease, at
    /// most the burst): negative while it is in debt (forced charges, units spent twice), which
    /// it repays by waiting.
    pub remaining: i64,
}

/// The state the script keeps per client: its TAT (microseconds of Redis's clock; `None`: no key),
/// which counts what it spent and what is out on lease, and the units out on lease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stored {
    pub tat: Option<f64>,
    pub out: u64,
}

/// How far ahead a TAT may go, in bursts: a client may owe this less one burst (owed calls charged
/// past its budget, units spent twice) and repays it by waiting; no more, so that no client is
/// locked out for long, and a TAT planted beyond is read as this.
pub const DEBT_LIMIT: f64 = 8.0;

/// How long a key with units out on lease outlives its last script call at least (ms): the
/// instances holding them report when they run low or go idle; a key gone before would charge
/// what they report spent a second time. A crashed instance's leases cost the client nothing
/// meanwhile (they are charged already, and other calls may be granted from them).
pub const OUT_TTL_MS: u64 = 60_000;

/// The script's state change, in Rust: what `gcra.lua` does with `stored` at Redis time `now`
/// (microseconds). The script is the authority; this model is here to be property-tested, and must
/// be kept in step with it.
///
/// A lease is charged to the TAT when granted, and counted out until reported spent or given
/// back. A call is granted from the room, else from the units out on lease (they are the
/// client's budget).
pub fn model(stored: Stored, now: f64, quota: &GlobalQuota, ask: Ask) -> (Stored, Answer) {
    let interval = quota.interval_us;
    let burst = quota.burst as f64;
    let tolerance = burst * interval;
    let ceiling = (DEBT_LIMIT * tolerance + 0.5).floor();
    let mut out = (stored.out as f64).min(burst);
    // Relative to now, as the script (exact: both are whole microseconds).
    let mut ahead = stored.tat.map_or(0.0, |t| (t - now).max(0.0).min(ceiling));
    let room_of = |ahead: f64| ((tolerance - ahead) / interval + 1e-6).floor();
    // Spent leases leave the count (already charged); beyond it, they had also been granted to a
    // call meanwhile: spent twice, charged now, with the forced units.
    let covered = (ask.spent as f64).min(out);
    out -= covered;
    let twice = ask.spent as f64 - covered;
    // Returned leases still out move the TAT back.
    let back = (ask.give as f64).min(out);
    out -= back;
    ahead = (ahead - back * interval + 0.5).floor().max(0.0);
    let charged = ask.force as f64 + twice;
    if charged > 0.0 {
        ahead = (ahead + charged * interval + 0.5).floor().min(ceiling);
    }
    let (mut granted, mut leased, mut wait) = (0.0, 0.0, 0.0);
    let need = ask.need as f64;
    if need > 0.0 {
        let room = room_of(ahead);
        if room >= need {
            granted = need;
            ahead = (ahead + need * interval + 0.5).floor();
        } else if room.max(0.0) + out >= need {
            // The rest from the units out on lease: already charged.
            granted = need;
            ahead = (ahead + room.max(0.0) * interval + 0.5).floor();
            out -= need - room.max(0.0);
        } else {
            wait = (ahead + (need - out) * interval - tolerance)
                .ceil()
                .max(1.0);
        }
    }
    if ask.lease > 0 && (ask.need == 0 || granted > 0.0) {
        // From what the client has beyond half its burst, and never more than half its burst out.
        let half = (burst / 2.0).floor();
        let spare = (room_of(ahead) - half).min(half - out);
        leased = (ask.lease as f64).min(spare).max(0.0);
        if leased > 0.0 {
            ahead = (ahead + leased * interval + 0.5).floor();
            out += leased;
        }
    }
    let remaining = (room_of(ahead) + out).min(burst);
    let stored = Stored {
        tat: (ahead > 0.0 || out > 0.0).then_some(now + ahead),
        out: out as u64,
    };
    (
        stored,
        Answer {
            granted: granted as u64,
            leased: leased as u64,
            wait_us: wait as u64,
            remaining: remaining as i64,
        },
    )
}

/// What an instance holds of one client's budget.
pub struct Lease {
    /// The client's Redis key.
    key: Box<str>,
    quota: GlobalQuota,
    /// Units leased and not spent yet.
    units: AtomicU64,
    /// Units spent from the lease since the last script call (told to Redis at the next).
    spent: AtomicU64,
    /// Units charged without waiting and not yet told to Redis (refused calls, bodies).
    owed: AtomicU64,
    /// A background script call (a refill, a debit) is queued or in flight.
    syncing: AtomicBool,
    /// One script call per lease at a time: what it gives back, reports and is granted must not
    /// cross another's.
    pub(super) turn: tokio::sync::Mutex<()>,
    /// When it was last used (ms since the limiter's epoch).
    last_ms: AtomicU64,
    /// Redis refused a call of `denied_units` until then (ms since the epoch): refuse such calls
    /// here without asking again (cheaper ones sooner: see [`Lease::denied`]).
    denied_until_ms: AtomicU64,
    denied_units: AtomicU64,
    /// The client's budget left as the last script call said (units), less what this instance
    /// spent since, and when that was said: the RateLimit headers' source.
    known: AtomicI64,
    known_ms: AtomicU64,
}

impl Lease {
    /// An empty lease of `quota` for `key`, of a client whose budget is not known yet (taken to be
    /// full).
    pub fn new(key: String, quota: GlobalQuota, now_ms: u64) -> Lease {
        Lease {
            key: key.into_boxed_str(),
            quota,
            units: AtomicU64::new(0),
            spent: AtomicU64::new(0),
            owed: AtomicU64::new(0),
            syncing: AtomicBool::new(false),
            turn: tokio::sync::Mutex::new(()),
            last_ms: AtomicU64::new(now_ms),
            denied_until_ms: AtomicU64::new(0),
            denied_units: AtomicU64::new(0),
            known: AtomicI64::new(i64::try_from(quota.burst).unwrap_or(i64::MAX)),
            known_ms: AtomicU64::new(now_ms),
        }
    }

    /// The client's Redis key.
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// The client's quota.
    pub fn quota(&self) -> &GlobalQuota {
        &self.quota
    }

    /// Spends `units` from the lease if it holds that many.
    pub fn take(&self, units: u64, now_ms: u64) -> bool {
        self.last_ms.store(now_ms, Ordering::Relaxed);
        let taken = self
            .units
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |have| {
                have.checked_sub(units)
            })
            .is_ok();
        if taken {
            self.spent.fetch_add(units, Ordering::AcqRel);
            self.spend_known(units);
        }
        taken
    }

    /// Notes `units` charged without asking Redis (told to it at the next script call, charged
    /// whatever the room).
    pub fn owe(&self, units: u64, now_ms: u64) {
        self.last_ms.store(now_ms, Ordering::Relaxed);
        self.owed.fetch_add(units, Ordering::AcqRel);
        self.spend_known(units);
    }

    fn spend_known(&self, units: u64) {
        self.known
            .fetch_sub(i64::try_from(units).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Units held now.
    pub fn held(&self) -> u64 {
        self.units.load(Ordering::Acquire)
    }

    /// Should a refill start after a call of `units` (the lease is below half its size, or
    /// would not pay for another such call)?
    pub fn low(&self, units: u64) -> bool {
        let held = self.held();
        held < self.quota.lease.div_ceil(2) || held < units
    }

    /// What the next script call reports and gives: everything spent and owed since the last one,
    /// and (`give_all`) every unit held. Put back by [`Lease::unreport`] if the call fails.
    pub(super) fn report(&self, give_all: bool) -> Ask {
        Ask {
            give: if give_all {
                self.units.swap(0, Ordering::AcqRel)
            } else {
                0
            },
            spent: self.spent.swap(0, Ordering::AcqRel),
            force: self.owed.swap(0, Ordering::AcqRel),
            need: 0,
            lease: 0,
        }
    }

    /// A script call that took `ask`'s report failed: what it reported is reported again next
    /// time, and what it gave back is held again.
    pub(super) fn unreport(&self, ask: &Ask) {
        self.units.fetch_add(ask.give, Ordering::AcqRel);
        self.spent.fetch_add(ask.spent, Ordering::AcqRel);
        self.owed.fetch_add(ask.force, Ordering::AcqRel);
    }

    /// Takes in what the script answered at `now_ms`: the units leased, what the client has left,
    /// and a refusal of the call (nothing before `now + wait` will be granted, so calls until then
    /// are refused here).
    pub(super) fn answered(&self, ask: &Ask, answer: &Answer, now_ms: u64) {
        if answer.leased > 0 {
            self.units.fetch_add(answer.leased, Ordering::AcqRel);
        }
        // What was spent here since the script answered is not in its figure: the figure is
        // taken as of its answer, and a call decided meanwhile is a moment early in the count.
        self.known.store(answer.remaining, Ordering::Relaxed);
        self.known_ms.store(now_ms, Ordering::Relaxed);
        if ask.need > 0 && answer.granted == 0 {
            self.refused(now_ms, answer.wait_us, ask.need);
        } else if answer.remaining < 0 {
            // In debt (owed calls charged past the budget, units spent twice): no call passes
            // until it is repaid, whoever asks, so this instance refuses them all meanwhile.
            let debt_us = answer.remaining.unsigned_abs() as f64 * self.quota.interval_us;
            self.refused(now_ms, debt_us as u64, 1);
        }
    }

    /// Redis refused a call of `units`: nothing of that size before `now + wait` will be granted,
    /// so such calls until then are refused here.
    pub fn refused(&self, now_ms: u64, wait_us: u64, units: u64) {
        let until = now_ms.saturating_add(wait_us.div_ceil(1000).max(1));
        let prev = self.denied_until_ms.load(Ordering::Acquire);
        if until >= prev || prev <= now_ms {
            self.denied_units.store(units, Ordering::Release);
            self.denied_until_ms.store(until, Ordering::Release);
        }
    }

    /// How long calls of `units` are still refused without asking Redis (`None`: ask). A call
    /// cheaper than the one refused waits that much less: what it lacks comes back sooner.
    pub fn denied(&self, now_ms: u64, units: u64) -> Option<Duration> {
        let until = self.denied_until_ms.load(Ordering::Acquire);
        let refused = self.denied_units.load(Ordering::Acquire);
        let sooner = refused.saturating_sub(units) as f64 / self.quota.per_ms();
        let until = until.saturating_sub(sooner.ceil() as u64);
        (until > now_ms).then(|| Duration::from_millis(until - now_ms))
    }

    /// The client's budget left at `now_ms` as this instance knows it (units): what the last
    /// script call said, less what was spent here since, plus what came back since, at most the
    /// burst. Exact when the client uses this instance alone, or is near its budget (then every
    /// call is decided in Redis); otherwise behind by what other instances spent since.
    pub fn remaining(&self, now_ms: u64) -> u64 {
        u64::try_from(self.balance(now_ms).max(0)).unwrap_or(0)
    }

    /// [`Lease::remaining`], negative while the client is in debt.
    pub fn balance(&self, now_ms: u64) -> i64 {
        let since = now_ms.saturating_sub(self.known_ms.load(Ordering::Relaxed));
        let back = (since as f64 * self.quota.per_ms()) as i64;
        let left = self.known.load(Ordering::Relaxed).saturating_add(back);
        left.min(i64::try_from(self.quota.burst).unwrap_or(i64::MAX))
    }

    /// Claims the background sync (one queued per lease); false if one is queued or running.
    pub(super) fn start_sync(&self) -> bool {
        !self.syncing.swap(true, Ordering::AcqRel)
    }

    pub(super) fn end_sync(&self) {
        self.syncing.store(false, Ordering::Release);
    }

    /// Anything to tell Redis (spent or owed units not reported yet).
    pub(super) fn unreported(&self) -> bool {
        self.spent.load(Ordering::Acquire) > 0 || self.owed.load(Ordering::Acquire) > 0
    }

    /// Idle since long enough to give back what it holds (and not syncing).
    pub fn idle(&self, now_ms: u64) -> bool {
        let idle = now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed));
        idle >= RETURN_AFTER.as_millis() as u64 && !self.syncing.load(Ordering::Acquire)
    }

    /// Nothing here that Redis does not know: an entry that can be forgotten.
    pub(super) fn forgettable(&self, now_ms: u64) -> bool {
        self.held() == 0
            && !self.unreported()
            && self.denied(now_ms, 1).is_none()
            && self.idle(now_ms)
            && self.turn.try_lock().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NEW: Stored = Stored { tat: None, out: 0 };

    fn ask(need: u64, lease: u64) -> Ask {
        Ask {
            need,
            lease,
            ..Ask::default()
        }
    }

    #[test]
    fn leases_are_half_a_second_within_a_quarter_of_the_burst() {
        // 200 cost units/s = 2000 units/s: half a second is 1000 units.
        assert_eq!(lease_size(2000, 10_000), 1000);
        assert_eq!(lease_size(2000, 600), 150);
        assert_eq!(lease_size(5, 1), 1, "never nothing");
        assert_eq!(GlobalQuota::new(200, 20).interval_us, 500.0);
    }

    #[test]
    fn a_call_is_granted_whole_and_a_lease_only_from_what_is_spare() {
        let q = GlobalQuota::new(20, 20); // 200 units/s and 200 at once: 5000 us per unit.
        let (s, a) = model(NEW, 1e12, &q, ask(10, 50));
        assert_eq!((a.granted, a.leased, a.remaining), (10, 50, 190));
        assert_eq!(s.out, 50);
        // 140 left in the room: 40 spare beyond half the burst.
        let (s, a) = model(s, 1e12, &q, ask(10, 50));
        assert_eq!((a.granted, a.leased), (10, 30));
        // Near the budget: no lease, the call alone.
        let (s, a) = model(s, 1e12, &q, ask(10, 50));
        assert_eq!((a.granted, a.leased, a.remaining), (10, 0, 170));
        assert_eq!(s.out, 80);
    }

    #[test]
    fn units_out_on_lease_are_granted_before_anyone_is_refused() {
        let q = GlobalQuota::new(5, 5); // 50 units at once.
        let (s, a) = model(NEW, 0.0, &q, ask(10, 12)); // instance A: a call and a lease
        assert_eq!((a.granted, a.leased), (10, 12));
        let mut s = s;
        for _ in 0..3 {
            // Instances B, C, D: a call each, the last one partly from A's lease.
            let (next, a) = model(s, 0.0, &q, ask(10, 0));
            assert_eq!(a.granted, 10, "{s:?}");
            s = next;
        }
        let (s, a) = model(s, 0.0, &q, ask(10, 0));
        assert_eq!(a.granted, 10, "E: the last of the budget, from A's lease");
        assert_eq!((s.out, a.remaining), (0, 0));
        let (_, a) = model(s, 0.0, &q, ask(10, 0));
        assert_eq!(a.granted, 0, "over the budget");
        assert_eq!(a.wait_us, 200_000, "10 units at 20 ms each");
        // A spends its lease after all: what was spent twice is charged, repaid by waiting.
        let spent = Ask {
            spent: 12,
            ..Ask::default()
        };
        let (s2, a) = model(s, 0.0, &q, spent);
        assert_eq!(a.remaining, -12, "in debt by what was spent twice");
        assert_eq!(s2.tat, Some(s.tat.unwrap() + 12.0 * 20_000.0));
    }

    #[test]
    fn returned_units_come_back_only_while_still_out_on_lease() {
        let q = GlobalQuota::new(10, 10); // 100 units, 10 ms each.
        let (s, _) = model(NEW, 0.0, &q, ask(10, 25));
        let give = Ask {
            give: 25,
            ..Ask::default()
        };
        let (back, a) = model(s, 0.0, &q, give);
        assert_eq!((back.out, back.tat, a.remaining), (0, Some(100_000.0), 90));
        // Giving back more than is out on lease moves nothing further.
        let more = Ask {
            give: 1_000,
            ..Ask::default()
        };
        assert_eq!(model(back, 0.0, &q, more).0, back);
    }

    #[test]
    fn forced_charges_pass_the_burst_and_are_repaid_by_waiting() {
        let q = GlobalQuota::new(10, 10);
        let force = Ask {
            force: 150,
            ..Ask::default()
        };
        let (s, a) = model(NEW, 0.0, &q, force);
        assert_eq!(a.remaining, -50, "in debt");
        assert_eq!(s.tat, Some(1_500_000.0));
        let (_, a) = model(s, 0.0, &q, ask(10, 0));
        assert_eq!(a.wait_us, 600_000, "the 50 past the burst, then the call");
        // Never more than seven bursts past the first.
        let mut s = s;
        for _ in 0..10 {
            s = model(s, 0.0, &q, force).0;
        }
        assert_eq!(s.tat, Some(8_000_000.0));
    }

    #[test]
    fn a_lease_spends_what_it_holds_and_reports_what_it_spent() {
        let q = GlobalQuota::new(100, 10);
        let l = Lease::new("k".into(), q, 0);
        assert!(!l.take(1, 0), "a new lease holds nothing");
        assert_eq!(
            l.remaining(0),
            100,
            "a new client's budget is taken to be full"
        );
        let a = Answer {
            granted: 10,
            leased: 50,
            wait_us: 0,
            remaining: 90,
        };
        l.answered(&ask(10, 50), &a, 5);
        assert!(l.take(30, 5));
        assert!(!l.take(21, 5), "never below zero");
        l.owe(5, 5);
        assert_eq!(l.remaining(5), 55, "what was spent here counts at once");
        assert_eq!(l.remaining(10), 60, "and 1 unit a millisecond comes back");
        let report = l.report(true);
        assert_eq!((report.give, report.spent, report.force), (20, 30, 5));
        assert!(!l.unreported() && l.held() == 0);
        l.unreport(&report);
        assert_eq!((l.held(), l.report(false).spent), (20, 30));
        // A refused call is remembered; a shorter refusal does not shorten a longer one.
        let no = Answer {
            granted: 0,
            leased: 0,
            wait_us: 2_500,
            remaining: 0,
        };
        l.answered(&ask(10, 0), &no, 10);
        assert_eq!(l.denied(10, 10), Some(Duration::from_millis(3)));
        assert_eq!(l.denied(12, 10), Some(Duration::from_millis(1)));
        assert_eq!(l.denied(13, 10), None);
        // A call of 8 lacks 2 units less: 2 ms sooner at 1 unit a millisecond.
        assert_eq!(l.denied(10, 8), Some(Duration::from_millis(1)));
        // In debt (a report's answer below zero): every call is refused until it is repaid.
        let debt = Answer {
            granted: 0,
            leased: 0,
            wait_us: 0,
            remaining: -5,
        };
        l.answered(&Ask::default(), &debt, 100);
        assert_eq!(l.denied(100, 1), Some(Duration::from_millis(5)));
        assert_eq!(l.balance(100), -5);
        assert_eq!(l.remaining(100), 0);
    }

    #[test]
    fn only_an_idle_lease_with_nothing_to_report_is_forgotten() {
        let l = Lease::new("k".into(), GlobalQuota::new(100, 10), 0);
        l.units.store(50, Ordering::Relaxed);
        assert!(l.take(10, 100));
        assert!(!l.idle(600), "used half a second ago");
        assert!(l.start_sync());
        assert!(!l.idle(5_000), "a sync is queued");
        assert!(!l.start_sync(), "one at a time");
        l.end_sync();
        assert!(
            !l.forgettable(5_000),
            "holds units and has spent some unreported"
        );
        let _ = l.report(true);
        assert!(l.forgettable(5_000));
    }

    /// A fleet of instances as `global.rs` runs them, over the model: a call spends from its
    /// instance's lease, else asks the script (giving back the scraps, reporting what was spent),
    /// and a lease that runs low is refilled.
    struct Fleet {
        quota: GlobalQuota,
        stored: Stored,
        held: Vec<u64>,
        spent: Vec<u64>,
    }

    impl Fleet {
        fn call(&mut self, now: f64, i: usize, need: u64) -> bool {
            if self.held[i] >= need {
                self.held[i] -= need;
                self.spent[i] += need;
                if self.held[i] < self.quota.lease.div_ceil(2) {
                    self.sync(now, i, 0);
                }
                return true;
            }
            self.sync(now, i, need)
        }

        fn sync(&mut self, now: f64, i: usize, need: u64) -> bool {
            let ask = Ask {
                give: if need > 0 {
                    std::mem::take(&mut self.held[i])
                } else {
                    0
                },
                spent: std::mem::take(&mut self.spent[i]),
                force: 0,
                need,
                lease: self.quota.lease,
            };
            let (stored, a) = model(self.stored, now, &self.quota, ask);
            self.stored = stored;
            self.held[i] += a.leased;
            a.granted == need
        }
    }

    proptest! {
        /// A client that never spends past its budget (a plain GCRA over the calls it was served)
        /// is never refused, whichever instances its calls land on.
        #[test]
        fn a_client_under_its_budget_is_never_refused(
            rps in 1u32..50,
            burst_extra in 0u32..40,
            instances in 1usize..10,
            calls in proptest::collection::vec((0u64..300_000, 0usize..10, 1u64..6), 1..120),
        ) {
            let cost_max = 5;
            let q = GlobalQuota::new(rps, cost_max + burst_extra);
            let mut fleet = Fleet {
                quota: q,
                stored: NEW,
                held: vec![0; instances],
                spent: vec![0; instances],
            };
            let tolerance = q.burst as f64 * q.interval_us;
            let mut oracle = 0.0f64; // the TAT of the calls served
            let mut now = 1.7e15;
            for (n, (dt, i, cost)) in calls.into_iter().enumerate() {
                now += dt as f64;
                let need = cost * SCALE as u64;
                let ahead = (oracle - now).max(0.0);
                // Redis keeps whole microseconds: each decision may round by half of one.
                let rounding = n as f64 + 1.0;
                if ahead + need as f64 * q.interval_us > tolerance - rounding {
                    continue; // over budget: this client does not send it
                }
                prop_assert!(fleet.call(now, i % instances, need), "refused under budget");
                oracle = now + ahead + need as f64 * q.interval_us;
            }
        }

        /// Whatever the calls, a client is never granted more than the burst plus the rate over
        /// the time elapsed plus what was given back, and every answer keeps its promises.
        #[test]
        fn the_script_never_grants_more_than_burst_plus_rate(
            rps in 1u32..2_000,
            burst in 1u32..200,
            asks in proptest::collection::vec(
                (0u64..50_000, 0u64..40, 0u64..400, 0u64..400),
                1..60,
            ),
        ) {
            let q = GlobalQuota::new(rps, burst);
            let mut stored = NEW;
            let mut now = 1.7e15;
            let start = now;
            let (mut granted, mut given) = (0u64, 0u64);
            for (dt, give, need, lease) in asks {
                now += dt as f64;
                let give = give.min(stored.out);
                let ask = Ask { give, need, lease, ..Ask::default() };
                let (next, a) = model(stored, now, &q, ask);
                prop_assert!(a.granted == 0 || a.granted == need);
                prop_assert!(a.leased <= lease);
                prop_assert!(a.remaining <= q.burst as i64);
                if a.granted == 0 && need > 0 && need <= q.burst {
                    // Waiting as told is enough (no one else spends meanwhile).
                    let again = Ask { give: 0, ..ask };
                    let (_, later) = model(next, now + a.wait_us as f64, &q, again);
                    prop_assert!(later.granted == need, "{ask:?} {a:?} {later:?}");
                }
                // Units granted from those out on lease were counted when leased.
                let out_before = stored.out.min(q.burst) - give.min(stored.out.min(q.burst));
                let borrowed = match next.tat {
                    Some(_) => (out_before + a.leased).saturating_sub(next.out),
                    None => 0,
                };
                granted += a.granted + a.leased - borrowed;
                given += give;
                stored = next;
            }
            let allowed = q.burst as f64 + (now - start) / q.interval_us + given as f64 + 1.0;
            prop_assert!((granted as f64) <= allowed, "{granted} > {allowed}");
        }
    }
}
