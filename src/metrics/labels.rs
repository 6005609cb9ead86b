//! The values each label of snowgate's metrics takes, where they are a fixed list (the rest come
//! from the config or the registry: `method`, `upstream`), and the tables that resolve a labelled
//! child once and keep it for the request path.
//!
//! [`Metrics::new`](super::Metrics::new) exposes the series of rare events at 0 from the start for
//! every value listed here; the layers count into [`CounterTable`] and [`HistogramTable`] rows
//! instead of looking a label up per call. A unit test of `crate::error` checks that every reason
//! it counts is in [`HTTP_REJECTIONS`].

use prometheus::{HistogramVec, IntCounterVec};

/// Counters of one `IntCounterVec` resolved once per (row, column) and kept: a label lookup
/// hashes the label strings under a lock, which the request path should not do per call. Rows are
/// methods (by [`crate::methods::MethodSpec::index`], plus one for calls before dispatch), columns
/// a fixed list of the last label's values.
pub struct CounterTable {
    vec: IntCounterVec,
    columns: &'static [&'static str],
    rows: Vec<Box<[std::sync::OnceLock<prometheus::IntCounter>]>>,
}

impl CounterTable {
    /// A table of `rows` rows over `vec`, whose last label takes the values in `columns`.
    pub fn new(vec: IntCounterVec, rows: usize, columns: &'static [&'static str]) -> CounterTable {
        CounterTable {
            vec,
            columns,
            rows: (0..rows)
                .map(|_| columns.iter().map(|_| std::sync::OnceLock::new()).collect())
                .collect(),
        }
    }

    /// Increments the counter labelled `prefix` + `column` in `row`.
    pub fn inc(&self, row: usize, prefix: &[&str], column: &str) {
        let cell = self
            .columns
            .iter()
            .position(|c| *c == column)
            .and_then(|col| self.rows.get(row)?.get(col));
        match cell {
            Some(cell) => cell.get_or_init(|| self.labelled(prefix, column)).inc(),
            None => self.labelled(prefix, column).inc(),
        }
    }

    fn labelled(&self, prefix: &[&str], column: &str) -> prometheus::IntCounter {
        let mut labels: Vec<&str> = prefix.to_vec();
        labels.push(column);
        self.vec.with_label_values(&labels)
    }
}

/// Histograms of one `HistogramVec` by (method, cache result), resolved once per cell and kept,
/// like [`CounterTable`]: rows are methods by [`crate::methods::MethodSpec::index`], then `-` (no
/// method: refused before one was known, or snowgate's own endpoints) and `batch`; columns the
/// cache results.
pub struct HistogramTable {
    vec: HistogramVec,
    names: Vec<String>,
    rows: Vec<[std::sync::OnceLock<prometheus::Histogram>; 4]>,
}

/// The values of the `cache` label of `snowgate_request_duration_seconds`.
pub const CACHE_RESULTS: [&str; 4] = ["HIT", "MISS", "BYPASS", "-"];

impl HistogramTable {
    /// A table over `vec` for the methods `names` (in registry order), plus `-` and `batch`.
    pub fn new(vec: HistogramVec, mut names: Vec<String>) -> HistogramTable {
        names.push("-".into());
        names.push("batch".into());
        let rows = names.iter().map(|_| Default::default()).collect();
        HistogramTable { vec, names, rows }
    }

    /// The row of calls without a method (`-`).
    pub fn none_row(&self) -> usize {
        self.names.len() - 2
    }

    /// The row of batches.
    pub fn batch_row(&self) -> usize {
        self.names.len() - 1
    }

    /// Records `seconds` in `row` under the cache result `cache` (`None`: `-`).
    pub fn observe(&self, row: usize, cache: Option<&str>, seconds: f64) {
        let col = cache
            .and_then(|c| CACHE_RESULTS.iter().position(|r| *r == c))
            .unwrap_or(3);
        let Some(cells) = self.rows.get(row) else {
            return;
        };
        cells[col]
            .get_or_init(|| {
                self.vec
                    .with_label_values(&[&self.names[row], CACHE_RESULTS[col]])
            })
            .observe(seconds);
    }
}

/// Calls `f` with every combination of one value from each list of `labels`, in order.
pub(super) fn for_each_combination(labels: &[&[&str]], f: &mut dyn FnMut(&[&str])) {
    fn go<'a>(labels: &[&[&'a str]], prefix: &mut Vec<&'a str>, f: &mut dyn FnMut(&[&str])) {
        let Some((first, rest)) = labels.split_first() else {
            return f(prefix);
        };
        for value in *first {
            prefix.push(value);
            go(rest, prefix, f);
            prefix.pop();
        }
    }
    go(labels, &mut Vec::new(), f);
}

/// The values of the `result` label of `snowgate_config_reloads_total`.
pub const RELOAD_RESULTS: &[&str] = &["ok", "error"];

/// The values of the `reason` label of `snowgate_http_rejections_total` (a unit test of
/// `crate::error` checks every reason counted is here).
pub const HTTP_REJECTIONS: &[&str] = &[
    "not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "body_too_large",
    "body_timeout",
    "body_error",
    "unauthorized",
    "bad_admin_request",
    "connection_limit",
    "answers_unread",
    "answers_unread_gateway",
];

/// The values of the `client` label of `snowgate_rate_limited_total`.
pub const CLIENT_KINDS: &[&str] = &["ip", "key"];

/// The values of the `decision` label of `snowgate_rate_limit_fallback_total`.
pub const FALLBACK_DECISIONS: &[&str] = &["allowed", "denied"];

/// The values of the `result` label of `snowgate_quota_leases_total`.
pub const LEASE_RESULTS: &[&str] = &["granted", "refused", "returned"];

/// The values of the `op` label of `snowgate_redis_errors_total`.
pub const REDIS_OPS: &[&str] = &["cache_get", "cache_set", "cordon", "ping", "quota", "usage"];

/// The values of the `kind` label of `snowgate_redis_errors_total`.
pub const REDIS_ERROR_KINDS: &[&str] = &["timeout", "error"];

/// The values of the `result` label of `snowgate_shared_cache_total`.
pub const SHARED_LOOKUP_RESULTS: &[&str] = &[
    "hit",
    "miss",
    "rejected",
    "refuted",
    "untrusted",
    "error",
    "skipped",
];

/// The values of the `result` label of `snowgate_shared_writes_total`.
pub const SHARED_WRITE_RESULTS: &[&str] = &["written", "dropped", "too_large", "failed"];

/// The values of the `outcome` label of `snowgate_requests_total`.
pub const OUTCOMES: &[&str] = &[
    "ok",
    "rpc_error",
    "refused",
    "beyond_max_depth",
    "unknown_method",
    "invalid_request",
    "parse_error",
    "rate_limited",
    "no_upstream",
    "upstream_throttled",
    "overloaded",
    "upstream_timeout",
    "upstream_unavailable",
    "bad_upstream_answer",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn counter_table_counts_into_the_labelled_series() {
        let m = Metrics::new();
        let t = CounterTable::new(m.requests.clone(), 2, OUTCOMES);
        t.inc(0, &["a.b"], "ok");
        t.inc(0, &["a.b"], "ok");
        t.inc(5, &["c.d"], "ok"); // a row out of range still counts
        t.inc(1, &["e.f"], "something_else");
        assert_eq!(m.requests.with_label_values(&["a.b", "ok"]).get(), 2);
        assert_eq!(m.requests.with_label_values(&["c.d", "ok"]).get(), 1);
        assert_eq!(
            m.requests
                .with_label_values(&["e.f", "something_else"])
                .get(),
            1
        );
    }
}
