//! Usage per key: the calls each `[[rate_limit.keys]]` client was served and the cost units they
//! were charged, per UTC hour, for billing and for the operator's questions ("who used what
//! yesterday?"). Read by `GET /snowgate/usage` (admins) and the status page (this hour's top keys).
//!
//! **What counts.** A call served is a call of a key client admitted by its quota: charged and let
//! through to the cache or a node ([`Usage::on_admit`], the one place, in the rate-limit layer's
//! charge). Each call of a batch is admitted alone, so each counts. Refused calls, bodies' bytes
//! and admins count nothing; without rate limiting keys are not told apart and nothing counts.
//! Units are kept as the limiter keeps them, in tenths of a cost unit (exact), and answered as
//! cost units with one decimal (`12.5`): a cache hit counts at its cached price.
//!
//! **Where.** Each instance counts in memory, per key name and hour (a lock per key, no I/O on
//! the request path). Without `[redis]` those counts are the answer: this instance's since it
//! started, kept for [`RETENTION`]. With `[redis]` they are deltas, flushed to Redis every
//! [`FLUSH_EVERY`] and on a graceful stop (after the last request drained, see `Gateway::
//! shutdown`), so that Redis holds the fleet's totals: a hash per hour,
//! `{key_prefix}{network ID}:usage:{YYYYMMDDHH}`, fields `<name>:calls` and `<name>:tenths`,
//! expiring [`RETENTION`] after the hour ends. The hour in braces is a Redis Cluster hash tag: an
//! hour's totals and its ledger (below) share a slot. The network is the pool's settled one
//! (`crate::shared::network`), so two fleets of different networks on one Redis and one prefix
//! never add up their usage; until it is settled nothing is flushed (the counts wait in memory)
//! and an answer is this instance's (scope `instance`).
//!
//! **Exactly once** (`fleet.rs`). A flush takes one hour's deltas out of the counters into a batch
//! numbered by a per-instance sequence, and sends it, with the instance's random id, to a Lua
//! script (`flush.lua`) that adds it only if the hour's ledger
//! (`{key_prefix}{network ID}:usage:{YYYYMMDDHH}:applied`, a hash of instance id → last seq
//! applied) shows a lower seq, then records the seq, atomically. A batch that fails or times out
//! stays in flight and is sent again, unchanged, until Redis says applied (1) or already applied
//! (0): a write Redis did apply but whose answer was lost is never added twice, and one Redis
//! never saw is never lost.
//!
//! **Never half.** Redis does not roll a script back when one of its commands fails, so the script
//! checks every field it will add to before its first write: a field that holds something else
//! than a count (someone wrote it with `redis-cli`, or another program shares the prefix) is
//! skipped, never overwritten, and named in the answer, with the ledger's record of the batch
//! (so a resend after a lost answer learns the same). Its deltas go back into this instance's
//! counters, held until the field holds a count again (the next flushes try), so no call is lost
//! and none added twice; the other fields, keys and hours are written as usual. An hour whose
//! totals or ledger key holds no hash is held whole the same way. Each such field or hour is
//! logged at warn once and counted once (`snowgate_usage_skipped_fields_total`). Batches go one at a time, so seqs reach each ledger in order. Meanwhile new calls
//! count into fresh deltas: a Redis outage costs no count, only memory (at most keys × hours of
//! outage, and nothing older than [`RETENTION`], which Redis would expire at once anyway). The
//! counts survive a Redis restart as far as Redis's own persistence keeps its data (AOF): totals
//! and ledgers are written by the same script, so they are lost or kept together.
//!
//! **Reading** with Redis: under the flush lock, flush (so this instance's deltas are in Redis),
//! then read each hour's hash, then add what this instance counted since (and holds); other
//! instances' last second is not in yet. A field that holds no count is left out of the sum and
//! named in the answer ([`Report::skipped`]), as is an hour whose key holds no hash. If a batch is
//! still in flight (Redis down), the answer is refused (503) rather than guessed.

mod fleet;
pub mod hours;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde::Serialize;

use super::Admission;
use crate::metrics::Metrics;
use crate::shared::Shared;
use fleet::Fleet;
pub use hours::Hour;

/// How often an instance sends its deltas to Redis.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// How long hourly usage is kept: in Redis (the keys expire this long after their hour ends)
/// and, without Redis, in memory. Five weeks: a calendar month and its invoice run.
pub const RETENTION: Duration = Duration::from_secs(35 * 24 * 3600);

/// [`RETENTION`] in hours, the widest range a query may ask for.
pub const RETENTION_HOURS: u32 = 35 * 24;

/// How long a graceful stop keeps trying to flush while Redis does not answer.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Calls served and what they were charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: u64,
    /// Cost units, in tenths.
    pub tenths: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.tenths = self.tenths.saturating_add(other.tenths);
    }

    /// The cost units, to a tenth.
    pub fn units(&self) -> f64 {
        self.tenths as f64 / 10.0
    }
}

/// One key's counts per hour, not yet flushed (with Redis) or kept (without).
#[derive(Default)]
struct Tally {
    hours: parking_lot::Mutex<BTreeMap<Hour, Counts>>,
}

impl Tally {
    fn add(&self, units: u32) {
        let mut hours = self.hours.lock();
        hours.entry(Hour::now()).or_default().add(Counts {
            calls: 1,
            tenths: u64::from(units),
        });
    }
}

/// The gateway's usage counts (one per gateway, kept across reloads: a key renamed by a reload
/// counts under its new name from then on).
pub struct Book {
    /// By key name. Never shrinks (names come from the config: bounded); hours do.
    tallies: DashMap<Box<str>, Arc<Tally>>,
    /// The fleet's totals in Redis (`None` without `[redis]`).
    fleet: Option<Fleet>,
}

/// Whose counts an answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This instance's (no `[redis]`, or the status page while Redis does not answer).
    Instance,
    /// The fleet's, from Redis.
    Fleet,
}

/// What a query found: counts by hour and key name.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub scope: Scope,
    pub rows: BTreeMap<(Hour, String), Counts>,
    /// What Redis holds that is not usage and was left out of `rows`, hours oldest first.
    pub skipped: Vec<Skipped>,
}

/// A field (`<name>:calls`, `<name>:tenths`) of an hour's usage in Redis that holds something
/// else than a count, or, `field` `None`, an hour whose key holds something else than a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub hour: Hour,
    pub field: Option<String>,
}

/// Why usage cannot be read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageError {
    /// With `[redis]`: Redis does not answer, or this instance's deltas are not in it yet.
    Unavailable,
}

/// One key's total, as the status page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyTotal {
    pub key: String,
    pub calls: u64,
    pub units: f64,
}

impl Book {
    /// Usage kept in memory, or with `shared`, flushed to the fleet's Redis (`metrics` counts
    /// the fields found there holding no count).
    pub fn new(shared: Option<Arc<Shared>>, metrics: &Metrics) -> Arc<Book> {
        Arc::new(Book {
            tallies: DashMap::new(),
            fleet: shared.map(|s| Fleet::new(s, metrics.usage_skipped.clone())),
        })
    }

    /// The counters of key `name`.
    fn tally(&self, name: &str) -> Arc<Tally> {
        if let Some(t) = self.tallies.get(name) {
            return t.clone();
        }
        self.tallies.entry(name.into()).or_default().clone()
    }

    /// Counts one call served for key `name`, charged `units` (tenths).
    pub fn served(&self, name: &str, units: u32) {
        self.tally(name).add(units);
    }

    /// Puts back `counts` of key `name` in `hour` that Redis could not take: held with this
    /// hour's deltas, sent again by the next flushes.
    fn hold(&self, hour: Hour, name: &str, counts: Counts) {
        let tally = self.tally(name);
        let mut hours = tally.hours.lock();
        hours.entry(hour).or_default().add(counts);
    }

    /// What this instance counted and has not flushed (all it counted, without Redis), in
    /// `from..=to`, for `key` (or every key).
    fn local(&self, from: Hour, to: Hour, key: Option<&str>) -> BTreeMap<(Hour, String), Counts> {
        let mut rows = BTreeMap::new();
        for entry in self.tallies.iter() {
            if key.is_some_and(|k| k != &**entry.key()) {
                continue;
            }
            for (hour, counts) in entry.value().hours.lock().range(from..=to) {
                rows.insert((*hour, entry.key().to_string()), *counts);
            }
        }
        rows
    }

    /// The usage of `key` (or every key) in the hours `from..=to`: the fleet's with Redis (see
    /// the module doc), else this instance's.
    pub async fn report(
        &self,
        from: Hour,
        to: Hour,
        key: Option<&str>,
    ) -> Result<Report, UsageError> {
        // Without Redis, or before the network its keys carry is settled, this instance's.
        let Some(fleet) = self.fleet.as_ref().filter(|f| f.settled()) else {
            return Ok(Report {
                scope: Scope::Instance,
                rows: self.local(from, to, key),
                skipped: Vec::new(),
            });
        };
        let mut state = fleet.lock().await;
        // Whatever it does, what is still in flight after it is not in the answer: refuse.
        let _ = fleet.flush(&mut state, self).await;
        if state.in_flight() {
            return Err(UsageError::Unavailable);
        }
        let (mut rows, skipped) = fleet.read(from, to, key).await?;
        for (at, counts) in self.local(from, to, key) {
            rows.entry(at).or_default().add(counts);
        }
        drop(state);
        Ok(Report {
            scope: Scope::Fleet,
            rows,
            skipped,
        })
    }

    /// The `n` keys that were served most calls this hour, for the status page: the fleet's,
    /// or this instance's while Redis does not answer.
    pub async fn top_this_hour(&self, n: usize) -> (Scope, Vec<KeyTotal>) {
        let now = Hour::now();
        let report = match self.report(now, now, None).await {
            Ok(r) => r,
            Err(UsageError::Unavailable) => Report {
                scope: Scope::Instance,
                rows: self.local(now, now, None),
                skipped: Vec::new(),
            },
        };
        let mut top: Vec<KeyTotal> = report
            .rows
            .into_iter()
            .map(|((_, key), c)| KeyTotal {
                key,
                calls: c.calls,
                units: c.units(),
            })
            .collect();
        top.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.key.cmp(&b.key)));
        top.truncate(n);
        (report.scope, top)
    }

    /// The hours that have counts now, oldest first (for a flush).
    fn pending_hours(&self) -> Vec<Hour> {
        let mut hours: Vec<Hour> = self
            .tallies
            .iter()
            .flat_map(|t| t.value().hours.lock().keys().copied().collect::<Vec<_>>())
            .collect();
        hours.sort_unstable();
        hours.dedup();
        hours
    }

    /// Takes every key's deltas of `hour` out of the counters (for a flush).
    fn take(&self, hour: Hour) -> Vec<(Box<str>, Counts)> {
        self.tallies
            .iter()
            .filter_map(|t| {
                let c = t.value().hours.lock().remove(&hour)?;
                Some((t.key().clone(), c))
            })
            .filter(|(_, c)| c.calls > 0 || c.tenths > 0)
            .collect()
    }

    /// Forgets hours that ended more than [`RETENTION`] ago (with Redis, unflushed ones too:
    /// Redis would expire them on arrival).
    fn forget_old(&self) {
        let oldest = Hour::now().back(RETENTION_HOURS);
        for t in self.tallies.iter() {
            let mut hours = t.value().hours.lock();
            *hours = hours.split_off(&oldest);
        }
    }

    /// Flushes to Redis every [`FLUSH_EVERY`] (with `[redis]`) and forgets old hours, until
    /// `stop` flips. The last flush is [`Book::close`]'s, after the requests have drained.
    pub fn spawn_flusher(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => return,
                }
                this.forget_old();
                if let Some(fleet) = &this.fleet {
                    let mut state = fleet.lock().await;
                    let _ = fleet.flush(&mut state, &this).await;
                }
            }
        });
    }

    /// The last flush, on a graceful stop: tries for up to 5 s while Redis does not
    /// answer (probing it, as the watcher has stopped); what cannot be sent is logged as lost.
    pub async fn close(&self) {
        let Some(fleet) = &self.fleet else {
            return;
        };
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
        loop {
            let mut state = fleet.lock().await;
            // Not settled: there is no key to flush to (the stop will not settle it).
            if fleet.settled() && fleet.flush(&mut state, self).await.is_ok() {
                return;
            }
            if !fleet.settled() || tokio::time::Instant::now() >= deadline {
                let lost = state.unsent(self);
                if lost == Counts::default() {
                    return;
                }
                tracing::warn!(
                    calls = lost.calls,
                    units = lost.units(),
                    "usage: Redis did not answer (or the network was never settled) before the stop; this instance's last counts are lost"
                );
                return;
            }
            drop(state);
            fleet.probe().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The usage handle on the request path: counts a key's admitted calls into the gateway's
/// [`Book`] (`None`: not counted, as in tests that build a quota alone).
#[derive(Clone, Default)]
pub struct Usage(Option<Arc<Book>>);

impl Usage {
    /// Counting into `book`.
    pub fn new(book: Arc<Book>) -> Usage {
        Usage(Some(book))
    }

    /// The book, for the admin endpoints.
    pub fn book(&self) -> Option<&Arc<Book>> {
        self.0.as_ref()
    }

    /// Counts a call of key `name` (`None`: not a key client) costing `units` once `admission`
    /// lets it through (now, or when Redis has decided); the admission is passed on unchanged.
    pub fn on_admit(&self, name: Option<&str>, units: u32, admission: Admission) -> Admission {
        let (Some(book), Some(name)) = (&self.0, name) else {
            return admission;
        };
        let tally = book.tally(name);
        match admission {
            Admission::Decided(Ok(())) => {
                tally.add(units);
                Admission::Decided(Ok(()))
            }
            Admission::Decided(Err(e)) => Admission::Decided(Err(e)),
            Admission::Pending(decision) => Admission::Pending(Box::pin(async move {
                decision.await?;
                tally.add(units);
                Ok(())
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ProxyError;

    fn decided(a: Admission) -> Result<(), ProxyError> {
        match a {
            Admission::Decided(v) => v,
            Admission::Pending(_) => panic!("decided"),
        }
    }

    #[tokio::test]
    async fn admitted_calls_of_keys_count_with_their_units_refused_ones_do_not() {
        let book = Book::new(None, &Metrics::new());
        let usage = Usage::new(book.clone());
        for _ in 0..3 {
            assert!(decided(usage.on_admit(Some("a"), 10, Admission::Decided(Ok(())))).is_ok());
        }
        assert!(decided(usage.on_admit(Some("b"), 5, Admission::Decided(Ok(())))).is_ok());
        let refused = Admission::Decided(Err(ProxyError::RateLimited {
            retry_after_secs: 1,
        }));
        assert!(decided(usage.on_admit(Some("b"), 5, refused)).is_err());
        // An address is nobody's usage.
        assert!(decided(usage.on_admit(None, 5, Admission::Decided(Ok(())))).is_ok());
        // A call Redis decides counts once it is let through.
        let pending = Admission::Pending(Box::pin(async { Ok(()) }));
        match usage.on_admit(Some("b"), 5, pending) {
            Admission::Pending(f) => f.await.unwrap(),
            Admission::Decided(_) => panic!("still pending"),
        }
        let now = Hour::now();
        let r = book.report(now.back(1), now, None).await.unwrap();
        assert_eq!(r.scope, Scope::Instance);
        let get = |k: &str| r.rows.get(&(now, k.to_string())).copied();
        assert_eq!(
            get("a"),
            Some(Counts {
                calls: 3,
                tenths: 30
            })
        );
        assert_eq!(
            get("b"),
            Some(Counts {
                calls: 2,
                tenths: 10
            })
        );
        assert_eq!(r.rows.len(), 2);
        let only_b = book.report(now, now, Some("b")).await.unwrap();
        assert_eq!(only_b.rows.len(), 1);
        let (scope, top) = book.top_this_hour(1).await;
        assert_eq!(scope, Scope::Instance);
        assert_eq!(
            top,
            vec![KeyTotal {
                key: "a".into(),
                calls: 3,
                units: 3.0
            }]
        );
    }

    #[test]
    fn a_flush_takes_each_hour_of_every_key_and_old_hours_are_forgotten() {
        let book = Book::new(None, &Metrics::new());
        let now = Hour::now();
        let put = |key: &str, hour: Hour, calls: u64| {
            book.tally(key)
                .hours
                .lock()
                .insert(hour, Counts { calls, tenths: 0 });
        };
        put("a", now.back(2), 1);
        put("b", now.back(2), 2);
        put("b", now, 3);
        put("c", now.back(RETENTION_HOURS + 1), 9);
        book.forget_old();
        assert_eq!(book.pending_hours(), [now.back(2), now]);
        let mut counts = book.take(now.back(2));
        counts.sort_by(|x, y| x.0.cmp(&y.0));
        let calls: Vec<(&str, u64)> = counts.iter().map(|(k, c)| (&**k, c.calls)).collect();
        assert_eq!(calls, [("a", 1), ("b", 2)]);
        assert_eq!(book.take(now).len(), 1);
        assert!(book.pending_hours().is_empty());
    }
}
