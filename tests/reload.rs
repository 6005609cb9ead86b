//! Live reload: the config file edited while snowgate serves, applied by `SIGHUP` (the real
//! binary), `POST /snowgate/reload` or `Gateway::reload`, without dropping a connection; an
//! invalid file changes nothing.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use snowgate::devnode::DevNode;
use snowgate::gateway::{ConfigSource, ReloadError};
use snowgate::Gateway;
use support::{call, devnodes, eventually, post, post_with, temp_dir, ADMIN_KEY};

const HEALTH_INTERVAL_MS: u64 = 200;

/// A config file's text: `upstreams` as `(name, url)`, `limits` inside `[limits]`, then `extra`
/// TOML.
fn config_text_with(upstreams: &[(&str, String)], limits: &str, extra: &str) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\n\
         [health]\ninterval = \"{HEALTH_INTERVAL_MS}ms\"\ntimeout = \"{HEALTH_INTERVAL_MS}ms\"\n\n\
         [limits]\nmax_connections_per_ip = 10000\n{limits}\n"
    );
    for (name, url) in upstreams {
        text.push_str(&format!(
            "[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\n\n"
        ));
    }
    text.push_str(extra);
    text
}

fn config_text(upstreams: &[(&str, String)], extra: &str) -> String {
    config_text_with(upstreams, "", extra)
}

/// Devnodes, their names and URLs, the config file, and a gateway started from it.
struct Reloadable {
    _net: snowgate::devnode::Network,
    nodes: Vec<DevNode>,
    named: Vec<(&'static str, String)>,
    path: PathBuf,
    gw: Gateway,
}

/// `n` devnodes, a file (named after `what`) with the first `first` of them as upstreams and
/// `extra` TOML, and a gateway started from it.
async fn reloadable(what: &str, n: usize, first: usize, extra: &str) -> Reloadable {
    let (_net, nodes) = devnodes(12345, n, Duration::from_millis(100)).await;
    let named = nodes_named(&nodes);
    let path = config_file(what);
    write(&path, &config_text(&named[..first], extra));
    let gw = gateway_from(&path).await;
    Reloadable {
        _net,
        nodes,
        named,
        path,
        gw,
    }
}

fn nodes_named(nodes: &[DevNode]) -> Vec<(&'static str, String)> {
    const NAMES: [&str; 4] = ["node-0", "node-1", "node-2", "node-3"];
    nodes
        .iter()
        .zip(NAMES)
        .map(|(n, name)| (name, n.url()))
        .collect()
}

const NO_LIMITS: &str = "[rate_limit]\nenabled = false\n";

/// Every call reaches a node (so that call counts say where calls went).
const NO_CACHE: &str = "[rate_limit]\nenabled = false\n\n[cache]\nenabled = false\n";

/// A gateway reading `path` (started and reloaded from it), on 127.0.0.1:0.
async fn gateway_from(path: &Path) -> Gateway {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Gateway::start_from(ConfigSource::file(path), Some(listener))
        .await
        .unwrap()
}

fn write(path: &Path, text: &str) {
    // Written whole then renamed, as editors and config managers do: a reload never reads half.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn config_file(what: &str) -> PathBuf {
    temp_dir(what).join("snowgate.toml")
}

async fn height(url: &str) -> support::Reply {
    post(
        &format!("{url}/ext/bc/P"),
        &call("platform.getHeight", "{}"),
    )
    .await
}

async fn reload_over_http(url: &str, key: Option<&str>) -> support::Reply {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    post_with(&format!("{url}/snowgate/reload"), "", &headers).await
}

#[tokio::test]
async fn a_node_added_to_the_file_takes_traffic_after_a_reload_and_a_removed_one_gets_no_new_call()
{
    let Reloadable {
        _net,
        nodes,
        named,
        path,
        gw,
    } = reloadable("reload-add", 2, 1, NO_CACHE).await;
    let url = gw.url();
    assert_eq!(height(&url).await.status, 200);
    assert_eq!(gw.pool().status().upstreams.len(), 1);

    // Added: checked once before it is published, so it takes traffic at once.
    write(&path, &config_text(&named, NO_CACHE));
    let report = gw.reload().await.expect("the reload is applied");
    assert!(
        report
            .changed
            .contains(&"upstream added: node-1".to_string()),
        "{report:?}"
    );
    let status = gw.pool().status();
    assert_eq!(status.upstreams.len(), 2);
    assert!(status.upstreams[1].takes_traffic, "{status:?}");
    nodes[1].control().reset_calls();
    for _ in 0..40 {
        assert_eq!(height(&url).await.status, 200);
    }
    assert!(
        nodes[1].control().call_count("platform.getHeight") > 0,
        "the added node never took a call"
    );

    // Removed: no new call reaches it, it is gone from /ext/health and /metrics.
    write(&path, &config_text(&named[..1], NO_CACHE));
    let report = gw.reload().await.unwrap();
    assert!(
        report
            .changed
            .contains(&"upstream removed: node-1".to_string()),
        "{report:?}"
    );
    nodes[1].control().reset_calls();
    for _ in 0..40 {
        assert_eq!(height(&url).await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(3 * HEALTH_INTERVAL_MS)).await;
    assert_eq!(
        nodes[1].control().total_calls(),
        0,
        "a removed node got calls (or health checks)"
    );
    let health = support::get_text(&format!("{url}/ext/health")).await;
    assert!(!health.contains("node-1"), "{health}");
    let metrics = support::get_metrics(&url).await;
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.contains("upstream=\"node-1\"") && !l.starts_with("snowgate_upstream_requests_total")
        })
        .collect();
    assert!(
        series.is_empty(),
        "a removed node's gauges are still there: {series:?}"
    );
    assert!(metrics.contains("snowgate_config_reloads_total{result=\"ok\"} 2"));
    gw.shutdown().await;
}

/// Same name, another URL: a new node takes the old one's place at once (checked before it is
/// published), and what it reports replaces what the old one did.
#[tokio::test]
async fn a_node_changed_under_its_name_is_replaced_without_a_gap() {
    let (_net, nodes) = devnodes(12345, 2, Duration::from_millis(100)).await;
    nodes[1]
        .control()
        .set_version(snowgate::devnode::NodeVersion::new(1, 13, 0));
    let path = config_file("reload-change");
    write(&path, &config_text(&[("node-0", nodes[0].url())], NO_CACHE));
    let gw = gateway_from(&path).await;
    let url = gw.url();
    assert_eq!(height(&url).await.status, 200);
    write(&path, &config_text(&[("node-0", nodes[1].url())], NO_CACHE));
    let report = gw.reload().await.unwrap();
    assert_eq!(report.changed, vec!["upstream changed: node-0".to_string()]);
    let status = gw.pool().status();
    assert!(status.upstreams[0].takes_traffic, "{status:?}");
    assert_eq!(
        status.upstreams[0].version.as_deref(),
        Some("avalanchego/1.13.0")
    );
    nodes[0].control().reset_calls();
    nodes[1].control().reset_calls();
    for _ in 0..10 {
        assert_eq!(height(&url).await.status, 200);
    }
    assert_eq!(nodes[1].control().call_count("platform.getHeight"), 10);
    assert_eq!(nodes[0].control().call_count("platform.getHeight"), 0);
    let metrics = String::from_utf8_lossy(&gw.metrics().render()).to_string();
    let info: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("snowgate_upstream_info{"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(
        info[0].contains("avalanchego/1.13.0") && info[0].ends_with(" 1"),
        "{info:?}"
    );
    gw.shutdown().await;
}

/// A removed node's kept-alive connections close at the reload, not at its checker's next tick
/// (`[health] interval` here is 30 s).
#[tokio::test]
async fn a_removed_node_lets_go_of_its_connections_at_once() {
    let (_net, nodes) = devnodes(12345, 1, Duration::from_millis(100)).await;
    let (node, _, open) = support::slow_node(Duration::ZERO).await;
    let node = format!("http://{node}");
    let path = config_file("reload-close");
    let both = [("node-0", nodes[0].url()), ("counted", node)];
    let text = |upstreams: &[(&str, String)]| {
        config_text(upstreams, NO_CACHE).replace(
            &format!("interval = \"{HEALTH_INTERVAL_MS}ms\"\ntimeout = \"{HEALTH_INTERVAL_MS}ms\""),
            "interval = \"30s\"\ntimeout = \"500ms\"",
        )
    };
    write(&path, &text(&both));
    let gw = gateway_from(&path).await;
    let auth = format!("Bearer {ADMIN_KEY}");
    for _ in 0..3 {
        let r = post_with(
            &format!("{}/ext/bc/P", gw.url()),
            &call("platform.getTx", r#"{"txID":"x"}"#),
            &[("authorization", &auth), ("x-snowgate-upstream", "counted")],
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(open.load(Ordering::SeqCst) >= 1);
    write(&path, &text(&both[..1]));
    gw.reload().await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || open.load(Ordering::SeqCst) == 0).await,
        "{} connections still open to a removed node",
        open.load(Ordering::SeqCst)
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_call_in_flight_on_a_removed_node_finishes() {
    let (_net, nodes) = devnodes(12345, 1, Duration::from_millis(100)).await;
    let (slow, arrivals, _) = support::slow_node(Duration::from_millis(1500)).await;
    let slow = format!("http://{slow}");
    let path = config_file("reload-in-flight");
    let both = [("node-0", nodes[0].url()), ("slow", slow)];
    let extra = format!("{NO_LIMITS}\n[cache]\nenabled = false\n");
    write(&path, &config_text(&both, &extra));
    let gw = gateway_from(&path).await;
    let url = gw.url();
    let tx = "2QouvFWUbjuySRxeX5xMbNCuAaKWfbk5FeEa2JmoF85RKLk2dD";
    let body = call("platform.getTx", &format!(r#"{{"txID":"{tx}"}}"#));
    let pinned = {
        let url = url.clone();
        let body = body.clone();
        tokio::spawn(async move {
            let auth = format!("Bearer {ADMIN_KEY}");
            post_with(
                &format!("{url}/ext/bc/P"),
                &body,
                &[("authorization", &auth), ("x-snowgate-upstream", "slow")],
            )
            .await
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || arrivals.load(Ordering::SeqCst)
            == 1)
        .await,
        "the pinned call never reached the slow node"
    );
    write(&path, &config_text(&both[..1], &extra));
    let report = gw.reload().await.unwrap();
    assert!(report
        .changed
        .contains(&"upstream removed: slow".to_string()));
    let r = tokio::time::timeout(Duration::from_secs(10), pinned)
        .await
        .expect("the in-flight call never finished")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["tx"], "0x00", "{}", r.body);
    // New calls, pinned or not, never reach it.
    for _ in 0..10 {
        let r = post(&format!("{url}/ext/bc/P"), &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let auth = format!("Bearer {ADMIN_KEY}");
    let r = post_with(
        &format!("{url}/ext/bc/P"),
        &body,
        &[("authorization", &auth), ("x-snowgate-upstream", "slow")],
    )
    .await;
    assert!(
        r.body.contains(r#"unknown upstream \"slow\""#),
        "a call pinned to a removed node: {}",
        r.body
    );
    assert_eq!(arrivals.load(Ordering::SeqCst), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_broken_file_keeps_the_old_config_serving_and_says_why() {
    let Reloadable {
        _net,
        nodes: _nodes,
        named,
        path,
        gw,
    } = reloadable("reload-broken", 1, 1, NO_LIMITS).await;
    let url = gw.url();

    // Not TOML; then TOML with an invalid value; then a node URL that cannot be used.
    let broken = [
        ("[[upstreams]\nname = ".to_string(), "snowgate.toml"),
        (
            config_text(
                &named,
                &format!("{NO_LIMITS}\n[upstream]\nmax_attempts = 0\n"),
            ),
            "upstream.max_attempts",
        ),
        (
            config_text(&[("node-0", "ftp://127.0.0.1:1".to_string())], NO_LIMITS),
            "upstreams[0].url",
        ),
    ];
    for (text, named_in_error) in &broken {
        write(&path, text);
        let e = gw
            .reload()
            .await
            .expect_err("a broken file is refused")
            .to_string();
        assert!(e.contains(named_in_error), "{named_in_error}: {e}");
        let r = height(&url).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The admin endpoint answers the reason, 422; a caller without the key gets 401.
    let r = reload_over_http(&url, Some(ADMIN_KEY)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("upstreams[0].url"), "{}", r.body);
    assert!(
        !r.body.contains("127.0.0.1"),
        "an address in an answer: {}",
        r.body
    );
    assert_eq!(reload_over_http(&url, None).await.status, 401);
    assert_eq!(
        reload_over_http(&url, Some("not-the-key-0123456789"))
            .await
            .status,
        401
    );
    assert_eq!(gw.pool().status().upstreams.len(), 1);
    let metrics = gw.metrics().render();
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("snowgate_config_reloads_total{result=\"error\"} 4"),
        "{metrics}"
    );

    // Fixed: applied, and the answer says so; `listen` needs a restart and says that.
    // So does `[tracing]` (its exporter is set up once, at start).
    let fixed = config_text(&named, NO_LIMITS).replace("127.0.0.1:0", "127.0.0.1:1")
        + "\n[tracing]\notlp_endpoint = \"http://127.0.0.1:4318\"\n";
    write(&path, &fixed);
    let r = reload_over_http(&url, Some(ADMIN_KEY)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["reloaded"], true, "{}", r.body);
    assert_eq!(r.json()["restartNeeded"][0], "server", "{}", r.body);
    assert_eq!(r.json()["restartNeeded"][1], "tracing", "{}", r.body);
    assert_eq!(height(&url).await.status, 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_file_valid_only_with_a_restart_only_change_is_refused_and_says_so() {
    let r = reloadable("reload-kept", 1, 1, "").await;
    // Global quotas, held in a Redis the file adds: valid as written, but `[redis]` changes only
    // at a restart, and without it global quotas have nowhere to be held.
    let text = config_text(
        &r.named,
        "[rate_limit]\nscope = \"global\"\n\n[redis]\nurl = \"redis://127.0.0.1:1\"\n",
    );
    write(&r.path, &text);
    let e = r.gw.reload().await.expect_err("refused: [redis] kept out");
    assert!(matches!(e, ReloadError::Kept(_)), "{e}");
    let e = e.to_string();
    assert!(e.contains("rate_limit.scope"), "{e}");
    assert!(e.contains("restart-only settings kept as they are"), "{e}");
    assert_eq!(height(&r.gw.url()).await.status, 200);
    r.gw.shutdown().await;
}

#[tokio::test]
async fn a_changed_rate_limit_applies_to_the_next_call() {
    // No cache: a hit costs half a call.
    let generous =
        "[cache]\nenabled = false\n[rate_limit]\nrequests_per_second = 1000\nburst = 1000\n";
    let Reloadable {
        _net,
        nodes: _nodes,
        named,
        path,
        gw,
    } = reloadable("reload-rate", 1, 1, generous).await;
    let url = gw.url();
    for _ in 0..5 {
        assert_eq!(height(&url).await.status, 200);
    }
    let tight = "[cache]\nenabled = false\n[rate_limit]\nrequests_per_second = 1\nburst = 10\n";
    write(&path, &config_text(&named, tight));
    let report = gw.reload().await.unwrap();
    assert!(
        report.changed.contains(&"rate_limit".to_string()),
        "{report:?}"
    );
    let statuses: Vec<u16> = {
        let mut s = Vec::new();
        for _ in 0..15 {
            s.push(height(&url).await.status);
        }
        s
    };
    assert!(
        statuses.contains(&429),
        "the new limit did not apply: {statuses:?}"
    );
    // An unchanged limit keeps its buckets: a reload is no refill.
    let report = gw.reload().await.unwrap();
    assert!(!report.changed.contains(&"rate_limit".to_string()));
    assert_eq!(height(&url).await.status, 429);
    gw.shutdown().await;
}

/// `snowgate_rate_limited_total{client="ip"}` on the gateway at `url` (0 when not exposed).
async fn limited_total(url: &str) -> f64 {
    support::get_metrics(url)
        .await
        .lines()
        .find_map(|l| l.strip_prefix("snowgate_rate_limited_total{client=\"ip\"} "))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Calls until one is refused (429), at most 100; how many were refused (0 or 1).
async fn until_refused(url: &str) -> u32 {
    for _ in 0..100 {
        if height(url).await.status == 429 {
            return 1;
        }
    }
    0
}

/// The limiter a reload builds counts into the series the gateway exposes (issue 24, bug 1: its
/// collectors were refused by the registry as duplicates, so every rate-limit metric, and the
/// status page's 429 rate, stood still after the first reload that changed `[rate_limit]`).
#[tokio::test]
async fn refusals_after_a_reload_that_changes_the_quota_are_counted() {
    let quota = |rps: u32| {
        format!("[cache]\nenabled = false\n[rate_limit]\nrequests_per_second = {rps}\nburst = 10\n")
    };
    let Reloadable {
        _net,
        nodes: _nodes,
        named,
        path,
        gw,
    } = reloadable("reload-limited-metrics", 1, 1, &quota(1)).await;
    let url = gw.url();
    assert_eq!(
        until_refused(&url).await,
        1,
        "the first quota refused a call"
    );
    let before = limited_total(&url).await;
    assert!(before >= 1.0, "{before}");

    write(&path, &config_text(&named, &quota(2)));
    let report = gw.reload().await.unwrap();
    assert!(
        report.changed.contains(&"rate_limit".to_string()),
        "{report:?}"
    );
    let mut refused = 0;
    for _ in 0..3 {
        refused += until_refused(&url).await;
    }
    assert_eq!(refused, 3, "the new quota refused calls");
    let after = limited_total(&url).await;
    assert!(
        after >= before + 3.0,
        "snowgate_rate_limited_total stood still after the reload: {before} then {after}"
    );

    // The status page reads the same counters: once every refusal so far is out of its window
    // (10 s), it shows 429s again only if the new limiter's are counted where it reads.
    let limited_per_second = |url: String| async move {
        support::window::status_json(&url, Some(ADMIN_KEY)).await["rateLimit"]["limitedPerSecond"]
            .as_f64()
            .unwrap()
    };
    let mut seen = Vec::new();
    for want_some in [true, false] {
        let start = std::time::Instant::now();
        loop {
            let rate = limited_per_second(url.clone()).await;
            if (rate > 0.0) == want_some {
                seen.push(rate);
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{seen:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(until_refused(&url).await, 1);
    let start = std::time::Instant::now();
    while limited_per_second(url.clone()).await == 0.0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the status page shows no 429s after the reload"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gw.shutdown().await;
}

/// A limiter a reload keeps keeps its housekeeping: idle clients are still pruned (every 5 s).
#[tokio::test]
async fn a_kept_limiter_keeps_pruning_idle_clients() {
    // A bucket refills in 100 ms: an idle client is forgotten at the next pruning.
    let quota = "[rate_limit]\nrequests_per_second = 1000\nburst = 100\n";
    let Reloadable {
        _net,
        nodes: _nodes,
        named,
        path,
        gw,
    } = reloadable("reload-prune", 1, 1, quota).await;
    assert_eq!(height(&gw.url()).await.status, 200);
    let limiter = gw.limiter().unwrap();
    assert_eq!(limiter.tracked(), 1);
    // Another admin key: the limiter is kept.
    let text = config_text(&named, quota).replace(ADMIN_KEY, "another-admin-key-0123456789");
    write(&path, &text);
    let report = gw.reload().await.unwrap();
    assert_eq!(report.changed, vec!["admin".to_string()]);
    assert!(Arc::ptr_eq(&limiter, &gw.limiter().unwrap()));
    assert!(
        eventually(Duration::from_secs(60), || limiter.tracked() == 0).await,
        "the kept limiter stopped pruning after the reload"
    );
    gw.shutdown().await;
}

/// A reload that changes a method (its depth limit, its timeout) keeps the quotas: a call's cost is
/// read as it is charged, so only a new dearest cost (a local share's floor) rebuilds the limiter.
#[tokio::test]
async fn a_method_change_keeps_the_quotas_and_a_new_dearest_cost_rebuilds_them() {
    let quota = "[rate_limit]\nrequests_per_second = 1\nburst = 100\n";
    let Reloadable {
        _net,
        nodes: _nodes,
        named,
        path,
        gw,
    } = reloadable("reload-methods", 1, 1, quota).await;
    assert_eq!(height(&gw.url()).await.status, 200);
    let limiter = gw.limiter().unwrap();
    let depth = format!(
        "{quota}[methods.\"platform.getAllValidatorsAt\"]\nmax_depth = 1000\n\
         [methods.\"platform.getHeight\"]\ntimeout = \"3s\"\n"
    );
    write(&path, &config_text(&named, &depth));
    let report = gw.reload().await.unwrap();
    assert_eq!(report.changed, vec!["methods".to_string()]);
    assert!(
        Arc::ptr_eq(&limiter, &gw.limiter().unwrap()),
        "the quotas were refilled"
    );
    let dearer = format!("{depth}[methods.\"platform.getBalance\"]\ncost = 50\n");
    write(&path, &config_text(&named, &dearer));
    gw.reload().await.unwrap();
    assert!(!Arc::ptr_eq(&limiter, &gw.limiter().unwrap()));
    gw.shutdown().await;
}

#[tokio::test]
async fn the_cache_survives_a_reload_but_not_a_changed_cache_rule() {
    let Reloadable {
        _net,
        nodes,
        named,
        path,
        gw,
    } = reloadable("reload-cache", 1, 1, NO_LIMITS).await;
    let url = format!("{}/ext/info", gw.url());
    let fee = call("info.getTxFee", "{}");
    let id = call("info.getNetworkID", "{}");
    for body in [&fee, &id] {
        post(&url, body).await;
        assert_eq!(post(&url, body).await.header("x-cache"), Some("HIT"));
    }
    // A reload with another cache rule for getTxFee drops its answers only.
    let rule = format!("{NO_LIMITS}\n[methods.\"info.getTxFee\"]\ncache = \"never\"\n");
    write(&path, &config_text(&named, &rule));
    let report = gw.reload().await.unwrap();
    assert!(
        report.changed.contains(&"methods".to_string()),
        "{report:?}"
    );
    assert_eq!(post(&url, &id).await.header("x-cache"), Some("HIT"));
    let before = nodes[0].control().call_count("info.getTxFee");
    let r = post(&url, &fee).await;
    assert_eq!(r.status, 200);
    assert_ne!(r.header("x-cache"), Some("HIT"));
    assert_eq!(nodes[0].control().call_count("info.getTxFee"), before + 1);
    gw.shutdown().await;
}

/// Up to 1,000 calls in flight at once (every node holds its answers until the test lets them go)
/// while the file changes ten times: a node removed with calls on it and added back, attempts,
/// body limits and quotas changed. Every call answers 200 with its own id.
///
/// Nothing here depends on the machine's speed: the calls are all at the nodes (counted by the
/// gateway) before the first reload, and answered only after the last. Each call holds four file
/// descriptors in this process (client, gateway, node connection, node's socket), so the test
/// raises its own limit and makes as many calls as half that limit allows, at most 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_calls_in_flight_during_ten_reloads_all_succeed() {
    // Half of what the process may open: the other tests of the binary run beside this one.
    let open_files = support::raise_fd_limit();
    let calls_wanted = (open_files.saturating_sub(256) / 2 / 4).clamp(50, 1000);
    let (_net, nodes) = devnodes(12345, 3, Duration::from_millis(100)).await;
    let named = nodes_named(&nodes);
    let path = config_file("reload-load");
    // Held calls wait as long as the test needs: the deadline is not what is tested here.
    let slow_checks = "[health]\ninterval = \"1s\"\ntimeout = \"1s\"\n";
    let text = |upstreams: &[(&str, String)], round: usize| {
        let limits = format!(
            "body_bytes = {}\nrequest_deadline = \"300s\"\n",
            1_048_576 + round * 1024
        );
        let extra = format!(
            "{NO_CACHE}\n[upstream]\nmax_attempts = {}\nrequest_timeout = \"300s\"\n",
            2 + round % 2
        );
        config_text_with(upstreams, &limits, &extra).replace(
            &format!("[health]\ninterval = \"{HEALTH_INTERVAL_MS}ms\"\ntimeout = \"{HEALTH_INTERVAL_MS}ms\"\n"),
            slow_checks,
        )
    };
    write(&path, &text(&named, 0));
    let gw = gateway_from(&path).await;
    let url = format!("{}/ext/bc/P", gw.url());
    // The pool knows every node before the nodes start holding (their checks hang from then on).
    let pool = gw.pool().clone();
    assert!(
        eventually(Duration::from_secs(30), || pool
            .status()
            .upstreams
            .iter()
            .all(|u| u.takes_traffic))
        .await,
        "{:?}",
        pool.status()
    );
    for node in &nodes {
        node.control().update_faults(|f| f.hang = true);
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let mut calls = tokio::task::JoinSet::new();
    for id in 0..calls_wanted {
        let (url, client) = (url.clone(), client.clone());
        calls.spawn(async move {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"platform.getHeight","params":{{}}}}"#
            );
            let r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let r = match r {
                Ok(r) => r,
                Err(e) => return Err(format!("{id}: {e}")),
            };
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if status == 200 && v["id"] == id && v.get("result").is_some() {
                Ok(())
            } else {
                Err(format!("{id}: {status} {text}"))
            }
        });
    }
    // Every call is at a node before the first reload.
    let in_flight = || {
        let m = String::from_utf8_lossy(&gw.metrics().render()).to_string();
        m.lines()
            .filter(|l| l.starts_with("snowgate_upstream_in_flight{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    assert!(
        eventually(Duration::from_secs(120), || in_flight() >= calls_wanted).await,
        "the calls never got in flight together: {} of {calls_wanted}",
        in_flight()
    );
    for round in 1..=10 {
        // Rounds 3 to 6 without node-2 (its calls in flight finish), then it comes back.
        let upstreams = if (3..=6).contains(&round) {
            &named[..2]
        } else {
            &named[..]
        };
        write(&path, &text(upstreams, round));
        gw.reload().await.expect("every reload applies");
    }
    assert!(
        calls.try_join_next().is_none(),
        "a call ended before the nodes answered"
    );
    for node in &nodes {
        node.control().update_faults(|f| f.hang = false);
    }
    let mut failures = Vec::new();
    let mut done = 0;
    let finished = tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(r) = calls.join_next().await {
            done += 1;
            if let Err(e) = r.unwrap() {
                failures.push(e);
            }
        }
    })
    .await;
    assert!(finished.is_ok(), "the calls never finished: {done} done");
    assert_eq!(done, calls_wanted);
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let metrics = String::from_utf8_lossy(&gw.metrics().render()).to_string();
    assert!(
        metrics.contains("snowgate_config_reloads_total{result=\"ok\"} 10"),
        "{metrics}"
    );
    gw.shutdown().await;
}

/// The real binary: `SIGHUP` re-reads the file (a node added takes traffic within one health
/// interval of the reload), and `[log] filter` changes what is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_and_its_log_filter() {
    let (_net, nodes) = devnodes(12345, 2, Duration::from_millis(100)).await;
    let named = nodes_named(&nodes);
    let quiet = format!("{NO_CACHE}\n[log]\nfilter = \"warn\"\n");
    let served = support::binary::Served::start_logging(
        &config_text(&named[..1], &quiet).replace("[server]\nlisten = \"127.0.0.1:0\"\n", ""),
        None,
    );
    let url = served.url.clone();
    let r = height(&url).await;
    assert_eq!(r.status, 200, "{} {}", r.body, served.logs());
    assert!(!served.logs().contains(" INFO "), "{}", served.logs());

    let loud = format!("{NO_CACHE}\n[log]\nfilter = \"info\"\n");
    write(&served.config_path(), &config_text(&named, &loud));
    served.signal("HUP");
    let health = format!("{url}/ext/health");
    let mut added = false;
    for _ in 0..100 {
        let r = support::client().get(&health).send().await.unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        let node_1 = v["upstreams"]
            .as_array()
            .and_then(|a| a.iter().find(|u| u["name"] == "node-1").cloned());
        if node_1.is_some_and(|u| u["takesTraffic"] == true) {
            added = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(HEALTH_INTERVAL_MS / 4)).await;
    }
    assert!(added, "node-1 never took traffic: {}", served.logs());
    nodes[1].control().reset_calls();
    for _ in 0..30 {
        assert_eq!(height(&url).await.status, 200);
    }
    assert!(nodes[1].control().call_count("platform.getHeight") > 0);
    let logs = served.logs();
    assert!(logs.contains("config reloaded"), "{logs}");
    assert!(logs.contains("upstream added: node-1"), "{logs}");
    assert!(
        !logs.contains(&nodes[1].url()),
        "a node address in a reload's log: {logs}"
    );
}

/// An admin whose client gives up on `POST /snowgate/reload` (here while a new node's first check
/// runs into `[health] timeout`) does not cut the reload: it is applied, logged and counted.
#[tokio::test]
async fn a_reload_whose_caller_leaves_is_applied_whole() {
    let (_net, nodes) = devnodes(12345, 1, Duration::from_millis(100)).await;
    // Accepts and never answers: its first check takes the whole health timeout.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_url = format!("http://{}", hole.local_addr().unwrap());
    let path = config_file("reload-leave");
    let named = nodes_named(&nodes);
    write(&path, &config_text(&named, NO_LIMITS));
    let gw = gateway_from(&path).await;
    let mut both = named.clone();
    both.push(("hole", hole_url));
    write(&path, &config_text(&both, NO_LIMITS));
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let r = impatient
        .post(format!("{}/snowgate/reload", gw.url()))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await;
    assert!(r.is_err(), "the reload answered within 50 ms: {r:?}");
    assert!(
        eventually(Duration::from_secs(60), || gw
            .pool()
            .status()
            .upstreams
            .len()
            == 2)
        .await,
        "the reload was cut when its caller left"
    );
    let metrics = String::from_utf8_lossy(&gw.metrics().render()).to_string();
    assert!(
        metrics.contains("snowgate_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    drop(hole);
    gw.shutdown().await;
}
