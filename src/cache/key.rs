//! Canonical cache keys: two requests a node reads the same way get the same key, two it reads
//! differently never do.
//!
//! A node decodes params into a Go struct, so the key follows Go's reading of them:
//! * `params` as `[object]` is the object; absent, `null` and `[]` are no params;
//! * member names match case-insensitively (folded), and member order and whitespace do not matter;
//! * a member set to `null` is the same as an absent one (Go leaves the zero value);
//! * `encoding`: letter case does not matter, and `"hex"` is the default;
//! * `subnetID`: the Primary Network ID is the zero ID, the same as omitting it;
//! * `json.Uint64`-style fields (`height`, `limit`, `size`, `startTime`, `endTime`) accept `5`,
//!   `"5"` and `"05"` alike.
//!
//! Everything else is kept exactly, so requests that might be read differently stay apart
//! (`hex` and `json` encodings are different entries; address order is kept).

use std::fmt::Write as _;

use crate::jsonrpc::gojson::{fold_char, fold_cmp, fold_eq, write_go_chars, write_go_string};
use crate::jsonrpc::Json;

/// The Primary Network's ID, which is also Go's zero `ids.ID`.
pub const PRIMARY_NETWORK_ID: &str = "11111111111111111111111111111111LpoYY";

/// Folded names of the fields a node decodes as unsigned integers that may be quoted.
const UINT_FIELDS: [&str; 5] = ["HEIGHT", "LIMIT", "SIZE", "STARTTIME", "ENDTIME"];

/// The canonical text of a call's params (`""` when there are none).
///
/// ```
/// use snowgate::cache::key::canonical_params;
/// use snowgate::jsonrpc::Json;
///
/// let key = |s: &str| canonical_params(Some(&Json::parse(s.as_bytes()).unwrap()));
/// assert_eq!(key(r#"{"txID":"x","encoding":"hex"}"#), key(r#"[{ "TXID" : "x" }]"#));
/// assert_ne!(key(r#"{"txID":"x","encoding":"json"}"#), key(r#"{"txID":"x"}"#));
/// ```
pub fn canonical_params(params: Option<&Json>) -> String {
    let mut out = String::new();
    canonical_params_into(&mut out, params);
    out
}

/// [`canonical_params`] appended to `out` (the cache builds its whole key in one buffer).
pub fn canonical_params_into(out: &mut String, params: Option<&Json>) {
    let obj = match params {
        None | Some(Json::Null) => return,
        Some(Json::Array(items)) => match items.first() {
            None => return,
            Some(first @ Json::Object(_)) => first,
            // Positional scalars: the node refuses them; keep them apart exactly.
            Some(_) => {
                out.push('!');
                if let Some(p) = params {
                    p.encode_into(out);
                }
                return;
            }
        },
        Some(other) => other,
    };
    let start = out.len();
    write_canonical(out, obj, true);
    if &out[start..] == "{}" {
        // No members (or only defaults): the same as no params.
        out.truncate(start);
    }
}

fn write_canonical(out: &mut String, value: &Json, top: bool) {
    match value {
        Json::Object(members) => {
            // Sorted by folded name (compared in place, without folded copies), the last of
            // fold-equal keys kept (Go: the last duplicate wins), then nulls and defaults dropped.
            // The sort is stable, so duplicates stay in document order and the last of a run is
            // the last sent: O(n log n) for any object, where a search per key was O(n²).
            let mut fields: Vec<(&str, &Json)> =
                members.iter().map(|(k, v)| (k.as_str(), v)).collect();
            fields.sort_by(|a, b| fold_cmp(a.0, b.0));
            // Kept in place (one vector per object): a field stays unless the next one, sorted,
            // overrides it, or it is dropped.
            let mut kept = 0;
            for i in 0..fields.len() {
                let (k, v) = fields[i];
                let overridden = fields.get(i + 1).is_some_and(|next| fold_eq(next.0, k));
                let dropped = v.is_null() || (top && may_be_special(k) && is_default(k, v));
                if !(overridden || dropped) {
                    fields[kept] = (k, v);
                    kept += 1;
                }
            }
            fields.truncate(kept);
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if k.is_ascii() {
                    // Folded ASCII is upper case.
                    write_go_string_cased(out, k, Case::Upper);
                } else {
                    write_go_chars(out, k.chars().map(fold_char));
                }
                out.push(':');
                match (top && may_be_special(k), v) {
                    (true, Json::String(s)) if fold_eq(k, "ENCODING") => {
                        write_go_string_cased(out, s, Case::Lower);
                    }
                    (true, v) if UINT_FIELDS.iter().any(|u| fold_eq(k, u)) => write_uint(out, v),
                    _ => write_canonical(out, v, false),
                }
            }
            out.push('}');
        }
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item, false);
            }
            out.push(']');
        }
        other => other.encode_into(out),
    }
}

/// Which ASCII case [`write_go_string_cased`] writes.
#[derive(Clone, Copy)]
enum Case {
    Upper,
    Lower,
}

/// `s` as Go encodes it, its ASCII letters in `case`. Without escapes it is written and recased
/// in place (no copy of `s`); an escape's letters (`\n`, `\u003c`) must keep their case, so a
/// string with one is recased first.
fn write_go_string_cased(out: &mut String, s: &str, case: Case) {
    let start = out.len();
    write_go_string(out, s);
    if !out[start..].contains('\\') {
        match case {
            Case::Upper => out[start..].make_ascii_uppercase(),
            Case::Lower => out[start..].make_ascii_lowercase(),
        }
        return;
    }
    out.truncate(start);
    match case {
        Case::Upper => write_go_string(out, &s.to_ascii_uppercase()),
        Case::Lower => write_go_string(out, &s.to_ascii_lowercase()),
    }
}

/// Could `key` fold to one of the names the key treats specially (`encoding`, `subnetID` and
/// [`UINT_FIELDS`])? Their first letters fold only from `e`, `s`, `h`, `l` in either case and
/// from U+017F (long s, whose UTF-8 starts with 0xC5), so any other first byte rules them all out
/// in one compare: most keys of a body of many keys.
fn may_be_special(key: &str) -> bool {
    matches!(
        key.as_bytes().first(),
        Some(b'e' | b'E' | b's' | b'S' | b'h' | b'H' | b'l' | b'L' | 0xC5)
    )
}

/// A top-level member whose value is what the node assumes when it is omitted.
fn is_default(key: &str, value: &Json) -> bool {
    match value {
        Json::String(s) if fold_eq(key, "ENCODING") => s.eq_ignore_ascii_case("hex"),
        Json::String(s) if fold_eq(key, "SUBNETID") => s == PRIMARY_NETWORK_ID,
        _ => false,
    }
}

/// A uint field: `5`, `"5"` and `"05"` all become `5`; anything else is kept as written.
fn write_uint(out: &mut String, value: &Json) {
    let digits = match value {
        Json::Number(n) => Some(&**n),
        Json::String(s) => Some(s.as_str()),
        _ => None,
    };
    match digits.and_then(|d| {
        (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.parse::<u64>().ok())
            .flatten()
    }) {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => write_canonical(out, value, false),
    }
}

/// The cache key of `call`: its method, its canonical params, the pool's best height for a
/// head-class call (`head`), and the node release for an answer that depends on it (`release`).
/// Never its id.
pub(crate) fn call_key(
    call: &crate::call::RpcCall,
    head: Option<u64>,
    release: Option<&str>,
) -> String {
    use std::fmt::Write as _;
    let mut k = String::with_capacity(call.spec.name.len() + 96);
    k.push_str(&call.spec.name);
    k.push('\u{0}');
    canonical_params_into(&mut k, call.params.as_ref());
    if let Some(h) = head {
        let _ = write!(k, "\u{0}@{h}");
    }
    if let Some(release) = release {
        k.push_str("\u{0}release=");
        k.push_str(release);
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(params: &str) -> String {
        let v = Json::parse(params.as_bytes()).unwrap();
        canonical_params(Some(&v))
    }

    #[test]
    fn equivalent_forms_share_a_key() {
        let base = key(r#"{"blockID":"abc","encoding":"json"}"#);
        for other in [
            r#"{"encoding":"json","blockID":"abc"}"#,
            r#"[{"encoding":"JSON","blockID":"abc"}]"#,
            r#" { "BLOCKID" : "abc" , "Encoding" : "Json" } "#,
            r#"{"blockID":"abc","encoding":"json","x":null}"#,
        ] {
            assert_eq!(key(other), base, "{other}");
        }
        assert_eq!(
            key(r#"{"txID":"t","encoding":"hex"}"#),
            key(r#"{"txID":"t"}"#)
        );
        assert_eq!(
            key(r#"{"txID":"t","encoding":"HEX"}"#),
            key(r#"{"txID":"t"}"#)
        );
        assert_eq!(
            key(r#"{"height":5,"subnetID":"11111111111111111111111111111111LpoYY"}"#),
            key(r#"{"height":"05"}"#)
        );
        assert_eq!(canonical_params(None), key("[]"));
        assert_eq!(canonical_params(None), key("null"));
        assert_eq!(canonical_params(None), key("{}"));
    }

    #[test]
    fn different_readings_never_share() {
        assert_ne!(
            key(r#"{"txID":"t","encoding":"json"}"#),
            key(r#"{"txID":"t"}"#)
        );
        assert_ne!(key(r#"{"height":5}"#), key(r#"{"height":6}"#));
        assert_ne!(key(r#"{"height":"proposed"}"#), key(r#"{"height":5}"#));
        assert_ne!(
            key(r#"{"addresses":["a","b"]}"#),
            key(r#"{"addresses":["b","a"]}"#)
        );
        assert_ne!(key(r#"{"txID":"abc"}"#), key(r#"{"txID":"ABC"}"#));
        assert_ne!(key(r#"{"subnetID":"x"}"#), key(r#"{}"#));
        assert_ne!(key(r#"[5]"#), key(r#"{}"#));
        assert_ne!(key(r#"{"height":5.0}"#), key(r#"{"height":5}"#));
    }

    fn arb_scalar() -> impl Strategy<Value = Json> {
        prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<u32>().prop_map(|n| Json::Number(n.to_string().into())),
            "[a-zA-Z0-9]{0,8}".prop_map(Json::String),
        ]
    }

    fn arb_object() -> impl Strategy<Value = Vec<(String, Json)>> {
        proptest::collection::btree_map("[a-z]{1,6}", arb_scalar(), 0..6)
            .prop_map(|m| m.into_iter().collect())
    }

    /// The canonical key as it was built before: each key searched for among the earlier ones
    /// (O(n²)), kept as the reference the sorted one-pass build must agree with.
    fn canonical_reference(params: Option<&Json>) -> String {
        let mut out = String::new();
        let obj = match params {
            None | Some(Json::Null) => return out,
            Some(Json::Array(items)) => match items.first() {
                None => return out,
                Some(first @ Json::Object(_)) => first,
                Some(_) => {
                    out.push('!');
                    if let Some(p) = params {
                        p.encode_into(&mut out);
                    }
                    return out;
                }
            },
            Some(other) => other,
        };
        write_canonical_reference(&mut out, obj, true);
        if out == "{}" {
            out.clear();
        }
        out
    }

    fn write_canonical_reference(out: &mut String, value: &Json, top: bool) {
        match value {
            Json::Object(members) => {
                let mut fields: Vec<(&str, &Json)> = Vec::with_capacity(members.len());
                for (k, v) in members {
                    if let Some(pos) = fields.iter().position(|(f, _)| fold_eq(f, k)) {
                        fields.remove(pos);
                    }
                    fields.push((k.as_str(), v));
                }
                fields.retain(|(k, v)| !(v.is_null() || (top && is_default(k, v))));
                fields.sort_by(|a, b| fold_cmp(a.0, b.0));
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if k.is_ascii() {
                        write_go_string(out, &k.to_ascii_uppercase());
                    } else {
                        write_go_chars(out, k.chars().map(fold_char));
                    }
                    out.push(':');
                    match (top, v) {
                        (true, Json::String(s)) if fold_eq(k, "ENCODING") => {
                            write_go_string(out, &s.to_ascii_lowercase());
                        }
                        (true, v) if UINT_FIELDS.iter().any(|u| fold_eq(k, u)) => {
                            write_uint_reference(out, v)
                        }
                        _ => write_canonical_reference(out, v, false),
                    }
                }
                out.push('}');
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_canonical_reference(out, item, false);
                }
                out.push(']');
            }
            other => other.encode_into(out),
        }
    }

    fn write_uint_reference(out: &mut String, value: &Json) {
        let digits = match value {
            Json::Number(n) => Some(&**n),
            Json::String(s) => Some(s.as_str()),
            _ => None,
        };
        match digits.and_then(|d| {
            (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .then(|| d.parse::<u64>().ok())
                .flatten()
        }) {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None => write_canonical_reference(out, value, false),
        }
    }

    /// Keys that often fold alike (`k`/`K`/Kelvin sign, `s`/`S`/long s, a number from a small
    /// range) and the names the key treats specially.
    fn arb_colliding_key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (
                proptest::sample::select(vec!["k", "K", "\u{212a}", "x"]),
                0u8..40,
                proptest::sample::select(vec!["", "s", "S", "\u{17f}"]),
            )
                .prop_map(|(a, n, b)| format!("{a}{n}{b}")),
            1 => proptest::sample::select(vec![
                "encoding", "ENCODING", "height", "HEIGHT", "subnetID", "\u{17f}ubnetID", "limit",
            ])
            .prop_map(String::from),
        ]
    }

    fn arb_colliding_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            (0u16..300).prop_map(|n| Json::Number(n.to_string().into())),
            proptest::sample::select(vec![
                "hex",
                "HEX",
                "json",
                "05",
                "5",
                "x",
                PRIMARY_NETWORK_ID
            ])
            .prop_map(|s| Json::String(s.into())),
        ];
        leaf.prop_recursive(3, 120, 40, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                proptest::collection::vec((arb_colliding_key(), inner), 0..40)
                    .prop_map(Json::Object),
            ]
        })
    }

    proptest! {
        #[test]
        fn sorted_key_build_matches_the_quadratic_one(
            members in proptest::collection::vec((arb_colliding_key(), arb_colliding_value()), 0..40),
            wrapped in any::<bool>(),
        ) {
            let obj = Json::Object(members);
            let params = if wrapped { Json::Array(vec![obj]) } else { obj };
            prop_assert_eq!(canonical_params(Some(&params)), canonical_reference(Some(&params)));
        }

        #[test]
        fn member_order_whitespace_case_and_wrapping_do_not_change_the_key(
            members in arb_object(),
            seed in any::<u64>(),
        ) {
            let original = Json::Object(members.clone());
            let mut shuffled = members.clone();
            // Deterministic shuffle and case change from the seed.
            let n = shuffled.len();
            for i in 0..n {
                let j = ((seed >> (i % 60)) as usize + i) % n.max(1);
                shuffled.swap(i, j);
            }
            let recased: Vec<(String, Json)> = shuffled
                .into_iter()
                .enumerate()
                .map(|(i, (k, v))| if (seed >> i) & 1 == 1 { (k.to_uppercase(), v) } else { (k, v) })
                .collect();
            let variant = Json::Array(vec![Json::Object(recased)]);
            let spaced = format!(" {} ", variant.encode().replace(',', " , ").replace(':', " : "));
            let reparsed = Json::parse(spaced.as_bytes()).unwrap();
            prop_assert_eq!(canonical_params(Some(&original)), canonical_params(Some(&reparsed)));
        }

        #[test]
        fn a_changed_value_changes_the_key(members in arb_object(), extra in "[a-z]{1,6}") {
            prop_assume!(!members.is_empty());
            let mut changed = members.clone();
            changed[0].1 = Json::String(format!("{extra}-changed"));
            prop_assert_ne!(
                canonical_params(Some(&Json::Object(members))),
                canonical_params(Some(&Json::Object(changed)))
            );
        }
    }
}
