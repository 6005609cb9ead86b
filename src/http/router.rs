//! Routing: which path is what, the node's HTTP-level refusals, and the request body.
//!
//! * `POST /ext/info` and the five P-chain paths: JSON-RPC. Any other method gets the node's 405,
//!   a content type other than `application/json` its 415 (both as a node words them); then the
//!   body is read within its limits ([`super::request_body`]) and handed, with who is calling, to
//!   the layer below as an [`RpcRequest`]. Only what is parsed there is forwarded: the client's
//!   headers and bytes never reach a node.
//! * snowgate's own endpoints ([`super::admin`]);
//! * anything else: the node's 404.
//!
//! The router's future is the one boxed future of the HTTP layers: it holds the request body's
//! room while the call runs below it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderMap, Method, Request};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

use super::admin::{Admin, Endpoint};
use super::request_body::{self, BodyError, BodyRoom};
use super::{ConnInfo, HttpResponse, X_REQUEST_ID};
use crate::call::{Caller, ClientId};
use crate::config::LimitsConfig;
use crate::error::{Counted, ProxyError};
use crate::jsonrpc::http::{media_type, INFO_PATH, P_CHAIN_PATHS};
use crate::methods::Family;
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::ratelimit::Limiter;

/// The header an admin caller uses to pin a call to one upstream.
pub const PIN_HEADER: &str = "x-snowgate-upstream";

/// A JSON-RPC body that passed the HTTP checks, for the decode layer.
#[derive(Debug)]
pub struct RpcRequest {
    /// The API the path serves.
    pub family: Family,
    /// The path it came to (one of the known ones).
    pub path: &'static str,
    pub body: Bytes,
    pub caller: Caller,
}

/// The JSON-RPC API at `path` (the path as one of the known constants).
pub fn rpc_path(path: &str) -> Option<(Family, &'static str)> {
    if path == INFO_PATH {
        return Some((Family::Info, INFO_PATH));
    }
    let known = P_CHAIN_PATHS.iter().find(|p| **p == path)?;
    Some((Family::Platform, known))
}

/// What the router shares between connections.
pub struct Routes {
    pub(crate) admin: Admin,
    pub(crate) keys: AdminKeys,
    /// To tell whose quota a call is charged to (`None` when rate limiting is off).
    pub(crate) limiter: Option<Arc<Limiter>>,
    pub(crate) metrics: Metrics,
    pub(crate) limits: LimitsConfig,
    /// Room for request bodies over all connections (`limits.total_body_bytes`).
    pub(crate) body_room: Arc<Semaphore>,
}

impl Routes {
    /// Counts a refusal made before any call was read, and answers it.
    pub(crate) fn reject(&self, e: &ProxyError) -> HttpResponse {
        if let (Counted::Http, reason) = e.counted() {
            self.metrics
                .http_rejections
                .with_label_values(&[reason])
                .inc();
        }
        e.response(None)
    }

    /// Who is calling: admin or not, pinning, and whose quota pays.
    fn caller(&self, headers: &HeaderMap, peer: SocketAddr) -> Caller {
        let admin = self
            .keys
            .authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
        let pin = if admin {
            headers
                .get(PIN_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        } else {
            None
        };
        let client = match &self.limiter {
            Some(l) => l.identify(peer.ip(), headers),
            None => ClientId::Ip(peer.ip()),
        };
        Caller {
            admin,
            pin,
            ip: peer.ip(),
            client,
            request_id: headers.get(X_REQUEST_ID).cloned(),
        }
    }
}

/// Routes one connection's requests.
#[derive(Clone)]
pub struct RouterLayer {
    routes: Arc<Routes>,
    conn: Arc<ConnInfo>,
}

impl RouterLayer {
    pub fn new(routes: Arc<Routes>, conn: Arc<ConnInfo>) -> RouterLayer {
        RouterLayer { routes, conn }
    }
}

impl<S> Layer<S> for RouterLayer {
    type Service = Router<S>;

    fn layer(&self, inner: S) -> Router<S> {
        Router {
            inner,
            routes: self.routes.clone(),
            conn: self.conn.clone(),
        }
    }
}

/// See the module doc; `S` answers the JSON-RPC bodies.
#[derive(Clone)]
pub struct Router<S> {
    inner: S,
    routes: Arc<Routes>,
    conn: Arc<ConnInfo>,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

impl<S, B> Service<Request<B>> for Router<S>
where
    S: Service<RpcRequest, Response = HttpResponse, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Send,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> BoxFuture {
        let routes = self.routes.clone();
        let Some((family, path)) = rpc_path(req.uri().path()) else {
            return Box::pin(async move {
                let answer = match Endpoint::at(req.uri().path()) {
                    Some(endpoint) => {
                        let (method, headers) = (req.method(), req.headers());
                        let query = req.uri().query();
                        routes.admin.serve(endpoint, method, headers, query).await
                    }
                    None => Err(ProxyError::NotFound),
                };
                Ok(answer.unwrap_or_else(|e| routes.reject(&e)))
            });
        };
        if req.method() != Method::POST {
            let e = ProxyError::PostRequired(req.method().clone());
            return Box::pin(std::future::ready(Ok(routes.reject(&e))));
        }
        let (media, is_json) = media_type(req.headers().get(header::CONTENT_TYPE));
        if !is_json {
            let e = ProxyError::UnsupportedMediaType(String::from_utf8_lossy(media).into_owned());
            return Box::pin(std::future::ready(Ok(routes.reject(&e))));
        }
        let conn = self.conn.clone();
        // The ready service goes into the future; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let caller = routes.caller(req.headers(), conn.peer);
            let limits = &routes.limits;
            // Held until the answer is made: the body's bytes live that long.
            let mut room = BodyRoom::new(&conn.body_room, &routes.body_room);
            let read = request_body::read(
                req.into_body(),
                limits.body_bytes,
                limits.body_timeout,
                &mut room,
            );
            let body = match read.await {
                Ok(body) => body,
                Err(e) => {
                    let e = match e {
                        BodyError::TooLarge => ProxyError::BodyTooLarge(limits.body_bytes),
                        BodyError::Timeout => {
                            tracing::debug!(request_id = caller.request_id(), peer = %conn.peer, "request body timed out");
                            ProxyError::BodyTimeout(limits.body_timeout)
                        }
                        BodyError::Broken => ProxyError::BrokenBody,
                    };
                    return Ok(routes.reject(&e));
                }
            };
            let rpc = RpcRequest {
                family,
                path,
                body,
                caller,
            };
            let answer = inner.oneshot(rpc).await;
            drop(room);
            answer
        })
    }
}
