//! Method arguments decoded the way gorilla/rpc and Go's `encoding/json` decode a node's args
//! struct: absent or null params are zero args; an object is decoded, else `[object]` is tried;
//! keys match case-insensitively with the last duplicate winning and a `null` changing nothing;
//! unknown keys are ignored (the reading is [`crate::jsonrpc::args`], which the gateway shares); any type mismatch in a known field is [`CallError::BadArgs`].
//!
//! Each method reads its fields through the typed getters of [`Args`] before doing any work, so a
//! malformed known field fails the call exactly as it fails on a node.

use super::codec::{parse_id, parse_node_id, Id, ShortId};
use super::CallError;
use crate::jsonrpc::args;
use crate::jsonrpc::Json;

/// The `encoding` argument (`formatting.Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `hex`: `0x` + bytes + checksum (the default).
    Hex,
    /// `hexc`: same bytes as hex, echoed as `hexc`.
    HexC,
    /// `hexnc`: no checksum.
    HexNc,
    /// `json`.
    Json,
}

impl Encoding {
    /// The name a node echoes back.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::HexC => "hexc",
            Encoding::HexNc => "hexnc",
            Encoding::Json => "json",
        }
    }
}

/// The `height` of `getValidatorsAt`: a number or `"proposed"` (the gateway's reading too).
pub use crate::jsonrpc::args::Height as HeightArg;

/// The params object of one call (or nothing).
pub struct Args<'a> {
    obj: Option<&'a Json>,
}

impl<'a> Args<'a> {
    /// Resolves `params` to the args object per gorilla's object-then-`[object]` rule.
    pub fn new(params: Option<&'a Json>) -> Result<Args<'a>, CallError> {
        let obj = args::object(params).map_err(|_| CallError::BadArgs)?;
        Ok(Args { obj })
    }

    /// For methods without args: only checks the params shape.
    pub fn none(params: Option<&'a Json>) -> Result<(), CallError> {
        Args::new(params).map(|_| ())
    }

    fn get(&self, name: &str) -> Option<&'a Json> {
        args::field(self.obj, name)
    }

    /// A Go `string` field ("" when absent).
    pub fn string(&self, name: &str) -> Result<&'a str, CallError> {
        match self.get(name) {
            None => Ok(""),
            Some(Json::String(s)) => Ok(s),
            Some(_) => Err(CallError::BadArgs),
        }
    }

    /// A Go `bool` field.
    pub fn boolean(&self, name: &str) -> Result<bool, CallError> {
        match self.get(name) {
            None => Ok(false),
            Some(Json::Bool(b)) => Ok(*b),
            Some(_) => Err(CallError::BadArgs),
        }
    }

    /// A `json.Uint64` field (`5` or `"5"`); `max` bounds it (`json.Uint32`, `json.Uint16`).
    pub fn uint(&self, name: &str, max: u64) -> Result<u64, CallError> {
        match self.get(name) {
            None => Ok(0),
            Some(v) => parse_uint(v, max).ok_or(CallError::BadArgs),
        }
    }

    /// An `ids.ID` field (quoted CB58 of 32 bytes; zero ID when absent).
    pub fn id(&self, name: &str) -> Result<Id, CallError> {
        match self.get(name) {
            None => Ok([0; 32]),
            Some(v) => json_id(v),
        }
    }

    /// An `ids.ID` field, with `None` when absent.
    pub fn opt_id(&self, name: &str) -> Result<Option<Id>, CallError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => json_id(v).map(Some),
        }
    }

    /// An `ids.NodeID` field.
    pub fn node_id(&self, name: &str) -> Result<ShortId, CallError> {
        match self.get(name) {
            None => Ok([0; 20]),
            Some(v) => json_node_id(v),
        }
    }

    /// A `[]string` field.
    pub fn strings(&self, name: &str) -> Result<Vec<&'a str>, CallError> {
        self.list(name, |v| match v {
            Json::Null => Ok(""),
            Json::String(s) => Ok(s.as_str()),
            _ => Err(CallError::BadArgs),
        })
    }

    /// A `[]ids.ID` field; `None` when absent or null.
    pub fn ids(&self, name: &str) -> Result<Option<Vec<Id>>, CallError> {
        if self.get(name).is_none() {
            return Ok(None);
        }
        self.list(name, |v| match v {
            Json::Null => Ok([0; 32]),
            v => json_id(v),
        })
        .map(Some)
    }

    /// A `[]ids.NodeID` field.
    pub fn node_ids(&self, name: &str) -> Result<Vec<ShortId>, CallError> {
        self.list(name, |v| match v {
            Json::Null => Ok([0; 20]),
            v => json_node_id(v),
        })
    }

    fn list<T>(
        &self,
        name: &str,
        item: impl Fn(&'a Json) -> Result<T, CallError>,
    ) -> Result<Vec<T>, CallError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Json::Array(items)) => items.iter().map(item).collect(),
            Some(_) => Err(CallError::BadArgs),
        }
    }

    /// The `encoding` field (`formatting.Encoding`), hex by default.
    pub fn encoding(&self) -> Result<Encoding, CallError> {
        match self.get("encoding") {
            None => Ok(Encoding::Hex),
            Some(Json::String(s)) => match s.to_ascii_lowercase().as_str() {
                "hex" => Ok(Encoding::Hex),
                "hexc" => Ok(Encoding::HexC),
                "hexnc" => Ok(Encoding::HexNc),
                "json" => Ok(Encoding::Json),
                _ => Err(CallError::BadArgs),
            },
            Some(_) => Err(CallError::BadArgs),
        }
    }

    /// The `height` of getValidatorsAt (`platformapi.Height`): number, quoted number or
    /// `"proposed"`; MaxUint64 is reserved and rejected like the node does.
    pub fn height(&self, name: &str) -> Result<HeightArg, CallError> {
        args::height(self.obj, name).map_err(|_| CallError::BadArgs)
    }

    /// A nested object field with string members (`startIndex`): (`address`, `utxo`).
    pub fn index(&self, name: &str) -> Result<(&'a str, &'a str), CallError> {
        match self.get(name) {
            None => Ok(("", "")),
            Some(o @ Json::Object(_)) => {
                let sub = Args { obj: Some(o) };
                Ok((sub.string("address")?, sub.string("utxo")?))
            }
            Some(_) => Err(CallError::BadArgs),
        }
    }
}

/// `json.Uint64`-style parsing: a number or a quoted number, decimal digits only, `<= max`.
fn parse_uint(v: &Json, max: u64) -> Option<u64> {
    args::uint(v, max)
}

fn json_id(v: &Json) -> Result<Id, CallError> {
    match v {
        Json::String(s) => parse_id(s).map_err(|_| CallError::BadArgs),
        _ => Err(CallError::BadArgs),
    }
}

fn json_node_id(v: &Json) -> Result<ShortId, CallError> {
    match v {
        Json::String(s) => parse_node_id(s).ok_or(CallError::BadArgs),
        _ => Err(CallError::BadArgs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Json {
        Json::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn params_shapes_follow_gorilla() {
        assert!(Args::new(None).is_ok());
        assert!(Args::new(Some(&parse("null"))).is_ok());
        assert!(Args::new(Some(&parse("[]"))).is_ok());
        let a = parse(r#"[{"height":"5"}, 7]"#);
        assert_eq!(Args::new(Some(&a)).unwrap().uint("height", u64::MAX), Ok(5));
        assert!(Args::new(Some(&parse("[5]"))).is_err());
        assert!(Args::new(Some(&parse("\"x\""))).is_err());
    }

    #[test]
    fn fields_match_case_insensitively_last_wins() {
        let a = parse(r#"{"HEIGHT":1,"height":2,"Encoding":"JSON"}"#);
        let args = Args::new(Some(&a)).unwrap();
        assert_eq!(args.uint("height", u64::MAX), Ok(2));
        assert_eq!(args.encoding(), Ok(Encoding::Json));
    }

    #[test]
    fn type_mismatches_are_bad_args() {
        let a = parse(
            r#"{"height":"abc","h2":-1,"h3":1.5,"enc":"base64","id":"zz","n":"NodeID-x","u":18446744073709551616}"#,
        );
        let args = Args::new(Some(&a)).unwrap();
        assert_eq!(args.uint("height", u64::MAX), Err(CallError::BadArgs));
        assert_eq!(args.uint("h2", u64::MAX), Err(CallError::BadArgs));
        assert_eq!(args.uint("h3", u64::MAX), Err(CallError::BadArgs));
        assert_eq!(args.uint("u", u64::MAX), Err(CallError::BadArgs));
        assert_eq!(args.id("id"), Err(CallError::BadArgs));
        assert_eq!(args.node_id("n"), Err(CallError::BadArgs));
        let e = parse(r#"{"encoding":"base64"}"#);
        assert_eq!(
            Args::new(Some(&e)).unwrap().encoding(),
            Err(CallError::BadArgs)
        );
        let h = parse(r#"{"height":18446744073709551615}"#);
        assert_eq!(
            Args::new(Some(&h)).unwrap().height("height"),
            Err(CallError::BadArgs)
        );
        let p = parse(r#"{"height":"proposed"}"#);
        assert_eq!(
            Args::new(Some(&p)).unwrap().height("height"),
            Ok(HeightArg::Proposed)
        );
    }
}
