//! Issue 28: the Grafana dashboard's queries, run by a real Prometheus. Debian's `prometheus`
//! (installed by `bash .ci/test`) scrapes a live gateway every second (devnodes, the cache, rate
//! limits, a real Redis) while the test drives hits, misses, 429s, a rejected request, a reload, a
//! node going down and Redis going down; then every query of `config/grafana/snowgate.json`, its
//! template variables filled as Grafana would (`$instance` the gateway's target, `$__rate_interval`
//! and `$__range` the test's span), goes through Prometheus's HTTP API: each evaluates without
//! error, and each panel's query returns at least one series, but for the panels [`EVENT_ONLY`]
//! names (a series those panels show exists only once its event has happened: none today, the
//! test causing every event a panel shows); the annotations (events) evaluate without error.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::redis::RedisServer;
use support::{call, client, post, post_with};

/// Panels whose series exist only after an event this test does not cause, and why.
const EVENT_ONLY: &[(&str, &str)] = &[];

/// A Prometheus server, stopped (and its data removed) when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Debian's `prometheus` on a free loopback port, scraping `target` (`host:port`) every
    /// second with the admin key.
    fn start(target: &str) -> Prometheus {
        let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "prometheus not found: `bash .ci/test` installs it, or `sudo apt-get install \
                     prometheus`"
                )
            });
        let dir = support::temp_dir("prom");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: snowgate\n    metrics_path: /metrics\n\
             \x20   authorization: {{ type: Bearer, credentials: {key} }}\n\
             \x20   static_configs:\n      - targets: [\"{target}\"]\n",
            key = support::ADMIN_KEY
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = support::free_port();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// An instant query's `data.result`, or Prometheus's error.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let r = client()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", expr)])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = r.json().await.map_err(|e| e.to_string())?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Waits (at most 60 s) until `expr` returns a series.
    async fn until(&self, expr: &str) {
        let start = Instant::now();
        loop {
            if self.query(expr).await.is_ok_and(|r| !r.is_empty()) {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "prometheus never returned {expr}; its log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `expr` with the dashboard's template variables filled: `$instance` is matched as a regex
/// (`=~`), which the target's `host:port` matches as it is.
fn filled(expr: &str, instance: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "5m")
        .replace("$instance", instance)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_runs_on_a_real_prometheus_and_shows_data() {
    let mut redis = RedisServer::start();
    let (_network, nodes, gateway) = crate::dashboard::live_gateway(&redis).await;
    let url = gateway.url();
    let target = url.trim_start_matches("http://").to_string();
    let prometheus = Prometheus::start(&target);
    prometheus.until("up{job=\"snowgate\"} == 1").await;

    let p_chain = format!("{url}/ext/bc/P");
    let info = format!("{url}/ext/info");
    let auth = format!("Bearer {}", support::ADMIN_KEY);
    let admin = [("authorization", auth.as_str())];
    // Misses and hits (immutable and head), over a few scrapes (an admin's: no quota spent).
    for h in 1..=5 {
        let block = call(
            "platform.getBlockByHeight",
            &format!(r#"{{"height":{h},"encoding":"json"}}"#),
        );
        for _ in 0..2 {
            assert_eq!(post_with(&p_chain, &block, &admin).await.status, 200);
        }
        post_with(&p_chain, &call("platform.getHeight", "{}"), &admin).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A request refused before JSON-RPC.
    let r = client().get(format!("{url}/no-such-page")).send().await;
    assert_eq!(r.unwrap().status(), 404);
    // Calls until the quota refuses one.
    let mut limited = false;
    for _ in 0..100 {
        if post(&info, &call("info.getNetworkID", "{}")).await.status == 429 {
            limited = true;
            break;
        }
    }
    assert!(limited, "the quota never refused a call");
    // A node that keeps failing one method cools for it (pinned admin calls: no quota spent).
    nodes[0]
        .control()
        .update_faults(|f| f.failing_methods = vec!["platform.sampleValidators".into()]);
    let pinned = [
        ("authorization", auth.as_str()),
        ("x-snowgate-upstream", "node-0"),
    ];
    let sample = call("platform.sampleValidators", r#"{"size":"1"}"#);
    assert_ne!(post_with(&p_chain, &sample, &pinned).await.status, 200);
    nodes[0]
        .control()
        .update_faults(|f| f.failing_methods.clear());
    // A reload, and a node going down.
    gateway.reload().await.unwrap();
    nodes[1].control().go_down().await;
    prometheus
        .until("min(snowgate_upstream_healthy{upstream=\"node-1\"}) == 0")
        .await;
    // Redis goes down: its errors and the quota decisions taken without it are counted.
    tokio::task::block_in_place(|| redis.kill());
    for _ in 0..20 {
        post(&info, &call("info.getNetworkID", "{}")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    prometheus.until("snowgate_rate_limit_fallback_total").await;
    prometheus.until("snowgate_redis_errors_total").await;
    // The last events scraped too.
    prometheus.until("snowgate_redis_up == 0").await;

    let dashboard = crate::dashboard::dashboard();
    let mut failed = Vec::new();
    let mut empty = Vec::new();
    let mut ran = 0;
    for panel in crate::dashboard::panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        for t in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = t["expr"].as_str() else {
                continue;
            };
            ran += 1;
            let at = format!("{title:?} {}", t["refId"].as_str().unwrap_or_default());
            match prometheus.query(&filled(expr, &target)).await {
                Err(e) => failed.push(format!("{at}: {e}\n  {expr}")),
                Ok(r) if r.is_empty() && !EVENT_ONLY.iter().any(|(p, _)| *p == title) => {
                    empty.push(format!("{at}: {expr}"))
                }
                Ok(_) => {}
            }
        }
    }
    // The annotations (events: an instant may hold none) evaluate without error.
    for a in dashboard["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = a["expr"].as_str() {
            ran += 1;
            if let Err(e) = prometheus.query(&filled(expr, &target)).await {
                failed.push(format!("annotation {}: {e}\n  {expr}", a["name"]));
            }
        }
    }
    // The instance variable's own query.
    let instances = prometheus
        .query("group by (instance) (snowgate_build_info)")
        .await;
    drop(prometheus);
    gateway.shutdown().await;
    assert!(ran >= 40, "{ran} queries");
    assert!(
        failed.is_empty(),
        "queries Prometheus refused:\n{}",
        failed.join("\n")
    );
    assert!(
        empty.is_empty(),
        "panels with no data:\n{}",
        empty.join("\n")
    );
    let instances = instances.unwrap();
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0]["metric"]["instance"], target);
}
