//! JSON-RPC over HTTP: a body that passed the router becomes one call (or a [`super::batch`] of
//! them) for the per-call layers, and each answer is written back with the client's own id.
//!
//! The envelope is read with a node's rules ([`crate::jsonrpc::decode`]); a call a node would
//! refuse, or could read differently, is refused here with the node's error and never reaches a
//! node. Refused calls cost their caller `rate_limit.refused_cost`: reading them was work too,
//! and a client must not be able to send unlimited garbage. The per-call rate limit layer below
//! never sees them, so this layer charges them itself.
//!
//! What a client sent is echoed back only while it is small, because every answer snowgate makes
//! itself (a cache hit, a 429, a -32600) is cheap to provoke and is held until the client takes
//! it: an echo without a bound let one request of a 1 MiB id of `<` make a 6 MiB answer (Go's
//! escaping writes `\u003c`). So:
//! * an id longer than [`MAX_ID_BYTES`] (its raw bytes, as sent) is refused with a short -32600
//!   (`invalid request: id longer than 256 bytes`, `"id":null`, nothing echoed) and never reaches
//!   a node; in a batch, that element alone. A node echoes any id: this costs the clients whose
//!   ids are longer, and real ones send numbers, short strings and UUIDs;
//! * the `data` of a -32700 / -32600 (the envelope as a node decoded it, params included) is kept
//!   byte for byte up to [`MAX_ERROR_DATA`] bytes and is `null` beyond, where a node echoes it
//!   whole. The message and the code are the node's either way.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use tower::{Layer, Service};

use super::rpc::RpcRequest;
use super::{empty, json, HttpResponse};
use crate::body::Chunks;
use crate::call::{Answer, AnswerKind, Caller, RequestSummary, RpcCall};
use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::jsonrpc::{self, gojson, names, Verdict};
use crate::methods::{Family, MethodSpec, Registry};
use crate::metrics::CounterTable;
use crate::ratelimit::Quota;

/// The longest id snowgate takes, in raw bytes as sent (whitespace included): a UUID string is
/// 38, a Go client's random int63 19. Longer ones are refused (see the module doc).
pub const MAX_ID_BYTES: usize = 256;

/// The longest `data` of a -32700 / -32600 snowgate echoes; longer is sent as `null`.
pub const MAX_ERROR_DATA: usize = 1024;

/// The error for an id over [`MAX_ID_BYTES`], if this envelope's is.
pub(crate) fn id_too_long(decoded: &jsonrpc::Decoded) -> Option<ProxyError> {
    let id = decoded.envelope.id.as_ref()?;
    (id.len() > MAX_ID_BYTES).then_some(ProxyError::IdTooLong(MAX_ID_BYTES))
}

/// What a node's own service says of a method it lacks (`rpc: can't find method ...`, or of
/// another service, `rpc: can't find service ...`, or of a name it will not map).
fn no_such_method(family: Family, method: &str) -> ProxyError {
    let service = family.service();
    let message = match names::resolve(method, service, |_| false) {
        Err(e) => e.0,
        // Not reached: nothing is found when nothing is there.
        Ok(_) => format!("rpc: can't find method {method:?}"),
    };
    ProxyError::NoSuchMethod(message)
}

/// `X-Cache`: HIT, MISS or BYPASS. A constant: a name given as a string is parsed, and a custom
/// one allocated, on every insert.
const X_CACHE: http::HeaderName = http::HeaderName::from_static("x-cache");

/// What decoding shares between connections.
pub struct Decoding {
    pub(crate) registry: Registry,
    pub(crate) limits: LimitsConfig,
    /// To charge refused calls.
    pub(crate) quota: Quota,
    /// `snowgate_requests_total`, resolved per method and outcome.
    pub(crate) requests: CounterTable,
}

/// Decodes bodies into calls for `S`, the per-call layers.
#[derive(Clone)]
pub struct DecodeLayer {
    shared: Arc<Decoding>,
}

impl DecodeLayer {
    pub fn new(shared: Arc<Decoding>) -> DecodeLayer {
        DecodeLayer { shared }
    }
}

impl<S> Layer<S> for DecodeLayer {
    type Service = Decode<S>;

    fn layer(&self, inner: S) -> Decode<S> {
        Decode {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// See the module doc.
#[derive(Clone)]
pub struct Decode<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Decoding>,
}

impl<S> Service<RpcRequest> for Decode<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + Sync + 'static,
    S::Future: Send,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The per-call layers refuse per call instead of applying back-pressure.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: RpcRequest) -> Self::Future {
        // The future is `answer`'s own, boxed as it is: an `async` block around it would hold
        // the request twice (its own capture, and `answer`'s).
        Box::pin(self.clone().answer(req))
    }
}

/// What one call (single or inside a batch) comes to.
pub(super) struct Outcome {
    /// The JSON-RPC answer (with its trailing newline); `None` for a notification.
    pub(super) body: Option<Chunks>,
    pub(super) status: StatusCode,
    pub(super) retry_after: Option<u64>,
    pub(super) cache: Option<&'static str>,
    /// The call's method, when it was known.
    pub(super) method: Option<Arc<MethodSpec>>,
    /// The upstream that answered.
    pub(super) upstream: Option<Arc<str>>,
}

impl Outcome {
    /// The HTTP answer of a call on its own.
    pub(super) fn into_response(self) -> HttpResponse {
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
            method: None,
            upstream: None,
        }
    }

    pub(super) fn error(e: &ProxyError, id: Option<&[u8]>) -> Outcome {
        Outcome {
            body: Some(e.body(id).into()),
            status: e.status(),
            retry_after: e.retry_after(),
            cache: None,
            method: None,
            upstream: None,
        }
    }
}

impl<S> Decode<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + Sync + 'static,
    S::Future: Send,
{
    /// A JSON-RPC body: one call or a batch; its record finished (duration, access line), or, if
    /// the client goes away first (hyper drops this future), finished by its drop as a 499.
    async fn answer(self, req: RpcRequest) -> Result<HttpResponse, Infallible> {
        let RpcRequest {
            family,
            path,
            body,
            caller,
            mut record,
        } = req;
        let response = self
            .respond(family, path, &body, &caller, &mut record.summary)
            .await;
        record.finish(response.status());
        Ok(response)
    }

    /// The answer to a body, and what it came to in `summary`.
    async fn respond(
        &self,
        family: Family,
        path: &'static str,
        body: &[u8],
        caller: &Caller,
        summary: &mut RequestSummary,
    ) -> HttpResponse {
        let depth = self.shared.limits.depth;
        if gojson::nesting_depth(body) > depth {
            let e = ProxyError::TooDeep(depth);
            return self.refuse_whole(e, caller).into_response();
        }
        let first = body.iter().find(|c| !c.is_ascii_whitespace());
        // A batch is snowgate's extension to the APIs it forwards; the one it answers itself
        // reads a body as the node's service does (an array is its -32700).
        if first == Some(&b'[') && !family.is_local() {
            if let Ok(range) = gojson::scan_value(body) {
                let (response, calls) = self.batch(family, path, &body[range], caller).await;
                summary.calls = calls;
                summary.batch = true;
                return response;
            }
        }
        let mut outcome = self.one(family, path, body, caller, false).await;
        summary.calls = 1;
        summary.method = outcome.method.take();
        summary.cache = outcome.cache;
        summary.upstream = outcome.upstream.take();
        outcome.into_response()
    }

    /// One call. Inside a batch, envelope errors follow JSON-RPC 2.0 (-32600 for an element that
    /// is not a request); alone, they follow the node's catalog.
    pub(super) async fn one(
        &self,
        family: Family,
        path: &'static str,
        raw: &[u8],
        caller: &Caller,
        in_batch: bool,
    ) -> Outcome {
        // Decoded apart: nothing of the decoding is held (or moved) while the call runs.
        let call = match self.call_of(raw, (family, path), caller, in_batch) {
            Ok(call) => call,
            Err(answered) => return answered,
        };
        let spec = call.spec.clone();
        let client_id = call.id.clone();
        match crate::call::call_now(self.inner.clone(), call).await {
            Ok(answer) => {
                let outcome = match answer.kind {
                    AnswerKind::Result => "ok",
                    AnswerKind::Error => "rpc_error",
                };
                self.count(Some(&spec), outcome);
                let cache = answer.cache.header();
                caller.trace.record_outcome(outcome, cache, None, false);
                Outcome {
                    body: client_id.as_deref().map(|id| answer.chunks(Some(id))),
                    status: StatusCode::OK,
                    retry_after: None,
                    cache,
                    method: Some(spec),
                    upstream: answer.upstream,
                }
            }
            Err(e) => {
                if matches!(
                    e,
                    ProxyError::Refused { .. } | ProxyError::BeyondMaxDepth { .. }
                ) {
                    // Refused by policy (access, or too far back): the answer stands, the next
                    // call pays if this one went over.
                    let _ = self.charge_refused(caller, None);
                }
                self.refuse(e, Some(&spec), caller, client_id.as_deref())
            }
        }
    }

    /// The call a body makes, or the answer it gets instead (refused, or a notification
    /// answered by silence).
    fn call_of(
        &self,
        raw: &[u8],
        (family, path): (Family, &'static str),
        caller: &Caller,
        in_batch: bool,
    ) -> Result<RpcCall, Outcome> {
        let decoded = jsonrpc::decode(raw);
        if let Some(e) = id_too_long(&decoded) {
            // Answered whatever else is wrong, and without the id.
            if let Some(over) = self.charge_refused(caller, None) {
                return Err(over);
            }
            return Err(self.refuse(e, None, caller, None));
        }
        let id = decoded.envelope.id.as_deref();
        let registry = &self.shared.registry;
        let spec = match decoded.verdict() {
            Verdict::ParseError(msg) if in_batch => Err(ProxyError::NotARequest(msg)),
            Verdict::ParseError(message) => Err(ProxyError::Parse {
                message,
                data: decoded.error_data_within(MAX_ERROR_DATA),
            }),
            Verdict::InvalidVersion if id.is_none() && !in_batch => {
                // A notification with a bad version: a node answers nothing, and so do we.
                if let Some(over) = self.charge_refused(caller, None) {
                    return Err(over);
                }
                self.count(None, "invalid_request");
                return Err(Outcome::silent());
            }
            Verdict::InvalidVersion => Err(ProxyError::InvalidVersion {
                data: decoded.error_data_within(MAX_ERROR_DATA),
            }),
            Verdict::Call => match (&decoded.ambiguity, registry.get(&decoded.envelope.method)) {
                (Some(why), _) => Err(ProxyError::Ambiguous(why.clone())),
                // The API the gateway answers itself words a method it lacks as its node does.
                (None, spec) if family.is_local() && !spec.is_some_and(|s| s.family == family) => {
                    Err(no_such_method(family, &decoded.envelope.method))
                }
                (None, None) => Err(ProxyError::UnknownMethod {
                    method: decoded.envelope.method.clone(),
                }),
                (None, Some(spec)) if spec.family != family => Err(ProxyError::WrongPath {
                    method: decoded.envelope.method.clone(),
                    path,
                    expected: spec.family.canonical_path(),
                }),
                (None, Some(spec)) => Ok(spec.clone()),
            },
        };
        let spec = match spec {
            Ok(spec) => spec,
            Err(e) => {
                if let Some(over) = self.charge_refused(caller, id) {
                    return Err(over);
                }
                return Err(self.refuse(e, None, caller, id));
            }
        };
        caller.trace.record_method(&spec.name);
        let call = RpcCall {
            spec,
            params: decoded.envelope.params,
            id: decoded.envelope.id.map(Bytes::from),
            caller: caller.clone(),
            lookup: None,
        };
        // What a node receives is re-encoded, never longer than the client's own bytes except
        // for invalid UTF-8 (each stray byte is the three bytes of U+FFFD, as Go reads it) and
        // snowgate's own id: a call whose re-encoding would pass the body limit is refused here,
        // at `refused_cost`, by the rule the pool enforces for every call it sends (batch
        // elements included). Only a body that could triple past the limit is measured.
        let limit = self.shared.limits.body_bytes;
        let forwarded = !family.is_local();
        if forwarded && raw.len().saturating_mul(3) > limit && call.upstream_len(u64::MAX) > limit {
            let _ = self.charge_refused(caller, None);
            let e = ProxyError::TooLargeForNode(limit);
            return Err(self.refuse(e, Some(&call.spec), caller, call.id.as_deref()));
        }
        Ok(call)
    }

    /// A refusal of the whole body (too deep, a batch too long or empty): charged once, answered
    /// without an id.
    pub(super) fn refuse_whole(&self, e: ProxyError, caller: &Caller) -> Outcome {
        if let Some(over) = self.charge_refused(caller, None) {
            return over;
        }
        self.count(None, e.outcome());
        Outcome::error(&e, None)
    }

    /// Charges a refused call's `refused_cost` to the caller's quota (admins excepted), never
    /// waiting on Redis; over quota, the 429 to answer instead (or the 503 of global quotas
    /// without Redis under `on_redis_down = "deny"`).
    fn charge_refused(&self, caller: &Caller, id: Option<&[u8]>) -> Option<Outcome> {
        let e = self.shared.quota.charge_refused(caller).err()?;
        self.count(None, e.outcome());
        Some(Outcome::error(&e, id))
    }

    /// Counts a call by method (`None`: refused before a method was known) and outcome.
    fn count(&self, spec: Option<&MethodSpec>, outcome: &str) {
        let registry = &self.shared.registry;
        match spec {
            Some(s) => self.shared.requests.inc(s.index, &[&s.name], outcome),
            None => self.shared.requests.inc(registry.len(), &["-"], outcome),
        }
    }

    /// Answers a call snowgate refuses or could not serve, logged at the level its blame says.
    fn refuse(
        &self,
        e: ProxyError,
        spec: Option<&Arc<MethodSpec>>,
        caller: &Caller,
        id: Option<&[u8]>,
    ) -> Outcome {
        self.count(spec.map(|s| &**s), e.outcome());
        let failed = e.blame() != crate::error::Blame::Client;
        caller
            .trace
            .record_outcome(e.outcome(), None, e.code(), failed);
        let method = spec.map_or("-", |s| s.name.as_str());
        let request_id = caller.request_id();
        // Quoted as a whole: the error's text can carry a client's method name.
        match e.blame().log_level() {
            tracing::Level::DEBUG => {
                tracing::debug!(request_id, method, error = ?e.to_string(), "refused")
            }
            _ => tracing::warn!(request_id, method, error = ?e.to_string(), "call failed"),
        }
        let envelope = matches!(
            e,
            ProxyError::Parse { .. }
                | ProxyError::InvalidVersion { .. }
                | ProxyError::IdTooLong(_)
                | ProxyError::NotARequest(_)
        );
        if id.is_none() && e.status() == StatusCode::OK && !envelope {
            // A notification gets no answer, as from a node (an envelope it cannot read is
            // answered, with a null id).
            return Outcome::silent();
        }
        Outcome {
            method: spec.cloned(),
            ..Outcome::error(&e, id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CacheStatus, ClientId};
    use crate::http::record::{Record, RequestLog};
    use crate::metrics::{Metrics, OUTCOMES};
    use http_body_util::BodyExt;
    use std::sync::Mutex;
    use tower::ServiceExt;

    /// A scripted per-call stack: answers every call with its method name, recording the calls.
    #[allow(clippy::type_complexity)] // a test double: the log and the service
    fn scripted() -> (
        Arc<Mutex<Vec<String>>>,
        impl Service<
                RpcCall,
                Response = Answer,
                Error = ProxyError,
                Future = impl Future<Output = Result<Answer, ProxyError>> + Send,
            > + Clone
            + Send
            + Sync
            + 'static,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |call: RpcCall| {
            if let Ok(mut l) = log.lock() {
                l.push(call.spec.name.clone());
            }
            let payload = Bytes::from(format!("\"{}\"", call.spec.name));
            async move {
                Ok::<_, ProxyError>(Answer {
                    kind: AnswerKind::Result,
                    payload,
                    upstream: None,
                    upstream_height: None,
                    cache: CacheStatus::Miss,
                    trust: crate::call::Trust::Vouched,
                })
            }
        });
        (seen, inner)
    }

    fn decode<S>(inner: S, limits: LimitsConfig) -> Decode<S> {
        let registry = Registry::builtin();
        let metrics = Metrics::new();
        let shared = Decoding {
            requests: CounterTable::new(metrics.requests.clone(), registry.len() + 1, OUTCOMES),
            registry,
            limits,
            quota: Quota::default(),
        };
        DecodeLayer::new(Arc::new(shared)).layer(inner)
    }

    async fn answer<S>(d: &Decode<S>, body: &str) -> (u16, String)
    where
        S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + Sync + 'static,
        S::Future: Send,
    {
        let ip = [127, 0, 0, 1].into();
        let req = RpcRequest {
            family: Family::Platform,
            path: "/ext/bc/P",
            body: Bytes::copy_from_slice(body.as_bytes()),
            record: Record::begin(
                Arc::new(RequestLog {
                    durations: crate::metrics::HistogramTable::new(
                        Metrics::new().request_duration.clone(),
                        Vec::new(),
                    ),
                    access: false,
                }),
                std::time::Instant::now(),
                None,
                ip,
            ),
            caller: Caller {
                admin: false,
                pin: None,
                ip,
                client: ClientId::Ip(ip),
                request_id: None,
                trace: Default::default(),
            },
        };
        let r = d.clone().oneshot(req).await.unwrap_or_else(|e| match e {});
        let status = r.status().as_u16();
        let body = r
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_call_goes_down_and_comes_back_with_the_clients_id() {
        let (seen, inner) = scripted();
        let d = decode(inner, LimitsConfig::default());
        let (status, body) = answer(
            &d,
            r#"{"jsonrpc":"2.0","id":{"a":[1,2]},"method":"platform.getHeight"}"#,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            body,
            "{\"jsonrpc\":\"2.0\",\"result\":\"platform.getHeight\",\"id\":{\"a\":[1,2]}}\n"
        );
        assert_eq!(
            seen.lock().map(|s| s.clone()).unwrap_or_default(),
            ["platform.getHeight"]
        );
    }

    #[tokio::test]
    async fn refusals_never_reach_the_layers_below() {
        let (seen, inner) = scripted();
        let d = decode(inner, LimitsConfig::default());
        for body in [
            "",
            "{",
            r#"{"jsonrpc":"1.0","id":1,"method":"platform.getHeight"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"platform.nope"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"info.getNetworkID"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight","METHOD":"x"}"#,
            "[]",
            &"[".repeat(100),
        ] {
            let (status, answer) = answer(&d, body).await;
            assert_eq!(status, 200, "{body}");
            assert!(answer.contains("\"error\""), "{body}: {answer}");
        }
        assert!(seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    }

    #[tokio::test]
    async fn a_batch_keeps_its_order_and_skips_notifications() {
        let (seen, inner) = scripted();
        let d = decode(inner, LimitsConfig::default());
        let (status, body) = answer(
            &d,
            r#"[{"jsonrpc":"2.0","id":1,"method":"platform.getHeight"},
                {"jsonrpc":"2.0","method":"platform.getTimestamp"},
                7,
                {"jsonrpc":"2.0","id":"c","method":"info.getNetworkID"},
                {"jsonrpc":"2.0","id":"d","method":"platform.getTimestamp"}]"#,
        )
        .await;
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let ids: Vec<_> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["id"].clone())
            .collect();
        assert_eq!(
            ids,
            [1.into(), serde_json::Value::Null, "c".into(), "d".into()]
        );
        assert_eq!(v[1]["error"]["code"], -32600);
        assert_eq!(v[2]["error"]["code"], -32601);
        assert_eq!(v[3]["result"], "platform.getTimestamp");
        // The notification was forwarded; the wrong-path call was not.
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen.len(), 3);
        assert!(!seen.contains(&"info.getNetworkID".to_string()));
    }

    #[tokio::test]
    async fn a_batch_over_the_limit_is_refused_whole() {
        let (seen, inner) = scripted();
        let limits = LimitsConfig {
            batch_len: 2,
            ..LimitsConfig::default()
        };
        let d = decode(inner, limits);
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"platform.getHeight"}"#;
        let (status, body) = answer(&d, &format!("[{call},{call},{call}]")).await;
        assert_eq!(status, 413);
        assert!(
            body.contains("batch of 3 calls exceeds the limit of 2"),
            "{body}"
        );
        assert!(seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    }
}
