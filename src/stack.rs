//! The one place the layers of the request path are composed, outermost first. Config tunes or
//! disables a layer; it never reorders them.
//!
//! HTTP (tower-http, around the front):
//! 1. request id: every answer and every log line of a request carries `x-request-id`;
//! 2. trace: one span per request, so a log line can be tied to its request;
//! 3. the front ([`crate::front`]): routes, envelope parsing, registry lookup, answer writing.
//!
//! JSON-RPC (around each call):
//! 4. policy: refused calls stop here, before they cost quota or touch a node;
//! 5. rate limit: after policy so refused calls cost nothing; before the cache so hits count;
//! 6. cache: hits never reach the pool;
//! 7. forward: the upstream pool.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use crate::cache::{AnswerCache, CacheLayer};
use crate::call::{Answer, RpcCall};
use crate::error::ProxyError;
use crate::policy::PolicyLayer;
use crate::ratelimit::{Limiter, RateLimitLayer};
use crate::upstream::Pool;

/// The JSON-RPC part of the stack, type-erased.
pub type RpcService = BoxCloneSyncService<RpcCall, Answer, ProxyError>;

/// Composes the JSON-RPC layers over the pool; `cache` and `limiter` are `None` when disabled.
pub fn rpc_stack(
    pool: Arc<Pool>,
    cache: Option<Arc<AnswerCache>>,
    limiter: Option<Arc<Limiter>>,
) -> RpcService {
    let service = ServiceBuilder::new()
        // Refuse before anything costs: a refused call never reaches an upstream.
        .layer(PolicyLayer)
        // Charge the client's quota: after policy (refusals are free), before the cache (hits
        // are charged, at their own price).
        .option_layer(limiter.map(|l| RateLimitLayer::new(l, cache.clone())))
        // Hits are answered here and never reach the pool; misses are coalesced.
        .option_layer(cache.map(CacheLayer::new))
        .service(Forward { pool });
    BoxCloneSyncService::new(service)
}

/// The innermost service: hands the call to the pool.
#[derive(Clone)]
pub struct Forward {
    pool: Arc<Pool>,
}

impl Service<RpcCall> for Forward {
    type Response = Answer;
    type Error = ProxyError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, ProxyError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        // The pool never applies back-pressure here: it refuses per call instead.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: RpcCall) -> Self::Future {
        let pool = self.pool.clone();
        Box::pin(async move { pool.forward(&call).await })
    }
}
