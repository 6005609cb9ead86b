//! A node's state changes in the real binary's log (text and JSON) and in `/metrics`: down at
//! start, back, lagging behind the pool and in sync again, each one line `upstream state changed`
//! with the node's name, its new state and why, and one count of
//! `snowgate_upstream_state_changes_total`.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::binary::Served;

/// Fast checks (and, with blocks every 100 ms, a frozen node lags within a few checks); three
/// failures in a row to take a node out, so a busy machine's slow check does not (a node down at
/// start is out at its first).
const HEALTH: &str = "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\nmax_lag_blocks = 2\nfailure_threshold = 3\nrecovery_threshold = 1\n";

fn config(nodes: &[snowgate::devnode::DevNode], extra: &str) -> String {
    let mut c = format!(
        "{extra}[admin]\napi_keys = [\"{}\"]\n[rate_limit]\nenabled = false\n{HEALTH}",
        support::ADMIN_KEY
    );
    for (i, n) in nodes.iter().enumerate() {
        c.push_str(&format!(
            "[[upstreams]]\nname = \"node-{i}\"\nurl = \"{}\"\n",
            n.url()
        ));
    }
    c
}

/// The text lines of state changes of `node`.
fn changes(logs: &str, node: &str) -> Vec<String> {
    logs.lines()
        .filter(|l| l.contains("upstream state changed"))
        .filter(|l| l.contains(&format!("upstream={node} ")))
        .map(str::to_string)
        .collect()
}

/// The first line of `node`'s changes that contains every one of `parts`, within 10 s.
async fn wait_line(served: &Served, node: &str, parts: &[&str]) -> String {
    let found = |logs: &str| {
        changes(logs, node)
            .into_iter()
            .find(|l| parts.iter().all(|p| l.contains(p)))
    };
    support::eventually(Duration::from_secs(60), || found(&served.logs()).is_some()).await;
    let logs = served.logs();
    found(&logs).unwrap_or_else(|| panic!("no line of {node} with {parts:?} in:\n{logs}"))
}

/// The number after `name=` in a text line.
fn number(line: &str, name: &str) -> u64 {
    let at = line
        .find(&format!(" {name}="))
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    line[at + name.len() + 2..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a plain number in {line}"))
}

/// A node down at start says so (with its fault), comes back; a frozen node lags (its height
/// and the best) and catches up; each change counted in `/metrics`; no address in any line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_lagging_and_back_is_one_line_each() {
    let (_net, nodes) = support::devnodes(1, 3, Duration::from_millis(100)).await;
    nodes[2].control().go_down().await;
    let served = Served::start(&config(&nodes, ""), "info");

    let down = wait_line(&served, "node-2", &["state=unhealthy"]).await;
    assert!(down.contains("reason=\"connect refused\""), "{down}");
    assert!(down.contains("WARN"), "{down}");
    assert!(
        !down.contains("height"),
        "never answered: no height: {down}"
    );
    nodes[2].control().come_up().await.unwrap();
    let back = wait_line(&served, "node-2", &["state=healthy"]).await;
    assert!(back.contains("reason=\"recovered\""), "{back}");
    number(&back, "height");

    // Healthy at the first check: joined.
    let joined = wait_line(&served, "node-0", &["state=healthy"]).await;
    assert!(joined.contains("reason=\"joined\""), "{joined}");

    nodes[1].control().freeze();
    let lagging = wait_line(&served, "node-1", &["state=lagging"]).await;
    assert!(lagging.contains("reason=\"lag\""), "{lagging}");
    let (height, best) = (number(&lagging, "height"), number(&lagging, "best"));
    assert!(height + 2 < best, "{lagging}");
    nodes[1].control().unfreeze();
    let in_sync = wait_line(&served, "node-1", &["state=in_sync"]).await;
    assert!(
        number(&in_sync, "height") + 2 >= number(&in_sync, "best"),
        "{in_sync}"
    );
    // One line per change: node-1 lagged once and caught up once, node-2 was down once.
    let logs = served.logs();
    let count = |node: &str, state: &str| {
        changes(&logs, node)
            .iter()
            .filter(|l| l.contains(&format!("state={state} ")))
            .count()
    };
    assert_eq!(count("node-1", "lagging"), 1, "{logs}");
    assert_eq!(count("node-1", "in_sync"), 1, "{logs}");
    assert_eq!(count("node-2", "unhealthy"), 1, "{logs}");
    for node in &nodes {
        for line in logs
            .lines()
            .filter(|l| l.contains("upstream state changed"))
        {
            assert!(
                !line.contains(&node.addr().to_string()),
                "an address: {line}"
            );
        }
    }
    assert!(!logs.contains("Some("), "{logs}");

    let metrics = support::get_metrics(&served.url).await;
    for series in [
        "snowgate_upstream_state_changes_total{reason=\"connect refused\",to=\"unhealthy\",upstream=\"node-2\"} 1",
        "snowgate_upstream_state_changes_total{reason=\"recovered\",to=\"healthy\",upstream=\"node-2\"} 1",
        "snowgate_upstream_state_changes_total{reason=\"joined\",to=\"healthy\",upstream=\"node-0\"} 1",
        "snowgate_upstream_state_changes_total{reason=\"lag\",to=\"lagging\",upstream=\"node-1\"} 1",
        "snowgate_upstream_state_changes_total{reason=\"lag\",to=\"in_sync\",upstream=\"node-1\"} 1",
    ] {
        assert!(metrics.contains(series), "no {series} in:\n{metrics}");
    }
}

/// `[log] format = "json"`: the same changes as objects, `fields.upstream`, `fields.state`,
/// `fields.reason`, and the height a number (absent while unknown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_state_changes_are_objects_with_fields() {
    let (_net, nodes) = support::devnodes(1, 2, Duration::from_millis(100)).await;
    nodes[1].control().go_down().await;
    let served = Served::start(&config(&nodes, "[log]\nformat = \"json\"\n"), "info");
    let changes = |state: &str| -> Option<serde_json::Value> {
        served.logs().lines().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let f = &v["fields"];
            (f["message"] == "upstream state changed"
                && f["upstream"] == "node-1"
                && f["state"] == state)
                .then_some(v)
        })
    };
    support::eventually(Duration::from_secs(60), || changes("unhealthy").is_some()).await;
    let down = changes("unhealthy").unwrap_or_else(|| panic!("{}", served.logs()));
    assert_eq!(down["level"], "WARN", "{down}");
    assert_eq!(down["fields"]["reason"], "connect refused", "{down}");
    assert!(down["fields"].get("height").is_none(), "{down}");

    nodes[1].control().come_up().await.unwrap();
    support::eventually(Duration::from_secs(60), || changes("healthy").is_some()).await;
    let back = changes("healthy").unwrap_or_else(|| panic!("{}", served.logs()));
    assert_eq!(back["fields"]["reason"], "recovered", "{back}");
    assert!(back["fields"]["height"].is_u64(), "{back}");
}

/// A node taken out by failed requests says so (`by="requests"`, the fault); a reload's nodes
/// say they were removed or added (then joined).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejected_by_requests_and_a_reload_are_lines_too() {
    let (_net, nodes) = support::devnodes(1, 2, Duration::from_millis(100)).await;
    // Checks far apart: only requests can take the node out within the test.
    let config = |upstreams: &[(&str, &snowgate::devnode::DevNode)]| {
        let mut c = "[rate_limit]\nenabled = false\n[health]\ninterval = \"30s\"\npassive_failures = 1\n[cache]\nenabled = false\n".to_string();
        for (name, node) in upstreams {
            c.push_str(&format!(
                "[[upstreams]]\nname = \"{name}\"\nurl = \"{}\"\n",
                node.url()
            ));
        }
        c
    };
    let served = Served::start(
        &config(&[("node-0", &nodes[0]), ("node-1", &nodes[1])]),
        "info",
    );
    wait_line(&served, "node-1", &["state=healthy", "reason=\"joined\""]).await;
    nodes[1].control().go_down().await;
    for _ in 0..50 {
        let r = support::post(
            &format!("{}/ext/bc/P", served.url),
            &support::call("platform.getHeight", "{}"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let logs = served.logs();
        if changes(&logs, "node-1")
            .iter()
            .any(|l| l.contains("state=unhealthy"))
        {
            break;
        }
    }
    let out = wait_line(&served, "node-1", &["state=unhealthy"]).await;
    assert!(out.contains("by=\"requests\""), "{out}");
    // A call on a kept-alive connection the node dropped as it went, or a new one it refused.
    assert!(
        out.contains("reason=\"connect refused\"") || out.contains("reason=\"connection lost\""),
        "{out}"
    );
    number(&out, "height");

    let text = config(&[("node-0", &nodes[0]), ("node-9", &nodes[0])]);
    let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n{text}");
    std::fs::write(served.config_path(), text).unwrap();
    served.signal("HUP");
    let removed = wait_line(&served, "node-1", &["state=removed"]).await;
    assert!(removed.contains("reason=\"reload\""), "{removed}");
    wait_line(&served, "node-9", &["state=added", "reason=\"reload\""]).await;
    wait_line(&served, "node-9", &["state=healthy", "reason=\"joined\""]).await;
}

/// The shared tier's Redis going down and coming back: one `shared tier: Redis down` line (with
/// why) and one `shared tier: Redis up` each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_tier_says_down_and_up() {
    let (_net, nodes) = support::devnodes(1, 1, Duration::from_millis(100)).await;
    let mut redis = support::redis::RedisServer::start();
    let url = redis.url();
    let served = Served::start(
        &config(&nodes, &format!("[redis]\nurl = \"{url}\"\n")),
        "info",
    );
    let count = |what: &str| served.logs().lines().filter(|l| l.contains(what)).count();
    assert!(
        support::eventually(Duration::from_secs(60), || count("shared tier: Redis up")
            == 1)
        .await,
        "{}",
        served.logs()
    );
    redis.kill();
    assert!(
        support::eventually(Duration::from_secs(60), || count("shared tier: Redis down")
            == 1)
        .await,
        "{}",
        served.logs()
    );
    let down = served
        .logs()
        .lines()
        .find(|l| l.contains("shared tier: Redis down"))
        .map(str::to_string)
        .unwrap();
    assert!(down.contains("reason="), "{down}");
    redis.restart();
    assert!(
        support::eventually(Duration::from_secs(60), || count("shared tier: Redis up")
            == 2)
        .await,
        "{}",
        served.logs()
    );
    assert_eq!(count("shared tier: Redis down"), 1, "{}", served.logs());
}

/// A node on another network than `[network] id` says so at error, with what it reported and
/// what was expected, counted with reason `network`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_another_network_is_an_error_line() {
    let (_main, mut nodes) = support::devnodes(1, 1, Duration::from_millis(100)).await;
    let (_fuji, fuji) = support::devnodes(5, 1, Duration::from_millis(100)).await;
    nodes.extend(fuji);
    let served = Served::start(&config(&nodes, "[network]\nid = 1\n"), "info");
    let line = wait_line(&served, "node-1", &["state=network_mismatch"]).await;
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("reason=\"network\""), "{line}");
    assert_eq!(
        (number(&line, "reported"), number(&line, "expected")),
        (5, 1),
        "{line}"
    );
    let logs = served.logs();
    assert!(
        changes(&logs, "node-0")
            .iter()
            .all(|l| !l.contains("network")),
        "{logs}"
    );
    // It answers well, but it never joined the pool.
    assert!(
        changes(&logs, "node-1")
            .iter()
            .all(|l| !l.contains("joined")),
        "{logs}"
    );
    let metrics = support::get_metrics(&served.url).await;
    let series = "snowgate_upstream_state_changes_total{reason=\"network\",to=\"network_mismatch\",upstream=\"node-1\"} 1";
    assert!(metrics.contains(series), "no {series} in:\n{metrics}");
}
