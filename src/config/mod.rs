//! snowgate's configuration: a TOML file (`config/snowgate.toml`), every section with defaults and
//! `deny_unknown_fields`, then [`Config::validate`] for what serde cannot check, naming the key.
//!
//! A leaf of the module graph: it imports only the method registry ([`crate::methods`]) and what
//! traces are set up with ([`crate::otel::Settings`]), and the layers import their own section
//! from here. [`Config`] is the file; each section lives in a file named after the layer that
//! reads it ([`server`], [`limits`], [`upstream`] (the nodes, `[health]` and `[upstream]`),
//! [`cache`], [`rate_limit`], [`admin`], [`methods`], [`traces`] (`[tracing]`)), with its
//! own `validate` naming its own keys. `snowgate check`, `snowgate serve` and every gateway a test
//! starts go through the one [`Config::validate`], so a file `check` accepts is one `serve` runs.
//!
//! Durations are written as strings (`"250ms"`, `"1s"`).

pub mod admin;
pub mod cache;
pub mod limits;
pub mod log;
pub mod methods;
pub mod rate_limit;
pub mod redis;
pub mod server;
pub mod traces;
pub mod upstream;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::methods::{MethodOverride, Registry};
pub use admin::AdminConfig;
pub use cache::{CacheConfig, Verify};
pub use limits::LimitsConfig;
pub use log::{LogConfig, LogFormat};
pub use rate_limit::{ClientIpHeader, KeyQuota, OnRedisDown, QuotaScope, RateLimitConfig, Tier};
pub use redis::RedisConfig;
pub use server::ServerConfig;
pub use traces::TracingConfig;
pub use upstream::{
    parse_base_url, ForwardConfig, HealthConfig, NetworkConfig, Role, UpstreamConfig,
};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`.
    #[serde(default)]
    pub server: ServerConfig,
    /// The nodes behind the gateway, one `[[upstreams]]` table each.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// `[health]`.
    #[serde(default)]
    pub health: HealthConfig,
    /// `[network]`: the network the upstreams must be on.
    #[serde(default)]
    pub network: NetworkConfig,
    /// `[upstream]`: forwarding.
    #[serde(default)]
    pub upstream: ForwardConfig,
    /// `[admin]`.
    #[serde(default)]
    pub admin: AdminConfig,
    /// `[cache]`.
    #[serde(default)]
    pub cache: CacheConfig,
    /// `[limits]`.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `[rate_limit]`.
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
    /// `[redis]`: the fleet's shared tier (cache and quotas); `None` = this instance shares
    /// nothing.
    #[serde(default)]
    pub redis: Option<RedisConfig>,
    /// `[log]`.
    #[serde(default)]
    pub log: LogConfig,
    /// `[tracing]`: OpenTelemetry traces (off without `otlp_endpoint`).
    #[serde(default)]
    pub tracing: TracingConfig,
    /// Per-method additions and overrides of the built-in registry, keyed by method name:
    /// `[methods."platform.getAllValidatorsAt"] family = "platform"`.
    #[serde(default)]
    pub methods: BTreeMap<String, MethodOverride>,
}

/// A configuration problem, naming the file (when there is one) and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not TOML, or not the shape of the file (an unknown key, a wrong type).
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// A value the file's shape allows but snowgate cannot run with. `path` is the file, or
    /// `None` for a config built in code or changed by flags.
    #[error("{}`{key}`: {message}", in_file(.path))]
    Invalid {
        path: Option<String>,
        key: String,
        message: String,
    },
}

/// A TOML key as snowgate's keys are written (bare, dotted or quoted): shown in an error, since a
/// key is no secret (a value may be).
fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.\"".contains(&b))
}

/// The table the text ends in, named as validation errors name keys: `limits`,
/// `upstreams[1]`, `methods."platform.getHeight"` (`None` before the first header).
fn table_of(before: &str) -> Option<String> {
    let mut table: Option<String> = None;
    let mut arrays: std::collections::HashMap<String, usize> = Default::default();
    for line in before.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            let name = name.trim().to_string();
            let n = arrays.entry(name.clone()).or_insert(0);
            table = Some(format!("{name}[{n}]"));
            *n += 1;
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = Some(name.trim().to_string());
        }
    }
    table.filter(|t| t.len() <= 96)
}

/// `message` with every double-quoted part replaced by `"…"`: serde and toml quote the values
/// they met, which may be secrets (names of keys are quoted with backticks and stay).
fn without_quoted_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    let mut escaped = false;
    for c in message.chars() {
        if inside {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => inside = false,
                _ => escaped = false,
            }
        } else if c == '"' {
            out.push_str("\"…\"");
            inside = true;
        } else {
            out.push(c);
        }
    }
    out
}

fn in_file(path: &Option<String>) -> String {
    path.as_ref().map(|p| format!("{p}: ")).unwrap_or_default()
}

/// The error of an invalid `key`: how the sections' `validate` report.
fn invalid<T>(key: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        path: None,
        key: key.into(),
        message: message.into(),
    })
}

impl ConfigError {
    /// The key a validation error names (`cache.head_ttl`, `upstreams[2].url`).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The same error, saying which file it is in.
    pub fn in_file(self, origin: &str) -> ConfigError {
        match self {
            ConfigError::Invalid { key, message, .. } => ConfigError::Invalid {
                path: Some(origin.to_string()),
                key,
                message,
            },
            other => other,
        }
    }
}

impl Config {
    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let config = Config::read(path)?;
        config.validate().map_err(|e| e.in_file(&shown))?;
        Ok(config)
    }

    /// Reads and parses a file without validating it, for a caller that changes it first (the
    /// flags of `snowgate serve`) and then calls [`Config::validate`].
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Config::from_toml(&text, &shown)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config = Config::from_toml(text, origin)?;
        config.validate().map_err(|e| e.in_file(origin))?;
        Ok(config)
    }

    /// Parses TOML text without validating it (see [`Config::read`]); `origin` names it in errors.
    ///
    /// The error gives the line, the column and the reason, and never the file's text: the line
    /// it is on may hold a password or a key (toml quotes it, and serde quotes a mistyped value,
    /// `invalid type: string "..."`), and this error is printed by `snowgate check`, logged by a
    /// reload and answered by `POST /snowgate/reload`.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .and_then(|span| text.get(..span.start))
                .map(|before| {
                    let line = before.matches('\n').count() + 1;
                    let start = before.rfind('\n').map_or(0, |i| i + 1);
                    let column = before.len() - start + 1;
                    // The key the line assigns, when it is one (a key is no secret; a value may
                    // be): what is left of its first `=`.
                    let key = text[start..]
                        .lines()
                        .next()
                        .and_then(|l| l.split_once('='))
                        .map(|(k, _)| k.trim())
                        .filter(|k| is_key(k))
                        .map(|k| match table_of(&text[..start]) {
                            Some(table) => format!(" (`{table}.{k}`)"),
                            None => format!(" (`{k}`)"),
                        })
                        .unwrap_or_default();
                    format!(" at line {line}, column {column}{key}")
                })
                .unwrap_or_default();
            ConfigError::Parse {
                path: origin.to_string(),
                message: format!(
                    "not a valid config{at}: {}",
                    without_quoted_values(e.message().trim_end())
                ),
            }
        })
    }

    /// Everything serde cannot check, section by section: the one validation `snowgate check`,
    /// `snowgate serve` and `gateway::assemble` share, so that a config it accepts is one
    /// the gateway starts with (at least one upstream, every number within what the runtime
    /// accepts). The error names the first offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map(drop)
    }

    /// [`Config::validate`], giving the method registry the config makes: built once, for the
    /// validation and then for the gateway that starts (or reloads) with the config, which passes
    /// it down to the layers that read it.
    pub fn check(&self) -> Result<Registry, ConfigError> {
        let registry = Registry::with_overrides(&self.methods);
        self.validate_with(&registry)?;
        Ok(registry)
    }

    /// [`Config::validate`] with `registry`, the one this config's `[methods]` make (a reload
    /// validates again, with the same registry, after putting back the restart-only settings).
    pub(crate) fn validate_with(&self, registry: &Registry) -> Result<(), ConfigError> {
        upstream::validate_upstreams(&self.upstreams)?;
        self.health.validate()?;
        // A check may not outlast the interval it runs in (as `[health]` requires of its own).
        for (i, up) in self.upstreams.iter().enumerate() {
            if up
                .health_interval
                .is_some_and(|every| every < self.health.timeout)
            {
                return invalid(
                    format!("upstreams[{i}].health_interval"),
                    "must be at least health.timeout",
                );
            }
        }
        self.upstream.validate()?;
        self.limits.validate()?;
        // Across sections: one attempt must fit in the request's deadline.
        if self.limits.request_deadline < self.upstream.request_timeout {
            return invalid(
                "limits.request_deadline",
                "must be at least upstream.request_timeout",
            );
        }
        self.rate_limit.validate(registry)?;
        self.cache.validate()?;
        self.validate_sharing()?;
        self.admin.validate()?;
        if let Some(admin) = self.admin.listen {
            if admin == self.server.listen && admin.port() != 0 {
                return invalid(
                    "admin.listen",
                    "is server.listen: the admin listener needs its own address",
                );
            }
        }
        self.log.validate()?;
        self.tracing.validate()?;
        methods::validate(&self.methods, registry)?;
        // Last, so that a file made to show one error (as the tests' are) reports that one.
        if self.upstreams.is_empty() {
            return invalid(
                "upstreams",
                "no upstreams: add [[upstreams]] tables (or pass --upstream URL to snowgate serve)",
            );
        }
        Ok(())
    }
}

impl Config {
    /// Whether answers go to the shared tier: `[cache] shared`, by default on when `[redis]` is set.
    pub fn shares_cache(&self) -> bool {
        self.redis.is_some() && self.cache.enabled && self.cache.shared.unwrap_or(true)
    }

    /// Whether quotas are global: `[rate_limit] scope`, by default global when `[redis]` is set.
    pub fn global_quotas(&self) -> bool {
        self.redis.is_some()
            && self.rate_limit.enabled
            && self.rate_limit.scope.unwrap_or(QuotaScope::Global) == QuotaScope::Global
    }

    fn validate_sharing(&self) -> Result<(), ConfigError> {
        match &self.redis {
            Some(redis) => redis.validate(),
            None if self.cache.shared == Some(true) => invalid(
                "cache.shared",
                "needs a [redis] section to share answers in",
            ),
            None if self.rate_limit.scope == Some(QuotaScope::Global) => invalid(
                "rate_limit.scope",
                "\"global\" needs a [redis] section to hold the quotas",
            ),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One valid node: a file needs at least one.
    const NODE: &str = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n";

    #[test]
    fn parse_errors_never_quote_the_files_text() {
        let secret = "hunter2-secret-0123456789";
        for text in [
            format!("[[upstreams]]\nname = \"a\"\nurl = \"https://u:{secret}@h/v1\" role = \"fallback\"\n"),
            format!("[admin]\napi_keys = [\"{secret}\" \"x\"]\n"),
            format!("[admin]\napi_keys = \"{secret}\"\n"),
            format!("[[upstreams]]\nname = \"a\"\nurl = \"http://h:1\"\nheaders = \"x-api-key: {secret}\"\n"),
            format!("[admin]\napi_keys = [\"{secret}\\\"\"]]\n"),
        ] {
            let e = Config::from_toml(&text, "f.toml").unwrap_err().to_string();
            assert!(!e.contains(secret), "{e}");
            assert!(e.starts_with("f.toml: not a valid config at line "), "{e}");
        }
        assert_eq!(
            without_quoted_values(r#"invalid type: string "a\"b", expected `x`"#),
            r#"invalid type: string "…", expected `x`"#
        );
    }

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
            let text = format!("{NODE}[methods.\"{name}\"]\n{table}\n");
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
            Config::parse(&format!("{NODE}{ok}"), "t.toml").unwrap();
        }
    }

    #[test]
    fn validate_and_parse_name_the_same_key() {
        // Built in code (as `serve` after its flags): no file to name.
        let e = Config::default().validate().unwrap_err();
        assert_eq!(e.key(), Some("upstreams"));
        assert!(e.to_string().starts_with("`upstreams`: "), "{e}");
        // Read from a file: the file, then the key.
        let e = Config::parse("", "t.toml").unwrap_err();
        assert_eq!(e.key(), Some("upstreams"));
        assert!(e.to_string().starts_with("t.toml: `upstreams`: "), "{e}");
        let e = Config::parse("[helth]\n", "t.toml").unwrap_err();
        assert_eq!(e.key(), None, "{e}");
        // Unvalidated, for callers that change it first.
        assert!(Config::from_toml("", "t.toml").is_ok());
    }

    #[test]
    fn durations_are_strings() {
        let text = format!("{NODE}[health]\ninterval = \"250ms\"\ntimeout = \"250ms\"\n");
        let c = Config::parse(&text, "t.toml").unwrap();
        assert_eq!(c.health.interval, Duration::from_millis(250));
    }

    #[test]
    fn sharing_needs_redis_and_defaults_to_on_with_it() {
        let e = Config::parse(&format!("{NODE}[cache]\nshared = true\n"), "t").unwrap_err();
        assert_eq!(e.key(), Some("cache.shared"));
        let e = Config::parse(&format!("{NODE}[rate_limit]\nscope = \"global\"\n"), "t");
        assert_eq!(e.unwrap_err().key(), Some("rate_limit.scope"));
        let c = Config::parse(NODE, "t").unwrap();
        assert!(!c.shares_cache() && !c.global_quotas());
        let text = format!("{NODE}[redis]\nurl = \"redis://127.0.0.1:6379/0\"\n");
        let c = Config::parse(&text, "t").unwrap();
        assert!(c.shares_cache() && c.global_quotas());
        assert_eq!(c.cache.shared_ttl, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(c.redis.as_ref().unwrap().timeout, Duration::from_millis(25));
        let text = format!("{text}[cache]\nshared = false\n[rate_limit]\nscope = \"local\"\n");
        let c = Config::parse(&text, "t").unwrap();
        assert!(!c.shares_cache() && !c.global_quotas());
        let e = Config::parse(&format!("{NODE}[redis]\n"), "t").unwrap_err();
        assert_eq!(e.key(), Some("redis.url"));
    }

    #[test]
    fn admin_keys_are_not_debug_printed() {
        let text = format!("{NODE}[admin]\napi_keys = [\"supersecretkey-123456\"]\n");
        let c = Config::parse(&text, "t").unwrap();
        assert!(!format!("{c:?}").contains("supersecret"));
    }
}
