//! The HTTP front of the request path: routes, HTTP-level refusals as a node words them, CORS as
//! a node answers it, the JSON-RPC envelope (or a batch of them) turned into [`RpcCall`]s, and
//! each answer written back with the client's id.
//!
//! Routes: `POST /ext/info` and the five P-chain paths (forwarded to the node's canonical path),
//! `GET /ext/health` (the pool's state), `GET /metrics`, the admin purge endpoint; everything else
//! 404. Only what is parsed here is forwarded: the client's headers and bytes never reach a node.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::HeaderName;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::body::Chunks;
use crate::call::{AnswerKind, Caller, RpcCall};
use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::jsonrpc::{self, gojson, response, Verdict};
use crate::methods::{family_for_path, Family, MethodSpec, Registry};
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::ratelimit::{ClientId, Limiter};
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
    /// The rate limiter, to tell who a client is (`None` when disabled).
    pub limiter: Option<Arc<Limiter>>,
    pub metrics: Metrics,
    /// `snowgate_requests_total`, resolved per method and outcome.
    pub requests: crate::metrics::CounterTable,
    pub limits: LimitsConfig,
    /// Set on SIGTERM: `/ext/health` answers 503 and connections are closed after their answer.
    pub draining: Arc<AtomicBool>,
    /// Room for request bodies over all connections (`limits.total_body_bytes`).
    pub body_room: Semaphore,
}

/// What the front knows of the connection a request came on.
pub struct ConnInfo {
    /// The client's socket address.
    pub peer: SocketAddr,
    /// Room for this connection's request bodies (`limits.connection_body_bytes`): its HTTP/2
    /// streams together cannot buffer more.
    body_room: Semaphore,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr, limits: &LimitsConfig) -> ConnInfo {
        ConnInfo {
            peer,
            body_room: Semaphore::new(limits.connection_body_bytes),
        }
    }
}

/// The body room of one request, held until its answer is made (the body's bytes live that long)
/// and given back on drop.
struct BodyRoom<'a> {
    conn: &'a Semaphore,
    total: &'a Semaphore,
    held: u32,
}

impl<'a> BodyRoom<'a> {
    /// Takes room for `n` more bytes, waiting for it while the connection or the gateway is full.
    /// Cancel-safe: room is counted as held only once both are taken.
    async fn take(&mut self, n: usize) -> Result<(), BodyError> {
        let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
        if n == 0 {
            return Ok(());
        }
        let conn = room(self.conn, n).await?;
        let total = room(self.total, n).await?;
        conn.forget();
        total.forget();
        self.held = self.held.saturating_add(n);
        Ok(())
    }
}

/// `n` permits of `room`, at once when free (the common case takes no place in the wait queue).
async fn room(room: &Semaphore, n: u32) -> Result<tokio::sync::SemaphorePermit<'_>, BodyError> {
    match room.try_acquire_many(n) {
        Ok(permit) => Ok(permit),
        Err(_) => room.acquire_many(n).await.map_err(|_| BodyError::Broken),
    }
}

impl Drop for BodyRoom<'_> {
    fn drop(&mut self) {
        self.conn.add_permits(self.held as usize);
        self.total.add_permits(self.held as usize);
    }
}

/// Why a request body could not be read.
enum BodyError {
    TooLarge,
    Timeout,
    /// The client broke off, or sent a malformed body.
    Broken,
}

/// Reads a whole request body of at most `limit` bytes, taking room for it as it arrives. A body
/// that arrives in one piece (the usual case) is kept as it is, without a copy.
async fn collect_body<B>(body: B, limit: usize, room: &mut BodyRoom<'_>) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    if usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX) > limit {
        // A declared length over the limit is refused before a byte is read.
        return Err(BodyError::TooLarge);
    }
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(BodyError::Broken);
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers: not part of the body
        };
        total = total.saturating_add(data.len());
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        room.take(data.len()).await?;
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    joined.reserve(held.len() + data.len());
                    joined.extend_from_slice(&held);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

type HttpResponse = Response<Chunks>;

/// The header that carries a request's id, both ways.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What a node may receive beyond `limits.body_bytes`: the envelope around the re-encoded params.
const UPSTREAM_ENVELOPE: usize = 1024;

/// `X-Cache`: HIT, MISS or BYPASS. A constant: a name given as a string is parsed, and a custom
/// one allocated, on every insert.
const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

fn text(status: StatusCode, body: impl Into<Chunks>) -> HttpResponse {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json(status: StatusCode, body: impl Into<Chunks>) -> HttpResponse {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(response::JSON_CONTENT_TYPE),
    );
    r
}

/// HTTP 200 with an empty body: what a node answers to a notification.
fn empty() -> HttpResponse {
    Response::new(Chunks::default())
}

/// What one call (single or inside a batch) comes to.
struct Outcome {
    /// The JSON-RPC answer (with its trailing newline); `None` for a notification.
    body: Option<Chunks>,
    status: StatusCode,
    retry_after: Option<u64>,
    cache: Option<&'static str>,
}

impl Outcome {
    /// The HTTP answer of a call on its own.
    fn into_response(self) -> HttpResponse {
        let mut r = match self.body {
            Some(b) => json(self.status, b),
            None => empty(),
        };
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(c) = self.cache {
            r.headers_mut().insert(X_CACHE, HeaderValue::from_static(c));
        }
        r
    }

    fn silent() -> Outcome {
        Outcome {
            body: None,
            status: StatusCode::OK,
            retry_after: None,
            cache: None,
        }
    }

    fn error(e: &ProxyError, id: Option<&[u8]>) -> Outcome {
        Outcome {
            body: Some(e.body(id).into()),
            status: e.status(),
            retry_after: match e {
                ProxyError::RateLimited { retry_after_secs } => Some(*retry_after_secs),
                _ => None,
            },
            cache: None,
        }
    }

    fn rpc_error(code: i64, message: &str, data: Option<&str>, id: Option<&[u8]>) -> Outcome {
        Outcome {
            body: Some(response::error(code, message, data, id).into()),
            status: StatusCode::OK,
            retry_after: None,
            cache: None,
        }
    }
}

/// CORS the way avalanchego's rs/cors answers (any origin, credentials allowed, `Vary: Origin`
/// always). Written here rather than with tower-http's layer, which treats every `OPTIONS` as a
/// preflight and refuses `*` with credentials; a node does neither.
mod cors {
    use super::*;

    const METHODS: &str = "GET, POST, HEAD";
    const HEADERS: [&str; 8] = [
        "origin",
        "accept",
        "content-type",
        "x-requested-with",
        "authorization",
        "x-api-key",
        "rltoken",
        "x-snowgate-upstream",
    ];

    /// The answer to a preflight request, if this is one.
    pub fn preflight(method: &Method, headers: &HeaderMap) -> Option<HttpResponse> {
        if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let mut r = empty();
        let requested = headers
            .get(header::ACCESS_CONTROL_REQUEST_METHOD)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let asked_headers = headers
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let headers_ok = asked_headers
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .all(|h| h.is_empty() || HEADERS.contains(&h.as_str()));
        let h = r.headers_mut();
        h.insert(
            header::VARY,
            HeaderValue::from_static(
                "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            ),
        );
        if headers.contains_key(header::ORIGIN)
            && METHODS.contains(requested)
            && !requested.is_empty()
            && headers_ok
        {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
            if let Ok(v) = HeaderValue::from_str(&requested.to_ascii_uppercase()) {
                h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
            }
            if !asked_headers.is_empty() {
                if let Ok(v) = HeaderValue::from_str(asked_headers) {
                    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
                }
            }
        }
        Some(r)
    }

    /// Headers every actual response carries.
    pub fn decorate(request_has_origin: bool, r: &mut HttpResponse) {
        let h = r.headers_mut();
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        if request_has_origin {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
    }
}

/// `GET /ext/health/liveness`: 200 for as long as the process serves, whatever the pool's state
/// or a drain, so that a liveness probe never restarts a gateway because its nodes are down
/// (readiness and `/ext/health` say whether it can serve calls).
fn liveness(method: &Method) -> HttpResponse {
    if method == Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "snowgate answers GET /ext/health/liveness\n",
        );
    }
    json(StatusCode::OK, "{\"healthy\":true}\n")
}

impl Front {
    /// Answers one HTTP request that came on `conn`.
    pub async fn handle<B>(self: Arc<Self>, req: Request<B>, conn: &ConnInfo) -> HttpResponse
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if let Some(r) = cors::preflight(req.method(), req.headers()) {
            return r;
        }
        let has_origin = req.headers().contains_key(header::ORIGIN);
        let mut r = self.route(req, conn).await;
        cors::decorate(has_origin, &mut r);
        if self.draining.load(Ordering::Relaxed) {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }

    async fn route<B>(&self, req: Request<B>, conn: &ConnInfo) -> HttpResponse
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_owned();
        let Some(family) = family_for_path(&path) else {
            return match path.as_str() {
                "/ext/health" | "/ext/health/health" | "/ext/health/readiness" => {
                    self.health(req.method())
                }
                "/ext/health/liveness" => liveness(req.method()),
                "/metrics" if req.method() == Method::GET => {
                    // moka counts its entries at maintenance: bring the cache's gauges up to date.
                    if let Some(cache) = &self.cache {
                        cache.usage().await;
                    }
                    let free = self.body_room.available_permits();
                    let buffered = self.limits.total_body_bytes.saturating_sub(free);
                    self.metrics
                        .body_buffered
                        .set(i64::try_from(buffered).unwrap_or(i64::MAX));
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
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        let media = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default();
        if !media.eq_ignore_ascii_case(b"application/json") {
            let media = String::from_utf8_lossy(media);
            let msg = format!("rpc: unrecognized Content-Type: {media}");
            return self.reject(
                "unsupported_media_type",
                text(StatusCode::UNSUPPORTED_MEDIA_TYPE, msg),
            );
        }
        let caller = self.caller(req.headers(), conn.peer);
        let limit = self.limits.body_bytes;
        // Held until the answer is made: the body's bytes live that long.
        let mut room = BodyRoom {
            conn: &conn.body_room,
            total: &self.body_room,
            held: 0,
        };
        let body = {
            let read = collect_body(req.into_body(), limit, &mut room);
            let mut read = std::pin::pin!(read);
            // Most bodies arrive with their headers: a timer is armed only for one that has not.
            match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
                Poll::Ready(read) => read,
                Poll::Pending => tokio::time::timeout(self.limits.body_timeout, read)
                    .await
                    .unwrap_or(Err(BodyError::Timeout)),
            }
        };
        let body = match body {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                let e = ProxyError::BodyTooLarge(limit);
                return self.reject(e.outcome(), json(e.status(), e.body(None)));
            }
            Err(BodyError::Timeout) => {
                let e = ProxyError::BodyTimeout(self.limits.body_timeout);
                tracing::debug!(request_id = caller.request_id(), peer = %conn.peer, "request body timed out");
                let mut r = json(e.status(), e.body(None));
                // The rest of the body may still come: the connection cannot be reused.
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return self.reject(e.outcome(), r);
            }
            Err(BodyError::Broken) => {
                return self.reject(
                    "body_error",
                    text(StatusCode::BAD_REQUEST, "bad request body\n"),
                );
            }
        };
        let answer = self.rpc(family, &path, &body, &caller).await;
        drop(room);
        answer
    }

    /// Who is calling: admin or not, pinning, and whose quota pays.
    fn caller(&self, headers: &HeaderMap, peer: SocketAddr) -> Caller {
        let admin = self
            .admin
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
        let mut body = serde_json::to_vec(&status).unwrap_or_default();
        body.push(b'\n');
        json(code, body)
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
        let index = match &method {
            None => None,
            Some(m) => match self.registry.get(m) {
                Some(spec) => Some(spec.index),
                None => {
                    return text(StatusCode::BAD_REQUEST, format!("unknown method {m:?}\n"));
                }
            },
        };
        let Some(cache) = &self.cache else {
            return json(
                StatusCode::OK,
                "{\"purged\":false,\"reason\":\"cache disabled\"}\n",
            );
        };
        match cache.purge(index).await {
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

    /// A JSON-RPC body, already read: one call or a batch.
    async fn rpc(&self, family: Family, path: &str, body: &[u8], caller: &Caller) -> HttpResponse {
        if gojson::nesting_depth(body) > self.limits.depth {
            if let Some(over) = self.charge_refused(caller, None) {
                return over.into_response();
            }
            self.count(None, "invalid_request");
            let msg = format!("request nested deeper than {} levels", self.limits.depth);
            return json(StatusCode::OK, response::error(-32600, &msg, None, None));
        }
        let first = body.iter().find(|c| !c.is_ascii_whitespace());
        if first == Some(&b'[') {
            if let Ok(range) = gojson::scan_value(body) {
                return self.batch(family, path, &body[range], caller).await;
            }
        }
        self.one(family, path, body, caller, false)
            .await
            .into_response()
    }

    /// A batch: snowgate's extension (nodes refuse arrays). Each call goes through the whole
    /// stack on its own, a bounded number at a time; answers keep the order of the calls;
    /// notifications get no entry.
    async fn batch(&self, family: Family, path: &str, raw: &[u8], caller: &Caller) -> HttpResponse {
        let elements = gojson::array_elements(raw).unwrap_or_default();
        if elements.is_empty() || elements.len() > self.limits.batch_len {
            if let Some(over) = self.charge_refused(caller, None) {
                return over.into_response();
            }
        }
        if elements.is_empty() {
            self.count(None, "invalid_request");
            return json(
                StatusCode::OK,
                response::error(-32600, "invalid request: empty batch", None, None),
            );
        }
        if elements.len() > self.limits.batch_len {
            self.count(None, "invalid_request");
            let msg = format!(
                "batch of {} calls exceeds the limit of {}",
                elements.len(),
                self.limits.batch_len
            );
            return json(
                StatusCode::PAYLOAD_TOO_LARGE,
                response::error(-32600, &msg, None, None),
            );
        }
        type Pending<'a> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send + 'a>>;
        let calls: Vec<Pending<'_>> = elements
            .into_iter()
            .map(|e| Box::pin(self.one(family, path, e, caller, true)) as Pending<'_>)
            .collect();
        let outcomes: Vec<Outcome> = futures_util::stream::iter(calls)
            .buffered(self.limits.batch_concurrency)
            .collect()
            .await;
        let retry_after = outcomes.iter().filter_map(|o| o.retry_after).max();
        let r = match join_batch(outcomes.into_iter().filter_map(|o| o.body)) {
            Some(body) => json(StatusCode::OK, body),
            None => return empty(),
        };
        let mut r = r;
        if let Some(secs) = retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r
    }

    /// One call. Inside a batch, envelope errors follow JSON-RPC 2.0 (-32600 for an element that
    /// is not a request); alone, they follow the node's catalog.
    async fn one(
        &self,
        family: Family,
        path: &str,
        raw: &[u8],
        caller: &Caller,
        in_batch: bool,
    ) -> Outcome {
        let decoded = jsonrpc::decode(raw);
        let id = decoded.envelope.id.as_deref();
        let refused = decoded.verdict() != Verdict::Call
            || decoded.ambiguity.is_some()
            || !matches!(
                self.registry.get(&decoded.envelope.method),
                Some(spec) if spec.family == family
            );
        if refused {
            if let Some(over) = self.charge_refused(caller, id) {
                return over;
            }
        }
        match decoded.verdict() {
            Verdict::ParseError(msg) if in_batch => {
                self.count(None, "invalid_request");
                return Outcome::rpc_error(-32600, &format!("invalid request: {msg}"), None, id);
            }
            Verdict::ParseError(msg) => {
                self.count(None, "parse_error");
                let data = decoded.error_data();
                return Outcome::rpc_error(-32700, &msg, Some(&data), id);
            }
            Verdict::InvalidVersion => {
                self.count(None, "invalid_request");
                if id.is_none() && !in_batch {
                    return Outcome::silent();
                }
                let data = decoded.error_data();
                return Outcome::rpc_error(-32600, "jsonrpc must be 2.0", Some(&data), id);
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
            Err(e) => return self.refuse(e, None, caller, id),
        };
        let call = RpcCall {
            spec,
            params: decoded.envelope.params,
            id: decoded.envelope.id.map(Bytes::from),
            caller: caller.clone(),
            route_min_height: None,
        };
        // What a node receives is re-encoded, never longer than the client's own bytes except
        // for invalid UTF-8 (each stray byte is the three bytes of U+FFFD, as Go reads it): a call
        // whose re-encoding would pass the body limit is refused. Only a body that could triple
        // past the limit is measured.
        let most = self.limits.body_bytes + UPSTREAM_ENVELOPE;
        if raw.len().saturating_mul(3) > self.limits.body_bytes
            && call.upstream_len(u64::MAX) > most
        {
            let _ = self.charge_refused(caller, None);
            let e = ProxyError::TooLargeForNode(self.limits.body_bytes);
            return self.refuse(e, Some(&call.spec), caller, call.id.as_deref());
        }
        let spec = call.spec.clone();
        let client_id = call.id.clone();
        match self.rpc.clone().oneshot(call).await {
            Ok(answer) => {
                let outcome = match answer.kind {
                    AnswerKind::Result => "ok",
                    AnswerKind::Error => "rpc_error",
                };
                self.count(Some(&spec), outcome);
                Outcome {
                    body: client_id.as_deref().map(|id| answer.chunks(Some(id))),
                    status: StatusCode::OK,
                    retry_after: None,
                    cache: Some(answer.cache.header()),
                }
            }
            Err(e) => {
                if matches!(e, ProxyError::Refused { .. }) {
                    // Refused by policy: the answer stands, the next call pays if this one
                    // went over.
                    let _ = self.charge_refused(caller, None);
                }
                self.refuse(e, Some(&spec), caller, client_id.as_deref())
            }
        }
    }

    /// Charges a refused call's `refused_cost` to the caller's quota (admins excepted); over
    /// quota, the 429 to answer instead.
    fn charge_refused(&self, caller: &Caller, id: Option<&[u8]>) -> Option<Outcome> {
        let limiter = self.limiter.as_ref().filter(|_| !caller.admin)?;
        let over = limiter
            .charge(&caller.client, limiter.refused_units())
            .err()?;
        let e = ProxyError::RateLimited {
            retry_after_secs: over.retry_after.as_secs_f64().ceil().max(1.0) as u64,
        };
        self.count(None, e.outcome());
        Some(Outcome::error(&e, id))
    }

    /// Counts a call by method (`None`: refused before a method was known) and outcome.
    fn count(&self, spec: Option<&MethodSpec>, outcome: &str) {
        match spec {
            Some(s) => self.requests.inc(s.index, &[&s.name], outcome),
            None => self.requests.inc(self.registry.len(), &["-"], outcome),
        }
    }

    fn refuse(
        &self,
        e: ProxyError,
        spec: Option<&MethodSpec>,
        caller: &Caller,
        id: Option<&[u8]>,
    ) -> Outcome {
        self.count(spec, e.outcome());
        let method = spec.map_or("-", |s| s.name.as_str());
        let request_id = caller.request_id();
        match e.blame() {
            crate::error::Blame::Client => {
                // Quoted as a whole: the error's text can carry a client's method name.
                tracing::debug!(request_id, method, error = ?e.to_string(), "refused")
            }
            _ => tracing::warn!(request_id, method, error = ?e.to_string(), "call failed"),
        }
        if id.is_none() && e.status() == StatusCode::OK {
            // A notification gets no answer, as from a node.
            return Outcome::silent();
        }
        Outcome::error(&e, id)
    }
}

/// A batch's answer: the calls' answers as one JSON array (`None` when every call was a
/// notification). Small answers are copied into one buffer; large ones stay shared chunks.
fn join_batch(bodies: impl Iterator<Item = Chunks>) -> Option<Chunks> {
    let mut parts: Vec<Bytes> = Vec::new();
    let mut small: Vec<u8> = Vec::new();
    let mut any = false;
    for body in bodies {
        small.push(if any { b',' } else { b'[' });
        any = true;
        let mut pieces = body.into_parts();
        // Each answer ends with a newline, which the array does not keep.
        if let Some(last) = pieces.last_mut() {
            if last.ends_with(b"\n") {
                *last = last.slice(..last.len() - 1);
            }
        }
        for piece in pieces {
            if piece.len() > crate::body::SHARE_ABOVE {
                parts.push(Bytes::from(std::mem::take(&mut small)));
                parts.push(piece);
            } else {
                small.extend_from_slice(&piece);
            }
        }
    }
    if !any {
        return None;
    }
    small.extend_from_slice(b"]\n");
    parts.push(Bytes::from(small));
    Some(if parts.len() == 1 {
        Chunks::from(parts.remove(0))
    } else {
        Chunks::many(parts)
    })
}
