//! What snowgate writes to its log, read from the real binary's stderr.
#![allow(clippy::unwrap_used)]

mod support;

use snowgate::devnode::{DevNode, DevNodeConfig};
use support::{binary::Served, call, post};

/// `[log] format = "json"`: every line is one JSON object with a timestamp, a level, a target and
/// the event's fields; nothing else reaches stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let node = DevNode::spawn(DevNodeConfig::default()).await.unwrap();
    let config = format!(
        "[log]\nformat = \"json\"\n[rate_limit]\nenabled = false\n[[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = Served::start(&config, "info");
    let r = post(
        &format!("{}/ext/bc/P", served.url),
        &call("platform.getHeight", "{}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        support::eventually(std::time::Duration::from_secs(5), || served
            .logs()
            .contains("snowgate listening"))
        .await,
        "{}",
        served.logs()
    );
    let logs = served.logs();
    let lines: Vec<&str> = logs.lines().collect();
    assert!(!lines.is_empty());
    let mut listening = false;
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
        assert!(v["timestamp"].is_string(), "{line}");
        assert!(v["level"].is_string(), "{line}");
        assert!(
            v["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("snowgate")),
            "{line}"
        );
        assert!(v["fields"]["message"].is_string(), "{line}");
        if v["fields"]["message"] == "snowgate listening" {
            listening = v["fields"]["addr"].is_string();
        }
    }
    assert!(listening, "{logs}");
    assert!(!logs.contains('\u{1b}'), "colour codes in a file: {logs}");
}

/// The default text format writes no colour codes when stderr is not a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_have_no_colour_in_a_file() {
    let node = DevNode::spawn(DevNodeConfig::default()).await.unwrap();
    let config = format!(
        "[rate_limit]\nenabled = false\n[[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = Served::start(&config, "info");
    // The listening line reaches stdout (which `start` waits for) just before stderr.
    assert!(
        support::eventually(std::time::Duration::from_secs(5), || served
            .logs()
            .contains("snowgate listening"))
        .await,
        "{}",
        served.logs()
    );
    let logs = served.logs();
    assert!(!logs.contains('\u{1b}'), "{logs}");
    assert!(serde_json::from_str::<serde_json::Value>(logs.lines().next().unwrap()).is_err());
}
