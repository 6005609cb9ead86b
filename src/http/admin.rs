//! snowgate's own endpoints beside the RPC paths: the pool's health as a load balancer reads it
//! (`GET /ext/health`, and `/ext/health/health`, `/ext/health/readiness` by any method, as on a
//! node), liveness (`/ext/health/liveness`, any method), Prometheus metrics (`GET /metrics`), the
//! status page and its JSON ([`super::status`]), the keys' usage (`GET /snowgate/usage`,
//! [`super::usage`]), and the admin's actions: the cache purge
//! (`POST /snowgate/cache/purge[?method=NAME]`), a reload (`POST /snowgate/reload`) and cordons
//! (`POST /snowgate/upstreams/NAME/cordon|uncordon`). The node's health API over JSON-RPC
//! (`POST /ext/health`) is not here: its calls go through the per-call stack like any other
//! ([`crate::health`]).
//!
//! Who may reach what is one pure function, [`reach`]: the health endpoints are everyone's, on
//! every listener. The operator's pages (metrics, status) are served without a key on the admin
//! listener (`[admin] listen`) to a request that names it by an address or `localhost` and comes
//! from no other origin's page (another name or origin needs the key: it may be a web page in
//! the operator's browser reading the listener), and on the public port only when there is no
//! admin listener, and then only with the admin key (the status page's HTML, which holds no
//! data, loads without one and asks for it). The actions always need the admin key. With an
//! admin listener, everything but health answers 404 on the public port, as if it did not exist.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use tokio::sync::Semaphore;

use super::status::{
    Facts, StatusBoard, UsageRow, PAGE, STATUS_JSON_PATH, STATUS_PATH, UPSTREAMS_PREFIX,
};
use super::usage::USAGE_PATH;
use super::{json, HttpResponse, Surface};
use crate::cache::AnswerCache;
use crate::error::ProxyError;
use crate::health::HealthApi;
use crate::methods::Registry;
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::upstream::Pool;

/// The admin endpoint that purges the answer cache (`?method=NAME` for one method).
pub const PURGE_PATH: &str = "/snowgate/cache/purge";

/// Where a caller reads its own quota (everyone's, on every listener; never another's).
pub const QUOTA_PATH: &str = "/snowgate/quota";

/// The keys the status page lists by their usage this hour.
const TOP_KEYS: usize = 10;

/// Where an admin asks for the config file to be read again (as `SIGHUP` does).
pub const RELOAD_PATH: &str = "/snowgate/reload";

/// One of snowgate's own endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/ext/health` other than POST (the node's health API over JSON-RPC, a path of the
    /// per-call stack): snowgate's JSON.
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
    /// `GET /snowgate/quota`: the caller's own quota (answered by the router, which knows who is
    /// calling).
    Quota,
    /// `GET /snowgate/usage`: the rate-limit keys' usage ([`super::usage`]).
    Usage,
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
            QUOTA_PATH => Endpoint::Quota,
            USAGE_PATH => Endpoint::Usage,
            _ => return None,
        })
    }

    /// Who may use it.
    pub fn access(self) -> Access {
        match self {
            Endpoint::Health | Endpoint::HealthGet | Endpoint::Liveness | Endpoint::Quota => {
                Access::Probe
            }
            Endpoint::Metrics | Endpoint::Status | Endpoint::StatusJson | Endpoint::Usage => {
                Access::Read
            }
            Endpoint::Purge | Endpoint::Reload | Endpoint::Cordon => Access::Act,
        }
    }
}

/// What decides whether a request may reach an operator endpoint: where it came, and what it
/// says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asker {
    /// The listener it came in on.
    pub surface: Surface,
    /// `[admin] listen` is set: the operator's endpoints live there, not on the public port.
    pub admin_listener: bool,
    /// It presents an admin key.
    pub key: bool,
    /// It names the host by an address or `localhost` (`local_host`).
    pub local_name: bool,
    /// It comes from no web page, or from one of the listener's own origin (`same_origin`).
    pub same_origin: bool,
}

/// What an endpoint says to an [`Asker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Serve,
    /// 401, `admin key required`.
    NeedsKey,
    /// 404, as if the endpoint did not exist here.
    Hidden,
}

/// Who may reach which endpoint (see the module doc): the one place the rule lives.
pub fn reach(endpoint: Endpoint, asker: &Asker) -> Reach {
    match (endpoint.access(), asker.surface) {
        (Access::Probe, _) => Reach::Serve,
        (_, Surface::Public) if asker.admin_listener => Reach::Hidden,
        (_, _) if asker.key => Reach::Serve,
        // Asked by another name, or from another origin's page, it may be a web page in the
        // operator's browser reading the listener: that needs the key.
        (Access::Read, Surface::Admin) if asker.local_name && asker.same_origin => Reach::Serve,
        // The page holds no data: it loads, and asks for the key the JSON needs.
        (Access::Read, _) if endpoint == Endpoint::Status => Reach::Serve,
        (Access::Read | Access::Act, _) => Reach::NeedsKey,
    }
}

/// What the endpoints read: the pool, the cache, the metrics and the drain flag.
pub struct Admin {
    pub(crate) registry: Registry,
    pub(crate) keys: AdminKeys,
    pub(crate) pool: Arc<Pool>,
    pub(crate) cache: Option<Arc<AnswerCache>>,
    pub(crate) metrics: Metrics,
    /// The pool's health, unhealthy while draining, and the fleet's Redis.
    pub(crate) health: Arc<HealthApi>,
    /// The gateway's room for request bodies, and its size, for the buffered-bytes gauge.
    pub(crate) body_room: Arc<Semaphore>,
    pub(crate) total_body_bytes: usize,
    /// The gateway's reload (`None`: started from a config built in code, with no file).
    pub(crate) reload: Option<Arc<dyn crate::call::Reload>>,
    /// The status page's samples (kept by the gateway across reloads).
    pub(crate) board: Arc<StatusBoard>,
    /// The clients' quotas, for the status page.
    pub(crate) quota: crate::ratelimit::Quota,
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
        let key = self
            .keys
            .authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
        let asker = Asker {
            surface,
            admin_listener: self.admin_listener,
            key,
            local_name: local_host(uri, headers),
            same_origin: same_origin(uri, headers),
        };
        match reach(endpoint, &asker) {
            Reach::Serve => {}
            Reach::NeedsKey => return Err(ProxyError::Unauthorized),
            Reach::Hidden => return Err(ProxyError::NotFound),
        }
        match endpoint {
            Endpoint::Health | Endpoint::HealthGet => {
                // Releases only to the operator when `public_versions` is off: the admin listener
                // (reached only from where the operator put it) or a caller with the key.
                let versions = self.public_versions || surface == Surface::Admin || key;
                Ok(self.health(versions))
            }
            Endpoint::Liveness => Ok(liveness()),
            Endpoint::Metrics if method == Method::GET => Ok(self.metrics().await),
            Endpoint::Metrics => Err(ProxyError::NotFound),
            Endpoint::Purge => self.purge(method, query).await,
            Endpoint::Reload => self.reload(method).await,
            Endpoint::Status | Endpoint::StatusJson if method != Method::GET => {
                Err(ProxyError::NotFound)
            }
            Endpoint::Status => Ok(page()),
            Endpoint::StatusJson => Ok(self.status_json().await),
            Endpoint::Cordon => self.cordon(method, uri.path()).await,
            // The router answers it: only it knows who is calling.
            Endpoint::Quota => Err(ProxyError::NotFound),
            Endpoint::Usage if method != Method::GET => Err(ProxyError::NotFound),
            Endpoint::Usage => match self.quota.usage().book() {
                Some(book) => super::usage::answer(book, query).await,
                None => Err(ProxyError::NotFound),
            },
        }
    }

    /// `GET /snowgate/status.json`.
    async fn status_json(&self) -> HttpResponse {
        let pool = self.health.status();
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
            redis_up: self.health.redis_up(),
            limiter: self.quota.limiter().map(|l| &**l),
            usage_this_hour: match self.quota.usage().book() {
                Some(book) => {
                    let (scope, keys) = book.top_this_hour(TOP_KEYS).await;
                    UsageRow {
                        scope: Some(scope),
                        keys,
                    }
                }
                None => UsageRow::default(),
            },
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

    /// `POST /snowgate/upstreams/NAME/cordon` or `/uncordon` (admin key, checked by the caller):
    /// whether the node is cordoned now and by whom, and a `note` when that is not what was asked
    /// for plainly (the file still cordons it; the fleet's Redis did not take it yet).
    async fn cordon(&self, method: &Method, path: &str) -> Result<HttpResponse, ProxyError> {
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
        let done = self
            .pool
            .cordon(name, on)
            .await
            .ok_or_else(|| ProxyError::NoSuchUpstream(name.to_string()))?;
        let by = done.cordoned_by.join(",");
        tracing::info!(upstream = name, cordoned = done.cordoned, by = %by, "cordon set by an admin");
        let mut notes = Vec::new();
        if !on && done.cordoned_by.contains(&"file") {
            notes.push("the file still cordons it ([[upstreams]] cordoned = true)".to_string());
        }
        if let Some(why) = &done.unshared {
            notes.push(format!(
                "not shared with the fleet yet ({why}): held on this instance, written when Redis answers"
            ));
        }
        let mut body = serde_json::json!({
            "upstream": name,
            "cordoned": done.cordoned,
            "cordonedBy": done.cordoned_by,
        });
        if !notes.is_empty() {
            body["note"] = notes.join("; ").into();
        }
        Ok(json(StatusCode::OK, format!("{body}\n")))
    }

    /// The pool's state; 503 when no node can serve, or while draining (so that a load
    /// balancer stops sending before the listener closes).
    fn health(&self, versions: bool) -> HttpResponse {
        let mut status = self.health.status();
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
            shared: self.health.redis_up().map(|up| SharedStatus {
                redis: if up { "up" } else { "down" },
            }),
        };
        let mut body = serde_json::to_vec(&health).unwrap_or_default();
        body.push(b'\n');
        json(code, body)
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
    async fn reload(&self, method: &Method) -> Result<HttpResponse, ProxyError> {
        if method != Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "POST",
                path: RELOAD_PATH,
            });
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
        query: Option<&str>,
    ) -> Result<HttpResponse, ProxyError> {
        if method != Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "POST",
                path: PURGE_PATH,
            });
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
///
/// Every `Origin` header counts (a request with two is judged by both, not by the first), and a
/// browser's own word that another site made the request (`Sec-Fetch-Site: cross-site` or
/// `same-site`: a page of a sibling port or name) is believed even where `Origin` is missing.
fn same_origin(uri: &http::Uri, headers: &HeaderMap) -> bool {
    let cross_site = headers
        .get_all("sec-fetch-site")
        .iter()
        .any(|v| !matches!(v.as_bytes(), b"same-origin" | b"none"));
    if cross_site {
        return false;
    }
    let asked = match uri.authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => headers.get(header::HOST).map(|h| h.as_bytes()),
    };
    headers.get_all(header::ORIGIN).iter().all(|origin| {
        match (origin.as_bytes().strip_prefix(b"http://"), asked) {
            (Some(from), Some(asked)) => from.eq_ignore_ascii_case(asked),
            _ => false,
        }
    })
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
        // A second Origin is read too, whichever comes first.
        let mut two = headers(Some("http://127.0.0.1:9660"));
        two.append(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&uri, &two));
        // The browser's own word on who asked.
        for (site, same) in [
            ("cross-site", false),
            ("same-site", false),
            ("bogus", false),
            ("same-origin", true),
            ("none", true),
        ] {
            let mut h = headers(None);
            h.insert("sec-fetch-site", HeaderValue::from_static(site));
            assert_eq!(same_origin(&uri, &h), same, "{site}");
        }
    }

    #[test]
    fn who_may_reach_which_endpoint() {
        use Endpoint::*;
        use Reach::*;
        use Surface::{Admin as A, Public as P};
        // (endpoint, surface, admin listener, key, local name, same origin) -> reach
        let table = [
            // Health: everyone's, on every listener, whatever it says of itself.
            (Health, P, true, false, false, false, Serve),
            (HealthGet, A, true, false, false, false, Serve),
            (Liveness, P, false, false, false, false, Serve),
            // With an admin listener, the public port has no operator endpoint, key or not.
            (Metrics, P, true, true, true, true, Hidden),
            (Status, P, true, false, true, true, Hidden),
            (Purge, P, true, true, true, true, Hidden),
            // On the admin listener: pages without a key to a local name from no other origin.
            (Metrics, A, true, false, true, true, Serve),
            (StatusJson, A, true, false, true, true, Serve),
            (Metrics, A, true, false, false, true, NeedsKey),
            (StatusJson, A, true, false, true, false, NeedsKey),
            (Metrics, A, true, true, false, false, Serve),
            // The page itself holds no data: it loads anywhere it is not hidden.
            (Status, A, true, false, false, false, Serve),
            (Status, P, false, false, false, false, Serve),
            // Without an admin listener, the public port's pages need the key.
            (Metrics, P, false, false, true, true, NeedsKey),
            (StatusJson, P, false, false, true, true, NeedsKey),
            (StatusJson, P, false, true, false, false, Serve),
            // Usage is read as the status JSON is.
            (Usage, A, true, false, true, true, Serve),
            (Usage, A, true, false, false, true, NeedsKey),
            (Usage, P, true, true, true, true, Hidden),
            (Usage, P, false, false, true, true, NeedsKey),
            (Usage, P, false, true, false, false, Serve),
            // Actions: the key, wherever they are served; a local name is no key.
            (Purge, A, true, false, true, true, NeedsKey),
            (Reload, A, true, true, false, false, Serve),
            (Cordon, P, false, false, true, true, NeedsKey),
            (Cordon, P, false, true, false, false, Serve),
        ];
        for (endpoint, surface, admin_listener, key, local_name, same_origin, want) in table {
            let asker = Asker {
                surface,
                admin_listener,
                key,
                local_name,
                same_origin,
            };
            assert_eq!(reach(endpoint, &asker), want, "{endpoint:?} {asker:?}");
        }
    }
}
