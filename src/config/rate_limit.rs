//! `[rate_limit]` and its `[[rate_limit.keys]]`: quotas per client; read by the rate limiter and
//! (its trusted proxies) by the server.

use ipnet::IpNet;
use serde::Deserialize;

use super::{invalid, ConfigError};
use crate::methods::Registry;

/// The one header a trusted proxy records the client's address in (`[rate_limit]
/// client_ip_header`). Only this header is read: falling back to another would let a client
/// supply the one its proxy does not overwrite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, haproxy, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

impl ClientIpHeader {
    /// The header's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
        }
    }
}

/// Where quotas are kept (`[rate_limit] scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuotaScope {
    /// Each instance its own quotas (N instances give a client N times its quota).
    Local,
    /// One quota per client across the fleet, held in Redis (`[redis]`).
    Global,
}

/// What global quotas do while Redis is unreachable (`[rate_limit] on_redis_down`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnRedisDown {
    /// Each instance decides alone, at `rate / expected_instances` (the fleet as a whole stays
    /// near the global quota).
    #[default]
    Local,
    /// Fail closed: every charged call is refused with HTTP 503 until Redis answers again.
    Deny,
}

/// `[rate_limit]` in the config.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// `false` turns rate limiting off.
    pub enabled: bool,
    /// Sustained cost units per second, per client IP.
    pub requests_per_second: u32,
    /// Cost units a client may spend at once.
    pub burst: u32,
    /// A cache hit costs `cost × cached_cost_factor` (0 makes hits free).
    pub cached_cost_factor: f64,
    /// What a call snowgate refuses costs (unparsable, unknown method, not allowed, a batch or
    /// nesting over the limits), in cost units: reading it was work too.
    pub refused_cost: u32,
    /// Proxies (CIDR) whose `client_ip_header` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The one header trusted proxies record the client in: `"x-forwarded-for"` or `"forwarded"`.
    pub client_ip_header: ClientIpHeader,
    /// Client IPs tracked at most; beyond, new clients share one overflow quota.
    pub max_clients: usize,
    /// Clients with their own quota.
    pub keys: Vec<KeyQuota>,
    /// `"local"` or `"global"`; unset means `"global"` when `[redis]` is set.
    pub scope: Option<QuotaScope>,
    /// Global quotas while Redis is down: `"local"` (each instance alone, at its share) or
    /// `"deny"` (503).
    pub on_redis_down: OnRedisDown,
    /// Instances in the fleet: while Redis is down, each allows `rate / expected_instances`.
    pub expected_instances: u32,
    /// A request body costs one cost unit per this many bytes (whole ones only: a body under it
    /// costs nothing for its size), on top of its calls: reading, parsing and keying 1 MiB is
    /// work whatever the calls in it, and a client over its quota must not make snowgate do it.
    /// A declared length is charged before the body is read (up to the client's burst at once),
    /// the rest as the bytes arrive: a body dearer than the burst passes only as fast as the quota
    /// refills.
    pub body_bytes_per_unit: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: true,
            requests_per_second: 50,
            burst: 100,
            cached_cost_factor: 0.5,
            refused_cost: 1,
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::default(),
            max_clients: 100_000,
            keys: Vec::new(),
            scope: None,
            on_redis_down: OnRedisDown::Local,
            expected_instances: 1,
            body_bytes_per_unit: 64 * 1024,
        }
    }
}

/// One `[[rate_limit.keys]]` table.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyQuota {
    /// The key clients present. Never logged.
    pub key: String,
    /// Sustained cost units per second for this key.
    pub requests_per_second: u32,
    /// Cost units this key may spend at once.
    pub burst: u32,
}

impl std::fmt::Debug for KeyQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyQuota")
            .field("key", &"[redacted]")
            .field("requests_per_second", &self.requests_per_second)
            .field("burst", &self.burst)
            .finish()
    }
}

impl RateLimitConfig {
    /// Checks the numbers against the method costs of `registry` (a burst must afford the
    /// dearest method); the error names the key and never shows a key's value.
    pub fn validate(&self, registry: &Registry) -> Result<(), ConfigError> {
        let max_cost = registry.all().iter().map(|m| m.cost).max().unwrap_or(1);
        let check = |prefix: &str, rps: u32, burst: u32| -> Result<(), ConfigError> {
            if rps == 0 {
                return invalid(format!("{prefix}requests_per_second"), "must be at least 1");
            }
            if burst < max_cost {
                return invalid(
                    format!("{prefix}burst"),
                    format!("must be at least the largest method cost ({max_cost})"),
                );
            }
            // Quotas are kept in tenths of a unit, in a u32.
            if u64::from(burst) * 10 > u64::from(u32::MAX)
                || u64::from(rps) * 10 > u64::from(u32::MAX)
            {
                return invalid(format!("{prefix}burst"), "too large");
            }
            Ok(())
        };
        check("rate_limit.", self.requests_per_second, self.burst)?;
        if self.refused_cost > self.burst {
            return invalid(
                "rate_limit.refused_cost",
                "must be at most rate_limit.burst",
            );
        }
        if !(0.0..=1.0).contains(&self.cached_cost_factor) {
            return invalid("rate_limit.cached_cost_factor", "must be between 0 and 1");
        }
        if self.expected_instances == 0 || self.expected_instances > 10_000 {
            return invalid(
                "rate_limit.expected_instances",
                "must be between 1 and 10000",
            );
        }
        if self.max_clients == 0 {
            return invalid("rate_limit.max_clients", "must be at least 1");
        }
        if self.body_bytes_per_unit < 1024 {
            return invalid("rate_limit.body_bytes_per_unit", "must be at least 1024");
        }
        for (i, k) in self.keys.iter().enumerate() {
            if k.key.len() < 16 {
                return invalid(
                    format!("rate_limit.keys[{i}].key"),
                    "must be at least 16 characters",
                );
            }
            check(
                &format!("rate_limit.keys[{i}]."),
                k.requests_per_second,
                k.burst,
            )?;
        }
        Ok(())
    }
}
