//! Small answers every layer of the devnode writes: Go `http.Error` texts, gorilla/rpc's
//! `WriteError` texts and bare statuses. Kept in one place so the headers each kind carries (and
//! the ones it must not carry) are decided once.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

/// The body type of every devnode answer (one buffer, so no per-request boxing).
pub type Body = Full<Bytes>;
/// A devnode answer.
pub type Resp = Response<Body>;

/// `Content-Type` of Go's text answers.
pub const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
/// `X-Content-Type-Options` of Go's `http.Error` and of answers after method dispatch.
pub const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");

/// An answer with `status`, `body` and no headers.
pub fn raw(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

/// A bare status with an empty body (`w.WriteHeader(status)` in Go).
pub fn bare(status: StatusCode) -> Resp {
    raw(status, Bytes::new())
}

/// Go's `http.Error(w, msg, status)`: text/plain, nosniff, the message plus `\n` (the caller
/// passes the newline in `body`).
pub fn go_error(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = raw(status, body);
    r.headers_mut().insert(header::CONTENT_TYPE, TEXT_PLAIN);
    r.headers_mut()
        .insert(header::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
    r
}

/// gorilla/rpc's `WriteError(w, status, msg)`: text/plain, no nosniff, no trailing newline.
pub fn rpc_error(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = raw(status, body);
    r.headers_mut().insert(header::CONTENT_TYPE, TEXT_PLAIN);
    r
}

/// A JSON answer of the devnode's own (control endpoint, health): `application/json`.
pub fn json(status: StatusCode, body: impl Into<Bytes>, content_type: &'static str) -> Resp {
    let mut r = raw(status, body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
