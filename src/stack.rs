//! The one place the layers of the request path are composed, outermost first, each with why it
//! sits where it does. Config tunes a layer or turns it off (`option_layer`); it never reorders
//! them.
//!
//! Per HTTP request on the public port ([`Stack::http`], built for each request from the stack
//! in force when it arrives, so that a reload reaches kept-alive connections; building it is
//! clones of `Arc`s):
//!
//! | | layer | why here |
//! |---|---|---|
//! | 1 | request id | outermost: every answer and log line carries `x-request-id`, a 404's too |
//! | 2 | trace | one span per request, carrying that id |
//! | 3 | CORS | a node's rules; a preflight is answered before routing, as a node does |
//! | 4 | drain | over everything that answers: while draining, every answer closes its connection |
//! | 5 | compression | gzip for clients that ask, over everything the router answers |
//! | 6 | router | 404/405/415 as a node words them, the body within its limits, the operator's endpoints |
//! | 7 | decode | the envelope (or a batch) into calls; refusals answered and charged here |
//!
//! On the admin listener (`[admin] listen`) only 1, 2, 6 and 7: the operator's endpoints and the
//! health API, and nothing of the node's open CORS, of the drain meant for load balancers or of
//! the compression meant for clients (linkerd's admin listener is as small), so that nothing
//! added to the public port is exposed there by accident.
//!
//! Per JSON-RPC call ([`rpc`], built once per gateway and shared):
//!
//! | | layer | why here |
//! |---|---|---|
//! | 8 | policy | refused calls (access, `max_depth`) stop before they cost quota or touch a node |
//! | 9 | rate limit | after policy (decode charges refusals at `refused_cost`), before the cache (hits are charged, at their own price) |
//! | 10 | cache | hits never reach the pool; identical misses share one node call |
//! | 11 | forward | the pool: a healthy node, its own id, its answer checked; or the health API, which the gateway answers itself |
//!
//! The per-call part is one concrete type ([`RpcService`]): cloned for each call (`Arc`
//! increments), nothing boxed on a hit's way; the rate limiter boxes its future only while it
//! waits on Redis, and the forwarding service its own (a miss). Boxing the whole part cost an
//! allocation for the clone and one for its future per call (issue 29, `benches/README.md`).
//! Of the HTTP layers, the router boxes its future (it holds the body's room while the call runs
//! below) and so does decode (an `async fn` over a batch); the others are concrete types.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower::util::Either;
use tower::{Service, ServiceBuilder};

use crate::body::Chunks;
use crate::cache::{AnswerCache, CacheLayer, CacheService};
use crate::call::{call_now, Answer, BestHeight, Called, HitProbe, RpcCall, Surcharge};
use crate::error::{Counted, ProxyError};
use crate::health::HealthApi;
use crate::http::compress::{Body, CompressLayer};
use crate::http::cors::CorsLayer;
use crate::http::decode::{DecodeLayer, Decoding};
use crate::http::drain::DrainLayer;
use crate::http::request_id::RequestIdLayer;
use crate::http::router::{RouterLayer, Routes};
use crate::http::trace::TraceLayer;
use crate::http::{ConnInfo, Surface};
use crate::metrics::Metrics;
use crate::policy::PolicyLayer;
use crate::ratelimit::{Quota, RateLimit, RateLimitLayer};
use crate::upstream::Pool;

/// Below the rate limit: the cache over the forwarding service, or the forwarding service alone.
type Cached = Either<CacheService<Forward>, Forward>;

/// The JSON-RPC part of the stack, as [`rpc`] composes it (`Either`: a layer config leaves out).
/// A concrete type, not a boxed one: cloning it for a call is a few `Arc` increments (a boxed
/// stack's clone is an allocation, and its boxed future another, per call), and a hit's future
/// is never boxed on its way up (the cache answers it with a ready future).
pub type RpcService = crate::policy::Policy<Either<RateLimit<Cached>, Cached>>;

/// Composes the per-call layers over the pool and the health API; `cache` is `None` when
/// disabled, and the rate limit layer is left out when `quota` has no limiter.
pub fn rpc(
    pool: Arc<Pool>,
    health: Arc<HealthApi>,
    cache: Option<Arc<AnswerCache>>,
    quota: &Quota,
) -> RpcService {
    let hits = cache.clone();
    ServiceBuilder::new()
        // 8. Refuse before anything costs: a refused call never reaches an upstream. Access, and
        //    how far back a height may be (`max_depth`, counted from the pool's best height).
        .layer(PolicyLayer::new(pool.clone() as Arc<dyn BestHeight>))
        // 9. Charge the client's quota: a hit is charged at its own price, so the limiter asks
        //    the cache for its decision (bypass, or the key), which the call carries on to it.
        .option_layer(RateLimitLayer::new(
            quota,
            hits.map(|c| c as Arc<dyn HitProbe>),
        ))
        // 10. Hits are answered here and never reach the pool; misses are coalesced.
        .option_layer(cache.map(CacheLayer::new))
        // 11. A node, or the gateway itself; what a call makes the nodes do beyond its own
        //     attempts (a hedge, the cache's seconding) is charged to its caller's quota here.
        .service(Forward {
            pool,
            health,
            quota: quota.clone(),
        })
}

/// The per-call stack behind an `Arc`, as the HTTP layers hold it: they clone it with every
/// request (an increment); the stack itself is cloned once per call, when a call is made.
#[derive(Clone)]
pub struct SharedRpc(Arc<RpcService>);

impl SharedRpc {
    pub fn new(rpc: RpcService) -> SharedRpc {
        SharedRpc(Arc::new(rpc))
    }
}

/// A call's future: the stack's own, or (never, as the layers are built) the call waiting for a
/// stack that was not ready at once (see [`call_now`]).
pub type RpcFuture = Called<RpcService, RpcCall>;

impl Service<RpcCall> for SharedRpc {
    type Response = Answer;
    type Error = ProxyError;
    type Future = RpcFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        // Each call gets its own clone, made ready in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: RpcCall) -> RpcFuture {
        call_now(RpcService::clone(&self.0), call)
    }
}

/// The innermost service: hands the call to the pool, or answers the health API itself.
#[derive(Clone)]
pub struct Forward {
    pool: Arc<Pool>,
    health: Arc<HealthApi>,
    /// Charges the caller for hedges and secondings (`Surcharge`).
    quota: Quota,
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
        if call.spec.family.is_local() {
            return Box::pin(std::future::ready(Ok(self.health.answer(&call))));
        }
        // The cache's seconding of one node's word is a node request the caller's miss caused:
        // charged to it before it is sent, and not made over its quota.
        let seconding = call.lookup.as_ref().is_some_and(|l| l.second_to.is_some());
        if seconding && !self.quota.surcharge(&call) {
            let refused = Err(ProxyError::RateLimited {
                retry_after_secs: 1,
            });
            return Box::pin(std::future::ready(refused));
        }
        let (pool, quota) = (self.pool.clone(), self.quota.clone());
        Box::pin(async move { pool.forward(&call, &quota).await })
    }
}

/// The cache keys head-class answers by the pool's best height, and reads it through this.
impl BestHeight for Pool {
    fn best_height(&self) -> u64 {
        Pool::best_height(self)
    }

    fn release(&self) -> Option<String> {
        Pool::release(self)
    }
}

/// Everything the layers share between connections.
pub struct Stack {
    pub(crate) request_ids: RequestIdLayer,
    pub(crate) draining: Arc<AtomicBool>,
    pub(crate) routes: Arc<Routes>,
    pub(crate) decoding: Arc<Decoding>,
    pub(crate) rpc: SharedRpc,
    /// The connection limits in force, read by the server for each new connection.
    pub(crate) limits: crate::config::LimitsConfig,
    /// Proxies exempt from `max_connections_per_ip` (`rate_limit.trusted_proxies`).
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    /// Request durations and the access log (per generation: its rows follow the registry).
    pub(crate) trace: TraceLayer,
}

impl Stack {
    /// The HTTP service of one connection, `conn`: the whole request path of its listener,
    /// outermost first (see the module doc).
    pub fn http<B>(
        &self,
        conn: Arc<ConnInfo>,
    ) -> impl Service<
        Request<B>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
    > + Clone
           + Send
           + 'static
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Send,
    {
        let (peer, surface) = (conn.peer.ip(), conn.surface);
        // 6 and 7, both listeners': their routes are the router's, by the connection's listener.
        let calls = ServiceBuilder::new()
            // 6. Per connection: its body room; snowgate's endpoints end here.
            .layer(RouterLayer::new(self.routes.clone(), conn))
            // 7. JSON-RPC bodies into calls, for the per-call layers 8 to 11.
            .layer(DecodeLayer::new(self.decoding.clone()))
            .service(self.rpc.clone());
        let inner = match surface {
            Surface::Public => Either::Left(
                ServiceBuilder::new()
                    // 3. Before routing: a node answers preflights before its router.
                    .layer(CorsLayer::new())
                    // 4. Over everything that makes an answer, so that each one closes while
                    //    draining.
                    .layer(DrainLayer::new(self.draining.clone()))
                    // 5. Over the router's answers, under the layers that only add headers.
                    .layer(CompressLayer::new())
                    .service(calls),
            ),
            Surface::Admin => Either::Right(
                ServiceBuilder::new()
                    .map_response(|r: Response<Chunks>| r.map(Body::from))
                    .service(calls),
            ),
        };
        ServiceBuilder::new()
            // 1. Outermost, so that every answer and log line of the request has the id.
            .layer(self.request_ids.clone())
            // 2. Inside the id, whose value the span records.
            .layer(self.trace.on(peer, surface))
            .service(inner)
    }

    /// The gateway's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.routes.admin.metrics
    }

    /// Counts a refusal made before a request was read (a connection over a limit).
    pub(crate) fn count_rejection(&self, e: &ProxyError) {
        if let (Counted::Http, reason) = e.counted() {
            self.metrics()
                .http_rejections
                .with_label_values(&[reason])
                .inc();
        }
    }
}
