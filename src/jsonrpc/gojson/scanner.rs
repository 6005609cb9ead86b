//! Go's JSON scanner (`encoding/json/scanner.go`), ported state for state: the first JSON value of
//! a body and Go's exact error for the first syntax fault in it.
//!
//! Hand-written for node compatibility: a node answers a malformed body with -32700 and the
//! scanner's message (`invalid character '1' after object key`, `unexpected EOF`, `EOF`), and the
//! gateway must answer the same bytes; where the value ends (`5x` is `5`, `{} junk` is `{}`) is
//! Go's rule too. `string_stop` (`lex.rs`) skips runs of plain string bytes at once: the scanner's
//! byte-at-a-time walk through strings was the bulk of an envelope decode (a getTx body 3.3 -> 1.9
//! µs when the skip came in).

use super::escape::go_quote;
use super::lex::{is_space, string_stop};

/// Go's maximum nesting depth for the JSON scanner.
const MAX_DEPTH: usize = 10_000;

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

pub(super) fn invalid(c: u8, context: &str) -> SyntaxError {
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
pub(crate) fn scan_value(buf: &[u8]) -> Result<std::ops::Range<usize>, SyntaxError> {
    scan(buf).map(|(range, _)| range)
}

/// [`scan_value`], plus the deepest nesting of arrays and objects in the value.
pub(super) fn scan(buf: &[u8]) -> Result<(std::ops::Range<usize>, usize), SyntaxError> {
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
            i += string_stop(&buf[i..]).unwrap_or(buf.len() - i);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
