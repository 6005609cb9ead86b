//! The nodes and how they are reached: `[[upstreams]]`, `[health]` and `[upstream]`; read by the
//! upstream pool. [`parse_base_url`] lives here so that validating a file and building the pool
//! read a node's URL the same way.

use std::time::Duration;

use http::Uri;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// One `[[upstreams]]` table: a node behind the gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// A short name used in metrics, logs, `/ext/health` and `X-Snowgate-Upstream`.
    pub name: String,
    /// The node's base URL, e.g. `http://10.0.0.5:9650` (scheme, host and port only).
    pub url: String,
}

/// Checks a node base URL: `http://host:port` with no path, query or credentials. Returns the
/// authority to send requests to. The port is required: an avalanchego node listens on 9650, not
/// on HTTP's 80, so a URL without one is almost surely a mistake.
pub fn parse_base_url(url: &str) -> Result<http::uri::Authority, String> {
    let uri: Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(format!("scheme {other:?} is not supported (use http)")),
        None => return Err("missing scheme (use http://host:port)".into()),
    }
    let authority = uri.authority().cloned().ok_or("missing host")?;
    // What the pool's connections send as the Host header.
    if authority.as_str().bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("the host must be printable ASCII".into());
    }
    if authority.as_str().contains('@') {
        return Err("credentials in the URL are not supported".into());
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("give the node's base URL only (no path or query)".into());
    }
    match authority.port_u16() {
        None => {
            let host = authority.host();
            return Err(format!("missing port (say http://{host}:9650)"));
        }
        Some(0) => return Err("port 0 is not a port a node listens on".into()),
        Some(_) => {}
    }
    Ok(authority)
}

/// Checks the `[[upstreams]]` list: names usable as labels and unique, URLs a node base URL.
pub fn validate_upstreams(upstreams: &[UpstreamConfig]) -> Result<(), ConfigError> {
    let mut names = std::collections::HashSet::new();
    for (i, up) in upstreams.iter().enumerate() {
        let key = format!("upstreams[{i}]");
        if up.name.is_empty()
            || !up
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return invalid(
                format!("{key}.name"),
                "must be non-empty and use only letters, digits, '-', '_' or '.'",
            );
        }
        if !names.insert(up.name.as_str()) {
            return invalid(format!("{key}.name"), "duplicate upstream name");
        }
        if let Err(msg) = parse_base_url(&up.url) {
            return invalid(format!("{key}.url"), msg);
        }
    }
    Ok(())
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

impl HealthConfig {
    /// Checks `[health]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval.is_zero() {
            return invalid("health.interval", "must be greater than zero");
        }
        if self.timeout.is_zero() {
            return invalid("health.timeout", "must be greater than zero");
        }
        // A node's checks run one after another: a check allowed to outlast the interval would
        // stretch it, and a dead node would be judged later than `interval` promises.
        if self.timeout > self.interval {
            return invalid("health.timeout", "must be at most health.interval");
        }
        if self.failure_threshold == 0 {
            return invalid("health.failure_threshold", "must be at least 1");
        }
        if self.recovery_threshold == 0 {
            return invalid("health.recovery_threshold", "must be at least 1");
        }
        if self.passive_failures == 0 {
            return invalid("health.passive_failures", "must be at least 1");
        }
        Ok(())
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

impl ForwardConfig {
    /// Checks `[upstream]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_attempts == 0 {
            return invalid("upstream.max_attempts", "must be at least 1");
        }
        if self.request_timeout.is_zero() {
            return invalid("upstream.request_timeout", "must be greater than zero");
        }
        if self.connect_timeout.is_zero() {
            return invalid("upstream.connect_timeout", "must be greater than zero");
        }
        if self.max_concurrency == 0 {
            return invalid("upstream.max_concurrency", "must be at least 1");
        }
        // Each node's slots are a semaphore, which holds at most this many.
        if self.max_concurrency > tokio::sync::Semaphore::MAX_PERMITS {
            return invalid(
                "upstream.max_concurrency",
                format!("must be at most {}", tokio::sync::Semaphore::MAX_PERMITS),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert!(parse_base_url("http://10.0.0.5:9650").is_ok());
        assert!(parse_base_url("http://10.0.0.5:9650/").is_ok());
        assert!(parse_base_url("https://x:1").is_err());
        assert!(parse_base_url("http://x:1/ext/bc/P").is_err());
        assert!(parse_base_url("10.0.0.5:9650").is_err());
        assert!(parse_base_url("http://u:p@x:1").is_err());
        assert!(parse_base_url("http://[::1]:9650").is_ok());
        for no_port in [
            "http://10.0.0.5",
            "http://10.0.0.5/",
            "http://node-a:",
            "http://[::1]",
        ] {
            let e = parse_base_url(no_port).unwrap_err();
            assert!(e.contains("missing port"), "{no_port}: {e}");
        }
        assert!(parse_base_url("http://x:0").is_err());
    }
}
