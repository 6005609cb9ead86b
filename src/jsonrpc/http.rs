//! The HTTP around a node's JSON-RPC: its paths, its text refusals and its CORS, as avalanchego
//! answers them. The gateway and the devnode both answer through here, so the two cannot drift
//! apart.
//!
//! CORS is rs/cors v1.7.0 as avalanchego configures it: every origin (`*`), credentials allowed,
//! methods GET, POST and HEAD (OPTIONS always), and a list of request headers. A preflight
//! (`OPTIONS` with a non-empty `Access-Control-Request-Method`) is answered 200 with an empty
//! body before routing; every other answer carries `Vary: Origin`, and an answer to a request
//! with an `Origin` and an allowed method carries the allow headers. Hand-written rather than
//! tower-http's `CorsLayer`, which treats every `OPTIONS` as a preflight, refuses `*` with
//! credentials and answers refused preflights differently: clients that work against a node must
//! see the same headers from snowgate.

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD,
    ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method};

/// The info API's path.
pub const INFO_PATH: &str = "/ext/info";

/// The P-chain's five paths (the chain ID route and its four aliases), all served alike.
pub const P_CHAIN_PATHS: [&str; 5] = [
    "/ext/bc/P",
    "/ext/P",
    "/ext/platform",
    "/ext/bc/platform",
    "/ext/bc/11111111111111111111111111111111LpoYY",
];

/// The P-chain's ProposerVM service (avalanchego v1.14.0+) at its documented route: the one
/// forwarded to.
pub const PROPOSERVM_PATH: &str = "/ext/bc/P/proposervm";

/// The ProposerVM service under each of the P-chain's five paths: a node's router registers
/// every endpoint of a chain under each of the chain's aliases, so all five serve it alike.
pub const PROPOSERVM_PATHS: [&str; 5] = [
    PROPOSERVM_PATH,
    "/ext/P/proposervm",
    "/ext/platform/proposervm",
    "/ext/bc/platform/proposervm",
    "/ext/bc/11111111111111111111111111111111LpoYY/proposervm",
];

/// The node's health API (`health.*` over JSON-RPC on POST; a node's JSON report on GET).
pub const HEALTH_PATH: &str = "/ext/health";

/// gorilla/mux's answer to an unknown path (`text/plain`, 404).
pub const NOT_FOUND_TEXT: &str = "404 page not found\n";

/// gorilla/rpc's answer to a method other than POST on an RPC path (`text/plain`, 405).
pub fn post_required_text(received: impl std::fmt::Display) -> String {
    format!("rpc: POST method required, received {received}")
}

/// gorilla/rpc's answer to a content type that is not `application/json` (`text/plain`, 415).
/// `media` is the type before any `;`, as the client sent it (the bytes are kept as sent, Go
/// writes them back unchanged).
pub fn unsupported_media_text(media: &[u8]) -> Vec<u8> {
    let mut out = b"rpc: unrecognized Content-Type: ".to_vec();
    out.extend_from_slice(media);
    out
}

/// The media type of a `Content-Type` value (before any `;`), and whether a node takes it: only
/// `application/json`, in any case.
pub fn media_type(content_type: Option<&HeaderValue>) -> (&[u8], bool) {
    let value = content_type.map(HeaderValue::as_bytes).unwrap_or_default();
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    (media, media.eq_ignore_ascii_case(b"application/json"))
}

/// The request headers a node's CORS allows.
pub const NODE_HEADERS: &[&str] = &["Origin", "Accept", "Content-Type", "X-Requested-With"];

const STAR: HeaderValue = HeaderValue::from_static("*");
const TRUE: HeaderValue = HeaderValue::from_static("true");
const VARY_ORIGIN: HeaderValue = HeaderValue::from_static("Origin");

/// One CORS policy: the node's, with its list of allowed request headers (in Go's canonical
/// form, `X-Requested-With`).
#[derive(Debug, Clone, Copy)]
pub struct Cors {
    allowed_headers: &'static [&'static str],
}

impl Cors {
    /// avalanchego's own policy.
    pub const NODE: Cors = Cors {
        allowed_headers: NODE_HEADERS,
    };

    /// The node's policy with another list of allowed request headers (canonical form).
    pub const fn with_headers(allowed_headers: &'static [&'static str]) -> Cors {
        Cors { allowed_headers }
    }

    /// The headers of the answer to a preflight (status 200, empty body), or `None` when the
    /// request is not a preflight and goes on to be routed.
    pub fn preflight(&self, method: &Method, headers: &HeaderMap) -> Option<HeaderMap> {
        // The method first: most requests are not `OPTIONS`, and need no header looked up.
        if method != Method::OPTIONS {
            return None;
        }
        let requested = headers.get(ACCESS_CONTROL_REQUEST_METHOD)?;
        if requested.is_empty() {
            return None;
        }
        let mut out = HeaderMap::new();
        out.append(VARY, VARY_ORIGIN);
        out.append(
            VARY,
            HeaderValue::from_static("Access-Control-Request-Method"),
        );
        out.append(
            VARY,
            HeaderValue::from_static("Access-Control-Request-Headers"),
        );
        if !has_origin(headers) || !method_allowed(requested.as_bytes()) {
            return Some(out);
        }
        let asked: Vec<String> = headers
            .get(ACCESS_CONTROL_REQUEST_HEADERS)
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|h| canonical_header_key(h.trim()))
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !asked
            .iter()
            .all(|h| self.allowed_headers.contains(&h.as_str()))
        {
            return Some(out);
        }
        out.insert(ACCESS_CONTROL_ALLOW_ORIGIN, STAR);
        let upper = requested.as_bytes().to_ascii_uppercase();
        if let Ok(v) = HeaderValue::from_bytes(&upper) {
            out.insert(ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        if !asked.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&asked.join(", ")) {
                out.insert(ACCESS_CONTROL_ALLOW_HEADERS, v);
            }
        }
        out.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
        Some(out)
    }

    /// Whether the answer to an actual (not preflight) request gets the allow headers: it came
    /// with an `Origin` and an allowed method.
    pub fn allows(&self, method: &Method, headers: &HeaderMap) -> bool {
        has_origin(headers) && method_allowed(method.as_str().as_bytes())
    }

    /// Adds the actual-request CORS headers to an answer (`allowed` from [`Cors::allows`]).
    pub fn decorate(&self, headers: &mut HeaderMap, allowed: bool) {
        headers.append(VARY, VARY_ORIGIN);
        if allowed {
            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, STAR);
            headers.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
        }
    }
}

/// rs/cors `isMethodAllowed` over the default method list, in any case (OPTIONS always).
fn method_allowed(method: &[u8]) -> bool {
    let upper = method.to_ascii_uppercase();
    matches!(&upper[..], b"OPTIONS" | b"GET" | b"POST" | b"HEAD")
}

fn has_origin(headers: &HeaderMap) -> bool {
    headers.get(ORIGIN).is_some_and(|o| !o.is_empty())
}

/// Go's `http.CanonicalHeaderKey` (`x-requested-with` -> `X-Requested-With`); keys with bytes
/// Go refuses to canonicalise are returned unchanged.
fn canonical_header_key(key: &str) -> String {
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return key.to_string();
    }
    let mut upper = true;
    key.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight_with(cors: Cors, h: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in h {
            headers.insert(*k, HeaderValue::from_static(v));
        }
        cors.preflight(&Method::OPTIONS, &headers)
            .expect("a preflight")
    }

    #[test]
    fn preflight_allows_the_default_headers_and_methods_in_any_case() {
        for method in ["post", "POST", "Get", "OPTIONS", "head"] {
            let mut headers = HeaderMap::new();
            headers.insert("origin", HeaderValue::from_static("https://app.example"));
            headers.insert(
                "access-control-request-method",
                HeaderValue::from_str(method).expect("a header value"),
            );
            headers.insert(
                "access-control-request-headers",
                HeaderValue::from_static("content-type, x-requested-with"),
            );
            let h = Cors::NODE
                .preflight(&Method::OPTIONS, &headers)
                .expect("a preflight");
            assert_eq!(h["access-control-allow-origin"], "*", "{method}");
            assert_eq!(
                h["access-control-allow-methods"],
                method.to_ascii_uppercase()
            );
            assert_eq!(
                h["access-control-allow-headers"],
                "Content-Type, X-Requested-With"
            );
            assert_eq!(h["access-control-allow-credentials"], "true");
            assert_eq!(h.get_all("vary").iter().count(), 3);
        }
    }

    #[test]
    fn preflight_refuses_other_headers_and_methods_and_substrings() {
        // `ET` and `OST` are in "GET, POST, HEAD" as text, but are not methods.
        for extra in [
            ("access-control-request-headers", "authorization"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-method", "ET"),
            ("access-control-request-method", "OST"),
        ] {
            let h = preflight_with(
                Cors::NODE,
                &[
                    ("origin", "https://app.example"),
                    ("access-control-request-method", "POST"),
                    extra,
                ],
            );
            assert!(h.get("access-control-allow-origin").is_none(), "{extra:?}");
        }
        assert!(Cors::NODE
            .preflight(&Method::OPTIONS, &HeaderMap::new())
            .is_none());
    }

    #[test]
    fn a_wider_header_list_allows_its_headers() {
        const WIDE: Cors = Cors::with_headers(&["Content-Type", "Authorization"]);
        let h = preflight_with(
            WIDE,
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
                ("access-control-request-headers", "authorization"),
            ],
        );
        assert_eq!(h["access-control-allow-headers"], "Authorization");
    }

    #[test]
    fn actual_requests_get_allow_headers_only_for_allowed_methods() {
        let mut headers = HeaderMap::new();
        headers.insert("origin", HeaderValue::from_static("https://app.example"));
        assert!(Cors::NODE.allows(&Method::POST, &headers));
        assert!(!Cors::NODE.allows(&Method::PUT, &headers));
        assert!(!Cors::NODE.allows(&Method::DELETE, &headers));
        assert!(!Cors::NODE.allows(&Method::POST, &HeaderMap::new()));
        let mut out = HeaderMap::new();
        Cors::NODE.decorate(&mut out, false);
        assert_eq!(out["vary"], "Origin");
        assert!(out.get("access-control-allow-origin").is_none());
    }

    #[test]
    fn canonical_keys() {
        assert_eq!(canonical_header_key("x-REQUESTED-with"), "X-Requested-With");
        assert_eq!(canonical_header_key("a b"), "a b");
    }

    #[test]
    fn media_types_as_a_node_reads_them() {
        let v = HeaderValue::from_static("Application/JSON; charset=utf-8");
        assert_eq!(media_type(Some(&v)), (&b"Application/JSON"[..], true));
        assert_eq!(media_type(None), (&b""[..], false));
        let v = HeaderValue::from_static("text/plain");
        assert!(!media_type(Some(&v)).1);
    }
}
