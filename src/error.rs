//! snowgate's own refusals and failures, and their one mapping to the wire.
//!
//! Each variant knows its JSON-RPC code, its HTTP status and who is to blame; the blame picks the
//! log level and the metric label. An error a node returns inside a JSON-RPC body is not a
//! `ProxyError`: it is data, passed through to the client unchanged.

use http::StatusCode;

/// Who caused a failure.
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
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Blame::Client => "client",
            Blame::Upstream => "upstream",
            Blame::Proxy => "proxy",
        }
    }
}

/// Why snowgate answered a call itself instead of relaying a node's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The method is not in the registry.
    #[error("method {method:?} is not served by this gateway")]
    UnknownMethod { method: String },
    /// The method exists but not at the path it was sent to.
    #[error("method {method:?} is not served at {path} (use {expected})")]
    WrongPath {
        method: String,
        path: String,
        expected: &'static str,
    },
    /// The caller may not call this method.
    #[error("method {method:?} is not available: {reason}")]
    Refused {
        method: String,
        reason: &'static str,
    },
    /// An envelope a node could read differently from snowgate.
    #[error("invalid request: {0}")]
    Ambiguous(String),
    /// `X-Snowgate-Upstream` names no configured upstream.
    #[error("unknown upstream {0:?} in X-Snowgate-Upstream")]
    UnknownUpstream(String),
    /// The client is over its quota.
    #[error("rate limit exceeded: retry after {retry_after_secs}s")]
    RateLimited { retry_after_secs: u64 },
    /// No upstream can take the request.
    #[error("no healthy upstream")]
    NoHealthyUpstream,
    /// Every usable upstream is at its concurrency limit until the deadline.
    #[error("upstreams are at their concurrency limit")]
    Overloaded,
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
    /// A new connection over `limits.max_connections` (or, `per_address`, over
    /// `limits.max_connections_per_ip` from one address): answered and closed at once.
    #[error("too many open connections{}, retry later", if *per_address { " from this address" } else { "" })]
    ConnectionLimit { per_address: bool },
    /// The request body did not arrive within `limits.body_timeout`.
    #[error("request body not received within {}", humantime::format_duration(*.0))]
    BodyTimeout(std::time::Duration),
    /// A call whose re-encoding for a node would pass `limits.body_bytes` (invalid UTF-8 grows
    /// threefold).
    #[error("invalid request: larger than {0} bytes once re-encoded (invalid UTF-8)")]
    TooLargeForNode(usize),
    /// The request body is over `limits.body_bytes`.
    #[error("request body larger than {0} bytes")]
    BodyTooLarge(usize),
}

impl ProxyError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            ProxyError::UnknownMethod { .. }
            | ProxyError::WrongPath { .. }
            | ProxyError::Refused { .. } => -32601,
            ProxyError::Ambiguous(_)
            | ProxyError::UnknownUpstream(_)
            | ProxyError::BodyTimeout(_)
            | ProxyError::BodyTooLarge(_)
            | ProxyError::TooLargeForNode(_) => -32600,
            ProxyError::RateLimited { .. } => -32005,
            ProxyError::Overloaded
            | ProxyError::NoHealthyUpstream
            | ProxyError::UpstreamTimeout { .. }
            | ProxyError::UpstreamUnavailable { .. }
            | ProxyError::BadUpstreamAnswer { .. }
            | ProxyError::ConnectionLimit { .. } => -32603,
        }
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::UnknownMethod { .. }
            | ProxyError::WrongPath { .. }
            | ProxyError::Refused { .. }
            | ProxyError::Ambiguous(_)
            | ProxyError::UnknownUpstream(_)
            | ProxyError::TooLargeForNode(_) => StatusCode::OK,
            ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::NoHealthyUpstream
            | ProxyError::Overloaded
            | ProxyError::ConnectionLimit { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::UpstreamUnavailable { .. } | ProxyError::BadUpstreamAnswer { .. } => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    /// Who caused it.
    pub fn blame(&self) -> Blame {
        match self {
            ProxyError::UnknownMethod { .. }
            | ProxyError::WrongPath { .. }
            | ProxyError::Refused { .. }
            | ProxyError::Ambiguous(_)
            | ProxyError::UnknownUpstream(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::BodyTimeout(_)
            | ProxyError::BodyTooLarge(_)
            | ProxyError::TooLargeForNode(_)
            | ProxyError::ConnectionLimit { per_address: true } => Blame::Client,
            ProxyError::NoHealthyUpstream
            | ProxyError::Overloaded
            | ProxyError::ConnectionLimit { per_address: false } => Blame::Proxy,
            ProxyError::UpstreamTimeout { .. }
            | ProxyError::UpstreamUnavailable { .. }
            | ProxyError::BadUpstreamAnswer { .. } => Blame::Upstream,
        }
    }

    /// The metric label of the outcome.
    pub fn outcome(&self) -> &'static str {
        match self {
            ProxyError::UnknownMethod { .. } | ProxyError::WrongPath { .. } => "unknown_method",
            ProxyError::Refused { .. } => "refused",
            ProxyError::Ambiguous(_)
            | ProxyError::UnknownUpstream(_)
            | ProxyError::TooLargeForNode(_) => "invalid_request",
            ProxyError::RateLimited { .. } => "rate_limited",
            ProxyError::NoHealthyUpstream => "no_upstream",
            ProxyError::Overloaded => "overloaded",
            ProxyError::UpstreamTimeout { .. } => "upstream_timeout",
            ProxyError::UpstreamUnavailable { .. } => "upstream_unavailable",
            ProxyError::BadUpstreamAnswer { .. } => "bad_upstream_answer",
            ProxyError::ConnectionLimit { .. } => "connection_limit",
            ProxyError::BodyTimeout(_) => "body_timeout",
            ProxyError::BodyTooLarge(_) => "body_too_large",
        }
    }

    /// Failures worth another attempt on another node (for reads).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamTimeout { .. }
                | ProxyError::UpstreamUnavailable { .. }
                | ProxyError::BadUpstreamAnswer { .. }
        )
    }

    /// The JSON-RPC error body (node layout) with the client's raw id.
    pub fn body(&self, id: Option<&[u8]>) -> Vec<u8> {
        crate::jsonrpc::response::error(self.code(), &self.to_string(), None, id)
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

    #[test]
    fn error_table() {
        let refused = ProxyError::Refused {
            method: "info.getNodeID".into(),
            reason: "node-specific methods need an admin key",
        };
        assert_eq!((refused.code(), refused.status()), (-32601, StatusCode::OK));
        assert!(refused.to_string().contains("info.getNodeID"));
        let e = ProxyError::NoHealthyUpstream;
        assert_eq!(
            (e.code(), e.status()),
            (-32603, StatusCode::SERVICE_UNAVAILABLE)
        );
        let e = ProxyError::UpstreamTimeout {
            upstream: "a".into(),
        };
        assert_eq!(
            (e.code(), e.status()),
            (-32603, StatusCode::GATEWAY_TIMEOUT)
        );
        let e = ProxyError::BadUpstreamAnswer {
            upstream: "a".into(),
            detail: "x".into(),
        };
        assert_eq!((e.code(), e.status()), (-32603, StatusCode::BAD_GATEWAY));
        let body = String::from_utf8(e.body(Some(b"\"abc\""))).unwrap();
        assert!(body.ends_with(",\"id\":\"abc\"}\n"), "{body}");
    }
}
