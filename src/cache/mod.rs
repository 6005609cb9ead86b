//! The answer cache: immutable and short-lived answers served from memory (moka), identical
//! concurrent misses collapsed into one upstream call (run in its own task, so it completes for
//! the waiters when the client that started it goes away), and never an answer a node would no
//! longer give.
//!
//! * [`key`]: canonical keys (requests a node reads the same way share an entry).
//! * [`rules`]: which answers may be kept and for how long (the registry's cache class plus the
//!   conditions on the answer itself).
//! * [`CacheLayer`]: the tower layer. It sits under the policy layer (refused calls never look)
//!   and over the pool. Head-class keys carry the pool's best height, so when the height advances
//!   every head answer from before it is unreachable at once; a head answer is only stored when
//!   the node that gave it had reached that height.
//!
//! With a fleet's `[redis]` ([`shared`]), a memory miss of an immutable or head-class call looks in
//! Redis before it asks a node (inside the coalesced miss, so identical misses make one lookup),
//! and what a node answers is also written there, in the background: under the pool's settled
//! network (`crate::shared::network`), and not at all before it is settled.
//!
//! What a node answers is kept only when the pool vouches for it (`[cache] verify`): the pool
//! never returns an answer that contradicts its call, and marks one node's word the setting wants
//! seconded ([`Trust::Unseconded`]). Such an answer is the client's at once but not kept: the
//! cache asks another node the same call in the background (`second`, one at a time per key)
//! and keeps the answer, in memory and in Redis, only when both returned the same bytes. Neither
//! runs on a memory hit: it was checked when it was kept. A Redis hit is another instance's word:
//! it is held against its call again, and against the level it was kept at (see [`shared`]),
//! before it is served or copied into memory.
//!
//! Memory is bounded in bytes: a weigher charges each entry its key, its answer and a fixed
//! overhead against `[cache] max_bytes`.
//!
//! Layout, for a hit that stays cheap however many entries the cache holds (every pointer a hit
//! follows into a large cache is a cache-line miss to main memory): moka's key is a 64-bit keyed
//! hash of the canonical key, held inline, and the canonical key itself sits in the same
//! allocation as the answer, right before it, where it is compared on every hit. Two keys that
//! share a hash therefore never share an answer; the later one is simply not cached.
//!
//! Immutable entries (no lifetime, the bulk of a large cache) are also listed in a read index, a
//! sharded hash map holding each entry inline: a hit there costs about three trips to memory
//! where moka's own lookup chain (bucket, key, entry, entry info, access-order node) costs six or
//! more, and on a cache of a million entries that is most of a hit's extra cost. moka stays the
//! cache: it decides what is admitted and evicted within `max_bytes`, and its eviction listener
//! takes an entry out of the index; one index hit in [`RECORD_EVERY`] is also read through moka so
//! its recency and frequency still see the hot entries. Entries with a lifetime are never indexed:
//! their expiry is moka's to check on every read.
//!
//! The index is hand-written beside moka for a measured need, and measured again in issue 13 (the
//! same commit, 0e72289, with nothing indexed, 2 shared cores; `LOAD_AB=<with>,<without> cargo
//! bench --bench load`, three alternating pairs, twice): CPU per hit with the index over without
//! it, 1,000,000 keys 0.69, 0.90 and 0.88 in the quieter run (13.2 against 16.4 µs; 0.85 over all
//! six pairs); 100 keys 0.99, since everything then fits in the CPU's caches. It costs about 2 MiB
//! more resident on a filled 64 MiB cache (96 against 94 MiB). It saves more than the 10 % asked
//! of it, so it stays (the runs are in `benches/README.md`).

pub mod key;
pub mod rules;
mod second;
pub mod shared;

use second::second;
pub use second::{CLIENT_SECONDINGS, MAX_SECONDINGS};

use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use futures_util::future::{self, Either, FutureExt, Ready};
use moka::future::Cache as Moka;
use moka::notification::RemovalCause;
use prometheus::{IntCounter, IntCounterVec, IntGauge};
use tower::{Layer, Service, ServiceExt};
use tracing::Instrument;

use crate::call::{
    Answer, AnswerKind, BestHeight, CacheKey, CacheStatus, HitProbe, Lookup, RpcCall, Trust,
};
use crate::config::{CacheConfig, Verify};
use crate::error::ProxyError;
use crate::methods::CacheClass;
use crate::metrics::Metrics;
use crate::verify::{self, Verdict};
use rules::Ttls;

/// What the weigher charges each entry on top of its key and answer (moka's node, the Arc'd
/// key, the value struct).
const ENTRY_OVERHEAD: usize = 160;

/// What an immutable entry costs on top of that in the read index: its slot (fingerprint and
/// entry inline, 64 bytes, and a control byte) over the table's spare capacity, which runs from
/// an eighth to over half of the slots (measured: 136 bytes an entry at 1,000,000 entries).
const INDEX_OVERHEAD: usize = 144;

/// One read index hit in this many is also read through moka (recency and frequency).
pub const RECORD_EVERY: u64 = 16;

/// A stored answer: the canonical key and the answer's bytes in one allocation (`data`), with what
/// moka keeps inline beside it.
#[derive(Clone)]
struct Entry {
    /// The canonical key, then the answer (the raw `result` or `error`).
    data: Arc<[u8]>,
    key_len: usize,
    kind: AnswerKind,
    /// `None` = until evicted.
    ttl: Option<Duration>,
}

impl Entry {
    fn new(key: &str, kind: AnswerKind, payload: &[u8], ttl: Option<Duration>) -> Entry {
        let mut data = Vec::with_capacity(key.len() + payload.len());
        data.extend_from_slice(key.as_bytes());
        data.extend_from_slice(payload);
        Entry {
            data: data.into(),
            key_len: key.len(),
            kind,
            ttl,
        }
    }

    /// Immutable: kept until evicted, so it may be served from the read index.
    fn indexable(&self) -> bool {
        self.ttl.is_none()
    }

    fn is_for(&self, key: &str) -> bool {
        self.data.get(..self.key_len) == Some(key.as_bytes())
    }

    /// The entry as an answer to a call.
    fn answer(&self, cache: CacheStatus) -> Answer {
        Answer {
            kind: self.kind,
            payload: self.payload(),
            upstream: None,
            upstream_height: None,
            cache,
            trust: Trust::Vouched,
        }
    }

    /// The answer, shared with the entry (no copy).
    fn payload(&self) -> Bytes {
        Bytes::from_owner(Tail {
            data: self.data.clone(),
            from: self.key_len,
        })
    }
}

/// The answer part of an entry's allocation, as the owner of a [`Bytes`].
struct Tail {
    data: Arc<[u8]>,
    from: usize,
}

impl AsRef<[u8]> for Tail {
    fn as_ref(&self) -> &[u8] {
        self.data.get(self.from..).unwrap_or_default()
    }
}

/// moka's key: a keyed hash of the canonical key (SipHash-1-3 with a per-process random key, so
/// callers cannot aim two keys at one slot).
type Fingerprint = u64;

/// Hands moka the fingerprint as its hash: it is already uniformly spread.
#[derive(Clone, Default)]
struct PassThrough;

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (a `u64` key hashes itself with it); this is for completeness.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct ClassExpiry;

impl moka::Expiry<Fingerprint, Entry> for ClassExpiry {
    fn expire_after_create(
        &self,
        _key: &Fingerprint,
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
    /// Rows by method index: replaced when a reload changes the registry.
    lookups: arc_swap::ArcSwap<crate::metrics::CounterTable>,
    lookups_vec: IntCounterVec,
    coalesced: IntCounter,
    evictions: IntCounter,
    entries: IntGauge,
    bytes: IntGauge,
    indexed: IntGauge,
    /// `snowgate_answer_checks_total`: the seconding of one node's word (`agreed`, ...).
    answer_checks: IntCounterVec,
}

/// The values of the `result` label of `snowgate_cache_requests_total`.
const LOOKUP_RESULTS: &[&str] = &["hit", "miss", "bypass"];

impl CacheMetrics {
    fn new(metrics: &Metrics, methods: usize) -> CacheMetrics {
        metrics.show(crate::metrics::Part::Cache);
        let lookups = metrics.cache_lookups.clone();
        CacheMetrics {
            lookups: arc_swap::ArcSwap::from_pointee(crate::metrics::CounterTable::new(
                lookups.clone(),
                methods,
                LOOKUP_RESULTS,
            )),
            lookups_vec: lookups,
            coalesced: metrics.cache_coalesced.clone(),
            evictions: metrics.cache_evictions.clone(),
            entries: metrics.cache_entries.clone(),
            bytes: metrics.cache_bytes.clone(),
            indexed: metrics.cache_indexed.clone(),
            answer_checks: metrics.answer_checks.clone(),
        }
    }
}

/// The shared cache state (one per gateway).
pub struct AnswerCache {
    store: Moka<Fingerprint, Entry, PassThrough>,
    /// Immutable entries of `store`, for the hit path (see the module doc).
    index: Arc<DashMap<Fingerprint, Entry, PassThrough>>,
    /// Hits served from the index, to read one in [`RECORD_EVERY`] through moka.
    index_hits: AtomicU64,
    /// The fingerprint's keyed hash.
    hasher: RandomState,
    ttls: Ttls,
    best: Arc<dyn BestHeight>,
    /// The fleet's Redis tier (`None` without `[redis]` or with `[cache] shared = false`).
    shared: Option<shared::SharedCache>,
    metrics: CacheMetrics,
    /// Keys whose answer another node is being asked to second ([`second`]): one at a time.
    seconding: parking_lot::Mutex<second::Secondings>,
    /// `[cache] verify` (restart-only, as the pool holds it): what a value read from the fleet's
    /// Redis must have been kept at to be served.
    verify: Verify,
}

impl AnswerCache {
    /// Builds the store; `best` tells the pool's best height (head-class keys).
    /// `methods` is the size of the method registry (for the per-method counters).
    pub fn new(
        config: &CacheConfig,
        best: Arc<dyn BestHeight>,
        shared: Option<shared::SharedCache>,
        metrics: &Metrics,
        methods: usize,
    ) -> Arc<AnswerCache> {
        let metrics = CacheMetrics::new(metrics, methods);
        let evictions = metrics.evictions.clone();
        let index = Arc::new(DashMap::with_hasher(PassThrough));
        let unindex = index.clone();
        let store = Moka::builder()
            .max_capacity(config.max_bytes)
            .weigher(|_: &Fingerprint, v: &Entry| -> u32 {
                let index = if v.indexable() { INDEX_OVERHEAD } else { 0 };
                u32::try_from(v.data.len() + ENTRY_OVERHEAD + index).unwrap_or(u32::MAX)
            })
            .expire_after(ClassExpiry)
            .eviction_listener(move |k: Arc<Fingerprint>, v: Entry, cause| {
                if cause == RemovalCause::Size {
                    evictions.inc();
                }
                // Whatever the cause (evicted, replaced, invalidated), the index follows moka.
                if v.indexable() {
                    unindex.remove_if(&*k, |_, e: &Entry| Arc::ptr_eq(&e.data, &v.data));
                }
            })
            .support_invalidation_closures()
            .build_with_hasher(PassThrough);
        Arc::new(AnswerCache {
            store,
            index,
            index_hits: AtomicU64::new(0),
            hasher: RandomState::new(),
            ttls: Ttls {
                head: config.head_ttl,
                network: config.network_ttl,
                volatile: config.volatile_ttl,
            },
            best,
            shared,
            metrics,
            seconding: Default::default(),
            verify: config.verify,
        })
    }

    /// Drops every entry, or those of the methods named (an entry's key starts with its method's
    /// name and a NUL). Removal is done when the next maintenance runs (forced here, so a purge is
    /// visible at once).
    pub async fn purge(&self, methods: Option<&[String]>) -> Result<(), PurgeError> {
        match methods {
            // moka drops invalidated entries over its next maintenance runs (in batches on a
            // large cache), telling the index as it goes; the index drops them at once.
            None => {
                self.store.invalidate_all();
                self.index.clear();
            }
            Some(names) => {
                let prefixes: Arc<[Vec<u8>]> = names
                    .iter()
                    .map(|n| [n.as_bytes(), b"\0"].concat())
                    .collect();
                let of = move |e: &Entry| {
                    let key = &e.data[..e.key_len];
                    prefixes.iter().any(|p| key.starts_with(p))
                };
                let of_store = of.clone();
                self.store.invalidate_entries_if(move |_, v| of_store(v))?;
                self.index.retain(|_, e| !of(e));
            }
        }
        self.store.run_pending_tasks().await;
        self.refresh_gauges();
        Ok(())
    }

    /// What the cache holds, after pending maintenance.
    pub async fn usage(&self) -> Usage {
        self.store.run_pending_tasks().await;
        self.refresh_gauges();
        Usage {
            entries: self.store.entry_count(),
            bytes: self.store.weighted_size(),
            indexed: self.index.len() as u64,
        }
    }

    fn refresh_gauges(&self) {
        self.metrics.entries.set(self.store.entry_count() as i64);
        self.metrics.bytes.set(self.store.weighted_size() as i64);
        self.metrics.indexed.set(self.index.len() as i64);
    }

    /// Lists an immutable entry of `store` in the read index, unless moka has already let it go
    /// (an entry refused admission is evicted at once; its listener may have run before this).
    fn index_entry(&self, fingerprint: Fingerprint, entry: &Entry) {
        if !entry.indexable() {
            return;
        }
        self.index.insert(fingerprint, entry.clone());
        if !self.store.contains_key(&fingerprint) {
            self.index
                .remove_if(&fingerprint, |_, e| Arc::ptr_eq(&e.data, &entry.data));
        }
    }

    /// The read index's entry for `key`, if any (cloned: no lock is held afterwards).
    fn indexed(&self, fingerprint: Fingerprint, key: &str) -> Option<Entry> {
        let found = self.index.get(&fingerprint).map(|e| e.value().clone());
        found.filter(|e| e.is_for(key))
    }
}

impl HitProbe for AnswerCache {
    /// Would this call be answered from the cache right now? (For the rate limiter's price.) The
    /// decision stays on the call: the cache answers by it.
    fn would_hit(&self, call: &mut RpcCall) -> bool {
        let key = self.decide(call).key.as_ref();
        key.is_some_and(|k| {
            self.index.contains_key(&k.fingerprint) || self.store.contains_key(&k.fingerprint)
        })
    }
}

impl AnswerCache {
    /// The one rule for what the cache does with a call. Pinned calls want one node's own answer
    /// and uncacheable ones go straight through; the others are keyed, a head-class call at the
    /// pool's best height now.
    fn lookup(&self, call: &RpcCall) -> Lookup {
        if call.caller.pin.is_some() || !rules::cacheable_request(call) {
            return Lookup::default();
        }
        // An answer that depends on the node's release is kept per release, and not at all
        // while the nodes that take traffic run several.
        let release = match call.spec.by_release {
            true => match self.best.release() {
                Some(release) => Some(release),
                None => return Lookup::default(),
            },
            false => None,
        };
        let height = (call.spec.cache == CacheClass::Head).then(|| self.best.best_height());
        let text = key::call_key(call, height, release.as_deref());
        let fingerprint = self.fingerprint(&text);
        Lookup {
            key: Some(CacheKey { text, fingerprint }),
            height,
            second_to: None,
        }
    }

    /// The call's lookup: the one already decided (by the rate limiter, to price it), or decided
    /// now and left on the call.
    fn decide<'c>(&self, call: &'c mut RpcCall) -> &'c mut Lookup {
        let lookup = match call.lookup.take() {
            Some(decided) => decided,
            None => self.lookup(call),
        };
        call.lookup.insert(lookup)
    }

    fn fingerprint(&self, key: &str) -> Fingerprint {
        self.hasher.hash_one(key)
    }

    fn count(&self, call: &RpcCall, result: &str) {
        let spec = &call.spec;
        self.metrics
            .lookups
            .load()
            .inc(spec.index, &[&spec.name, class_label(spec.cache)], result);
    }

    /// A reload changed the registry (methods added, removed or reclassed): the per-method
    /// counter rows, keyed by registry position, start again for the new one.
    pub fn registry_changed(&self, methods: usize) {
        let table = crate::metrics::CounterTable::new(
            self.metrics.lookups_vec.clone(),
            methods,
            LOOKUP_RESULTS,
        );
        self.metrics.lookups.store(Arc::new(table));
    }
}

/// Holds a value read from the fleet's Redis, kept at `kept`, against `call` as a node's answer is
/// held (`verify::check`, whatever `setting`: refuted when it contradicts the call), then against
/// the level `setting` requires ([`verify::serves_from_shared`]). The cost of a Redis hit: one
/// check of the answer (a SHA-256 of a block or tx in hex), none for a call the pool never judges.
fn shared_value_serves(
    call: &RpcCall,
    setting: Verify,
    payload: &[u8],
    kept: crate::call::Kept,
) -> Result<(), shared::Refusal> {
    let judged = call.spec.cache == CacheClass::Immutable;
    let verdict = match judged {
        true => verify::check(&call.spec.name, call.params.as_ref(), payload),
        false => Verdict::Unchecked,
    };
    if let Verdict::Wrong(_) = verdict {
        return Err(shared::Refusal::Refuted);
    }
    match verify::serves_from_shared(setting, judged, verdict, kept) {
        true => Ok(()),
        false => Err(shared::Refusal::Untrusted),
    }
}

/// The classes kept in the fleet's Redis too: final answers, and head answers (keyed by height).
/// Network and volatile answers are cheap to ask again and short-lived.
fn shares(c: CacheClass) -> bool {
    matches!(c, CacheClass::Immutable | CacheClass::Head)
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

/// Why a purge of some methods' answers could not be started (moka's refusal of the predicate).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PurgeError(#[from] moka::PredicateError);

/// What the cache holds ([`AnswerCache::usage`]).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub entries: u64,
    /// Weighted bytes, against `max_bytes`.
    pub bytes: u64,
    /// Immutable entries in the read index (never more than `entries`).
    pub indexed: u64,
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
    /// Bypassed calls and index hits add no boxed future of their own; the rest (moka reads,
    /// misses) run in one. (Nor do the layers above: the per-call stack is one concrete type, and
    /// the rate limiter boxes only a call waiting on Redis.)
    type Future = Either<
        Either<Bypassed<S::Future>, Ready<Result<Answer, ProxyError>>>,
        Pin<Box<dyn Future<Output = Result<Answer, ProxyError>> + Send>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: RpcCall) -> Self::Future {
        let cache = &self.cache;
        // Decided once: by the rate limiter when it priced the call, else here. The key is taken;
        // the height stays on the call, so the pool asks a node that has reached the height the
        // entry will belong to.
        let lookup = cache.decide(&mut call);
        let (key, head) = (lookup.key.take(), lookup.height);
        let Some(CacheKey {
            text: key,
            fingerprint,
        }) = key
        else {
            cache.count(&call, "bypass");
            let bypassed = self.inner.call(call).map(mark_bypassed as MarkBypassed);
            return Either::Left(Either::Left(bypassed));
        };
        if let Some(e) = cache.indexed(fingerprint, &key) {
            cache.count(&call, "hit");
            if call.caller.trace.is_on() {
                call.caller.trace.cache().cache_result("hit");
            }
            let answer = Ok(e.answer(CacheStatus::Hit));
            if cache.index_hits.fetch_add(1, Ordering::Relaxed) % RECORD_EVERY != 0 {
                return Either::Left(Either::Right(future::ready(answer)));
            }
            // Let moka see that this entry is in use.
            let cache = cache.clone();
            return Either::Right(Box::pin(async move {
                let _ = cache.store.get(&fingerprint).await;
                answer
            }));
        }
        let cache = cache.clone();
        // The polled-ready instance serves this call; a fresh clone takes its place.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        Either::Right(Box::pin(async move {
            let lookup = call.caller.trace.cache();
            let stored = cache.store.get(&fingerprint).await;
            if let Some(e) = stored.filter(|e| e.is_for(&key)) {
                cache.index_entry(fingerprint, &e);
                cache.count(&call, "hit");
                lookup.cache_result("hit");
                return Ok(e.answer(CacheStatus::Hit));
            }
            cache.count(&call, "miss");
            // The miss runs in a task of its own: moka hands the entry's one upstream call to
            // the first caller's init future, and if that future were dropped with its client
            // (a disconnect, a client timeout) a waiter would start the call again. In a task it
            // completes for every waiter whoever goes away; it is bounded by the upstream
            // timeouts like any call.
            let miss = resolve_miss(cache, inner, call, (key, fingerprint), head, lookup);
            match tokio::spawn(miss.in_current_span()).await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Only when the runtime shuts down, and then nobody reads the answer.
                Err(_) => Err(ProxyError::Overloaded),
            }
        }))
    }
}

/// A miss: one upstream call per key however many callers want it (moka's `or_try_insert_with`
/// runs the first caller's init, the others wait for its outcome), stored when the rules allow.
///
/// `lookup` is the trace's span of the lookup: it ends as a `miss` when this call asks, or as
/// `coalesced` once the answer it waited for arrives.
async fn resolve_miss<S>(
    cache: Arc<AnswerCache>,
    mut inner: S,
    call: RpcCall,
    (key, fingerprint): (String, Fingerprint),
    head: Option<u64>,
    lookup: crate::otel::Child,
) -> Result<Answer, ProxyError>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + 'static,
    S::Future: Send,
{
    let lookup = parking_lot::Mutex::new(Some(lookup));
    let ran = Arc::new(AtomicBool::new(false));
    // Set when the entry came from the fleet's Redis rather than a node (the answer is a hit).
    let from_shared = Arc::new(AtomicBool::new(false));
    // The node that answered, when this call made the node call (for the access log).
    let answered_by: Arc<parking_lot::Mutex<Option<Arc<str>>>> = Arc::default();
    let init = {
        let ran = ran.clone();
        let from_shared = from_shared.clone();
        let answered_by = answered_by.clone();
        let cache = cache.clone();
        let key = key.as_str();
        // Borrowed: both stay here for the one case where the entry found is another key's (a
        // shared fingerprint).
        let (inner, call, lookup) = (&mut inner, &call, &lookup);
        async move {
            ran.store(true, Ordering::Relaxed);
            if let Some(span) = lookup.lock().take() {
                span.cache_result("miss");
            }
            let shared = cache.shared.as_ref().filter(|_| shares(call.spec.cache));
            if let Some(tier) = shared {
                // What a node's answer meets, and the level this instance's setting requires of
                // whoever kept it: a value that fails either is not served.
                let accept = |payload: &[u8], kept| {
                    shared_value_serves(call, cache.verify, payload, kept)?;
                    rules::lifetime(call, AnswerKind::Result, payload, &cache.ttls)
                        .ok_or(shared::Refusal::Rules)
                };
                let redis = call.caller.trace.redis("cache lookup");
                let found = tier.lookup(key, accept).await;
                redis.found(found.is_some());
                drop(redis);
                if let Some((payload, ttl)) = found {
                    from_shared.store(true, Ordering::Relaxed);
                    let entry = Entry::new(key, AnswerKind::Result, &payload, ttl);
                    return Ok(entry);
                }
            }
            let answer = inner
                .oneshot(call.clone())
                .await
                .map_err(NotStored::Failed)?;
            answered_by.lock().clone_from(&answer.upstream);
            let ttl = rules::lifetime(call, answer.kind, &answer.payload, &cache.ttls);
            match ttl {
                Some(ttl) if answer.trust == Trust::Unseconded => {
                    // One node's word: the client's now, kept once another node agrees.
                    second(
                        &cache,
                        S::clone(inner),
                        call,
                        key,
                        fingerprint,
                        ttl,
                        &answer,
                    );
                    Err(NotStored::Answer(answer))
                }
                Some(ttl) if rules::fresh_enough(head, answer.upstream_height) => {
                    if let Some(tier) = shared {
                        let ttl = ttl.unwrap_or(tier.immutable_ttl);
                        tier.store(key, &answer.payload, answer.trust.kept(), ttl);
                    }
                    Ok(Entry::new(key, answer.kind, &answer.payload, ttl))
                }
                _ => Err(NotStored::Answer(answer)),
            }
        }
    };
    let result = cache
        .store
        .entry(fingerprint)
        .or_try_insert_with(init)
        .await;
    let ran = ran.load(Ordering::Relaxed);
    if !ran {
        cache.metrics.coalesced.inc();
    }
    // Still here: this call did not ask (the one that did took it as a miss), it waited.
    if let Some(span) = lookup.lock().take() {
        span.cache_result("coalesced");
    }
    if let Ok(entry) = &result {
        // Listed by the call that stored it (a waiter finds it listed already).
        if ran && entry.value().is_for(&key) {
            cache.index_entry(fingerprint, entry.value());
        }
    }
    cache.refresh_gauges();
    match result {
        Ok(entry) if !entry.value().is_for(&key) => {
            let mut answer = inner.oneshot(call).await?;
            answer.cache = CacheStatus::Miss;
            Ok(answer)
        }
        Ok(entry) if ran && from_shared.load(Ordering::Relaxed) => {
            Ok(entry.value().answer(CacheStatus::Hit))
        }
        Ok(entry) => {
            let mut answer = entry.value().answer(CacheStatus::Miss);
            // A waiter that shared another call's node call names no node: it made none.
            answer.upstream = answered_by.lock().take();
            Ok(answer)
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
}

/// The future of a call the cache lets through: the inner service's, with its answer marked.
pub type Bypassed<F> = future::Map<F, MarkBypassed>;

/// What [`Bypassed`] does to the inner service's result.
pub type MarkBypassed = fn(Result<Answer, ProxyError>) -> Result<Answer, ProxyError>;

fn mark_bypassed(result: Result<Answer, ProxyError>) -> Result<Answer, ProxyError> {
    result.map(|mut answer| {
        // What the gateway answers itself was never the cache's to pass by.
        if answer.cache != CacheStatus::Local {
            answer.cache = CacheStatus::Bypass;
        }
        answer
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_answers_only_for_its_own_key() {
        let e = Entry::new(
            "platform.getTx\u{0}{\"txID\":\"a\"}",
            AnswerKind::Result,
            b"{\"tx\":\"0x00\"}",
            None,
        );
        assert!(e.is_for("platform.getTx\u{0}{\"txID\":\"a\"}"));
        // Same length, one letter apart; a prefix; a longer key.
        assert!(!e.is_for("platform.getTx\u{0}{\"txID\":\"b\"}"));
        assert!(!e.is_for("platform.getTx"));
        assert!(!e.is_for("platform.getTx\u{0}{\"txID\":\"a\"}\u{0}@5"));
        assert_eq!(&e.payload()[..], b"{\"tx\":\"0x00\"}");
    }

    #[test]
    fn moka_gets_the_fingerprint_as_its_hash() {
        assert_eq!(PassThrough.hash_one(0xdead_beef_u64), 0xdead_beef);
    }

    struct Best(AtomicU64);

    impl BestHeight for Best {
        fn best_height(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }

        fn release(&self) -> Option<String> {
            Some("avalanchego/1.14.2".into())
        }
    }

    #[test]
    fn a_call_is_answered_by_the_lookup_it_was_priced_by() {
        let registry = crate::methods::Registry::builtin();
        let best = Arc::new(Best(AtomicU64::new(5)));
        let metrics = Metrics::new();
        let cache = AnswerCache::new(
            &CacheConfig::default(),
            best.clone(),
            None,
            &metrics,
            registry.len(),
        );
        let head = registry
            .all()
            .into_iter()
            .find(|m| m.cache == CacheClass::Head)
            .expect("a head-class method");
        let mut call = RpcCall::for_test(&registry, &head.name, "{}", false);
        assert!(!cache.would_hit(&mut call), "an empty cache");
        assert_eq!(call.route_height(), Some(5), "the pool routes by it");
        // The best height moves between the price and the answer: the call keeps its decision,
        // key and all (not built again).
        best.0.store(6, Ordering::Relaxed);
        let lookup = cache.decide(&mut call);
        assert_eq!(lookup.height, Some(5));
        let key = lookup.key.take().expect("a cacheable call is keyed");
        assert!(key.text.ends_with("\u{0}@5"), "{:?}", key.text);
        assert_eq!(key.fingerprint, cache.fingerprint(&key.text));
        assert_eq!(
            call.route_height(),
            Some(5),
            "the height stays once the key is taken"
        );
        // A call decided by nobody yet is decided by the cache, at the height now; a pinned one
        // bypasses it, whatever its method.
        let mut fresh = RpcCall::for_test(&registry, &head.name, "{}", false);
        assert_eq!(cache.decide(&mut fresh).height, Some(6));
        let mut pinned = RpcCall::for_test(&registry, &head.name, "{}", true);
        pinned.caller.pin = Some("node-a".into());
        assert!(!cache.would_hit(&mut pinned));
        assert!(pinned.lookup.as_ref().is_some_and(|l| l.key.is_none()));
        assert_eq!(pinned.route_height(), None);
    }
}
