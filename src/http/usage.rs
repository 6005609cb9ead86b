//! `GET /snowgate/usage`: the calls each rate-limit key was served and the cost units they were
//! charged, per UTC hour (`crate::ratelimit::usage` counts them; with `[redis]` the fleet's
//! totals). Who may ask is the status JSON's rule (`super::admin::reach`).
//!
//! Query (all optional): `from` and `to`, each a UTC date (`2025-01-31`: the whole day) or hour
//! (`2025-01-31T13`, `2025-01-31T13:00:00Z`), both included, at most 35 days apart; by default
//! the last 24 hours, this one included. `key=NAME` keeps one key. `format=csv` answers CSV
//! (`hour,key,calls,units`) instead of JSON. A value it cannot read is a 400 saying which and
//! what it expects; with `[redis]`, Redis not answering is a 503.
//!
//! What Redis holds under the usage keys that is not usage (a field that holds no count, an
//! hour's key that holds no hash: someone else's writes) is left out of the figures and named in
//! `skipped` (JSON: the first [`MAX_SKIPPED`], oldest hour first, `skippedMore` the rest; CSV: the
//! count, in the `Snowgate-Usage-Skipped` header). The calls meant for such a field are held in
//! the memory of the instance that served them (see `crate::ratelimit::usage`), so asked there,
//! they are in the figures.
//!
//! The JSON: `{"scope": "fleet"|"instance", "from", "to", "keys": [{"key", "calls", "units"}],
//! "hours": [{"hour", "key", "calls", "units"}], "skipped": [{"hour", "field"?, "why"}]}`, `keys`
//! the totals over the range by name,
//! `hours` the non-empty hours, oldest first. Units are cost units to a tenth (a cache hit at its
//! cached price).

use std::collections::BTreeMap;

use http::{header, HeaderValue, StatusCode};
use serde::Serialize;

use super::{json, HttpResponse};
use crate::error::{Echo, ProxyError};
use crate::ratelimit::usage::hours::{self, End};
use crate::ratelimit::usage::{Book, Counts, Hour, Report, Scope, UsageError, RETENTION_HOURS};

/// Where the usage is read.
pub const USAGE_PATH: &str = "/snowgate/usage";

/// The most skipped fields an answer names (the rest are counted): a hash can hold any number.
pub const MAX_SKIPPED: usize = 100;

/// How the answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

/// A usage query, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub from: Hour,
    pub to: Hour,
    pub key: Option<String>,
    pub format: Format,
}

/// Reads `query` (the URI's query string) with `now` as the current hour; `Err`: the 400's
/// message.
pub fn parse_query(query: Option<&str>, now: Hour) -> Result<Query, String> {
    let (mut from, mut to, mut key, mut format) = (None, None, None, Format::Json);
    let mut seen = Vec::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value).ok_or_else(|| {
            format!(
                "{}: not valid percent-encoded UTF-8",
                Echo::quoted(&String::from_utf8_lossy(name.as_bytes()))
            )
        })?;
        if seen.contains(&name) {
            return Err(format!("{} given twice", Echo::quoted(name)));
        }
        seen.push(name);
        match name {
            "from" => {
                let at = hours::parse(&value, End::From)
                    .map_err(|why| format!("from={}: {why}", Echo::quoted(&value)))?;
                from = Some(at);
            }
            "to" => {
                let at = hours::parse(&value, End::To)
                    .map_err(|why| format!("to={}: {why}", Echo::quoted(&value)))?;
                to = Some(at);
            }
            "key" => key = Some(value),
            "format" => {
                format = match value.as_str() {
                    "json" => Format::Json,
                    "csv" => Format::Csv,
                    _ => {
                        return Err(format!(
                            "format={}: expected json or csv",
                            Echo::quoted(&value)
                        ))
                    }
                }
            }
            _ => {
                return Err(format!(
                    "unknown parameter {} (from, to, key, format)",
                    Echo::quoted(name)
                ))
            }
        }
    }
    let (from, to) = match (from, to) {
        (Some(f), Some(t)) => (f, t),
        (Some(f), None) => (f, now.max(f)),
        (None, Some(t)) => (t.back(23), t),
        (None, None) => (now.back(23), now),
    };
    if from > to {
        return Err(format!("from ({}) is after to ({})", from.iso(), to.iso()));
    }
    if to.0 - from.0 >= RETENTION_HOURS {
        return Err(format!(
            "from and to are more than {} days apart (usage is kept that long)",
            RETENTION_HOURS / 24
        ));
    }
    Ok(Query {
        from,
        to,
        key,
        format,
    })
}

/// `%XX` and `+` decoded; `None` when the result is not UTF-8 or an escape is broken.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Answers `GET /snowgate/usage?query` from `book`.
pub async fn answer(book: &Book, query: Option<&str>) -> Result<HttpResponse, ProxyError> {
    let q = parse_query(query, Hour::now()).map_err(ProxyError::BadUsageQuery)?;
    let report = book
        .report(q.from, q.to, q.key.as_deref())
        .await
        .map_err(|UsageError::Unavailable| ProxyError::UsageUnavailable)?;
    let mut r = match q.format {
        Format::Json => {
            let mut body = serde_json::to_vec(&as_json(&q, &report)).unwrap_or_default();
            body.push(b'\n');
            json(StatusCode::OK, body)
        }
        Format::Csv => {
            let mut r = HttpResponse::new(as_csv(&report).into());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/csv; charset=utf-8"),
            );
            if !report.skipped.is_empty() {
                r.headers_mut().insert(
                    "snowgate-usage-skipped",
                    HeaderValue::from(report.skipped.len()),
                );
            }
            r
        }
    };
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(r)
}

#[derive(Serialize)]
struct Answer {
    scope: Scope,
    from: String,
    to: String,
    keys: Vec<Row>,
    hours: Vec<Row>,
    skipped: Vec<SkippedRow>,
    #[serde(rename = "skippedMore", skip_serializing_if = "is_zero")]
    skipped_more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct SkippedRow {
    hour: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    why: &'static str,
}

#[derive(Serialize)]
struct Row {
    #[serde(skip_serializing_if = "Option::is_none")]
    hour: Option<String>,
    key: String,
    calls: u64,
    units: f64,
}

fn as_json(q: &Query, report: &Report) -> Answer {
    let mut totals: BTreeMap<&str, Counts> = BTreeMap::new();
    for ((_, key), c) in &report.rows {
        let t = totals.entry(key).or_default();
        t.calls += c.calls;
        t.tenths += c.tenths;
    }
    Answer {
        scope: report.scope,
        from: q.from.iso(),
        to: q.to.iso(),
        keys: totals
            .into_iter()
            .map(|(key, c)| Row {
                hour: None,
                key: key.to_string(),
                calls: c.calls,
                units: c.units(),
            })
            .collect(),
        hours: report
            .rows
            .iter()
            .map(|((hour, key), c)| Row {
                hour: Some(hour.iso()),
                key: key.clone(),
                calls: c.calls,
                units: c.units(),
            })
            .collect(),
        skipped: report
            .skipped
            .iter()
            .take(MAX_SKIPPED)
            .map(|s| SkippedRow {
                hour: s.hour.iso(),
                field: s.field.clone(),
                why: match s.field {
                    Some(_) => "not a count",
                    None => "the hour's key holds no hash",
                },
            })
            .collect(),
        skipped_more: report.skipped.len().saturating_sub(MAX_SKIPPED),
    }
}

/// `hour,key,calls,units`, one line per key and non-empty hour, oldest first; units written
/// exactly (`12.5`).
fn as_csv(report: &Report) -> String {
    let mut out = String::from("hour,key,calls,units\n");
    for ((hour, key), c) in &report.rows {
        out.push_str(&format!(
            "{},{key},{},{}.{}\n",
            hour.iso(),
            c.calls,
            c.tenths / 10,
            c.tenths % 10
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Hour {
        hours::parse(text, End::From).expect("an hour")
    }

    #[test]
    fn the_default_is_the_last_24_hours() {
        let now = at("2025-03-01T05");
        let q = parse_query(None, now).unwrap();
        assert_eq!((q.from, q.to), (at("2025-02-28T06"), now));
        assert_eq!((q.key, q.format), (None, Format::Json));
        let q = parse_query(Some("to=2025-02-01"), now).unwrap();
        assert_eq!((q.from, q.to), (at("2025-02-01T00"), at("2025-02-01T23")));
        let q = parse_query(
            Some("from=2025-03-01T02%3A00%3A00Z&format=csv&key=acme"),
            now,
        );
        let q = q.unwrap();
        assert_eq!((q.from, q.to), (at("2025-03-01T02"), now));
        assert_eq!((q.key.as_deref(), q.format), (Some("acme"), Format::Csv));
    }

    #[test]
    fn a_bad_query_says_which_parameter_and_what_it_expects() {
        let now = at("2025-03-01T05");
        for (query, says) in [
            (
                "from=yesterday",
                "from=\"yesterday\": expected a UTC date or hour",
            ),
            ("to=2025-02-30", "to=\"2025-02-30\": no such date"),
            ("from=2025-03-01&to=2025-02-01", "is after to"),
            ("from=2025-01-01&to=2025-03-01", "more than 35 days apart"),
            ("format=xml", "expected json or csv"),
            ("since=2025-01-01", "unknown parameter \"since\""),
            ("key=a&key=b", "given twice"),
            ("from=%zz", "percent-encoded"),
        ] {
            let e = parse_query(Some(query), now).unwrap_err();
            assert!(e.contains(says), "{query}: {e}");
        }
    }

    #[test]
    fn csv_writes_units_exactly() {
        let mut rows = BTreeMap::new();
        rows.insert(
            (at("2025-03-01T05"), "acme".to_string()),
            Counts {
                calls: 3,
                tenths: 125,
            },
        );
        let report = Report {
            scope: Scope::Instance,
            rows,
            skipped: Vec::new(),
        };
        assert_eq!(
            as_csv(&report),
            "hour,key,calls,units\n2025-03-01T05:00:00Z,acme,3,12.5\n"
        );
    }
}
