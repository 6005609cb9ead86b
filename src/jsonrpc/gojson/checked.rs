//! The one-pass parser: checks a body's grammar while it builds the [`Json`] tree, for the
//! common request (an object whose strings have no escapes), and gives up on anything else.
//!
//! Hand-written for a measured need: the two-pass path (Go's scanner, then the tree) reads every
//! byte twice, and the decode runs on every request. Measured in issue 13 with
//! `cargo bench --bench micro -- "decode only"` (a getTx envelope), three alternating runs of each
//! build: with this pass 504, 552 and 559 ns; with it switched off (every body the two-pass way)
//! 751, 743 and 763 ns, about 40 % more. It must accept only what the scanner accepts and build
//! the same tree: the property tests at the bottom hold it to that, corrupted bodies included.
//! Whatever it gives up on goes the two-pass way, which also words the errors.

use std::borrow::Cow;

use super::depth::MAX_TREE_DEPTH;
use super::lex::{is_space, string_stop};
use super::raw::RawMembers;
use super::tree::go_lossy;
use super::value::{Json, Members};

/// The one-pass path of [`Json::parse`] and [`Json::parse_top`]: checks the grammar while it
/// builds the tree, for the common case of an object or array whose strings have no escapes. It
/// gives up (`None`) on anything else, valid or not, and the caller takes the two-pass path (Go's
/// scanner, then the tree of `tree.rs`), which also words the errors. It accepts only what the
/// scanner accepts and builds the same tree (a property test holds the two paths to that).
pub(super) struct Checked<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Checked<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Checked<'a> {
        let mut c = Checked {
            buf,
            pos: 0,
            depth: 0,
        };
        c.ws();
        c
    }

    fn ws(&mut self) {
        while self.buf.get(self.pos).is_some_and(|&c| is_space(c)) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.pos += usize::from(hit);
        hit
    }

    /// A top-level object or array (where Go's scanner ends the value: at its closing bracket).
    pub(super) fn container(&mut self) -> Option<Json> {
        matches!(self.peek(), Some(b'{' | b'[')).then_some(())?;
        self.value()
    }

    pub(super) fn top_object(&mut self) -> Option<Members<'a>> {
        let mut members = Vec::with_capacity(4);
        self.object(|key, value, at| members.push((key, value, at)))?;
        Some(members)
    }

    fn nest(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_TREE_DEPTH).then_some(())
    }

    /// An object; `member` gets each key, value and the value's byte range.
    fn object(
        &mut self,
        mut member: impl FnMut(Cow<'a, str>, Json, std::ops::Range<usize>),
    ) -> Option<()> {
        self.eat(b'{').then_some(())?;
        self.nest()?;
        self.ws();
        if !self.eat(b'}') {
            loop {
                let key = self.str()?;
                self.ws();
                self.eat(b':').then_some(())?;
                self.ws();
                let start = self.pos;
                let value = self.value()?;
                member(key, value, start..self.pos);
                self.ws();
                if self.eat(b'}') {
                    break;
                }
                self.eat(b',').then_some(())?;
                self.ws();
            }
        }
        self.depth -= 1;
        Some(())
    }

    fn array(&mut self) -> Option<Json> {
        self.pos += 1; // '['
        self.nest()?;
        let mut items = Vec::new();
        self.ws();
        if !self.eat(b']') {
            loop {
                items.push(self.value()?);
                self.ws();
                if self.eat(b']') {
                    break;
                }
                self.eat(b',').then_some(())?;
                self.ws();
            }
        }
        self.depth -= 1;
        Some(Json::Array(items))
    }

    fn value(&mut self) -> Option<Json> {
        match self.peek()? {
            b'{' => {
                let mut members = Vec::with_capacity(4);
                self.object(|key, value, _| members.push((key.into_owned(), value)))?;
                Some(Json::Object(members))
            }
            b'[' => self.array(),
            b'"' => self.string().map(Json::String),
            b't' => self.literal(b"true", Json::Bool(true)),
            b'f' => self.literal(b"false", Json::Bool(false)),
            b'n' => self.literal(b"null", Json::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], value: Json) -> Option<Json> {
        (self.buf.get(self.pos..self.pos + word.len())? == word).then_some(())?;
        self.pos += word.len();
        Some(value)
    }

    /// Skips digits; how many there were.
    fn digits(&mut self) -> usize {
        let n = self.buf[self.pos..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.pos += n;
        n
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, kept as written.
    fn number(&mut self) -> Option<Json> {
        let start = self.pos;
        self.skip_number()?;
        let text = std::str::from_utf8(&self.buf[start..self.pos]).ok()?;
        Some(Json::Number(text.into()))
    }

    fn skip_number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.') && self.digits() == 0 {
            return None;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// The members of a top-level object as raw slices, as
    /// [`object_members`](super::raw::object_members) gives them (key
    /// without its quotes, still escaped; value as written), checked in the same pass.
    pub(super) fn raw_members(&mut self) -> Option<RawMembers<'a>> {
        let buf = self.buf;
        let mut out = Vec::with_capacity(4);
        self.eat(b'{').then_some(())?;
        self.nest()?;
        self.ws();
        if !self.eat(b'}') {
            loop {
                let key_start = self.pos + 1;
                self.skip_string()?;
                let key = &buf[key_start..self.pos - 1];
                self.ws();
                self.eat(b':').then_some(())?;
                self.ws();
                let start = self.pos;
                self.skip()?;
                out.push((key, &buf[start..self.pos]));
                self.ws();
                if self.eat(b'}') {
                    break;
                }
                self.eat(b',').then_some(())?;
                self.ws();
            }
        }
        Some(out)
    }

    /// Checks one value without building it (strings may hold escapes here).
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.pos += 1;
                self.nest()?;
                self.ws();
                if !self.eat(close) {
                    loop {
                        if close == b'}' {
                            self.skip_string()?;
                            self.ws();
                            self.eat(b':').then_some(())?;
                            self.ws();
                        }
                        self.skip()?;
                        self.ws();
                        if self.eat(close) {
                            break;
                        }
                        self.eat(b',').then_some(())?;
                        self.ws();
                    }
                }
                self.depth -= 1;
                Some(())
            }
            b'"' => self.skip_string(),
            b't' => self.literal(b"true", Json::Null).map(drop),
            b'f' => self.literal(b"false", Json::Null).map(drop),
            b'n' => self.literal(b"null", Json::Null).map(drop),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// Checks a string, escapes included, by the scanner's rules: no control characters, and a
    /// backslash takes one of `"`, a backslash, `/`, `b`, `f`, `n`, `r`, `t`, or `u` and four hex
    /// digits.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"').then_some(())?;
        loop {
            let n = string_stop(&self.buf[self.pos..])?;
            self.pos += n + 1;
            match self.buf[self.pos - 1] {
                b'"' => return Some(()),
                b'\\' => match self.peek()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 1,
                    b'u' => {
                        let hex = self.buf.get(self.pos + 1..self.pos + 5)?;
                        hex.iter().all(u8::is_ascii_hexdigit).then_some(())?;
                        self.pos += 5;
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    /// A string without escapes (invalid UTF-8 becomes U+FFFD, as Go decodes it).
    fn string(&mut self) -> Option<String> {
        self.str().map(Cow::into_owned)
    }

    /// [`Checked::string`], borrowed from the buffer when it is valid UTF-8.
    fn str(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"').then_some(())?;
        let buf: &'a [u8] = self.buf;
        let rest = &buf[self.pos..];
        let end = string_stop(rest)?;
        (rest[end] == b'"').then_some(())?;
        self.pos += end + 1;
        Some(go_lossy(&rest[..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::gojson::raw::object_members;
    use crate::jsonrpc::gojson::testing::json_text;
    use crate::jsonrpc::gojson::tree::{parse_scanned, parse_top_scanned};
    use crate::jsonrpc::gojson::{scan_object_members, scan_value, Top};

    /// The one-pass path against the two-pass one on `buf`: it may give up, but whatever it
    /// builds, the scanner accepts and builds the same.
    fn same_as_scanned(buf: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
        if let Some(members) = Checked::new(buf).top_object() {
            proptest::prop_assert_eq!(Ok(Top::Object(members)), parse_top_scanned(buf));
        }
        if let Some(value) = Checked::new(buf).container() {
            proptest::prop_assert_eq!(Ok(value), parse_scanned(buf));
        }
        Ok(())
    }

    /// `body` with one byte deleted at `at`, or `junk` inserted there.
    fn corrupt(body: String, at: usize, junk: u8, delete: bool) -> Vec<u8> {
        let mut body = body.into_bytes();
        let at = at % body.len();
        if delete {
            body.remove(at);
        } else {
            body.insert(at, junk);
        }
        body
    }

    /// [`scan_object_members`] against the scanner and the walk.
    fn members_as_walked(buf: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
        let walked = scan_value(buf).map(|r| object_members(&buf[r]));
        proptest::prop_assert_eq!(scan_object_members(buf), walked);
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn one_pass_members_match_the_walk(v in json_text(), esc in "(\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}|\\\\x|[a-z]){0,3}") {
            let body = format!("{{\"jsonrpc\":\"2.0\",\"result\":{v},\"s\":\"{esc}\",\"id\":7}}\n");
            let checked = Checked::new(body.as_bytes()).raw_members();
            proptest::prop_assert!(checked.is_some() || esc.contains("\\x"), "gave up on {}", body);
            members_as_walked(body.as_bytes())?;
        }

        #[test]
        fn checked_path_builds_what_the_scanner_builds(v in json_text(), ws in "[ \t\r\n]{0,2}") {
            let body = format!("{ws}{{\"id\":{v}}}{ws}trailing");
            proptest::prop_assert!(Checked::new(body.as_bytes()).top_object().is_some(), "gave up on {}", body);
            same_as_scanned(body.as_bytes())?;
        }

        /// Both one-pass paths on a body with one byte deleted or inserted: the tree path on a
        /// request-shaped body, the member split on an answer-shaped one with an escape.
        #[test]
        fn one_pass_paths_never_accept_what_the_scanner_refuses(
            v in json_text(),
            at in 0usize..64,
            junk in proptest::sample::select(b"{}[]:,\"\\ \x01-+.eE0123456789tfnulxu".to_vec()),
            delete in proptest::bool::ANY,
        ) {
            let request = format!("{{\"id\":{v}}}");
            same_as_scanned(&corrupt(request, at, junk, delete))?;
            let answer = format!("{{\"result\":{v},\"s\":\"a\\\\u00e9\",\"id\":1}}");
            members_as_walked(&corrupt(answer, at, junk, delete))?;
        }
    }
}
