//! Checking what a node sent back before any of it reaches a client: it must be one JSON-RPC
//! answer object, `jsonrpc` "2.0", exactly one of `result` / `error`, and the id snowgate sent.
//! Anything else is a 502 for that request and a failure for that node.

use bytes::Bytes;

use crate::call::AnswerKind;
use crate::jsonrpc::gojson::scan_object_members;

/// Splits a node's answer body into its kind and raw payload, checking it answers `expected_id`.
pub fn check(body: &Bytes, expected_id: u64) -> Result<(AnswerKind, Bytes), String> {
    let members = scan_object_members(body)
        .map_err(|e| format!("not JSON: {e}"))?
        .ok_or("not a JSON object")?;
    let mut version_ok = false;
    let mut id_ok = false;
    let mut payload: Option<(AnswerKind, &[u8])> = None;
    for (key, value) in members {
        match key {
            b"jsonrpc" => version_ok = value == b"\"2.0\"",
            b"id" => id_ok = value == expected_id.to_string().as_bytes(),
            b"result" | b"error" => {
                if payload.is_some() {
                    return Err("both result and error".into());
                }
                let kind = if key == b"result" {
                    AnswerKind::Result
                } else {
                    if !value.starts_with(b"{") {
                        return Err("error is not an object".into());
                    }
                    AnswerKind::Error
                };
                payload = Some((kind, value));
            }
            _ => {
                return Err(format!(
                    "unexpected member {:?}",
                    String::from_utf8_lossy(key)
                ))
            }
        }
    }
    if !version_ok {
        return Err("jsonrpc is not \"2.0\"".into());
    }
    if !id_ok {
        return Err("wrong id".into());
    }
    let (kind, value) = payload.ok_or("neither result nor error")?;
    // Copied, not sliced out of `body`: a slice would keep the whole buffer hyper read the answer
    // into (often many times the payload) alive for as long as the cache holds the payload, so
    // the cache's byte bound would not bound memory. One memcpy of the payload is cheap.
    Ok((kind, Bytes::copy_from_slice(value)))
}

/// The message of a JSON-RPC error payload (for "not found" detection and logs).
pub fn error_message(payload: &[u8]) -> Option<String> {
    let v = crate::jsonrpc::Json::parse(payload).ok()?;
    v.field("message")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

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
