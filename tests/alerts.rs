//! `config/prometheus/`: the alert rules an on-call operator loads (`alerts.yml`), their unit tests
//! (`alerts_test.yml`: for each rule, series that fire it and series that must not, the
//! annotations stated exactly) and the scrape config that loads them (`prometheus.yml`), run by
//! Debian's `promtool` (package `prometheus`, which `bash .ci/test` installs): `promtool check
//! rules`, `promtool test rules`, `promtool check config`. And every metric a rule reads is one
//! snowgate exposes (the README's table, itself checked against a live gateway by
//! `tests/metrics.rs`): a rule on a misspelt metric would never fire, and nothing else would say so.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prometheus")
}

/// Debian's `promtool`; a missing one fails the test naming the install.
fn promtool() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "promtool not found: `bash .ci/test` installs it, or `sudo apt-get install prometheus`"
        )
    })
}

/// Runs promtool with `args` in `config/prometheus/`, and says what it printed when it fails.
fn run(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_rules_and_the_scrape_config_pass_promtool() {
    let rules = run(&["check", "rules", "alerts.yml"]);
    assert!(rules.contains("SUCCESS"), "{rules}");
    let config = run(&["check", "config", "prometheus.yml"]);
    assert!(config.contains("1 rule files found"), "{config}");
}

#[test]
fn every_rule_fires_on_its_series_and_only_on_them() {
    let out = run(&["test", "rules", "alerts_test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap()
}

/// The values of every `key: value` line whose key is `key` (`alert`, `alertname`, ...).
fn values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix(key))
        .filter_map(|rest| rest.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .collect()
}

#[test]
fn every_rule_is_tested_says_what_to_look_at_and_has_a_severity() {
    let alerts = read("alerts.yml");
    let names = values(&alerts, "alert");
    assert!(names.len() >= 15, "{names:?}");
    let tested: BTreeSet<String> = values(&read("alerts_test.yml"), "alertname")
        .into_iter()
        .collect();
    for name in &names {
        assert!(
            tested.contains(name),
            "{name} has no test in alerts_test.yml"
        );
    }
    assert_eq!(values(&alerts, "summary").len(), names.len());
    assert_eq!(values(&alerts, "description").len(), names.len());
    let severities = values(&alerts, "severity");
    assert_eq!(severities.len(), names.len());
    assert!(
        severities.iter().all(|s| s == "page" || s == "ticket"),
        "{severities:?}"
    );
}

/// The metric names an expression reads (`snowgate_*` and `process_*`, without a histogram's
/// `_bucket`/`_count`/`_sum`), besides `up`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let starts = rest.starts_with("snowgate_") || rest.starts_with("process_");
        let fresh = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts && fresh {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..len];
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            out.insert(base.to_string());
            i += len;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn every_metric_a_rule_reads_is_one_snowgate_exposes() {
    let used = metric_names(&read("alerts.yml"));
    assert!(used.contains("snowgate_upstream_healthy"), "{used:?}");
    assert!(
        used.contains("snowgate_request_duration_seconds"),
        "{used:?}"
    );
    let listed: BTreeSet<String> = crate::metrics::readme_metric_rows()
        .into_iter()
        .flat_map(|(names, _)| names)
        .collect();
    let unknown: Vec<&String> = used.iter().filter(|m| !listed.contains(*m)).collect();
    assert!(
        unknown.is_empty(),
        "rules read metrics snowgate does not expose: {unknown:?}"
    );
}
