//! snowgate: a caching, load-balancing JSON-RPC gateway in front of Avalanche nodes.
//!
//! The request path, outermost first:
//!
//! 1. [`server`] accepts HTTP/1.1 and cleartext HTTP/2 connections (hyper-util), bounded per
//!    client address, in time (headers, idle, answers the client does not take) and in HTTP/2
//!    streams; [`front`] reads each body within its time and the connection's and gateway's room;
//!    answers go back as [`body::Chunks`], large ones shared rather than copied per client.
//! 2. [`jsonrpc`] reads the envelope with a node's rules and refuses what a node could read
//!    differently; the client's id is kept as raw bytes.
//! 3. [`policy`] and [`methods`] decide whether the caller may call the method at that path.
//! 4. [`ratelimit`] charges the caller's quota; [`cache`] answers hits from memory (moka, with a
//!    read index for immutable answers) and collapses identical misses into one upstream call.
//! 5. [`upstream`] picks a healthy node (health checks, power of two choices over peak-EWMA),
//!    re-encodes the call with its own id, sends it over its own keep-alive HTTP/1.1 client and
//!    checks the answer.
//!
//! [`devnode`] is the simulated avalanchego that tests, benchmarks and the demo run against.

pub mod body;
pub mod cache;
pub mod call;
pub mod cli;
pub mod config;
#[cfg(feature = "devnode")]
pub mod demo;
#[cfg(feature = "devnode")]
pub mod devnode;
pub mod error;
pub mod gateway;
pub mod http;
pub mod jsonrpc;
pub mod keys;
pub mod methods;
pub mod metrics;
pub mod policy;
pub mod ratelimit;
pub mod server;
pub mod stack;
pub mod upstream;

pub use config::Config;
pub use gateway::Gateway;
