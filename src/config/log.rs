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
}

impl LogConfig {
    /// Checks `[log]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(filter) = &self.filter {
            if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(filter) {
                return invalid("log.filter", format!("not a log filter: {e}"));
            }
        }
        Ok(())
    }
}
