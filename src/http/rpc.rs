//! The JSON-RPC paths, and what the router hands the decoding layer for a request to one of them.
//!
//! One home for "which requests are RPC": the router routes by [`rpc_path`], and the trace layer
//! asks [`is_rpc`] to leave those requests to their [`Record`] (see [`super::record`]).

use bytes::Bytes;
use http::Method;

use super::record::Record;
use crate::call::Caller;
use crate::jsonrpc::http::{INFO_PATH, PROPOSERVM_PATH, P_CHAIN_PATHS};
use crate::methods::Family;

/// A JSON-RPC body that passed the HTTP checks, for the decoding layer.
#[derive(Debug)]
pub struct RpcRequest {
    /// The API the path serves.
    pub family: Family,
    /// The path it came to (one of the known ones).
    pub path: &'static str,
    pub body: Bytes,
    pub caller: Caller,
    /// When it reached the router, and what it comes to: finished by the decoding layer when it
    /// answers (or, dropped unanswered, as a client gone away).
    pub record: Record,
}

/// The JSON-RPC API at `path` (the path as one of the known constants).
pub fn rpc_path(path: &str) -> Option<(Family, &'static str)> {
    if path == INFO_PATH {
        return Some((Family::Info, INFO_PATH));
    }
    if path == PROPOSERVM_PATH {
        return Some((Family::ProposerVm, PROPOSERVM_PATH));
    }
    let known = P_CHAIN_PATHS.iter().find(|p| **p == path)?;
    Some((Family::Platform, known))
}

/// Whether a request with this method and path is a JSON-RPC request, recorded by its [`Record`]
/// rather than by the trace layer.
pub fn is_rpc(method: &Method, path: &str) -> bool {
    method == Method::POST && rpc_path(path).is_some()
}
