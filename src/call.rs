//! The unit of work inside the gateway: one checked JSON-RPC call, and a node's answer to it.
//!
//! The decoding layer (`crate::http::decode`) turns a request body into an [`RpcCall`] (method
//! looked up in the registry, params parsed, the client's id kept as raw bytes, who is calling);
//! the per-call layers (policy, rate limit, cache, the pool) pass it down and an [`Answer`] back
//! up; decode then writes the answer with the client's own id. Also here: the small traits by
//! which one per-call layer asks another without importing it ([`BestHeight`], [`HitProbe`],
//! [`Reload`]), what a request came to ([`RequestSummary`]), and how a layer calls the one below
//! it without holding the call in `oneshot`'s state ([`call_now`]).

use std::future::Ready;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use tower::util::Oneshot;
use tower::{Service, ServiceExt};

use crate::body::Chunks;
use crate::jsonrpc::Json;
use crate::methods::MethodSpec;

/// The identity a quota is kept for: a key the client presented, or its address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientId {
    /// Index of a key in `[[rate_limit.keys]]`.
    Key(usize),
    /// An IPv4 address or an IPv6 /64.
    Ip(IpAddr),
}

/// The prefix length of an IPv4 client's network: the unit many addresses of one owner share
/// (the quota past `max_clients`, a share of the hedges and the secondings).
pub const NETWORK_V4: u8 = 24;
/// The same for IPv6: a site's usual allocation (each /64 in it is one client).
pub const NETWORK_V6: u8 = 48;

impl ClientId {
    /// The client its network stands for: a key as it is, an address as its network's first
    /// address (IPv4 /24, IPv6 /48). What a client makes the nodes do beyond its calls (hedges,
    /// secondings) is bounded per network, so that addresses rotated within one network hold one
    /// share, not one each.
    pub fn network(&self) -> ClientId {
        match self {
            ClientId::Key(i) => ClientId::Key(*i),
            ClientId::Ip(IpAddr::V4(v4)) => {
                let bits = u32::from(*v4) & (u32::MAX << (32 - u32::from(NETWORK_V4)));
                ClientId::Ip(IpAddr::V4(bits.into()))
            }
            ClientId::Ip(IpAddr::V6(v6)) => {
                let bits = u128::from(*v6) & (u128::MAX << (128 - u32::from(NETWORK_V6)));
                ClientId::Ip(IpAddr::V6(bits.into()))
            }
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Presented a key from `[admin] api_keys`.
    pub admin: bool,
    /// `X-Snowgate-Upstream` of an admin caller: the upstream to use.
    pub pin: Option<String>,
    /// The client's address.
    pub ip: IpAddr,
    /// Whose quota the call is charged to.
    pub client: ClientId,
    /// The request id (`x-request-id`), for the log lines of this call.
    pub request_id: Option<http::HeaderValue>,
    /// What this call's spans hang from (`Off` unless `[tracing]` traces it).
    pub trace: crate::otel::Trace,
}

impl Caller {
    /// The client's address as the rate limiter sees it (from the trusted proxy's header, an
    /// IPv6 /64), or the peer's for a client known by its key.
    pub fn client_addr(&self) -> IpAddr {
        match self.client {
            ClientId::Ip(ip) => ip,
            ClientId::Key(_) => self.ip,
        }
    }

    /// The request id as text (`-` when absent).
    pub fn request_id(&self) -> &str {
        self.request_id
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
    }
}

/// The pool's best height as the layers above it read it (the cache keys head-class answers by
/// it), without depending on the pool.
pub trait BestHeight: Send + Sync {
    /// The highest height a quorum of healthy nodes has reached.
    fn best_height(&self) -> u64;

    /// The one release every node that takes traffic runs (`avalanchego/1.14.2`); `None` while
    /// they run several, or one's is not known: an answer that depends on the release is then
    /// not cached.
    fn release(&self) -> Option<String>;
}

/// Whether a call would be answered from the cache, asked by the rate limiter (a hit is charged
/// at its own price) without depending on the cache, and without counting as a lookup.
pub trait HitProbe: Send + Sync {
    /// Decides how the cache treats `call` (a [`Lookup`], built once: bypass, or its key built
    /// and hashed), leaves that decision on the call for the cache to answer by, and says whether
    /// the cache holds an answer for it now.
    fn would_hit(&self, call: &mut RpcCall) -> bool;
}

/// What a call makes the nodes do beyond its own attempts (a hedge, a seconding), charged to its
/// caller's quota by the rate limiter, asked by the pool and the cache without depending on it.
pub trait Surcharge: Send + Sync {
    /// Charges `call`'s caller, without waiting, for one more node request of it: its method's
    /// cost again. `false`: over its quota, and the request is not to be made.
    fn surcharge(&self, call: &RpcCall) -> bool;
}

/// How the cache treats one call, decided once per call by the first layer that needs it: the
/// rate limiter, which charges a hit at its own price, or else the cache itself. It rides on the
/// call ([`RpcCall::lookup`]) from the one to the other, so that the price and the
/// answer follow one rule and one key, built and hashed once; the cache then takes the key, and
/// the height stays for the pool to route by.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// `None`: the call bypasses the cache (pinned to a node, or not cacheable), or the cache has
    /// taken the key.
    pub(crate) key: Option<CacheKey>,
    /// A head-class call's: the pool's best height when it was decided, which its entry belongs
    /// to; the pool prefers nodes that have reached it.
    pub(crate) height: Option<u64>,
    /// Set on the cache's own call that seconds an answer (see [`Trust::Unseconded`]): the node
    /// that gave it, which the pool does not ask again.
    pub(crate) second_to: Option<Arc<str>>,
}

/// A cacheable call's key: the canonical text (method, params, and the height of a head-class
/// entry) and its hash in the cache, each computed once.
#[derive(Debug, Clone)]
pub struct CacheKey {
    /// What an entry is compared with on a hit.
    pub(crate) text: String,
    /// The cache's keyed hash of `text`.
    pub(crate) fingerprint: u64,
}

/// What one HTTP request came to, for its duration histogram and access line: filled in the
/// request's record on its way down (`crate::http::record`), never carried back up.
#[derive(Debug, Clone, Default)]
pub struct RequestSummary {
    /// The method of a single call (`None`: a batch, or refused before a method was known).
    pub method: Option<Arc<MethodSpec>>,
    /// Calls in the body: 1, a batch's length, or 0 when the body was refused whole.
    pub calls: usize,
    /// The body was a batch.
    pub batch: bool,
    /// `HIT`, `MISS` or `BYPASS` for a single call that got an answer.
    pub cache: Option<&'static str>,
    /// The upstream that answered a single call.
    pub upstream: Option<Arc<str>>,
    /// The client's address, as the rate limiter saw it.
    pub client: Option<IpAddr>,
}

/// What a config reload did, as `POST /snowgate/reload` answers it and the log tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    /// What changed, one short line each (`upstream added: node-d`, `rate_limit`); no secret.
    pub changed: Vec<String>,
    /// Keys that changed in the file but apply only after a restart (`server.listen`).
    pub restart_needed: Vec<String>,
}

/// Re-reads and applies the gateway's config, asked by the admin endpoint without depending on
/// the gateway that does it. `Err` says why nothing changed (file, key, reason).
pub trait Reload: Send + Sync {
    fn reload(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ReloadReport, ReloadFailure>> + Send>,
    >;
}

/// Why a reload asked through [`Reload`] changed nothing; its text is what `POST /snowgate/reload`
/// answers.
#[derive(Debug, thiserror::Error)]
pub enum ReloadFailure {
    /// The reload ran and changed nothing: the reloader's own error (the gateway's
    /// `ReloadError`: no file, an invalid one, a node that cannot be set up), as it words it.
    /// Boxed because this module ranks below the config and the gateway; reach the error itself
    /// with `downcast_ref`.
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
    /// The task running the reload did not finish (it panicked).
    #[error("the reload task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The gateway is gone or going: there is nothing left to reload.
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

/// One call on its way to a node.
#[derive(Debug, Clone)]
pub struct RpcCall {
    pub spec: Arc<MethodSpec>,
    /// `None` when absent or null (forwarded without params).
    pub params: Option<Json>,
    /// The client's id, raw; `None` for a notification.
    pub id: Option<Bytes>,
    pub caller: Caller,
    /// The cache's [`Lookup`] for this call (`None` until a layer decides it): made by the rate
    /// limiter or the cache, its key taken by the cache, its height read by the pool
    /// ([`RpcCall::route_height`]).
    pub lookup: Option<Lookup>,
}

impl RpcCall {
    /// The height the cache decided a head-class call's answer belongs to: the pool prefers nodes
    /// that have reached it.
    pub fn route_height(&self) -> Option<u64> {
        self.lookup.as_ref().and_then(|l| l.height)
    }

    /// The block height a node reads from the call ([`crate::jsonrpc::args::height`]): the
    /// height param as a number or a quoted number, and 0 when it is left out (absent, `null`,
    /// misspelt, params `null`, `[]`, `[null]`, `[{}]` or omitted), as a node's zero-valued args
    /// struct has it. `None` for `"proposed"`, for params a node cannot decode (its own error
    /// answers them) and for a method without a height param. The one reading of a call's height:
    /// the depth limit judges it, the cache keeps its answer as final, the pool routes by it.
    pub fn requested_height(&self) -> Option<u64> {
        let name = self.spec.height_param.as_deref()?;
        match crate::jsonrpc::args::height(self.params.as_ref(), name) {
            Ok(crate::jsonrpc::args::Height::At(height)) => Some(height),
            Ok(crate::jsonrpc::args::Height::Proposed) | Err(_) => None,
        }
    }

    /// The request body sent to a node: re-encoded from the parsed call with our own id, never the
    /// client's bytes. Strings carry only the escapes JSON requires (a node's decoder reads `<` and
    /// `\u003c` alike; Go's HTML-safe escapes made six bytes of each `<`, `>`, `&`), so the params
    /// are never longer than the client sent them, except where invalid UTF-8 became U+FFFD (three
    /// bytes for as little as one): [`RpcCall::upstream_body_within`] bounds that case.
    pub fn upstream_body(&self, upstream_id: u64) -> Vec<u8> {
        let mut out = String::with_capacity(96);
        self.write_upstream_body(&mut out, upstream_id);
        out.into_bytes()
    }

    /// [`RpcCall::upstream_body`], or `None` when it would be longer than `max` bytes: the length
    /// is counted first (one pass over the params, nothing written), so a body that invalid UTF-8
    /// would inflate past a limit is refused before it is built.
    pub fn upstream_body_within(&self, upstream_id: u64, max: usize) -> Option<Vec<u8>> {
        let len = self.upstream_len(upstream_id);
        if len > max {
            return None;
        }
        let mut out = String::with_capacity(len);
        self.write_upstream_body(&mut out, upstream_id);
        Some(out.into_bytes())
    }

    /// The exact length of [`RpcCall::upstream_body`] for `upstream_id`, counted without encoding
    /// (`u64::MAX` gives the longest any id makes it).
    pub fn upstream_len(&self, upstream_id: u64) -> usize {
        const FIXED: usize = r#"{"jsonrpc":"2.0","id":,"method":}"#.len();
        const PARAMS: usize = r#","params":"#.len();
        FIXED
            + itoa::Buffer::new().format(upstream_id).len()
            + crate::jsonrpc::gojson::plain_string_len(&self.spec.name)
            + self.params.as_ref().map_or(0, |p| PARAMS + p.plain_len())
    }

    fn write_upstream_body(&self, out: &mut String, upstream_id: u64) {
        out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        out.push_str(itoa::Buffer::new().format(upstream_id));
        out.push_str(",\"method\":");
        crate::jsonrpc::gojson::write_plain_string(out, &self.spec.name);
        if let Some(p) = &self.params {
            out.push_str(",\"params\":");
            p.encode_plain_into(out);
        }
        out.push('}');
    }
}

/// Whether a node's answer carries a result or a JSON-RPC error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    Result,
    Error,
}

/// Where an answer came from, for the `X-Cache` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    Bypass,
    /// Answered by the gateway itself (the health API): no `X-Cache`, as before any cache.
    Local,
}

impl CacheStatus {
    /// The `X-Cache` header value (`None`: the answer has none).
    pub fn header(self) -> Option<&'static str> {
        match self {
            CacheStatus::Hit => Some("HIT"),
            CacheStatus::Miss => Some("MISS"),
            CacheStatus::Bypass => Some("BYPASS"),
            CacheStatus::Local => None,
        }
    }
}

/// How far the pool vouches for an immutable answer (`[cache] verify`), read by the cache before
/// it keeps one: the pool has checked it and returns no answer that contradicts the call, but an
/// answer with nothing to check, or that leaves out what the check reads, is one node's word,
/// which the setting may want seconded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trust {
    /// Not judged by the pool: not an immutable result, `verify = "off"`, or not a node's answer
    /// (the cache's, the gateway's own). Kept by the cache's own rules.
    #[default]
    Vouched,
    /// Held against its call and not contradicted, and one node's word the setting accepts
    /// (proved, or a primary's under `hash`): kept at once.
    Checked,
    /// One node's word the setting wants seconded: the client gets it, and the cache keeps it
    /// only once another node returns the same bytes.
    Unseconded,
}

impl Trust {
    /// The level an answer kept at once (not seconded) is stored under in the fleet's Redis.
    pub fn kept(self) -> Kept {
        match self {
            Trust::Vouched => Kept::Unjudged,
            Trust::Checked => Kept::Word,
            // Kept only through a seconding, which stores it as such.
            Trust::Unseconded => Kept::Seconded,
        }
    }
}

/// How far the instance that kept an answer in the fleet's Redis believed it: stored with the
/// value, so that an instance never serves what another kept on less than its own setting
/// requires. Ordered: each level says more than the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kept {
    /// Not held against its call: kept under `verify = "off"`, or an answer the pool does not
    /// judge (not immutable).
    Unjudged,
    /// Held against its call and not contradicted (proved, consistent, or nothing checkable),
    /// kept on the word of one node the setting believes alone (a primary under `hash`).
    Word,
    /// Also returned, byte for byte, by a second node (a seconding: `quorum`, a fallback's or an
    /// unreadable answer under `hash`).
    Seconded,
}

impl Kept {
    /// The byte stored in a value.
    pub fn byte(self) -> u8 {
        match self {
            Kept::Unjudged => 0,
            Kept::Word => 1,
            Kept::Seconded => 2,
        }
    }

    /// The level a stored byte names; `None` for any other byte (a foreign value).
    pub fn from_byte(b: u8) -> Option<Kept> {
        match b {
            0 => Some(Kept::Unjudged),
            1 => Some(Kept::Word),
            2 => Some(Kept::Seconded),
            _ => None,
        }
    }
}

/// A node's answer: the raw `result` value or `error` object, exactly as the node wrote it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub kind: AnswerKind,
    pub payload: Bytes,
    /// The upstream that answered (`None` when it came from the cache).
    pub upstream: Option<Arc<str>>,
    /// That upstream's last known height when it answered.
    pub upstream_height: Option<u64>,
    pub cache: CacheStatus,
    /// What the pool vouches for it (immutable answers only).
    pub trust: Trust,
}

impl Answer {
    /// The answer body for the client as [`Chunks`]: a large payload is sent as the shared bytes
    /// with the client's envelope around them, never copied, so a cached answer is held once
    /// however many clients are being sent it.
    pub fn chunks(&self, id: Option<&[u8]>) -> Chunks {
        if self.payload.len() <= crate::body::SHARE_ABOVE {
            return Chunks::from(self.body(id));
        }
        let head: &'static [u8] = match self.kind {
            AnswerKind::Result => b"{\"jsonrpc\":\"2.0\",\"result\":",
            AnswerKind::Error => b"{\"jsonrpc\":\"2.0\",\"error\":",
        };
        let mut tail = Vec::with_capacity(16 + id.map_or(4, <[u8]>::len));
        tail.extend_from_slice(b",\"id\":");
        match id {
            Some(id) => crate::jsonrpc::gojson::compact_into(&mut tail, id),
            None => tail.extend_from_slice(b"null"),
        }
        tail.extend_from_slice(b"}\n");
        Chunks::many([
            Bytes::from_static(head),
            self.payload.clone(),
            Bytes::from(tail),
        ])
    }

    /// The answer body for the client: the node's layout with the client's id.
    pub fn body(&self, id: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.len() + 48);
        match self.kind {
            AnswerKind::Result => {
                crate::jsonrpc::response::write_success(&mut out, &self.payload, id)
            }
            AnswerKind::Error => {
                out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"error\":");
                out.extend_from_slice(&self.payload);
                out.extend_from_slice(b",\"id\":");
                match id {
                    Some(id) => crate::jsonrpc::gojson::compact_into(&mut out, id),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b"}\n");
            }
        }
        out
    }
}

/// Calls for the unit tests of the layers.
#[cfg(test)]
impl RpcCall {
    /// A call of a registered `method` with `params` (JSON), from 127.0.0.1, admin or not.
    pub(crate) fn for_test(
        registry: &crate::methods::Registry,
        method: &str,
        params: &str,
        admin: bool,
    ) -> RpcCall {
        let ip: IpAddr = [127, 0, 0, 1].into();
        RpcCall {
            spec: registry.get(method).expect("a registered method").clone(),
            params: Json::parse(params.as_bytes()).ok(),
            id: Some(Bytes::from_static(b"1")),
            caller: Caller {
                admin,
                pin: None,
                ip,
                client: ClientId::Ip(ip),
                request_id: None,
                trace: Default::default(),
            },
            lookup: None,
        }
    }
}

/// What [`call_now`] returns: the service's own future, or the error it was not ready with, or
/// (boxed) the call waiting in `oneshot` for a service not ready yet.
pub type Called<S, R> = Either<
    <S as Service<R>>::Future,
    Either<
        Ready<Result<<S as Service<R>>::Response, <S as Service<R>>::Error>>,
        Pin<Box<Oneshot<S, R>>>,
    >,
>;

/// Calls `service` with `request` at once if it is ready when asked, as every layer of the
/// request path is (none applies back-pressure: each refuses per call instead): the caller's
/// future then holds the service's future alone, where `oneshot` would hold the request in its
/// own state until first polled (the request moved twice more, and the future that much larger).
/// A service that fails to be ready answers that error, as `oneshot` would; one not ready yet is
/// driven by `oneshot` as usual (it asks again with the caller's waker), boxed so that the rare
/// case does not make every caller's future larger.
pub fn call_now<S: Service<R>, R>(mut service: S, request: R) -> Called<S, R> {
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    match service.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => Either::Left(service.call(request)),
        Poll::Ready(Err(e)) => Either::Right(Either::Left(std::future::ready(Err(e)))),
        Poll::Pending => Either::Right(Either::Right(Box::pin(service.oneshot(request)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_network_is_its_v4_slash_24_or_v6_slash_48_and_a_key_itself() {
        let ip = |s: &str| ClientId::Ip(s.parse().expect("an address"));
        assert_eq!(ip("198.51.100.77").network(), ip("198.51.100.0"));
        assert_eq!(ip("198.51.100.0").network(), ip("198.51.100.0"));
        assert_ne!(ip("198.51.101.1").network(), ip("198.51.100.0"));
        assert_eq!(ip("2001:db8:1:2:3::9").network(), ip("2001:db8:1::"));
        assert_ne!(ip("2001:db8:2::").network(), ip("2001:db8:1::"));
        assert_eq!(ClientId::Key(3).network(), ClientId::Key(3));
    }

    /// Says not ready `pending` times (waking its caller), then fails once if `fails`, then is
    /// ready; answers the request doubled. Counts its calls.
    struct Slow {
        pending: u32,
        fails: bool,
        calls: Arc<std::sync::atomic::AtomicU32>,
    }

    impl Service<u32> for Slow {
        type Response = u32;
        type Error = &'static str;
        type Future = Ready<Result<u32, &'static str>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
            if self.pending > 0 {
                self.pending -= 1;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if std::mem::take(&mut self.fails) {
                return Poll::Ready(Err("not ready"));
            }
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, n: u32) -> Self::Future {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::ready(Ok(n * 2))
        }
    }

    #[tokio::test]
    async fn call_now_answers_as_oneshot_would() {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let slow = |pending, fails| Slow {
            pending,
            fails,
            calls: calls.clone(),
        };
        // Ready at once: called at once.
        let now = call_now(slow(0, false), 4);
        assert!(matches!(now, Either::Left(_)));
        assert_eq!(now.await, Ok(8));
        // Not ready yet: the call waits, and is made once the service is ready.
        assert_eq!(call_now(slow(2, false), 5).await, Ok(10));
        // Failing to be ready: that error, and no call (as `oneshot` answers).
        assert_eq!(call_now(slow(0, true), 6).await, Err("not ready"));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn shared_chunks_say_the_same_as_one_copied_body() {
        for kind in [AnswerKind::Result, AnswerKind::Error] {
            for size in [10, crate::body::SHARE_ABOVE + 1] {
                let mut payload = vec![b'"'];
                payload.resize(size - 1, b'a');
                payload.push(b'"');
                let answer = Answer {
                    kind,
                    payload: Bytes::from(payload),
                    upstream: None,
                    upstream_height: None,
                    cache: CacheStatus::Hit,
                    trust: Trust::Vouched,
                };
                for id in [Some(&b" { \"a\" : 1 }"[..]), Some(b"7"), None] {
                    assert_eq!(answer.chunks(id).to_bytes(), answer.body(id));
                }
            }
        }
    }
}
