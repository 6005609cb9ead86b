//! The status page's event log: what an operator wants to see happen (a node's state change, a
//! reload, the Redis tier going down or coming back), kept by the metrics for the page to show.

use super::unix_ms;

/// How many events [`EventLog`] keeps.
pub const EVENTS_KEPT: usize = 50;

/// One thing an operator wants to see happen: a node's state change, a reload, the Redis tier
/// going down or coming back. Its words are the log line's: names and categories, never an
/// address, a key or a library's error text.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Event {
    /// Unix milliseconds.
    pub at: u64,
    /// `upstream`, `reload` or `redis`.
    pub kind: &'static str,
    /// The node's name (`upstream` events).
    pub subject: Option<String>,
    pub state: String,
    pub reason: String,
    pub message: String,
}

impl Event {
    /// An event that happens now.
    pub fn now(
        kind: &'static str,
        subject: Option<&str>,
        state: &str,
        reason: &str,
        message: String,
    ) -> Event {
        Event {
            at: unix_ms(),
            kind,
            subject: subject.map(str::to_string),
            state: state.to_string(),
            reason: reason.to_string(),
            message,
        }
    }
}

/// The last [`EVENTS_KEPT`] events. Written only when something changes (never per request), so
/// one short lock is all it needs.
///
/// When it is full, the event that goes is the oldest of the subject (a node, or reloads, or
/// Redis) that has the most events kept, not the oldest of all: one node flapping (up and down,
/// lagging and back, a cordon going on and off) then fills the log with its own changes but never
/// pushes out the one event that says why another node is down. The whole history is in the log
/// and in `snowgate_upstream_state_changes_total`.
#[derive(Debug, Default)]
pub struct EventLog {
    recent: parking_lot::Mutex<std::collections::VecDeque<Event>>,
}

impl EventLog {
    /// Keeps `event`; beyond [`EVENTS_KEPT`], drops the oldest event of the subject with the most
    /// events kept (see the type's doc).
    pub fn push(&self, event: Event) {
        let mut recent = self.recent.lock();
        if recent.len() >= EVENTS_KEPT {
            let at = evicted(&recent, &event);
            recent.remove(at);
        }
        recent.push_back(event);
    }

    /// The events kept, newest first.
    pub fn newest_first(&self) -> Vec<Event> {
        self.recent.lock().iter().rev().cloned().collect()
    }
}

/// Which of the events kept goes to make room for `incoming`: the oldest of the subject with the
/// most events (`incoming` counted with its own), the oldest of them on a tie; 0 when the log is
/// empty.
fn evicted(kept: &std::collections::VecDeque<Event>, incoming: &Event) -> usize {
    let same = |a: &Event, b: &Event| a.kind == b.kind && a.subject == b.subject;
    // At most [`EVENTS_KEPT`] events: counting them pairwise is cheaper than hashing, and this
    // runs only when something changes.
    let count = |who: &Event| {
        kept.iter().filter(|e| same(e, who)).count() + usize::from(same(incoming, who))
    };
    let counts: Vec<usize> = kept.iter().map(count).collect();
    let most = counts.iter().copied().max().unwrap_or(0);
    counts.iter().position(|n| *n == most).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_event_log_drops_the_oldest_of_the_busiest_subject() {
        let log = EventLog::default();
        let event = |subject: &str, state: &str| {
            Event::now("upstream", Some(subject), state, "r", String::new())
        };
        log.push(event("a", "unhealthy"));
        log.push(Event::now("reload", None, "ok", "reload", String::new()));
        for i in 0..200 {
            log.push(event("b", if i % 2 == 0 { "lagging" } else { "in_sync" }));
        }
        let kept = log.newest_first();
        assert_eq!(kept.len(), EVENTS_KEPT);
        assert_eq!(kept[0].state, "in_sync", "the newest first");
        let states: Vec<_> = kept.iter().map(|e| e.state.as_str()).collect();
        assert_eq!(
            &states[EVENTS_KEPT - 2..],
            ["ok", "unhealthy"],
            "{states:?}"
        );
        // Then `a` changes more than `b`: its own oldest go first.
        for _ in 0..60 {
            log.push(event("a", "healthy"));
        }
        let kept = log.newest_first();
        let of = |s: &str| {
            kept.iter()
                .filter(|e| e.subject.as_deref() == Some(s))
                .count()
        };
        assert_eq!((of("a"), of("b")), (25, 24), "reload keeps its one");
    }
}
