//! A JSON reader and writer that behaves like Go's `encoding/json`, which is what avalanchego's RPC
//! layer (gorilla/rpc json2) uses to read requests and write answers.
//!
//! Both halves of snowgate need this: the simulated node must read a request the way a node does
//! and fail with the node's exact error text, and the gateway must produce the same -32700 texts and
//! must know when a node would read an envelope differently from a naive parser (case-insensitive
//! keys, last duplicate wins, data after the first value ignored).
//!
//! * [`scan_value`] is a port of Go's `scanner.go` state machine: it finds the end of the first JSON
//!   value and reports the first syntax error with Go's message (`invalid character 'h' looking for
//!   beginning of value`, `unexpected EOF`, `EOF`).
//! * [`Json`] is a parsed tree that keeps numbers as their validated source text, so re-encoding a
//!   value never goes through a float (`9223372036854775807`, `1.50` survive).
//! * [`write_go_string`] and [`compact_into`] encode the way Go's encoder does (`<`, `>`, `&`,
//!   U+2028 and U+2029 escaped), for text that must match a node's byte for byte (error `data`,
//!   echoed ids); [`write_plain_string`] and [`Json::encode_plain_into`] use only the escapes JSON
//!   requires, for what is sent to a node, so a re-encoded request never outgrows the client's.
//! * [`fold_key`] is Go's case folding for struct field names; [`FoldSet`] finds two keys of one
//!   object that fold alike in one pass (a request of many keys costs time linear in its size).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Go's maximum nesting depth for the JSON scanner.
const MAX_DEPTH: usize = 10_000;

/// The deepest [`Json`] tree built: far beyond any real request, well within a task's stack.
pub const MAX_TREE_DEPTH: usize = 512;

/// A syntax failure of the first JSON value in a body, with Go's error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyntaxError {
    /// Nothing but whitespace: Go's `io.EOF`.
    Eof,
    /// The input ended inside a value: Go's `io.ErrUnexpectedEOF`.
    UnexpectedEof,
    /// An invalid byte; the string is Go's full message.
    Invalid(String),
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyntaxError::Eof => f.write_str("EOF"),
            SyntaxError::UnexpectedEof => f.write_str("unexpected EOF"),
            SyntaxError::Invalid(msg) => f.write_str(msg),
        }
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: how the scanner names an offending byte.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => {
            // Go converts the byte to a rune (Latin-1) and quotes it with strconv.Quote.
            let q = go_quote(&char::from(c).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

fn invalid(c: u8, context: &str) -> SyntaxError {
    SyntaxError::Invalid(format!("invalid character {} {}", quote_char(c), context))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    BeginValue,
    BeginValueOrEmpty,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    InString,
    InStringEsc,
    InStringEscU(u8),
    Neg,
    Zero,
    One,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    Lit(&'static [u8], usize, &'static str),
}

/// Outcome of one scanner step.
enum Step {
    Continue,
    /// The top-level value ended *before* this byte.
    EndBefore,
    /// The top-level value ended *with* this byte (closing bracket or brace).
    EndWith,
}

/// Finds the end of the first JSON value in `buf` (after leading whitespace) exactly as Go's
/// `json.Decoder` does: returns the byte range of the value, or Go's error.
pub fn scan_value(buf: &[u8]) -> Result<std::ops::Range<usize>, SyntaxError> {
    scan(buf).map(|(range, _)| range)
}

/// The index of the first byte of `s` that ends a run of plain string content: `"`, `\\`, and with
/// `controls` a control character (below 0x20, which Go refuses inside a string). Eight bytes a
/// step with the classic "has a zero byte" word trick: the byte-at-a-time search was about a tenth
/// of a forwarded call's instructions (IDs, addresses and hex are most of the bytes). The lowest
/// flagged byte of a word is always a true match (a borrow only flags bytes above a real one).
fn string_stop(s: &[u8], controls: bool) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let mut hits =
            zero_byte(w ^ (ONES * u64::from(b'"'))) | zero_byte(w ^ (ONES * u64::from(b'\\')));
        if controls {
            hits |= w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        }
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || (controls && b < 0x20))
        .map(|p| at + p)
}

/// [`scan_value`], plus the deepest nesting of arrays and objects in the value.
fn scan(buf: &[u8]) -> Result<(std::ops::Range<usize>, usize), SyntaxError> {
    let mut stack: Vec<Parse> = Vec::new();
    let mut deepest = 0;
    let mut state = State::BeginValue;
    let mut start = None;
    let mut i = 0;
    while i < buf.len() {
        if matches!(state, State::InString) {
            // Fast path: inside a string, every byte but `"`, `\` and a control character leaves
            // the state as it is (Go's stateInString), so skip the run of them at once. Strings
            // are most of a request's bytes (IDs, addresses, hex).
            i += string_stop(&buf[i..], true).unwrap_or(buf.len() - i);
            if i == buf.len() {
                break;
            }
        }
        let c = buf[i];
        if start.is_none() {
            if is_space(c) {
                i += 1;
                continue;
            }
            start = Some(i);
        }
        match step(&mut state, &mut stack, c)? {
            Step::Continue => deepest = deepest.max(stack.len()),
            Step::EndBefore => return Ok((start.unwrap_or(0)..i, deepest)),
            Step::EndWith => return Ok((start.unwrap_or(0)..i + 1, deepest)),
        }
        i += 1;
    }
    let Some(start) = start else {
        return Err(SyntaxError::Eof);
    };
    // At EOF Go feeds a space: a finished number or literal completes, anything else is cut short.
    match step(&mut state, &mut stack, b' ') {
        Ok(Step::EndBefore) | Ok(Step::EndWith) => Ok((start..buf.len(), deepest)),
        _ => Err(SyntaxError::UnexpectedEof),
    }
}

fn push(stack: &mut Vec<Parse>, p: Parse, c: u8) -> Result<(), SyntaxError> {
    stack.push(p);
    if stack.len() > MAX_DEPTH {
        return Err(invalid(c, "exceeded max depth"));
    }
    Ok(())
}

fn step(state: &mut State, stack: &mut Vec<Parse>, c: u8) -> Result<Step, SyntaxError> {
    match *state {
        State::BeginValueOrEmpty => {
            if is_space(c) {
                return Ok(Step::Continue);
            }
            if c == b']' {
                return end_value(state, stack, c);
            }
            *state = State::BeginValue;
            step(state, stack, c)
        }
        State::BeginValue => {
            if is_space(c) {
                return Ok(Step::Continue);
            }
            *state = match c {
                b'{' => {
                    push(stack, Parse::ObjectKey, c)?;
                    State::BeginStringOrEmpty
                }
                b'[' => {
                    push(stack, Parse::ArrayValue, c)?;
                    State::BeginValueOrEmpty
                }
                b'"' => State::InString,
                b'-' => State::Neg,
                b'0' => State::Zero,
                b'1'..=b'9' => State::One,
                b't' => State::Lit(b"true", 1, "in literal true"),
                b'f' => State::Lit(b"false", 1, "in literal false"),
                b'n' => State::Lit(b"null", 1, "in literal null"),
                _ => return Err(invalid(c, "looking for beginning of value")),
            };
            Ok(Step::Continue)
        }
        State::BeginStringOrEmpty => {
            if is_space(c) {
                return Ok(Step::Continue);
            }
            if c == b'}' {
                if let Some(last) = stack.last_mut() {
                    *last = Parse::ObjectValue;
                }
                return end_value(state, stack, c);
            }
            *state = State::BeginString;
            step(state, stack, c)
        }
        State::BeginString => {
            if is_space(c) {
                return Ok(Step::Continue);
            }
            if c == b'"' {
                *state = State::InString;
                return Ok(Step::Continue);
            }
            Err(invalid(c, "looking for beginning of object key string"))
        }
        State::EndValue => end_value(state, stack, c),
        State::InString => {
            match c {
                b'"' => *state = State::EndValue,
                b'\\' => *state = State::InStringEsc,
                0..=0x1f => return Err(invalid(c, "in string literal")),
                _ => {}
            }
            Ok(Step::Continue)
        }
        State::InStringEsc => {
            *state = match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => State::InString,
                b'u' => State::InStringEscU(0),
                _ => return Err(invalid(c, "in string escape code")),
            };
            Ok(Step::Continue)
        }
        State::InStringEscU(n) => {
            if !c.is_ascii_hexdigit() {
                return Err(invalid(c, "in \\u hexadecimal character escape"));
            }
            *state = if n == 3 {
                State::InString
            } else {
                State::InStringEscU(n + 1)
            };
            Ok(Step::Continue)
        }
        State::Neg => {
            *state = match c {
                b'0' => State::Zero,
                b'1'..=b'9' => State::One,
                _ => return Err(invalid(c, "in numeric literal")),
            };
            Ok(Step::Continue)
        }
        State::One => {
            if c.is_ascii_digit() {
                return Ok(Step::Continue);
            }
            *state = State::Zero;
            step(state, stack, c)
        }
        State::Zero => match c {
            b'.' => {
                *state = State::Dot;
                Ok(Step::Continue)
            }
            b'e' | b'E' => {
                *state = State::E;
                Ok(Step::Continue)
            }
            _ => end_value(state, stack, c),
        },
        State::Dot => {
            if c.is_ascii_digit() {
                *state = State::Dot0;
                return Ok(Step::Continue);
            }
            Err(invalid(c, "after decimal point in numeric literal"))
        }
        State::Dot0 => match c {
            b'0'..=b'9' => Ok(Step::Continue),
            b'e' | b'E' => {
                *state = State::E;
                Ok(Step::Continue)
            }
            _ => end_value(state, stack, c),
        },
        State::E => {
            if c == b'+' || c == b'-' {
                *state = State::ESign;
                return Ok(Step::Continue);
            }
            *state = State::ESign;
            step(state, stack, c)
        }
        State::ESign => {
            if c.is_ascii_digit() {
                *state = State::E0;
                return Ok(Step::Continue);
            }
            Err(invalid(c, "in exponent of numeric literal"))
        }
        State::E0 => {
            if c.is_ascii_digit() {
                return Ok(Step::Continue);
            }
            end_value(state, stack, c)
        }
        State::Lit(word, n, context) => {
            if c != word[n] {
                let expecting = format!("{} (expecting '{}')", context, char::from(word[n]));
                return Err(invalid(c, &expecting));
            }
            *state = if n + 1 == word.len() {
                State::EndValue
            } else {
                State::Lit(word, n + 1, context)
            };
            Ok(Step::Continue)
        }
    }
}

fn end_value(state: &mut State, stack: &mut Vec<Parse>, c: u8) -> Result<Step, SyntaxError> {
    let Some(&top) = stack.last() else {
        return Ok(Step::EndBefore);
    };
    if is_space(c) {
        *state = State::EndValue;
        return Ok(Step::Continue);
    }
    match top {
        Parse::ObjectKey => {
            if c == b':' {
                if let Some(last) = stack.last_mut() {
                    *last = Parse::ObjectValue;
                }
                *state = State::BeginValue;
                return Ok(Step::Continue);
            }
            Err(invalid(c, "after object key"))
        }
        Parse::ObjectValue => match c {
            b',' => {
                if let Some(last) = stack.last_mut() {
                    *last = Parse::ObjectKey;
                }
                *state = State::BeginString;
                Ok(Step::Continue)
            }
            b'}' => pop(state, stack),
            _ => Err(invalid(c, "after object key:value pair")),
        },
        Parse::ArrayValue => match c {
            b',' => {
                *state = State::BeginValue;
                Ok(Step::Continue)
            }
            b']' => pop(state, stack),
            _ => Err(invalid(c, "after array element")),
        },
    }
}

fn pop(state: &mut State, stack: &mut Vec<Parse>) -> Result<Step, SyntaxError> {
    stack.pop();
    *state = State::EndValue;
    if stack.is_empty() {
        Ok(Step::EndWith)
    } else {
        Ok(Step::Continue)
    }
}

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
    /// Parses the first JSON value of `buf` with Go's syntax rules (trailing data is ignored).
    ///
    /// Trees deeper than [`MAX_TREE_DEPTH`] are refused (Go's own scanner allows 10,000 levels;
    /// building and dropping a tree that deep would overflow a task's stack).
    pub fn parse(buf: &[u8]) -> Result<Json, SyntaxError> {
        if let Some(value) = Checked::new(buf).container() {
            return Ok(value);
        }
        Json::parse_scanned(buf)
    }

    /// [`Json::parse`] in two passes: Go's scanner, then the tree.
    fn parse_scanned(buf: &[u8]) -> Result<Json, SyntaxError> {
        let (range, depth) = scan(buf)?;
        too_deep(&buf[range.clone()], depth)?;
        let mut p = TreeParser {
            buf: &buf[range.clone()],
            pos: 0,
        };
        Ok(p.value())
    }

    /// Parses the first JSON value of `buf` once: an object comes back as its members, each with
    /// the byte range of its value in `buf` (so a raw value such as a request id can be echoed
    /// verbatim without another pass).
    pub fn parse_top(buf: &[u8]) -> Result<Top<'_>, SyntaxError> {
        if let Some(members) = Checked::new(buf).top_object() {
            return Ok(Top::Object(members));
        }
        Json::parse_top_scanned(buf)
    }

    /// [`Json::parse_top`] in two passes: Go's scanner (which words any error exactly), then the
    /// tree.
    fn parse_top_scanned(buf: &[u8]) -> Result<Top<'_>, SyntaxError> {
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
    pub fn encode_plain_into(&self, out: &mut String) {
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
    pub fn plain_len(&self) -> usize {
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

/// The first value of a body, as [`Json::parse_top`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Top<'a> {
    /// An object: its members in order, each with the byte range of its value.
    Object(Members<'a>),
    /// Anything else.
    Other(Json),
}

/// Members of an object with the byte range of each value, as [`Top::Object`] holds them.
/// Keys are borrowed from the body unless they had to be decoded (escapes, invalid UTF-8).
pub type Members<'a> = Vec<(Cow<'a, str>, Json, std::ops::Range<usize>)>;

/// The one-pass path of [`Json::parse`] and [`Json::parse_top`]: checks the grammar while it
/// builds the tree, for the common case of an object or array whose strings have no escapes. It
/// gives up (`None`) on anything else, valid or not, and the caller takes the two-pass path (Go's
/// scanner, then [`TreeParser`]), which also words the errors. It accepts only what the scanner
/// accepts and builds the same tree (a property test holds the two paths to that).
struct Checked<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Checked<'a> {
    fn new(buf: &'a [u8]) -> Checked<'a> {
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
    fn container(&mut self) -> Option<Json> {
        matches!(self.peek(), Some(b'{' | b'[')).then_some(())?;
        self.value()
    }

    fn top_object(&mut self) -> Option<Members<'a>> {
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

    /// The members of a top-level object as raw slices, as [`object_members`] gives them (key
    /// without its quotes, still escaped; value as written), checked in the same pass.
    fn raw_members(&mut self) -> Option<RawMembers<'a>> {
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
            let n = string_stop(&self.buf[self.pos..], true)?;
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
        let end = string_stop(rest, true)?;
        (rest[end] == b'"').then_some(())?;
        self.pos += end + 1;
        Some(go_lossy(&rest[..end]))
    }
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
        if let Some(end) = string_stop(rest, false) {
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
pub fn go_lossy(bytes: &[u8]) -> Cow<'_, str> {
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

/// An object's members as raw slices: `(key, value)`.
pub type RawMembers<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The first value of `buf` checked as Go's scanner does and, when it is an object, its members
/// as [`object_members`] gives them: one pass for the common case, else the scanner and the walk.
/// `Err` is the scanner's error; `Ok(None)`: valid, but not an object.
pub fn scan_object_members(buf: &[u8]) -> Result<Option<RawMembers<'_>>, SyntaxError> {
    if let Some(members) = Checked::new(buf).raw_members() {
        return Ok(Some(members));
    }
    let range = scan_value(buf)?;
    Ok(object_members(&buf[range]))
}

/// The members of a JSON object as raw slices: `(key, value)`, the key without its quotes and still
/// escaped, the value exactly as written. `raw` must be one object already validated by
/// [`scan_value`]; anything else gives `None`.
pub fn object_members(raw: &[u8]) -> Option<RawMembers<'_>> {
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
/// [`scan_value`]; anything else gives `None`.
pub fn array_elements(raw: &[u8]) -> Option<Vec<&[u8]>> {
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

/// Refuses a value `depth` levels deep when that is past [`MAX_TREE_DEPTH`], naming the bracket
/// that went past it as Go's scanner would.
fn too_deep(raw: &[u8], depth: usize) -> Result<(), SyntaxError> {
    if depth <= MAX_TREE_DEPTH {
        return Ok(());
    }
    let at = bracket_depth(raw, MAX_TREE_DEPTH).1.unwrap_or(b'[');
    Err(invalid(at, "exceeded max depth"))
}

/// The deepest nesting of arrays and objects in `raw` (a scalar is 0, `{}` is 1). A cheap pass
/// that lets a caller refuse a deeply nested request before building a tree of it.
pub fn nesting_depth(raw: &[u8]) -> usize {
    bracket_depth(raw, usize::MAX).0
}

/// Walks the brackets of `raw` outside strings: the deepest level reached, and the bracket that
/// first went past `limit` (the walk stops there).
fn bracket_depth(raw: &[u8], limit: usize) -> (usize, Option<u8>) {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        i += 1;
        match c {
            b'"' => {
                // Skip the string to its closing quote, stepping over escaped characters.
                loop {
                    let next = raw.get(i..).and_then(|r| string_stop(r, false));
                    let Some(n) = next else {
                        return (max, None); // unterminated: no bracket left to count
                    };
                    i += n + 1;
                    if raw[i - 1] == b'"' {
                        break;
                    }
                    i += 1; // the escaped character
                }
            }
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
                if depth > limit {
                    return (max, Some(c));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (max, None)
}

/// Go's `foldName`: ASCII letters upper-cased, and the two non-ASCII runes whose case-fold orbit
/// reaches an ASCII letter (U+017F LATIN SMALL LETTER LONG S and U+212A KELVIN SIGN) mapped onto it.
/// Two keys a Go struct decoder would treat as the same field fold to the same string.
pub fn fold_key(key: &str) -> String {
    key.chars().map(fold_char).collect()
}

/// One character of [`fold_key`].
pub fn fold_char(c: char) -> char {
    match c {
        'a'..='z' => c.to_ascii_uppercase(),
        '\u{017F}' => 'S',
        '\u{212A}' => 'K',
        _ => c,
    }
}

/// Do two keys fold to the same name? (No allocation.)
pub fn fold_eq(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        // The common case: only ASCII letters fold, and they fold as ASCII case does.
        return a.eq_ignore_ascii_case(b);
    }
    a.chars().map(fold_char).eq(b.chars().map(fold_char))
}

/// Orders keys by their folded names. (No allocation.)
pub fn fold_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        // The common case, a byte at a time: an ASCII character is its one byte, and folds as
        // ASCII upper case does.
        let upper = |c: u8| c.to_ascii_uppercase();
        return a.bytes().map(upper).cmp(b.bytes().map(upper));
    }
    a.chars().map(fold_char).cmp(b.chars().map(fold_char))
}

/// A key that compares and hashes by its folded name ([`fold_eq`]), so that a hash set finds two
/// keys a Go decoder takes for the same field in one pass over an object, without folded copies.
/// (std's hasher is keyed per process, so a client cannot choose keys that all collide.)
#[derive(Debug, Clone, Copy)]
pub struct Folded<'a>(pub &'a str);

impl PartialEq for Folded<'_> {
    fn eq(&self, other: &Self) -> bool {
        fold_eq(self.0, other.0)
    }
}

impl Eq for Folded<'_> {}

impl std::hash::Hash for Folded<'_> {
    /// Feeds the hasher the folded name's UTF-8 bytes as little-endian words of eight, the last
    /// one partial with its length in the top byte: the calls depend only on those bytes, so
    /// fold-equal keys hash alike whichever path (ASCII or not) each takes, and words keep the
    /// keyed hash (SipHash) at a few nanoseconds a key.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if self.0.is_ascii() {
            let mut chunks = self.0.as_bytes().chunks_exact(8);
            for chunk in &mut chunks {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                word.make_ascii_uppercase();
                state.write_u64(u64::from_le_bytes(word));
            }
            // The last partial word, as `WordFeeder` would have packed it (a shift per byte: a
            // copy into a buffer read back as a word stalled on every key).
            let rest = chunks.remainder();
            let word = rest.iter().enumerate().fold(0u64, |word, (i, b)| {
                word | u64::from(b.to_ascii_uppercase()) << (8 * i)
            });
            state.write_u64(word | (rest.len() as u64) << 56);
        } else {
            let mut words = WordFeeder::default();
            for c in self.0.chars().map(fold_char) {
                let mut utf8 = [0u8; 4];
                for &b in c.encode_utf8(&mut utf8).as_bytes() {
                    words.push(state, b);
                }
            }
            words.finish(state);
        }
    }
}

/// Packs bytes into little-endian words for a hasher (see [`Folded`]'s `Hash`).
#[derive(Default)]
struct WordFeeder {
    word: u64,
    len: u32,
}

impl WordFeeder {
    fn push<H: std::hash::Hasher>(&mut self, state: &mut H, b: u8) {
        self.word |= u64::from(b) << (8 * self.len);
        self.len += 1;
        if self.len == 8 {
            state.write_u64(self.word);
            *self = WordFeeder::default();
        }
    }

    fn finish<H: std::hash::Hasher>(self, state: &mut H) {
        state.write_u64(self.word | u64::from(self.len) << 56);
    }
}

/// The keys of one object seen so far, by folded name: [`FoldSet::insert`] says whether a key is
/// new. Small objects (nearly all) are compared in a list; past 16 keys the set
/// moves to a hash set, so an object of n keys costs O(n), not O(n²), whatever its keys.
#[derive(Debug)]
pub struct FoldSet<'a> {
    /// The first keys, compared one by one (no allocation for a small object).
    list: [&'a str; FoldSet::LIST],
    listed: usize,
    /// Every key once there are more than fit in the list.
    hashed: std::collections::HashSet<Folded<'a>>,
    /// How many keys are expected in all: the hash set's size when it is made.
    expected: usize,
}

impl<'a> FoldSet<'a> {
    /// The most keys kept in the list before moving to the hash set.
    const LIST: usize = 16;

    /// An empty set for an object of `members` keys (the hash set, if one is needed, is made
    /// that large at once instead of growing).
    pub fn for_members(members: usize) -> FoldSet<'a> {
        FoldSet {
            list: [""; FoldSet::LIST],
            listed: 0,
            hashed: std::collections::HashSet::new(),
            expected: members,
        }
    }

    /// Adds `key`; false when a key of the same folded name was already there.
    pub fn insert(&mut self, key: &'a str) -> bool {
        if self.hashed.is_empty() {
            let listed = &self.list[..self.listed];
            if listed.iter().any(|k| fold_eq(k, key)) {
                return false;
            }
            if self.listed < Self::LIST {
                self.list[self.listed] = key;
                self.listed += 1;
                return true;
            }
            self.hashed.reserve(self.expected.max(2 * Self::LIST));
            self.hashed.extend(listed.iter().copied().map(Folded));
        }
        self.hashed.insert(Folded(key))
    }
}

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
pub fn write_go_chars(out: &mut String, chars: impl Iterator<Item = char>) {
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
pub fn write_plain_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut rest = s;
    // Runs of plain characters are copied whole; every stop is one ASCII byte.
    while let Some(at) = string_stop(rest.as_bytes(), true) {
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
pub fn plain_string_len(s: &str) -> usize {
    let mut len = s.len() + 2;
    let mut rest = s.as_bytes();
    while let Some(at) = string_stop(rest, true) {
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
pub fn compact_into(out: &mut Vec<u8>, raw: &[u8]) {
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
pub fn compact(raw: &[u8]) -> Vec<u8> {
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

    /// A JSON string literal as Go's encoder writes it.
    fn go_string(s: &str) -> String {
        let mut out = String::new();
        write_go_string(&mut out, s);
        out
    }

    fn err(s: &str) -> String {
        scan_value(s.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn go_scanner_messages() {
        assert_eq!(err(""), "EOF");
        assert_eq!(err("  \n"), "EOF");
        assert_eq!(err("{\"jsonrpc\":\"2.0\","), "unexpected EOF");
        assert_eq!(
            err("hello"),
            "invalid character 'h' looking for beginning of value"
        );
        assert_eq!(err("{\"a\" 1}"), "invalid character '1' after object key");
        assert_eq!(
            err("{\"a\":1 2}"),
            "invalid character '2' after object key:value pair"
        );
        assert_eq!(err("[1 2]"), "invalid character '2' after array element");
        assert_eq!(
            err("{1:2}"),
            "invalid character '1' looking for beginning of object key string"
        );
        assert_eq!(
            err("tru "),
            "invalid character ' ' in literal true (expecting 'e')"
        );
        assert_eq!(err("nul"), "unexpected EOF");
        assert_eq!(err("-a"), "invalid character 'a' in numeric literal");
        assert_eq!(
            err("1.x"),
            "invalid character 'x' after decimal point in numeric literal"
        );
        assert_eq!(
            err("1ex"),
            "invalid character 'x' in exponent of numeric literal"
        );
        assert_eq!(
            err("\"a\\x\""),
            "invalid character 'x' in string escape code"
        );
        assert_eq!(
            err("'a'"),
            "invalid character '\\'' looking for beginning of value"
        );
        assert_eq!(
            err("\u{feff}{}"),
            "invalid character 'ï' looking for beginning of value"
        );
    }

    #[test]
    fn first_value_ends_where_go_ends_it() {
        assert_eq!(scan_value(b" {\"a\":1} garbage").unwrap(), 1..8);
        assert_eq!(scan_value(b"5x").unwrap(), 0..1);
        assert_eq!(scan_value(b"5").unwrap(), 0..1);
        assert_eq!(scan_value(b"[]]").unwrap(), 0..2);
    }

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

    #[test]
    fn compact_escapes_html_and_keeps_escapes() {
        let raw = br#"{ "a" : "<b>&\u0041" ,"c": [1, 2] }"#;
        assert_eq!(
            String::from_utf8(compact(raw)).unwrap(),
            r#"{"a":"\u003cb\u003e\u0026\u0041","c":[1,2]}"#
        );
    }

    #[test]
    fn deep_trees_are_refused_not_overflowed() {
        let ok = format!(
            "{}1{}",
            "[".repeat(MAX_TREE_DEPTH),
            "]".repeat(MAX_TREE_DEPTH)
        );
        let deep = format!("{}1{}", "[".repeat(9999), "]".repeat(9999));
        let h = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || {
                let shallow = Json::parse(ok.as_bytes()).is_ok();
                (
                    shallow,
                    Json::parse(deep.as_bytes()).unwrap_err().to_string(),
                )
            })
            .unwrap();
        let (shallow, err) = h.join().unwrap();
        assert!(shallow);
        assert_eq!(err, "invalid character '[' exceeded max depth");
    }

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

    /// The byte-at-a-time walk [`bracket_depth`] replaced (it skips strings a run at a time).
    fn bracket_depth_reference(raw: &[u8], limit: usize) -> (usize, Option<u8>) {
        let (mut depth, mut max) = (0usize, 0usize);
        let (mut in_string, mut escaped) = (false, false);
        for &c in raw {
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == b'\\' {
                    escaped = true;
                } else if c == b'"' {
                    in_string = false;
                }
                continue;
            }
            match c {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    max = max.max(depth);
                    if depth > limit {
                        return (max, Some(c));
                    }
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        (max, None)
    }

    /// JSON text: scalars, arrays and objects nested a few levels, with some whitespace.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            "\"[a-zA-Z0-9 é]{0,6}\"",
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(("[a-zA-Z]{1,4}", inner, " ?"), 0..4).prop_map(|v| {
                    let members: Vec<String> = v
                        .iter()
                        .map(|(k, x, sp)| format!("\"{k}\"{sp}:{sp}{x}"))
                        .collect();
                    format!("{{{}}}", members.join(", "))
                }),
            ]
        })
    }

    /// The one-pass path against the two-pass one on `buf`: it may give up, but whatever it
    /// builds, the scanner accepts and builds the same.
    fn same_as_scanned(buf: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
        if let Some(members) = Checked::new(buf).top_object() {
            proptest::prop_assert_eq!(Ok(Top::Object(members)), Json::parse_top_scanned(buf));
        }
        if let Some(value) = Checked::new(buf).container() {
            proptest::prop_assert_eq!(Ok(value), Json::parse_scanned(buf));
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
        fn string_stop_finds_what_a_byte_search_finds(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::num::u8::ANY,
                    proptest::sample::select(vec![b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xa0, b'a']),
                ],
                0..40,
            ),
            controls in proptest::bool::ANY,
        ) {
            let naive = bytes
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || (controls && b < 0x20));
            proptest::prop_assert_eq!(string_stop(&bytes, controls), naive);
        }
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

        #[test]
        fn bracket_depth_matches_the_byte_walk(
            raw in proptest::collection::vec(proptest::sample::select(b"{}[]\"\\ a".to_vec()), 0..40),
            limit in 0usize..6,
        ) {
            proptest::prop_assert_eq!(bracket_depth(&raw, limit), bracket_depth_reference(&raw, limit));
        }

        #[test]
        fn go_string_fast_path_matches_the_char_walk(s in "(\\PC|[\"\\\\<>&\u{2028}\u{2029}\u{0}-\u{1f}])*") {
            let (mut fast, mut slow) = (String::new(), String::new());
            write_go_string(&mut fast, &s);
            write_go_chars(&mut slow, s.chars());
            proptest::prop_assert_eq!(fast, slow);
        }

        #[test]
        fn fold_equal_keys_are_equal_and_hash_alike(
            a in "[a-zA-Z\u{17F}\u{212A}k_0-9]{0,150}",
            flips in proptest::collection::vec(proptest::num::u8::ANY, 150),
            b in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}",
        ) {
            use std::hash::BuildHasher;
            // A fold-equal variant of `a`: each letter recased or swapped for its non-ASCII twin.
            let variant: String = a
                .chars()
                .zip(flips.iter().cycle())
                .map(|(c, &f)| match (fold_char(c), f % 3) {
                    ('K', 0) => '\u{212A}',
                    ('S', 0) => '\u{17F}',
                    (up, 1) => up,
                    (up, _) => up.to_ascii_lowercase(),
                })
                .collect();
            let hasher = std::collections::hash_map::RandomState::new();
            proptest::prop_assert_eq!(Folded(&a), Folded(&variant));
            proptest::prop_assert_eq!(hasher.hash_one(Folded(&a)), hasher.hash_one(Folded(&variant)));
            proptest::prop_assert_eq!(Folded(&a) == Folded(&b), fold_key(&a) == fold_key(&b));
            proptest::prop_assert_eq!(fold_cmp(&a, &b), fold_key(&a).cmp(&fold_key(&b)));
        }

        #[test]
        fn fold_set_finds_what_a_pairwise_search_finds(
            keys in proptest::collection::vec("[kK\u{212A}sS\u{17F}]{1,3}|x[0-9]{1,2}", 0..60),
        ) {
            let mut set = FoldSet::for_members(keys.len() / 2);
            for (i, k) in keys.iter().enumerate() {
                let fresh = !keys[..i].iter().any(|e| fold_eq(e, k));
                proptest::prop_assert_eq!(set.insert(k), fresh, "{:?} at {}", keys, i);
            }
        }

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

        #[test]
        fn fold_eq_matches_fold_key(a in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}", b in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}") {
            proptest::prop_assert_eq!(fold_eq(&a, &b), fold_key(&a) == fold_key(&b));
        }
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

    #[test]
    fn go_string_escapes() {
        assert_eq!(go_string("a<\u{2028}\n\u{1}"), r#""a\u003c\u2028\n\u0001""#);
        assert_eq!(go_quote("platform.\"x\""), r#""platform.\"x\"""#);
    }
}
