//! snowgate's own refusals and failures, and their one mapping to the wire.
//!
//! Each variant knows its JSON-RPC code, its HTTP status and who is to blame; the blame picks the
//! log level and the metric label. An error a node returns inside a JSON-RPC body is not a
//! `ProxyError`: it is data, passed through to the client unchanged.
//!
//! What a client sent comes back in these answers only in small amounts, so that no answer is
//! much larger than snowgate's own words (a 429 or a -32600 is cheap to provoke, and Go's escaping
//! makes six bytes of each `<`): a name or header quoted in a message is cut at [`MAX_ECHO`]
//! bytes ([`Echo`], kept with the wire it bounds in `crate::jsonrpc`); the `data` of a -32700 / -32600 and the id are bounded where the envelope is
//! read (`crate::http::decode`). A node quotes them whole; real clients send names far shorter.

use http::{header, HeaderValue, StatusCode};

use crate::body::Chunks;

pub use crate::jsonrpc::echo::{Echo, MAX_ECHO};
use crate::jsonrpc::http::{post_required_text, unsupported_media_text, NOT_FOUND_TEXT};

/// Who caused a failure: it picks the log level of a failed call (a client's fault at debug, so
/// that hostile clients cannot flood the log; a node's or snowgate's at warn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The caller sent something we refuse.
    Client,
    /// A node failed or misbehaved.
    Upstream,
    /// snowgate itself (no capacity, shutting down).
    Proxy,
}

impl Blame {
    /// The level a failed call is logged at.
    pub fn log_level(self) -> tracing::Level {
        match self {
            Blame::Client => tracing::Level::DEBUG,
            Blame::Upstream | Blame::Proxy => tracing::Level::WARN,
        }
    }
}

/// Which counter an answer is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// `snowgate_requests_total{method,outcome}`: a JSON-RPC call (or what should have been one).
    Call,
    /// `snowgate_http_rejections_total{reason}`: an HTTP request refused before any call was read.
    Http,
}

/// Every answer snowgate makes itself instead of relaying a node's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    // HTTP, before any JSON-RPC is read: worded as a node words them.
    /// A path neither a node nor snowgate serves.
    #[error("404 page not found")]
    NotFound,
    /// An RPC path asked with a method other than POST.
    #[error("rpc: POST method required, received {}", Echo::plain(.0.as_str()))]
    PostRequired(http::Method),
    /// One of snowgate's own endpoints asked with the wrong method.
    #[error("snowgate answers {allowed} {path}")]
    WrongHttpMethod {
        allowed: &'static str,
        path: &'static str,
    },
    /// A `Content-Type` other than `application/json` (the media type as sent, byte for byte:
    /// a node writes it back unchanged, UTF-8 or not).
    #[error("rpc: unrecognized Content-Type: {}", Echo::plain(&String::from_utf8_lossy(.0)))]
    UnsupportedMediaType(bytes::Bytes),
    /// The client broke off its body, or sent a malformed one.
    #[error("bad request body")]
    BrokenBody,
    /// The request body is over `limits.body_bytes`.
    #[error("request body larger than {0} bytes")]
    BodyTooLarge(usize),
    /// The request body did not arrive within `limits.body_timeout`.
    #[error("request body not received within {}", humantime::format_duration(*.0))]
    BodyTimeout(std::time::Duration),
    /// A new connection over `limits.max_connections` (or, `per_address`, over
    /// `limits.max_connections_per_ip` from one address): answered and closed at once.
    #[error("too many open connections{}, retry later", if *per_address { " from this address" } else { "" })]
    ConnectionLimit { per_address: bool },
    /// An answer for a client address that has left `limits.address_answer_bytes` of answers
    /// unread, or (`gateway`) more than its share once all clients have left half of
    /// `limits.total_answer_bytes` unread.
    #[error("{}", if *gateway {
        "too many answers not read: this address holds more than its share of the gateway's (or the gateway all it may), read them and retry"
    } else {
        "too many answers not read from this address, read them and retry"
    })]
    AnswersUnread { gateway: bool },
    /// An admin endpoint without a valid admin key.
    #[error("admin key required")]
    Unauthorized,
    /// `POST /snowgate/cache/purge?method=NAME` with a name not in the registry.
    #[error("unknown method {}", Echo::quoted(.0))]
    UnknownPurgeMethod(String),
    /// `POST /snowgate/upstreams/NAME/cordon` (or `uncordon`) with a name no upstream has.
    #[error("no upstream named {}", Echo::quoted(.0))]
    NoSuchUpstream(String),
    /// The cache could not be purged.
    #[error("{0}")]
    PurgeFailed(String),
    /// `GET /snowgate/usage` with a query it cannot read (which parameter, and what it expects).
    #[error("{0}")]
    BadUsageQuery(String),
    /// `GET /snowgate/usage` with `[redis]`, while Redis cannot answer: the fleet's totals are
    /// there.
    #[error("usage is unavailable while Redis does not answer; retry")]
    UsageUnavailable,
    /// `POST /snowgate/reload` changed nothing: the file is invalid (file, key, reason), or there
    /// is no file to read.
    #[error("reload failed, the config in force is unchanged: {0}")]
    ReloadFailed(String),

    // The JSON-RPC envelope (`data` is the node's detail: the Go error the parser met).
    /// Not JSON, as a node words it; `data` is `None` when it would be too large to echo.
    #[error("{message}")]
    Parse {
        message: String,
        data: Option<String>,
    },
    /// `jsonrpc` is not `"2.0"`.
    #[error("jsonrpc must be 2.0")]
    InvalidVersion { data: Option<String> },
    /// An id longer than snowgate echoes (the bound in bytes): refused without being echoed.
    #[error("invalid request: id longer than {0} bytes")]
    IdTooLong(usize),
    /// A batch element that is not a request (JSON-RPC 2.0 words, inside a batch only).
    #[error("invalid request: {0}")]
    NotARequest(String),
    /// Nested deeper than `limits.depth`.
    #[error("request nested deeper than {0} levels")]
    TooDeep(usize),
    /// `[]`.
    #[error("invalid request: empty batch")]
    EmptyBatch,
    /// A batch over `limits.batch_len` calls.
    #[error("batch of {len} calls exceeds the limit of {limit}")]
    BatchTooLong { len: usize, limit: usize },
    /// An envelope a node could read differently from snowgate.
    #[error("invalid request: {0}")]
    Ambiguous(String),
    /// A call whose re-encoding for a node (snowgate's own 20-digit request id, invalid UTF-8
    /// that grows threefold) would pass `limits.body_bytes`: no node is sent more.
    #[error("invalid request: larger than {0} bytes once re-encoded for a node")]
    TooLargeForNode(usize),
    /// A node (or the proxy in front of it, nginx's `client_max_body_size`) refused the call with
    /// HTTP 413: the request's size, not the node, is at fault, so it is neither held against
    /// the node nor tried on another.
    #[error("invalid request: upstream {upstream} refused the call as too large (HTTP 413)")]
    RefusedAsTooLarge { upstream: String },

    // The call.
    /// The method is not in the registry.
    #[error("method {} is not served by this gateway", Echo::quoted(.method))]
    UnknownMethod { method: String },
    /// A method the API the gateway answers itself (the health API) does not have, in the node's
    /// words (`rpc: can't find method "health.Nope"`, a -32000 as a node answers it).
    #[error("{0}")]
    NoSuchMethod(String),
    /// The method exists but not at the path it was sent to.
    #[error("method {} is not served at {path} (use {expected})", Echo::quoted(.method))]
    WrongPath {
        method: String,
        path: &'static str,
        expected: &'static str,
    },
    /// The caller may not call this method.
    #[error("method {} is not available: {reason}", Echo::quoted(.method))]
    Refused {
        method: String,
        reason: &'static str,
    },
    /// The height the call asks about is further behind the pool's best height than the method's
    /// `[methods."NAME"] max_depth` allows (`crate::policy::depth`). Names the limit, never a
    /// node.
    #[error(
        "height {height} is {behind} blocks behind the tip; this endpoint serves {method} at most \
         {max_depth} blocks back"
    )]
    BeyondMaxDepth {
        method: String,
        height: u64,
        behind: u64,
        max_depth: u64,
    },
    /// `X-Snowgate-Upstream` names no configured upstream.
    #[error("unknown upstream {} in X-Snowgate-Upstream", Echo::quoted(.0))]
    UnknownUpstream(String),
    /// The client is over its quota.
    #[error("rate limit exceeded: retry after {retry_after_secs}s")]
    RateLimited { retry_after_secs: u64 },
    /// Global quotas are held in Redis, Redis is down, and `[rate_limit] on_redis_down = "deny"`.
    #[error("rate limit unavailable: the quota store is down")]
    QuotaUnavailable,

    // The pool.
    /// No upstream can take the request.
    #[error("no healthy upstream")]
    NoHealthyUpstream,
    /// Every usable upstream is at its concurrency limit until the deadline.
    #[error("upstreams are at their concurrency limit")]
    Overloaded,
    /// Every node that could take the call is on hold: each throttled (HTTP 429, or 503 with
    /// `Retry-After`); the wait is the soonest end of a hold, in whole seconds.
    #[error("upstreams are throttling requests: retry after {retry_after_secs}s")]
    UpstreamsThrottled { retry_after_secs: u64 },
    /// The upstream did not answer in time.
    #[error("upstream {upstream} timed out")]
    UpstreamTimeout { upstream: String },
    /// The upstream could not be reached, dropped the connection or answered a non-200 status.
    /// `detail` is a fixed category (`connect refused`, `http 500`, ...): never the node's
    /// address or anything it sent.
    #[error("upstream {upstream} unavailable: {detail}")]
    UpstreamUnavailable { upstream: String, detail: String },
    /// The upstream answered something that is not a valid JSON-RPC answer to our request.
    /// `detail` is a fixed category (`bad answer`, `invalid HTTP answer`, `answer larger than N
    /// bytes` with the gateway's bound), never the answer.
    #[error("upstream {upstream} sent an invalid answer: {detail}")]
    BadUpstreamAnswer { upstream: String, detail: String },
}

impl ProxyError {
    /// The JSON-RPC error code; `None` for the answers a node gives as plain text (HTTP-level
    /// refusals and the admin endpoints).
    pub fn code(&self) -> Option<i64> {
        use ProxyError::*;
        Some(match self {
            NotFound
            | PostRequired(_)
            | WrongHttpMethod { .. }
            | UnsupportedMediaType(_)
            | BrokenBody
            | Unauthorized
            | UnknownPurgeMethod(_)
            | NoSuchUpstream(_)
            | PurgeFailed(_)
            | BadUsageQuery(_)
            | UsageUnavailable
            | ReloadFailed(_) => return None,
            Parse { .. } => -32700,
            UnknownMethod { .. } | WrongPath { .. } | Refused { .. } => -32601,
            // The method is served; this height is not: invalid params, not a missing method.
            BeyondMaxDepth { .. } => -32602,
            NoSuchMethod(_) => -32000,
            InvalidVersion { .. }
            | IdTooLong(_)
            | NotARequest(_)
            | TooDeep(_)
            | EmptyBatch
            | BatchTooLong { .. }
            | Ambiguous(_)
            | UnknownUpstream(_)
            | BodyTimeout(_)
            | BodyTooLarge(_)
            | TooLargeForNode(_)
            | RefusedAsTooLarge { .. } => -32600,
            RateLimited { .. } => -32005,
            QuotaUnavailable
            | Overloaded
            | NoHealthyUpstream
            | UpstreamsThrottled { .. }
            | UpstreamTimeout { .. }
            | UpstreamUnavailable { .. }
            | BadUpstreamAnswer { .. }
            | ConnectionLimit { .. }
            | AnswersUnread { .. } => -32603,
        })
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        use ProxyError::*;
        match self {
            NotFound | NoSuchUpstream(_) => StatusCode::NOT_FOUND,
            PostRequired(_) | WrongHttpMethod { .. } => StatusCode::METHOD_NOT_ALLOWED,
            UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BrokenBody | UnknownPurgeMethod(_) | BadUsageQuery(_) => StatusCode::BAD_REQUEST,
            Unauthorized => StatusCode::UNAUTHORIZED,
            PurgeFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ReloadFailed(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Parse { .. }
            | InvalidVersion { .. }
            | IdTooLong(_)
            | NotARequest(_)
            | TooDeep(_)
            | EmptyBatch
            | UnknownMethod { .. }
            | NoSuchMethod(_)
            | WrongPath { .. }
            | Refused { .. }
            | BeyondMaxDepth { .. }
            | Ambiguous(_)
            | UnknownUpstream(_)
            | TooLargeForNode(_)
            | RefusedAsTooLarge { .. } => StatusCode::OK,
            RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            NoHealthyUpstream
            | Overloaded
            | QuotaUnavailable
            | UsageUnavailable
            | UpstreamsThrottled { .. }
            | ConnectionLimit { .. }
            | AnswersUnread { .. } => StatusCode::SERVICE_UNAVAILABLE,
            BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            BodyTooLarge(_) | BatchTooLong { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            UpstreamUnavailable { .. } | BadUpstreamAnswer { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// Who caused it.
    pub fn blame(&self) -> Blame {
        use ProxyError::*;
        match self {
            NoHealthyUpstream
            | Overloaded
            | QuotaUnavailable
            | PurgeFailed(_)
            | UsageUnavailable
            | ReloadFailed(_)
            | ConnectionLimit { per_address: false } => Blame::Proxy,
            UpstreamTimeout { .. }
            | UpstreamUnavailable { .. }
            | BadUpstreamAnswer { .. }
            | UpstreamsThrottled { .. } => Blame::Upstream,
            NotFound
            | PostRequired(_)
            | WrongHttpMethod { .. }
            | UnsupportedMediaType(_)
            | BrokenBody
            | BodyTooLarge(_)
            | BodyTimeout(_)
            | ConnectionLimit { per_address: true }
            | AnswersUnread { .. }
            | Unauthorized
            | UnknownPurgeMethod(_)
            | BadUsageQuery(_)
            | NoSuchUpstream(_)
            | Parse { .. }
            | InvalidVersion { .. }
            | IdTooLong(_)
            | NotARequest(_)
            | TooDeep(_)
            | EmptyBatch
            | BatchTooLong { .. }
            | Ambiguous(_)
            | TooLargeForNode(_)
            | RefusedAsTooLarge { .. }
            | UnknownMethod { .. }
            | NoSuchMethod(_)
            | WrongPath { .. }
            | Refused { .. }
            | BeyondMaxDepth { .. }
            | UnknownUpstream(_)
            | RateLimited { .. } => Blame::Client,
        }
    }

    /// The counter the answer is counted in, and its label there (`outcome` or `reason`).
    pub fn counted(&self) -> (Counted, &'static str) {
        use ProxyError::*;
        let http = |reason| (Counted::Http, reason);
        let call = |outcome| (Counted::Call, outcome);
        match self {
            NotFound => http("not_found"),
            PostRequired(_) | WrongHttpMethod { .. } => http("method_not_allowed"),
            UnsupportedMediaType(_) => http("unsupported_media_type"),
            BrokenBody => http("body_error"),
            BodyTooLarge(_) => http("body_too_large"),
            BodyTimeout(_) => http("body_timeout"),
            ConnectionLimit { .. } => http("connection_limit"),
            AnswersUnread { gateway: false } => http("answers_unread"),
            AnswersUnread { gateway: true } => http("answers_unread_gateway"),
            Unauthorized => http("unauthorized"),
            UnknownPurgeMethod(_)
            | NoSuchUpstream(_)
            | PurgeFailed(_)
            | ReloadFailed(_)
            | BadUsageQuery(_)
            | UsageUnavailable => http("bad_admin_request"),
            Parse { .. } => call("parse_error"),
            InvalidVersion { .. }
            | IdTooLong(_)
            | NotARequest(_)
            | TooDeep(_)
            | EmptyBatch
            | BatchTooLong { .. }
            | Ambiguous(_)
            | UnknownUpstream(_)
            | TooLargeForNode(_)
            | RefusedAsTooLarge { .. } => call("invalid_request"),
            UnknownMethod { .. } | NoSuchMethod(_) | WrongPath { .. } => call("unknown_method"),
            Refused { .. } => call("refused"),
            BeyondMaxDepth { .. } => call("beyond_max_depth"),
            RateLimited { .. } => call("rate_limited"),
            QuotaUnavailable => call("quota_unavailable"),
            NoHealthyUpstream => call("no_upstream"),
            UpstreamsThrottled { .. } => call("upstream_throttled"),
            Overloaded => call("overloaded"),
            UpstreamTimeout { .. } => call("upstream_timeout"),
            UpstreamUnavailable { .. } => call("upstream_unavailable"),
            BadUpstreamAnswer { .. } => call("bad_upstream_answer"),
        }
    }

    /// The answer's `Retry-After`, in whole seconds: over quota, or every node throttling.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ProxyError::RateLimited { retry_after_secs }
            | ProxyError::UpstreamsThrottled { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The metric label of the outcome (see [`ProxyError::counted`]).
    pub fn outcome(&self) -> &'static str {
        self.counted().1
    }

    /// The node's `data` detail of an envelope error (JSON: the envelope as the node read it).
    fn data(&self) -> Option<&str> {
        match self {
            ProxyError::Parse { data, .. } | ProxyError::InvalidVersion { data } => data.as_deref(),
            _ => None,
        }
    }

    /// The answer's body: a JSON-RPC error object (node layout) with the client's raw id, or the
    /// node's plain text with a trailing newline.
    pub fn body(&self, id: Option<&[u8]>) -> Vec<u8> {
        match (self, self.code()) {
            // The node's texts, from the functions the devnode answers with too; a client's part
            // of them bounded as in every answer snowgate makes.
            (ProxyError::NotFound, _) => NOT_FOUND_TEXT.as_bytes().to_vec(),
            (ProxyError::PostRequired(method), _) => {
                post_required_text(Echo::plain(method.as_str())).into_bytes()
            }
            (ProxyError::UnsupportedMediaType(media), _) => {
                unsupported_media_text(&crate::jsonrpc::echo::bounded(media))
            }
            (_, None) => format!("{self}\n").into_bytes(),
            (_, Some(code)) => {
                crate::jsonrpc::response::error(code, &self.to_string(), self.data(), id)
            }
        }
    }

    /// The whole HTTP answer: status, content type, body, and the headers that go with it
    /// (`Retry-After` over quota, `WWW-Authenticate` for an admin key, `connection: close`
    /// after a body that timed out, since the rest of it may still come).
    pub fn response(&self, id: Option<&[u8]>) -> http::Response<Chunks> {
        let mut r = http::Response::new(Chunks::from(self.body(id)));
        *r.status_mut() = self.status();
        let h = r.headers_mut();
        let content_type = if self.code().is_some() {
            crate::jsonrpc::response::JSON_CONTENT_TYPE
        } else {
            "text/plain; charset=utf-8"
        };
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if let Some(secs) = self.retry_after() {
            h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        match self {
            ProxyError::Unauthorized => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ProxyError::BodyTimeout(_) => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ProxyError::AnswersUnread { .. } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(1));
            }
            _ => {}
        }
        r
    }

    /// A whole HTTP/1.1 answer carrying this error, for the few places that must write to a socket
    /// before hyper serves it (a connection refused at accept). Framed from the body's real
    /// length, and closing the connection.
    pub fn raw_http1(&self) -> Vec<u8> {
        let body = self.body(None);
        let status = self.status();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json; charset=utf-8\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        );
        if status == StatusCode::SERVICE_UNAVAILABLE {
            out.push_str("retry-after: 1\r\n");
        }
        out.push_str(&format!(
            "connection: close\r\ncontent-length: {}\r\n\r\n",
            body.len()
        ));
        let mut out = out.into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every variant. The match below stops compiling when a variant is added, until it is
    /// listed here (and so checked against the README).
    fn every_variant() -> Vec<ProxyError> {
        use ProxyError::*;
        let all = vec![
            NotFound,
            PostRequired(http::Method::GET),
            WrongHttpMethod {
                allowed: "GET",
                path: "/ext/health",
            },
            UnsupportedMediaType(bytes::Bytes::from_static(b"text/plain")),
            BrokenBody,
            BodyTooLarge(1_048_576),
            BodyTimeout(std::time::Duration::from_secs(10)),
            ConnectionLimit { per_address: false },
            ConnectionLimit { per_address: true },
            AnswersUnread { gateway: false },
            AnswersUnread { gateway: true },
            Unauthorized,
            UnknownPurgeMethod("platform.nope".into()),
            NoSuchUpstream("node-z".into()),
            PurgeFailed("why".into()),
            BadUsageQuery("from: expected a UTC date or hour".into()),
            UsageUnavailable,
            ReloadFailed("why".into()),
            Parse {
                message: "EOF".into(),
                data: Some("{}".into()),
            },
            InvalidVersion { data: None },
            IdTooLong(256),
            NotARequest("7".into()),
            TooDeep(32),
            EmptyBatch,
            BatchTooLong {
                len: 150,
                limit: 100,
            },
            Ambiguous("duplicate member".into()),
            TooLargeForNode(1_048_576),
            RefusedAsTooLarge {
                upstream: "node-a".into(),
            },
            UnknownMethod {
                method: "platform.nope".into(),
            },
            NoSuchMethod("rpc: can't find method \"health.Nope\"".into()),
            WrongPath {
                method: "info.getNetworkID".into(),
                path: "/ext/bc/P",
                expected: "/ext/info",
            },
            Refused {
                method: "info.getNodeID".into(),
                reason: "node-specific methods need an admin key",
            },
            BeyondMaxDepth {
                method: "platform.getAllValidatorsAt".into(),
                height: 12,
                behind: 1_000_000,
                max_depth: 1000,
            },
            UnknownUpstream("x".into()),
            RateLimited {
                retry_after_secs: 1,
            },
            QuotaUnavailable,
            NoHealthyUpstream,
            UpstreamsThrottled {
                retry_after_secs: 3,
            },
            Overloaded,
            UpstreamTimeout {
                upstream: "node-a".into(),
            },
            UpstreamUnavailable {
                upstream: "node-a".into(),
                detail: "connect refused".into(),
            },
            BadUpstreamAnswer {
                upstream: "node-a".into(),
                detail: "bad answer".into(),
            },
        ];
        for e in &all {
            match e {
                NotFound
                | PostRequired(_)
                | WrongHttpMethod { .. }
                | UnsupportedMediaType(_)
                | BrokenBody
                | BodyTooLarge(_)
                | BodyTimeout(_)
                | ConnectionLimit { .. }
                | AnswersUnread { .. }
                | Unauthorized
                | UnknownPurgeMethod(_)
                | NoSuchUpstream(_)
                | PurgeFailed(_)
                | BadUsageQuery(_)
                | UsageUnavailable
                | ReloadFailed(_)
                | Parse { .. }
                | InvalidVersion { .. }
                | IdTooLong(_)
                | NotARequest(_)
                | TooDeep(_)
                | EmptyBatch
                | BatchTooLong { .. }
                | Ambiguous(_)
                | TooLargeForNode(_)
                | RefusedAsTooLarge { .. }
                | UnknownMethod { .. }
                | NoSuchMethod(_)
                | WrongPath { .. }
                | Refused { .. }
                | BeyondMaxDepth { .. }
                | UnknownUpstream(_)
                | RateLimited { .. }
                | QuotaUnavailable
                | NoHealthyUpstream
                | UpstreamsThrottled { .. }
                | Overloaded
                | UpstreamTimeout { .. }
                | UpstreamUnavailable { .. }
                | BadUpstreamAnswer { .. } => {}
            }
        }
        all
    }

    /// A row of the README's error table: (HTTP status, JSON-RPC code, counted as, message).
    type Row = (u16, Option<i64>, String, String);

    fn readme_rows() -> Vec<Row> {
        let readme = include_str!("../README.md");
        let start = readme
            .find("| case | HTTP | JSON-RPC code | counted as | message |")
            .expect("the README has the error table");
        readme[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
                assert!(cells.len() >= 5, "a row of five cells: {line}");
                let status: String = cells[1].chars().take_while(char::is_ascii_digit).collect();
                let code = match cells[2] {
                    "—" => None,
                    c => Some(c.parse().unwrap_or_else(|_| panic!("a code: {line}"))),
                };
                (
                    status
                        .parse()
                        .unwrap_or_else(|_| panic!("a status: {line}")),
                    code,
                    cells[3].trim_matches('`').to_string(),
                    cells[4..].join(" | "),
                )
            })
            .collect()
    }

    fn counted_as(e: &ProxyError) -> String {
        match e.counted() {
            (Counted::Http, reason) => format!("reason={reason}"),
            (Counted::Call, outcome) => format!("outcome={outcome}"),
        }
    }

    fn matches(e: &ProxyError, row: &Row) -> bool {
        row.0 == e.status().as_u16() && row.1 == e.code() && row.2 == counted_as(e)
    }

    #[test]
    fn every_answer_is_in_the_readme_table() {
        let rows = readme_rows();
        for e in every_variant() {
            assert!(
                rows.iter().any(|row| matches(&e, row)),
                "no README row says {} / {:?} / {} for {e:?}",
                e.status().as_u16(),
                e.code(),
                counted_as(&e)
            );
        }
        for row in &rows {
            assert!(
                every_variant().iter().any(|e| matches(e, row)),
                "the README's row {row:?} matches no answer snowgate makes"
            );
        }
    }

    #[test]
    fn every_http_rejection_reason_is_exposed_from_the_start() {
        for e in every_variant() {
            if let (Counted::Http, reason) = e.counted() {
                assert!(
                    crate::metrics::HTTP_REJECTIONS.contains(&reason),
                    "{reason} ({e:?}) missing from metrics::HTTP_REJECTIONS"
                );
            }
        }
    }

    #[test]
    fn node_worded_answers_are_text_and_the_rest_json() {
        for e in every_variant() {
            let r = e.response(Some(b"7"));
            let content_type = r.headers()[header::CONTENT_TYPE].to_str().unwrap_or("");
            let body = r.body().to_bytes();
            match e.code() {
                None => assert!(content_type.starts_with("text/plain"), "{e:?}"),
                Some(code) => {
                    let v: serde_json::Value =
                        serde_json::from_slice(&body).expect("a JSON-RPC error");
                    assert_eq!(v["error"]["code"], code, "{e:?}");
                    assert_eq!(v["error"]["message"], e.to_string(), "{e:?}");
                    assert_eq!(v["id"], 7, "{e:?}");
                }
            }
        }
        assert_eq!(
            &ProxyError::NotFound.body(None)[..],
            b"404 page not found\n"
        );
        let post = ProxyError::PostRequired(http::Method::GET).body(None);
        assert_eq!(&post[..], b"rpc: POST method required, received GET");
        let limited = ProxyError::RateLimited {
            retry_after_secs: 3,
        }
        .response(None);
        assert_eq!(limited.headers()[header::RETRY_AFTER], "3");
        let timeout = ProxyError::BodyTimeout(std::time::Duration::from_secs(1)).response(None);
        assert_eq!(timeout.headers()[header::CONNECTION], "close");
    }

    #[test]
    fn client_text_is_quoted_short() {
        let e = ProxyError::UnknownMethod {
            method: "platform.nope".into(),
        };
        assert_eq!(
            e.to_string(),
            "method \"platform.nope\" is not served by this gateway"
        );
        let long = "é".repeat(100);
        let e = ProxyError::UnknownMethod {
            method: long.clone(),
        };
        let shown = format!("\"{}\"… (200 bytes)", "é".repeat(32));
        assert_eq!(
            e.to_string(),
            format!("method {shown} is not served by this gateway")
        );
        let e = ProxyError::UnsupportedMediaType("x".repeat(1000).into());
        assert!(e.to_string().len() < 120, "{e}");
        assert!(e.body(None).len() < 120);
    }

    /// The node's texts come from one function each, shared with the devnode: a media type that
    /// is not UTF-8 comes back byte for byte, as a node writes it (not as U+FFFD).
    #[test]
    fn the_nodes_texts_are_the_nodes_bytes() {
        use crate::jsonrpc::http::{post_required_text, unsupported_media_text, NOT_FOUND_TEXT};
        let media = bytes::Bytes::from_static(b"text/\xffplain");
        let e = ProxyError::UnsupportedMediaType(media.clone());
        assert_eq!(e.body(None), unsupported_media_text(&media));
        assert_eq!(
            e.body(None),
            b"rpc: unrecognized Content-Type: text/\xffplain"
        );
        let e = ProxyError::PostRequired(http::Method::PUT);
        assert_eq!(
            e.body(None),
            post_required_text(&http::Method::PUT).into_bytes()
        );
        assert_eq!(ProxyError::NotFound.body(None), NOT_FOUND_TEXT.as_bytes());
    }

    #[test]
    fn blame_sets_the_log_level() {
        assert_eq!(
            ProxyError::EmptyBatch.blame().log_level(),
            tracing::Level::DEBUG
        );
        let e = ProxyError::UpstreamTimeout {
            upstream: "a".into(),
        };
        assert_eq!(e.blame().log_level(), tracing::Level::WARN);
        assert_eq!(ProxyError::NoHealthyUpstream.blame(), Blame::Proxy);
    }
}
