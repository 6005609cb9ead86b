//! The HTTP front of the request path: routes, HTTP-level refusals as a node words them, the
//! JSON-RPC envelope turned into an [`RpcCall`], and the answer written back with the client's id.
//!
//! Routes: `POST /ext/info` and the five P-chain paths (forwarded to the node's canonical path),
//! `GET /ext/health` (the pool's state), `GET /metrics`; everything else 404. Only what is parsed
//! here is forwarded: the client's headers and bytes never reach a node.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use tower::ServiceExt;

use crate::call::{Answer, Caller, RpcCall};
use crate::error::ProxyError;
use crate::jsonrpc::{self, response, Verdict};
use crate::methods::{family_for_path, Family, Registry};
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::stack::RpcService;
use crate::upstream::Pool;

/// The admin endpoint that purges the answer cache (`?method=NAME` for one method).
pub const PURGE_PATH: &str = "/snowgate/cache/purge";

/// The header an admin caller uses to pin a call to one upstream.
pub const PIN_HEADER: &str = "x-snowgate-upstream";

/// Everything the front needs, shared by all connections.
pub struct Front {
    pub registry: Registry,
    pub admin: AdminKeys,
    pub pool: Arc<Pool>,
    pub rpc: RpcService,
    /// The answer cache, for the admin purge endpoint (`None` when disabled).
    pub cache: Option<Arc<crate::cache::AnswerCache>>,
    pub metrics: Metrics,
    pub max_body_bytes: usize,
}

type HttpResponse = Response<Full<Bytes>>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(response::JSON_CONTENT_TYPE),
    );
    r
}

/// HTTP 200 with an empty body: what a node answers to a notification.
fn empty() -> HttpResponse {
    Response::new(Full::new(Bytes::new()))
}

impl Front {
    /// Answers one HTTP request from `peer`.
    pub async fn handle<B>(self: Arc<Self>, req: Request<B>, peer: SocketAddr) -> HttpResponse
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_owned();
        let Some(family) = family_for_path(&path) else {
            return match path.as_str() {
                "/ext/health"
                | "/ext/health/health"
                | "/ext/health/readiness"
                | "/ext/health/liveness" => self.health(req.method()),
                "/metrics" if req.method() == Method::GET => {
                    let mut r = text(StatusCode::OK, self.metrics.render());
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    r
                }
                PURGE_PATH => self.purge(&req).await,
                _ => self.reject(
                    "not_found",
                    text(StatusCode::NOT_FOUND, "404 page not found\n"),
                ),
            };
        };
        if req.method() != Method::POST {
            let msg = format!("rpc: POST method required, received {}", req.method());
            return self.reject(
                "method_not_allowed",
                text(StatusCode::METHOD_NOT_ALLOWED, msg),
            );
        }
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let media = content_type.split(';').next().unwrap_or_default();
        if !media.eq_ignore_ascii_case("application/json") {
            let msg = format!("rpc: unrecognized Content-Type: {media}");
            return self.reject(
                "unsupported_media_type",
                text(StatusCode::UNSUPPORTED_MEDIA_TYPE, msg),
            );
        }
        let admin = self.admin.authorizes(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
        );
        let pin = if admin {
            req.headers()
                .get(PIN_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        } else {
            None
        };
        let caller = Caller {
            admin,
            pin,
            ip: peer.ip(),
        };
        let body = match Limited::new(req.into_body(), self.max_body_bytes)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                if e.is::<http_body_util::LengthLimitError>() {
                    let msg = format!("request body larger than {} bytes", self.max_body_bytes);
                    let body = response::error(-32600, &msg, None, None);
                    return self
                        .reject("body_too_large", json(StatusCode::PAYLOAD_TOO_LARGE, body));
                }
                return self.reject(
                    "body_error",
                    text(StatusCode::BAD_REQUEST, "bad request body\n"),
                );
            }
        };
        self.rpc(family, &path, &body, caller).await
    }

    /// `POST /snowgate/cache/purge[?method=NAME]`, admin only.
    async fn purge<B>(&self, req: &Request<B>) -> HttpResponse {
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n");
        }
        if !self.admin.authorizes(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
        ) {
            let mut r = text(StatusCode::UNAUTHORIZED, "admin key required\n");
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return self.reject("unauthorized", r);
        }
        let method = req.uri().query().and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("method="))
                .map(str::to_string)
        });
        if let Some(m) = &method {
            if self.registry.get(m).is_none() {
                return text(StatusCode::BAD_REQUEST, format!("unknown method {m:?}\n"));
            }
        }
        let Some(cache) = &self.cache else {
            return json(
                StatusCode::OK,
                "{\"purged\":false,\"reason\":\"cache disabled\"}\n",
            );
        };
        match cache.purge(method.as_deref()).await {
            Ok(()) => {
                tracing::info!(method = method.as_deref().unwrap_or("*"), "cache purged");
                let scope = method.unwrap_or_else(|| "*".into());
                let body = format!(
                    "{{\"purged\":true,\"method\":{}}}\n",
                    serde_json::Value::from(scope)
                );
                json(StatusCode::OK, body)
            }
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }

    fn reject(&self, reason: &str, r: HttpResponse) -> HttpResponse {
        self.metrics
            .http_rejections
            .with_label_values(&[reason])
            .inc();
        r
    }

    fn health(&self, method: &Method) -> HttpResponse {
        if method == Method::POST {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "snowgate answers GET /ext/health\n",
            );
        }
        let status = self.pool.status();
        let code = if status.healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let mut body = serde_json::to_vec(&status).unwrap_or_default();
        body.push(b'\n');
        json(code, body)
    }

    /// One JSON-RPC body, already read.
    async fn rpc(&self, family: Family, path: &str, body: &[u8], caller: Caller) -> HttpResponse {
        let decoded = jsonrpc::decode(body);
        let id = decoded.envelope.id.as_deref();
        match decoded.verdict() {
            Verdict::ParseError(msg) => {
                self.count("-", "parse_error");
                let data = decoded.error_data();
                return json(
                    StatusCode::OK,
                    response::error(-32700, &msg, Some(&data), id),
                );
            }
            Verdict::InvalidVersion => {
                self.count("-", "invalid_request");
                if id.is_none() {
                    return empty();
                }
                let data = decoded.error_data();
                let body = response::error(-32600, "jsonrpc must be 2.0", Some(&data), id);
                return json(StatusCode::OK, body);
            }
            Verdict::Call => {}
        }
        let method = decoded.envelope.method.as_str();
        let spec = if let Some(why) = &decoded.ambiguity {
            Err(ProxyError::Ambiguous(why.clone()))
        } else {
            match self.registry.get(method) {
                None => Err(ProxyError::UnknownMethod {
                    method: method.to_string(),
                }),
                Some(spec) if spec.family != family => Err(ProxyError::WrongPath {
                    method: method.to_string(),
                    path: path.to_string(),
                    expected: spec.family.canonical_path(),
                }),
                Some(spec) => Ok(spec.clone()),
            }
        };
        let spec = match spec {
            Ok(spec) => spec,
            Err(e) => return self.refuse(e, "-", id),
        };
        let call = RpcCall {
            spec,
            params: decoded.envelope.params,
            id: decoded.envelope.id.map(Bytes::from),
            caller,
            route_min_height: None,
        };
        let name = call.spec.name.clone();
        let client_id = call.id.clone();
        let result = self.rpc.clone().oneshot(call).await;
        match result {
            Ok(answer) => {
                let outcome = match answer.kind {
                    crate::call::AnswerKind::Result => "ok",
                    crate::call::AnswerKind::Error => "rpc_error",
                };
                self.count(&name, outcome);
                self.answer(&answer, client_id.as_deref())
            }
            Err(e) => self.refuse(e, &name, client_id.as_deref()),
        }
    }

    fn count(&self, method: &str, outcome: &str) {
        self.metrics
            .requests
            .with_label_values(&[method, outcome])
            .inc();
    }

    fn refuse(&self, e: ProxyError, method: &str, id: Option<&[u8]>) -> HttpResponse {
        self.count(method, e.outcome());
        match e.blame() {
            crate::error::Blame::Client => tracing::debug!(method, error = %e, "refused"),
            _ => tracing::warn!(method, error = %e, "call failed"),
        }
        if id.is_none() && e.status() == StatusCode::OK {
            // A notification gets no answer, as from a node.
            return empty();
        }
        json(e.status(), e.body(id))
    }

    fn answer(&self, answer: &Answer, id: Option<&[u8]>) -> HttpResponse {
        let mut r = if id.is_some() {
            json(StatusCode::OK, answer.body(id))
        } else {
            empty()
        };
        r.headers_mut()
            .insert("x-cache", HeaderValue::from_static(answer.cache.header()));
        r
    }
}
