//! Raw slices of validated JSON: an object's members and an array's elements exactly as written,
//! without building a tree.
//!
//! Hand-written for a measured need: a node's answer is split into `jsonrpc`, `result`/`error` and
//! `id` on every forwarded call and a batch into its elements, and neither needs a tree; the
//! result's bytes go back to the client as the node wrote them. The walks here run on text the
//! scanner already accepted; `scan_object_members` (`parse.rs`) checks an answer in one pass
//! when it can and takes the scanner and this walk otherwise.

use super::lex::is_space;

/// An object's members as raw slices: `(key, value)`.
pub(crate) type RawMembers<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The members of a JSON object as raw slices: `(key, value)`, the key without its quotes and still
/// escaped, the value exactly as written. `raw` must be one object already validated by
/// [`scan_value`](super::scanner::scan_value); anything else gives `None`.
pub(crate) fn object_members(raw: &[u8]) -> Option<RawMembers<'_>> {
    let mut p = RawWalker { buf: raw, pos: 0 };
    p.ws();
    if p.peek()? != b'{' {
        return None;
    }
    p.pos += 1;
    let mut out = Vec::new();
    loop {
        p.ws();
        match p.peek()? {
            b'}' => return Some(out),
            b',' => {
                p.pos += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_start = p.pos + 1;
        p.skip_string()?;
        let key = &raw[key_start..p.pos - 1];
        p.ws();
        if p.peek()? != b':' {
            return None;
        }
        p.pos += 1;
        p.ws();
        let v_start = p.pos;
        p.skip_value()?;
        out.push((key, &raw[v_start..p.pos]));
    }
}

/// A cursor that skips over validated JSON without building anything.
struct RawWalker<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl RawWalker<'_> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while self.pos < self.buf.len() && is_space(self.buf[self.pos]) {
            self.pos += 1;
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
    }

    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.pos += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
            }
            _ => {
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']') || is_space(c) {
                        break;
                    }
                    self.pos += 1;
                }
                Some(())
            }
        }
    }
}

/// The elements of a JSON array as raw slices. `raw` must be one array already validated by
/// [`scan_value`](super::scanner::scan_value); anything else gives `None`.
pub(crate) fn array_elements(raw: &[u8]) -> Option<Vec<&[u8]>> {
    let mut p = RawWalker { buf: raw, pos: 0 };
    p.ws();
    if p.peek()? != b'[' {
        return None;
    }
    p.pos += 1;
    let mut out = Vec::new();
    loop {
        p.ws();
        match p.peek()? {
            b']' => return Some(out),
            b',' => {
                p.pos += 1;
                continue;
            }
            _ => {}
        }
        let start = p.pos;
        p.skip_value()?;
        out.push(&raw[start..p.pos]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::gojson::nesting_depth;

    #[test]
    fn raw_elements_and_depth() {
        let raw = br#"[ {"a":[1,2]}, 3 ,"x,]" ]"#;
        let e = array_elements(raw).unwrap();
        assert_eq!(e, vec![&br#"{"a":[1,2]}"#[..], b"3", br#""x,]""#]);
        assert_eq!(array_elements(b"[]").unwrap().len(), 0);
        assert_eq!(nesting_depth(raw), 3);
        assert_eq!(nesting_depth(br#"{"a":"[[[["}"#), 1);
        assert_eq!(nesting_depth(b"5"), 0);
    }

    #[test]
    fn raw_members() {
        let raw = br#"{ "jsonrpc":"2.0", "result" : {"a":[1,"}"]} ,"id":7}"#;
        let m = object_members(raw).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1], (&b"result"[..], &br#"{"a":[1,"}"]}"#[..]));
        assert_eq!(m[2], (&b"id"[..], &b"7"[..]));
        assert_eq!(object_members(b"[1]"), None);
    }
}
