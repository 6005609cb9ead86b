//! What `/ext/health` shows of the pool: per node its health, height and last fault category
//! (never an address or a body), and whether the pool as a whole takes traffic.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::pool::Pool;

/// The state of one upstream as `/ext/health` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    pub name: String,
    /// `"fallback"` for a fallback (takes traffic only while no primary can); absent for a primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Passing its health checks.
    pub healthy: bool,
    /// Healthy and its height admitted (within `max_lag_blocks` of the quorum height): receives
    /// requests.
    pub takes_traffic: bool,
    /// Its height is implausibly far ahead of what the other nodes report: it takes no traffic.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub implausible_height: bool,
    pub bootstrapped: bool,
    pub height: Option<u64>,
    /// The network it reports (`info.getNetworkID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_id: Option<u32>,
    /// It reports another network than the pool's: it takes no traffic.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub network_mismatch: bool,
    /// The avalanchego version it reports (`info.getNodeVersion`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub in_flight: usize,
    /// Cordoned (by the file, an admin or the fleet): it takes no new calls.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
    /// On hold because it throttled (HTTP 429, or 503 with `Retry-After`): no calls until then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub throttled: bool,
    /// Methods it is not sent for now: it kept failing them (the per-method breaker).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cooling_methods: Vec<String>,
    /// A healthy fallback while a primary serves: it takes a call only once every primary was
    /// tried for it, and is checked at its own cadence.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub standby: bool,
    /// It answered an immutable call with bytes that contradict the call (`[cache] verify`): it
    /// takes no traffic until its checks bring it back (`lastError` says what it answered).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lying: bool,
    /// Who cordons it, when cordoned: `file` (`[[upstreams]] cordoned`), `instance` (an admin of
    /// this instance, not shared with the fleet), `fleet` (the fleet's Redis).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cordoned_by: Vec<&'static str>,
    /// Why its last check or request failed: a fixed category (`connect refused`, `timeout`,
    /// `http 500`, `bad answer`, `not bootstrapped`, ...), never an address or a body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The pool's state as `/ext/health` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub healthy: bool,
    /// snowgate is shutting down: load balancers should stop sending.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    pub best_height: u64,
    pub upstreams: Vec<UpstreamStatus>,
}

impl Pool {
    /// When the best height last moved (unix milliseconds), if it ever did.
    pub fn best_moved_ms(&self) -> Option<u64> {
        Some(self.best_moved_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// The one release every node that takes traffic runs (see [`crate::call::BestHeight`]).
    pub fn release(&self) -> Option<String> {
        let heights = self.heights();
        let mut release: Option<String> = None;
        for u in self.members().upstreams.iter() {
            let serving = {
                let s = u.state.lock();
                super::health::eligible(&s, &heights) && !u.cordoned.load(Ordering::Relaxed)
            };
            if !serving || !u.info_api {
                continue;
            }
            let version = u.identity.lock().version.clone()?;
            match &release {
                Some(r) if *r != version => return None,
                _ => release = Some(version),
            }
        }
        release
    }

    /// The pool's state for `/ext/health`.
    pub fn status(&self) -> PoolStatus {
        let now = std::time::Instant::now();
        let primaries_serve = self.primaries_serve.load(Ordering::Relaxed);
        let upstreams: Vec<UpstreamStatus> = self
            .members()
            .upstreams
            .iter()
            .map(|u| {
                let s = u.snapshot();
                let identity = u.identity.lock().clone();
                let cordoned_by = u.cordoned_by();
                let cordoned = cordoned_by.any();
                let throttled = s.held(now);
                let standby = u.fallback
                    && primaries_serve
                    && s.healthy
                    && s.network_ok()
                    && !cordoned
                    && !throttled;
                UpstreamStatus {
                    name: u.name.to_string(),
                    role: u.fallback.then_some("fallback"),
                    healthy: s.healthy,
                    takes_traffic: self.takes_traffic(&s) && !cordoned && !throttled && !standby,
                    implausible_height: self.heights().implausible(s.height),
                    bootstrapped: s.bootstrapped,
                    height: s.height,
                    network_id: identity.network_id,
                    network_mismatch: s.network_mismatch,
                    version: identity.version,
                    in_flight: u.in_flight.load(Ordering::Relaxed),
                    cordoned,
                    throttled,
                    cooling_methods: u.cooling_methods(now),
                    standby,
                    cordoned_by: cordoned_by.names(),
                    lying: s.lying.is_some(),
                    // A node that answers but is kept out for its network says so (one that
                    // fails its checks says why it fails, and a liar what it answered).
                    last_error: match (s.lying, s.last_error, s.network_unknown) {
                        (Some(m), _, _) => Some(format!(
                            "wrong answer: {} with {}",
                            m.method,
                            m.check.words()
                        )),
                        (None, Some(fault), _) => Some(fault.to_string()),
                        (None, None, true) => Some(super::Fault::NetworkUnknown.to_string()),
                        (None, None, false) => None,
                    },
                }
            })
            .collect();
        PoolStatus {
            healthy: upstreams.iter().any(|u| u.takes_traffic),
            draining: false,
            best_height: self.best_height(),
            upstreams,
        }
    }
}
