//! [`Json`], the checked JSON value the rest of snowgate works with: what
//! [`crate::jsonrpc::decode`] builds from a request and what the devnode's methods read their arguments from.
//! This file is the type, its accessors and its encodings; the parsers that build it sit above it
//! (`parse.rs` is where [`Json::parse`] starts).
//!
//! Hand-written for node compatibility: numbers stay their validated source text (a node echoes
//! `9223372036854775807` and `1.50` as sent, never through a float), object members keep their
//! order and duplicates (Go's decoder takes the last of keys that fold alike, [`Json::field`]), and
//! there are two encodings: Go's HTML-safe one for what must match a node byte for byte, and the
//! plain one for what is sent to a node, which never outgrows the client's text.

use std::borrow::Cow;

use super::escape::{plain_string_len, write_go_string, write_plain_string};
use super::fold::fold_eq;

/// A parsed JSON value. Numbers keep their source text; object members keep their order and
/// duplicates, so callers decide how keys are matched (see [`Json::field`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    /// A number exactly as written (already validated by the scanner).
    Number(Box<str>),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The name Go's decoder reports for this kind of value in an `UnmarshalTypeError`.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "bool",
            Json::Number(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }

    /// Looks a struct field up the way Go's decoder does: keys match `name` under Go's case folding,
    /// and the last matching member wins. `None` when absent or not an object.
    pub fn field(&self, name: &str) -> Option<&Json> {
        let Json::Object(members) = self else {
            return None;
        };
        members
            .iter()
            .rev()
            .find(|(k, _)| fold_eq(k, name))
            .map(|(_, v)| v)
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// True for JSON `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// Encodes compactly with Go's escaping rules (HTML-safe: what a node itself would write).
    pub fn encode_into(&self, out: &mut String) {
        self.encode_with(out, write_go_string);
    }

    /// Encodes compactly with only the escapes JSON requires ([`write_plain_string`]): what is
    /// sent to a node, whose decoder reads `<` and `\u003c` alike. Go's HTML-safe escapes would
    /// make six bytes of each `<`, `>`, `&` and three of U+2028; without them the text is never
    /// longer than the text the value was parsed from, except where invalid UTF-8 became U+FFFD
    /// (three bytes for as little as one): [`Json::plain_len`] says how long it will be.
    pub(crate) fn encode_plain_into(&self, out: &mut String) {
        self.encode_with(out, write_plain_string);
    }

    fn encode_with(&self, out: &mut String, string: fn(&mut String, &str)) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => string(out, s),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.encode_with(out, string);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    string(out, k);
                    out.push(':');
                    v.encode_with(out, string);
                }
                out.push('}');
            }
        }
    }

    /// The exact length of [`Json::encode_plain_into`]'s text, counted without writing it (one
    /// pass, no allocation), so a caller can refuse a value that would encode past a limit.
    pub(crate) fn plain_len(&self) -> usize {
        match self {
            Json::Null => 4,
            Json::Bool(true) => 4,
            Json::Bool(false) => 5,
            Json::Number(n) => n.len(),
            Json::String(s) => plain_string_len(s),
            Json::Array(items) => {
                2 + items.len().saturating_sub(1) + items.iter().map(Json::plain_len).sum::<usize>()
            }
            Json::Object(members) => {
                2 + members.len().saturating_sub(1)
                    + members
                        .iter()
                        .map(|(k, v)| plain_string_len(k) + 1 + v.plain_len())
                        .sum::<usize>()
            }
        }
    }

    /// Encodes compactly with Go's escaping rules.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        self.encode_into(&mut out);
        out
    }
}

/// The first value of a body, as `Json::parse_top` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Top<'a> {
    /// An object: its members in order, each with the byte range of its value.
    Object(Members<'a>),
    /// Anything else.
    Other(Json),
}

/// Members of an object with the byte range of each value, as [`Top::Object`] holds them.
/// Keys are borrowed from the body unless they had to be decoded (escapes, invalid UTF-8).
pub(crate) type Members<'a> = Vec<(Cow<'a, str>, Json, std::ops::Range<usize>)>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::gojson::testing::{go_string, json_text};

    #[test]
    fn numbers_keep_their_text() {
        let v = Json::parse(br#"{"id": 9223372036854775807, "x": 1.50, "y": -0.0e+10}"#).unwrap();
        assert_eq!(
            v.encode(),
            r#"{"id":9223372036854775807,"x":1.50,"y":-0.0e+10}"#
        );
    }

    #[test]
    fn fields_match_like_go() {
        let v = Json::parse(br#"{"Height":1,"HEIGHT":2,"\u017fubnetID":"x"}"#).unwrap();
        assert_eq!(v.field("height"), Some(&Json::Number("2".into())));
        assert_eq!(v.field("subnetID").and_then(Json::as_str), Some("x"));
    }

    proptest::proptest! {
        /// The plain encoding reads back as the same value, is as long as [`Json::plain_len`]
        /// says, and is never longer than valid JSON text it was parsed from.
        #[test]
        fn plain_encoding_round_trips_and_never_grows(
            v in json_text(),
            s in "(\\PC|[\"\\\\<>&\u{2028}\u{2029}\u{0}-\u{1f}\u{7f}])*",
        ) {
            for source in [v.clone(), go_string(&s), format!("{{\"k<>\u{2028}\":[{v},{}]}}", go_string(&s))] {
                let value = Json::parse(source.as_bytes()).unwrap();
                let mut plain = String::new();
                value.encode_plain_into(&mut plain);
                proptest::prop_assert_eq!(plain.len(), value.plain_len());
                proptest::prop_assert!(plain.len() <= source.len(), "{} -> {}", source, plain);
                proptest::prop_assert_eq!(Json::parse(plain.as_bytes()).unwrap(), value);
            }
        }
    }
}
