//! `[server]`: where snowgate listens and how it drains; read by the gateway and the server.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

/// `[server]`: where snowgate listens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the public endpoint.
    pub listen: SocketAddr,
    /// On SIGTERM/SIGINT, how long `/ext/health` answers 503 while snowgate still serves, so a
    /// load balancer stops sending before the listener closes.
    #[serde(with = "crate::duration")]
    pub drain_grace: Duration,
    /// Then, how long requests in flight may take to finish.
    #[serde(with = "crate::duration")]
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
