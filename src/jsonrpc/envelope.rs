//! The JSON-RPC request envelope, read exactly as avalanchego reads it.
//!
//! A node decodes the body with Go's `json.NewDecoder(body).Decode(&serverRequest{...})`
//! (gorilla/rpc json2): the first JSON value only, keys matched case-insensitively, the last of
//! duplicate keys wins, a type mismatch recorded (first one only) while decoding goes on, `null`
//! treated as absent. [`decode`] reproduces that, including the partially decoded fields that a node
//! echoes in the `data` of a -32700 or -32600 error.
//!
//! [`Decoded::ambiguity`] is what the gateway adds on top: it says when a naive reader and a node
//! could disagree about the request (two keys that fold to the same name), so the gateway can refuse
//! such an envelope instead of guessing.

use super::echo::Echo;
use super::gojson::{
    compact, fold_eq, plain_string_len, write_go_string, FoldSet, Json, SyntaxError, Top,
};

/// The top-level members of a decoded request, as a node sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// `jsonrpc` as decoded ("" when absent, null or of the wrong type).
    pub version: String,
    /// `method` as decoded ("" when absent, null or of the wrong type).
    pub method: String,
    /// `params`; `None` when absent or null.
    pub params: Option<Json>,
    /// The raw bytes of `id` exactly as sent (not yet compacted); `None` when absent or null,
    /// which makes the request a notification.
    pub id: Option<Vec<u8>>,
}

/// How a request body decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The fields decoded so far (complete unless `parse_error` is set).
    pub envelope: Envelope,
    /// Go's decoder error, answered as -32700 with this message.
    pub parse_error: Option<String>,
    /// Set when the body is something a node could read differently from a plain reader: two
    /// top-level keys or two keys of one params object that fold to the same name, or a body that
    /// is not an object.
    pub ambiguity: Option<String>,
}

/// What the node does with a decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// -32700 with this message; always answered, even without an id.
    ParseError(String),
    /// -32600 `jsonrpc must be 2.0`; answered only when there is an id.
    InvalidVersion,
    /// A well-formed call (a notification when `envelope.id` is `None`).
    Call,
}

impl Decoded {
    /// The node's verdict on the envelope (before method lookup).
    pub fn verdict(&self) -> Verdict {
        if let Some(msg) = &self.parse_error {
            return Verdict::ParseError(msg.clone());
        }
        if self.envelope.version != "2.0" {
            return Verdict::InvalidVersion;
        }
        Verdict::Call
    }

    /// [`Decoded::error_data`] when it is at most `max` bytes, else `None`: for a gateway that
    /// echoes a node's detail only while it is small. A large envelope is measured without
    /// being written (its text is at least the length of its plain encoding).
    pub fn error_data_within(&self, max: usize) -> Option<String> {
        const FRAME: usize = r#"{"jsonrpc":,"method":,"params":,"id":}"#.len();
        let env = &self.envelope;
        let at_least = FRAME
            + plain_string_len(&env.version)
            + plain_string_len(&env.method)
            + env.params.as_ref().map_or(4, Json::plain_len);
        if at_least > max {
            return None;
        }
        Some(self.error_data()).filter(|data| data.len() <= max)
    }

    /// The `data` member of a -32700 / -32600 error: the envelope as Go re-encodes it.
    pub fn error_data(&self) -> String {
        let env = &self.envelope;
        let mut out = String::from("{\"jsonrpc\":");
        write_go_string(&mut out, &env.version);
        out.push_str(",\"method\":");
        write_go_string(&mut out, &env.method);
        out.push_str(",\"params\":");
        match &env.params {
            Some(p) => p.encode_into(&mut out),
            None => out.push_str("null"),
        }
        out.push_str(",\"id\":");
        match &env.id {
            Some(id) => out.push_str(&String::from_utf8_lossy(&compact(id))),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
}

const TOP_TYPE: &str = "json2.serverRequest";

/// Decodes a request body the way a node does.
///
/// ```
/// use snowgate::jsonrpc::{decode, Verdict};
///
/// // Keys match case-insensitively, the last duplicate wins, trailing data is ignored.
/// let d = decode(br#"{"JSONRPC":"2.0","ID":7,"method":"a.b","Method":"platform.getHeight"} junk"#);
/// assert_eq!(d.verdict(), Verdict::Call);
/// assert_eq!(d.envelope.method, "platform.getHeight");
/// assert_eq!(d.envelope.id.as_deref(), Some(&b"7"[..]));
/// // ...which is why the gateway refuses such an envelope instead of guessing.
/// assert!(d.ambiguity.is_some());
///
/// // A batch is one -32700 error for a node.
/// let d = decode(b"[{}]");
/// assert_eq!(
///     d.verdict(),
///     Verdict::ParseError("json: cannot unmarshal array into Go value of type json2.serverRequest".into())
/// );
/// ```
pub fn decode(body: &[u8]) -> Decoded {
    let mut out = Decoded {
        envelope: Envelope::default(),
        parse_error: None,
        ambiguity: None,
    };
    // One scan and one tree; the id's raw bytes come from the recorded value ranges.
    let members = match Json::parse_top(body) {
        Ok(Top::Object(members)) => members,
        Ok(Top::Other(Json::Null)) => return out, // decoding null into a struct is a no-op
        Ok(Top::Other(other)) => {
            out.parse_error = Some(format!(
                "json: cannot unmarshal {} into Go value of type {TOP_TYPE}",
                other.kind()
            ));
            out.ambiguity = Some("the body is not a JSON object".into());
            return out;
        }
        Err(e) => {
            out.parse_error = Some(syntax_message(&e));
            return out;
        }
    };
    // Two keys that fold to the same name: for the four fields, a second sighting of the field;
    // for other keys, a fold-equal earlier key that is not one of the four either. One pass (a set
    // of folded names), so a body of many distinct keys costs no more than its length.
    let mut seen = [false; 4];
    let mut others = FoldSet::for_members(members.len());
    for (key, _, _) in &members {
        let duplicate = match Field::of(key) {
            Some(field) => std::mem::replace(&mut seen[field as usize], true),
            None => !others.insert(key),
        };
        if duplicate {
            out.ambiguity = Some(format!(
                "duplicate member {} in the request object",
                Echo::quoted(key)
            ));
            break;
        }
    }
    for (key, value, at) in members {
        match Field::of(&key) {
            Some(Field::Version) => set_string(&mut out, &mut |e| &mut e.version, "jsonrpc", value),
            Some(Field::Method) => set_string(&mut out, &mut |e| &mut e.method, "method", value),
            Some(Field::Params) => {
                if let Some(why) = params_ambiguity(&value) {
                    out.ambiguity.get_or_insert(why);
                }
                out.envelope.params = (!value.is_null()).then_some(value);
            }
            Some(Field::Id) => out.envelope.id = (!value.is_null()).then(|| body[at].to_vec()),
            None => {}
        }
    }
    out
}

/// The four members of the envelope a node decodes.
#[derive(Clone, Copy)]
enum Field {
    Version,
    Method,
    Params,
    Id,
}

impl Field {
    /// The field a key sets, as Go matches it (case-insensitively); exact names take one compare.
    fn of(key: &str) -> Option<Field> {
        // Only `j`, `m`, `p`, `i` (either case) fold to the four names' first letters (no
        // non-ASCII character folds to them), so any other first byte is no field: one compare
        // for most keys of a body of many keys.
        if !matches!(
            key.as_bytes().first(),
            Some(b'j' | b'J' | b'm' | b'M' | b'p' | b'P' | b'i' | b'I')
        ) {
            return None;
        }
        match key {
            "jsonrpc" => Some(Field::Version),
            "method" => Some(Field::Method),
            "params" => Some(Field::Params),
            "id" => Some(Field::Id),
            _ if fold_eq(key, "jsonrpc") => Some(Field::Version),
            _ if fold_eq(key, "method") => Some(Field::Method),
            _ if fold_eq(key, "params") => Some(Field::Params),
            _ if fold_eq(key, "id") => Some(Field::Id),
            _ => None,
        }
    }
}

fn syntax_message(e: &SyntaxError) -> String {
    e.to_string()
}

fn set_string(
    out: &mut Decoded,
    field: &mut dyn FnMut(&mut Envelope) -> &mut String,
    name: &str,
    value: Json,
) {
    match value {
        Json::String(s) => *field(&mut out.envelope) = s,
        Json::Null => {}
        other => {
            if out.parse_error.is_none() {
                out.parse_error = Some(format!(
                    "json: cannot unmarshal {} into Go struct field serverRequest.{name} of type string",
                    other.kind()
                ));
            }
        }
    }
}

/// Finds two keys of one object anywhere inside `params` that a node would take for the same field
/// (the first in document order). Each object's keys go once through a set of folded names: the
/// whole walk is linear in the size of `params`.
fn params_ambiguity(value: &Json) -> Option<String> {
    match value {
        Json::Object(members) => {
            let mut seen = FoldSet::for_members(members.len());
            for (k, v) in members {
                if !seen.insert(k) {
                    return Some(format!("duplicate member {} in params", Echo::quoted(k)));
                }
                if let Some(why) = params_ambiguity(v) {
                    return Some(why);
                }
            }
            None
        }
        Json::Array(items) => items.iter().find_map(params_ambiguity),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The quadratic ambiguity check [`decode`] used before (each key compared with every earlier
    /// one), kept as the reference the one-pass check must agree with.
    fn ambiguity_reference(body: &[u8]) -> Option<String> {
        let Ok(Top::Object(members)) = Json::parse_top(body) else {
            return None;
        };
        let mut out = None;
        let mut seen = [false; 4];
        for i in 0..members.len() {
            let key: &str = &members[i].0;
            let duplicate = match Field::of(key) {
                Some(field) => std::mem::replace(&mut seen[field as usize], true),
                None => members[..i]
                    .iter()
                    .any(|(k, _, _)| Field::of(k).is_none() && fold_eq(k, key)),
            };
            if duplicate && out.is_none() {
                out = Some(format!("duplicate member {key:?} in the request object"));
            }
        }
        for (key, value, _) in &members {
            if let Some(Field::Params) = Field::of(key) {
                if let Some(why) = params_ambiguity_reference(value) {
                    out.get_or_insert(why);
                }
            }
        }
        out
    }

    fn params_ambiguity_reference(value: &Json) -> Option<String> {
        match value {
            Json::Object(members) => {
                for (i, (k, v)) in members.iter().enumerate() {
                    if members[..i].iter().any(|(earlier, _)| fold_eq(earlier, k)) {
                        return Some(format!("duplicate member {k:?} in params"));
                    }
                    if let Some(why) = params_ambiguity_reference(v) {
                        return Some(why);
                    }
                }
                None
            }
            Json::Array(items) => items.iter().find_map(params_ambiguity_reference),
            _ => None,
        }
    }

    /// Keys that often fold alike: `k`/`K`/Kelvin sign, `s`/`S`/long s, a number drawn from a
    /// small range (so objects of 20-40 keys meet their first duplicate anywhere, past the
    /// [`FoldSet`] list too), and the envelope's own names.
    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (
                proptest::sample::select(vec!["k", "K", "\u{212a}", "id", "x"]),
                0u8..60,
                proptest::sample::select(vec!["", "s", "S", "\u{17f}"]),
            )
                .prop_map(|(a, n, b)| format!("{a}{n}{b}")),
            1 => proptest::sample::select(vec![
                "jsonrpc", "JSONRPC", "method", "Method", "id", "iD", "params", "PARAMS", "\u{212a}", "k",
            ])
            .prop_map(String::from),
        ]
    }

    /// Values whose objects have up to 40 members with [`arb_key`] names.
    pub(crate) fn arb_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            (0u16..300).prop_map(|n| Json::Number(n.to_string().into())),
            "[a-z]{0,3}".prop_map(Json::String),
        ];
        leaf.prop_recursive(3, 120, 40, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                proptest::collection::vec((arb_key(), inner), 0..40).prop_map(Json::Object),
            ]
        })
    }

    proptest! {
        #[test]
        fn one_pass_ambiguity_matches_the_quadratic_check(
            members in proptest::collection::vec((arb_key(), arb_value()), 0..40),
        ) {
            let body = Json::Object(members).encode();
            let d = decode(body.as_bytes());
            prop_assert_eq!(d.ambiguity, ambiguity_reference(body.as_bytes()), "{}", body);
        }
    }

    #[test]
    fn keys_fold_and_last_wins() {
        let d = decode(br#"{"JSONRPC":"2.0","Method":"a.b","method":"c.d","ID":7}"#);
        assert_eq!(d.envelope.method, "c.d");
        assert_eq!(d.envelope.id.as_deref(), Some(&b"7"[..]));
        assert_eq!(d.verdict(), Verdict::Call);
        assert!(d.ambiguity.is_some());
    }

    #[test]
    fn null_id_is_a_notification_and_last_id_wins() {
        let d = decode(br#"{"jsonrpc":"2.0","method":"a.b","id":1,"id":null}"#);
        assert_eq!(d.envelope.id, None);
    }

    #[test]
    fn id_bytes_are_kept() {
        let d = decode(br#"{"jsonrpc":"2.0","id": {"a" : [1, "x"]} ,"method":"a.b"}"#);
        assert_eq!(d.envelope.id.as_deref(), Some(&br#"{"a" : [1, "x"]}"#[..]));
        let d = decode(br#"{"id":9223372036854775807}"#);
        assert_eq!(d.envelope.id.as_deref(), Some(&b"9223372036854775807"[..]));
    }

    #[test]
    fn type_errors_keep_decoding() {
        let d = decode(br#"{"jsonrpc":2.0,"method":"platform.getHeight","id":7}"#);
        assert_eq!(
            d.parse_error.as_deref(),
            Some("json: cannot unmarshal number into Go struct field serverRequest.jsonrpc of type string")
        );
        assert_eq!(
            d.error_data(),
            r#"{"jsonrpc":"","method":"platform.getHeight","params":null,"id":7}"#
        );
    }

    #[test]
    fn error_data_is_kept_only_while_small() {
        let d = decode(br#"{"jsonrpc":2.0,"id":7,"method":"a.b","params":{"x":"<"}}"#);
        let full = d.error_data();
        assert_eq!(
            full,
            r#"{"jsonrpc":"","method":"a.b","params":{"x":"\u003c"},"id":7}"#
        );
        assert_eq!(d.error_data_within(full.len()), Some(full.clone()));
        // Over by the escapes alone, or by the plain text already.
        assert_eq!(d.error_data_within(full.len() - 1), None);
        let big = format!(r#"{{"jsonrpc":2.0,"params":["{}"]}}"#, "a".repeat(2000));
        assert_eq!(decode(big.as_bytes()).error_data_within(1024), None);
    }

    #[test]
    fn non_objects() {
        let d = decode(b"[{}]");
        assert_eq!(
            d.parse_error.as_deref(),
            Some("json: cannot unmarshal array into Go value of type json2.serverRequest")
        );
        let d = decode(b"null");
        assert_eq!(d.parse_error, None);
        assert_eq!(d.verdict(), Verdict::InvalidVersion);
        assert_eq!(d.envelope.id, None);
    }
}
