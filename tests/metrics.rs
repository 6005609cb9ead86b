//! The gateway-wide metrics, scraped from a live gateway's `GET /metrics` over HTTP: open
//! connections by protocol, the build info, the process collector, and the README's metric table
//! against what a gateway exposes and what the code defines.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use support::prometheus::family_names as families;
use support::{call, client, h2_connect, h2_posts, post, read_until_closed, Cluster};

/// The body of `GET /metrics` (see [`try_scrape`]).
async fn scrape(url: &str) -> String {
    try_scrape(url).await.expect("GET /metrics answered 200")
}

/// The body of `GET /metrics` over a connection of its own that the gateway closes after the
/// answer (`Connection: close`; while it is read, it is one open HTTP/1.1 connection), or `None`
/// when the gateway refused it (at `max_connections`).
async fn try_scrape(url: &str) -> Option<String> {
    let r = client()
        .get(format!("{url}/metrics"))
        .header("authorization", format!("Bearer {}", support::ADMIN_KEY))
        .header("connection", "close")
        .send()
        .await
        .ok()?;
    if r.status() != 200 {
        return None;
    }
    r.text().await.ok()
}

/// The value of the sample `series` (name and labels exactly as exposed), if exposed.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

/// `snowgate_open_connections` for `protocol` (panics when not exposed).
fn open(text: &str, protocol: &str) -> i64 {
    let series = format!("snowgate_open_connections{{protocol=\"{protocol}\"}}");
    sample(text, &series).unwrap_or_else(|| panic!("{series} missing from:\n{text}")) as i64
}

/// Scrapes until the open connections are `(http1, http2)` (the scrape's own connection among
/// the `http1` ones), for at most 10 s; the last figures seen otherwise.
async fn open_becomes(url: &str, want: (i64, i64)) -> (i64, i64) {
    let start = Instant::now();
    loop {
        // A scrape refused (a closed connection's slot not given back yet) is tried again.
        if let Some(m) = try_scrape(url).await {
            let seen = (open(&m, "http1"), open(&m, "http2"));
            if seen == want || start.elapsed() > Duration::from_secs(10) {
                return seen;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no scrape answered for 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type H1Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// An HTTP/1.1 keep-alive connection to the gateway that has had one request answered.
async fn h1_connection(addr: std::net::SocketAddr) -> (H1Sender, tokio::task::JoinHandle<()>) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get("/health")
        .header("host", addr.to_string())
        .body(Empty::new())
        .unwrap();
    let answer = sender.send_request(req).await.unwrap();
    answer.into_body().collect().await.unwrap();
    (sender, task)
}

#[tokio::test]
async fn open_connections_are_counted_by_protocol_and_moved_at_the_first_http2_request() {
    let c = Cluster::start(1, Duration::from_millis(200), |_| {}).await;
    let url = c.url();
    let addr = c.gateway.addr();
    assert_eq!(open_becomes(&url, (1, 0)).await, (1, 0), "only the scrape");

    let mut h1 = Vec::new();
    for _ in 0..3 {
        h1.push(h1_connection(addr).await);
    }
    assert_eq!(open_becomes(&url, (4, 0)).await, (4, 0));

    // An HTTP/2 connection is an http1 one until its first request shows what it is.
    let mut h2 = h2_connect(addr, 65_535).await;
    assert_eq!(open_becomes(&url, (5, 0)).await, (5, 0));
    let body = call("info.getNetworkID", "{}");
    for s in h2_posts(&mut h2, &format!("{url}/ext/info"), &body, 3).await {
        assert!(s.await.unwrap().is_some(), "an HTTP/2 call answered");
    }
    assert_eq!(
        open_becomes(&url, (4, 1)).await,
        (4, 1),
        "moved once, whatever its number of requests"
    );
    let mut h2b = h2_connect(addr, 65_535).await;
    for s in h2_posts(&mut h2b, &format!("{url}/ext/info"), &body, 1).await {
        assert!(s.await.unwrap().is_some());
    }
    assert_eq!(open_becomes(&url, (4, 2)).await, (4, 2));

    // Closed by the client: each counted closed once, under its protocol.
    drop(h2);
    assert_eq!(open_becomes(&url, (4, 1)).await, (4, 1));
    for (sender, task) in h1.drain(..) {
        drop(sender);
        task.await.unwrap();
    }
    drop(h2b);
    assert_eq!(open_becomes(&url, (1, 0)).await, (1, 0));
    c.gateway.shutdown().await;
}

#[tokio::test]
async fn refused_connections_are_not_counted_and_closed_ones_are_counted_closed_once() {
    let c = Cluster::start(1, Duration::from_millis(200), |config| {
        config.limits.max_connections = 3;
        // Kept-alive connections without a request are closed by the gateway after this.
        config.limits.idle_timeout = Duration::from_secs(3);
        config.limits.header_timeout = Duration::from_secs(3);
    })
    .await;
    let url = c.url();
    let addr = c.gateway.addr();
    let held = [h1_connection(addr).await, h1_connection(addr).await];
    assert_eq!(open_becomes(&url, (3, 0)).await, (3, 0));

    // Over max_connections (2 held, and one more taken below): answered 503 and closed, never
    // counted (nor counted closed).
    let _third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut refused = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let answer = read_until_closed(&mut s, Duration::from_secs(10))
            .await
            .unwrap();
        refused.push(String::from_utf8_lossy(&answer).into_owned());
    }
    assert!(
        refused.iter().all(|a| a.starts_with("HTTP/1.1 503")),
        "{refused:?}"
    );
    drop(_third);
    assert_eq!(open_becomes(&url, (3, 0)).await, (3, 0));

    // Closed by the gateway (idle): counted closed.
    let seen = open_becomes(&url, (1, 0)).await;
    assert_eq!(seen, (1, 0), "the idle connections closed");
    drop(held);

    // Drained at shutdown: a connection open then is counted closed by the time it is done.
    let metrics = c.gateway.metrics().clone();
    let (_sender, _task) = h1_connection(addr).await;
    let gauge = metrics.open_connections.with_label_values(&["http1"]);
    assert_eq!(gauge.get(), 1);
    c.gateway.shutdown().await;
    assert!(
        support::eventually(Duration::from_secs(60), || gauge.get() == 0).await,
        "drained: {}",
        gauge.get()
    );
}

#[tokio::test]
async fn build_info_names_the_version_and_the_git_commit() {
    let c = Cluster::start(1, Duration::from_millis(200), |_| {}).await;
    let m = scrape(&c.url()).await;
    let line = m
        .lines()
        .find(|l| l.starts_with("snowgate_build_info{"))
        .unwrap_or_else(|| panic!("no build info in:\n{m}"));
    assert!(line.ends_with("} 1"), "{line}");
    let label = |name: &str| {
        let start = line.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        line[start..][..line[start..].find('"').unwrap()].to_string()
    };
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"));
    let commit = label("git_commit");
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match git {
        // Built from this checkout (an override by SNOWGATE_GIT_COMMIT aside).
        Some(head) if std::env::var_os("SNOWGATE_GIT_COMMIT").is_none() => {
            assert_eq!(commit, head, "{line}")
        }
        _ => assert!(
            commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{line}"
        ),
    }
    c.gateway.shutdown().await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_process_collector_reports_memory_cpu_and_file_descriptors() {
    let c = Cluster::start(1, Duration::from_millis(200), |_| {}).await;
    let m = scrape(&c.url()).await;
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let v = sample(&m, name).unwrap_or_else(|| panic!("{name} missing from:\n{m}"));
        assert!(v > 0.0, "{name} {v}");
    }
    // CPU time in fractions of a second (the collector's own counts whole seconds, so a rate of
    // a lightly loaded gateway reads 0): some scrape within a minute shows a fraction.
    let mut cpu = sample(&m, "process_cpu_seconds_total").unwrap();
    let url = format!("{}/ext/bc/P", c.url());
    for _ in 0..600 {
        if cpu.fract() != 0.0 {
            break;
        }
        let _ = post(&url, &call("platform.getHeight", "{}")).await;
        cpu = sample(&scrape(&c.url()).await, "process_cpu_seconds_total").unwrap();
    }
    assert!(cpu > 0.0 && cpu.fract() != 0.0, "{cpu}");
    c.gateway.shutdown().await;
}

/// The rows of README.md's "## Metrics" table: the metric names of the first cell, and the row.
pub(crate) fn readme_metric_rows() -> Vec<(Vec<String>, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .expect("README.md has a \"## Metrics\" section");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let first = row.split('|').nth(1).unwrap_or_default();
            let names = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            (names, row.to_string())
        })
        .collect()
}

/// Every `.rs` file under `src/`, concatenated.
fn source_text() -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &mut out,
    );
    out
}

/// The quoted strings of the `const NAME: &[&str] = &[...]` in `source`.
fn const_list(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("const {name}: &[&str] = &["))
        .unwrap_or_else(|| panic!("no const {name}"));
    let list = &source[start..];
    let list = &list[list.find("&[").unwrap() + 2..list.find("];").unwrap()];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_readme_metric_table_lists_every_metric_exposed_and_no_other() {
    let c = Cluster::start(1, Duration::from_millis(200), |config| {
        config.rate_limit.enabled = true;
        config.rate_limit.requests_per_second = 1;
        config.rate_limit.burst = 10;
    })
    .await;
    let url = c.url();
    let info = format!("{url}/ext/info");
    // A call, then the same again (a cache hit), then calls until one is rate limited.
    let mut statuses = Vec::new();
    for _ in 0..40 {
        let r = post(&info, &call("info.getNetworkID", "{}")).await;
        statuses.push(r.status);
        if r.status == 429 {
            break;
        }
    }
    assert_eq!(statuses.first(), Some(&200), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let m = scrape(&url).await;
    for series in ["result=\"hit\"", "outcome=\"rate_limited\""] {
        assert!(m.contains(series), "{series} missing from:\n{m}");
    }
    c.gateway.shutdown().await;

    let rows = readme_metric_rows();
    let documented: Vec<&str> = rows
        .iter()
        .flat_map(|(names, _)| names.iter().map(String::as_str))
        .collect();
    let undocumented: Vec<String> = families(&m)
        .into_iter()
        .filter(|f| !documented.contains(&f.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exposed but not in README.md's metric table: {undocumented:?}"
    );

    // Each row names a metric the code defines (the process collector's come from the
    // prometheus crate: those must be exposed).
    let source = source_text();
    let unknown: Vec<&str> = documented
        .iter()
        .copied()
        .filter(|name| {
            let defined = source.contains(&format!("\"{name}\""));
            let collected = name.starts_with("process_") && families(&m).iter().any(|f| f == name);
            !defined && !collected
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "in README.md's metric table but in no source: {unknown:?}"
    );

    // Each outcome the code counts is listed in its row.
    for (metric, values) in [
        (
            "snowgate_upstream_requests_total",
            const_list(&source, "UPSTREAM_OUTCOMES"),
        ),
        (
            "snowgate_requests_total",
            snowgate::metrics::OUTCOMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
    ] {
        let (_, row) = rows
            .iter()
            .find(|(names, _)| names.iter().any(|n| n == metric))
            .unwrap_or_else(|| panic!("no README row for {metric}"));
        let missing: Vec<&String> = values
            .iter()
            .filter(|v| !row.contains(&format!("`{v}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "{metric}: outcomes missing from its README row: {missing:?}"
        );
    }
}

/// The series `(name, labels)` of `text` whose name is `name`, with their value.
fn series_of<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            (labels.is_empty() || labels.starts_with('{')).then(|| (labels, value.parse().unwrap()))
        })
        .collect()
}

/// Counters of rare events are exposed at 0 from the start, for every value their labels can
/// take, so that a dashboard shows 0 and not "no data" until the first event (issue 24, bug 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_of_rare_events_are_exposed_at_zero_before_any_event() {
    use support::redis::{RedisServer, SharedRedis};
    let redis = RedisServer::start();
    let (_network, nodes) = support::devnodes(12345, 1, Duration::from_secs(60)).await;
    let toml = format!("{}[rate_limit]\nscope = \"global\"\n", redis.redis_toml());
    let mut config = snowgate::config::Config::from_toml(&toml, "the zeros test's config").unwrap();
    support::test_gateway(&mut config, &nodes);
    config.rate_limit.enabled = true;
    let gateway = snowgate::Gateway::start(config).await.unwrap();
    let m = support::get_metrics(&gateway.url()).await;
    gateway.shutdown().await;

    let expected: &[(&str, &[&str])] = &[
        (
            "snowgate_rate_limited_total",
            &[r#"{client="ip"}"#, r#"{client="key"}"#],
        ),
        (
            "snowgate_rate_limit_fallback_total",
            &[r#"{decision="allowed"}"#, r#"{decision="denied"}"#],
        ),
        (
            "snowgate_quota_leases_total",
            &[
                r#"{result="granted"}"#,
                r#"{result="refused"}"#,
                r#"{result="returned"}"#,
            ],
        ),
        (
            "snowgate_redis_errors_total",
            &[
                r#"{kind="error",op="cache_get"}"#,
                r#"{kind="timeout",op="cache_get"}"#,
                r#"{kind="error",op="cache_set"}"#,
                r#"{kind="timeout",op="cache_set"}"#,
                r#"{kind="error",op="ping"}"#,
                r#"{kind="timeout",op="ping"}"#,
                r#"{kind="error",op="quota"}"#,
                r#"{kind="timeout",op="quota"}"#,
            ],
        ),
        (
            "snowgate_shared_cache_total",
            &[
                r#"{result="hit"}"#,
                r#"{result="miss"}"#,
                r#"{result="rejected"}"#,
                r#"{result="error"}"#,
                r#"{result="skipped"}"#,
            ],
        ),
        (
            "snowgate_shared_writes_total",
            &[
                r#"{result="written"}"#,
                r#"{result="dropped"}"#,
                r#"{result="too_large"}"#,
                r#"{result="failed"}"#,
            ],
        ),
        (
            "snowgate_config_reloads_total",
            &[r#"{result="ok"}"#, r#"{result="error"}"#],
        ),
        (
            "snowgate_http_rejections_total",
            &[
                r#"{reason="not_found"}"#,
                r#"{reason="method_not_allowed"}"#,
                r#"{reason="unsupported_media_type"}"#,
                r#"{reason="body_too_large"}"#,
                r#"{reason="body_timeout"}"#,
                r#"{reason="body_error"}"#,
                r#"{reason="unauthorized"}"#,
                r#"{reason="bad_admin_request"}"#,
                r#"{reason="connection_limit"}"#,
            ],
        ),
    ];
    for (name, labels) in expected {
        let seen = series_of(&m, name);
        for labels in *labels {
            let value = seen.iter().find(|(l, _)| l == labels).map(|(_, v)| *v);
            let value = value.unwrap_or_else(|| panic!("{name}{labels} not exposed: {seen:?}"));
            // The start's ping and the watcher's may time out on a loaded machine: Redis's
            // errors are only required to be there.
            if *name != "snowgate_redis_errors_total" {
                assert_eq!(value, 0.0, "{name}{labels}");
            }
        }
    }
    for name in [
        "snowgate_cache_evictions_total",
        "snowgate_cache_coalesced_total",
    ] {
        assert_eq!(series_of(&m, name), [("", 0.0)], "{name}");
    }
}

/// A gateway without `[redis]`, the cache or a rate limiter exposes none of their series: the
/// dashboard's "no value" then says "not configured" (a Redis shown 0 would read as down).
#[tokio::test]
async fn parts_a_gateway_does_not_have_expose_no_series() {
    let c = Cluster::start(1, Duration::from_millis(200), |config| {
        config.cache.enabled = false;
    })
    .await;
    let m = scrape(&c.url()).await;
    c.gateway.shutdown().await;
    let exposed = families(&m);
    for prefix in [
        "snowgate_redis_",
        "snowgate_shared_",
        "snowgate_rate_limit",
        "snowgate_quota_",
        "snowgate_cache_",
    ] {
        let shown: Vec<&String> = exposed.iter().filter(|f| f.starts_with(prefix)).collect();
        assert!(shown.is_empty(), "{shown:?}");
    }
    assert!(m.contains("snowgate_http_rejections_total{reason=\"not_found\"} 0"));
}
