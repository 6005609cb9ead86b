//! A JSON reader and writer that behaves like Go's `encoding/json`, which is what avalanchego's RPC
//! layer (gorilla/rpc json2) uses to read requests and write answers.
//!
//! Both halves of snowgate need this: the simulated node must read a request the way a node does
//! and fail with the node's exact error text, and the gateway must produce the same -32700 texts and
//! must know when a node would read an envelope differently from a naive parser (case-insensitive
//! keys, last duplicate wins, data after the first value ignored). serde_json follows RFC 8259, not
//! Go: other error texts, first duplicate wins in a map, numbers through `f64` unless asked, no
//! Go case folding. So this is hand-written, one concept per file, listed from the floor up (a
//! file imports only files listed before it, so the folder reads bottom-up without a loop):
//!
//! * `lex.rs`: the byte classes every reader and writer shares (whitespace, where a string's run of
//!   plain bytes stops).
//! * `escape.rs`: Go's encoder (`<`, `>`, `&`, U+2028 and U+2029 escaped) for text that must match
//!   a node's byte for byte (error `data`, echoed ids, `json.Compact`); the plain encoding for what
//!   is sent to a node, so a re-encoded request never outgrows the client's; Go's `%q`.
//! * `fold.rs`: Go's case folding for struct field names; `FoldSet` finds two keys of one object
//!   that fold alike in one pass (a request of many keys costs time linear in its size).
//! * `scanner.rs`: a port of Go's `scanner.go` state machine. `scan_value` finds the end of the
//!   first JSON value and reports the first syntax error with Go's message (`invalid character 'h'
//!   looking for beginning of value`, `unexpected EOF`, `EOF`).
//! * `value.rs`: [`Json`], a parsed tree that keeps numbers as their validated source text, so
//!   re-encoding a value never goes through a float (`9223372036854775807`, `1.50` survive), and
//!   its encodings.
//! * `depth.rs`: the nesting depth of a body, checked before any tree is built, and the deepest
//!   tree built.
//! * `tree.rs`: the two-pass path (scanner, then tree) and Go's string decoding.
//! * `raw.rs`: raw slices of an object's members or an array's elements, without building a tree
//!   (answers from a node, batches).
//! * `checked.rs`: the one-pass parser that builds a [`Json`] while it checks the grammar, for the
//!   common request.
//! * `parse.rs`: where reading starts ([`Json::parse`], `scan_object_members`): the one-pass parser
//!   first, the two-pass path when it gives up.

mod checked;
mod depth;
mod escape;
mod fold;
mod lex;
mod parse;
mod raw;
mod scanner;
#[cfg(test)]
mod testing;
mod tree;
mod value;

// The simulated node's vocabulary (and [`Json`]'s own types): public.
pub use escape::{go_quote, write_go_string};
pub use scanner::SyntaxError;
pub use value::Json;

// The gateway's: crate-private.
pub(crate) use depth::nesting_depth;
pub(crate) use escape::{
    compact, compact_into, plain_string_len, write_go_chars, write_plain_string,
};
pub(crate) use fold::{fold_char, fold_cmp, fold_eq, FoldSet};
pub(crate) use parse::scan_object_members;
pub(crate) use raw::array_elements;
pub(crate) use scanner::scan_value;
pub(crate) use value::Top;
