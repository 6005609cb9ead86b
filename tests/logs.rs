//! What snowgate writes to its log, read from the real binary's stderr.
#![allow(clippy::unwrap_used)]

use crate::support;

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
        served.logged("snowgate listening", std::time::Duration::from_secs(5)),
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
        served.logged("snowgate listening", std::time::Duration::from_secs(5)),
        "{}",
        served.logs()
    );
    let logs = served.logs();
    assert!(!logs.contains('\u{1b}'), "{logs}");
    assert!(serde_json::from_str::<serde_json::Value>(logs.lines().next().unwrap()).is_err());
}

/// `[log] access = true`: one line per client request with its id, client, method (or `batch`
/// and its count), status, cache result, upstream and duration; never params, never keys. Every
/// request is also measured in `snowgate_request_duration_seconds{method,cache}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_one_line_per_request_and_no_secret() {
    let node = DevNode::spawn(DevNodeConfig::default()).await.unwrap();
    let key = support::ADMIN_KEY;
    let config = format!(
        "[log]\naccess = true\nformat = \"json\"\n[admin]\napi_keys = [\"{key}\"]\n[rate_limit]\nenabled = false\n[[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = Served::start(&config, "info");
    let url = format!("{}/ext/bc/P", served.url);
    let secret_param = "0xsecretparamvalue";
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"platform.getBalance","params":{{"addresses":["P-{secret_param}"]}}}}"#
    );
    let auth = format!("Bearer {key}");
    let r = support::post_with(
        &url,
        &body,
        &[("authorization", &auth), ("x-request-id", "acc-1")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(&url, &call("platform.getHeight", "{}")).await;
    assert_eq!(r.status, 200);
    let r = post(&url, &call("platform.getHeight", "{}")).await;
    assert_eq!(r.header("x-cache"), Some("HIT"));
    let batch = format!(
        "[{},{}]",
        call("platform.getHeight", "{}"),
        call("info.getNetworkID", "{}")
    );
    let r = post(&url, &batch).await;
    assert_eq!(r.status, 200);
    // Refused by the router before any call was read (415), and a request that is no call.
    let r = support::client()
        .post(&url)
        .header("content-type", "text/plain")
        .header("x-request-id", "acc-415")
        .body(call("platform.getHeight", "{}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    support::get_text(&format!("{}/ext/health/liveness", served.url)).await;
    let access = |logs: &str| -> Vec<serde_json::Value> {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "snowgate::access")
            .collect()
    };
    assert!(
        support::eventually(std::time::Duration::from_secs(5), || access(&served.logs())
            .len()
            >= 6)
        .await,
        "{}",
        served.logs()
    );
    let lines = access(&served.logs());
    let first = &lines[0]["fields"];
    assert_eq!(first["request_id"], "acc-1", "{first}");
    assert_eq!(first["method"], "platform.getBalance");
    assert_eq!(first["status"], 200);
    assert_eq!(first["client"], "127.0.0.1");
    assert_eq!(first["upstream"], "n");
    assert_eq!(first["calls"], 1);
    assert!(first["duration_ms"].as_f64().is_some(), "{first}");
    // A miss names the node that answered it; a hit none.
    assert_eq!(lines[1]["fields"]["cache"], "MISS", "{}", lines[1]);
    assert_eq!(lines[1]["fields"]["upstream"], "n", "{}", lines[1]);
    assert_eq!(lines[2]["fields"]["cache"], "HIT");
    assert_eq!(lines[2]["fields"]["upstream"], "-", "{}", lines[2]);
    assert_eq!(lines[3]["fields"]["method"], "batch");
    assert_eq!(lines[3]["fields"]["calls"], 2);
    let refused = &lines[4]["fields"];
    assert_eq!(
        (
            &refused["request_id"],
            &refused["status"],
            &refused["method"]
        ),
        (&"acc-415".into(), &415.into(), &"-".into()),
        "{refused}"
    );
    assert_eq!(lines[5]["fields"]["status"], 200, "{}", lines[5]);
    assert_eq!(lines.len(), 6, "one line per request: {lines:?}");
    let logs = served.logs();
    assert!(!logs.contains(secret_param), "params in the log");
    assert!(!logs.contains(key), "a key in the log");
    let metrics = support::get_metrics(&served.url).await;
    assert!(
        metrics.contains(
            r#"snowgate_request_duration_seconds_count{cache="HIT",method="platform.getHeight"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"snowgate_request_duration_seconds_count{cache="-",method="batch"} 1"#),
        "{metrics}"
    );
    // The 415 and the liveness probe (the /metrics scrape is measured after it is written).
    assert!(
        metrics.contains(r#"snowgate_request_duration_seconds_count{cache="-",method="-"} 2"#),
        "{metrics}"
    );
}
