//! The node's health API, answered by the gateway itself from its pool's state, never by a node:
//! `health.health`, `health.readiness` and `health.liveness` (`POST /ext/health`, what
//! avalanchego's Go `health.Client` calls) are registry methods of their own family, decoded,
//! checked by policy and charged like any call, and answered here at the bottom of the per-call
//! stack ([`HealthApi::answer`]) in the node's format: `{"checks":{...},"healthy":bool}`, the
//! node's -32000 for params that do not decode. And the pool's state as `GET /ext/health` shows
//! it ([`HealthApi::status`]), unhealthy while draining.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::call::{Answer, AnswerKind, CacheStatus, RpcCall};
use crate::jsonrpc::Json;
use crate::shared::Shared;
use crate::upstream::{Pool, PoolStatus};

/// What the health of the gateway is read from.
pub struct HealthApi {
    pool: Arc<Pool>,
    /// Set while shutting down: unhealthy, so that load balancers stop sending first.
    draining: Arc<AtomicBool>,
    /// The fleet's Redis (`None` without `[redis]`): a check of its own, never failing.
    shared: Option<Arc<Shared>>,
}

impl HealthApi {
    pub fn new(
        pool: Arc<Pool>,
        draining: Arc<AtomicBool>,
        shared: Option<Arc<Shared>>,
    ) -> HealthApi {
        HealthApi {
            pool,
            draining,
            shared,
        }
    }

    /// The pool's state, unhealthy while draining.
    pub fn status(&self) -> PoolStatus {
        let mut status = self.pool.status();
        if self.draining.load(Ordering::Relaxed) {
            status.healthy = false;
            status.draining = true;
        }
        status
    }

    /// Whether the fleet's Redis is in use (`None` without `[redis]`).
    pub fn redis_up(&self) -> Option<bool> {
        self.shared.as_ref().map(|s| s.available())
    }

    /// Answers a call of the health family as a node does: its result, or the node's -32000 when
    /// its params do not decode into `{"tags":[string]}` (the tags select nothing: every check of
    /// snowgate's is application-wide, which a node always includes).
    pub fn answer(&self, call: &RpcCall) -> Answer {
        let probe = match call.spec.name.as_str() {
            "health.health" => Probe::Health,
            "health.readiness" => Probe::Readiness,
            _ => Probe::Liveness,
        };
        if call.params.as_ref().is_some_and(|p| !tags_decode(p)) {
            let mut payload = String::with_capacity(BAD_ARGS.len() + 48);
            payload.push_str("{\"code\":-32000,\"message\":");
            crate::jsonrpc::gojson::write_go_string(&mut payload, BAD_ARGS);
            payload.push_str(",\"data\":null}");
            return local(AnswerKind::Error, payload.into_bytes());
        }
        let report = match probe {
            // Readiness is health for a gateway: it can serve calls or it cannot.
            Probe::Health | Probe::Readiness => {
                report(&self.status(), self.redis_up(), &now_rfc3339())
            }
            Probe::Liveness => RpcHealth {
                checks: BTreeMap::new(),
                healthy: true,
            },
        };
        local(
            AnswerKind::Result,
            serde_json::to_vec(&report).unwrap_or_default(),
        )
    }
}

/// An answer the gateway made itself.
fn local(kind: AnswerKind, payload: Vec<u8>) -> Answer {
    Answer {
        kind,
        payload: Bytes::from(payload),
        upstream: None,
        upstream_height: None,
        cache: CacheStatus::Local,
        trust: crate::call::Trust::Vouched,
    }
}

/// The message of a node's -32000 when params do not decode into the method's arguments.
const BAD_ARGS: &str = "couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls";

/// Which of the node's health methods a call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Health,
    Readiness,
    Liveness,
}

/// A health method's result as a node writes it (`api/health` `APIReply`): check name ->
/// result, and whether the whole is healthy. A `BTreeMap` gives Go's sorted map keys.
#[derive(serde::Serialize)]
struct RpcHealth {
    checks: BTreeMap<String, CheckResult>,
    healthy: bool,
}

/// One check as a node writes it (`health.Result`): details under `message`, `error` when
/// failing, when it was taken and how long it took (ns). snowgate keeps no history of failures,
/// so `contiguousFailures` and `timeOfFirstFailure` (both omitted when empty on a node) are
/// left out.
#[derive(serde::Serialize)]
struct CheckResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    timestamp: String,
    duration: u64,
}

/// The check of the gateway as a whole; upstream checks are named after their `name`.
const GATEWAY_CHECK: &str = "snowgate";
/// The check of the fleet's Redis (only with `[redis]`).
const SHARED_CHECK: &str = "shared";

/// The health report of a pool in the node's format: one check per upstream (its configured
/// name; failing while it takes no traffic), `snowgate` (failing while draining or while no
/// upstream takes traffic) and `shared` with `[redis]` (never failing: snowgate answers without
/// Redis). `healthy` is what `GET /ext/health` says (some node takes traffic, not draining), so
/// one node down shows as a failing check of a healthy gateway.
fn report(status: &crate::upstream::PoolStatus, redis: Option<bool>, now: &str) -> RpcHealth {
    let check = |message: serde_json::Value, error: Option<String>| CheckResult {
        message: Some(message),
        error,
        timestamp: now.to_string(),
        duration: 0,
    };
    let mut checks = BTreeMap::new();
    for u in &status.upstreams {
        // A fallback on standby is as well as one that takes traffic: it would, were it needed.
        let error = if u.takes_traffic || u.standby {
            None
        } else if u.throttled {
            Some("throttled".into())
        } else if !u.healthy {
            Some(u.last_error.clone().unwrap_or_else(|| "unhealthy".into()))
        } else if u.implausible_height {
            Some("implausible height".into())
        } else {
            Some("behind the pool's height".into())
        };
        let message = serde_json::to_value(u).unwrap_or_default();
        checks.insert(u.name.clone(), check(message, error));
    }
    let error = if status.draining {
        Some("draining".to_string())
    } else if !status.healthy {
        Some("no upstream takes traffic".to_string())
    } else {
        None
    };
    let message = serde_json::json!({
        "bestHeight": status.best_height,
        "draining": status.draining,
    });
    checks.insert(GATEWAY_CHECK.into(), check(message, error));
    if let Some(up) = redis {
        let message = serde_json::json!({ "redis": if up { "up" } else { "down" } });
        checks.insert(SHARED_CHECK.into(), check(message, None));
    }
    RpcHealth {
        checks,
        healthy: status.healthy && !status.draining,
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}

/// Whether `params` decode into a node's `health.APIArgs` (`{"tags":[string]}`) as Go's decoder
/// does it: an object (keys matched case-insensitively, others ignored), else gorilla's retry as
/// a one-element array of it (`[]` and extra elements allowed).
fn tags_decode(params: &Json) -> bool {
    let args = |v: &Json| match v {
        Json::Null => true,
        Json::Object(_) => match v.field("tags") {
            None | Some(Json::Null) => true,
            Some(Json::Array(tags)) => tags
                .iter()
                .all(|t| matches!(t, Json::String(_) | Json::Null)),
            Some(_) => false,
        },
        _ => false,
    };
    match params {
        Json::Array(items) => items.first().map_or(true, args),
        other => args(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_own_check_names_are_reserved_for_upstreams() {
        let reserved = crate::config::upstream::RESERVED_UPSTREAM_NAMES;
        assert!(reserved.contains(&GATEWAY_CHECK) && reserved.contains(&SHARED_CHECK));
    }
    use crate::upstream::{PoolStatus, UpstreamStatus};

    fn upstream(name: &str, takes_traffic: bool, last_error: Option<&str>) -> UpstreamStatus {
        UpstreamStatus {
            name: name.into(),
            role: None,
            healthy: last_error.is_none(),
            takes_traffic,
            implausible_height: false,
            bootstrapped: true,
            height: Some(7),
            in_flight: 0,
            cordoned: false,
            throttled: false,
            cooling_methods: Vec::new(),
            standby: false,
            cordoned_by: Vec::new(),
            lying: false,
            last_error: last_error.map(str::to_string),
            network_id: Some(1),
            network_mismatch: false,
            version: None,
        }
    }

    #[test]
    fn one_node_down_is_a_failing_check_of_a_healthy_gateway_and_redis_never_fails() {
        let status = PoolStatus {
            healthy: true,
            draining: false,
            best_height: 7,
            upstreams: vec![
                upstream("a", true, None),
                upstream("b", false, Some("connect refused")),
                upstream("c", false, None),
            ],
        };
        let now = "2026-11-23T19:00:00Z";
        let r = report(&status, Some(false), now);
        assert!(r.healthy);
        let errors: Vec<_> = r
            .checks
            .iter()
            .map(|(k, c)| (k.as_str(), c.error.as_deref()))
            .collect();
        assert_eq!(
            errors,
            [
                ("a", None),
                ("b", Some("connect refused")),
                ("c", Some("behind the pool's height")),
                ("shared", None),
                ("snowgate", None),
            ]
        );
        assert_eq!(
            r.checks["shared"].message,
            Some(serde_json::json!({"redis": "down"}))
        );
        assert!(r.checks.values().all(|c| c.timestamp == now));

        let draining = PoolStatus {
            healthy: false,
            draining: true,
            ..status
        };
        let r = report(&draining, None, now);
        assert!(!r.healthy);
        assert!(!r.checks.contains_key("shared"));
        assert_eq!(r.checks["snowgate"].error.as_deref(), Some("draining"));
    }

    #[test]
    fn params_decode_as_a_nodes_health_args_or_get_its_error() {
        let params = |text: &str| {
            crate::jsonrpc::decode(
                format!(r#"{{"jsonrpc":"2.0","method":"health.health","params":{text},"id":1}}"#)
                    .as_bytes(),
            )
            .envelope
            .params
        };
        for ok in [
            "null",
            "{}",
            r#"{"tags":null}"#,
            r#"{"TAGS":["11111111111111111111111111111111LpoYY"]}"#,
            r#"{"tags":["a",null],"other":1}"#,
            "[]",
            r#"[{"tags":["a"]},2]"#,
        ] {
            assert!(params(ok).as_ref().map_or(true, tags_decode), "{ok}");
        }
        for bad in [
            r#"{"tags":"x"}"#,
            r#"{"tags":[1]}"#,
            "1",
            r#""tags""#,
            "[1]",
        ] {
            assert!(!params(bad).as_ref().map_or(true, tags_decode), "{bad}");
        }
    }
}
