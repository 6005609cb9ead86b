//! The vocabulary of a node's state changes, and the one place that reports them: every change is
//! one log line (`upstream state changed`, with `upstream`, `state`, `reason` and, when known,
//! `height` and `best`) and one count in `snowgate_upstream_state_changes_total{upstream,to,
//! reason}`. So an operator greps one message, and a dashboard counts the same events the log
//! shows (a removed node's series go with it); the status page lists the same events (see
//! [`crate::metrics::EventLog`]). A line names the node by its configured name and
//! a fault by its category: never an address, a body or a library's error text.

use super::cordons::By;
use super::health::Fault;
use crate::metrics::{Event, Metrics};
use crate::verify::Mismatch;

/// How a node's state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeEvent {
    /// Its first check passed: it takes traffic from now on.
    Joined { height: Option<u64> },
    /// Healthy again after it was out.
    Back { height: Option<u64> },
    /// Out of the pool: its checks failed (the first one, or `failure_threshold` in a row), or
    /// real requests did (`[health] passive_failures` in a row).
    Unhealthy {
        fault: Fault,
        by: Cause,
        height: Option<u64>,
    },
    /// Healthy but more than `max_lag_blocks` behind the pool: it takes no traffic.
    Lagging { height: u64, best: u64 },
    /// It caught up with the pool again.
    InSync { height: u64, best: u64 },
    /// It reports another network than the pool's: it takes no traffic.
    NetworkMismatch {
        reported: Option<u32>,
        expected: u32,
    },
    /// Its network cannot be read while the pool's is known: it takes no traffic.
    NetworkUnknown,
    /// A reload added it.
    Added,
    /// A reload changed its table: a new node under the old name.
    Replaced,
    /// A reload removed it.
    Removed,
    /// Cordoned (by an admin, the file or the fleet), where nothing cordoned it: it takes no
    /// new calls (those in flight finish).
    Cordoned { by: By },
    /// Its last cordon was lifted.
    Uncordoned { by: By },
    /// It throttled (HTTP 429, or 503 with `Retry-After`): on hold this long, never ejected for it.
    Throttled { hold_ms: u64 },
    /// It answered an immutable call with bytes that contradict the call (`[cache] verify`):
    /// out of the pool until its checks bring it back.
    Lying { mismatch: Mismatch },
}

/// What took a node out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The active health check.
    Check,
    /// Real requests, failing in a row.
    Requests,
}

impl NodeEvent {
    /// The `state` field and the `to` label: the state the node is in now.
    pub(super) fn state(&self) -> &'static str {
        match self {
            NodeEvent::Joined { .. } | NodeEvent::Back { .. } => "healthy",
            NodeEvent::Unhealthy { .. } => "unhealthy",
            NodeEvent::Lagging { .. } => "lagging",
            NodeEvent::InSync { .. } => "in_sync",
            NodeEvent::NetworkMismatch { .. } => "network_mismatch",
            NodeEvent::NetworkUnknown => "network_unknown",
            NodeEvent::Added => "added",
            NodeEvent::Replaced => "replaced",
            NodeEvent::Removed => "removed",
            NodeEvent::Cordoned { .. } => "cordoned",
            NodeEvent::Uncordoned { .. } => "uncordoned",
            NodeEvent::Throttled { .. } => "throttled",
            NodeEvent::Lying { .. } => "lying",
        }
    }

    /// The `reason` field and label: a fault's category, or `joined`, `recovered`, `lag`,
    /// `network`, `reload`, for a cordon who set or lifted it: `admin`, `file`, `fleet`, and for a
    /// lie the check it failed: `hash`, `height`, `id`, `form`.
    pub(super) fn reason(&self) -> String {
        match self {
            NodeEvent::Joined { .. } => "joined".into(),
            NodeEvent::Back { .. } => "recovered".into(),
            NodeEvent::Unhealthy { fault, .. } => fault.to_string(),
            NodeEvent::Lagging { .. } | NodeEvent::InSync { .. } => "lag".into(),
            NodeEvent::NetworkMismatch { .. } | NodeEvent::NetworkUnknown => "network".into(),
            NodeEvent::Added | NodeEvent::Replaced | NodeEvent::Removed => "reload".into(),
            NodeEvent::Cordoned { by } | NodeEvent::Uncordoned { by } => by.reason().into(),
            NodeEvent::Throttled { .. } => "retry_after".into(),
            NodeEvent::Lying { mismatch } => mismatch.check.label().into(),
        }
    }

    /// The status page's line for it: the node's name, its state, the numbers that explain it.
    fn message(&self, upstream: &str, reason: &str) -> String {
        let at = |height: &Option<u64>| height.map_or(String::new(), |h| format!(" at height {h}"));
        match self {
            NodeEvent::Joined { height } => format!("{upstream} joined{}", at(height)),
            NodeEvent::Back { height } => format!("{upstream} is back{}", at(height)),
            NodeEvent::Unhealthy { by, height, .. } => {
                let by = match by {
                    Cause::Check => "its health check",
                    Cause::Requests => "requests",
                };
                format!("{upstream} unhealthy: {reason} (by {by}){}", at(height))
            }
            NodeEvent::Lagging { height, best } => format!(
                "{upstream} lagging: height {height}, best {best} ({} behind)",
                best.saturating_sub(*height)
            ),
            NodeEvent::InSync { height, best } => {
                format!("{upstream} in sync: height {height}, best {best}")
            }
            NodeEvent::NetworkMismatch { reported, expected } => match reported {
                Some(n) => format!("{upstream} is on network {n}, not {expected}"),
                None => format!("{upstream}'s network is not {expected}"),
            },
            NodeEvent::NetworkUnknown => format!("{upstream}'s network cannot be read"),
            NodeEvent::Added => format!("{upstream} added by a reload"),
            NodeEvent::Replaced => format!("{upstream} replaced by a reload"),
            NodeEvent::Removed => format!("{upstream} removed by a reload"),
            NodeEvent::Cordoned { by } => {
                format!("{upstream} cordoned by {}: no new calls", by.words())
            }
            NodeEvent::Uncordoned { by } => format!("{upstream} uncordoned by {}", by.words()),
            NodeEvent::Throttled { hold_ms } => {
                format!("{upstream} throttled: no calls for {hold_ms} ms")
            }
            NodeEvent::Lying { mismatch } => format!(
                "{upstream} lying: it answered {} with {}",
                mismatch.method,
                mismatch.check.words()
            ),
        }
    }
}

/// Reports one state change of the node `upstream`: one log line (warn when it takes no traffic
/// any more, error for another network, else info) and one count.
pub(super) fn report(metrics: &Metrics, upstream: &str, event: NodeEvent) {
    let (state, reason) = (event.state(), event.reason());
    // A removed node's series go with it (see `forget`): its removal is in the log only.
    if event != NodeEvent::Removed {
        metrics
            .upstream_state_changes
            .with_label_values(&[upstream, state, &reason])
            .inc();
    }
    metrics.events.push(Event::now(
        "upstream",
        Some(upstream),
        state,
        &reason,
        event.message(upstream, &reason),
    ));
    // `Option` fields are left out when `None`: numbers appear only when known, and plain.
    let reason = reason.as_str();
    match event {
        NodeEvent::Joined { height } | NodeEvent::Back { height } => {
            tracing::info!(upstream = %upstream, state = %state, reason, height, "upstream state changed")
        }
        NodeEvent::Unhealthy { by, height, .. } => {
            let by = match by {
                Cause::Check => "health check",
                Cause::Requests => "requests",
            };
            tracing::warn!(upstream = %upstream, state = %state, reason, by, height, "upstream state changed")
        }
        NodeEvent::Lagging { height, best } => {
            let behind = best.saturating_sub(height);
            tracing::warn!(upstream = %upstream, state = %state, reason, height, best, behind, "upstream state changed")
        }
        NodeEvent::InSync { height, best } => {
            tracing::info!(upstream = %upstream, state = %state, reason, height, best, "upstream state changed")
        }
        NodeEvent::NetworkMismatch { reported, expected } => {
            tracing::error!(
                upstream = %upstream,
                state = %state,
                reason,
                reported,
                expected,
                "upstream state changed"
            )
        }
        NodeEvent::NetworkUnknown => {
            tracing::warn!(upstream = %upstream, state = %state, reason, "upstream state changed")
        }
        NodeEvent::Throttled { hold_ms } => {
            tracing::warn!(upstream = %upstream, state = %state, reason, hold_ms, "upstream state changed")
        }
        NodeEvent::Lying { mismatch } => {
            // What mismatched, in fixed words: never the node's bytes.
            let (method, answered) = (mismatch.method, mismatch.check.words());
            tracing::warn!(upstream = %upstream, state = %state, reason, method, answered, "upstream state changed")
        }
        NodeEvent::Added
        | NodeEvent::Replaced
        | NodeEvent::Removed
        | NodeEvent::Cordoned { .. }
        | NodeEvent::Uncordoned { .. } => {
            tracing::info!(upstream = %upstream, state = %state, reason, "upstream state changed")
        }
    }
}

/// Drops the state-change series of `upstream` (a reload removed it: its series go).
pub(super) fn forget(metrics: &Metrics, upstream: &str) {
    crate::metrics::remove_series_with(&metrics.upstream_state_changes, "upstream", upstream);
}
