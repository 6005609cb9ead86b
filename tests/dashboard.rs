//! `config/grafana/snowgate.json`, the Grafana dashboard: it is a dashboard Grafana imports
//! (unique panel ids, a title, a datasource and a query on every panel, the `datasource` and
//! `instance` variables, panels inside the 24-column grid without overlaps), every query filters
//! on `$instance`, and every metric name its queries use is exposed by a live gateway's
//! `GET /metrics`: devnodes, the cache, rate limits and a real Redis (the fleet's shared tier),
//! after a hit, a miss, a 429, a rejected request, a reload and Redis going down, so that the
//! families only an event creates exist too. A panel on a misspelt or renamed metric shows "No
//! data" forever; this test fails instead.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use snowgate::config::Config;
use snowgate::devnode::{DevNode, Network};
use snowgate::gateway::ConfigSource;
use snowgate::Gateway;
use support::prometheus::{families, selectable, series_labels, Family};
use support::redis::{RedisServer, SharedRedis};
use support::{call, client, post, post_with};

/// The dashboard, parsed.
pub(crate) fn dashboard() -> Value {
    let text = include_str!("../config/grafana/snowgate.json");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("config/grafana/snowgate.json: {e}"))
}

/// Every panel: the top-level ones (rows included) and those inside collapsed rows.
pub(crate) fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("a \"panels\" list") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// Every PromQL expression of the dashboard, with where it is (a panel's title and the query's
/// refId, an annotation's name, a variable's name).
fn expressions(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                let at = format!(
                    "panel {:?} query {}",
                    p["title"].as_str().unwrap_or_default(),
                    t["refId"].as_str().unwrap_or_default()
                );
                out.push((at, expr.to_string()));
            }
        }
    }
    for a in d["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = a["expr"].as_str() {
            let at = format!("annotation {:?}", a["name"].as_str().unwrap_or_default());
            out.push((at, expr.to_string()));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let query = v["query"]["query"].as_str().or(v["query"].as_str());
        if v["type"] == "query" {
            let query = query.unwrap_or_default();
            // `label_values(SELECTOR, LABEL)`: the selector is PromQL, the label is not.
            let expr = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .map(|args| args.rsplit_once(',').map_or("", |(expr, _label)| expr))
                .unwrap_or(query);
            let at = format!("variable {:?}", v["name"].as_str().unwrap_or_default());
            out.push((at, expr.to_string()));
        }
    }
    out
}

/// PromQL words that are not metric names: aggregations, set and grouping keywords.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
];

/// Keywords followed by a list of label names in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The index after the string that starts at `i` (its quote), escapes included.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if quote != b'`' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// The index after the `close` that ends the group opened at `i`, strings skipped.
fn skip_group(b: &[u8], i: usize, close: u8) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => j = skip_string(b, j),
            c if c == close => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// What a PromQL expression selects: each metric name with its label matchers (the text between
/// the braces after it, or ""), and the label names of its `by (...)`, `without (...)`, `on (...)`,
/// `ignoring (...)` and `group_left/right (...)` lists. Functions, aggregations, keywords,
/// strings, ranges, numbers, durations and Grafana's `$variables` are skipped.
#[derive(Debug, Default)]
struct Parsed {
    selectors: Vec<(String, String)>,
    grouping: Vec<String>,
}

fn parse(expr: &str) -> Parsed {
    let b = expr.as_bytes();
    let mut out = Parsed::default();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, b'"' | b'\'' | b'`') {
            i = skip_string(b, i);
        } else if c == b'{' {
            i = skip_group(b, i, b'}');
        } else if c == b'[' {
            i = skip_group(b, i, b']');
        } else if c == b'#' {
            i = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
        } else if c == b'$' {
            i += 1;
            if b.get(i) == Some(&b'{') {
                i = skip_group(b, i, b'}');
            } else {
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // A number or a duration (`0.99`, `1e3`, `5m`).
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let mut next = i;
            while next < b.len() && b[next].is_ascii_whitespace() {
                next += 1;
            }
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                if b.get(next) == Some(&b'(') {
                    i = skip_group(b, next, b')');
                    out.grouping.extend(
                        expr[next + 1..i - 1]
                            .split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_string),
                    );
                }
            } else if KEYWORDS.contains(&lower.as_str()) || b.get(next) == Some(&b'(') {
                // An aggregation or a function: its arguments are read as the loop goes on.
            } else {
                let matchers = if b.get(next) == Some(&b'{') {
                    let end = skip_group(b, next, b'}');
                    i = end;
                    expr[next + 1..end - 1].to_string()
                } else {
                    String::new()
                };
                out.selectors.push((word.to_string(), matchers));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The metric selectors of a PromQL expression (see [`parse`]).
fn selectors(expr: &str) -> Vec<(String, String)> {
    parse(expr).selectors
}

/// The label names of a selector's matchers (`a="x", b=~"y|z"`).
fn matcher_labels(matchers: &str) -> Vec<String> {
    let b = matchers.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i > start {
            out.push(matchers[start..i].to_string());
        }
        // The operator and the quoted value.
        while i < b.len() && !matches!(b[i], b'"' | b'\'' | b'`') {
            i += 1;
        }
        if i < b.len() {
            i = skip_string(b, i);
        }
    }
    out
}

/// The labels `exprs` use (in a selector's matchers, or to group by) that no series of the
/// metrics they query carries (Prometheus adds `instance` and `job` to every series): each as
/// `label (metrics)` with where it is used.
fn unknown_labels(
    exprs: &[(String, String)],
    exposed: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, String> {
    let scrape = ["instance", "job"];
    let mut out = BTreeMap::new();
    for (at, expr) in exprs {
        let parsed = parse(expr);
        let mut all = BTreeSet::new();
        for (name, matchers) in &parsed.selectors {
            let carried = exposed.get(name).cloned().unwrap_or_default();
            for label in matcher_labels(matchers) {
                if !carried.contains(&label) && !scrape.contains(&label.as_str()) {
                    out.insert(format!("{label} ({name})"), at.clone());
                }
            }
            all.extend(carried);
        }
        for label in parsed.grouping {
            if !all.contains(&label) && !scrape.contains(&label.as_str()) {
                let names: Vec<&str> = parsed.selectors.iter().map(|s| s.0.as_str()).collect();
                out.insert(format!("{label} ({})", names.join(", ")), at.clone());
            }
        }
    }
    out
}

/// The metric names `exprs` use that no family of `exposed` provides, each with where it is used.
fn unknown_metrics(exprs: &[(String, String)], exposed: &[Family]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (at, expr) in exprs {
        for (name, _) in selectors(expr) {
            if !selectable(&name, exposed) {
                out.entry(name).or_insert_with(|| at.clone());
            }
        }
    }
    out
}

#[test]
fn the_expression_reader_finds_metric_names_and_nothing_else() {
    let names = |expr: &str| -> Vec<String> { selectors(expr).into_iter().map(|s| s.0).collect() };
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, method) (rate(snowgate_request_duration_seconds_bucket{instance=~"$instance",method!~"a|b{2}"}[$__rate_interval])))"#
        ),
        ["snowgate_request_duration_seconds_bucket"]
    );
    assert_eq!(
        names(
            r#"sum(rate(x_total{a="}"}[5m] offset 1h)) by (le) / on (instance) group_left (version) max without (job) (y_info) > bool 0.5"#
        ),
        ["x_total", "y_info"]
    );
    assert_eq!(
        names(
            r#"scalar(max(best)) - max by(upstream)(height{instance=~"$instance"}) and vector(1)"#
        ),
        ["best", "height"]
    );
    assert_eq!(
        names(r#"time() - process_start_time_seconds unless count_values("v", z) > 1e3"#),
        ["process_start_time_seconds", "z"]
    );
    assert_eq!(
        selectors(r#"up{instance=~"$instance"} + on() ${var} + $other"#),
        [("up".to_string(), r#"instance=~"$instance""#.to_string())]
    );

    assert_eq!(
        parse(r#"sum by (le, method) (rate(a{x="1"}[5m])) / on (instance) group_left (version) b"#)
            .grouping,
        ["le", "method", "instance", "version"]
    );
    assert_eq!(
        matcher_labels(r#"instance=~"$instance", outcome!~"a,b=c", le="+Inf""#),
        ["instance", "outcome", "le"]
    );

    // Only a histogram's series are its `_bucket`, `_sum` and `_count`.
    let exposed = families(
        "# TYPE snowgate_request_duration_seconds histogram\n\
         # TYPE snowgate_requests_total counter\n\
         # TYPE process_open_fds gauge\n",
    );
    let exprs = |e: &str| vec![("here".to_string(), e.to_string())];
    for good in [
        "rate(snowgate_request_duration_seconds_bucket[5m])",
        "rate(snowgate_request_duration_seconds_sum[5m]) / rate(snowgate_request_duration_seconds_count[5m])",
        "sum(rate(snowgate_requests_total[5m])) + process_open_fds",
    ] {
        assert_eq!(unknown_metrics(&exprs(good), &exposed), BTreeMap::new(), "{good}");
    }
    for bad in [
        "rate(snowgate_request_duration_second_bucket[5m])",
        "snowgate_request_duration_seconds",
        "rate(snowgate_requests_total_bucket[5m])",
        "rate(snowgate_request_total[5m])",
        "process_open_fd",
    ] {
        assert_eq!(unknown_metrics(&exprs(bad), &exposed).len(), 1, "{bad}");
    }
}

#[test]
fn labels_are_read_from_the_exposition_and_misspelt_ones_are_found() {
    let text = "# TYPE h histogram\n\
                h_bucket{method=\"a\\\"b,c=d\",cache=\"HIT\",le=\"0.1\"} 1\n\
                h_count{method=\"a\",cache=\"HIT\"} 1\n\
                g 3\n";
    let labels = series_labels(text);
    let set = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(labels["h_bucket"], set(&["method", "cache", "le"]));
    assert_eq!(labels["h_count"], set(&["method", "cache"]));
    assert_eq!(labels["g"], set(&[]));

    let exprs = |e: &str| vec![("here".to_string(), e.to_string())];
    for good in [
        r#"histogram_quantile(0.9, sum by (le, cache) (rate(h_bucket{instance=~"$instance",method="x"}[5m])))"#,
        r#"sum by (job) (g) / on (method) h_count"#,
    ] {
        assert_eq!(
            unknown_labels(&exprs(good), &labels),
            BTreeMap::new(),
            "{good}"
        );
    }
    for bad in [
        r#"sum by (le, caches) (rate(h_bucket[5m]))"#,
        r#"h_count{methods="x"}"#,
        r#"sum by (le) (h_count)"#,
    ] {
        assert_eq!(unknown_labels(&exprs(bad), &labels).len(), 1, "{bad}");
    }
}

#[test]
fn the_dashboard_is_an_importable_grafana_dashboard() {
    let d = dashboard();
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let schema = d["schemaVersion"].as_u64().unwrap();
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    assert!(
        d["id"].is_null(),
        "an imported dashboard gets its id from Grafana"
    );

    // Grafana asks for the Prometheus at import (`${DS_PROMETHEUS}`); the panels follow the
    // `datasource` variable, so the data source can be switched without editing the JSON.
    let inputs = d["__inputs"].as_array().unwrap();
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(var("datasource")["current"]["value"], "${DS_PROMETHEUS}");
    assert_eq!(var("instance")["type"], "query");
    assert_eq!(var("instance")["datasource"]["uid"], "${datasource}");
    assert_eq!(var("instance")["multi"], true);
    assert_eq!(var("instance")["includeAll"], true);

    let all = panels(&d);
    let mut ids = BTreeSet::new();
    for p in &all {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title: {p}");
        let id = p["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("{title:?}: no id"));
        assert!(ids.insert(id), "{title:?}: panel id {id} used twice");
        assert!(p["type"].as_str().is_some(), "{title:?}: no type");
        assert_eq!(p["datasource"]["type"], "prometheus", "{title:?}");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title:?}");
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        let (Some(x), Some(w), Some(h), Some(_)) = (x, w, h, g["y"].as_u64()) else {
            panic!("{title:?}: gridPos {g}");
        };
        assert!(w >= 1 && h >= 1 && x + w <= 24, "{title:?}: gridPos {g}");
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title:?}"));
        assert!(!targets.is_empty(), "{title:?}: no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title:?}: {t}"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title:?}");
            assert!(
                refs.insert(t["refId"].as_str().unwrap()),
                "{title:?}: refId"
            );
        }
        assert!(
            p["description"].as_str().is_some_and(|s| !s.is_empty()),
            "{title:?}: say what the panel shows (its description is the (i) tooltip)"
        );
    }
    // The rows the issue names.
    let rows: Vec<&str> = all
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for want in [
        "Traffic",
        "Latency",
        "Cache",
        "Upstreams",
        "Rate limiting",
        "Redis",
    ] {
        assert!(rows.iter().any(|r| r.starts_with(want)), "{want}: {rows:?}");
    }

    // The panels on the screen (top level: a collapsed row's panels are laid out when it opens)
    // do not overlap.
    let cells = |p: &Value| {
        let g = &p["gridPos"];
        let n = |k: &str| g[k].as_u64().unwrap();
        (n("x"), n("y"), n("w"), n("h"))
    };
    let top = d["panels"].as_array().unwrap();
    for (i, a) in top.iter().enumerate() {
        for b in &top[i + 1..] {
            let ((ax, ay, aw, ah), (bx, by, bw, bh)) = (cells(a), cells(b));
            let apart = ax + aw <= bx || bx + bw <= ax || ay + ah <= by || by + bh <= ay;
            assert!(apart, "{} overlaps {}", a["title"], b["title"]);
        }
    }

    // Every selector keeps to the instances chosen.
    let exprs = expressions(&d);
    assert!(exprs.len() > 40, "{} queries", exprs.len());
    for (at, expr) in &exprs {
        let found = selectors(expr);
        assert!(!found.is_empty(), "{at}: no metric in {expr:?}");
        if at.starts_with("variable") {
            continue;
        }
        for (name, matchers) in found {
            assert!(
                matchers.contains(r#"instance=~"$instance""#),
                "{at}: {name} is not filtered on $instance: {expr}"
            );
        }
    }
}

/// Scrapes until every family in `names` is exposed, for at most 15 s, making the calls `poke`
/// names (the info and P-chain URLs) between scrapes; the last exposition.
async fn scrape_until(url: &str, names: &[&str], poke: Option<(&str, &str)>) -> String {
    let start = Instant::now();
    loop {
        let text = support::get_metrics(url).await;
        let exposed = families(&text);
        let missing = names.iter().any(|n| !exposed.iter().any(|f| f.name == *n));
        if !missing || start.elapsed() > Duration::from_secs(15) {
            return text;
        }
        if let Some((info, p_chain)) = poke {
            post(info, &call("info.getNetworkID", "{}")).await;
            post(
                p_chain,
                &call(
                    "platform.getBlockByHeight",
                    r#"{"height":1,"encoding":"json"}"#,
                ),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gateway whose every metric family can be made to show: two devnodes, the cache (head answers
/// kept 60 s), Redis as the shared tier, a quota of 1 unit a second with a burst of 10 (a few calls
/// reach a 429), a method cooled after one failure. The nodes' network, the nodes, the gateway.
pub(crate) async fn live_gateway(redis: &RedisServer) -> (Network, Vec<DevNode>, Gateway) {
    let (network, nodes) = support::devnodes(12345, 2, Duration::from_secs(60)).await;
    let toml = format!("{}[cache]\nhead_ttl = \"60s\"\n", redis.redis_toml());
    let mut config = Config::from_toml(&toml, "the dashboard test's config").unwrap();
    support::test_gateway(&mut config, &nodes);
    config.rate_limit.enabled = true;
    config.rate_limit.requests_per_second = 1;
    config.rate_limit.burst = 10;
    config.health.method_failures = 1;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let source = ConfigSource::new(move || Ok(config.clone()));
    let gateway = Gateway::start_from(source, Some(listener)).await.unwrap();
    (network, nodes, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exposed_by_a_live_gateway() {
    let mut redis = RedisServer::start();
    let (_network, nodes, gateway) = live_gateway(&redis).await;
    let url = gateway.url();
    let p_chain = format!("{url}/ext/bc/P");
    let info = format!("{url}/ext/info");

    // A miss (from a node, written to Redis), then the same call again: a hit.
    let height = call("platform.getHeight", "{}");
    let first = post(&p_chain, &height).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = post(&p_chain, &height).await;
    assert_eq!(again.header("x-cache"), Some("HIT"), "{}", again.body);
    // A request refused before JSON-RPC.
    let r = client().get(format!("{url}/no-such-page")).send().await;
    assert_eq!(r.unwrap().status(), 404);
    // Calls until the quota refuses one.
    let mut statuses = Vec::new();
    for _ in 0..100 {
        let r = post(&info, &call("info.getNetworkID", "{}")).await;
        statuses.push(r.status);
        if r.status == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // A node that keeps failing one method cools for it (admin calls: no quota spent).
    nodes[0]
        .control()
        .update_faults(|f| f.failing_methods = vec!["platform.sampleValidators".into()]);
    let auth = format!("Bearer {}", support::ADMIN_KEY);
    let sample = call("platform.sampleValidators", r#"{"size":"1"}"#);
    let pinned = [
        ("authorization", auth.as_str()),
        ("x-snowgate-upstream", "node-0"),
    ];
    let r = post_with(&p_chain, &sample, &pinned).await;
    assert_ne!(r.status, 200, "{}", r.body);
    nodes[0]
        .control()
        .update_faults(|f| f.failing_methods.clear());
    // A reload (the same config).
    gateway.reload().await.unwrap();
    // The shared tier's write is done in the background.
    scrape_until(&url, &["snowgate_shared_writes_total"], None).await;

    // Redis goes down: its errors and the quota decisions taken without it are counted.
    tokio::task::block_in_place(|| redis.kill());
    let text = scrape_until(
        &url,
        &[
            "snowgate_redis_errors_total",
            "snowgate_rate_limit_fallback_total",
        ],
        Some((&info, &p_chain)),
    )
    .await;
    gateway.shutdown().await;

    let exposed = families(&text);
    let exprs = expressions(&dashboard());
    let unknown = unknown_metrics(&exprs, &exposed);
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics a live gateway does not expose (name: where):\n{unknown:#?}\n\
         exposed: {:?}",
        exposed.iter().map(|f| &f.name).collect::<Vec<_>>()
    );

    // Every label a query filters or groups by is one the metrics carry.
    let labels = series_labels(&text);
    let unknown = unknown_labels(&exprs, &labels);
    assert!(
        unknown.is_empty(),
        "the dashboard uses labels its metrics do not carry (label (metrics): where):\n{unknown:#?}"
    );

    // And the dashboard shows every family snowgate exposes (a new metric gets a panel).
    let used: BTreeSet<String> = exprs
        .iter()
        .flat_map(|(_, e)| selectors(e))
        .map(|(name, _)| name)
        .collect();
    let unshown: Vec<&str> = exposed
        .iter()
        .map(|f| f.name.as_str())
        .filter(|name| {
            !["", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| used.contains(&format!("{name}{suffix}")))
        })
        .collect();
    assert!(
        unshown.is_empty(),
        "exposed but on no panel of the dashboard: {unshown:?}"
    );
}
