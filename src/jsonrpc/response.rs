//! Answer bodies exactly as a node writes them: compact, field order `jsonrpc`, `result`/`error`,
//! `id`, terminated by a newline (Go's `json.Encoder`). Every JSON-RPC error is sent with HTTP 200.

use super::gojson::{compact_into, write_go_string};

/// `Content-Type` of every JSON-RPC answer a node sends.
pub const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// Appends `{"jsonrpc":"2.0","result":<result>,"id":<id>}\n`; `result` must be compact JSON and
/// `id` the raw id as the client sent it (it is compacted here, as Go does).
pub(crate) fn write_success(out: &mut Vec<u8>, result: &[u8], id: Option<&[u8]>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"result\":");
    out.extend_from_slice(result);
    write_id(out, id);
}

/// A success body in a fresh buffer.
pub fn success(result: &[u8], id: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(result.len() + 48);
    write_success(&mut out, result, id);
    out
}

/// An error body: `{"jsonrpc":"2.0","error":{"code":C,"message":M,"data":D},"id":ID}\n`.
/// `data` is raw JSON (`None` writes `null`), `id` the raw id as sent.
pub fn error(code: i64, message: &str, data: Option<&str>, id: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 96);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    let mut msg = String::with_capacity(message.len() + 2);
    write_go_string(&mut msg, message);
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b",\"data\":");
    out.extend_from_slice(data.unwrap_or("null").as_bytes());
    out.push(b'}');
    write_id(&mut out, id);
    out
}

fn write_id(out: &mut Vec<u8>, id: Option<&[u8]>) {
    out.extend_from_slice(b",\"id\":");
    match id {
        Some(id) => compact_into(out, id),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_the_node() {
        assert_eq!(
            success(br#"{"height":"100"}"#, Some(b"1")),
            b"{\"jsonrpc\":\"2.0\",\"result\":{\"height\":\"100\"},\"id\":1}\n".to_vec()
        );
        assert_eq!(
            String::from_utf8(error(-32000, "rpc: can't find method \"platform.Nope\"", None, Some(b"1"))).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"rpc: can't find method \\\"platform.Nope\\\"\",\"data\":null},\"id\":1}\n"
        );
    }
}
