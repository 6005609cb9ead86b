//! Checking what a node sent back before any of it reaches a client: it must be one JSON-RPC
//! answer object, `jsonrpc` "2.0", exactly one of `result` / `error`, and the id snowgate sent.
//! Anything else is a 502 for that request and a failure for that node.

use bytes::Bytes;

use crate::call::AnswerKind;
use crate::jsonrpc::gojson::scan_object_members;

/// Splits a node's answer body into its kind and raw payload, checking it answers `expected_id`.
///
/// The reasons are fixed texts: nothing of the body is quoted (a node may echo a request, and
/// with it a password), so they may be logged.
pub(crate) fn check(body: &Bytes, expected_id: u64) -> Result<(AnswerKind, Bytes), &'static str> {
    let members = scan_object_members(body)
        .map_err(|_| "not JSON")?
        .ok_or("not a JSON object")?;
    let mut version_ok = false;
    let mut id_ok = false;
    let mut id_text = itoa::Buffer::new();
    let expected_id = id_text.format(expected_id).as_bytes();
    let mut payload: Option<(AnswerKind, &[u8])> = None;
    for (key, value) in members {
        match key {
            b"jsonrpc" => version_ok = value == b"\"2.0\"",
            b"id" => id_ok = value == expected_id,
            b"result" | b"error" => {
                if payload.is_some() {
                    return Err("both result and error");
                }
                let kind = if key == b"result" {
                    AnswerKind::Result
                } else {
                    if !value.starts_with(b"{") {
                        return Err("error is not an object");
                    }
                    AnswerKind::Error
                };
                payload = Some((kind, value));
            }
            _ => return Err("unexpected member"),
        }
    }
    if !version_ok {
        return Err("jsonrpc is not \"2.0\"");
    }
    if !id_ok {
        return Err("wrong id");
    }
    let (kind, value) = payload.ok_or("neither result nor error")?;
    // Sliced, not copied: the slice keeps the buffer the answer was read into alive only until
    // the client has its answer; the cache copies what it keeps into an allocation of its own
    // (so its byte bound bounds memory).
    Ok((kind, share(body, value)))
}

/// `part` as a slice of `body` when it lies inside it (it does: the scanner returns sub-slices),
/// else a copy; never `Bytes::slice_ref`'s panic.
fn share(body: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if end <= body.len() => body.slice(start..end),
        _ => Bytes::copy_from_slice(part),
    }
}

/// The message of a JSON-RPC error payload (for "not found" detection and logs).
pub(crate) fn error_message(payload: &[u8]) -> Option<String> {
    let v = crate::jsonrpc::Json::parse(payload).ok()?;
    v.field("message")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_inside_the_body_is_shared_and_any_other_is_copied() {
        let body = Bytes::from_static(b"{\"result\":{\"a\":1}}");
        let inside = share(&body, &body[10..17]);
        assert_eq!(&inside[..], b"{\"a\":1}");
        assert_eq!(inside.as_ptr(), body[10..].as_ptr());
        let elsewhere = b"{\"a\":1}".to_vec();
        let copied = share(&body, &elsewhere);
        assert_eq!(&copied[..], b"{\"a\":1}");
        assert_ne!(copied.as_ptr(), elsewhere.as_ptr());
    }

    #[test]
    fn good_answers_split() {
        let b =
            Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"result\":{\"height\":\"5\"},\"id\":42}\n");
        let (k, p) = check(&b, 42).unwrap();
        assert_eq!(k, AnswerKind::Result);
        assert_eq!(&p[..], b"{\"height\":\"5\"}");
        let b = Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"x: not found\",\"data\":null},\"id\":1}\n",
        );
        let (k, p) = check(&b, 1).unwrap();
        assert_eq!(k, AnswerKind::Error);
        assert_eq!(error_message(&p).as_deref(), Some("x: not found"));
    }

    #[test]
    fn garbage_is_refused() {
        for body in [
            &b"<html>"[..],
            b"{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":2}",
            b"{\"jsonrpc\":\"1.0\",\"result\":1,\"id\":1}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1}",
            b"{\"jsonrpc\":\"2.0\",\"result\":1,\"error\":{},\"id\":1}",
            b"[]",
            b"",
        ] {
            assert!(check(&Bytes::copy_from_slice(body), 1).is_err(), "{body:?}");
        }
    }
}
