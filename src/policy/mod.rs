//! Who may call what. Node-specific methods (`info.getNodeID`, `info.getNodeIP`, `info.getVMs`)
//! and keystore methods (`platform.exportKey`, `platform.listAddresses`) are refused to public
//! callers; callers presenting `Authorization: Bearer <key>` with a key from `[admin] api_keys`
//! may call them, and may pin a call to one upstream with `X-Snowgate-Upstream`. [`crate::keys`]
//! parses that header (the scheme in any case) and compares keys in constant time, for the rate-limit
//! keys too.
//!
//! The same layer refuses a call that reaches further back than its method's
//! `[methods."NAME"] max_depth` allows ([`depth`]): a rule of what a caller may ask, like access,
//! and refused the same way, at the same place, at the same price.
//!
//! [`PolicyLayer`] is the first per-call layer, right under decoding, before anything that costs quota or touches a
//! node, so a refused call never reaches an upstream whatever form it came in.

pub mod depth;

use std::future::{ready, Ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use tower::{Layer, Service};

use crate::call::{Answer, BestHeight, RpcCall};
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

    /// Are there admin keys at all? (Without any, no request's `Authorization` is looked at.)
    pub fn any(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Does an `Authorization` header value carry one of the keys?
    pub fn authorizes(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(keys::bearer)
            .is_some_and(|token| self.keys.contains(token))
    }
}

/// Refuses calls the caller may not make (see [`check`]) and calls deeper than their method's
/// `max_depth` below `best`, the pool's best height ([`depth::check`]).
#[derive(Clone)]
pub struct PolicyLayer {
    best: Arc<dyn BestHeight>,
}

impl PolicyLayer {
    /// The layer, reading the tip from `best` (the pool).
    pub fn new(best: Arc<dyn BestHeight>) -> PolicyLayer {
        PolicyLayer { best }
    }
}

impl<S> Layer<S> for PolicyLayer {
    type Service = Policy<S>;
    fn layer(&self, inner: S) -> Policy<S> {
        Policy {
            inner,
            best: self.best.clone(),
        }
    }
}

/// The service of [`PolicyLayer`].
#[derive(Clone)]
pub struct Policy<S> {
    inner: S,
    best: Arc<dyn BestHeight>,
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
        match check(&call).and_then(|()| depth::check(&call, &*self.best)) {
            Ok(()) => Either::Right(self.inner.call(call)),
            Err(e) => Either::Left(ready(Err(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{Access, MethodOverride, Registry};
    use std::collections::BTreeMap;
    use tower::ServiceExt;

    fn registry_with_disabled(method: &str) -> Registry {
        let overrides: BTreeMap<String, MethodOverride> = [(
            method.to_string(),
            MethodOverride {
                access: Some(Access::Disabled),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect();
        Registry::with_overrides(&overrides)
    }

    #[test]
    fn public_methods_are_open_to_all_and_the_rest_to_admins_only() {
        let r = Registry::builtin();
        for admin in [false, true] {
            let public = RpcCall::for_test(&r, "platform.getHeight", "{}", admin);
            assert_eq!(check(&public), Ok(()));
        }
        for method in ["info.getNodeID", "info.getNodeIP", "platform.listAddresses"] {
            let call = RpcCall::for_test(&r, method, "{}", false);
            match check(&call) {
                Err(ProxyError::Refused { method: m, reason }) => {
                    assert_eq!(m, method);
                    assert!(reason.contains("admin key"), "{reason}");
                }
                other => panic!("{method}: {other:?}"),
            }
            assert_eq!(check(&RpcCall::for_test(&r, method, "{}", true)), Ok(()));
        }
    }

    #[test]
    fn a_disabled_method_is_refused_even_to_admins() {
        let r = registry_with_disabled("platform.getHeight");
        for admin in [false, true] {
            let call = RpcCall::for_test(&r, "platform.getHeight", "{}", admin);
            assert_eq!(
                check(&call),
                Err(ProxyError::Refused {
                    method: "platform.getHeight".into(),
                    reason: "the method is disabled on this gateway",
                })
            );
        }
    }

    /// A pool whose height is not known yet.
    struct NoTip;

    impl crate::call::BestHeight for NoTip {
        fn best_height(&self) -> u64 {
            0
        }
        fn release(&self) -> Option<String> {
            None
        }
    }

    #[tokio::test]
    async fn the_layer_never_calls_inner_for_a_refused_call() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = calls.clone();
        let inner = tower::service_fn(move |_call: RpcCall| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async { Err::<Answer, _>(ProxyError::NoHealthyUpstream) }
        });
        let policy = PolicyLayer::new(std::sync::Arc::new(NoTip)).layer(inner);
        let r = Registry::builtin();
        let refused = policy
            .clone()
            .oneshot(RpcCall::for_test(&r, "info.getNodeID", "{}", false))
            .await;
        assert!(matches!(refused, Err(ProxyError::Refused { .. })));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 0);
        let passed = policy
            .oneshot(RpcCall::for_test(&r, "info.getNodeID", "{}", true))
            .await;
        assert_eq!(passed.err(), Some(ProxyError::NoHealthyUpstream));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

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
