//! The control endpoint, under `/_devnode` (outside `/ext`, so it can never collide with a node
//! route): it lets a test or an operator read and change a running devnode's faults and call
//! counts over HTTP, and take it down for a while. It is served before the node's stack: faults,
//! the host filter and the bootstrapping gate never apply to it.
//!
//! | request | answer |
//! |---|---|
//! | `GET /_devnode` | status: node ID, address, heights, faults, total calls |
//! | `GET /_devnode/faults` | the [`Faults`] in force |
//! | `PUT`/`POST /_devnode/faults` | merge a (partial) JSON object into them; answers the result |
//! | `DELETE /_devnode/faults` | clear every fault |
//! | `GET /_devnode/version` | `{"version":"v1.14.2"}`, the release the node plays |
//! | `PUT`/`POST /_devnode/version` | `{"version":"v1.13.0"}`: play that release from now on (an upgrade in place) |
//! | `GET /_devnode/calls` | `{"total":N,"calls":{"method":n,...}}` |
//! | `DELETE /_devnode/calls` | reset the counts |
//! | `POST /_devnode/down?for=2s` | go down (listener closed, connections dropped) ~100 ms after answering 202, come back up on the same port after the duration |

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::json;

use super::reply::{self, Resp};
use super::{Control, Faults};

/// The path prefix of the control endpoint.
pub const PREFIX: &str = "/_devnode";

/// How long the node keeps answering after accepting a `down` request, so the 202 reaches the
/// client before the connection is dropped.
const DOWN_GRACE: Duration = Duration::from_millis(100);

/// Whether `path` belongs to the control endpoint.
pub fn is_control(path: &str) -> bool {
    path.strip_prefix(PREFIX)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Serves one control request.
pub async fn serve(control: &Control, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET, PREFIX) => ok(&control.status()),
        (Method::GET, "/_devnode/faults") => ok(&control.faults()),
        (Method::PUT | Method::POST, "/_devnode/faults") => {
            let body = match read_json(req).await {
                Ok(v) => v,
                Err(e) => return bad_request(&e),
            };
            match control.faults().merged(&body) {
                Ok(faults) => {
                    control.set_faults(faults);
                    ok(&control.faults())
                }
                Err(e) => bad_request(&e),
            }
        }
        (Method::DELETE, "/_devnode/faults") => {
            control.set_faults(Faults::default());
            ok(&control.faults())
        }
        (Method::GET, "/_devnode/version") => ok(&version_json(control)),
        (Method::PUT | Method::POST, "/_devnode/version") => {
            let body = match read_json(req).await {
                Ok(v) => v,
                Err(e) => return bad_request(&e),
            };
            let Some(text) = body.get("version").and_then(|v| v.as_str()) else {
                return bad_request("give the release as {\"version\":\"v1.14.0\"}");
            };
            match text.parse() {
                Ok(version) => {
                    control.set_version(version);
                    ok(&version_json(control))
                }
                Err(e) => bad_request(&format!("{e}")),
            }
        }
        (Method::GET, "/_devnode/calls") => ok(&calls_json(control)),
        (Method::DELETE, "/_devnode/calls") => {
            control.reset_calls();
            ok(&calls_json(control))
        }
        (Method::POST, "/_devnode/down") => down(control, &query),
        (
            _,
            "/_devnode" | "/_devnode/faults" | "/_devnode/version" | "/_devnode/calls"
            | "/_devnode/down",
        ) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
        _ => error(StatusCode::NOT_FOUND, "no such control path"),
    }
}

fn down(control: &Control, query: &str) -> Resp {
    let Some(value) = query.split('&').find_map(|kv| kv.strip_prefix("for=")) else {
        return bad_request("give the down time as ?for=<duration>, e.g. ?for=2s");
    };
    let duration = match humantime::parse_duration(value) {
        Ok(d) => d,
        Err(e) => return bad_request(&format!("for={value}: {e}")),
    };
    let control = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(DOWN_GRACE).await;
        control.go_down().await;
        tokio::time::sleep(duration).await;
        if let Err(e) = control.come_up().await {
            tracing::warn!(error = %e, addr = %control.addr(), "devnode could not come back up");
        }
    });
    let mut r = json_resp(
        StatusCode::ACCEPTED,
        &json!({ "down_for": humantime::format_duration(duration).to_string() }),
    );
    // This connection is about to be dropped: tell the client not to reuse it.
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

fn version_json(control: &Control) -> serde_json::Value {
    json!({ "version": control.version().to_string() })
}

fn calls_json(control: &Control) -> serde_json::Value {
    json!({ "total": control.total_calls(), "calls": control.calls() })
}

async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, String> {
    let body = Limited::new(req.into_body(), 1 << 20)
        .collect()
        .await
        .map_err(|e| format!("reading the body: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("the body is not JSON: {e}"))
}

fn ok(value: &impl serde::Serialize) -> Resp {
    json_resp(StatusCode::OK, value)
}

fn bad_request(msg: &str) -> Resp {
    error(StatusCode::BAD_REQUEST, msg)
}

fn error(status: StatusCode, msg: &str) -> Resp {
    json_resp(status, &json!({ "error": msg }))
}

fn json_resp(status: StatusCode, value: &impl serde::Serialize) -> Resp {
    let mut body = serde_json::to_vec(value).unwrap_or_else(|e| e.to_string().into_bytes());
    body.push(b'\n');
    reply::json(status, Bytes::from(body), "application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_paths() {
        assert!(is_control("/_devnode"));
        assert!(is_control("/_devnode/faults"));
        assert!(!is_control("/_devnodes"));
        assert!(!is_control("/ext/_devnode"));
    }
}
