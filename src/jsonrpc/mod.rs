//! JSON-RPC 2.0 on the wire, the way avalanchego speaks it.
//!
//! * [`args`]: how a node reads a call's arguments (params shapes, field folding, heights), for
//!   the devnode and for the rules that judge a call by what a node will do with it.
//! * [`gojson`]: Go-compatible JSON scanning, parsing and encoding (error texts, escaping, raw
//!   numbers).
//! * [`envelope`]: the request envelope decoded with a node's rules, plus the ambiguity check the
//!   gateway uses to refuse envelopes a node could read differently.
//! * [`names`]: avalanchego's method-name mapping (`platform.getHeight` -> `platform.GetHeight`).
//! * [`http`]: the HTTP around it: paths, text refusals and CORS, shared with the devnode.
//! * [`response`]: answer bodies byte for byte as a node writes them.
//! * [`release`]: avalanchego release numbers, and which releases serve a method.
//! * [`formatting`]: CB58 IDs and `0x` hex with its checksum, the byte formats of the P-chain API.

pub mod args;
pub mod echo;
pub mod envelope;
pub mod formatting;
pub mod gojson;
pub mod http;
pub mod names;
pub mod release;
pub mod response;

pub use envelope::{decode, Decoded, Envelope, Verdict};
pub use gojson::Json;
