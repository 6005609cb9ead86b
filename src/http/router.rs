//! Routing: which path is what ([`super::rpc`] says which are JSON-RPC on which listener), the
//! node's HTTP-level refusals, and the request body.
//!
//! * `POST /ext/info`, the five P-chain paths, the P-chain's ProposerVM path and `POST
//!   /ext/health` (the node's health API, the one RPC path of the admin listener): JSON-RPC. Any
//!   other method gets the node's 405, a content type other than `application/json` its 415 (both
//!   as a node words them); then the caller's quota speaks before its body is read: a caller
//!   known to be over it gets its 429 at once (`"id":null`, nothing of the body read or echoed),
//!   and the body is charged by its size ([`crate::ratelimit::BodyCharge`]: the declared length
//!   up front, else as it arrives); then the body is read within its limits and its
//!   connection's, address's and the gateway's room ([`super::request_body`]) and handed, with
//!   who is calling, to the layer below as an [`RpcRequest`]. Only what is parsed there is
//!   forwarded: the client's headers and bytes never reach a node.
//! * snowgate's own endpoints ([`super::admin`], which also says who may use them on which
//!   listener);
//! * anything else: the node's 404.
//!
//! Every JSON-RPC answer to a caller charged by a quota says where it stands (the RateLimit header
//! fields, [`Quota::stamp`]), taken once the answer is made.
//!
//! The router's future is boxed: it holds the request body's room while the call runs below it.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, Request};
use tokio::sync::Semaphore;
use tower::{Layer, Service};

use super::admin::{Admin, Endpoint};
use super::record::{Record, RequestLog};
use super::request_body::{self, AddressRooms, BodyError, BodyRoom, Meter};
use super::rpc::{rpc_route, Rpc, RpcRequest};
use super::{ConnInfo, HttpResponse, X_REQUEST_ID};
use crate::call::{Caller, ClientId};
use crate::config::{ClientIpHeader, LimitsConfig};
use crate::error::{Counted, ProxyError};
use crate::jsonrpc::http::media_type;
use crate::ratelimit::{client, BodyCharge, Quota};

/// The header an admin caller uses to pin a call to one upstream.
pub const PIN_HEADER: &str = "x-snowgate-upstream";

/// Whose body room a request takes ([`Routes::room_of`]).
#[derive(Clone, Copy)]
struct RoomOf {
    address: IpAddr,
    direct: bool,
}

/// What the router shares between connections.
pub struct Routes {
    /// snowgate's endpoints; its admin keys and metrics serve the router too.
    pub(crate) admin: Admin,
    /// Whose quota a request is charged to, and what its body costs.
    pub(crate) quota: Quota,
    pub(crate) limits: LimitsConfig,
    /// Room for request bodies over all connections (`limits.total_body_bytes`).
    pub(crate) body_room: Arc<Semaphore>,
    /// Room for request bodies per client address (`limits.address_body_bytes`).
    pub(crate) address_rooms: Arc<AddressRooms>,
    /// Whose forwarded address is believed (`rate_limit.trusted_proxies`, `client_ip_header`):
    /// the body room of a trusted proxy's request is its client's.
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    pub(crate) client_ip_header: ClientIpHeader,
    /// Where a JSON-RPC request refused here is recorded (the decoding layer records the rest).
    pub(crate) log: Arc<RequestLog>,
    /// `snowgate_requests_total{method="-",outcome="rate_limited"}`, resolved on first use.
    pub(crate) limited_unread: OnceLock<prometheus::IntCounter>,
}

impl Routes {
    /// Counts a refusal made before any call was read, and answers it.
    pub(crate) fn reject(&self, e: &ProxyError) -> HttpResponse {
        if let (Counted::Http, reason) = e.counted() {
            self.admin
                .metrics
                .http_rejections
                .with_label_values(&[reason])
                .inc();
        }
        e.response(None)
    }

    /// The record of a JSON-RPC request (a `POST` to an RPC path) that began at `started`, from
    /// `client` (see [`super::record`]).
    fn record(&self, started: Instant, headers: &HeaderMap, client: IpAddr) -> Record {
        // The id is only written in the access line.
        let id = self.log.access.then(|| headers.get(X_REQUEST_ID)).flatten();
        Record::begin(self.log.clone(), started, id.cloned(), client)
    }

    /// Refuses a JSON-RPC request and finishes its record. A refusal of the call itself before
    /// its body was read (over quota) is counted as a call with no method.
    fn refuse_rpc(&self, e: &ProxyError, record: Record) -> HttpResponse {
        if let (Counted::Call, outcome) = e.counted() {
            let requests = &self.admin.metrics.requests;
            match e {
                ProxyError::RateLimited { .. } => self
                    .limited_unread
                    .get_or_init(|| requests.with_label_values(&["-", outcome]))
                    .inc(),
                _ => requests.with_label_values(&["-", outcome]).inc(),
            }
        }
        let response = self.reject(e);
        record.finish(response.status());
        response
    }

    /// Whose room the bodies of a request from `conn` with `headers` take, beside its
    /// connection's and the gateway's: its address's (an IPv4 address or IPv6 /64; behind a
    /// trusted proxy, the client's it forwards), and whether that is the connection's own.
    fn room_of(&self, conn: &ConnInfo, headers: &HeaderMap) -> RoomOf {
        let address = client::client_ip(
            conn.peer.ip(),
            &self.trusted_proxies,
            self.client_ip_header,
            headers,
        );
        // The address's own connection, or a trusted proxy's (whose connections are not capped
        // per address, so its clients' small bodies are counted too).
        let direct = !self
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&client::canonical(conn.peer.ip())));
        RoomOf { address, direct }
    }

    /// The room for the bodies of a request on `conn` (see [`Routes::room_of`]).
    fn body_room<'a>(&'a self, conn: &'a ConnInfo, of: RoomOf) -> BodyRoom<'a> {
        BodyRoom::of_address(
            &conn.body_room,
            &self.address_rooms,
            of.address,
            of.direct,
            &self.body_room,
        )
    }

    /// Who is calling: admin or not, pinning, and whose quota pays.
    fn caller(&self, headers: &HeaderMap, peer: SocketAddr) -> Caller {
        let keys = &self.admin.keys;
        let admin =
            keys.any() && keys.authorizes(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
        let pin = if admin {
            headers
                .get(PIN_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        } else {
            None
        };
        let client = self.quota.identify(peer.ip(), headers);
        Caller {
            admin,
            pin,
            ip: peer.ip(),
            client,
            request_id: headers.get(X_REQUEST_ID).cloned(),
            trace: crate::otel::Trace::OFF,
        }
    }
}

impl Routes {
    /// The client as its quota knows it: its key's name (never the key; `key` for a key without
    /// one), or its address as the limiter sees it.
    fn client_name(&self, client: &ClientId) -> String {
        match client {
            ClientId::Key(_) => self
                .quota
                .limiter()
                .and_then(|l| l.key_name(client))
                .unwrap_or("key")
                .to_string(),
            ClientId::Ip(ip) => ip.to_string(),
        }
    }

    /// `GET /snowgate/quota`: the caller's own quota, by its key or its address, at a refused
    /// call's price (asking is not free, or it would be a way to spin the limiter); over its
    /// quota, the 429 a call would get. An admin, or anyone with rate limiting off, is told it is
    /// not limited.
    fn quota_page(
        &self,
        method: &http::Method,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> HttpResponse {
        if method != http::Method::GET {
            return self.reject(&ProxyError::NotFound);
        }
        let caller = self.caller(headers, peer);
        let unlimited = || {
            let body = serde_json::json!({ "limited": false, "admin": caller.admin });
            super::json(http::StatusCode::OK, body.to_string())
        };
        if caller.admin {
            return unlimited();
        }
        let mut answer = match self.quota.charge_refused(&caller) {
            Err(e) => self.reject(&e),
            Ok(()) => match self.quota.state(&caller.client) {
                None => return unlimited(),
                Some(state) => {
                    let client = self.client_name(&caller.client);
                    super::json(http::StatusCode::OK, state.json(&client).to_string())
                }
            },
        };
        self.quota.stamp(Some(&caller.client), answer.headers_mut());
        answer
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
        let surface = self.conn.surface;
        let (family, path) = match rpc_route(surface, req.method(), req.uri().path()) {
            Rpc::Call(family, path) => (family, path),
            Rpc::NotPost => {
                let e = ProxyError::PostRequired(req.method().clone());
                return Box::pin(std::future::ready(Ok(routes.reject(&e))));
            }
            Rpc::No => {
                let conn = self.conn.clone();
                return Box::pin(async move {
                    let answer = match Endpoint::at(req.uri().path()) {
                        Some(Endpoint::Quota) => {
                            Ok(routes.quota_page(req.method(), req.headers(), conn.peer))
                        }
                        Some(endpoint) => {
                            let (method, headers) = (req.method(), req.headers());
                            let admin = &routes.admin;
                            admin
                                .serve(endpoint, surface, method, headers, req.uri())
                                .await
                        }
                        None => Err(ProxyError::NotFound),
                    };
                    Ok(answer.unwrap_or_else(|e| routes.reject(&e)))
                });
            }
        };
        let started = Instant::now();
        if let Err(e) = json_content(req.headers()) {
            let client = routes.caller(req.headers(), self.conn.peer).client_addr();
            let record = routes.record(started, req.headers(), client);
            let refused = routes.refuse_rpc(&e, record);
            return Box::pin(std::future::ready(Ok(refused)));
        }
        // What the headers say is read here, before the future is made: the future then holds
        // neither the request nor its headers (it was 2 KB, moved and allocated once per request).
        let conn = self.conn.clone();
        let (parts, body) = req.into_parts();
        let headers = &parts.headers;
        let mut caller = routes.caller(headers, conn.peer);
        // Decided once the request has passed what is checked before its body (its quota).
        let pending = crate::otel::Pending::of(headers);
        // Finished where the answer is made; dropped unfinished, the client went away.
        let record = routes.record(started, headers, caller.client_addr());
        let room_of = routes.room_of(&conn, headers);
        drop(parts);
        // The ready service goes into the future; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            // Held until the answer is made: the body's bytes live that long.
            let mut room = routes.body_room(&conn, room_of);
            // Where the caller stands, said on its answer (after the answer: what it was charged).
            let charged = (!caller.admin).then(|| caller.client.clone());
            let mut trace = crate::otel::Trace::OFF;
            let read = read_rpc_body(
                &routes,
                &conn,
                &caller,
                (pending, path, &mut trace),
                body,
                &mut room,
            );
            let read = read.await;
            // The request's span (if it got one) learns its status when the answer is made.
            caller.trace = trace.clone();
            let body = match read {
                Ok(body) => body,
                Err(e) => {
                    let mut refused = routes.refuse_rpc(&e, record);
                    routes.quota.stamp(charged.as_ref(), refused.headers_mut());
                    trace.record_outcome(e.outcome(), None, e.code(), false);
                    trace.record_status(refused.status());
                    return Ok(refused);
                }
            };
            let heavy = body.len() >= HEAVY_BODY;
            let rpc = RpcRequest {
                family,
                path,
                body,
                caller,
                record,
            };
            // `inner` is the instance `poll_ready` readied: called as it is, without `oneshot`
            // (which would hold the request in its own state first, one more move of it).
            let mut inner = inner;
            let answer = OffTheWorker::new(inner.call(rpc), heavy).await;
            drop(room);
            answer.map(|mut response| {
                routes.quota.stamp(charged.as_ref(), response.headers_mut());
                trace.record_status(response.status());
                response
            })
        })
    }
}

/// A body this large takes milliseconds to decode and key (a 1 MiB body up to tens of them).
const HEAVY_BODY: usize = 64 * 1024;

pin_project_lite::pin_project! {
    /// The call of a heavy body, polled inside `block_in_place` on a multi-threaded runtime:
    /// while the body is decoded and keyed, the worker's other tasks move to another thread
    /// instead of waiting behind it. (Tokio never lets another worker steal the task in a
    /// worker's LIFO slot: an honest client's call woken there would wait out the whole parse.)
    /// Light calls, and any call on a current-thread runtime, are polled as they are.
    struct OffTheWorker<F> {
        #[pin]
        inner: F,
        heavy: bool,
    }
}

impl<F> OffTheWorker<F> {
    fn new(inner: F, heavy: bool) -> OffTheWorker<F> {
        let multi = || {
            tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        };
        OffTheWorker {
            inner,
            heavy: heavy && multi(),
        }
    }
}

impl<F: Future> Future for OffTheWorker<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if *this.heavy {
            let inner = this.inner;
            tokio::task::block_in_place(|| inner.poll(cx))
        } else {
            this.inner.poll(cx)
        }
    }
}

/// The node's 415 unless the body is declared `application/json`.
fn json_content(headers: &HeaderMap) -> Result<(), ProxyError> {
    let (media, is_json) = media_type(headers.get(header::CONTENT_TYPE));
    if is_json {
        return Ok(());
    }
    Err(ProxyError::UnsupportedMediaType(Bytes::copy_from_slice(
        media,
    )))
}

/// The longest a refusal before the body is held (see `read_rpc_body`).
pub const REFUSAL_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads a JSON-RPC body (an RPC path's, or the health API's) for `caller`, paid by its quota
/// (admins and rate limiting off excepted). Before a byte is read, a caller known to be over its
/// quota is refused ([`Limiter::before_body`]) and a declared length is charged
/// ([`Limiter::body_units`], up to the caller's burst; this may wait on Redis as a call does);
/// the rest is charged as the bytes arrive, without waiting, and a refusal stops the read.
///
/// A body left unread is never read as a next request: over HTTP/1.1 hyper reads what has already
/// arrived and, if the body is not over, closes the connection after the answer; over HTTP/2 the
/// stream is reset (`NO_ERROR`, RFC 9113 §8.1) once the answer is sent.
async fn read_rpc_body<B>(
    routes: &Routes,
    conn: &ConnInfo,
    caller: &Caller,
    (pending, path, trace): (crate::otel::Pending, &'static str, &mut crate::otel::Trace),
    body: B,
    room: &mut BodyRoom<'_>,
) -> Result<Bytes, ProxyError>
where
    B: http_body::Body<Data = Bytes>,
{
    // The trace starts once the body is read (see `otel::Pending`): a request refused before or
    // instead of its body (over quota, too large, too slow, broken) is counted, never traced.
    let start = |trace: &mut crate::otel::Trace| {
        *trace = pending.start(path);
        if trace.is_on() {
            let client = routes.client_name(&caller.client);
            trace.record_request(&client, caller.request_id());
        }
    };
    let Some(mut charge) = routes.quota.body(caller) else {
        let read = read_body(routes, body, room, &mut ()).await;
        let body = read.map_err(|e| body_error(routes, conn, caller, e))?;
        start(trace);
        return Ok(body);
    };
    if let Err(over) = charge.before() {
        // Held for half the wait it was given (at most [`REFUSAL_HOLD`]): a client flooding past
        // its quota then gets a few refusals per connection per wait, not as many as it can
        // send, and costs no CPU meanwhile (nothing of its body is read); the connection stays
        // counted in `max_connections_per_ip`. Half, so that the refusal still comes before the
        // wait is over: a client that asks again at once is refused again, as without the hold.
        // Boxed: refusals are the few, and the timer inline would make every request's future
        // larger.
        Box::pin(tokio::time::sleep((over.retry_after / 2).min(REFUSAL_HOLD))).await;
        return Err(over.error());
    }
    let declared = body.size_hint().lower();
    // A declared length over the limit is the read's 413, charged nothing.
    if declared <= u64::try_from(routes.limits.body_bytes).unwrap_or(u64::MAX) {
        charge.declared(declared).await?;
    }
    let read = read_body(routes, body, room, &mut charge).await;
    let body = read.map_err(|e| match (e, charge.refusal()) {
        (BodyError::Refused, Some(refusal)) => refusal,
        (e, _) => body_error(routes, conn, caller, e),
    })?;
    start(trace);
    Ok(body)
}

/// A caller's quota paying for its body by size as the bytes arrive.
impl Meter for BodyCharge<'_> {
    fn arrived(&mut self, total: u64) -> bool {
        BodyCharge::arrived(self, total)
    }
}

/// Reads a JSON-RPC body within `limits` (size, time, room), paid by `meter`.
async fn read_body<B>(
    routes: &Routes,
    body: B,
    room: &mut BodyRoom<'_>,
    meter: &mut impl Meter,
) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
{
    let limits = &routes.limits;
    request_body::read(body, limits.body_bytes, limits.body_timeout, room, meter).await
}

/// The answer to a body that could not be read.
fn body_error(routes: &Routes, conn: &ConnInfo, caller: &Caller, e: BodyError) -> ProxyError {
    let limits = &routes.limits;
    match e {
        BodyError::TooLarge => ProxyError::BodyTooLarge(limits.body_bytes),
        BodyError::Timeout => {
            tracing::debug!(request_id = caller.request_id(), peer = %conn.peer, "request body timed out");
            ProxyError::BodyTimeout(limits.body_timeout)
        }
        BodyError::Broken => ProxyError::BrokenBody,
        // Only a meter refuses, and it says why; a quota refusal is all it can be.
        BodyError::Refused => ProxyError::RateLimited {
            retry_after_secs: 1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ForwardConfig, HealthConfig, UpstreamConfig};
    use crate::jsonrpc::http::{INFO_PATH, PROPOSERVM_PATH, P_CHAIN_PATHS};
    use crate::methods::Family;
    use crate::methods::Registry;
    use crate::metrics::Metrics;
    use crate::policy::AdminKeys;
    use crate::upstream::Pool;
    use http::Method;
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    use tower::ServiceExt;

    fn routes(limits: LimitsConfig) -> Arc<Routes> {
        let metrics = Metrics::new();
        let node = UpstreamConfig {
            name: "node-a".into(),
            url: "http://127.0.0.1:9".into(),
            ..Default::default()
        };
        let pool = Pool::new(
            &[node],
            HealthConfig::default(),
            ForwardConfig::default(),
            &limits,
            metrics.clone(),
        )
        .map(Arc::new)
        .unwrap_or_else(|e| panic!("a pool: {e}"));
        let body_room = Arc::new(Semaphore::new(limits.total_body_bytes));
        let keys = AdminKeys::new(&["admin-key-0123456789".to_string()]);
        Arc::new(Routes {
            admin: Admin {
                registry: Registry::builtin(),
                keys,
                pool: pool.clone(),
                cache: None,
                metrics: metrics.clone(),
                health: Arc::new(crate::health::HealthApi::new(
                    pool.clone(),
                    Arc::new(AtomicBool::new(false)),
                    None,
                )),
                body_room: body_room.clone(),
                total_body_bytes: limits.total_body_bytes,
                reload: None,
                board: crate::http::status::StatusBoard::new(metrics.clone()),
                quota: Quota::default(),
                cache_max_bytes: 0,
                admin_listener: false,
                public_versions: true,
            },
            quota: Quota::default(),
            log: Arc::new(RequestLog {
                durations: crate::metrics::HistogramTable::new(
                    metrics.request_duration.clone(),
                    Vec::new(),
                ),
                access: false,
            }),
            address_rooms: Arc::new(AddressRooms::new(
                limits.address_body_bytes,
                limits.max_connections_per_ip * 64,
            )),
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::default(),
            limited_unread: OnceLock::new(),
            limits,
            body_room,
        })
    }

    /// A scripted decode layer: records what reached it and answers 200 `ok`.
    #[allow(clippy::type_complexity)] // a test double: the log and the service
    fn recording() -> (
        Arc<Mutex<Vec<(Family, &'static str, Bytes, bool)>>>,
        impl Service<
                RpcRequest,
                Response = HttpResponse,
                Error = Infallible,
                Future = impl Future<Output = Result<HttpResponse, Infallible>> + Send,
            > + Clone
            + Send
            + 'static,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |req: RpcRequest| {
            if let Ok(mut l) = log.lock() {
                l.push((req.family, req.path, req.body, req.caller.admin));
            }
            async { Ok::<_, Infallible>(HttpResponse::new("ok".into())) }
        });
        (seen, inner)
    }

    async fn send<S>(router: &Router<S>, req: Request<Full<Bytes>>) -> (u16, String)
    where
        Router<S>:
            Service<Request<Full<Bytes>>, Response = HttpResponse, Error = Infallible> + Clone,
    {
        let r = router
            .clone()
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        let status = r.status().as_u16();
        let body = r
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn request(
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            b = b.header(header::CONTENT_TYPE, ct);
        }
        b.body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .unwrap_or_else(|e| panic!("a request: {e}"))
    }

    #[tokio::test]
    async fn rpc_bodies_go_down_with_their_api_and_everything_else_ends_here() {
        let (seen, inner) = recording();
        let conn = Arc::new(ConnInfo::new(([127, 0, 0, 1], 5000).into(), 1 << 20));
        let router = RouterLayer::new(routes(LimitsConfig::default()), conn).layer(inner);
        let json = Some("application/json; charset=utf-8");
        for path in P_CHAIN_PATHS {
            assert_eq!(
                send(&router, request(Method::POST, path, json, "{}")).await,
                (200, "ok".into())
            );
        }
        assert_eq!(
            send(&router, request(Method::POST, "/ext/info", json, "[1]"))
                .await
                .0,
            200
        );
        assert_eq!(
            send(&router, request(Method::POST, PROPOSERVM_PATH, json, "{}")).await,
            (200, "ok".into())
        );
        let cases = [
            (
                request(Method::POST, "/ext/bc/X", json, "{}"),
                404,
                "404 page not found\n",
            ),
            (
                request(Method::POST, "/ext/bc/P/", json, "{}"),
                404,
                "404 page not found\n",
            ),
            (
                request(Method::POST, "/ext/bc/P/proposervm/", json, "{}"),
                404,
                "404 page not found\n",
            ),
            (
                request(Method::POST, "/ext/P/proposervm/", json, "{}"),
                404,
                "404 page not found\n",
            ),
            (
                request(Method::GET, PROPOSERVM_PATH, json, "{}"),
                405,
                "rpc: POST method required, received GET",
            ),
            (
                request(Method::GET, "/ext/bc/P", json, "{}"),
                405,
                "rpc: POST method required, received GET",
            ),
            (
                request(Method::POST, "/ext/bc/P", None, "{}"),
                415,
                "rpc: unrecognized Content-Type: ",
            ),
            (
                request(Method::POST, "/ext/bc/P", Some("text/plain"), "{}"),
                415,
                "rpc: unrecognized Content-Type: text/plain",
            ),
            (
                request(Method::GET, "/ext/health/liveness", None, ""),
                200,
                "{\"healthy\":true}\n",
            ),
            (
                request(Method::POST, "/snowgate/cache/purge", None, ""),
                401,
                "admin key required\n",
            ),
        ];
        for (req, status, body) in cases {
            let path = req.uri().path().to_string();
            assert_eq!(
                send(&router, req).await,
                (status, body.to_string()),
                "{path}"
            );
        }
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let paths: Vec<_> = seen.iter().map(|(f, p, _, _)| (*f, *p)).collect();
        let mut expected: Vec<_> = P_CHAIN_PATHS
            .iter()
            .map(|p| (Family::Platform, *p))
            .collect();
        expected.push((Family::Info, INFO_PATH));
        expected.push((Family::ProposerVm, PROPOSERVM_PATH));
        assert_eq!(paths, expected);
        assert_eq!(seen[5].2, Bytes::from_static(b"[1]"));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_and_its_room_given_back() {
        let (seen, inner) = recording();
        let limits = LimitsConfig {
            body_bytes: 10,
            ..LimitsConfig::default()
        };
        let routes = routes(limits);
        let conn = Arc::new(ConnInfo::new(([127, 0, 0, 1], 5000).into(), 1 << 20));
        let router = RouterLayer::new(routes.clone(), conn.clone()).layer(inner);
        let req = request(
            Method::POST,
            "/ext/bc/P",
            Some("application/json"),
            "{\"x\":\"0123456789\"}",
        );
        let (status, body) = send(&router, req).await;
        assert_eq!(status, 413);
        assert!(body.contains("request body larger than 10 bytes"), "{body}");
        assert!(seen.lock().map(|s| s.is_empty()).unwrap_or(false));
        assert_eq!(conn.body_room.available_permits(), 1 << 20);
        assert_eq!(
            routes.body_room.available_permits(),
            routes.limits.total_body_bytes
        );
        let rejected = routes
            .admin
            .metrics
            .http_rejections
            .with_label_values(&["body_too_large"])
            .get();
        assert_eq!(rejected, 1);
    }
}
