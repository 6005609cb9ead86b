//! What a client may know of its own quota: its policy, what remains and when it refills, as the
//! IETF RateLimit header fields say it (draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy`
//! and `RateLimit`) on every answer charged to a quota, and as `GET /snowgate/quota` says it in
//! JSON. Built from the limiter's exact state ([`super::Limiter::state`]); always the caller's own
//! quota, never another's, and never its key.
//!
//! The quota is a GCRA bucket: `q` cost units at once, refilled at the policy's rate, so the
//! window `w` is the time an empty bucket takes to fill (`q / rate`, whole seconds, at least 1);
//! `r` is what the caller may spend now (whole cost units, rounded down) and `t` the seconds until
//! the bucket is full again, or, when the caller is refused, until its `Retry-After`.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::SCALE;

/// `RateLimit-Policy`.
pub const POLICY_HEADER: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const STATE_HEADER: HeaderName = HeaderName::from_static("ratelimit");

/// A quota as configured: its name in the headers and its numbers (cost units). Made once per
/// limiter and shared (`Arc`) by every state taken of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `"address"` (a client known by its address), `"network"` (a network's new addresses past
    /// `max_clients`), `"shared"` (networks past as many networks),
    /// `"key"` or the key's tier.
    pub name: String,
    pub requests_per_second: u32,
    pub burst: u32,
    /// Its `RateLimit-Policy` field, the same on every answer: written once, cloned (a reference
    /// count) onto each.
    header: Option<HeaderValue>,
}

impl Policy {
    /// The policy `name` of `requests_per_second` and `burst` cost units.
    pub fn new(name: String, requests_per_second: u32, burst: u32) -> Policy {
        let mut policy = Policy {
            name,
            requests_per_second,
            burst,
            header: None,
        };
        let (burst, window) = (u64::from(burst), policy.window_secs());
        policy.header = field(&policy.name, (b"q", burst), (b"w", window));
        policy
    }

    /// The window: seconds an empty bucket takes to fill, at least 1.
    pub fn window_secs(&self) -> u64 {
        u64::from(self.burst)
            .div_ceil(u64::from(self.requests_per_second.max(1)))
            .max(1)
    }
}

/// `"name";a=1;b=2`, written straight into the header's one buffer: every charged answer carries
/// a `RateLimit` field written this way (the `RateLimit-Policy` one is written once per policy),
/// and `format!` into a `String`, then copied into the header, was 7 % of a cache hit's
/// instructions (callgrind, 2026-11-27).
fn field(name: &str, (a, x): (&[u8], u64), (b, y): (&[u8], u64)) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(name.len() + 32);
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.push(b'"');
    let mut digits = itoa::Buffer::new();
    for (key, n) in [(a, x), (b, y)] {
        out.push(b';');
        out.extend_from_slice(key);
        out.push(b'=');
        out.extend_from_slice(digits.format(n).as_bytes());
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out)).ok()
}

/// A caller's quota now.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaState {
    pub policy: Arc<Policy>,
    /// Units (tenths of a cost unit) the caller may spend now.
    pub remaining_units: u64,
    /// The caller is refused this much longer (even its cheapest call; or the `Retry-After` of
    /// the refusal being answered): the header's `t`.
    pub refused_for: Option<Duration>,
}

impl QuotaState {
    /// The state of a caller who has `remaining_units` left of `policy` (`refused_for`: refused
    /// that much longer).
    pub fn new(
        policy: Arc<Policy>,
        remaining_units: u64,
        refused_for: Option<Duration>,
    ) -> QuotaState {
        let burst = u64::from(policy.burst) * SCALE as u64;
        QuotaState {
            remaining_units: remaining_units.min(burst),
            policy,
            refused_for,
        }
    }

    /// Whole cost units the caller may spend now.
    pub fn remaining(&self) -> u64 {
        self.remaining_units / SCALE as u64
    }

    /// Seconds until the quota is whole again; refused, the `Retry-After` (both rounded up).
    pub fn reset_secs(&self) -> u64 {
        if let Some(wait) = self.refused_for {
            return wait.as_secs_f64().ceil().max(1.0) as u64;
        }
        let burst = u64::from(self.policy.burst) * SCALE as u64;
        let missing = burst.saturating_sub(self.remaining_units);
        let per_sec = u64::from(self.policy.requests_per_second.max(1)) * SCALE as u64;
        missing.div_ceil(per_sec)
    }

    /// Adds the two header fields to `headers`.
    pub fn stamp(&self, headers: &mut HeaderMap) {
        if let Some(v) = &self.policy.header {
            headers.insert(POLICY_HEADER, v.clone());
        }
        let name = &self.policy.name;
        if let Some(v) = field(name, (b"r", self.remaining()), (b"t", self.reset_secs())) {
            headers.insert(STATE_HEADER, v);
        }
    }

    /// The JSON of `GET /snowgate/quota` (`client`: how the caller is known, `"key"` or its
    /// address as the limiter sees it).
    pub fn json(&self, client: &str) -> serde_json::Value {
        serde_json::json!({
            "limited": true,
            "client": client,
            "policy": self.policy.name,
            "requestsPerSecond": self.policy.requests_per_second,
            "burst": self.policy.burst,
            "windowSeconds": self.policy.window_secs(),
            "remaining": self.remaining(),
            "resetSeconds": self.reset_secs(),
            "refused": self.refused_for.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Arc<Policy> {
        Arc::new(Policy::new("address".into(), 20, 50))
    }

    #[test]
    fn the_headers_say_the_policy_what_remains_and_when_it_is_whole() {
        let mut headers = HeaderMap::new();
        QuotaState::new(policy(), 379, None).stamp(&mut headers);
        assert_eq!(headers[POLICY_HEADER], "\"address\";q=50;w=3");
        // 37.9 units left: 37; 12.1 missing at 20 a second: 1 s.
        assert_eq!(headers[STATE_HEADER], "\"address\";r=37;t=1");
        QuotaState::new(policy(), 500, None).stamp(&mut headers);
        assert_eq!(headers[STATE_HEADER], "\"address\";r=50;t=0");
    }

    #[test]
    fn a_refused_caller_has_nothing_left_until_its_retry_after() {
        let mut headers = HeaderMap::new();
        let s = QuotaState::new(policy(), 0, Some(Duration::from_millis(1_200)));
        s.stamp(&mut headers);
        assert_eq!(headers[STATE_HEADER], "\"address\";r=0;t=2");
        assert_eq!(s.json("192.0.2.1")["remaining"], 0);
        assert_eq!(s.json("192.0.2.1")["resetSeconds"], 2);
    }

    #[test]
    fn what_remains_is_never_more_than_the_burst() {
        assert_eq!(QuotaState::new(policy(), 10_000, None).remaining(), 50);
    }
}
