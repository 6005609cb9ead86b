//! The upstream pool: the configured nodes, their health, and forwarding a call to one of them.
//!
//! The map, from a call down to the wire:
//! * `pool.rs`: [`Pool`]; its `forward` picks a node, takes one of its concurrency slots
//!   (queueing at the pool when every usable node is full) and sends; failover for reads
//!   (transport errors, timeouts, 5xx and garbage answers move to another node within
//!   `max_attempts` and one deadline), side-effecting calls (`issueTx`) re-sent only when the
//!   first attempt never connected, height-aware routing, calls pinned by `X-Snowgate-Upstream`.
//!   No node is sent more than `limits.body_bytes` (a call whose re-encoding would pass it is
//!   refused), and a node's 413 is the caller's error: not retried, not held against the node,
//!   unless the body was under 64 KiB, which no proxy refuses: then the node is broken (a
//!   failure like any other, tried on another node).
//! * `select.rs`: which node may take a call (healthy, height admitted, room under the
//!   concurrency limit, the height the call needs), a pure function over plain data;
//!   `balance.rs`: power of two choices over peak-EWMA latency times requests in flight among
//!   those.
//! * `node.rs`: one node (`Upstream`), its bookkeeping, and one exchange with it; the requests
//!   pending on it in a ring (`pending.rs`), so one still in flight counts as at least as slow as
//!   its age.
//! * [`conn`]: keep-alive HTTP/1.1 connections to each node (a small client of its own), with
//!   connect and per-attempt timeouts.
//! * `answer.rs`: what a node sends back is checked before a client sees it; `secrets.rs`: an
//!   upstream's own secrets (header values, credentials, path keys) scrubbed from its error
//!   answers, which a provider may fill with the request it refused.
//! * `vouch.rs`: an immutable answer held against its call (`[cache] verify`, the pure check is
//!   `crate::verify`: a block or tx in hex must hash to the ID asked, a block carry the height
//!   asked, a json one name the ID or height asked), acted on in the forward loop: a contradicting answer is
//!   dropped and another node asked, its node taken out as `lying` until its checks bring it back,
//!   and one node's word the setting wants seconded is marked so for the cache.
//! * `health.rs`: the pure rules: active checks plus passive signals from real requests
//!   (`[health] passive_failures` in a row; timeouts never count), with hysteresis; the pool's
//!   heights judged afresh at every check, so a node more than `max_lag_blocks` behind the quorum
//!   height takes no traffic, nor (with three or more nodes) one implausibly far ahead of it.
//!   `probe.rs` runs the checks every `[health] interval` and applies what they find.
//! * `status.rs`: [`PoolStatus`], what `/ext/health` shows of the pool; `events.rs`: a node's
//!   state changes (joined, unhealthy and why, lagging, back, another network, a reload's, a
//!   cordon's), each one log line and one count.
//! * `cordons.rs`: who cordons a node (the file, an admin of this instance, the fleet) and how
//!   they combine, and the fleet's cordons in its Redis; `cordoning.rs` applies them to the nodes
//!   (an admin's [`Pool::cordon`], the file's at start and on a reload, the fleet's every
//!   `[health] interval`).
//!
//! What the public sees of a node's failure (a client's error, `/ext/health`) is a [`Fault`]
//! category and the node's configured name; the logs may add its address, never a request's
//! params or a node's answer body. Upstream request ids are random 64-bit numbers, so a node
//! cannot answer a request before it has seen it.
//!
//! The library exports [`Pool`] (the gateway's handle; tests read its `status`, `best_height`
//! and run `check_once`), [`Cordoned`] (what an admin's cordon did), [`UpstreamError`] (why a node cannot be set up, when the pool is built
//! or reloaded), [`PoolStatus`] and [`UpstreamStatus`] (`/ext/health`), [`conn`]
//! (tests and the load benchmark's ceiling server drive the client directly), and [`Fault`] (in
//! [`conn::SendError`]); everything else is internal. (A node's base URL is checked by
//! `config::parse_base_url`.)

mod answer;
mod balance;
pub mod conn;
mod cordoning;
mod cordons;
mod events;
mod health;
mod hedge;
mod identity;
mod node;
mod pending;
mod pool;
mod probe;
mod secrets;
mod select;
mod status;
mod vouch;

pub use cordoning::Cordoned;
pub use health::Fault;
pub use node::UpstreamError;
pub use pool::Pool;
pub use status::{PoolStatus, UpstreamStatus};
