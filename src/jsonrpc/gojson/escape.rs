//! Writing JSON text: Go's encoder escaping, Go's `json.Compact`, the plain escaping for what is
//! sent to a node, and Go's `strconv.Quote`.
//!
//! Hand-written for node compatibility: a node's answers are written by Go's `json.Encoder`, which
//! escapes `<`, `>`, `&`, U+2028 and U+2029 (`\u003c`, lower-case hex) and compacts a raw `id`
//! while keeping its existing escapes; an error's `data` and an echoed id must match those bytes,
//! and avalanchego's messages quote names with `%q`. serde_json has neither the HTML-safe escapes
//! nor a compaction that keeps a value's own escapes. The plain escaping keeps a re-encoded request no longer than the client's (a hostile body of `<` would grow six
//! times under Go's escaping).

use std::fmt::Write as _;

use super::lex::{is_space, string_stop};

/// Appends `s` as a JSON string the way Go's encoder writes it (HTML-safe).
pub fn write_go_string(out: &mut String, s: &str) {
    if !s.bytes().any(needs_escape) {
        // Nearly every string (IDs, names, hex): copied as it is.
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    write_go_chars(out, s.chars());
}

/// Could this byte start something Go's encoder escapes? (0xE2 leads U+2028 and U+2029; a string
/// with any such byte takes the character-by-character path.)
fn needs_escape(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2) || b < 0x20
}

/// [`write_go_string`] over a sequence of characters.
pub(crate) fn write_go_chars(out: &mut String, chars: impl Iterator<Item = char>) {
    out.push('"');
    for c in chars {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_u_escape(out, c),
            c if (c as u32) < 0x20 => push_u_escape(out, c),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `\uXXXX` for a character of the Basic Multilingual Plane: a table lookup per digit
/// (a body of a million `<` takes a million of these, so no formatting machinery here).
fn push_u_escape(out: &mut String, c: char) {
    for b in u_escape(c as u32) {
        out.push(char::from(b));
    }
}

/// The six bytes of `\uXXXX` (lower-case hex, as Go writes it) for a code point below 0x10000.
fn u_escape(cp: u32) -> [u8; 6] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digit = |shift: u32| HEX[((cp >> shift) & 0xf) as usize];
    [b'\\', b'u', digit(12), digit(8), digit(4), digit(0)]
}

/// Appends `s` as a JSON string with only the escapes JSON requires: `"`, the backslash and the
/// control characters (short forms where JSON has them, else `\u00XX`). Every other character,
/// `<`, `>`, `&`, U+2028 and U+2029 included, is copied as it is, so the text is `s.len() + 2`
/// bytes plus one per quote, backslash, `\n`-style control and five per other control character:
/// never more than the escapes those characters arrived as.
pub(crate) fn write_plain_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut rest = s;
    // Runs of plain characters are copied whole; every stop is one ASCII byte.
    while let Some(at) = string_stop(rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let c = char::from(rest.as_bytes()[at]);
        match plain_short_escape(c) {
            Some(short) => {
                out.push('\\');
                out.push(short);
            }
            None => push_u_escape(out, c),
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// The length of [`write_plain_string`]'s text for `s`, counted without writing it.
pub(crate) fn plain_string_len(s: &str) -> usize {
    let mut len = s.len() + 2;
    let mut rest = s.as_bytes();
    while let Some(at) = string_stop(rest) {
        len += if plain_short_escape(char::from(rest[at])).is_some() {
            1
        } else {
            5
        };
        rest = &rest[at + 1..];
    }
    len
}

/// The letter of a two-character escape (`\n`...) for a character [`write_plain_string`] must
/// escape, when JSON has one.
fn plain_short_escape(c: char) -> Option<char> {
    match c {
        '"' => Some('"'),
        '\\' => Some('\\'),
        '\n' => Some('n'),
        '\r' => Some('r'),
        '\t' => Some('t'),
        '\u{8}' => Some('b'),
        '\u{c}' => Some('f'),
        _ => None,
    }
}

/// Go's `json.Compact` with HTML escaping, as applied to a `json.RawMessage` when it is encoded
/// (how a node echoes the request `id`): insignificant whitespace removed, `<`, `>`, `&`, U+2028 and
/// U+2029 inside strings escaped, every other byte (including existing escapes) kept.
/// `raw` must be one valid JSON value.
pub(crate) fn compact_into(out: &mut Vec<u8>, raw: &[u8]) {
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if in_string {
            if escaped {
                escaped = false;
                out.push(c);
            } else if c == b'\\' {
                escaped = true;
                out.push(c);
            } else if c == b'"' {
                in_string = false;
                out.push(c);
            } else if c == b'<' || c == b'>' || c == b'&' {
                out.extend_from_slice(&u_escape(u32::from(c)));
            } else if c == 0xE2
                && raw.get(i + 1) == Some(&0x80)
                && matches!(raw.get(i + 2), Some(0xA8 | 0xA9))
            {
                let last = raw[i + 2];
                out.extend_from_slice(if last == 0xA8 { b"\\u2028" } else { b"\\u2029" });
                i += 2;
            } else {
                out.push(c);
            }
        } else if c == b'"' {
            in_string = true;
            out.push(c);
        } else if !is_space(c) {
            out.push(c);
        }
        i += 1;
    }
}

/// [`compact_into`] into a fresh buffer.
pub(crate) fn compact(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    compact_into(&mut out, raw);
    out
}

/// Go's `strconv.Quote` for the strings avalanchego prints with `%q` in error messages.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\u{FFFD}' => out.push('\u{FFFD}'),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || (0x80..0xa0).contains(&(c as u32)) => {
                if (c as u32) < 0x10000 {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                } else {
                    let _ = write!(out, "\\U{:08x}", c as u32);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::gojson::testing::go_string;

    #[test]
    fn compact_escapes_html_and_keeps_escapes() {
        let raw = br#"{ "a" : "<b>&\u0041" ,"c": [1, 2] }"#;
        assert_eq!(
            String::from_utf8(compact(raw)).unwrap(),
            r#"{"a":"\u003cb\u003e\u0026\u0041","c":[1,2]}"#
        );
    }

    proptest::proptest! {
        #[test]
        fn go_string_fast_path_matches_the_char_walk(s in "(\\PC|[\"\\\\<>&\u{2028}\u{2029}\u{0}-\u{1f}])*") {
            let (mut fast, mut slow) = (String::new(), String::new());
            write_go_string(&mut fast, &s);
            write_go_chars(&mut slow, s.chars());
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn go_string_escapes() {
        assert_eq!(go_string("a<\u{2028}\n\u{1}"), r#""a\u003c\u2028\n\u0001""#);
        assert_eq!(go_quote("platform.\"x\""), r#""platform.\"x\"""#);
    }
}
