//! `[admin]`: the keys that unlock restricted methods; read by the policy layer and the admin
//! endpoints.

use serde::Deserialize;

use super::{invalid, ConfigError};

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

impl AdminConfig {
    /// Checks `[admin]`; the error names the key and never shows a key's value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.api_keys.iter().any(|k| k.len() < 16) {
            return invalid("admin.api_keys", "every key must be at least 16 characters");
        }
        Ok(())
    }
}
