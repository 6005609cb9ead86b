//! snowgate's configuration: a TOML file (`config/snowgate.toml`), every section with defaults and
//! `deny_unknown_fields`, then [`Config::validate`] for what serde cannot check, naming the key.
//!
//! Durations are written as strings (`"250ms"`, `"1s"`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::methods::{Access, CacheClass, Family, MethodOverride};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    /// The nodes behind the gateway, one `[[upstreams]]` table each.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    #[serde(default)]
    pub health: HealthConfig,
    #[serde(default)]
    pub upstream: ForwardConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub cache: crate::cache::CacheConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub rate_limit: crate::ratelimit::RateLimitConfig,
    /// Per-method additions and overrides of the built-in registry, keyed by method name:
    /// `[methods."platform.getAllValidatorsAt"] family = "platform"`.
    #[serde(default)]
    pub methods: BTreeMap<String, MethodOverride>,
}

/// `[server]`: where snowgate listens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the public endpoint.
    pub listen: SocketAddr,
    /// On SIGTERM/SIGINT, how long `/ext/health` answers 503 while snowgate still serves, so a
    /// load balancer stops sending before the listener closes.
    #[serde(with = "humantime_serde")]
    pub drain_grace: Duration,
    /// Then, how long requests in flight may take to finish.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9650)),
            drain_grace: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// `[limits]`: hard limits on what a client may send and what a node may answer, each with a
/// clear error when crossed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body (bytes): 413 with a JSON-RPC error beyond it.
    pub body_bytes: usize,
    /// Most calls in one batch: 413 with a JSON-RPC error beyond it.
    pub batch_len: usize,
    /// Calls of one batch in flight at once.
    pub batch_concurrency: usize,
    /// Deepest JSON nesting of a request (the envelope object is level 1).
    pub depth: usize,
    /// Largest answer accepted from a node (bytes): a 502 beyond it.
    pub response_bytes: usize,
    /// Time allowed to receive a request's headers (HTTP/1.1); a trickling client is cut off.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// A connection with no request for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// One request, all attempts on all nodes included: 504 beyond it.
    #[serde(with = "humantime_serde")]
    pub request_deadline: Duration,
    /// Open client connections; beyond it a new connection gets 503 and is closed.
    pub max_connections: usize,
    /// Open connections from one client address (an IPv4 address or an IPv6 /64); beyond it a new
    /// connection from that address gets 503 and is closed. Peers in
    /// `rate_limit.trusted_proxies` are exempt (a load balancer is many clients).
    pub max_connections_per_ip: usize,
    /// The whole request body must arrive within this long after its headers: else 408, and the
    /// connection is closed.
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// An answer the client has not taken within this long (it stopped reading, or its HTTP/2
    /// window stays shut) ends its connection.
    #[serde(with = "humantime_serde")]
    pub send_timeout: Duration,
    /// Request body bytes one connection may have buffered at once (its HTTP/2 streams together);
    /// further bytes wait for room, within `body_timeout`.
    pub connection_body_bytes: usize,
    /// Request body bytes buffered at once over all connections; further bytes wait for room,
    /// within `body_timeout`.
    pub total_body_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            body_bytes: 1024 * 1024,
            batch_len: 100,
            batch_concurrency: 16,
            depth: 32,
            response_bytes: 64 * 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_deadline: Duration::from_secs(10),
            max_connections: 10_000,
            max_connections_per_ip: 64,
            body_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(30),
            connection_body_bytes: 4 * 1024 * 1024,
            total_body_bytes: 256 * 1024 * 1024,
        }
    }
}

/// One `[[upstreams]]` table: a node behind the gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// A short name used in metrics, logs, `/ext/health` and `X-Snowgate-Upstream`.
    pub name: String,
    /// The node's base URL, e.g. `http://10.0.0.5:9650` (scheme, host and port only).
    pub url: String,
}

/// `[health]`: active health checks and the hysteresis that turns them into a verdict.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Time between two checks of one upstream.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long a check may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// An upstream further behind the best height in the pool than this takes no traffic.
    pub max_lag_blocks: u64,
    /// Consecutive failed checks before a healthy upstream is taken out.
    pub failure_threshold: u32,
    /// Consecutive good checks before an unhealthy upstream is taken back.
    pub recovery_threshold: u32,
    /// Real requests failing in a row (connect errors, dropped connections, non-200 statuses,
    /// invalid answers; never timeouts) before an upstream is taken out between two checks, as
    /// Envoy's consecutive-errors outlier detection. One valid answer starts the count again.
    pub passive_failures: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            max_lag_blocks: 2,
            failure_threshold: 2,
            recovery_threshold: 2,
            passive_failures: 5,
        }
    }
}

/// `[upstream]`: how requests are forwarded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardConfig {
    /// Time allowed to open a TCP connection to a node.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time allowed for one attempt on one node.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Attempts per request (the first one included).
    pub max_attempts: u32,
    /// Idle keep-alive connections kept per node.
    pub pool_max_idle: usize,
    /// Requests in flight to one node; more wait (within the request deadline, then 503).
    pub max_concurrency: usize,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            max_attempts: 3,
            pool_max_idle: 256,
            max_concurrency: 512,
        }
    }
}

/// `[admin]`: callers allowed to use restricted methods.
#[derive(Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer tokens (`Authorization: Bearer <key>`) that unlock node-specific and keystore
    /// methods and upstream pinning. Never logged.
    pub api_keys: Vec<String>,
}

impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field(
                "api_keys",
                &format_args!("[{} redacted]", self.api_keys.len()),
            )
            .finish()
    }
}

/// A configuration problem, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: `{key}`: {message}")]
    Invalid {
        path: String,
        key: String,
        message: String,
    },
}

impl Config {
    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Config::parse(&text, &shown)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config
            .validate()
            .map_err(|(key, message)| ConfigError::Invalid {
                path: origin.to_string(),
                key,
                message,
            })?;
        Ok(config)
    }

    /// Checks across fields; the error names the offending key.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, msg: &str| Err((key.to_string(), msg.to_string()));
        let mut names = std::collections::HashSet::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let key = format!("upstreams[{i}]");
            if up.name.is_empty()
                || !up
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return bad(
                    &format!("{key}.name"),
                    "must be non-empty and use only letters, digits, '-', '_' or '.'",
                );
            }
            if !names.insert(up.name.as_str()) {
                return bad(&format!("{key}.name"), "duplicate upstream name");
            }
            if let Err(msg) = crate::upstream::parse_base_url(&up.url) {
                return bad(&format!("{key}.url"), &msg);
            }
        }
        let h = &self.health;
        if h.interval.is_zero() {
            return bad("health.interval", "must be greater than zero");
        }
        if h.timeout.is_zero() {
            return bad("health.timeout", "must be greater than zero");
        }
        if h.failure_threshold == 0 {
            return bad("health.failure_threshold", "must be at least 1");
        }
        if h.recovery_threshold == 0 {
            return bad("health.recovery_threshold", "must be at least 1");
        }
        if h.passive_failures == 0 {
            return bad("health.passive_failures", "must be at least 1");
        }
        let f = &self.upstream;
        if f.max_attempts == 0 {
            return bad("upstream.max_attempts", "must be at least 1");
        }
        if f.request_timeout.is_zero() || f.connect_timeout.is_zero() {
            return bad(
                "upstream.request_timeout",
                "timeouts must be greater than zero",
            );
        }
        if f.max_concurrency == 0 {
            return bad("upstream.max_concurrency", "must be at least 1");
        }
        let l = &self.limits;
        for (key, value) in [
            ("limits.body_bytes", l.body_bytes),
            ("limits.batch_len", l.batch_len),
            ("limits.batch_concurrency", l.batch_concurrency),
            ("limits.response_bytes", l.response_bytes),
            ("limits.max_connections", l.max_connections),
            ("limits.max_connections_per_ip", l.max_connections_per_ip),
        ] {
            if value == 0 {
                return bad(key, "must be greater than zero");
            }
        }
        if l.depth < 3 {
            return bad(
                "limits.depth",
                "must be at least 3 (envelope, params, one value)",
            );
        }
        for (key, value) in [
            ("limits.header_timeout", l.header_timeout),
            ("limits.idle_timeout", l.idle_timeout),
            ("limits.request_deadline", l.request_deadline),
            ("limits.body_timeout", l.body_timeout),
            ("limits.send_timeout", l.send_timeout),
        ] {
            if value.is_zero() {
                return bad(key, "must be greater than zero");
            }
        }
        for (key, value) in [
            ("limits.connection_body_bytes", l.connection_body_bytes),
            ("limits.total_body_bytes", l.total_body_bytes),
        ] {
            // Room for one whole body, or a request could wait for room that never comes.
            if value < l.body_bytes {
                return bad(key, "must be at least limits.body_bytes");
            }
            if u32::try_from(value).is_err() {
                return bad(key, "must be below 4 GiB");
            }
        }
        if l.request_deadline < f.request_timeout {
            return bad(
                "limits.request_deadline",
                "must be at least upstream.request_timeout",
            );
        }
        if let Err((key, msg)) = self
            .rate_limit
            .validate(&crate::methods::Registry::with_overrides(&self.methods))
        {
            return bad(&key, &msg);
        }
        if self.cache.max_bytes < 1024 * 1024 {
            return bad("cache.max_bytes", "must be at least 1 MiB");
        }
        if self.cache.head_ttl.is_zero()
            || self.cache.volatile_ttl.is_zero()
            || self.cache.network_ttl.is_zero()
        {
            return bad("cache", "TTLs must be greater than zero");
        }
        if self.admin.api_keys.iter().any(|k| k.len() < 16) {
            return bad("admin.api_keys", "every key must be at least 16 characters");
        }
        let builtin = crate::methods::Registry::builtin();
        let effective = crate::methods::Registry::with_overrides(&self.methods);
        for (name, o) in &self.methods {
            let key = format!("methods.\"{name}\"");
            let Some((service, rest)) = name.split_once('.') else {
                return bad(&key, "a method name is `service.method`");
            };
            if rest.is_empty() || rest.contains('.') || rest.starts_with(char::is_uppercase) {
                return bad(&key, "not a method name a node serves");
            }
            let family = o.family.or_else(|| Family::for_service(service));
            match family {
                None => return bad(&format!("{key}.family"), "unknown service: set family"),
                Some(f) if Family::for_service(service) != Some(f) => {
                    return bad(
                        &format!("{key}.family"),
                        "does not match the method's service",
                    )
                }
                Some(_) => {}
            }
            if o.access == Some(Access::Public) && crate::methods::is_secret(name) {
                return bad(
                    &format!("{key}.access"),
                    "keystore methods carry passwords and cannot be public",
                );
            }
            if o.timeout.is_some_and(|t| t.is_zero()) {
                return bad(&format!("{key}.timeout"), "must be greater than zero");
            }
            // One node's answer (its ID, IP, VMs) or a keystore's must never be served to
            // another caller, whoever the override lets call the method.
            let private = |access: Option<Access>| {
                matches!(access, Some(Access::NodeSpecific | Access::Keystore))
            };
            let cache = effective.get(name).map(|m| m.cache);
            if (private(builtin.get(name).map(|m| m.access))
                || private(effective.get(name).map(|m| m.access))
                || crate::methods::is_secret(name))
                && cache.is_some_and(|c| c != CacheClass::Never)
            {
                return bad(
                    &format!("{key}.cache"),
                    "node-specific and keystore methods are never cached: cache must be \"never\"",
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let e =
            Config::parse("[server]\nlisten = \"127.0.0.1:1\"\nlisen = 1\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
        let e = Config::parse("[helth]\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("helth"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let text = "[[upstreams]]\nname = \"a\"\nurl = \"ftp://x\"\n";
        let e = Config::parse(text, "t.toml").unwrap_err();
        assert!(e.to_string().contains("upstreams[0].url"), "{e}");
        let e = Config::parse("[health]\nfailure_threshold = 0\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("health.failure_threshold"), "{e}");
    }

    #[test]
    fn node_specific_and_keystore_methods_cannot_be_cached() {
        for (name, table) in [
            ("info.getNodeID", "cache = \"immutable\""),
            ("info.getVMs", "cache = \"network\""),
            ("platform.exportKey", "cache = \"volatile\""),
            ("platform.listAddresses", "cache = \"head\""),
            // Made callable by anyone, still one node's answer.
            ("info.getNodeIP", "access = \"public\"\ncache = \"network\""),
            // Made node-specific, keeping the table's cache class.
            ("platform.getHeight", "access = \"node_specific\""),
            (
                "info.myNodeThing",
                "access = \"keystore\"\ncache = \"head\"",
            ),
        ] {
            let text = format!("[methods.\"{name}\"]\n{table}\n");
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(
                e.contains(&format!("methods.\"{name}\".cache")),
                "{text}: {e}"
            );
        }
        for ok in [
            "[methods.\"info.getNodeID\"]\ncache = \"never\"\n",
            "[methods.\"platform.getHeight\"]\ncache = \"volatile\"\n",
            "[methods.\"platform.getHeight\"]\naccess = \"node_specific\"\ncache = \"never\"\n",
        ] {
            Config::parse(ok, "t.toml").unwrap();
        }
    }

    #[test]
    fn durations_are_strings() {
        let c = Config::parse("[health]\ninterval = \"250ms\"\n", "t.toml").unwrap();
        assert_eq!(c.health.interval, Duration::from_millis(250));
    }

    #[test]
    fn admin_keys_are_not_debug_printed() {
        let c = Config::parse("[admin]\napi_keys = [\"supersecretkey-123456\"]\n", "t").unwrap();
        assert!(!format!("{c:?}").contains("supersecret"));
    }
}
