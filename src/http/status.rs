//! The operator's status page: `GET /snowgate/status` (one self-contained HTML file compiled into
//! the binary: inline CSS and script, no CDN, no build step) and the JSON it reads every second,
//! `GET /snowgate/status.json`.
//!
//! The request path pays nothing for it: the JSON is read from what already exists (the pool's
//! state, the Prometheus counters the request path updates without locks, the event log). Rates,
//! quantiles and the latency sparklines come from [`StatusBoard`], which copies the counters it
//! needs once a second (whoever is watching) and keeps the last minute: a rate is the difference
//! over the last [`WINDOW`], a quantile the one of the latency histogram's buckets over that
//! window. It reads each counter through its own handle on [`Metrics`], never by its family's
//! name: a metric renamed is a change here too, not a page of zeros.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::core::Collector;
use prometheus::proto::Metric;
use serde::Serialize;

use crate::metrics::{Event, Metrics, Part};
use crate::upstream::{PoolStatus, UpstreamStatus};

/// The page.
pub const STATUS_PATH: &str = "/snowgate/status";
/// The JSON the page reads.
pub const STATUS_JSON_PATH: &str = "/snowgate/status.json";
/// Cordon and uncordon: `POST /snowgate/upstreams/NAME/cordon` (or `/uncordon`).
pub const UPSTREAMS_PREFIX: &str = "/snowgate/upstreams/";

/// The page's HTML, CSS and script.
pub const PAGE: &str = include_str!("status.html");

/// The span rates and quantiles are measured over.
pub const WINDOW: Duration = Duration::from_secs(10);
/// How often the board copies the counters.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept: a minute of sparkline.
const KEPT: usize = 61;
/// The most refused clients listed.
const TOP_LIMITED: usize = 10;

/// One copy of the counters the page needs.
#[derive(Debug, Default, Clone)]
struct Sample {
    at: Option<Instant>,
    /// `snowgate_requests_total` by outcome.
    outcomes: BTreeMap<String, f64>,
    upstreams: HashMap<String, UpstreamSample>,
    /// Cache lookups by class: (hits, misses).
    classes: BTreeMap<String, (f64, f64)>,
    evictions: f64,
    coalesced: f64,
    limited: f64,
    rate_limit_clients: Option<f64>,
}

/// One upstream's counters.
#[derive(Debug, Default, Clone)]
struct UpstreamSample {
    calls: f64,
    errors: f64,
    /// The latency histogram: cumulative counts at each upper bound (seconds), then the total.
    buckets: Vec<(f64, u64)>,
    count: u64,
    sum: f64,
}

/// The last minute of samples; see the module doc.
pub struct StatusBoard {
    metrics: Metrics,
    samples: Mutex<VecDeque<Arc<Sample>>>,
}

impl StatusBoard {
    pub fn new(metrics: Metrics) -> Arc<StatusBoard> {
        let board = Arc::new(StatusBoard {
            metrics,
            samples: Mutex::new(VecDeque::with_capacity(KEPT)),
        });
        board.sample();
        board
    }

    /// Copies the counters now.
    pub fn sample(&self) {
        let sample = Arc::new(read(&self.metrics));
        let mut samples = self.samples.lock();
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Samples every [`SAMPLE_EVERY`] until `stop` turns true (or its sender goes).
    pub fn spawn(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let board = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    changed = stop.changed() => {
                        if changed.is_err() || *stop.borrow() {
                            return;
                        }
                    }
                }
                match board.upgrade() {
                    Some(board) => board.sample(),
                    None => return,
                }
            }
        });
    }

    /// The newest sample, the one about [`WINDOW`] before it, and the whole minute.
    fn window(&self) -> (Arc<Sample>, Arc<Sample>, Vec<Arc<Sample>>) {
        let samples = self.samples.lock();
        let all: Vec<Arc<Sample>> = samples.iter().cloned().collect();
        drop(samples);
        let newest = all.last().cloned().unwrap_or_default();
        let since = newest
            .at
            .and_then(|at| at.checked_sub(WINDOW))
            .and_then(|from| all.iter().find(|s| s.at.is_some_and(|at| at >= from)))
            .cloned()
            .unwrap_or_else(|| newest.clone());
        (newest, since, all)
    }

    /// The JSON the page reads.
    pub fn report(&self, facts: Facts<'_>) -> StatusReport {
        let (new, old, all) = self.window();
        let seconds = match (new.at, old.at) {
            (Some(n), Some(o)) if n > o => Some((n - o).as_secs_f64()),
            _ => None,
        };
        let rate = |now: f64, then: f64| -> f64 {
            seconds.map_or(0.0, |s| round2((now - then).max(0.0) / s))
        };
        let pool = facts.pool;
        let best = pool.best_height;
        let upstreams = pool
            .upstreams
            .iter()
            .map(|u| {
                let none = UpstreamSample::default();
                let now = new.upstreams.get(&u.name).unwrap_or(&none);
                let then = old.upstreams.get(&u.name).unwrap_or(&none);
                let (state, reason) = state(u, best);
                UpstreamRow {
                    name: u.name.clone(),
                    role: if u.role.is_some() {
                        "fallback"
                    } else {
                        "primary"
                    },
                    state,
                    reason,
                    height: u.height,
                    lag: u
                        .height
                        .filter(|_| best > 0)
                        .map(|h| best.saturating_sub(h)),
                    version: u.version.clone(),
                    network_id: u.network_id,
                    in_flight: u.in_flight,
                    cordoned: u.cordoned,
                    cordoned_by: u.cordoned_by.clone(),
                    takes_traffic: u.takes_traffic,
                    calls_per_second: rate(now.calls, then.calls),
                    errors_per_second: rate(now.errors, then.errors),
                    latency_p50_ms: quantile(now, then, 0.5),
                    latency_p99_ms: quantile(now, then, 0.99),
                    latency_history_ms: history(&all, &u.name),
                }
            })
            .collect();
        let outcomes = new
            .outcomes
            .iter()
            .map(|(outcome, n)| {
                let before = old.outcomes.get(outcome).copied().unwrap_or(0.0);
                (outcome.clone(), rate(*n, before))
            })
            .filter(|(_, r)| *r > 0.0)
            .collect();
        let hit_ratio = new
            .classes
            .iter()
            .map(|(class, (hits, misses))| {
                let (h0, m0) = old.classes.get(class).copied().unwrap_or((0.0, 0.0));
                let (h, m) = (hits - h0, misses - m0);
                let ratio = (h + m > 0.0).then(|| round2(h / (h + m)));
                (class.clone(), ratio)
            })
            .collect();
        StatusReport {
            version: crate::metrics::VERSION,
            git_commit: crate::metrics::GIT_COMMIT,
            now: crate::metrics::unix_ms(),
            uptime_seconds: self.metrics.started.elapsed().as_secs(),
            admin_key_required: true,
            pool: PoolRow {
                healthy: pool.healthy,
                draining: pool.draining,
                best_height: best,
                best_height_age_seconds: facts
                    .best_moved_ms
                    .map(|at| round2(crate::metrics::unix_ms().saturating_sub(at) as f64 / 1000.0)),
                requests_per_second: outcomes,
            },
            upstreams,
            cache: CacheRow {
                enabled: facts.cache.is_some(),
                entries: facts.cache.map(|c| c.0),
                bytes: facts.cache.map(|c| c.1),
                max_bytes: facts.cache.map(|c| c.2),
                hit_ratio,
                evictions_per_second: rate(new.evictions, old.evictions),
                coalesced_per_second: rate(new.coalesced, old.coalesced),
                shared: facts.redis_up.map(|up| SharedRow {
                    redis: if up { "up" } else { "down" },
                }),
            },
            rate_limit: LimitRow {
                enabled: facts.limiter.is_some(),
                clients_tracked: new.rate_limit_clients.map(|n| n as u64),
                limited_per_second: rate(new.limited, old.limited),
                top_limited: facts
                    .limiter
                    .map(|l| l.most_refused(TOP_LIMITED))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(client, limited)| Limited { client, limited })
                    .collect(),
                usage_this_hour: facts.usage_this_hour,
            },
            events: self.metrics.events.newest_first(),
        }
    }
}

/// What the board reads beside the counters, at the time of the request.
pub struct Facts<'a> {
    pub pool: &'a PoolStatus,
    pub best_moved_ms: Option<u64>,
    /// The cache's entries, bytes and `max_bytes` (`None`: no cache).
    pub cache: Option<(u64, u64, u64)>,
    /// The shared tier's Redis (`None` without `[redis]`).
    pub redis_up: Option<bool>,
    pub limiter: Option<&'a crate::ratelimit::Limiter>,
    /// The keys served most this hour, and whose counts they are (`crate::ratelimit::usage`).
    pub usage_this_hour: UsageRow,
}

/// The keys served most calls this hour: the fleet's with Redis, else (or while Redis does not
/// answer) this instance's.
#[derive(Debug, Default, Serialize)]
pub struct UsageRow {
    /// `"fleet"` or `"instance"`; absent when usage is not counted.
    pub scope: Option<crate::ratelimit::usage::Scope>,
    pub keys: Vec<crate::ratelimit::usage::KeyTotal>,
}

/// A node's state on the page, and why.
fn state(u: &UpstreamStatus, best: u64) -> (&'static str, Option<String>) {
    if u.cordoned {
        let by = cordoned_by(&u.cordoned_by);
        let why = match (&u.last_error, u.healthy) {
            (Some(e), false) => format!("{by}; unhealthy: {e}"),
            _ => by,
        };
        return ("cordoned", Some(why));
    }
    if u.standby {
        return ("standby", Some("a primary serves".to_string()));
    }
    if u.throttled {
        return (
            "throttled",
            Some("asked to be left alone (HTTP 429)".to_string()),
        );
    }
    if u.network_mismatch {
        let why = match u.network_id {
            Some(n) => format!("network {n}"),
            None => "another network".to_string(),
        };
        return ("mismatch", Some(why));
    }
    if u.last_error.as_deref() == Some("network unknown") && u.healthy {
        return ("mismatch", u.last_error.clone());
    }
    if u.lying {
        return ("lying", u.last_error.clone());
    }
    if !u.healthy {
        if u.last_error.is_none() && u.height.is_none() {
            return ("starting", None);
        }
        return ("unhealthy", u.last_error.clone());
    }
    if !u.takes_traffic {
        let why = if u.implausible_height {
            "height implausibly far ahead".to_string()
        } else {
            match u.height {
                Some(h) => format!("{} blocks behind", best.saturating_sub(h)),
                None => "height unknown".to_string(),
            }
        };
        return ("lagging", Some(why));
    }
    ("healthy", None)
}

/// Who cordons a node, in words: `by the file and the fleet`.
fn cordoned_by(sources: &[&str]) -> String {
    let who: Vec<&str> = sources
        .iter()
        .map(|s| match *s {
            "file" => "the file",
            "instance" => "an admin of this instance",
            "fleet" => "the fleet",
            other => other,
        })
        .collect();
    match who.split_last() {
        None => "by an admin".to_string(),
        Some((last, [])) => format!("by {last}"),
        Some((last, rest)) => format!("by {} and {last}", rest.join(", ")),
    }
}

/// The `q` quantile (milliseconds) of the latencies observed between `then` and `now`,
/// interpolated within the bucket it falls in (as Prometheus's `histogram_quantile` does).
fn quantile(now: &UpstreamSample, then: &UpstreamSample, q: f64) -> Option<f64> {
    let total = now.count.checked_sub(then.count)?;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for (i, (bound, cumulative)) in now.buckets.iter().enumerate() {
        let before = then.buckets.get(i).map_or(0, |b| b.1);
        let here = cumulative.saturating_sub(before);
        if here as f64 >= rank {
            let inside = here.saturating_sub(below);
            let within = if inside == 0 {
                1.0
            } else {
                (rank - below as f64) / inside as f64
            };
            return Some(round2((lower + (bound - lower) * within) * 1000.0));
        }
        (lower, below) = (*bound, here);
    }
    // In the open bucket above the last bound: the last bound is all that is known.
    Some(round2(lower * 1000.0))
}

/// The mean latency of each second of the last minute, oldest first (`None`: no call that second).
fn history(all: &[Arc<Sample>], name: &str) -> Vec<Option<f64>> {
    all.windows(2)
        .map(|pair| {
            let (a, b) = (pair[0].upstreams.get(name)?, pair[1].upstreams.get(name)?);
            let n = b.count.checked_sub(a.count).filter(|n| *n > 0)?;
            Some(round2((b.sum - a.sum).max(0.0) / n as f64 * 1000.0))
        })
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Copies the counters the page needs, each from its own collector.
fn read(metrics: &Metrics) -> Sample {
    let mut s = Sample {
        at: Some(Instant::now()),
        ..Sample::default()
    };
    for m in series(&metrics.requests) {
        *s.outcomes
            .entry(label(&m, "outcome").to_string())
            .or_default() += counter(&m);
    }
    for m in series(&metrics.upstream_requests) {
        let u = s
            .upstreams
            .entry(label(&m, "upstream").to_string())
            .or_default();
        u.calls += counter(&m);
        // A node's error answer to a call is the call's, not the node's fault.
        if !matches!(label(&m, "outcome"), "ok" | "rpc_error") {
            u.errors += counter(&m);
        }
    }
    for m in series(&metrics.upstream_latency) {
        let u = s
            .upstreams
            .entry(label(&m, "upstream").to_string())
            .or_default();
        let h = m.get_histogram();
        u.buckets = h
            .get_bucket()
            .iter()
            .map(|b| (b.get_upper_bound(), b.get_cumulative_count()))
            .collect();
        u.count = h.get_sample_count();
        u.sum = h.get_sample_sum();
    }
    for m in series(&metrics.cache_lookups) {
        let class = s.classes.entry(label(&m, "class").to_string()).or_default();
        match label(&m, "result") {
            "hit" => class.0 += counter(&m),
            "miss" => class.1 += counter(&m),
            _ => {}
        }
    }
    s.evictions = metrics.cache_evictions.get() as f64;
    s.coalesced = metrics.cache_coalesced.get() as f64;
    s.limited = series(&metrics.rate_limited).iter().map(counter).sum();
    // Shown from when a rate limiter is first built: none yet, no figure.
    s.rate_limit_clients = metrics
        .is_shown(Part::RateLimit)
        .then(|| metrics.rate_limit_clients.get() as f64);
    s
}

/// The labelled children of one collector, as a scrape would read them.
fn series(collector: &dyn Collector) -> Vec<Metric> {
    collector
        .collect()
        .into_iter()
        .flat_map(|mut family| family.take_metric())
        .collect()
}

/// A child's value of the label `name` (`""` when it has none).
fn label<'m>(m: &'m Metric, name: &str) -> &'m str {
    m.get_label()
        .iter()
        .find(|l| l.get_name() == name)
        .map_or("", |l| l.get_value())
}

fn counter(m: &Metric) -> f64 {
    m.get_counter().get_value()
}

/// `GET /snowgate/status.json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    version: &'static str,
    git_commit: &'static str,
    now: u64,
    uptime_seconds: u64,
    /// Cordon needs the admin key (always).
    admin_key_required: bool,
    pool: PoolRow,
    upstreams: Vec<UpstreamRow>,
    cache: CacheRow,
    rate_limit: LimitRow,
    events: Vec<Event>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolRow {
    healthy: bool,
    draining: bool,
    best_height: u64,
    best_height_age_seconds: Option<f64>,
    requests_per_second: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UpstreamRow {
    name: String,
    role: &'static str,
    state: &'static str,
    reason: Option<String>,
    height: Option<u64>,
    lag: Option<u64>,
    version: Option<String>,
    network_id: Option<u32>,
    in_flight: usize,
    cordoned: bool,
    /// As `/ext/health` says it (`file`, `instance`, `fleet`); absent when not cordoned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cordoned_by: Vec<&'static str>,
    takes_traffic: bool,
    calls_per_second: f64,
    errors_per_second: f64,
    latency_p50_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_history_ms: Vec<Option<f64>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CacheRow {
    enabled: bool,
    entries: Option<u64>,
    bytes: Option<u64>,
    max_bytes: Option<u64>,
    hit_ratio: BTreeMap<String, Option<f64>>,
    evictions_per_second: f64,
    coalesced_per_second: f64,
    shared: Option<SharedRow>,
}

#[derive(Debug, Serialize)]
struct SharedRow {
    redis: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LimitRow {
    enabled: bool,
    clients_tracked: Option<u64>,
    limited_per_second: f64,
    top_limited: Vec<Limited>,
    usage_this_hour: UsageRow,
}

#[derive(Debug, Serialize)]
struct Limited {
    client: String,
    limited: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latencies(buckets: &[(f64, u64)]) -> UpstreamSample {
        UpstreamSample {
            buckets: buckets.to_vec(),
            count: buckets.last().map_or(0, |b| b.1),
            ..UpstreamSample::default()
        }
    }

    #[test]
    fn quantiles_come_from_the_window_not_the_whole_life() {
        // Before the window: 1000 slow calls (≤ 1 s). In it: 100 calls, all ≤ 10 ms.
        let then = latencies(&[(0.01, 0), (1.0, 1000)]);
        let now = latencies(&[(0.01, 100), (1.0, 1100)]);
        let p99 = quantile(&now, &then, 0.99).expect("calls in the window");
        assert!(p99 <= 10.0, "{p99}");
        assert_eq!(quantile(&now, &now, 0.5), None, "no call: no quantile");
        // Half fast, half slow: the median at the edge, p99 in the slow bucket.
        let mixed = latencies(&[(0.01, 50), (1.0, 100)]);
        let none = UpstreamSample::default();
        assert_eq!(quantile(&mixed, &none, 0.5), Some(10.0));
        let p99 = quantile(&mixed, &none, 0.99).expect("calls");
        assert!(p99 > 900.0 && p99 <= 1000.0, "{p99}");
    }

    #[test]
    fn a_sample_reads_each_figure_through_its_own_collector() {
        let m = Metrics::new();
        m.requests
            .with_label_values(&["platform.getHeight", "ok"])
            .inc_by(3);
        m.requests
            .with_label_values(&["info.getNetworkID", "ok"])
            .inc();
        m.requests
            .with_label_values(&["platform.getHeight", "refused"])
            .inc();
        for (outcome, n) in [("ok", 4), ("rpc_error", 1), ("timeout", 2)] {
            m.upstream_requests
                .with_label_values(&["node-a", outcome])
                .inc_by(n);
        }
        m.upstream_latency
            .with_label_values(&["node-a"])
            .observe(0.003);
        for (result, n) in [("hit", 5), ("miss", 2), ("bypass", 7)] {
            m.cache_lookups
                .with_label_values(&["platform.getTx", "immutable", result])
                .inc_by(n);
        }
        m.cache_evictions.inc();
        m.cache_coalesced.inc_by(2);
        m.rate_limited.with_label_values(&["ip"]).inc();
        m.rate_limited.with_label_values(&["key"]).inc_by(2);
        m.rate_limit_clients.set(9);
        assert_eq!(read(&m).rate_limit_clients, None, "no rate limiter yet");
        m.show(Part::RateLimit);
        let s = read(&m);
        assert_eq!(s.outcomes.get("ok"), Some(&4.0));
        assert_eq!(s.outcomes.get("refused"), Some(&1.0));
        let a = &s.upstreams["node-a"];
        assert_eq!(
            (a.calls, a.errors),
            (7.0, 2.0),
            "a node's error answer is no error"
        );
        assert_eq!((a.count, a.sum), (1, 0.003));
        assert!(a.buckets.iter().any(|&(bound, n)| bound >= 0.003 && n == 1));
        assert_eq!(s.classes.get("immutable"), Some(&(5.0, 2.0)));
        assert_eq!((s.evictions, s.coalesced, s.limited), (1.0, 2.0, 3.0));
        assert_eq!(s.rate_limit_clients, Some(9.0));
    }

    #[test]
    fn a_cordon_says_who_holds_it() {
        assert_eq!(cordoned_by(&["file"]), "by the file");
        assert_eq!(cordoned_by(&["file", "fleet"]), "by the file and the fleet");
        assert_eq!(
            cordoned_by(&["file", "instance", "fleet"]),
            "by the file, an admin of this instance and the fleet"
        );
        assert_eq!(cordoned_by(&[]), "by an admin");
    }

    #[test]
    fn a_quantile_past_the_last_bound_is_the_last_bound() {
        let over = UpstreamSample {
            buckets: vec![(0.5, 0), (5.0, 0)],
            count: 10,
            ..UpstreamSample::default()
        };
        assert_eq!(
            quantile(&over, &UpstreamSample::default(), 0.5),
            Some(5000.0)
        );
    }
}
