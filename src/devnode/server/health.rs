//! The health API (`api/health`): `GET /ext/health` and `/ext/health/{health,readiness,liveness}`
//! answer the report with 200 (healthy) or 503 (unhealthy); POST `/ext/health` is JSON-RPC
//! `health.health` / `health.readiness` / `health.liveness`, always HTTP 200.
//!
//! The devnode simulates three checks, each in the sets a real node puts it in:
//! * `bootstrapped` (readiness, health): fails while the node pretends to bootstrap, with the
//!   unbootstrapped subnet in `message`, like avalanchego's check;
//! * `P` (health): the P-chain's check, failing while bootstrapping, its `message` gives the
//!   height the node sees;
//! * `database` (liveness, health): always passes.
//!
//! Checks run when asked (a real node runs them every 30 s); `contiguousFailures` counts failing
//! evaluations in a row and `timeOfFirstFailure` says when the streak began.

use std::collections::{BTreeMap, HashMap};
use std::time::{Instant, SystemTime};

use http::StatusCode;
use serde::Serialize;

use super::reply::{self, Resp};
use super::routes::HealthKind;
use super::NodeState;
use crate::devnode::chain::CallError;
use crate::jsonrpc::Json;

/// The Primary Network's subnet ID (also the P-chain's ID).
const PRIMARY_NETWORK: &str = "11111111111111111111111111111111LpoYY";

/// One check's result, fields in avalanchego's order and with its `omitempty` rules.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckResult {
    #[serde(rename = "message", skip_serializing_if = "Option::is_none")]
    message: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    timestamp: String,
    duration: u64,
    #[serde(skip_serializing_if = "is_zero")]
    contiguous_failures: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_of_first_failure: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// `APIReply` of the health API.
#[derive(Debug, Serialize)]
struct Report {
    checks: BTreeMap<&'static str, CheckResult>,
    healthy: bool,
}

/// A failing streak of one check.
#[derive(Debug, Default)]
struct Streak {
    failures: i64,
    since: Option<SystemTime>,
}

/// Failure streaks per check (health is not a hot path: a mutex is fine).
#[derive(Default)]
pub struct HealthState {
    streaks: parking_lot::Mutex<HashMap<&'static str, Streak>>,
}

/// Whether `health` has a Go method of this name.
pub fn has_method(go_method: &str) -> bool {
    kind_of(go_method).is_some()
}

fn kind_of(go_method: &str) -> Option<HealthKind> {
    match go_method {
        "Health" => Some(HealthKind::Health),
        "Readiness" => Some(HealthKind::Readiness),
        "Liveness" => Some(HealthKind::Liveness),
        _ => None,
    }
}

/// The GET answer: the report, 200 when healthy, 503 when not (`Content-Type: application/json`).
pub fn get(node: &NodeState, kind: HealthKind) -> Resp {
    let (mut body, healthy) = report(node, kind);
    body.push('\n');
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    reply::json(status, body, "application/json")
}

/// `health.health` / `health.readiness` / `health.liveness`: the report as a JSON-RPC result.
/// Params are `{"tags":[...]}` (accepted and ignored: the devnode tracks no subnets).
pub fn rpc(node: &NodeState, go_method: &str, params: Option<&Json>) -> Result<String, CallError> {
    let kind = kind_of(go_method).ok_or(CallError::BadArgs)?;
    if !tags_decode(params) {
        return Err(CallError::BadArgs);
    }
    Ok(report(node, kind).0)
}

/// Whether params decode into `struct { Tags []string }` (or `[thatStruct]`, as gorilla retries).
fn tags_decode(params: Option<&Json>) -> bool {
    fn object_ok(v: &Json) -> bool {
        match v.field("tags") {
            None | Some(Json::Null) => true,
            Some(Json::Array(items)) => items.iter().all(|t| matches!(t, Json::String(_))),
            Some(_) => false,
        }
    }
    match params {
        None | Some(Json::Null) => true,
        Some(obj @ Json::Object(_)) => object_ok(obj),
        Some(Json::Array(items)) => match items.first() {
            None | Some(Json::Null) => true,
            Some(obj @ Json::Object(_)) => object_ok(obj),
            Some(_) => false,
        },
        Some(_) => false,
    }
}

/// Runs the checks of `kind`: the compact JSON report (no newline) and whether all passed.
fn report(node: &NodeState, kind: HealthKind) -> (String, bool) {
    let bootstrapping = node.faults.bootstrapping();
    let mut checks = BTreeMap::new();
    let mut healthy = true;
    let mut streaks = node.health.streaks.lock();
    let mut run =
        |name: &'static str, check: &dyn Fn() -> (Option<serde_json::Value>, Option<String>)| {
            let started = Instant::now();
            let (message, error) = check();
            let now = SystemTime::now();
            let streak = streaks.entry(name).or_default();
            if error.is_some() {
                healthy = false;
                streak.failures += 1;
                streak.since.get_or_insert(now);
            } else {
                *streak = Streak::default();
            }
            checks.insert(
                name,
                CheckResult {
                    message,
                    error,
                    timestamp: rfc3339_nano(now),
                    duration: u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
                    contiguous_failures: streak.failures,
                    time_of_first_failure: streak.since.map(rfc3339_nano),
                },
            );
        };
    if matches!(kind, HealthKind::Health | HealthKind::Readiness) {
        run("bootstrapped", &|| {
            if bootstrapping {
                (
                    Some(serde_json::json!([PRIMARY_NETWORK])),
                    Some("subnets not bootstrapped".into()),
                )
            } else {
                (Some(serde_json::json!([])), None)
            }
        });
    }
    if kind == HealthKind::Health {
        run("P", &|| {
            let message = serde_json::json!({
                "bootstrapped": !bootstrapping,
                "lastAcceptedHeight": node.height().to_string(),
            });
            let error = bootstrapping.then(|| "chain is not done bootstrapping".to_string());
            (Some(message), error)
        });
    }
    if matches!(kind, HealthKind::Health | HealthKind::Liveness) {
        run("database", &|| (None, None));
    }
    drop(streaks);
    let body = serde_json::to_string(&Report { checks, healthy })
        .unwrap_or_else(|e| format!("{{\"checks\":{{}},\"healthy\":false,\"error\":\"{e}\"}}"));
    (body, healthy)
}

/// Go's `time.RFC3339Nano` in UTC: fractional seconds without trailing zeros.
fn rfc3339_nano(t: SystemTime) -> String {
    let full = humantime::format_rfc3339_nanos(t).to_string();
    // "2026-11-22T02:11:01.123000000Z" -> "2026-11-22T02:11:01.123Z"
    match full.strip_suffix('Z').and_then(|s| s.split_once('.')) {
        Some((secs, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                format!("{secs}Z")
            } else {
                format!("{secs}.{frac}Z")
            }
        }
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_trim_like_go() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(rfc3339_nano(t), "1970-01-01T00:00:01.5Z");
        assert_eq!(
            rfc3339_nano(SystemTime::UNIX_EPOCH + Duration::from_secs(2)),
            "1970-01-01T00:00:02Z"
        );
    }

    #[test]
    fn tags_params() {
        let ok = |s: &str| tags_decode(Some(&Json::parse(s.as_bytes()).unwrap()));
        assert!(tags_decode(None));
        assert!(ok(r#"{"tags":["a"]}"#) && ok("{}") && ok(r#"[{"TAGS":null}]"#) && ok("[]"));
        assert!(!ok(r#"{"tags":"a"}"#) && !ok(r#""x""#) && !ok("[5]"));
    }
}
