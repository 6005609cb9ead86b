//! `[limits]`: hard limits on what a client may send and what a node may answer; read by the
//! server (connections, timeouts), the router (body, batch, depth) and the pool (answer size,
//! deadline).

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[limits]`: hard limits on what a client may send and what a node may answer, each with a
/// clear error when crossed.
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
    #[serde(with = "crate::duration")]
    pub header_timeout: Duration,
    /// A connection with no request for this long is closed.
    #[serde(with = "crate::duration")]
    pub idle_timeout: Duration,
    /// One request, all attempts on all nodes included: 504 beyond it.
    #[serde(with = "crate::duration")]
    pub request_deadline: Duration,
    /// Open client connections; beyond it a new connection gets 503 and is closed.
    pub max_connections: usize,
    /// Open connections from one client address (an IPv4 address or an IPv6 /64); beyond it a new
    /// connection from that address gets 503 and is closed. Peers in
    /// `rate_limit.trusted_proxies` are exempt (a load balancer is many clients).
    pub max_connections_per_ip: usize,
    /// The whole request body must arrive within this long after its headers: else 408, and the
    /// connection is closed.
    #[serde(with = "crate::duration")]
    pub body_timeout: Duration,
    /// An answer the client has not taken within this long (it stopped reading, or its HTTP/2
    /// window stays shut) ends its connection.
    #[serde(with = "crate::duration")]
    pub send_timeout: Duration,
    /// Request body bytes one connection may have buffered at once (its HTTP/2 streams together);
    /// further bytes wait for room, within `body_timeout`.
    pub connection_body_bytes: usize,
    /// Request body bytes one client address may have buffered at once, over all its connections
    /// (addresses grouped as for `max_connections_per_ip`: an IPv4 address or an IPv6 /64; behind
    /// a peer in `rate_limit.trusted_proxies`, the client address it forwards, as the rate limiter
    /// reads it); further bytes wait for room, within `body_timeout`. Without it, one address with
    /// `max_connections_per_ip` connections could fill `total_body_bytes` and make every other
    /// client's body wait. At least `connection_body_bytes`, at most a quarter of
    /// `total_body_bytes`.
    pub address_body_bytes: usize,
    /// Request body bytes buffered at once over all connections; further bytes wait for room,
    /// within `body_timeout`, served in arrival order (each address's share of the wait bounded by
    /// `address_body_bytes`).
    pub total_body_bytes: usize,
    /// Answer bytes one client address may leave unread at once, over all its connections
    /// (addresses grouped as for `max_connections_per_ip`), each answer in full: made and handed
    /// to its connections but not yet taken by the client (its HTTP/2 windows shut, its socket
    /// full). Past it, every further answer for the address, on any connection, is refused with a
    /// short 503 instead; an address holding nothing always gets its answer, whatever its size.
    /// Trusted proxies have none (see `total_answer_bytes`).
    pub address_answer_bytes: usize,
    /// Answer bytes all clients together may leave unread at once, counted as held (a payload
    /// shared by several answers, once). Past half of it, an address (or a trusted proxy) holding
    /// more than its share (the other half over the addresses holding unread answers) is refused
    /// further answers; one under its share never is.
    pub total_answer_bytes: usize,
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
            address_body_bytes: 16 * 1024 * 1024,
            total_body_bytes: 256 * 1024 * 1024,
            address_answer_bytes: 16 * 1024 * 1024,
            total_answer_bytes: 256 * 1024 * 1024,
        }
    }
}

impl LimitsConfig {
    /// Checks `[limits]` on its own (its bound against `[upstream]` is checked by
    /// [`super::Config::validate`]); the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("limits.body_bytes", self.body_bytes),
            ("limits.batch_len", self.batch_len),
            ("limits.batch_concurrency", self.batch_concurrency),
            ("limits.response_bytes", self.response_bytes),
            ("limits.max_connections", self.max_connections),
            ("limits.max_connections_per_ip", self.max_connections_per_ip),
            ("limits.address_answer_bytes", self.address_answer_bytes),
            ("limits.total_answer_bytes", self.total_answer_bytes),
        ] {
            if value == 0 {
                return invalid(key, "must be greater than zero");
            }
        }
        // The server counts connections with a semaphore, which holds at most this many.
        if self.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return invalid(
                "limits.max_connections",
                format!("must be at most {}", tokio::sync::Semaphore::MAX_PERMITS),
            );
        }
        if self.depth < 3 {
            return invalid(
                "limits.depth",
                "must be at least 3 (envelope, params, one value)",
            );
        }
        for (key, value) in [
            ("limits.header_timeout", self.header_timeout),
            ("limits.idle_timeout", self.idle_timeout),
            ("limits.request_deadline", self.request_deadline),
            ("limits.body_timeout", self.body_timeout),
            ("limits.send_timeout", self.send_timeout),
        ] {
            if value.is_zero() {
                return invalid(key, "must be greater than zero");
            }
        }
        for (key, value) in [
            ("limits.connection_body_bytes", self.connection_body_bytes),
            ("limits.address_body_bytes", self.address_body_bytes),
            ("limits.total_body_bytes", self.total_body_bytes),
        ] {
            // Room for one whole body, or a request could wait for room that never comes.
            if value < self.body_bytes {
                return invalid(key, "must be at least limits.body_bytes");
            }
            if u32::try_from(value).is_err() {
                return invalid(key, "must be below 4 GiB");
            }
        }
        // A connection is one address's: room it could never fill is a mistake.
        if self.connection_body_bytes > self.address_body_bytes {
            return invalid(
                "limits.connection_body_bytes",
                "must be at most limits.address_body_bytes (one address's connections together)",
            );
        }
        // The bound per address is what keeps a few addresses from filling the gateway's room.
        if self.address_body_bytes > self.total_body_bytes / 4 {
            return invalid(
                "limits.address_body_bytes",
                "must be at most a quarter of limits.total_body_bytes, so that a few addresses \
                 cannot fill it and make every other client's body wait",
            );
        }
        if self.address_answer_bytes > self.total_answer_bytes {
            return invalid(
                "limits.address_answer_bytes",
                "must be at most limits.total_answer_bytes",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(limits: &LimitsConfig) -> String {
        limits
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn the_default_body_rooms_nest() {
        let d = LimitsConfig::default();
        assert!(d.validate().is_ok());
        assert!(d.body_bytes <= d.connection_body_bytes);
        assert!(d.connection_body_bytes <= d.address_body_bytes);
        // One address with every connection it may open still cannot fill the gateway's room.
        assert!(d.max_connections_per_ip * d.connection_body_bytes > d.address_body_bytes);
        assert!(4 * d.address_body_bytes <= d.total_body_bytes);
    }

    #[test]
    fn body_rooms_that_do_not_nest_are_refused_by_name() {
        let one_address_fills_it = LimitsConfig {
            address_body_bytes: 256 * 1024 * 1024,
            ..LimitsConfig::default()
        };
        let e = error(&one_address_fills_it);
        assert!(e.contains("limits.address_body_bytes"), "{e}");
        assert!(e.contains("limits.total_body_bytes"), "{e}");
        let connection_over_address = LimitsConfig {
            connection_body_bytes: 32 * 1024 * 1024,
            ..LimitsConfig::default()
        };
        let e = error(&connection_over_address);
        assert!(e.contains("limits.connection_body_bytes"), "{e}");
        assert!(e.contains("limits.address_body_bytes"), "{e}");
        let below_a_body = LimitsConfig {
            address_body_bytes: 1024,
            ..LimitsConfig::default()
        };
        assert!(error(&below_a_body).contains("limits.address_body_bytes"));
    }
}
