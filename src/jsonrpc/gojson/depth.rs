//! How deeply a body nests arrays and objects, counted before any tree is built.
//!
//! Hand-written for a safety need: a tree of Go's full 10,000 levels would overflow a task's stack
//! when built or dropped, so the gateway refuses a body past its configured depth with one cheap
//! bracket walk (strings skipped a run at a time), and `Json::parse` refuses past
//! [`MAX_TREE_DEPTH`] naming the bracket as Go's scanner would.

use super::lex::quote_or_backslash;
use super::scanner::{invalid, SyntaxError};

/// The deepest `Json` tree built: far beyond any real request, well within a task's stack.
pub(crate) const MAX_TREE_DEPTH: usize = 512;

/// Refuses a value `depth` levels deep when that is past [`MAX_TREE_DEPTH`], naming the bracket
/// that went past it as Go's scanner would.
pub(super) fn too_deep(raw: &[u8], depth: usize) -> Result<(), SyntaxError> {
    if depth <= MAX_TREE_DEPTH {
        return Ok(());
    }
    let at = bracket_depth(raw, MAX_TREE_DEPTH).1.unwrap_or(b'[');
    Err(invalid(at, "exceeded max depth"))
}

/// The deepest nesting of arrays and objects in `raw` (a scalar is 0, `{}` is 1). A cheap pass
/// that lets a caller refuse a deeply nested request before building a tree of it.
pub(crate) fn nesting_depth(raw: &[u8]) -> usize {
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
                    let next = raw.get(i..).and_then(quote_or_backslash);
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

#[cfg(test)]
mod tests {
    use super::*;

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

    proptest::proptest! {
        #[test]
        fn bracket_depth_matches_the_byte_walk(
            raw in proptest::collection::vec(proptest::sample::select(b"{}[]\"\\ a".to_vec()), 0..40),
            limit in 0usize..6,
        ) {
            proptest::prop_assert_eq!(bracket_depth(&raw, limit), bracket_depth_reference(&raw, limit));
        }
    }
}
