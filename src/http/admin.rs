//! snowgate's own endpoints beside the RPC paths: the pool's health as a load balancer reads it
//! (`GET /ext/health`, and `/ext/health/health`, `/ext/health/readiness` by any method, as on a
//! node), liveness (`/ext/health/liveness`, any method), the node's health API over JSON-RPC
//! (`POST /ext/health`: `health.health`, `health.readiness`, `health.liveness`), Prometheus
//! metrics (`GET /metrics`), the status page and its JSON ([`super::status`]), and the admin's
//! actions: the cache purge (`POST /snowgate/cache/purge[?method=NAME]`), a reload
//! (`POST /snowgate/reload`) and cordons (`POST /snowgate/upstreams/NAME/cordon|uncordon`).
//!
//! Who may read what ([`Access`]): the health endpoints are everyone's, on every listener. The
//! operator's pages (metrics, status) are served without a key on the admin listener
//! (`[admin] listen`) to a request that names it by an address or `localhost` and comes from no
//! other origin's page (another name or origin needs the key: it may be a web page in the
//! operator's browser reading the listener), and on the public port
//! only when there is no admin listener, and then only with the admin key (the status page's HTML, which holds no data, loads without one and asks
//! for it). The actions always need the admin key. With an admin listener, everything but health
//! answers 404 on the public port, as if it did not exist.
//!
//! `POST /ext/health` is what avalanchego's Go `health.Client` calls: snowgate answers it itself
//! from the pool's state, never from a node, in the node's format (`{"checks":{...},
//! "healthy":bool}`, always HTTP 200, envelope and method-name errors as a node words them). The
//! router reads its body within the RPC limits and charges the caller's quota first.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use tokio::sync::Semaphore;

use super::status::{Facts, StatusBoard, PAGE, STATUS_JSON_PATH, STATUS_PATH, UPSTREAMS_PREFIX};
use super::{empty, json, HttpResponse, Surface};
use crate::cache::AnswerCache;
use crate::error::ProxyError;
use crate::jsonrpc::names::{self, LookupError};
use crate::jsonrpc::{self as rpc, response, Json, Verdict};
use crate::methods::Registry;
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::upstream::Pool;

/// The admin endpoint that purges the answer cache (`?method=NAME` for one method).
pub const PURGE_PATH: &str = "/snowgate/cache/purge";

/// Where an admin asks for the config file to be read again (as `SIGHUP` does).
pub const RELOAD_PATH: &str = "/snowgate/reload";

/// One of snowgate's own endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/ext/health`: snowgate's JSON on GET; on POST the JSON-RPC health API, which the router
    /// reads and hands to [`Admin::health_rpc`].
    Health,
    /// `/ext/health/health` and `/ext/health/readiness`: the GET answer, by any method.
    HealthGet,
    /// `/ext/health/liveness`, by any method.
    Liveness,
    Metrics,
    Purge,
    /// `POST /snowgate/reload`.
    Reload,
    /// `GET /snowgate/status`: the page.
    Status,
    /// `GET /snowgate/status.json`.
    StatusJson,
    /// `POST /snowgate/upstreams/NAME/cordon` or `/uncordon`.
    Cordon,
}

/// Who may use an endpoint; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Health: anyone, anywhere.
    Probe,
    /// The operator's pages: the admin listener, or the admin key.
    Read,
    /// The operator's actions: the admin key, on the admin listener if there is one.
    Act,
}

impl Endpoint {
    /// The endpoint at `path`, if any.
    pub fn at(path: &str) -> Option<Endpoint> {
        Some(match path {
            "/ext/health" => Endpoint::Health,
            "/ext/health/health" | "/ext/health/readiness" => Endpoint::HealthGet,
            "/ext/health/liveness" => Endpoint::Liveness,
            "/metrics" => Endpoint::Metrics,
            PURGE_PATH => Endpoint::Purge,
            RELOAD_PATH => Endpoint::Reload,
            STATUS_PATH => Endpoint::Status,
            STATUS_JSON_PATH => Endpoint::StatusJson,
            p if p.starts_with(UPSTREAMS_PREFIX) => Endpoint::Cordon,
            _ => return None,
        })
    }

    /// Who may use it.
    pub fn access(self) -> Access {
        match self {
            Endpoint::Health | Endpoint::HealthGet | Endpoint::Liveness => Access::Probe,
            Endpoint::Metrics | Endpoint::Status | Endpoint::StatusJson => Access::Read,
            Endpoint::Purge | Endpoint::Reload | Endpoint::Cordon => Access::Act,
        }
    }
}

/// What the endpoints read: the pool, the cache, the metrics and the drain flag.
pub struct Admin {
    pub(crate) registry: Registry,
    pub(crate) keys: AdminKeys,
    pub(crate) pool: Arc<Pool>,
    pub(crate) cache: Option<Arc<AnswerCache>>,
    pub(crate) metrics: Metrics,
    pub(crate) draining: Arc<AtomicBool>,
    /// The gateway's room for request bodies, and its size, for the buffered-bytes gauge.
    pub(crate) body_room: Arc<Semaphore>,
    pub(crate) total_body_bytes: usize,
    /// The fleet's Redis, for `/ext/health` (`None` without `[redis]`).
    pub(crate) shared: Option<Arc<crate::shared::Shared>>,
    /// The gateway's reload (`None`: started from a config built in code, with no file).
    pub(crate) reload: Option<Arc<dyn crate::call::Reload>>,
    /// The status page's samples (kept by the gateway across reloads).
    pub(crate) board: Arc<StatusBoard>,
    /// The rate limiter in force, for the status page (`None`: rate limiting is off).
    pub(crate) limiter: Option<Arc<crate::ratelimit::Limiter>>,
    /// `[cache] max_bytes`.
    pub(crate) cache_max_bytes: u64,
    /// `[admin] listen` is set: the operator's endpoints live there, not on the public port.
    pub(crate) admin_listener: bool,
    /// `[admin] public_versions`: `/ext/health` names node releases to callers without a key.
    pub(crate) public_versions: bool,
}

/// `/ext/health`'s body: the pool, and the fleet's shared tier when there is one. Redis down does
/// not make the instance unhealthy: it answers without it.
#[derive(serde::Serialize)]
struct Health {
    #[serde(flatten)]
    pool: crate::upstream::PoolStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared: Option<SharedStatus>,
}

#[derive(serde::Serialize)]
struct SharedStatus {
    /// `"up"` while Redis is used, `"down"` while snowgate answers without it.
    redis: &'static str,
}

impl Admin {
    /// Answers `endpoint`; errors are snowgate's own refusals, counted by the router.
    pub async fn serve(
        &self,
        endpoint: Endpoint,
        surface: Surface,
        method: &Method,
        headers: &HeaderMap,
        uri: &http::Uri,
    ) -> Result<HttpResponse, ProxyError> {
        let query = uri.query();
        let admin = || {
            self.keys
                .authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        };
        match (endpoint.access(), surface) {
            (Access::Probe, _) => {}
            (_, Surface::Public) if self.admin_listener => return Err(ProxyError::NotFound),
            // Asked by another name, or from another origin's page, it may be a web page in the
            // operator's browser reading the listener: that needs the key (see [`local_host`]
            // and [`same_origin`]).
            (Access::Read, Surface::Admin)
                if local_host(uri, headers) && same_origin(uri, headers) => {}
            // The page holds no data: it loads, and asks for the key the JSON needs.
            (Access::Read, _) if endpoint == Endpoint::Status => {}
            (Access::Read | Access::Act, _) => {
                if !admin() {
                    return Err(ProxyError::Unauthorized);
                }
            }
        }
        match endpoint {
            // The router answers POST itself (a JSON-RPC body, read within its limits).
            Endpoint::Health if method == Method::POST => Err(ProxyError::WrongHttpMethod {
                allowed: "GET",
                path: "/ext/health",
            }),
            Endpoint::Health | Endpoint::HealthGet => {
                // Releases only to the operator when `public_versions` is off: the admin listener
                // (reached only from where the operator put it) or a caller with the key.
                let versions = self.public_versions || surface == Surface::Admin || admin();
                Ok(self.health(versions))
            }
            Endpoint::Liveness => Ok(liveness()),
            Endpoint::Metrics if method == Method::GET => Ok(self.metrics().await),
            Endpoint::Metrics => Err(ProxyError::NotFound),
            Endpoint::Purge => self.purge(method, headers, query).await,
            Endpoint::Reload => self.reload(method, headers).await,
            Endpoint::Status | Endpoint::StatusJson if method != Method::GET => {
                Err(ProxyError::NotFound)
            }
            Endpoint::Status => Ok(page()),
            Endpoint::StatusJson => Ok(self.status_json().await),
            Endpoint::Cordon => self.cordon(method, uri.path()),
        }
    }

    /// `GET /snowgate/status.json`.
    async fn status_json(&self) -> HttpResponse {
        let pool = self.status();
        let cache = match &self.cache {
            Some(cache) => {
                let usage = cache.usage().await;
                Some((usage.entries, usage.bytes, self.cache_max_bytes))
            }
            None => None,
        };
        let report = self.board.report(Facts {
            pool: &pool,
            best_moved_ms: self.pool.best_moved_ms(),
            cache,
            redis_up: self.shared.as_ref().map(|s| s.available()),
            limiter: self.limiter.as_deref(),
        });
        let mut body = serde_json::to_vec(&report).unwrap_or_default();
        body.push(b'\n');
        let mut r = json(StatusCode::OK, body);
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        // Node versions and names are data: never sniffed into a page.
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        r
    }

    /// `POST /snowgate/upstreams/NAME/cordon` or `/uncordon` (admin key, checked by the caller).
    fn cordon(&self, method: &Method, path: &str) -> Result<HttpResponse, ProxyError> {
        let rest = path.strip_prefix(UPSTREAMS_PREFIX).unwrap_or_default();
        let (name, on) = match rest.rsplit_once('/') {
            Some((name, "cordon")) => (name, true),
            Some((name, "uncordon")) => (name, false),
            _ => return Err(ProxyError::NotFound),
        };
        if method != Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "POST",
                path: "/snowgate/upstreams/NAME/cordon",
            });
        }
        let cordoned = self
            .pool
            .cordon(name, on)
            .ok_or_else(|| ProxyError::NoSuchUpstream(name.to_string()))?;
        tracing::info!(upstream = name, cordoned, "cordon set by an admin");
        let body = serde_json::json!({ "upstream": name, "cordoned": cordoned });
        Ok(json(StatusCode::OK, format!("{body}\n")))
    }

    /// The pool's state; 503 when no node can serve, or while draining (so that a load
    /// balancer stops sending before the listener closes).
    fn health(&self, versions: bool) -> HttpResponse {
        let mut status = self.status();
        if !versions {
            for upstream in &mut status.upstreams {
                upstream.version = None;
            }
        }
        let code = if status.healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let health = Health {
            pool: status,
            shared: self.shared.as_ref().map(|s| SharedStatus {
                redis: if s.available() { "up" } else { "down" },
            }),
        };
        let mut body = serde_json::to_vec(&health).unwrap_or_default();
        body.push(b'\n');
        json(code, body)
    }

    /// The pool's state, unhealthy while draining.
    fn status(&self) -> crate::upstream::PoolStatus {
        let mut status = self.pool.status();
        if self.draining.load(Ordering::Relaxed) {
            status.healthy = false;
            status.draining = true;
        }
        status
    }

    /// Answers a JSON-RPC body sent to `POST /ext/health` as a node's health API does: HTTP 200
    /// with the answer, or empty for a notification.
    pub fn health_rpc(&self, body: &[u8]) -> HttpResponse {
        let answer = health_call(body, |probe| {
            let report = match probe {
                // Readiness is health for a gateway: it can serve calls or it cannot.
                Probe::Health | Probe::Readiness => {
                    let redis = self.shared.as_ref().map(|s| s.available());
                    report(&self.status(), redis, &now_rfc3339())
                }
                Probe::Liveness => RpcHealth {
                    checks: BTreeMap::new(),
                    healthy: true,
                },
            };
            serde_json::to_vec(&report).unwrap_or_default()
        });
        match answer {
            Some(body) => json(StatusCode::OK, body),
            None => empty(),
        }
    }

    async fn metrics(&self) -> HttpResponse {
        // moka counts its entries at maintenance: bring the cache's gauges up to date.
        if let Some(cache) = &self.cache {
            cache.usage().await;
        }
        let free = self.body_room.available_permits();
        let buffered = self.total_body_bytes.saturating_sub(free);
        self.metrics
            .body_buffered
            .set(i64::try_from(buffered).unwrap_or(i64::MAX));
        let mut r = HttpResponse::new(self.metrics.render().into());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        r
    }

    /// `POST /snowgate/reload` (admin key): reads the config file again and applies it, as
    /// `SIGHUP` does; answers what changed, or why nothing did.
    async fn reload(
        &self,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<HttpResponse, ProxyError> {
        if method != Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "POST",
                path: RELOAD_PATH,
            });
        }
        if !self
            .keys
            .authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        {
            return Err(ProxyError::Unauthorized);
        }
        let Some(reload) = &self.reload else {
            return Err(ProxyError::ReloadFailed(
                "snowgate was started without a config file (--config)".into(),
            ));
        };
        let report = reload
            .reload()
            .await
            .map_err(|e| ProxyError::ReloadFailed(e.to_string()))?;
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Reloaded {
            reloaded: bool,
            #[serde(flatten)]
            report: crate::call::ReloadReport,
        }
        let mut body = serde_json::to_vec(&Reloaded {
            reloaded: true,
            report,
        })
        .unwrap_or_default();
        body.push(b'\n');
        Ok(json(StatusCode::OK, body))
    }

    async fn purge(
        &self,
        method: &Method,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<HttpResponse, ProxyError> {
        if method != Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "POST",
                path: PURGE_PATH,
            });
        }
        if !self
            .keys
            .authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        {
            return Err(ProxyError::Unauthorized);
        }
        let method = query.and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("method="))
                .map(str::to_string)
        });
        let names = match &method {
            None => None,
            Some(m) => match self.registry.get(m) {
                Some(spec) => Some(vec![spec.name.clone()]),
                None => return Err(ProxyError::UnknownPurgeMethod(m.clone())),
            },
        };
        let Some(cache) = &self.cache else {
            return Ok(json(
                StatusCode::OK,
                "{\"purged\":false,\"reason\":\"cache disabled\"}\n",
            ));
        };
        cache
            .purge(names.as_deref())
            .await
            .map_err(|e| ProxyError::PurgeFailed(e.to_string()))?;
        tracing::info!(method = method.as_deref().unwrap_or("*"), "cache purged");
        let scope = method.unwrap_or_else(|| "*".into());
        let body = format!(
            "{{\"purged\":true,\"method\":{}}}\n",
            serde_json::Value::from(scope)
        );
        Ok(json(StatusCode::OK, body))
    }
}

/// Whether a request names this host by an address or as `localhost` (its URI's authority, else
/// its `Host`; none at all counts as local: every browser sends one). Any other name may be DNS
/// rebinding: a web page the operator visits, at `http://evil.example:9660/`, whose name is then
/// resolved to the admin listener's address, reads from it in the operator's browser with
/// `Host: evil.example:9660`. So the admin listener serves its pages without the key only to an
/// address or `localhost`, as avalanchego's `--http-allowed-hosts` guards its API.
fn local_host(uri: &http::Uri, headers: &HeaderMap) -> bool {
    let authority = match uri.authority() {
        Some(a) => a.as_str().to_string(),
        None => match headers.get(header::HOST).map(|h| h.to_str()) {
            None => return true,
            Some(Ok(h)) => h.to_string(),
            Some(Err(_)) => return false,
        },
    };
    // Without any userinfo (`user@host` is no name a browser sends in Host).
    let hostport = authority.rsplit('@').next().unwrap_or_default();
    let host = match hostport.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if rest.is_empty() || rest.starts_with(':') => addr,
            _ => return false,
        },
        None => match hostport.split_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            Some(_) => return false,
            None => hostport,
        },
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok()
}

/// Whether a request comes from no web page (no `Origin`: curl, a Prometheus scrape, a browser's
/// own same-origin GET) or from a page of the listener's own origin (`http://` and the name the
/// request was sent to). Any other origin's page, in the operator's browser, could otherwise read
/// the answer: the gateway's CORS rules are a node's, open to every origin.
fn same_origin(uri: &http::Uri, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let asked = match uri.authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => headers.get(header::HOST).map(|h| h.as_bytes()),
    };
    match (origin.as_bytes().strip_prefix(b"http://"), asked) {
        (Some(from), Some(asked)) => from.eq_ignore_ascii_case(asked),
        _ => false,
    }
}

/// The status page: static, never cached, and allowed nothing beyond its own origin.
fn page() -> HttpResponse {
    let mut r = HttpResponse::new(PAGE.into());
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// 200 for as long as the process serves, whatever the pool's state or a drain, so that a
/// liveness probe never restarts a gateway because its nodes are down (readiness and
/// `/ext/health` say whether it can serve calls).
fn liveness() -> HttpResponse {
    json(StatusCode::OK, "{\"healthy\":true}\n")
}

/// The message of a node's -32000 when params do not decode into the method's arguments.
const BAD_ARGS: &str = "couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls";

/// Which of the node's health methods a call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Health,
    Readiness,
    Liveness,
}

/// A health method's result as a node writes it (`api/health` `APIReply`): check name ->
/// result, and whether the whole is healthy. A `BTreeMap` gives Go's sorted map keys.
#[derive(serde::Serialize)]
struct RpcHealth {
    checks: BTreeMap<String, CheckResult>,
    healthy: bool,
}

/// One check as a node writes it (`health.Result`): details under `message`, `error` when
/// failing, when it was taken and how long it took (ns). snowgate keeps no history of failures,
/// so `contiguousFailures` and `timeOfFirstFailure` (both omitted when empty on a node) are
/// left out.
#[derive(serde::Serialize)]
struct CheckResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    timestamp: String,
    duration: u64,
}

/// The check of the gateway as a whole; upstream checks are named after their `name`.
const GATEWAY_CHECK: &str = "snowgate";
/// The check of the fleet's Redis (only with `[redis]`).
const SHARED_CHECK: &str = "shared";

/// The health report of a pool in the node's format: one check per upstream (its configured
/// name; failing while it takes no traffic), `snowgate` (failing while draining or while no
/// upstream takes traffic) and `shared` with `[redis]` (never failing: snowgate answers without
/// Redis). `healthy` is what `GET /ext/health` says (some node takes traffic, not draining), so
/// one node down shows as a failing check of a healthy gateway.
fn report(status: &crate::upstream::PoolStatus, redis: Option<bool>, now: &str) -> RpcHealth {
    let check = |message: serde_json::Value, error: Option<String>| CheckResult {
        message: Some(message),
        error,
        timestamp: now.to_string(),
        duration: 0,
    };
    let mut checks = BTreeMap::new();
    for u in &status.upstreams {
        let error = if u.takes_traffic {
            None
        } else if !u.healthy {
            Some(u.last_error.clone().unwrap_or_else(|| "unhealthy".into()))
        } else if u.implausible_height {
            Some("implausible height".into())
        } else {
            Some("behind the pool's height".into())
        };
        let message = serde_json::to_value(u).unwrap_or_default();
        checks.insert(u.name.clone(), check(message, error));
    }
    let error = if status.draining {
        Some("draining".to_string())
    } else if !status.healthy {
        Some("no upstream takes traffic".to_string())
    } else {
        None
    };
    let message = serde_json::json!({
        "bestHeight": status.best_height,
        "draining": status.draining,
    });
    checks.insert(GATEWAY_CHECK.into(), check(message, error));
    if let Some(up) = redis {
        let message = serde_json::json!({ "redis": if up { "up" } else { "down" } });
        checks.insert(SHARED_CHECK.into(), check(message, None));
    }
    RpcHealth {
        checks,
        healthy: status.healthy && !status.draining,
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}

/// Answers one JSON-RPC body sent to a node's health service: the envelope as a node reads it
/// (a batch is a -32700, as on a node), the method name by the node's rules, the params into
/// `{"tags":[string]}` (the tags select nothing: every check of snowgate's is application-wide,
/// which a node always includes); `result` makes the method's result. `None` for a notification.
fn health_call(body: &[u8], result: impl FnOnce(Probe) -> Vec<u8>) -> Option<Vec<u8>> {
    let decoded = rpc::decode(body);
    // Echoed only while small, as on the RPC paths (`super::decode`).
    if let Some(e) = super::decode::id_too_long(&decoded) {
        return Some(e.body(None));
    }
    let id = decoded.envelope.id.as_deref();
    let data = || decoded.error_data_within(super::decode::MAX_ERROR_DATA);
    match decoded.verdict() {
        Verdict::ParseError(message) => {
            let e = ProxyError::Parse {
                message,
                data: data(),
            };
            return Some(e.body(id));
        }
        Verdict::InvalidVersion => {
            let e = ProxyError::InvalidVersion { data: data() };
            return id.map(|id| e.body(Some(id)));
        }
        Verdict::Call => {}
    }
    let probe = names::resolve(&decoded.envelope.method, "health", |m| {
        matches!(m, "Health" | "Readiness" | "Liveness")
    })
    .map(|m| match m.as_str() {
        "Health" => Probe::Health,
        "Readiness" => Probe::Readiness,
        _ => Probe::Liveness,
    })
    .and_then(|probe| match decoded.envelope.params.as_ref() {
        Some(params) if !tags_decode(params) => Err(LookupError(BAD_ARGS.into())),
        _ => Ok(probe),
    });
    // Like a node, the method runs for a notification too; it just gets no answer.
    let answer = match probe {
        Ok(probe) => response::success(&result(probe), id),
        Err(LookupError(message)) => response::error(-32000, &message, None, id),
    };
    id.map(|_| answer)
}

/// Whether `params` decode into a node's `health.APIArgs` (`{"tags":[string]}`) as Go's decoder
/// does it: an object (keys matched case-insensitively, others ignored), else gorilla's retry as
/// a one-element array of it (`[]` and extra elements allowed).
fn tags_decode(params: &Json) -> bool {
    let args = |v: &Json| match v {
        Json::Null => true,
        Json::Object(_) => match v.field("tags") {
            None | Some(Json::Null) => true,
            Some(Json::Array(tags)) => tags
                .iter()
                .all(|t| matches!(t, Json::String(_) | Json::Null)),
            Some(_) => false,
        },
        _ => false,
    };
    match params {
        Json::Array(items) => items.first().map_or(true, args),
        other => args(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_address_or_localhost_is_a_local_host() {
        let uri = |u: &str| u.parse::<http::Uri>().expect("a URI");
        let host = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(
                header::HOST,
                HeaderValue::from_str(h).expect("a header value"),
            );
            m
        };
        for local in [
            "127.0.0.1:9660",
            "127.0.0.1",
            "localhost:9660",
            "LOCALHOST",
            "[::1]:9660",
            "[::1]",
            "192.0.2.7:80",
        ] {
            assert!(local_host(&uri("/metrics"), &host(local)), "{local}");
        }
        for name in [
            "evil.example:9660",
            "localhost.evil.example",
            "127.0.0.1.nip.io:9660",
            "[::1]x:9660",
            "127.0.0.1:96x0",
            "",
        ] {
            assert!(!local_host(&uri("/metrics"), &host(name)), "{name:?}");
        }
        // The absolute form's authority is what counts, not a Host beside it.
        let rebound = uri("http://evil.example:9660/metrics");
        assert!(!local_host(&rebound, &host("127.0.0.1:9660")));
        assert!(local_host(&uri("/metrics"), &HeaderMap::new()));
    }

    #[test]
    fn only_no_origin_or_the_listeners_own_is_the_same_origin() {
        let headers = |origin: Option<&str>| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9660"));
            if let Some(o) = origin {
                m.insert(header::ORIGIN, HeaderValue::from_str(o).expect("a value"));
            }
            m
        };
        let uri: http::Uri = "/snowgate/status.json".parse().expect("a URI");
        assert!(same_origin(&uri, &headers(None)));
        assert!(same_origin(&uri, &headers(Some("http://127.0.0.1:9660"))));
        for other in [
            "https://evil.example",
            "null",
            "https://127.0.0.1:9660",
            "http://127.0.0.1:9661",
            "http://127.0.0.1:9660.evil.example",
            "http://localhost:9660",
        ] {
            assert!(!same_origin(&uri, &headers(Some(other))), "{other}");
        }
    }

    #[test]
    fn the_gateways_own_check_names_are_reserved_for_upstreams() {
        let reserved = crate::config::upstream::RESERVED_UPSTREAM_NAMES;
        assert!(reserved.contains(&GATEWAY_CHECK) && reserved.contains(&SHARED_CHECK));
    }
    use crate::upstream::{PoolStatus, UpstreamStatus};

    fn call(body: &str) -> Option<String> {
        health_call(body.as_bytes(), |p| format!("\"{p:?}\"").into_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn upstream(name: &str, takes_traffic: bool, last_error: Option<&str>) -> UpstreamStatus {
        UpstreamStatus {
            name: name.into(),
            role: None,
            healthy: last_error.is_none(),
            takes_traffic,
            implausible_height: false,
            bootstrapped: true,
            height: Some(7),
            in_flight: 0,
            cordoned: false,
            last_error: last_error.map(str::to_string),
            network_id: Some(1),
            network_mismatch: false,
            version: None,
        }
    }

    #[test]
    fn one_node_down_is_a_failing_check_of_a_healthy_gateway_and_redis_never_fails() {
        let status = PoolStatus {
            healthy: true,
            draining: false,
            best_height: 7,
            upstreams: vec![
                upstream("a", true, None),
                upstream("b", false, Some("connect refused")),
                upstream("c", false, None),
            ],
        };
        let now = "2026-11-23T19:00:00Z";
        let r = report(&status, Some(false), now);
        assert!(r.healthy);
        let errors: Vec<_> = r
            .checks
            .iter()
            .map(|(k, c)| (k.as_str(), c.error.as_deref()))
            .collect();
        assert_eq!(
            errors,
            [
                ("a", None),
                ("b", Some("connect refused")),
                ("c", Some("behind the pool's height")),
                ("shared", None),
                ("snowgate", None),
            ]
        );
        assert_eq!(
            r.checks["shared"].message,
            Some(serde_json::json!({"redis": "down"}))
        );
        assert!(r.checks.values().all(|c| c.timestamp == now));

        let draining = PoolStatus {
            healthy: false,
            draining: true,
            ..status
        };
        let r = report(&draining, None, now);
        assert!(!r.healthy);
        assert!(!r.checks.contains_key("shared"));
        assert_eq!(r.checks["snowgate"].error.as_deref(), Some("draining"));
    }

    #[test]
    fn methods_params_and_envelopes_are_read_as_a_node_reads_them() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","method":"health.health","params":{"tags":null},"id":12345678901234567890123}"#,
                "{\"jsonrpc\":\"2.0\",\"result\":\"Health\",\"id\":12345678901234567890123}\n",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"health.readiness","params":[{"TAGS":["11111111111111111111111111111111LpoYY"]}],"id":"a"}"#,
                "{\"jsonrpc\":\"2.0\",\"result\":\"Readiness\",\"id\":\"a\"}\n",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"health.liveness","id":1}"#,
                "{\"jsonrpc\":\"2.0\",\"result\":\"Liveness\",\"id\":1}\n",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"health.nope","id":1}"#,
                "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"rpc: can't find method \\\"health.Nope\\\"\",\"data\":null},\"id\":1}\n",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"info.getNodeID","id":1}"#,
                "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"rpc: can't find service \\\"info.GetNodeID\\\"\",\"data\":null},\"id\":1}\n",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"health.health","params":{"tags":"x"},"id":1}"#,
                "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls\",\"data\":null},\"id\":1}\n",
            ),
            (
                r#"{"jsonrpc":"1.0","method":"health.health","id":7}"#,
                "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"jsonrpc must be 2.0\",\"data\":{\"jsonrpc\":\"1.0\",\"method\":\"health.health\",\"params\":null,\"id\":7}},\"id\":7}\n",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(call(body).as_deref(), Some(want), "{body}");
        }
        // A batch is a parse error, as on a node; a notification gets nothing.
        let batch = call(r#"[{"jsonrpc":"2.0","method":"health.health","id":1}]"#);
        assert!(
            batch.as_deref().is_some_and(|b| b.contains("-32700")),
            "{batch:?}"
        );
        assert_eq!(call(r#"{"jsonrpc":"2.0","method":"health.health"}"#), None);
    }
}
