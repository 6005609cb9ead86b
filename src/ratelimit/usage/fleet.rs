//! The Redis side of usage: one batch of deltas sent at most once (`flush.lua`), and an hour's
//! fleet-wide totals read back. The design (ledger per hour, per-instance seq, one batch in
//! flight) is in the parent module's doc.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redis::Script;

use super::{Book, Counts, Hour, UsageError, RETENTION};
use crate::shared::Shared;

/// The script adding one batch at most once (see its header).
const SCRIPT: &str = include_str!("flush.lua");

/// The redis-errors metric's label for usage.
const OP: &str = "usage";

/// Usage kept in the fleet's Redis.
pub(super) struct Fleet {
    shared: Arc<Shared>,
    script: Script,
    /// `{key_prefix}usage:`.
    prefix: String,
    /// This process's id in the ledgers: random, so that a restarted instance starts a new
    /// sequence without colliding with its predecessor's.
    instance: String,
    state: tokio::sync::Mutex<FlushState>,
}

/// The flush's own state: taken by one flush (or read) at a time.
pub(super) struct FlushState {
    /// The last seq given to a batch.
    seq: u64,
    /// The batch sent and not yet known applied: sent again, unchanged, until it is.
    in_flight: Option<Batch>,
}

/// One hour's deltas, numbered.
struct Batch {
    hour: Hour,
    seq: u64,
    counts: Vec<(Box<str>, Counts)>,
}

impl FlushState {
    /// Whether a batch waits for Redis.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// What this instance has not sent: the batch in flight and the deltas counted since.
    pub(super) fn unsent(&self, book: &Book) -> Counts {
        let mut total = Counts::default();
        for (_, c) in self.in_flight.iter().flat_map(|b| &b.counts) {
            total.add(*c);
        }
        for t in book.tallies.iter() {
            for c in t.value().hours.lock().values() {
                total.add(*c);
            }
        }
        total
    }
}

impl Fleet {
    pub(super) fn new(shared: Arc<Shared>) -> Fleet {
        Fleet {
            prefix: format!("{}usage:", shared.prefix()),
            shared,
            script: Script::new(SCRIPT),
            instance: format!("{:016x}", rand::random::<u64>()),
            state: tokio::sync::Mutex::new(FlushState {
                seq: 0,
                in_flight: None,
            }),
        }
    }

    /// Takes the flush's turn.
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, FlushState> {
        self.state.lock().await
    }

    /// The Redis key of `hour`'s totals: the hour is the Cluster hash tag its ledger shares.
    fn key(&self, hour: Hour) -> String {
        format!("{}{{{}}}", self.prefix, hour.compact())
    }

    /// Sends the batch in flight, then each hour that has deltas now, one batch each; stops at
    /// the first that Redis does not take (it stays in flight). Deltas counted meanwhile wait
    /// for the next flush, so a flush ends under any load.
    pub(super) async fn flush(
        &self,
        state: &mut FlushState,
        book: &Book,
    ) -> Result<(), UsageError> {
        if let Some(batch) = &state.in_flight {
            self.send(batch).await?;
            state.in_flight = None;
        }
        for hour in book.pending_hours() {
            let counts = book.take(hour);
            if counts.is_empty() {
                continue;
            }
            state.seq += 1;
            let batch = Batch {
                hour,
                seq: state.seq,
                counts,
            };
            let sent = self.send(&batch).await;
            if sent.is_err() {
                state.in_flight = Some(batch);
                return sent;
            }
        }
        Ok(())
    }

    /// Runs the script for `batch` (applied, or applied before: both are success).
    async fn send(&self, batch: &Batch) -> Result<(), UsageError> {
        let key = self.key(batch.hour);
        let ledger = format!("{key}:applied");
        let expire_at = batch.hour.start_secs() + 3600 + RETENTION.as_secs();
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(&key)
            .key(&ledger)
            .arg(&self.instance)
            .arg(batch.seq)
            .arg(expire_at);
        for (name, c) in &batch.counts {
            invocation
                .arg(format!("{name}:calls"))
                .arg(c.calls)
                .arg(format!("{name}:tenths"))
                .arg(c.tenths);
        }
        let _applied: i64 = self
            .shared
            .invoke(OP, &invocation)
            .await
            .map_err(|_| UsageError::Unavailable)?;
        Ok(())
    }

    /// The fleet's totals in Redis for `from..=to` (and `key` only, when given).
    pub(super) async fn read(
        &self,
        from: Hour,
        to: Hour,
        key: Option<&str>,
    ) -> Result<BTreeMap<(Hour, String), Counts>, UsageError> {
        let mut rows: BTreeMap<(Hour, String), Counts> = BTreeMap::new();
        for h in from.0..=to.0 {
            let hour = Hour(h);
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(self.key(hour));
            let fields: HashMap<String, u64> = self
                .shared
                .query(OP, &cmd)
                .await
                .map_err(|_| UsageError::Unavailable)?;
            for (field, value) in fields {
                let Some((name, what)) = field.rsplit_once(':') else {
                    continue;
                };
                if key.is_some_and(|k| k != name) {
                    continue;
                }
                let counts = rows.entry((hour, name.to_string())).or_default();
                match what {
                    "calls" => counts.calls = counts.calls.saturating_add(value),
                    "tenths" => counts.tenths = counts.tenths.saturating_add(value),
                    _ => {}
                }
            }
        }
        Ok(rows)
    }

    /// One probe of Redis (a graceful stop's last flush, when the watcher has stopped).
    pub(super) async fn probe(&self) {
        if !self.shared.available() {
            self.shared.check().await;
        }
    }
}
