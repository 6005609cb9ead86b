//! Test helpers shared by the parser's test modules: JSON text for property tests, and a Go string
//! literal.

use super::escape::write_go_string;

/// A JSON string literal as Go's encoder writes it.
pub(super) fn go_string(s: &str) -> String {
    let mut out = String::new();
    write_go_string(&mut out, s);
    out
}

/// JSON text: scalars, arrays and objects nested a few levels, with some whitespace.
pub(super) fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
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
