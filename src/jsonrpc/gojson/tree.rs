//! The two-pass path: Go's scanner first (which words any error), then the tree built over the
//! bytes it accepted ([`parse_scanned`], [`parse_top_scanned`]); and Go's decoding of JSON string
//! bytes.
//!
//! Hand-written for node compatibility: a string decodes as Go decodes it (every byte of invalid
//! UTF-8 its own U+FFFD, a lone surrogate escape U+FFFD), which is what a node sees and echoes in
//! an error's `data`. It only ever runs on scanned input, so it never words an error.

use std::borrow::Cow;

use super::depth::too_deep;
use super::lex::{is_space, quote_or_backslash};
use super::scanner::{scan, SyntaxError};
use super::value::{Json, Top};

/// `Json::parse` in two passes: Go's scanner, then the tree.
pub(super) fn parse_scanned(buf: &[u8]) -> Result<Json, SyntaxError> {
    let (range, depth) = scan(buf)?;
    too_deep(&buf[range.clone()], depth)?;
    let mut p = TreeParser {
        buf: &buf[range.clone()],
        pos: 0,
    };
    Ok(p.value())
}

/// `Json::parse_top` in two passes: Go's scanner (which words any error exactly), then the
/// tree.
pub(super) fn parse_top_scanned(buf: &[u8]) -> Result<Top<'_>, SyntaxError> {
    let (range, depth) = scan(buf)?;
    let raw = &buf[range.clone()];
    too_deep(raw, depth)?;
    let mut p = TreeParser { buf: raw, pos: 0 };
    if raw.first() != Some(&b'{') {
        return Ok(Top::Other(p.value()));
    }
    p.pos = 1;
    let mut members = Vec::new();
    loop {
        p.ws();
        if p.peek() == b'}' {
            break;
        }
        let key = Cow::Owned(p.string());
        p.ws();
        p.pos += 1; // ':'
        p.ws();
        let start = p.pos;
        let value = p.value();
        let at = range.start + start..range.start + p.pos;
        members.push((key, value, at));
        p.ws();
        if p.peek() == b',' {
            p.pos += 1;
        }
    }
    Ok(Top::Object(members))
}

/// Recursive-descent builder over bytes the scanner already validated.
struct TreeParser<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl TreeParser<'_> {
    fn ws(&mut self) {
        while self.pos < self.buf.len() && is_space(self.buf[self.pos]) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> u8 {
        self.buf.get(self.pos).copied().unwrap_or(b' ')
    }

    fn value(&mut self) -> Json {
        self.ws();
        match self.peek() {
            b'{' => {
                self.pos += 1;
                let mut members = Vec::new();
                loop {
                    self.ws();
                    if self.peek() == b'}' {
                        self.pos += 1;
                        break;
                    }
                    let key = self.string();
                    self.ws();
                    self.pos += 1; // ':'
                    let v = self.value();
                    members.push((key, v));
                    self.ws();
                    if self.peek() == b',' {
                        self.pos += 1;
                    }
                }
                Json::Object(members)
            }
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.peek() == b']' {
                        self.pos += 1;
                        break;
                    }
                    items.push(self.value());
                    self.ws();
                    if self.peek() == b',' {
                        self.pos += 1;
                    }
                }
                Json::Array(items)
            }
            b'"' => Json::String(self.string()),
            b't' => {
                self.pos += 4;
                Json::Bool(true)
            }
            b'f' => {
                self.pos += 5;
                Json::Bool(false)
            }
            b'n' => {
                self.pos += 4;
                Json::Null
            }
            _ => {
                let start = self.pos;
                while self.pos < self.buf.len()
                    && matches!(
                        self.buf[self.pos],
                        b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
                    )
                {
                    self.pos += 1;
                }
                Json::Number(String::from_utf8_lossy(&self.buf[start..self.pos]).into())
            }
        }
    }

    /// Reads a string token and unescapes it as Go does (invalid UTF-8 and lone surrogates become
    /// U+FFFD).
    fn string(&mut self) -> String {
        self.pos += 1; // opening quote
                       // Fast path: no escape before the closing quote (IDs, addresses, hex: nearly every string
                       // of a request) is one copy, not a byte-by-byte build.
        let rest = &self.buf[self.pos..];
        if let Some(end) = quote_or_backslash(rest) {
            if rest[end] == b'"' {
                self.pos += end + 1;
                return match std::str::from_utf8(&rest[..end]) {
                    Ok(s) => s.to_owned(),
                    Err(_) => go_lossy(&rest[..end]).into_owned(),
                };
            }
        }
        let mut bytes: Vec<u8> = Vec::new();
        while self.pos < self.buf.len() {
            let c = self.buf[self.pos];
            self.pos += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek();
                    self.pos += 1;
                    let ch = match e {
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4();
                            if (0xD800..0xDC00).contains(&hi)
                                && self.buf.get(self.pos) == Some(&b'\\')
                                && self.buf.get(self.pos + 1) == Some(&b'u')
                            {
                                let save = self.pos;
                                self.pos += 2;
                                let lo = self.hex4();
                                if (0xDC00..0xE000).contains(&lo) {
                                    let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                    char::from_u32(cp).unwrap_or('\u{FFFD}')
                                } else {
                                    self.pos = save;
                                    '\u{FFFD}'
                                }
                            } else {
                                char::from_u32(hi).unwrap_or('\u{FFFD}')
                            }
                        }
                        other => char::from(other),
                    };
                    let mut tmp = [0u8; 4];
                    bytes.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
                _ => bytes.push(c),
            }
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => go_lossy(e.as_bytes()).into_owned(),
        }
    }

    fn hex4(&mut self) -> u32 {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = char::from(self.peek()).to_digit(16).unwrap_or(0);
            v = v * 16 + d;
            self.pos += 1;
        }
        v
    }
}

/// The bytes of a JSON string as Go decodes them: valid UTF-8 as it is, and every byte of an
/// invalid sequence as its own U+FFFD (Go's `utf8.DecodeRune` steps over one byte at a time, where
/// `String::from_utf8_lossy` makes one U+FFFD of a cut-short sequence of two or three bytes: Go
/// reads `"\xE2\x80A"` as two U+FFFD and `A`). Linear: each byte is looked at once or twice.
pub(super) fn go_lossy(bytes: &[u8]) -> Cow<'_, str> {
    let mut rest = match std::str::from_utf8(bytes) {
        Ok(s) => return Cow::Borrowed(s),
        Err(_) => bytes,
    };
    let mut out = String::with_capacity(bytes.len() + 16);
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                return Cow::Owned(out);
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let invalid = e.error_len().unwrap_or(after.len());
                out.extend(std::iter::repeat('\u{FFFD}').take(invalid));
                rest = &after[invalid..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_one_replacement_per_byte_as_in_go() {
        let s = |raw: &[u8]| match Json::parse(raw).unwrap() {
            Json::String(s) => s,
            other => panic!("{other:?}"),
        };
        // A cut-short sequence: one U+FFFD per byte (Rust's lossy conversion makes one of both).
        assert_eq!(s(b"\"a\xE2\x80b\""), "a\u{FFFD}\u{FFFD}b");
        assert_eq!(s(b"\"\xF0\x9F\x98\""), "\u{FFFD}\u{FFFD}\u{FFFD}");
        // An encoded surrogate and stray continuation bytes.
        assert_eq!(s(b"\"\xED\xA0\x80\x80\""), "\u{FFFD}".repeat(4));
        // The same through the path for strings with escapes, and in a key.
        assert_eq!(s(b"\"\xE2\x80\\n\""), "\u{FFFD}\u{FFFD}\n");
        let v = Json::parse(b"{\"\xE2\x80\":1}").unwrap();
        assert_eq!(v.field("\u{FFFD}\u{FFFD}"), Some(&Json::Number("1".into())));
        // Valid UTF-8 is kept, borrowed.
        assert!(matches!(go_lossy("é€😀".as_bytes()), Cow::Borrowed("é€😀")));
    }

    proptest::proptest! {
        #[test]
        fn go_lossy_matches_a_byte_at_a_time_decode(bytes in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::num::u8::ANY,
                proptest::sample::select(vec![0xE2, 0x80, 0xF0, 0x9F, 0xED, 0xA0, 0xC5, 0xBF, b'a']),
            ],
            0..24,
        )) {
            // Go's loop: decode one rune; an invalid one is U+FFFD of width one.
            let mut go = String::new();
            let mut i = 0;
            while i < bytes.len() {
                let width = (1..=4)
                    .filter(|w| i + w <= bytes.len())
                    .find(|w| std::str::from_utf8(&bytes[i..i + w]).is_ok_and(|s| s.chars().count() == 1));
                match width {
                    Some(w) => {
                        go.push_str(std::str::from_utf8(&bytes[i..i + w]).unwrap());
                        i += w;
                    }
                    None => {
                        go.push('\u{FFFD}');
                        i += 1;
                    }
                }
            }
            proptest::prop_assert_eq!(go_lossy(&bytes), go);
        }
    }
}
