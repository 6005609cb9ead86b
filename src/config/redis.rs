//! `[redis]`: the shared tier of a fleet (one Redis or a Redis Cluster); read by `crate::shared`.
//! Without this section snowgate shares nothing and needs no Redis.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[redis]` in the config.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// One server: `redis://[user:password@]host:port/db`, `rediss://` for TLS, or
    /// `redis+unix:///path.sock`. The password is never logged.
    pub url: Option<String>,
    /// A Redis Cluster instead: some of its nodes' `redis://` URLs (the rest are discovered).
    pub cluster: Vec<String>,
    /// Put before every key snowgate writes, so that several fleets (or networks) share one Redis.
    pub key_prefix: String,
    /// The most one request ever waits on Redis (one command's round trip).
    #[serde(with = "crate::duration")]
    pub timeout: Duration,
    /// PEM file of the CA that signed Redis's certificate (`rediss://` with a private CA); without
    /// it the web's public roots are trusted.
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: None,
            cluster: Vec::new(),
            key_prefix: "snowgate:".to_string(),
            timeout: Duration::from_millis(25),
            ca_file: None,
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.url.as_deref().map(redact))
            .field(
                "cluster",
                &self.cluster.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            )
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// A Redis URL as it may be shown: the user and password, if any, replaced by `***`, and the query
/// dropped (a `redis+unix://` URL carries its credentials there: `?user=..&pass=..`).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "[unreadable url]".to_string();
    };
    // Credentials end at the last '@' anywhere: a password may hold an unencoded '/', '?' or '#'
    // (the URL is then invalid, and the error that says so must not show it).
    let rest = match rest.rfind('@') {
        Some(at) => format!("***@{}", &rest[at + 1..]),
        None => rest.to_string(),
    };
    match rest.split_once(['?', '#']) {
        Some((before, _)) => format!("{scheme}://{before}?***"),
        None => format!("{scheme}://{rest}"),
    }
}

impl RedisConfig {
    /// The URLs to connect to (one, or the cluster's seeds).
    pub fn urls(&self) -> Vec<&str> {
        match &self.url {
            Some(u) => vec![u.as_str()],
            None => self.cluster.iter().map(String::as_str).collect(),
        }
    }

    /// Checks `[redis]`; the error names the key and never shows a password.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match (&self.url, self.cluster.is_empty()) {
            (Some(_), false) => {
                return invalid(
                    "redis.cluster",
                    "set either redis.url or redis.cluster, not both",
                )
            }
            (None, true) => {
                return invalid(
                    "redis.url",
                    "set redis.url (one server) or redis.cluster (a Redis Cluster)",
                )
            }
            _ => {}
        }
        if let Some(url) = &self.url {
            check_url("redis.url", url, &["redis", "rediss", "redis+unix", "unix"])?;
        }
        for (i, url) in self.cluster.iter().enumerate() {
            check_url(&format!("redis.cluster[{i}]"), url, &["redis", "rediss"])?;
        }
        if self.key_prefix.len() > 64 || self.key_prefix.bytes().any(|b| !b.is_ascii_graphic()) {
            return invalid(
                "redis.key_prefix",
                "must be at most 64 printable ASCII characters without spaces",
            );
        }
        if self.ca_file.is_some() && !self.urls().iter().all(|u| u.starts_with("rediss://")) {
            return invalid("redis.ca_file", "only used with rediss:// URLs");
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > Duration::from_secs(5) {
            return invalid("redis.timeout", "must be between 1ms and 5s");
        }
        Ok(())
    }
}

fn check_url(key: &str, url: &str, schemes: &[&str]) -> Result<(), ConfigError> {
    let scheme = url.split_once("://").map(|(s, _)| s);
    if !scheme.is_some_and(|s| schemes.contains(&s)) {
        let list = schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ");
        return invalid(key, format!("must start with one of {list}"));
    }
    if redis::IntoConnectionInfo::into_connection_info(url).is_err() {
        return invalid(key, format!("not a valid Redis URL: {}", redact(url)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://user:s3cret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:p@ss@h:1"), "rediss://***@h:1");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(
            redact("redis+unix:///run/r.sock"),
            "redis+unix:///run/r.sock"
        );
        let c = RedisConfig {
            url: Some("redis://u:hunter2-secret@h:1".into()),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn one_of_url_and_cluster() {
        let mut c = RedisConfig::default();
        assert_eq!(c.validate().unwrap_err().key(), Some("redis.url"));
        c.url = Some("redis://127.0.0.1:6379/0".into());
        c.validate().unwrap();
        c.cluster = vec!["redis://127.0.0.1:7000".into()];
        assert_eq!(c.validate().unwrap_err().key(), Some("redis.cluster"));
        c.url = None;
        c.validate().unwrap();
        c.cluster = vec!["redis+unix:///x.sock".into()];
        assert_eq!(c.validate().unwrap_err().key(), Some("redis.cluster[0]"));
    }

    #[test]
    fn bad_urls_are_named_without_their_password() {
        let c = RedisConfig {
            url: Some("http://u:pw-secret@h:1".into()),
            ..Default::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("redis.url") && !e.contains("pw-secret"), "{e}");
    }
}
