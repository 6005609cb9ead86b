//! Prometheus metrics, served at `GET /metrics` in the text exposition format.
//!
//! Names and labels are part of the ops contract (dashboards are built on them): see the README.
//! Labels never carry secrets or client-chosen strings other than registered method names.
//!
//! Here: [`Metrics`], every collector created and registered once at start (the parts a gateway
//! may lack shown only once built, [`Part`]), and the event log of the status page. In
//! `labels.rs` (re-exported here): the fixed values each label takes, and [`CounterTable`] and
//! [`HistogramTable`], which resolve a labelled child once for the request path.

mod events;
mod labels;

pub use events::{Event, EventLog, EVENTS_KEPT};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use labels::for_each_combination;
pub use labels::{
    CounterTable, HistogramTable, CACHE_RESULTS, CLIENT_KINDS, FALLBACK_DECISIONS, HTTP_REJECTIONS,
    LEASE_RESULTS, OUTCOMES, REDIS_ERROR_KINDS, REDIS_OPS, RELOAD_RESULTS, SHARED_LOOKUP_RESULTS,
    SHARED_WRITE_RESULTS,
};

/// All of snowgate's collectors.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Calls by method and outcome (`ok`, `rpc_error`, `refused`, `unknown_method`, ...).
    pub requests: IntCounterVec,
    /// HTTP requests refused before JSON-RPC (by reason: parse_error, not_found, ...).
    pub http_rejections: IntCounterVec,
    /// Attempts sent to an upstream, by upstream and outcome.
    pub upstream_requests: IntCounterVec,
    /// Latency of upstream attempts, by upstream.
    pub upstream_latency: HistogramVec,
    /// 1 when the upstream takes traffic (healthy and within lag), else 0.
    pub upstream_healthy: IntGaugeVec,
    /// Last height each upstream reported.
    pub upstream_height: IntGaugeVec,
    /// 1 per upstream, labelled with the version and network it reported.
    pub upstream_info: IntGaugeVec,
    /// 1 while the upstream reports another network than the pool's.
    pub upstream_network_mismatch: IntGaugeVec,
    /// Requests in flight per upstream.
    pub upstream_in_flight: IntGaugeVec,
    /// 1 while the upstream is cordoned (by the file, an admin or the fleet: no new calls).
    pub upstream_cordoned: IntGaugeVec,
    /// 1 while the upstream is on hold because it throttled (HTTP 429, or 503 with `Retry-After`).
    pub upstream_throttled: IntGaugeVec,
    /// Cooling periods a node earned for one method it kept failing (the per-method breaker).
    pub upstream_method_cooldowns: IntCounterVec,
    /// Hedged reads, by what came of them: `sent`, `won` (the hedge answered first),
    /// `no_budget` (wanted, over `hedge_max_ratio`), `client_share` (wanted, its client's share of
    /// the budget spent), `over_quota` (wanted, its client's quota could not pay for it),
    /// `no_node` (wanted, no other node had room).
    pub hedges: IntCounterVec,
    /// Changes of an upstream's state, by the state it went to and why (as logged).
    pub upstream_state_changes: IntCounterVec,
    /// Immutable answers held against their calls (`[cache] verify`), by method and result.
    pub answer_checks: IntCounterVec,
    /// Best accepted height in the pool.
    pub best_height: IntGauge,
    /// Request body bytes buffered now (set when `/metrics` is read).
    pub body_buffered: IntGauge,
    /// Whole client requests, from their arrival to their answer, by method and cache result.
    pub request_duration: HistogramVec,
    /// Config reloads by result (`ok`, `error`).
    pub config_reloads: IntCounterVec,
    /// When the config in force was loaded (Unix seconds): at start, then at each reload that
    /// succeeded.
    pub config_loaded: IntGauge,
    /// Client connections open now, by protocol (`http1`, `http2`).
    pub open_connections: IntGaugeVec,
    /// Cache lookups by method, class and result (shown with [`Part::Cache`]).
    pub cache_lookups: IntCounterVec,
    /// Requests that waited for an identical in-flight miss ([`Part::Cache`]).
    pub cache_coalesced: IntCounter,
    /// Entries evicted to stay within `max_bytes` ([`Part::Cache`]).
    pub cache_evictions: IntCounter,
    /// Entries in the cache ([`Part::Cache`]).
    pub cache_entries: IntGauge,
    /// Weighted bytes held by the cache ([`Part::Cache`]).
    pub cache_bytes: IntGauge,
    /// Immutable entries in the cache's read index ([`Part::Cache`]).
    pub cache_indexed: IntGauge,
    /// Calls refused over quota, by kind of client ([`Part::RateLimit`]).
    pub rate_limited: IntCounterVec,
    /// Client addresses tracked by the rate limiter ([`Part::RateLimit`]).
    pub rate_limit_clients: IntGauge,
    /// Calls decided without Redis under global quotas, by decision ([`Part::GlobalQuotas`]).
    pub rate_limit_fallback: IntCounterVec,
    /// Global quota leases by result ([`Part::GlobalQuotas`]).
    pub quota_leases: IntCounterVec,
    /// 1 while Redis answers (the breaker is closed) ([`Part::Redis`]).
    pub redis_up: IntGauge,
    /// The Redis circuit breaker's state ([`Part::Redis`]).
    pub redis_breaker: IntGauge,
    /// Redis commands that failed, by operation and kind ([`Part::Redis`]).
    pub redis_errors: IntCounterVec,
    /// Lookups in the shared cache tier, by result ([`Part::SharedCache`]).
    pub shared_lookups: IntCounterVec,
    /// Answers written to the shared cache tier, by result ([`Part::SharedCache`]).
    pub shared_writes: IntCounterVec,
    /// 1 once the shared tier was told two networks ([`Part::SharedCache`]: set by the tier
    /// whether the cache shares or not, shown with the cache's tier, as it always was).
    pub shared_conflict: IntGauge,
    /// Usage fields in Redis found holding no count, each once ([`Part::Redis`]).
    pub usage_skipped: IntCounter,
    /// Which [`Part`]s are shown.
    shown: Arc<[AtomicBool; PARTS]>,
    /// The last events the status page lists (node state changes, reloads, Redis up and down).
    pub events: std::sync::Arc<EventLog>,
    /// When these metrics were made: the gateway's start, for its uptime.
    pub started: std::time::Instant,
}

/// The crate version snowgate was built as (`snowgate_build_info`'s `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit snowgate was built from (12 hex digits, found by `build.rs`), or `unknown`
/// outside a git checkout (`snowgate_build_info`'s `git_commit`).
pub const GIT_COMMIT: &str = env!("SNOWGATE_GIT_COMMIT");

/// A part of the gateway that not every gateway has. Its collectors are created and registered
/// with all the others in [`Metrics::new`] (a reload that rebuilds the part hands the new one
/// the same handles), but exposed only from when the part is first built ([`Metrics::show`]): a
/// gateway without `[redis]` shows no Redis series, so that a dashboard's "no value" says "not
/// configured" and never reads as Redis down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The answer cache (`[cache] enabled`).
    Cache,
    /// A rate limiter (`[rate_limit] enabled`, at start or after a reload).
    RateLimit,
    /// Global quotas held in Redis.
    GlobalQuotas,
    /// The fleet's Redis (`[redis]`).
    Redis,
    /// The cache's Redis tier.
    SharedCache,
}

const PARTS: usize = 5;

/// The collectors of one [`Part`]: they describe themselves to the registry from the start (so a
/// duplicate is refused at registration), and collect nothing until the part is shown.
struct PartCollectors {
    shown: Arc<[AtomicBool; PARTS]>,
    part: Part,
    collectors: Vec<Box<dyn Collector>>,
}

impl Collector for PartCollectors {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.collectors.iter().flat_map(|c| c.desc()).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        if !self.shown[self.part as usize].load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.collectors.iter().flat_map(|c| c.collect()).collect()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Creates and registers every collector.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "snowgate_requests_total",
                "JSON-RPC calls by method and outcome",
            ),
            &["method", "outcome"],
        )
        .expect("static metric definition is valid");
        let http_rejections = IntCounterVec::new(
            Opts::new(
                "snowgate_http_rejections_total",
                "HTTP requests answered before JSON-RPC dispatch, by reason",
            ),
            &["reason"],
        )
        .expect("static metric definition is valid");
        let upstream_requests = IntCounterVec::new(
            Opts::new(
                "snowgate_upstream_requests_total",
                "Requests sent to upstream nodes, by upstream and outcome",
            ),
            &["upstream", "outcome"],
        )
        .expect("static metric definition is valid");
        let upstream_latency = HistogramVec::new(
            HistogramOpts::new(
                "snowgate_upstream_latency_seconds",
                "Latency of requests to upstream nodes",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_healthy = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_healthy",
                "1 when the upstream takes traffic",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_height = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_height",
                "Last P-chain height reported by the upstream",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_info = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_info",
                "1 per upstream, labelled with the avalanchego version and network ID it reported",
            ),
            &["upstream", "version", "network_id"],
        )
        .expect("static metric definition is valid");
        let upstream_network_mismatch = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_network_mismatch",
                "1 while the upstream reports another network than the pool's (it takes no traffic)",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_in_flight = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_in_flight",
                "Requests in flight to the upstream",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_state_changes = IntCounterVec::new(
            Opts::new(
                "snowgate_upstream_state_changes_total",
                "Changes of an upstream's state, by the state it went to and the reason",
            ),
            &["upstream", "to", "reason"],
        )
        .expect("static metric definition is valid");
        let answer_checks = IntCounterVec::new(
            Opts::new(
                "snowgate_answer_checks_total",
                "Immutable answers held against their calls ([cache] verify), by method and \
                 result: proved (hash), consistent (the ID or height named), unchecked (nothing \
                 checkable for the call), unreadable (the answer leaves out what the check reads \
                 or is of a block type not known: seconded before it is kept), refuted (its node \
                 taken out as lying), and for one node's word the cache wants seconded: agreed, \
                 disagreed, unconfirmed (no second node answered), and not seconded (answered, \
                 not kept): busy (every seconding in flight), client_share (its client's share \
                 in flight), over_quota (its client's quota could not pay)",
            ),
            &["method", "result"],
        )
        .expect("static metric definition is valid");
        let upstream_cordoned = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_cordoned",
                "1 while the upstream is cordoned (by the file, an admin or the fleet: no new calls), else 0",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_throttled = IntGaugeVec::new(
            Opts::new(
                "snowgate_upstream_throttled",
                "1 while the upstream is on hold because it throttled (HTTP 429, or 503 with Retry-After), else 0",
            ),
            &["upstream"],
        )
        .expect("static metric definition is valid");
        let upstream_method_cooldowns = IntCounterVec::new(
            Opts::new(
                "snowgate_upstream_method_cooldowns_total",
                "Times a node stopped getting one method it kept failing, for [health] method_cooldown",
            ),
            &["upstream", "method"],
        )
        .expect("static metric definition is valid");
        let hedges = IntCounterVec::new(
            Opts::new(
                "snowgate_hedges_total",
                "Hedged reads: sent, won (the hedge answered first), no_budget, client_share \
                 (the client's share of the budget spent), over_quota (the client's quota could \
                 not pay for it), no_node",
            ),
            &["outcome"],
        )
        .expect("static metric definition is valid");
        for outcome in [
            "sent",
            "won",
            "no_budget",
            "client_share",
            "over_quota",
            "no_node",
        ] {
            hedges.with_label_values(&[outcome]);
        }
        let best_height = IntGauge::new("snowgate_best_height", "Best P-chain height in the pool")
            .expect("static metric definition is valid");
        let body_buffered = IntGauge::new(
            "snowgate_request_body_buffered_bytes",
            "Request body bytes buffered now, over all connections",
        )
        .expect("static metric definition is valid");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "snowgate_request_duration_seconds",
                "Client requests from arrival to answer, by method (`batch` for a batch, `-` for none) and cache result",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0,
            ]),
            &["method", "cache"],
        )
        .expect("static metric definition is valid");
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "snowgate_config_reloads_total",
                "Config reloads (SIGHUP, POST /snowgate/reload) by result",
            ),
            &["result"],
        )
        .expect("static metric definition is valid");
        let config_loaded = IntGauge::new(
            "snowgate_config_loaded_timestamp_seconds",
            "When the config in force was loaded (start or last successful reload), Unix time",
        )
        .expect("static metric definition is valid");
        let open_connections = IntGaugeVec::new(
            Opts::new(
                "snowgate_open_connections",
                "Client connections open now, by protocol (http1 until a connection's first HTTP/2 request)",
            ),
            &["protocol"],
        )
        .expect("static metric definition is valid");
        let build_info = IntGaugeVec::new(
            Opts::new(
                "snowgate_build_info",
                "1, labelled with the version and git commit snowgate was built from",
            ),
            &["version", "git_commit"],
        )
        .expect("static metric definition is valid");
        let cache_lookups = IntCounterVec::new(
            Opts::new(
                "snowgate_cache_requests_total",
                "Cache lookups by method, class and result",
            ),
            &["method", "class", "result"],
        )
        .expect("static metric definition is valid");
        let cache_coalesced = IntCounter::new(
            "snowgate_cache_coalesced_total",
            "Requests that waited for an identical in-flight miss instead of calling upstream",
        )
        .expect("static metric definition is valid");
        let cache_evictions = IntCounter::new(
            "snowgate_cache_evictions_total",
            "Entries evicted to stay within max_bytes",
        )
        .expect("static metric definition is valid");
        let cache_entries = IntGauge::new("snowgate_cache_entries", "Entries in the cache")
            .expect("static metric definition is valid");
        let cache_bytes = IntGauge::new("snowgate_cache_bytes", "Weighted bytes held by the cache")
            .expect("static metric definition is valid");
        let cache_indexed = IntGauge::new(
            "snowgate_cache_indexed_entries",
            "Immutable entries in the read index (a subset of snowgate_cache_entries)",
        )
        .expect("static metric definition is valid");
        let rate_limited = IntCounterVec::new(
            Opts::new(
                "snowgate_rate_limited_total",
                "Calls refused over quota, by kind of client",
            ),
            &["client"],
        )
        .expect("static metric definition is valid");
        let rate_limit_clients = IntGauge::new(
            "snowgate_rate_limit_clients",
            "Client addresses tracked by the rate limiter",
        )
        .expect("static metric definition is valid");
        let rate_limit_fallback = IntCounterVec::new(
            Opts::new(
                "snowgate_rate_limit_fallback_total",
                "Calls decided without Redis under global quotas (Redis down, slow or failing), by decision",
            ),
            &["decision"],
        )
        .expect("static metric definition is valid");
        let quota_leases = IntCounterVec::new(
            Opts::new(
                "snowgate_quota_leases_total",
                "Global quota leases: granted by Redis, refused by it, returned to it unused",
            ),
            &["result"],
        )
        .expect("static metric definition is valid");
        let redis_up = IntGauge::new(
            "snowgate_redis_up",
            "1 while the shared tier's Redis answers (the breaker is closed), else 0",
        )
        .expect("static metric definition is valid");
        let redis_breaker = IntGauge::new(
            "snowgate_redis_breaker_state",
            "The Redis circuit breaker: 0 closed, 1 open, 2 half-open (probing)",
        )
        .expect("static metric definition is valid");
        let redis_errors = IntCounterVec::new(
            Opts::new(
                "snowgate_redis_errors_total",
                "Redis commands that failed, by operation and kind (timeout or error)",
            ),
            &["op", "kind"],
        )
        .expect("static metric definition is valid");
        let shared_lookups = IntCounterVec::new(
            Opts::new(
                "snowgate_shared_cache_total",
                "Lookups in the shared (Redis) cache tier after a memory miss, by result: hit, \
                 miss, rejected (a value that failed the checks), refuted (a value that \
                 contradicts its call: deleted), untrusted (kept at a weaker level than this \
                 instance's [cache] verify asks), error (Redis failed or timed out), skipped \
                 (Redis down or the network not known yet)",
            ),
            &["result"],
        )
        .expect("static metric definition is valid");
        let shared_writes = IntCounterVec::new(
            Opts::new(
                "snowgate_shared_writes_total",
                "Answers written to the shared cache tier, by result: written, dropped (Redis \
                 down or the write budget spent), too_large (over shared_max_bytes), failed",
            ),
            &["result"],
        )
        .expect("static metric definition is valid");
        let shared_conflict = IntGauge::new(
            "snowgate_shared_cache_network_conflict",
            "1 once the shared tier was told two different networks (it then shares \
             nothing until restarted: answers, cordons, usage), else 0",
        )
        .expect("static metric definition is valid");
        let usage_skipped = IntCounter::new(
            "snowgate_usage_skipped_fields_total",
            "Usage fields (or whole hours) in Redis found holding something else than a count, \
             each counted once when found: not added to nor read; the counts meant for them \
             stay in this instance's memory",
        )
        .expect("static metric definition is valid");
        build_info.with_label_values(&[VERSION, GIT_COMMIT]).set(1);
        // Counters of rare events are exposed at 0 from the start for every value their labels
        // can take, so that a dashboard shows 0, not "no data", until the first one. Not done
        // where the values come from the config or the traffic: `method` (the registry, which a
        // reload may change: `snowgate_requests_total`, `snowgate_cache_requests_total`,
        // `snowgate_request_duration_seconds`), `upstream` (the configured nodes:
        // `snowgate_upstream_requests_total`, `snowgate_upstream_state_changes_total`, whose
        // `reason` is also a node's fault category).
        let zeros: [(&IntCounterVec, &[&[&str]]); 8] = [
            (&config_reloads, &[RELOAD_RESULTS]),
            (&http_rejections, &[HTTP_REJECTIONS]),
            (&rate_limited, &[CLIENT_KINDS]),
            (&rate_limit_fallback, &[FALLBACK_DECISIONS]),
            (&quota_leases, &[LEASE_RESULTS]),
            (&redis_errors, &[REDIS_OPS, REDIS_ERROR_KINDS]),
            (&shared_lookups, &[SHARED_LOOKUP_RESULTS]),
            (&shared_writes, &[SHARED_WRITE_RESULTS]),
        ];
        for (vec, labels) in zeros {
            for_each_combination(labels, &mut |values| {
                vec.with_label_values(values);
            });
        }
        // Both protocols are exposed from the start (at 0), so a dashboard's series exist before
        // the first connection of each.
        for protocol in ["http1", "http2"] {
            open_connections.with_label_values(&[protocol]);
        }
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(config_reloads.clone()),
            Box::new(request_duration.clone()),
            Box::new(config_loaded.clone()),
            Box::new(http_rejections.clone()),
            Box::new(upstream_requests.clone()),
            Box::new(upstream_latency.clone()),
            Box::new(upstream_healthy.clone()),
            Box::new(upstream_height.clone()),
            Box::new(upstream_in_flight.clone()),
            Box::new(upstream_cordoned.clone()),
            Box::new(upstream_throttled.clone()),
            Box::new(upstream_method_cooldowns.clone()),
            Box::new(hedges.clone()),
            Box::new(upstream_state_changes.clone()),
            Box::new(answer_checks.clone()),
            Box::new(best_height.clone()),
            Box::new(body_buffered.clone()),
            Box::new(upstream_info.clone()),
            Box::new(upstream_network_mismatch.clone()),
            Box::new(open_connections.clone()),
            Box::new(build_info),
        ] {
            registry
                .register(c)
                .expect("each metric is registered once");
        }
        let shown: Arc<[AtomicBool; PARTS]> = Arc::new(Default::default());
        let parts: [(Part, Vec<Box<dyn Collector>>); PARTS] = [
            (
                Part::Cache,
                vec![
                    Box::new(cache_lookups.clone()),
                    Box::new(cache_coalesced.clone()),
                    Box::new(cache_evictions.clone()),
                    Box::new(cache_entries.clone()),
                    Box::new(cache_bytes.clone()),
                    Box::new(cache_indexed.clone()),
                ],
            ),
            (
                Part::RateLimit,
                vec![
                    Box::new(rate_limited.clone()),
                    Box::new(rate_limit_clients.clone()),
                ],
            ),
            (
                Part::GlobalQuotas,
                vec![
                    Box::new(rate_limit_fallback.clone()),
                    Box::new(quota_leases.clone()),
                ],
            ),
            (
                Part::Redis,
                vec![
                    Box::new(redis_up.clone()),
                    Box::new(redis_breaker.clone()),
                    Box::new(redis_errors.clone()),
                    Box::new(usage_skipped.clone()),
                ],
            ),
            (
                Part::SharedCache,
                vec![
                    Box::new(shared_lookups.clone()),
                    Box::new(shared_writes.clone()),
                    Box::new(shared_conflict.clone()),
                ],
            ),
        ];
        for (part, collectors) in parts {
            registry
                .register(Box::new(PartCollectors {
                    shown: shown.clone(),
                    part,
                    collectors,
                }))
                .expect("each metric is registered once");
        }
        registry
            .register(Box::new(TraceSpans::new()))
            .expect("the trace counts are registered once");
        // The process's own figures (memory, CPU, file descriptors, start time), read from /proc
        // at each scrape.
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(ProcessFigures(
                prometheus::process_collector::ProcessCollector::for_self(),
            )))
            .expect("the process collector is registered once");
        Metrics {
            registry,
            requests,
            http_rejections,
            upstream_requests,
            upstream_latency,
            upstream_healthy,
            upstream_height,
            upstream_info,
            upstream_network_mismatch,
            upstream_in_flight,
            upstream_cordoned,
            upstream_throttled,
            upstream_method_cooldowns,
            hedges,
            upstream_state_changes,
            answer_checks,
            best_height,
            body_buffered,
            config_reloads,
            config_loaded,
            request_duration,
            open_connections,
            cache_lookups,
            cache_coalesced,
            cache_evictions,
            cache_entries,
            cache_bytes,
            cache_indexed,
            rate_limited,
            rate_limit_clients,
            rate_limit_fallback,
            quota_leases,
            redis_up,
            redis_breaker,
            redis_errors,
            shared_lookups,
            shared_writes,
            shared_conflict,
            usage_skipped,
            shown,
            events: std::sync::Arc::new(EventLog::default()),
            started: std::time::Instant::now(),
        }
    }

    /// The registry (every collector is registered in [`Metrics::new`]).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Exposes `part`'s metrics from now on (its builder calls this; a part is never hidden
    /// again, its counters keep their history across reloads).
    pub fn show(&self, part: Part) {
        self.shown[part as usize].store(true, Ordering::Relaxed);
    }

    /// Whether `part`'s metrics are exposed (it has been built; see [`Part`]).
    pub fn is_shown(&self, part: Part) -> bool {
        self.shown[part as usize].load(Ordering::Relaxed)
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8192);
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// Removes every series of `counters` whose label `name` is `value` (a node a reload removed:
/// its series go with it, whatever its other labels).
pub fn remove_series_with(counters: &IntCounterVec, name: &str, value: &str) {
    use prometheus::core::Collector;
    for family in counters.collect() {
        for metric in family.get_metric() {
            let labels: std::collections::HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|l| (l.get_name(), l.get_value()))
                .collect();
            if labels.get(name) == Some(&value) {
                let _ = counters.remove(&labels);
            }
        }
    }
}

/// The wall clock in unix milliseconds (0 before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The process collector, with `process_cpu_seconds_total` in fractions of a second: the
/// collector counts whole seconds, so a dashboard's `rate()` of an idle or lightly loaded gateway
/// reads 0 or jumps by whole seconds.
#[cfg(target_os = "linux")]
struct ProcessFigures(prometheus::process_collector::ProcessCollector);

#[cfg(target_os = "linux")]
impl prometheus::core::Collector for ProcessFigures {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.0.collect();
        let precise = procfs::process::Process::myself()
            .and_then(|p| p.stat())
            .map(|stat| (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64);
        if let Ok(seconds) = precise {
            for family in &mut families {
                if family.get_name() == "process_cpu_seconds_total" {
                    for metric in family.mut_metric().iter_mut() {
                        let mut counter = prometheus::proto::Counter::default();
                        counter.set_value(seconds);
                        metric.set_counter(counter);
                    }
                }
            }
        }
        families
    }
}

/// `snowgate_trace_spans_total{outcome}`: what became of the spans of `[tracing]`, read from the
/// exporter's counts at each scrape; no series while nothing is traced.
struct TraceSpans(prometheus::core::Desc);

impl TraceSpans {
    fn new() -> TraceSpans {
        let desc = prometheus::core::Desc::new(
            "snowgate_trace_spans_total".into(),
            "Spans of [tracing] by outcome: exported; dropped (the exporter's queue was full); \
             failed (the collector refused them or did not answer in time)"
                .into(),
            vec!["outcome".into()],
            std::collections::HashMap::new(),
        )
        .expect("a valid metric description");
        TraceSpans(desc)
    }
}

impl Collector for TraceSpans {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.0]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        if !crate::otel::installed() {
            return Vec::new();
        }
        let mut family = prometheus::proto::MetricFamily::default();
        family.set_name(self.0.fq_name.clone());
        family.set_help(self.0.help.clone());
        family.set_field_type(prometheus::proto::MetricType::COUNTER);
        for (outcome, count) in crate::otel::export::counts() {
            let mut label = prometheus::proto::LabelPair::default();
            label.set_name("outcome".into());
            label.set_value(outcome.into());
            let mut counter = prometheus::proto::Counter::default();
            counter.set_value(count as f64);
            let mut metric = prometheus::proto::Metric::default();
            metric.set_label(vec![label]);
            metric.set_counter(counter);
            family.mut_metric().push(metric);
        }
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_exposed_once_shown_with_its_zeros() {
        let m = Metrics::new();
        let text = || String::from_utf8(m.render()).unwrap();
        assert!(!text().contains("snowgate_redis_"), "{}", text());
        assert!(text().contains("snowgate_config_reloads_total{result=\"error\"} 0\n"));
        m.show(Part::Redis);
        let shown = text();
        assert!(shown.contains("snowgate_redis_up 0\n"), "{shown}");
        for op in REDIS_OPS {
            for kind in REDIS_ERROR_KINDS {
                let series =
                    format!("snowgate_redis_errors_total{{kind=\"{kind}\",op=\"{op}\"}} 0\n");
                assert!(shown.contains(&series), "{series} in {shown}");
            }
        }
        assert!(
            !shown.contains("snowgate_shared_"),
            "another part stays hidden"
        );
    }
}
