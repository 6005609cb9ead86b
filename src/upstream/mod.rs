//! The upstream pool: the configured nodes, their health, and forwarding a call to one of them.
//!
//! The map, from a call down to the wire:
//! * `pool.rs`: [`Pool`]; its `forward` picks a node, takes one of its concurrency slots
//!   (queueing at the pool when every usable node is full) and sends; failover for reads
//!   (transport errors, timeouts, 5xx and garbage answers move to another node within
//!   `max_attempts` and one deadline), side-effecting calls (`issueTx`) re-sent only when the
//!   first attempt never connected, height-aware routing, calls pinned by `X-Snowgate-Upstream`.
//! * `select.rs`: which node may take a call (healthy, height admitted, room under the
//!   concurrency limit, the height the call needs), a pure function over plain data;
//!   `balance.rs`: power of two choices over peak-EWMA latency times requests in flight among
//!   those.
//! * `node.rs`: one node (`Upstream`), its bookkeeping, and one exchange with it; the requests
//!   pending on it in a ring (`pending.rs`), so one still in flight counts as at least as slow as
//!   its age.
//! * [`conn`]: keep-alive HTTP/1.1 connections to each node (a small client of its own), with
//!   connect and per-attempt timeouts.
//! * `answer.rs`: what a node sends back is checked before a client sees it.
//! * `health.rs`: the pure rules: active checks plus passive signals from real requests
//!   (`[health] passive_failures` in a row; timeouts never count), with hysteresis; the pool's
//!   heights judged afresh at every check, so a node more than `max_lag_blocks` behind the quorum
//!   height takes no traffic, nor (with three or more nodes) one implausibly far ahead of it.
//!   `probe.rs` runs the checks every `[health] interval` and applies what they find.
//! * `status.rs`: [`PoolStatus`], what `/ext/health` shows of the pool.
//!
//! What the public sees of a node's failure (a client's error, `/ext/health`) is a [`Fault`]
//! category and the node's configured name; the logs may add its address, never a request's
//! params or a node's answer body. Upstream request ids are random 64-bit numbers, so a node
//! cannot answer a request before it has seen it.
//!
//! The library exports [`Pool`] (the gateway's handle; tests read its `status`, `best_height`
//! and run `check_once`), [`PoolStatus`] and [`UpstreamStatus`] (`/ext/health`), [`conn`]
//! (tests and the load benchmark's ceiling server drive the client directly), [`Fault`] (in
//! [`conn::SendError`]) and `parse_base_url` (config validation); everything else is internal.

mod answer;
mod balance;
pub mod conn;
mod health;
mod node;
mod pending;
mod pool;
mod probe;
mod select;
mod status;

use http::Uri;

pub use health::Fault;
pub use pool::Pool;
pub use status::{PoolStatus, UpstreamStatus};

/// Checks a node base URL: `http://host:port` with no path, query or credentials. Returns the
/// authority to send requests to.
pub fn parse_base_url(url: &str) -> Result<http::uri::Authority, String> {
    let uri: Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(format!("scheme {other:?} is not supported (use http)")),
        None => return Err("missing scheme (use http://host:port)".into()),
    }
    let authority = uri.authority().cloned().ok_or("missing host")?;
    if authority.as_str().contains('@') {
        return Err("credentials in the URL are not supported".into());
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("give the node's base URL only (no path or query)".into());
    }
    Ok(authority)
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
    }
}
