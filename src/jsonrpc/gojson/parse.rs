//! Where reading a body starts: [`Json::parse`], `Json::parse_top` and `scan_object_members` try
//! the one-pass checker (`checked.rs`) and take the two-pass way (Go's scanner, then the tree of
//! `tree.rs` or the walk of `raw.rs`) when it gives up; the two-pass way also words the errors.
//!
//! The top of the folder: the only file that knows both paths, so that neither path imports the
//! other and the type they build (`value.rs`) imports neither.

use super::checked::Checked;
use super::raw::{object_members, RawMembers};
use super::scanner::{scan_value, SyntaxError};
use super::tree::{parse_scanned, parse_top_scanned};
use super::value::{Json, Top};

impl Json {
    /// Parses the first JSON value of `buf` with Go's syntax rules (trailing data is ignored).
    ///
    /// Trees deeper than `MAX_TREE_DEPTH` (512) are refused (Go's own scanner allows 10,000 levels;
    /// building and dropping a tree that deep would overflow a task's stack).
    pub fn parse(buf: &[u8]) -> Result<Json, SyntaxError> {
        if let Some(value) = Checked::new(buf).container() {
            return Ok(value);
        }
        parse_scanned(buf)
    }

    /// Parses the first JSON value of `buf` once: an object comes back as its members, each with
    /// the byte range of its value in `buf` (so a raw value such as a request id can be echoed
    /// verbatim without another pass).
    pub(crate) fn parse_top(buf: &[u8]) -> Result<Top<'_>, SyntaxError> {
        if let Some(members) = Checked::new(buf).top_object() {
            return Ok(Top::Object(members));
        }
        parse_top_scanned(buf)
    }
}

/// The first value of `buf` checked as Go's scanner does and, when it is an object, its members
/// as [`object_members`] gives them: one pass for the common case, else the scanner and the walk.
/// `Err` is the scanner's error; `Ok(None)`: valid, but not an object.
pub(crate) fn scan_object_members(buf: &[u8]) -> Result<Option<RawMembers<'_>>, SyntaxError> {
    if let Some(members) = Checked::new(buf).raw_members() {
        return Ok(Some(members));
    }
    let range = scan_value(buf)?;
    Ok(object_members(&buf[range]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::gojson::depth::MAX_TREE_DEPTH;

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
}
