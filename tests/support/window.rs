//! The operator's window from a test: a gateway with an admin listener, a request with or
//! without the admin key, the status JSON and one upstream's row in it.

use serde_json::Value;
use snowgate::config::Config;

/// Gives the gateway an admin listener on 127.0.0.1:0.
pub fn with_admin_listener(config: &mut Config) {
    config.admin.listen = Some("127.0.0.1:0".parse().unwrap());
}

/// `method url` with an optional bearer key: (status, content type, body).
pub async fn ask(method: &str, url: &str, key: Option<&str>) -> (u16, String, String) {
    let mut req = super::client().request(method.parse().unwrap(), url);
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, kind, r.text().await.unwrap())
}

/// `GET base/snowgate/status.json`, parsed (the test fails unless it is a 200).
pub async fn status_json(base: &str, key: Option<&str>) -> Value {
    let (status, _, body) = ask("GET", &format!("{base}/snowgate/status.json"), key).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The row of the upstream `name` in a status JSON.
pub fn row<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("no row for {name}: {status}"))
}
