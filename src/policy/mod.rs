//! Who may call what. Node-specific methods (`info.getNodeID`, `info.getNodeIP`, `info.getVMs`)
//! and keystore methods (`platform.exportKey`, `platform.listAddresses`) are refused to public
//! callers; callers presenting `Authorization: Bearer <key>` with a key from `[admin] api_keys`
//! may call them, and may pin a call to one upstream with `X-Snowgate-Upstream`. [`crate::keys`]
//! parses that header (the scheme in any case) and compares keys in constant time, for the rate-limit
//! keys too.
//!
//! [`PolicyLayer`] is the first per-call layer, right under decoding, before anything that costs quota or touches a
//! node, so a refused call never reaches an upstream whatever form it came in.

use std::future::{ready, Ready};
use std::task::{Context, Poll};

use futures_util::future::Either;
use tower::{Layer, Service};

use crate::call::{Answer, RpcCall};
use crate::error::ProxyError;
use crate::keys::{self, KeySet};
use crate::methods::Access;

/// The pure rule: may this caller make this call?
pub fn check(call: &RpcCall) -> Result<(), ProxyError> {
    let access = call.spec.access;
    let allowed = match access {
        Access::Public => true,
        Access::NodeSpecific | Access::Keystore => call.caller.admin,
        Access::Disabled => false,
    };
    if allowed {
        return Ok(());
    }
    Err(ProxyError::Refused {
        method: call.spec.name.clone(),
        reason: access.refusal().unwrap_or("not allowed"),
    })
}

/// The admin keys (`[admin] api_keys`), presented as `Authorization: Bearer <key>` and compared in
/// constant time ([`keys`]).
#[derive(Clone, Default)]
pub struct AdminKeys {
    keys: KeySet,
}

impl std::fmt::Debug for AdminKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminKeys([{} redacted])", self.keys.len())
    }
}

impl AdminKeys {
    /// The admin keys of the config.
    pub fn new(keys: &[String]) -> AdminKeys {
        AdminKeys {
            keys: KeySet::new(keys.iter().map(|k| k.as_bytes())),
        }
    }

    /// Does an `Authorization` header value carry one of the keys?
    pub fn authorizes(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(keys::bearer)
            .is_some_and(|token| self.keys.contains(token))
    }
}

/// Refuses calls the caller may not make (see [`check`]).
#[derive(Debug, Clone, Default)]
pub struct PolicyLayer;

impl<S> Layer<S> for PolicyLayer {
    type Service = Policy<S>;
    fn layer(&self, inner: S) -> Policy<S> {
        Policy { inner }
    }
}

/// The service of [`PolicyLayer`].
#[derive(Debug, Clone)]
pub struct Policy<S> {
    inner: S,
}

impl<S> Service<RpcCall> for Policy<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError>,
{
    type Response = Answer;
    type Error = ProxyError;
    type Future = Either<Ready<Result<Answer, ProxyError>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: RpcCall) -> Self::Future {
        match check(&call) {
            Ok(()) => Either::Right(self.inner.call(call)),
            Err(e) => Either::Left(ready(Err(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_keys() {
        let keys = AdminKeys::new(&["k-0123456789abcdef".to_string()]);
        assert!(keys.authorizes(Some(b"Bearer k-0123456789abcdef")));
        assert!(keys.authorizes(Some(b"bearer  k-0123456789abcdef")));
        assert!(!keys.authorizes(Some(b"Basic k-0123456789abcdef")));
        assert!(!keys.authorizes(Some(b"Bearer k-0123456789abcdeg")));
        assert!(!keys.authorizes(Some(b"k-0123456789abcdef")));
        assert!(!keys.authorizes(None));
        assert!(!AdminKeys::default().authorizes(Some(b"Bearer ")));
    }
}
