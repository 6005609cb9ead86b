//! How a node reads a call's arguments: gorilla/rpc's `json2` codec and Go's `encoding/json`
//! decoding the params into the method's args struct. One reading, used by the devnode (which
//! answers as a node does) and by the gateway (which must judge a call by what a node will do
//! with it, not by what the call seems to say: a missing height is height 0 to a node, the
//! deepest query there is).
//!
//! The rules, from gorilla's `CodecRequest.ReadRequest` and `encoding/json`:
//! * absent or `null` params leave the args struct at its zero value;
//! * an object is decoded into the struct; anything else is tried as `[args]`: an array whose
//!   first element is decoded into the struct (`[]` and `[null]` leave it zero, later elements are
//!   ignored), and a first element that is not an object (or `null`) fails the call;
//! * keys match the struct's field names under Go's case folding, unknown keys are ignored, and
//!   of several keys that fold alike each one decoded overwrites the last;
//! * `null` for a non-pointer field leaves it as it was (zero, or what an earlier key set);
//! * `json.Uint64` (and `platformapi.Height`, which adds `"proposed"`) is a number or a quoted
//!   number of decimal digits only, read from its raw text (no sign, exponent or escape).
//!
//! Hand-written because it must match the node's decoder, which no crate models.

use super::Json;

/// The args object a node decodes from `params` (`None`: the zero args), or `Err` when the node
/// cannot decode the params at all (it answers its "couldn't unmarshal an argument" error).
pub fn object(params: Option<&Json>) -> Result<Option<&Json>, BadArgs> {
    match params {
        None | Some(Json::Null) => Ok(None),
        Some(o @ Json::Object(_)) => Ok(Some(o)),
        Some(Json::Array(items)) => match items.first() {
            None | Some(Json::Null) => Ok(None),
            Some(o @ Json::Object(_)) => Ok(Some(o)),
            Some(_) => Err(BadArgs),
        },
        Some(_) => Err(BadArgs),
    }
}

/// The value a node's non-pointer field `name` ends with: the last member whose key folds to
/// `name` and is not `null` (a `null` leaves the field as it was). `None`: the field keeps its
/// zero value.
pub fn field<'a>(args: Option<&'a Json>, name: &str) -> Option<&'a Json> {
    let Some(Json::Object(members)) = args else {
        return None;
    };
    members
        .iter()
        .rev()
        .filter(|(k, _)| super::gojson::fold_eq(k, name))
        .map(|(_, v)| v)
        .find(|v| !v.is_null())
}

/// `json.Uint64`'s reading of a value: a number or a quoted number, decimal digits only, at most
/// `max` (`json.Uint32` and the like bound it lower).
pub fn uint(v: &Json, max: u64) -> Option<u64> {
    let text = match v {
        Json::Number(n) => &**n,
        Json::String(s) => s.as_str(),
        _ => return None,
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = text.parse().ok()?;
    (n <= max).then_some(n)
}

/// A height argument as a node reads it (`json.Uint64`, or `platformapi.Height` which also takes
/// `"proposed"` and reserves MaxUint64 for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Height {
    /// A numeric height: given, or 0 when absent or `null` (the zero value).
    At(u64),
    /// `"proposed"`: the node's proposer VM height.
    Proposed,
}

/// The height a node reads from the field `name` of `params`, or `Err` when it cannot decode it
/// (the node's own error answers the call, and does no work for it).
pub fn height(params: Option<&Json>, name: &str) -> Result<Height, BadArgs> {
    let Some(Json::Object(members)) = object(params)? else {
        return Ok(Height::At(0));
    };
    // Every key that folds to the name is decoded in turn (one that fails fails the call), and
    // each overwrites the last; a null leaves the field as it was.
    let mut read = Height::At(0);
    for (_, v) in members
        .iter()
        .filter(|(k, _)| super::gojson::fold_eq(k, name))
    {
        read = match v {
            Json::Null => read,
            Json::String(s) if s == "proposed" => Height::Proposed,
            v => Height::At(uint(v, u64::MAX - 1).ok_or(BadArgs)?),
        };
    }
    Ok(read)
}

/// Params a node cannot decode into the method's args: the call fails on the node with
/// "couldn't unmarshal an argument".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadArgs;

#[cfg(test)]
mod tests {
    use super::*;

    fn read(params: &str) -> Result<Height, BadArgs> {
        let p = Json::parse(params.as_bytes()).expect("valid JSON");
        height(Some(&p), "height")
    }

    #[test]
    fn a_height_is_read_as_a_node_reads_it() {
        use Height::*;
        // What a node reads as height 0: every way of leaving it out.
        for params in [
            "null",
            "{}",
            "[]",
            "[null]",
            "[{}]",
            r#"{"height":null}"#,
            r#"{"heigth":5}"#,
            r#"{"height ":5}"#,
            r#"[{"heigth":5}, {"height":7}]"#,
            r#"{"subnetID":"x"}"#,
        ] {
            assert_eq!(read(params), Ok(At(0)), "{params}");
        }
        assert_eq!(height(None, "height"), Ok(At(0)), "params absent");
        // Every spelling a node accepts.
        for (params, want) in [
            (r#"{"height":5}"#, At(5)),
            (r#"{"height":"5"}"#, At(5)),
            (r#"{"HEIGHT":5}"#, At(5)),
            (r#"{"Height":"005"}"#, At(5)),
            (r#"[{"height":5}, 7]"#, At(5)),
            (r#"{"height":4,"HEIGHT":5}"#, At(5)),
            // A later null leaves the field as the earlier key set it.
            (r#"{"height":5,"height":null}"#, At(5)),
            (r#"{"height":"proposed","height":5}"#, At(5)),
            (r#"{"height":"proposed"}"#, Proposed),
            (r#"{"height":18446744073709551614}"#, At(u64::MAX - 1)),
        ] {
            assert_eq!(read(params), Ok(want), "{params}");
        }
        // What a node cannot decode: its own error, no work.
        for params in [
            "5",
            r#""x""#,
            "[5]",
            r#"["x"]"#,
            "[[]]",
            r#"{"height":"abc"}"#,
            r#"{"height":"+5"}"#,
            r#"{"height":"-1"}"#,
            r#"{"height":-1}"#,
            r#"{"height":1.5}"#,
            r#"{"height":1e3}"#,
            r#"{"height":""}"#,
            r#"{"height":true}"#,
            r#"{"height":{}}"#,
            r#"{"height":"PROPOSED"}"#,
            r#"{"height":18446744073709551615}"#,
            r#"{"height":18446744073709551616}"#,
            // Each key that folds alike is decoded: a bad one fails the call wherever it is.
            r#"{"height":"abc","height":5}"#,
            r#"{"height":5,"HEIGHT":"x"}"#,
        ] {
            assert_eq!(read(params), Err(BadArgs), "{params}");
        }
    }
}
