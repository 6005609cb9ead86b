//! Reading a Prometheus text exposition (what `GET /metrics` answers) in the tests: its metric
//! families and their kinds, from the `# TYPE NAME KIND` lines. A family whose collector has no
//! series yet (a labelled counter never incremented) is not in the exposition at all.
#![allow(dead_code)]

/// One metric family of an exposition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// Its name (`snowgate_requests_total`, `snowgate_request_duration_seconds`).
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
}

/// The metric families of `text`, in order.
pub fn families(text: &str) -> Vec<Family> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some(Family {
                name: words.next()?.to_string(),
                kind: words.next().unwrap_or("untyped").to_string(),
            })
        })
        .collect()
}

/// The names of the metric families of `text`, in order.
pub fn family_names(text: &str) -> Vec<String> {
    families(text).into_iter().map(|f| f.name).collect()
}

/// Whether `name` is a series name a query can select in an exposition with `families`: a
/// counter's, gauge's or untyped family's own name, or a histogram's `_bucket`, `_sum` and
/// `_count` (a histogram's bare name selects nothing), or a summary's name (its quantiles),
/// `_sum` and `_count`.
pub fn selectable(name: &str, families: &[Family]) -> bool {
    let kind = |n: &str| {
        families
            .iter()
            .find(|f| f.name == n)
            .map(|f| f.kind.as_str())
    };
    match kind(name) {
        Some("histogram") => return false,
        Some(_) => return true,
        None => {}
    }
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        name.strip_suffix(suffix)
            .and_then(kind)
            .is_some_and(|k| k == "histogram" || (k == "summary" && *suffix != "_bucket"))
    })
}
