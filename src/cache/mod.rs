//! The answer cache: immutable and short-lived answers served from memory (moka), identical
//! concurrent misses collapsed into one upstream call, and never an answer a node would no longer
//! give.
//!
//! * [`key`]: canonical keys (requests a node reads the same way share an entry).
//! * [`rules`]: which answers may be kept and for how long (the registry's cache class plus the
//!   conditions on the answer itself).
//! * [`CacheLayer`]: the tower layer. It sits under the policy layer (refused calls never look)
//!   and over the pool. Head-class keys carry the pool's best height, so when the height advances
//!   every head answer from before it is unreachable at once; a head answer is only stored when
//!   the node that gave it had reached that height.
//!
//! Memory is bounded in bytes: a weigher charges each entry its key, its answer and a fixed
//! overhead against `[cache] max_bytes`.

pub mod key;
pub mod rules;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use moka::future::Cache as Moka;
use moka::notification::RemovalCause;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use serde::Deserialize;
use tower::{Layer, Service, ServiceExt};

use crate::call::{Answer, AnswerKind, CacheStatus, RpcCall};
use crate::error::ProxyError;
use crate::methods::CacheClass;
use crate::metrics::Metrics;
use crate::upstream::Pool;
use rules::Ttls;

/// `[cache]` in the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// `false` turns the layer off (every answer `X-Cache: BYPASS`).
    pub enabled: bool,
    /// Bound on the bytes of keys and answers held (plus a fixed per-entry overhead).
    pub max_bytes: u64,
    /// Cap on head-class entries (they also end when the best height moves).
    #[serde(with = "humantime_serde")]
    pub head_ttl: Duration,
    /// Lifetime of network-class entries.
    #[serde(with = "humantime_serde")]
    pub network_ttl: Duration,
    /// Lifetime of volatile-class entries.
    #[serde(with = "humantime_serde")]
    pub volatile_ttl: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_bytes: 256 * 1024 * 1024,
            head_ttl: Duration::from_secs(2),
            network_ttl: Duration::from_secs(600),
            volatile_ttl: Duration::from_secs(1),
        }
    }
}

/// What the weigher charges each entry on top of its key and answer (moka's node, the Arc'd
/// key, the value struct).
const ENTRY_OVERHEAD: usize = 160;

/// A stored answer.
#[derive(Clone)]
struct Entry {
    kind: AnswerKind,
    payload: Bytes,
    /// `None` = until evicted.
    ttl: Option<Duration>,
}

struct ClassExpiry;

impl moka::Expiry<Arc<str>, Entry> for ClassExpiry {
    fn expire_after_create(
        &self,
        _key: &Arc<str>,
        value: &Entry,
        _now: Instant,
    ) -> Option<Duration> {
        value.ttl
    }
}

/// Why the single upstream call of a miss produced nothing to store (shared with its waiters).
enum NotStored {
    /// A valid answer that must not be kept (an error, a `Processing` status...).
    Answer(Answer),
    /// The upstream call failed.
    Failed(ProxyError),
}

struct CacheMetrics {
    /// `snowgate_cache_requests_total`, resolved per method and result.
    lookups: crate::metrics::CounterTable,
    coalesced: IntCounter,
    evictions: IntCounter,
    entries: IntGauge,
    bytes: IntGauge,
}

impl CacheMetrics {
    fn new(metrics: &Metrics, methods: usize) -> CacheMetrics {
        let lookups = IntCounterVec::new(
            Opts::new(
                "snowgate_cache_requests_total",
                "Cache lookups by method, class and result",
            ),
            &["method", "class", "result"],
        )
        .expect("static metric definition is valid");
        let coalesced = IntCounter::new(
            "snowgate_cache_coalesced_total",
            "Requests that waited for an identical in-flight miss instead of calling upstream",
        )
        .expect("static metric definition is valid");
        let evictions = IntCounter::new(
            "snowgate_cache_evictions_total",
            "Entries evicted to stay within max_bytes",
        )
        .expect("static metric definition is valid");
        let entries = IntGauge::new("snowgate_cache_entries", "Entries in the cache")
            .expect("static metric definition is valid");
        let bytes = IntGauge::new("snowgate_cache_bytes", "Weighted bytes held by the cache")
            .expect("static metric definition is valid");
        let registry = metrics.registry();
        for c in [
            Box::new(lookups.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(coalesced.clone()),
            Box::new(evictions.clone()),
            Box::new(entries.clone()),
            Box::new(bytes.clone()),
        ] {
            // A second gateway in the same process registers in its own registry: never fails.
            let _ = registry.register(c);
        }
        CacheMetrics {
            lookups: crate::metrics::CounterTable::new(
                lookups,
                methods,
                &["hit", "miss", "bypass"],
            ),
            coalesced,
            evictions,
            entries,
            bytes,
        }
    }
}

/// The shared cache state (one per gateway).
pub struct AnswerCache {
    store: Moka<Arc<str>, Entry>,
    ttls: Ttls,
    pool: Arc<Pool>,
    metrics: CacheMetrics,
}

impl AnswerCache {
    /// Builds the store; `pool` tells the best height (head-class keys) and node heights.
    /// `methods` is the size of the method registry (for the per-method counters).
    pub fn new(
        config: &CacheConfig,
        pool: Arc<Pool>,
        metrics: &Metrics,
        methods: usize,
    ) -> Arc<AnswerCache> {
        let metrics = CacheMetrics::new(metrics, methods);
        let evictions = metrics.evictions.clone();
        let store = Moka::builder()
            .max_capacity(config.max_bytes)
            .weigher(|k: &Arc<str>, v: &Entry| -> u32 {
                u32::try_from(k.len() + v.payload.len() + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
            })
            .expire_after(ClassExpiry)
            .eviction_listener(move |_k, _v, cause| {
                if cause == RemovalCause::Size {
                    evictions.inc();
                }
            })
            .support_invalidation_closures()
            .build();
        Arc::new(AnswerCache {
            store,
            ttls: Ttls {
                head: config.head_ttl,
                network: config.network_ttl,
                volatile: config.volatile_ttl,
            },
            pool,
            metrics,
        })
    }

    /// Drops every entry, or those of one method. Returns immediately; removal is done when the
    /// next maintenance runs (forced here, so a purge is visible at once).
    pub async fn purge(&self, method: Option<&str>) -> Result<(), String> {
        match method {
            None => self.store.invalidate_all(),
            Some(m) => {
                let prefix: Arc<str> = format!("{m}\u{0}").into();
                self.store
                    .invalidate_entries_if(move |k, _| k.starts_with(&*prefix))
                    .map_err(|e| e.to_string())?;
            }
        }
        self.store.run_pending_tasks().await;
        self.refresh_gauges();
        Ok(())
    }

    /// Entries and weighted bytes, after pending maintenance.
    pub async fn usage(&self) -> (u64, u64) {
        self.store.run_pending_tasks().await;
        self.refresh_gauges();
        (self.store.entry_count(), self.store.weighted_size())
    }

    fn refresh_gauges(&self) {
        self.metrics.entries.set(self.store.entry_count() as i64);
        self.metrics.bytes.set(self.store.weighted_size() as i64);
    }

    /// The key of a call: method, NUL, canonical params, and for head-class calls the best
    /// height they belong to.
    fn key(&self, call: &RpcCall, head: Option<u64>) -> String {
        use std::fmt::Write as _;
        let mut k = String::with_capacity(call.spec.name.len() + 96);
        k.push_str(&call.spec.name);
        k.push('\u{0}');
        key::canonical_params_into(&mut k, call.params.as_ref());
        if let Some(h) = head {
            let _ = write!(k, "\u{0}@{h}");
        }
        k
    }

    /// Would this call be answered from the cache right now? (For the rate limiter's price.)
    pub fn would_hit(&self, call: &RpcCall) -> bool {
        if call.caller.pin.is_some() || !rules::cacheable_request(call) {
            return false;
        }
        let head = (call.spec.cache == CacheClass::Head).then(|| self.pool.best_height());
        self.store.contains_key(self.key(call, head).as_str())
    }

    fn count(&self, call: &RpcCall, result: &str) {
        let spec = &call.spec;
        self.metrics
            .lookups
            .inc(spec.index, &[&spec.name, class_label(spec.cache)], result);
    }
}

fn class_label(c: CacheClass) -> &'static str {
    match c {
        CacheClass::Immutable => "immutable",
        CacheClass::Head => "head",
        CacheClass::Network => "network",
        CacheClass::Volatile => "volatile",
        CacheClass::Never => "never",
    }
}

/// The cache as a layer of the stack.
#[derive(Clone)]
pub struct CacheLayer {
    cache: Arc<AnswerCache>,
}

impl CacheLayer {
    pub fn new(cache: Arc<AnswerCache>) -> CacheLayer {
        CacheLayer { cache }
    }
}

impl<S> Layer<S> for CacheLayer {
    type Service = CacheService<S>;
    fn layer(&self, inner: S) -> CacheService<S> {
        CacheService {
            inner,
            cache: self.cache.clone(),
        }
    }
}

/// The service of [`CacheLayer`].
#[derive(Clone)]
pub struct CacheService<S> {
    inner: S,
    cache: Arc<AnswerCache>,
}

impl<S> Service<RpcCall> for CacheService<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Answer;
    type Error = ProxyError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, ProxyError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: RpcCall) -> Self::Future {
        let cache = self.cache.clone();
        // Pinned calls want one node's own answer; uncacheable ones go straight through.
        if call.caller.pin.is_some() || !rules::cacheable_request(&call) {
            cache.count(&call, "bypass");
            let fut = self.inner.call(call);
            return Box::pin(async move {
                fut.await.map(|mut a| {
                    a.cache = CacheStatus::Bypass;
                    a
                })
            });
        }
        // The polled-ready instance serves this call; a fresh clone takes its place.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let head = (call.spec.cache == CacheClass::Head).then(|| cache.pool.best_height());
            if let Some(h) = head {
                // Ask a node that has reached the height the entry will belong to.
                call.route_min_height = Some(h);
            }
            let key = cache.key(&call, head);
            if let Some(e) = cache.store.get(key.as_str()).await {
                cache.count(&call, "hit");
                return Ok(Answer {
                    kind: e.kind,
                    payload: e.payload,
                    upstream: None,
                    upstream_height: None,
                    cache: CacheStatus::Hit,
                });
            }
            cache.count(&call, "miss");
            let ran = Arc::new(AtomicBool::new(false));
            let init = {
                let ran = ran.clone();
                let cache = cache.clone();
                async move {
                    ran.store(true, Ordering::Relaxed);
                    let answer = inner
                        .oneshot(call.clone())
                        .await
                        .map_err(NotStored::Failed)?;
                    let ttl = rules::lifetime(&call, answer.kind, &answer.payload, &cache.ttls);
                    let fresh_enough = match head {
                        Some(h) => answer.upstream_height.is_some_and(|uh| uh >= h),
                        None => true,
                    };
                    match ttl {
                        Some(ttl) if fresh_enough => Ok(Entry {
                            kind: answer.kind,
                            payload: answer.payload,
                            ttl,
                        }),
                        _ => Err(NotStored::Answer(answer)),
                    }
                }
            };
            let result = cache
                .store
                .entry(Arc::<str>::from(key))
                .or_try_insert_with(init)
                .await;
            if !ran.load(Ordering::Relaxed) {
                cache.metrics.coalesced.inc();
            }
            cache.refresh_gauges();
            match result {
                Ok(entry) => {
                    let e = entry.into_value();
                    Ok(Answer {
                        kind: e.kind,
                        payload: e.payload,
                        upstream: None,
                        upstream_height: None,
                        cache: CacheStatus::Miss,
                    })
                }
                Err(shared) => match &*shared {
                    NotStored::Answer(a) => {
                        let mut a = a.clone();
                        a.cache = CacheStatus::Miss;
                        Ok(a)
                    }
                    NotStored::Failed(e) => Err(e.clone()),
                },
            }
        })
    }
}
