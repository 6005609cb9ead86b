//! rs/cors v1.7.0 as avalanchego configures it: all origins (`*`), credentials allowed, methods
//! GET/POST/HEAD (OPTIONS always), headers Origin/Accept/Content-Type/X-Requested-With.
//!
//! It sits right after `Node-Id` in the node's stack, so a preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered here with 200 and never reaches the host filter
//! or the router; every other answer gets `Vary: Origin` and, for a cross-origin request with an
//! allowed method, the allow headers.

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD,
    ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::reply::{bare, Resp};

const ALLOWED_HEADERS: [&str; 4] = ["Origin", "Accept", "Content-Type", "X-Requested-With"];
const STAR: HeaderValue = HeaderValue::from_static("*");
const TRUE: HeaderValue = HeaderValue::from_static("true");
const VARY_ORIGIN: HeaderValue = HeaderValue::from_static("Origin");

/// rs/cors `isMethodAllowed` for the default method list.
fn method_allowed(method: &[u8]) -> bool {
    let upper = method.to_ascii_uppercase();
    matches!(&upper[..], b"OPTIONS" | b"GET" | b"POST" | b"HEAD")
}

fn has_origin(headers: &HeaderMap) -> bool {
    headers.get(ORIGIN).is_some_and(|o| !o.is_empty())
}

/// The preflight answer, when `method`/`headers` make the request a preflight.
pub fn preflight(method: &Method, headers: &HeaderMap) -> Option<Resp> {
    let requested = headers.get(ACCESS_CONTROL_REQUEST_METHOD)?;
    if method != Method::OPTIONS || requested.is_empty() {
        return None;
    }
    let mut resp = bare(StatusCode::OK);
    let out = resp.headers_mut();
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
        return Some(resp);
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
    if !asked.iter().all(|h| ALLOWED_HEADERS.contains(&h.as_str())) {
        return Some(resp);
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
    Some(resp)
}

/// Whether an actual (non-preflight) request gets the allow headers.
pub fn allows(method: &Method, headers: &HeaderMap) -> bool {
    has_origin(headers) && method_allowed(method.as_str().as_bytes())
}

/// Adds the actual-request CORS headers to an answer.
pub fn decorate(headers: &mut HeaderMap, allowed: bool) {
    headers.append(VARY, VARY_ORIGIN);
    if allowed {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, STAR);
        headers.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
    }
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

    fn preflight_with(h: &[(&'static str, &'static str)]) -> Resp {
        let mut headers = HeaderMap::new();
        for (k, v) in h {
            headers.insert(*k, HeaderValue::from_static(v));
        }
        preflight(&Method::OPTIONS, &headers).unwrap()
    }

    #[test]
    fn preflight_allows_the_default_headers() {
        let r = preflight_with(&[
            ("origin", "https://app.example"),
            ("access-control-request-method", "post"),
            (
                "access-control-request-headers",
                "content-type, x-requested-with",
            ),
        ]);
        assert_eq!(r.status(), 200);
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], "*");
        assert_eq!(h["access-control-allow-methods"], "POST");
        assert_eq!(
            h["access-control-allow-headers"],
            "Content-Type, X-Requested-With"
        );
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h.get_all("vary").iter().count(), 3);
    }

    #[test]
    fn preflight_refuses_other_headers_and_methods() {
        for extra in [
            ("access-control-request-headers", "authorization"),
            ("access-control-request-method", "PUT"),
        ] {
            let r = preflight_with(&[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
                extra,
            ]);
            assert_eq!(r.status(), 200);
            assert!(r.headers().get("access-control-allow-origin").is_none());
        }
        assert!(preflight(&Method::OPTIONS, &HeaderMap::new()).is_none());
    }

    #[test]
    fn canonical_keys() {
        assert_eq!(canonical_header_key("x-REQUESTED-with"), "X-Requested-With");
        assert_eq!(canonical_header_key("a b"), "a b");
    }
}
