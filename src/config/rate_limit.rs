//! `[rate_limit]`, its `[[rate_limit.keys]]` and `[[rate_limit.tiers]]`: quotas per client; read
//! by the rate limiter and (its trusted proxies) by the server.
//!
//! A key has a `name` (shown in usage, on the status page and in logs; the key itself never is),
//! by default its `key:` label (the first 12 hex digits of its SHA-256), and either a `tier` (the
//! name of a `[[rate_limit.tiers]]`, whose numbers it takes) or its own `requests_per_second` and
//! `burst`. [`RateLimitConfig::key_quota`] is the one place a key's numbers are read.

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
    /// Client IPs tracked at most; beyond, a new client shares its network's quota (an IPv4 /24,
    /// an IPv6 /48), and beyond as many networks, one overflow quota.
    pub max_clients: usize,
    /// Clients with their own quota.
    pub keys: Vec<KeyQuota>,
    /// Named quotas that keys refer to (`tier = "NAME"`).
    pub tiers: Vec<Tier>,
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
            tiers: Vec::new(),
            scope: None,
            on_redis_down: OnRedisDown::Local,
            expected_instances: 1,
            body_bytes_per_unit: 64 * 1024,
        }
    }
}

/// One `[[rate_limit.keys]]` table: a key, its name, and its quota (a tier's, or its own).
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyQuota {
    /// The key clients present. Never logged, never shown.
    pub key: String,
    /// What usage, the status page and logs call the key (1 to 64 characters of `A-Z a-z 0-9 .
    /// _ -`, unique); `None`: its `key:` label ([`key_label`]).
    pub name: Option<String>,
    /// The `[[rate_limit.tiers]]` whose numbers the key takes (instead of its own).
    pub tier: Option<String>,
    /// Sustained cost units per second for this key (without a tier).
    pub requests_per_second: Option<u32>,
    /// Cost units this key may spend at once (without a tier).
    pub burst: Option<u32>,
}

impl KeyQuota {
    /// A key with its own quota, unnamed.
    pub fn new(key: impl Into<String>, requests_per_second: u32, burst: u32) -> KeyQuota {
        KeyQuota {
            key: key.into(),
            requests_per_second: Some(requests_per_second),
            burst: Some(burst),
            ..KeyQuota::default()
        }
    }

    /// A key named `name` in tier `tier`.
    pub fn in_tier(key: impl Into<String>, name: &str, tier: &str) -> KeyQuota {
        KeyQuota {
            key: key.into(),
            name: Some(name.to_string()),
            tier: Some(tier.to_string()),
            ..KeyQuota::default()
        }
    }
}

impl std::fmt::Debug for KeyQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyQuota")
            .field("key", &"[redacted]")
            .field("name", &self.name)
            .field("tier", &self.tier)
            .field("requests_per_second", &self.requests_per_second)
            .field("burst", &self.burst)
            .finish()
    }
}

/// One `[[rate_limit.tiers]]` table: a named quota that keys take with `tier = "NAME"`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// The name keys refer to (1 to 64 characters of `A-Z a-z 0-9 . _ -`, unique).
    pub name: String,
    /// Sustained cost units per second for each key of the tier.
    pub requests_per_second: u32,
    /// Cost units each key of the tier may spend at once.
    pub burst: u32,
}

/// A key as it is shown when it has no `name`: `key:` and the first 12 hex digits of its SHA-256,
/// so an operator who has the key can tell which it is (`printf %s KEY | sha256sum`) and nobody
/// can use it.
pub fn key_label(key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("key:{hex}")
}

/// Whether `name` is a valid key or tier name: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl RateLimitConfig {
    /// Key `i`'s quota, `(requests_per_second, burst)`: its tier's, or its own (validation makes
    /// sure there is exactly one; an index out of range, or a config that failed validation, gets
    /// the per-address quota).
    pub fn key_quota(&self, i: usize) -> (u32, u32) {
        let fallback = (self.requests_per_second, self.burst);
        let Some(k) = self.keys.get(i) else {
            return fallback;
        };
        let quota = match &k.tier {
            Some(tier) => self
                .tiers
                .iter()
                .find(|t| &t.name == tier)
                .map(|t| (t.requests_per_second, t.burst)),
            None => k.requests_per_second.zip(k.burst),
        };
        quota.unwrap_or(fallback)
    }

    /// Key `i`'s name: its `name`, else its `key:` label; never the key.
    pub fn key_name(&self, i: usize) -> String {
        match self.keys.get(i) {
            Some(k) => k.name.clone().unwrap_or_else(|| key_label(&k.key)),
            None => String::new(),
        }
    }

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
        const NAME_RULE: &str = "must be 1 to 64 characters of A-Z a-z 0-9 . _ -";
        for (j, t) in self.tiers.iter().enumerate() {
            if !valid_name(&t.name) {
                return invalid(format!("rate_limit.tiers[{j}].name"), NAME_RULE);
            }
            if let Some(first) = self.tiers[..j].iter().position(|o| o.name == t.name) {
                return invalid(
                    format!("rate_limit.tiers[{j}].name"),
                    format!("\"{}\" is already rate_limit.tiers[{first}]'s", t.name),
                );
            }
            check(
                &format!("rate_limit.tiers[{j}]."),
                t.requests_per_second,
                t.burst,
            )?;
        }
        for (i, k) in self.keys.iter().enumerate() {
            let at = |field: &str| format!("rate_limit.keys[{i}].{field}");
            if k.key.len() < 16 {
                return invalid(at("key"), "must be at least 16 characters");
            }
            if let Some(first) = self.keys[..i].iter().position(|o| o.key == k.key) {
                return invalid(
                    at("key"),
                    format!("the same key as rate_limit.keys[{first}]"),
                );
            }
            if let Some(name) = &k.name {
                if !valid_name(name) {
                    return invalid(at("name"), NAME_RULE);
                }
                if let Some(first) = self.keys[..i]
                    .iter()
                    .position(|o| o.name.as_deref() == Some(name))
                {
                    return invalid(
                        at("name"),
                        format!("\"{name}\" is already rate_limit.keys[{first}]'s"),
                    );
                }
            }
            match (&k.tier, k.requests_per_second, k.burst) {
                (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                    return invalid(
                        at("tier"),
                        "a key has a tier or its own requests_per_second and burst, not both",
                    )
                }
                (Some(tier), None, None) => {
                    if !self.tiers.iter().any(|t| &t.name == tier) {
                        return invalid(
                            at("tier"),
                            format!("no [[rate_limit.tiers]] is named \"{tier}\""),
                        );
                    }
                }
                (None, Some(rps), Some(burst)) => {
                    check(&format!("rate_limit.keys[{i}]."), rps, burst)?;
                }
                (None, None, _) => {
                    return invalid(
                        at("requests_per_second"),
                        "required without a tier (set tier, or requests_per_second and burst)",
                    )
                }
                (None, Some(_), None) => {
                    return invalid(
                        at("burst"),
                        "required without a tier (set tier, or requests_per_second and burst)",
                    )
                }
            }
        }
        Ok(())
    }
}
