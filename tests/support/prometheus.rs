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

/// The label names each series name of `text` carries (`name{a="x",b="y"} 1`), over all its
/// samples: a histogram's `_bucket` series carry `le`.
pub fn series_labels(
    text: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        if end == 0 {
            continue;
        }
        let labels = out.entry(line[..end].to_string()).or_default();
        let Some(mut rest) = line[end..].strip_prefix('{') else {
            continue;
        };
        // `name="value"` pairs, the values escaped (`\"`, `\\`, `\n`), separated by commas.
        while let Some(eq) = rest.find('=') {
            let name = rest[..eq].trim_start_matches([',', ' ']);
            if name.starts_with('}') {
                break;
            }
            labels.insert(name.to_string());
            let value = &rest[eq + 1..];
            let Some(value) = value.strip_prefix('"') else {
                break;
            };
            let mut close = None;
            let mut escaped = false;
            for (i, c) in value.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => {
                        close = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(close) = close else {
                break;
            };
            rest = &value[close + 1..];
        }
    }
    out
}
