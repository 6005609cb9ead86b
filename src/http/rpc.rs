//! The JSON-RPC paths, and what the router hands the decoding layer for a request to one of them.
//!
//! One home for "which requests are RPC": the router routes by [`rpc_route`], and the trace layer
//! asks [`is_rpc`] to leave those requests to their [`Record`] (see [`super::record`]).

use bytes::Bytes;
use http::Method;

use super::record::Record;
use super::Surface;
use crate::call::Caller;
use crate::jsonrpc::http::{HEALTH_PATH, INFO_PATH, PROPOSERVM_PATHS, P_CHAIN_PATHS};
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

/// What a request is, as far as JSON-RPC goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// A body for the API at this path (one of the known constants).
    Call(Family, &'static str),
    /// An RPC path asked with a method other than POST: the node's 405.
    NotPost,
    /// Not an RPC path on this listener.
    No,
}

/// What a request with `method` to `path` on `surface` is: the public port serves every API;
/// the admin listener only the health API, which the operator's probes may call there. `GET
/// /ext/health` is no call: it is snowgate's JSON report, as on a node.
pub fn rpc_route(surface: Surface, method: &Method, path: &str) -> Rpc {
    let Some((family, path)) = rpc_path(path) else {
        return Rpc::No;
    };
    match family {
        Family::Health if method != Method::POST => Rpc::No,
        Family::Health => Rpc::Call(family, path),
        _ if surface == Surface::Admin => Rpc::No,
        _ if method != Method::POST => Rpc::NotPost,
        _ => Rpc::Call(family, path),
    }
}

/// Whether a request is a JSON-RPC call, recorded by its [`Record`] rather than by the trace
/// layer.
pub fn is_rpc(surface: Surface, method: &Method, path: &str) -> bool {
    matches!(rpc_route(surface, method, path), Rpc::Call(..))
}

/// The JSON-RPC API at `path` (the path as one of the known constants).
fn rpc_path(path: &str) -> Option<(Family, &'static str)> {
    match path {
        INFO_PATH => Some((Family::Info, INFO_PATH)),
        HEALTH_PATH => Some((Family::Health, HEALTH_PATH)),
        _ => {
            if let Some(known) = P_CHAIN_PATHS.iter().find(|p| **p == path) {
                return Some((Family::Platform, known));
            }
            let known = PROPOSERVM_PATHS.iter().find(|p| **p == path)?;
            Some((Family::ProposerVm, known))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_listener_routes_its_own_rpc_paths() {
        use Surface::{Admin as A, Public as P};
        let (get, post) = (Method::GET, Method::POST);
        let table = [
            (P, &post, "/ext/info", Rpc::Call(Family::Info, INFO_PATH)),
            (P, &post, "/ext/P", Rpc::Call(Family::Platform, "/ext/P")),
            (P, &get, "/ext/bc/P", Rpc::NotPost),
            (P, &post, "/ext/bc/P/", Rpc::No),
            (
                P,
                &post,
                "/ext/health",
                Rpc::Call(Family::Health, HEALTH_PATH),
            ),
            (P, &get, "/ext/health", Rpc::No),
            (
                A,
                &post,
                "/ext/health",
                Rpc::Call(Family::Health, HEALTH_PATH),
            ),
            (A, &post, "/ext/info", Rpc::No),
            (A, &get, "/ext/bc/P", Rpc::No),
            (P, &post, "/metrics", Rpc::No),
        ];
        for (surface, method, path, want) in table {
            assert_eq!(
                rpc_route(surface, method, path),
                want,
                "{surface:?} {method} {path}"
            );
            assert_eq!(is_rpc(surface, method, path), matches!(want, Rpc::Call(..)));
        }
    }
}
