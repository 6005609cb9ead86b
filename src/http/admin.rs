//! snowgate's own endpoints beside the RPC paths: the pool's health as a load balancer reads it
//! (`GET /ext/health`, `/ext/health/health`, `/ext/health/readiness`), liveness
//! (`GET /ext/health/liveness`), Prometheus metrics (`GET /metrics`) and the cache purge
//! (`POST /snowgate/cache/purge[?method=NAME]`, admin key required).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use tokio::sync::Semaphore;

use super::{json, HttpResponse};
use crate::cache::AnswerCache;
use crate::error::ProxyError;
use crate::methods::Registry;
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::upstream::Pool;

/// The admin endpoint that purges the answer cache (`?method=NAME` for one method).
pub const PURGE_PATH: &str = "/snowgate/cache/purge";

/// One of snowgate's own endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Health,
    Liveness,
    Metrics,
    Purge,
}

impl Endpoint {
    /// The endpoint at `path`, if any.
    pub fn at(path: &str) -> Option<Endpoint> {
        Some(match path {
            "/ext/health" | "/ext/health/health" | "/ext/health/readiness" => Endpoint::Health,
            "/ext/health/liveness" => Endpoint::Liveness,
            "/metrics" => Endpoint::Metrics,
            PURGE_PATH => Endpoint::Purge,
            _ => return None,
        })
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
        method: &Method,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<HttpResponse, ProxyError> {
        match endpoint {
            Endpoint::Health => self.health(method),
            Endpoint::Liveness => liveness(method),
            Endpoint::Metrics if method == Method::GET => Ok(self.metrics().await),
            Endpoint::Metrics => Err(ProxyError::NotFound),
            Endpoint::Purge => self.purge(method, headers, query).await,
        }
    }

    /// The pool's state; 503 when no node can serve, or while draining (so that a load
    /// balancer stops sending before the listener closes).
    fn health(&self, method: &Method) -> Result<HttpResponse, ProxyError> {
        if method == Method::POST {
            return Err(ProxyError::WrongHttpMethod {
                allowed: "GET",
                path: "/ext/health",
            });
        }
        let mut status = self.pool.status();
        if self.draining.load(Ordering::Relaxed) {
            status.healthy = false;
            status.draining = true;
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
        Ok(json(code, body))
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
        let index = match &method {
            None => None,
            Some(m) => match self.registry.get(m) {
                Some(spec) => Some(spec.index),
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
            .purge(index)
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

/// 200 for as long as the process serves, whatever the pool's state or a drain, so that a
/// liveness probe never restarts a gateway because its nodes are down (readiness and
/// `/ext/health` say whether it can serve calls).
fn liveness(method: &Method) -> Result<HttpResponse, ProxyError> {
    if method == Method::POST {
        return Err(ProxyError::WrongHttpMethod {
            allowed: "GET",
            path: "/ext/health/liveness",
        });
    }
    Ok(json(StatusCode::OK, "{\"healthy\":true}\n"))
}
