//! Faults on demand: what a test (or an operator at the control endpoint) can make a devnode do
//! wrong, so the gateway's health checks, retries and lag detection have something to detect.
//!
//! [`Faults`] is plain data (serde, `Default` = healthy). [`FaultState`] is its live copy inside a
//! node: per-request faults sit behind one atomic flag, so a healthy node pays a single relaxed
//! load per request; the frozen height and the bootstrapping flag are atomics of their own because
//! every RPC reads them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Faults a devnode simulates. `Faults::default()` is a healthy node.
///
/// In JSON (control endpoint) durations are humantime strings (`"250ms"`), rates fractions in
/// `[0, 1]`; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Fixed delay added before every answer (node routes and health, not the control endpoint).
    #[serde(with = "humantime_serde")]
    pub latency: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per request, on top of `latency`.
    #[serde(with = "humantime_serde")]
    pub jitter: Duration,
    /// Fraction of requests answered HTTP 500 with a short text body.
    pub error_rate: f64,
    /// Fraction of requests delayed by `slow_latency` on top of the rest (a tail that no
    /// balancer can steer around: any request, on any node, at random).
    pub slow_rate: f64,
    /// The delay of those requests.
    #[serde(with = "humantime_serde")]
    pub slow_latency: Duration,
    /// Fraction of requests whose connection is closed without an answer.
    pub drop_rate: f64,
    /// Fraction of requests refused with HTTP 429 (`Too Many Requests`), as a provider's proxy
    /// refuses a plan's rate, before the node sees them.
    pub throttle_rate: f64,
    /// `Retry-After` of those 429s, in whole seconds (`"30s"`); none: the header is left out.
    #[serde(with = "humantime_serde::option")]
    pub retry_after: Option<Duration>,
    /// Requests are held without an answer until `hang` is cleared (or the node goes down or is
    /// dropped, which closes their connections).
    pub hang: bool,
    /// The node stops seeing new blocks (a lagging node): heights are capped at the height it had
    /// when frozen; clearing it catches up at once.
    pub frozen: bool,
    /// The node pretends to bootstrap: P-chain routes answer 503, `info.isBootstrapped` says
    /// false, health is unhealthy.
    pub bootstrapping: bool,
    /// The info API answers 404, as a provider that exposes only the P-chain (`/ext/bc/P`).
    pub no_info_api: bool,
    /// Methods (as requests name them) answered HTTP 500 while every other method is served: a
    /// node broken for one method only.
    pub failing_methods: Vec<String>,
    /// Methods whose requests are held without an answer until the list no longer names them
    /// (as `hang`, for those methods only: the node's health checks still pass).
    pub hanging_methods: Vec<String>,
    /// The node lies about what never changes: `platform.getBlock` and `platform.getTx` answer
    /// another block's or tx's bytes, `platform.getBlockByHeight` the block of another height,
    /// well formed, in the encoding asked (hex or json).
    pub lie: bool,
}

impl Faults {
    /// Checks the rates are fractions (`0.0..=1.0`, not NaN); the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [
            ("error_rate", self.error_rate),
            ("drop_rate", self.drop_rate),
            ("throttle_rate", self.throttle_rate),
            ("slow_rate", self.slow_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name} must be between 0 and 1, got {rate}"));
            }
        }
        Ok(())
    }

    /// Whether any fault acts on each request (everything except `frozen` and `bootstrapping`).
    fn per_request(&self) -> bool {
        !self.latency.is_zero()
            || !self.jitter.is_zero()
            || self.error_rate > 0.0
            || self.drop_rate > 0.0
            || self.throttle_rate > 0.0
            || (self.slow_rate > 0.0 && !self.slow_latency.is_zero())
            || self.hang
    }

    /// Applies the members of a JSON object on top of `self` (a partial update); unknown members
    /// and bad values are refused with serde's message.
    pub fn merged(&self, update: &serde_json::Value) -> Result<Faults, String> {
        let serde_json::Value::Object(update) = update else {
            return Err("the faults update must be a JSON object".into());
        };
        let mut current = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let serde_json::Value::Object(fields) = &mut current {
            for (k, v) in update {
                fields.insert(k.clone(), v.clone());
            }
        }
        let merged: Faults = serde_json::from_value(current).map_err(|e| e.to_string())?;
        merged.validate()?;
        Ok(merged)
    }
}

/// What the faults decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Serve it normally.
    Serve,
    /// Answer HTTP 500.
    Error,
    /// Close the connection without an answer.
    Drop,
    /// Answer HTTP 429, with this `Retry-After` if any.
    Throttle(Option<Duration>),
}

/// `frozen_at` when the node is not frozen.
const NOT_FROZEN: u64 = u64::MAX;

/// The live faults of one node.
pub struct FaultState {
    current: watch::Sender<Faults>,
    per_request: AtomicBool,
    bootstrapping: AtomicBool,
    no_info_api: AtomicBool,
    lie: AtomicBool,
    frozen_at: AtomicU64,
    /// Serialises updates so the atomics and `current` change together.
    update: parking_lot::Mutex<()>,
    /// Requests answered 429 so far.
    throttled: AtomicU64,
}

impl Default for FaultState {
    /// Healthy state; apply initial faults with [`FaultState::update`].
    fn default() -> FaultState {
        FaultState {
            current: watch::Sender::new(Faults::default()),
            per_request: AtomicBool::new(false),
            bootstrapping: AtomicBool::new(false),
            no_info_api: AtomicBool::new(false),
            lie: AtomicBool::new(false),
            frozen_at: AtomicU64::new(NOT_FROZEN),
            update: parking_lot::Mutex::new(()),
            throttled: AtomicU64::new(0),
        }
    }
}

impl FaultState {
    /// Changes the faults with `change`, atomically with respect to other updates. `height_now` is
    /// the chain height, read only when freezing starts.
    pub fn update(&self, change: impl FnOnce(&mut Faults), height_now: impl FnOnce() -> u64) {
        let _serial = self.update.lock();
        let mut faults = self.current.borrow().clone();
        let was_frozen = faults.frozen;
        change(&mut faults);
        if faults.frozen && !was_frozen {
            self.frozen_at.store(height_now(), Ordering::Release);
        } else if !faults.frozen {
            self.frozen_at.store(NOT_FROZEN, Ordering::Release);
        }
        self.bootstrapping
            .store(faults.bootstrapping, Ordering::Release);
        self.no_info_api
            .store(faults.no_info_api, Ordering::Release);
        self.lie.store(faults.lie, Ordering::Release);
        self.per_request
            .store(faults.per_request(), Ordering::Release);
        // Wakes hung requests when `hang` is cleared.
        self.current.send_replace(faults);
    }

    /// Requests answered 429 so far (`throttle_rate`).
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// The faults in force.
    pub fn get(&self) -> Faults {
        self.current.borrow().clone()
    }

    /// Whether requests for `method` are answered 500 (`failing_methods`).
    pub fn fails_method(&self, method: &str) -> bool {
        let current = self.current.borrow();
        !current.failing_methods.is_empty() && current.failing_methods.iter().any(|m| m == method)
    }

    /// Whether any method is held (`hanging_methods`), read before a body is decoded for it.
    pub fn hangs_methods(&self) -> bool {
        !self.current.borrow().hanging_methods.is_empty()
    }

    /// Holds a request for `method` while `hanging_methods` names it (returns at once when it
    /// does not, or when the node is dropped).
    pub async fn hold_method(&self, method: &str) {
        let mut rx = self.current.subscribe();
        let _ = rx
            .wait_for(|f| !f.hanging_methods.iter().any(|m| m == method))
            .await;
    }

    /// Whether the info API answers 404 (a P-chain-only provider).
    pub fn no_info_api(&self) -> bool {
        self.no_info_api.load(Ordering::Acquire)
    }

    /// Whether the node lies about blocks and txs.
    pub fn lie(&self) -> bool {
        self.lie.load(Ordering::Acquire)
    }

    /// Whether the node pretends to bootstrap.
    pub fn bootstrapping(&self) -> bool {
        self.bootstrapping.load(Ordering::Acquire)
    }

    /// The height a frozen node is stuck at (`View::height_cap`).
    pub fn height_cap(&self) -> Option<u64> {
        match self.frozen_at.load(Ordering::Acquire) {
            NOT_FROZEN => None,
            h => Some(h),
        }
    }

    /// Runs the per-request faults: waits while hung, sleeps the latency, then rolls the drop and
    /// error rates. A healthy node returns at the first (relaxed) load.
    pub async fn before_request(&self) -> Injected {
        if !self.per_request.load(Ordering::Relaxed) {
            return Injected::Serve;
        }
        let faults = {
            let mut rx = self.current.subscribe();
            let released = match rx.wait_for(|f| !f.hang).await {
                Ok(f) => f.clone(),
                Err(_) => return Injected::Drop,
            };
            released
        };
        let mut delay = faults.latency;
        if roll(faults.slow_rate) {
            delay += faults.slow_latency;
        }
        if !faults.jitter.is_zero() {
            let max = u64::try_from(faults.jitter.as_nanos()).unwrap_or(u64::MAX);
            delay += Duration::from_nanos(rand::thread_rng().gen_range(0..=max));
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if roll(faults.drop_rate) {
            Injected::Drop
        } else if roll(faults.throttle_rate) {
            self.throttled.fetch_add(1, Ordering::Relaxed);
            Injected::Throttle(faults.retry_after)
        } else if roll(faults.error_rate) {
            Injected::Error
        } else {
            Injected::Serve
        }
    }
}

/// True with probability `rate` (out-of-range rates are clamped; NaN is never).
fn roll(rate: f64) -> bool {
    if rate >= 1.0 {
        true
    } else if rate > 0.0 {
        rand::thread_rng().gen_bool(rate)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_update_keeps_other_fields() {
        let base = Faults {
            error_rate: 0.5,
            ..Faults::default()
        };
        let merged = base
            .merged(&serde_json::json!({"latency": "250ms", "frozen": true}))
            .unwrap();
        assert_eq!(merged.error_rate, 0.5);
        assert_eq!(merged.latency, Duration::from_millis(250));
        assert!(merged.frozen);
        assert!(base.merged(&serde_json::json!({"nope": 1})).is_err());
        assert!(base.merged(&serde_json::json!({"drop_rate": 1.5})).is_err());
        assert!(base.merged(&serde_json::json!([1])).is_err());
    }

    #[test]
    fn json_shape() {
        let text = serde_json::to_string(&Faults::default()).unwrap();
        assert_eq!(
            text,
            r#"{"latency":"0s","jitter":"0s","error_rate":0.0,"slow_rate":0.0,"slow_latency":"0s","drop_rate":0.0,"throttle_rate":0.0,"retry_after":null,"hang":false,"frozen":false,"bootstrapping":false,"no_info_api":false,"failing_methods":[],"hanging_methods":[],"lie":false}"#
        );
    }

    #[test]
    fn rolls_respect_bounds() {
        assert!(roll(1.0) && roll(7.0));
        assert!(!roll(0.0) && !roll(-1.0) && !roll(f64::NAN));
    }

    #[test]
    fn freezing_records_the_height_once() {
        let state = FaultState::default();
        let frozen = Faults {
            frozen: true,
            ..Faults::default()
        };
        state.update(|f| *f = frozen.clone(), || 10);
        state.update(|f| f.latency = Duration::from_millis(1), || 20);
        assert_eq!(state.height_cap(), Some(10));
        state.update(|f| f.frozen = false, || 30);
        assert_eq!(state.height_cap(), None);
    }
}
