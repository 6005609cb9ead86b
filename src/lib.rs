//! snowgate: a caching, load-balancing JSON-RPC gateway in front of Avalanche nodes.
//!
//! The request path, outermost first (composed in one place, [`stack`]):
//!
//! 1. `server` accepts HTTP/1.1 and cleartext HTTP/2 connections, bounded per client address,
//!    in time and in HTTP/2 streams, and drains them on shutdown;
//! 2. [`http`]: request id, trace, CORS as a node answers it, drain, compression, then the router
//!    (the node's 404/405/415, the body within its limits, snowgate's own endpoints) and the
//!    decoding of the JSON-RPC envelope (or a batch) into calls, with the node's rules
//!    ([`jsonrpc`]);
//! 3. per call: `policy` (who may call what, and how far back), [`ratelimit`] (the caller's
//!    quota), [`cache`] (answers by finality, identical misses coalesced), [`upstream`] (a healthy
//!    node, its answer checked), or [`health`] for the node's health API, which the gateway
//!    answers itself.
//!
//! The modules read bottom-up, and none imports one above it or beside it (`tests/layers.rs`):
//!
//! * leaves, the vocabulary: [`jsonrpc`], [`body`], [`duration`] (the config's durations, bounded), [`methods`], `keys`, [`otel`] (a call's
//!   trace), [`error`], [`call`], [`config`], [`metrics`]; [`logging`] (the log subscriber, its
//!   filter from the config, and the trace exporter);
//! * [`shared`]: the fleet's Redis (connection, timeout, circuit breaker), under the cache and the
//!   rate limiter that keep their answers and quotas there; `verify` (holding an immutable answer
//!   against its call: the pool checks a node's, the cache a value read back from Redis);
//! * the per-call layers, independent of each other: `policy`, [`ratelimit`], [`cache`],
//!   [`upstream`], and [`health`] over it;
//! * [`http`], then [`stack`], then `server` and [`gateway`] (assembling a running gateway from
//!   a config, and re-assembling it on a reload), then the command line ([`cli`], [`demo`]).
//!
//! [`devnode`] (the `devnode` feature, on by default) is the simulated avalanchego that tests,
//! benchmarks and the demo run against. It speaks the node's wire through [`jsonrpc`] and nothing
//! else of the gateway; nothing of the gateway imports it.
//!
//! The library's API is what the binary, the tests and the benchmarks use: [`Gateway`] and
//! [`gateway::assemble`], [`Config`] and its sections, [`stack::Stack`] with [`http::ConnInfo`]
//! (one connection's stack, in process), the [`jsonrpc`] wire, the [`methods`] registry, the
//! [`call`] types, [`cache::key`], [`upstream::conn`] (the node client, tested on its own), the
//! [`devnode`], and the subcommands ([`cli`], [`demo`]). Most modules are `pub` because the
//! integration tests and benchmarks reach into them (the quota script and the shared tier are
//! tested against a real Redis through [`ratelimit`] and [`shared`], the status page's figures
//! through [`metrics`]); only `keys`, `policy`, `server` and `verify` are `pub(crate)`. Public here is not
//! a promise of stability: the product is the binary.

pub mod body;
pub mod cache;
pub mod call;
pub mod cli;
pub mod config;
#[cfg(feature = "devnode")]
pub mod demo;
#[cfg(feature = "devnode")]
pub mod devnode;
pub mod duration;
pub mod error;
pub mod gateway;
pub mod health;
pub mod http;
pub mod jsonrpc;
pub(crate) mod keys;
pub mod logging;
pub mod methods;
pub mod metrics;
pub mod otel;
pub(crate) mod policy;
pub mod ratelimit;
pub(crate) mod server;
pub mod shared;
pub mod stack;
pub mod upstream;
pub(crate) mod verify;

pub use config::Config;
pub use gateway::Gateway;
