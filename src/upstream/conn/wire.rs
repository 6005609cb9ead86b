//! HTTP/1.1 as bytes: the request the gateway writes to a node and the framing of the answer it
//! reads back (the head, a chunk's size line), as functions over byte slices.
//!
//! Pure on purpose: no socket, no runtime, no clock. Everything a node can get wrong in an answer's
//! framing (conflicting lengths, a coding this client does not decode, a head that never ends) is
//! decided here, so the tests below feed it any bytes at all, and `io.rs` keeps only the waiting.
//! The head is parsed by `httparse`, hyper's own parser.

use std::mem::MaybeUninit;

use http::{HeaderName, HeaderValue, StatusCode};

/// Longest answer head accepted (status line and headers); the trailers after the last chunk are
/// bounded alike.
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// Most headers in an answer head.
const MAX_HEADERS: usize = 64;
/// Longest chunk-size line waited for before the answer is refused.
const MAX_CHUNK_LINE: usize = 1024;

/// Appends `headers` to `out` as header lines (`name: value\r\n` each), as every request carries
/// them.
pub(super) fn push_header_lines(out: &mut Vec<u8>, headers: &[(HeaderName, HeaderValue)]) {
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// The bytes of `POST path` to `host` with the JSON `body`: head and body in one buffer, written
/// with one system call. `extra` (every request's) and `own` (this request's: its trace context)
/// are header lines sent as they are ([`push_header_lines`]). `None` when the path cannot be sent
/// (not absolute, or not printable ASCII).
pub(super) fn post(
    path: &str,
    host: &str,
    (extra, own): (&[u8], &[u8]),
    body: &[u8],
) -> Option<Vec<u8>> {
    if !path.starts_with('/') || path.bytes().any(|b| !b.is_ascii_graphic()) {
        return None;
    }
    let mut length = itoa::Buffer::new();
    let head = 96 + path.len() + host.len() + extra.len() + own.len();
    let mut out = Vec::with_capacity(head + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra);
    out.extend_from_slice(own);
    out.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
    out.extend_from_slice(length.format(body.len()).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    Some(out)
}

/// How the body of an answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Length(u64),
    Chunked,
    /// Until the node closes the connection.
    Close,
}

/// What the head of an answer says.
#[derive(Debug)]
pub(super) struct Head {
    /// Bytes of the head, status line to the empty line.
    pub(super) len: usize,
    pub(super) status: StatusCode,
    pub(super) framing: Framing,
    /// The connection may carry another request after this answer.
    pub(super) keep_alive: bool,
    /// `Retry-After` (RFC 9110 §10.2.3), when present and readable: how long the node asks to be
    /// left alone (a throttling provider's 429 or 503).
    pub(super) retry_after: Option<RetryAfter>,
}

/// A `Retry-After` value as sent: a number of seconds, or a date (seconds from when it was read;
/// a date past counts as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    Seconds(u64),
    /// Not a value snowgate can read (the header is there all the same).
    Unreadable,
}

/// Reads a `Retry-After` value: delay-seconds, or an HTTP-date (as seconds from now).
fn retry_after(value: &[u8]) -> RetryAfter {
    let value = value.trim_ascii();
    if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
        // A number too long for u64 is a very long wait: the caller caps it anyway.
        return RetryAfter::Seconds(
            std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX),
        );
    }
    let date = std::str::from_utf8(value)
        .ok()
        .and_then(|v| httpdate::parse_http_date(v).ok());
    match date {
        Some(at) => RetryAfter::Seconds(
            at.duration_since(std::time::SystemTime::now())
                .map_or(0, |d| d.as_secs()),
        ),
        None => RetryAfter::Unreadable,
    }
}

/// Why an answer's framing is refused: what is wrong, never the node's bytes (the status code
/// aside). `io.rs` gives it to the caller as a [`super::SendError::Malformed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum WireError {
    /// The status line or a header is not HTTP/1.x (or there are more than 64 headers).
    #[error("invalid HTTP answer: {0}")]
    BadHead(httparse::Error),
    /// A status code outside 100..=999 (a node's three digits below 100).
    #[error("invalid HTTP status {0}")]
    BadStatus(u16),
    /// A `Content-Length` that is not a number of bytes.
    #[error("invalid Content-Length")]
    BadContentLength,
    /// Two `Content-Length` headers that disagree.
    #[error("conflicting Content-Length headers")]
    ConflictingContentLength,
    /// A transfer coding other than `chunked` (or none named).
    #[error("unsupported Transfer-Encoding")]
    UnsupportedTransferEncoding,
    /// A chunk-size line that is not one, or that goes on past [`MAX_CHUNK_LINE`].
    #[error("invalid chunk size in the answer")]
    BadChunkSize,
}

/// Reads an answer's head from `buf`: `Ok(None)` while it is incomplete.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, WireError> {
    // Uninitialised slots: a zeroed array of them costs more than parsing a node's short head.
    let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(WireError::BadHead(e)),
    };
    let code = response.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| WireError::BadStatus(code))?;
    let mut keep_alive = response.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut wait = None;
    for h in response.headers.iter() {
        // The length first: most headers are none of these four and cost one comparison.
        if !matches!(h.name.len(), 10 | 11 | 14 | 17) {
            continue;
        }
        if h.name.eq_ignore_ascii_case("retry-after") {
            wait = Some(retry_after(h.value));
            continue;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(WireError::BadContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(WireError::ConflictingContentLength);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is the only coding this client decodes: `gzip, chunked` is chunked gzip,
            // whose de-chunked bytes are not the answer, so any other coding in the list is
            // refused (RFC 9112 6.1), not read as plain chunked.
            let mut codings = h
                .value
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .filter(|coding| !coding.is_empty())
                .peekable();
            let named = codings.peek().is_some();
            if !named || !codings.all(|coding| coding.eq_ignore_ascii_case(b"chunked")) {
                return Err(WireError::UnsupportedTransferEncoding);
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && response.version == Some(0) {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Length(0)
    } else if chunked {
        // Both codings at once is how requests are smuggled: read it, then close (RFC 9112 6.3).
        if length.is_some() {
            keep_alive = false;
        }
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::Close
    };
    Ok(Some(Head {
        len,
        status,
        framing,
        keep_alive,
        retry_after: wait,
    }))
}

/// Reads the size line of a chunk at the start of `buf`: the line's length and the chunk's size.
/// `Ok(None)` while the line is incomplete and shorter than [`MAX_CHUNK_LINE`].
pub(super) fn chunk_size(buf: &[u8]) -> Result<Option<(usize, u64)>, WireError> {
    match httparse::parse_chunk_size(buf) {
        Ok(httparse::Status::Complete(found)) => Ok(Some(found)),
        Ok(httparse::Status::Partial) if buf.len() < MAX_CHUNK_LINE => Ok(None),
        _ => Err(WireError::BadChunkSize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        assert_eq!(retry_after(b"30"), RetryAfter::Seconds(30));
        assert_eq!(retry_after(b" 0 "), RetryAfter::Seconds(0));
        assert_eq!(
            retry_after(b"99999999999999999999999"),
            RetryAfter::Seconds(u64::MAX)
        );
        assert_eq!(
            retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT"),
            RetryAfter::Seconds(0),
            "a date past"
        );
        let later = httpdate::fmt_http_date(
            std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
        );
        assert!(matches!(
            retry_after(later.as_bytes()),
            RetryAfter::Seconds(s) if (3500..=3600).contains(&s)
        ));
        for unreadable in [&b""[..], b"-1", b"soon", b"1.5"] {
            assert_eq!(retry_after(unreadable), RetryAfter::Unreadable);
        }
        let h = parse_head(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\ncontent-length: 0\r\n\r\n",
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(h.retry_after, Some(RetryAfter::Seconds(7)));
    }

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes())
            .expect("valid head")
            .expect("complete head")
    }

    #[test]
    fn a_request_is_one_buffer_with_its_length() {
        let key = (
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("k"),
        );
        let mut extra = Vec::new();
        push_header_lines(&mut extra, &[key]);
        let request = post("/ext/bc/C/rpc", "node:9650", (&extra, b""), b"{}").expect("a path");
        assert_eq!(
            request,
            b"POST /ext/bc/C/rpc HTTP/1.1\r\nhost: node:9650\r\nx-api-key: k\r\n\
              content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
        let own = b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n";
        let request = post("/p", "node", (&extra, own), b"{}").expect("a valid path");
        assert_eq!(
            request,
            b"POST /p HTTP/1.1\r\nhost: node\r\nx-api-key: k\r\n\
              traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\
              content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
        for bad in ["ext/bc/C/rpc", "/a b", "/a\r\nx: y", "/caf\u{e9}", ""] {
            assert_eq!(post(bad, "node", (b"", b""), b"{}"), None, "{bad:?}");
        }
    }

    #[test]
    fn framing_follows_the_headers() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(12), true));
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked \r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, true));
        let h = head("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(0));
        let h =
            head("HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n");
        assert!(h.keep_alive);
        // Both codings: chunked wins and the connection is not reused.
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, false));
    }

    #[test]
    fn bad_heads_are_refused() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            // Chunked gzip is not chunked JSON: de-chunking it does not give the answer.
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-"),
            Ok(None)
        ));
    }

    #[test]
    fn refusals_say_what_is_wrong_in_the_words_of_the_log() {
        let refusal = |text: &str| match parse_head(text.as_bytes()) {
            Err(e) => (e, e.to_string()),
            Ok(h) => panic!("{text:?} read as {h:?}"),
        };
        assert_eq!(
            refusal("garbage\r\n\r\n"),
            (
                WireError::BadHead(httparse::Error::Version),
                "invalid HTTP answer: invalid HTTP version".to_string()
            )
        );
        assert_eq!(
            refusal("HTTP/1.1 099 Odd\r\n\r\n"),
            (WireError::BadStatus(99), "invalid HTTP status 99".into())
        );
        assert_eq!(
            refusal("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            (WireError::BadContentLength, "invalid Content-Length".into())
        );
        assert_eq!(
            refusal("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            (
                WireError::ConflictingContentLength,
                "conflicting Content-Length headers".into()
            )
        );
        assert_eq!(
            refusal("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            (
                WireError::UnsupportedTransferEncoding,
                "unsupported Transfer-Encoding".into()
            )
        );
        assert_eq!(
            chunk_size(b"zz\r\n").map_err(|e| e.to_string()),
            Err("invalid chunk size in the answer".into())
        );
    }

    #[test]
    fn a_chunk_size_line_is_waited_for_only_so_long() {
        assert_eq!(chunk_size(b"1a\r\n{\"id\""), Ok(Some((4, 26))));
        assert_eq!(chunk_size(b"0\r\n\r\n"), Ok(Some((3, 0))));
        assert_eq!(chunk_size(b"1a"), Ok(None), "the line goes on");
        assert!(chunk_size(b"zz\r\n").is_err());
        // A size line with an extension that never ends: waited for up to the bound, no further.
        let mut line = b"1;".to_vec();
        line.resize(MAX_CHUNK_LINE - 1, b'x');
        assert_eq!(chunk_size(&line), Ok(None));
        line.push(b'x');
        assert!(chunk_size(&line).is_err(), "a size line without end");
    }
}
