//! What a client writes never forges a log line: its request id is kept only when it is a short
//! token, and every client-supplied value is logged quoted.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use snowgate::devnode::{DevNode, DevNodeConfig};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_request_ids_are_kept_only_as_short_tokens_and_logged_quoted() {
    let node = DevNode::spawn(DevNodeConfig::default()).await.unwrap();
    let config = format!(
        "[rate_limit]\nenabled = false\n[[upstreams]]\nname = \"n\"\nurl = \"{}\"\n",
        node.url()
    );
    let served = binary::Served::start(&config, "snowgate=debug");
    let url = format!("{}/ext/bc/P", served.url);
    let body = call("platform.getHeight", "{}");

    // A token is kept, echoed, and logged quoted.
    let r = post_with(&url, &body, &[("x-request-id", "trace-42:a_b.c")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("trace-42:a_b.c"));

    // Anything else is replaced by an id of snowgate's own.
    let forged = "x level=ERROR forged=yes";
    let long = "a".repeat(129);
    let odd = "ok\"quote";
    for bad in [forged, long.as_str(), odd] {
        let r = post_with(&url, &body, &[("x-request-id", bad)]).await;
        assert_eq!(r.status, 200);
        let id = r.header("x-request-id").unwrap();
        assert_ne!(id, bad);
        assert!(!id.is_empty() && id.len() <= 128, "{id}");
    }
    // A method name with quotes and spaces, refused, is logged quoted as a whole.
    let r = post(
        &url,
        r#"{"jsonrpc":"2.0","id":1,"method":"x\" level=ERROR forged=yes"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32601);

    assert!(
        eventually(Duration::from_secs(60), || served
            .logs()
            .contains("forged=yes"))
        .await,
        "{}",
        served.logs()
    );
    let logs = served.logs();
    assert!(logs.contains(r#""trace-42:a_b.c""#), "{logs}");
    assert!(
        !logs.contains(forged),
        "a forged request id was logged:\n{logs}"
    );
    assert!(!logs.contains(&long), "a long request id was logged");
    for line in logs.lines().filter(|l| l.contains("forged=yes")) {
        // Only inside a quoted value, with its quote escaped.
        assert!(line.contains(r#"\\\" level=ERROR forged=yes"#), "{line}");
    }
}
