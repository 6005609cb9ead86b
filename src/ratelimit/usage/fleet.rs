//! The Redis side of usage: one batch of deltas sent at most once, and never half (`flush.lua`),
//! and an hour's fleet-wide totals read back. The design (ledger per hour, per-instance seq, one
//! batch in flight, what is held when Redis holds someone else's value) is in the parent module's
//! doc.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use prometheus::IntCounter;
use redis::{Script, Value};

use super::{Book, Counts, Hour, Skipped, UsageError, RETENTION, RETENTION_HOURS};
use crate::shared::Shared;

/// The script adding one batch at most once (see its header).
const SCRIPT: &str = include_str!("flush.lua");

/// Reads an hour's totals: `-1` when the key holds something else than a hash (nothing copied
/// out), else its fields and values (none when there is no key). Nothing longer than a count or a
/// name of snowgate's is copied out: a value over 20 bytes (no count is longer) comes back empty
/// and a field name over 256 bytes cut, both then read as not a count, skipped and named, so that
/// a foreign writer's 300 MB value costs the read nothing but its length (and never a timeout
/// that would take Redis out for everyone).
const READ: &str = r"
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return -1 end
local out = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if #f > 256 then
    out[#out + 1] = string.sub(f, 1, 256)
    out[#out + 1] = ''
  elseif redis.call('HSTRLEN', KEYS[1], f) > 20 then
    out[#out + 1] = f
    out[#out + 1] = ''
  else
    out[#out + 1] = f
    out[#out + 1] = redis.call('HGET', KEYS[1], f)
  end
end
return out
";

/// The redis-errors metric's label for usage.
const OP: &str = "usage";

/// Usage kept in the fleet's Redis.
pub(super) struct Fleet {
    shared: Arc<Shared>,
    script: Script,
    read: Script,
    /// This process's id in the ledgers: random, so that a restarted instance starts a new
    /// sequence without colliding with its predecessor's.
    instance: String,
    /// `snowgate_usage_skipped_fields_total`.
    skipped: IntCounter,
    state: tokio::sync::Mutex<FlushState>,
}

/// The flush's own state: taken by one flush (or read) at a time.
pub(super) struct FlushState {
    /// The last seq given to a batch.
    seq: u64,
    /// The batch sent and not yet answered: sent again, unchanged, until it is.
    in_flight: Option<Batch>,
    /// The fields (or whole hours, field `None`) found holding someone else's value: each warned
    /// about and counted once, until it holds a count again. Hours past [`RETENTION`] go.
    foreign: BTreeSet<(Hour, Option<Box<str>>)>,
}

/// One hour's deltas, numbered.
struct Batch {
    hour: Hour,
    seq: u64,
    counts: Vec<(Box<str>, Counts)>,
}

/// What Redis did with a batch.
enum Sent {
    /// Applied (now or before), but these fields, which hold someone else's value.
    Applied(Vec<Box<str>>),
    /// Not applied: the hour's totals (`"totals"`) or ledger (`"ledger"`) hold someone else's
    /// value.
    Foreign(&'static str),
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

/// Whether `v` is a count as Redis's `HINCRBY` writes one (the script's `count`): a decimal
/// integer in 0..=i64::MAX, no sign, no leading zero.
pub(super) fn count(v: &[u8]) -> Option<u64> {
    let digits = v.iter().all(u8::is_ascii_digit);
    if v.is_empty() || !digits || (v.len() > 1 && v[0] == b'0') {
        return None;
    }
    std::str::from_utf8(v)
        .ok()?
        .parse::<u64>()
        .ok()
        .filter(|n| i64::try_from(*n).is_ok())
}

/// The most characters of a field's name an answer repeats: a foreign field may be any size.
const MAX_FIELD_SHOWN: usize = 200;

/// `field` as an answer names it: cut at [`MAX_FIELD_SHOWN`] characters.
fn shown(field: &str) -> String {
    match field.char_indices().nth(MAX_FIELD_SHOWN) {
        Some((at, _)) => format!("{}…", &field[..at]),
        None => field.to_string(),
    }
}

impl Fleet {
    pub(super) fn new(shared: Arc<Shared>, skipped: IntCounter) -> Fleet {
        Fleet {
            shared,
            script: Script::new(SCRIPT),
            read: Script::new(READ),
            instance: format!("{:016x}", rand::random::<u64>()),
            skipped,
            state: tokio::sync::Mutex::new(FlushState {
                seq: 0,
                in_flight: None,
                foreign: BTreeSet::new(),
            }),
        }
    }

    /// Takes the flush's turn.
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, FlushState> {
        self.state.lock().await
    }

    /// Whether the pool's network is settled: usage keys carry it, so nothing is flushed or read
    /// before.
    pub(super) fn settled(&self) -> bool {
        self.shared.network().prefix().is_some()
    }

    /// The Redis key of `hour`'s totals, `{key_prefix}{network ID}:usage:{YYYYMMDDHH}` (the hour is
    /// the Cluster hash tag its ledger shares); `None` before the network is settled.
    fn key(&self, hour: Hour) -> Option<String> {
        let network = self.shared.network().prefix()?;
        Some(format!("{network}usage:{{{}}}", hour.compact()))
    }

    /// Sends the batch in flight, then each hour that has deltas now, one batch each; stops at
    /// the first that Redis does not answer (it stays in flight). Deltas counted meanwhile wait
    /// for the next flush, so a flush ends under any load. What Redis cannot take (a field or an
    /// hour holding someone else's value) goes back into the counters, held until it can.
    /// Nothing is sent before the network is settled.
    pub(super) async fn flush(
        &self,
        state: &mut FlushState,
        book: &Book,
    ) -> Result<(), UsageError> {
        if !self.settled() {
            return Ok(());
        }
        let oldest = Hour::now().back(RETENTION_HOURS);
        state.foreign.retain(|(hour, _)| *hour >= oldest);
        if let Some(batch) = state.in_flight.take() {
            match self.send(&batch).await {
                Ok(sent) => self.settle(state, batch, sent, book),
                Err(e) => {
                    state.in_flight = Some(batch);
                    return Err(e);
                }
            }
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
            match self.send(&batch).await {
                Ok(sent) => self.settle(state, batch, sent, book),
                Err(e) => {
                    state.in_flight = Some(batch);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Runs the script for `batch`.
    async fn send(&self, batch: &Batch) -> Result<Sent, UsageError> {
        let key = self.key(batch.hour).ok_or(UsageError::Unavailable)?;
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
        let reply: Vec<Value> = self
            .shared
            .invoke(OP, &invocation)
            .await
            .map_err(|_| UsageError::Unavailable)?;
        let mut reply = reply.into_iter();
        let fields = |rest: std::vec::IntoIter<Value>| {
            rest.filter_map(|v| match v {
                Value::BulkString(f) => Some(String::from_utf8_lossy(&f).into()),
                _ => None,
            })
            .collect()
        };
        match reply.next() {
            Some(Value::Int(0 | 1)) => Ok(Sent::Applied(fields(reply))),
            Some(Value::Int(-1)) => Ok(Sent::Foreign("totals")),
            Some(Value::Int(-2)) => Ok(Sent::Foreign("ledger")),
            // Not this script's answer: as if Redis had not answered (sent again unchanged).
            _ => Err(UsageError::Unavailable),
        }
    }

    /// Applies what Redis did with `batch`: the counts it did not take go back into the book,
    /// held until it does; a field or hour newly found foreign is warned about and counted once.
    fn settle(&self, state: &mut FlushState, batch: Batch, sent: Sent, book: &Book) {
        let hour = batch.hour;
        let skipped = match sent {
            Sent::Foreign(which) => {
                if state.foreign.insert((hour, None)) {
                    self.skipped.inc();
                    tracing::warn!(
                        hour = %hour.iso(),
                        key = which,
                        "usage: the hour's {which} in Redis hold something else than usage; its counts are held in memory, not added"
                    );
                }
                for (name, counts) in batch.counts {
                    book.hold(hour, &name, counts);
                }
                return;
            }
            Sent::Applied(skipped) => skipped,
        };
        if state.foreign.remove(&(hour, None)) {
            tracing::info!(hour = %hour.iso(), "usage: the hour's keys in Redis hold usage again");
        }
        for (name, counts) in batch.counts {
            let mut held = Counts::default();
            for (what, n) in [("calls", counts.calls), ("tenths", counts.tenths)] {
                let field: Box<str> = format!("{name}:{what}").into();
                let was_foreign = state.foreign.contains(&(hour, Some(field.clone())));
                if skipped.contains(&field) {
                    if what == "calls" {
                        held.calls = n;
                    } else {
                        held.tenths = n;
                    }
                    if !was_foreign {
                        self.skipped.inc();
                        tracing::warn!(
                            hour = %hour.iso(),
                            field = %field,
                            "usage: a field in Redis holds something else than a count; not added to, its counts held in memory"
                        );
                        state.foreign.insert((hour, Some(field)));
                    }
                } else if was_foreign {
                    state.foreign.remove(&(hour, Some(field.clone())));
                    tracing::info!(hour = %hour.iso(), field = %field, "usage: a field in Redis holds a count again; what was held is added");
                }
            }
            if held.calls > 0 || held.tenths > 0 {
                book.hold(hour, &name, held);
            }
        }
    }

    /// The fleet's totals in Redis for `from..=to` (and `key` only, when given), and what could
    /// not be read: fields that hold no count, hours whose key holds no hash.
    pub(super) async fn read(
        &self,
        from: Hour,
        to: Hour,
        key: Option<&str>,
    ) -> Result<(BTreeMap<(Hour, String), Counts>, Vec<Skipped>), UsageError> {
        let mut rows: BTreeMap<(Hour, String), Counts> = BTreeMap::new();
        let mut skipped = Vec::new();
        for h in from.0..=to.0 {
            let hour = Hour(h);
            let redis_key = self.key(hour).ok_or(UsageError::Unavailable)?;
            let mut invocation = self.read.prepare_invoke();
            invocation.key(&redis_key);
            let value: Value = self
                .shared
                .invoke(OP, &invocation)
                .await
                .map_err(|_| UsageError::Unavailable)?;
            let items = match value {
                Value::Array(items) => items,
                _ => {
                    skipped.push(Skipped { hour, field: None });
                    continue;
                }
            };
            let mut items = items.into_iter();
            while let (Some(field), Some(value)) = (items.next(), items.next()) {
                let (Value::BulkString(field), Value::BulkString(value)) = (field, value) else {
                    continue;
                };
                let field = String::from_utf8_lossy(&field);
                let Some((name, what)) = field.rsplit_once(':') else {
                    continue;
                };
                if key.is_some_and(|k| k != name) || !matches!(what, "calls" | "tenths") {
                    continue;
                }
                let Some(value) = count(&value) else {
                    skipped.push(Skipped {
                        hour,
                        field: Some(shown(&field)),
                    });
                    continue;
                };
                let counts = rows.entry((hour, name.to_string())).or_default();
                match what {
                    "calls" => counts.calls = counts.calls.saturating_add(value),
                    _ => counts.tenths = counts.tenths.saturating_add(value),
                }
            }
        }
        Ok((rows, skipped))
    }

    /// One probe of Redis (a graceful stop's last flush, when the watcher has stopped).
    pub(super) async fn probe(&self) {
        if !self.shared.available() {
            self.shared.check().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn a_count_is_what_hincrby_writes_and_nothing_else() {
        assert_eq!(count(b"0"), Some(0));
        assert_eq!(count(b"10"), Some(10));
        assert_eq!(count(b"9223372036854775807"), Some(i64::MAX as u64));
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"01",
            b"1.5",
            b"1e3",
            b" 1",
            b"ten",
            b"9223372036854775808",
            b"99999999999999999999",
        ] {
            assert_eq!(count(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
