//! `[admin]`: the keys that unlock restricted methods and the admin endpoints, and the optional
//! admin listener; read by the policy layer, the router and the gateway's start.

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[admin]`: callers allowed to use restricted methods.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer tokens (`Authorization: Bearer <key>`) that unlock node-specific and keystore
    /// methods and upstream pinning. Never logged.
    pub api_keys: Vec<String>,
    /// A second listener for the operator's endpoints (`/metrics`, the status page and its JSON,
    /// purge, reload, cordon): served there, and 404 on the public port. Keep it on loopback or
    /// a private network. Read at start only.
    pub listen: Option<std::net::SocketAddr>,
    /// Whether `GET /ext/health` names each node's avalanchego release (`version`) to anyone.
    /// `false` hides it from the public (it tells an attacker which nodes run an old release);
    /// callers with an admin key, and the admin listener, still see it. Changes on a reload.
    pub public_versions: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            api_keys: Vec::new(),
            listen: None,
            public_versions: true,
        }
    }
}

impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field(
                "api_keys",
                &format_args!("[{} redacted]", self.api_keys.len()),
            )
            .field("listen", &self.listen)
            .field("public_versions", &self.public_versions)
            .finish()
    }
}

/// The admin key `config/public-endpoint.toml` ships with. Anyone can read it there, so a copy of
/// that file put to use unchanged must not start: any key containing `replace-me` is refused.
pub const PLACEHOLDER_KEY: &str = "replace-me-with-a-long-random-key";

impl AdminConfig {
    /// Checks `[admin]`; the error names the key and never shows a key's value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, key) in self.api_keys.iter().enumerate() {
            if key.len() < 16 {
                return invalid(
                    format!("admin.api_keys[{i}]"),
                    "every key must be at least 16 characters",
                );
            }
            if key.to_ascii_lowercase().contains("replace-me") {
                return invalid(
                    format!("admin.api_keys[{i}]"),
                    "is the example's placeholder: set a real key (e.g. the output of \
                     `openssl rand -hex 32`) and keep it secret",
                );
            }
        }
        Ok(())
    }
}
