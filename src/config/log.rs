//! `[log]`: what snowgate logs; read by [`crate::logging`] at start and at every reload.

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[log]`.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter (`"info"`, `"snowgate=debug,info"`); `RUST_LOG`, when set, wins. The
    /// default is `"info"`.
    pub filter: Option<String>,
    /// `"text"` (one line per event, colour only on a terminal) or `"json"` (one object per
    /// line); `--log-format` wins. Read at start only.
    pub format: LogFormat,
    /// One line per client request at info (target `snowgate::access`): request id, client
    /// address, method (or `batch` and its count), HTTP status, cache result, upstream, duration.
    /// Never params, never keys. Changes on a reload.
    pub access: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-11-23T20:40:22.858Z  INFO snowgate::cli: snowgate listening addr=127.0.0.1:9650`.
    #[default]
    Text,
    /// `{"timestamp":"…","level":"INFO","fields":{"message":"…",…},"target":"…","span":{…}}`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<LogFormat, UnknownLogFormat> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(UnknownLogFormat(s.to_string())),
        }
    }
}

/// A `--log-format` that is neither `text` nor `json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a log format: \"text\" or \"json\"")]
pub struct UnknownLogFormat(String);

impl LogConfig {
    /// Checks `[log]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(filter) = &self.filter {
            if filter.len() > MAX_FILTER_BYTES {
                return invalid(
                    "log.filter",
                    format!("longer than {MAX_FILTER_BYTES} bytes"),
                );
            }
            if let Err(e) = parse_filter(filter) {
                return invalid("log.filter", format!("not a log filter: {e}"));
            }
        }
        Ok(())
    }
}

/// The longest `[log] filter` accepted.
pub const MAX_FILTER_BYTES: usize = 4096;

/// Compiles a filter with field values matched literally: as regular expressions, one directive
/// such as `[span{id=(a|b)*a(a|b)(a|b)...}]` builds an automaton exponential in its length
/// (measured: 17 repetitions took 2 s and 118 MB), and tracing-subscriber's own documentation
/// advises against regexes from untrusted input.
pub fn parse_filter(
    filter: &str,
) -> Result<tracing_subscriber::EnvFilter, tracing_subscriber::filter::ParseError> {
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_values_are_literal_and_filters_are_bounded() {
        // As a regex, 30 of these build an automaton of about 2^30 states (17 took 2 s and
        // 118 MB); matched literally it is one string.
        let hostile = format!("info,[request{{id=(a|b)*a{}}}]=trace", "(a|b)".repeat(30));
        let config = LogConfig {
            filter: Some(hostile),
            ..Default::default()
        };
        assert!(config.validate().is_ok());
        let long = LogConfig {
            filter: Some(format!("info,{}", "snowgate=debug,".repeat(400))),
            ..Default::default()
        };
        let e = long.validate().unwrap_err();
        assert_eq!(e.key(), Some("log.filter"));
        let bad = LogConfig {
            filter: Some("info,=[".into()),
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err().key(), Some("log.filter"));
    }
}
