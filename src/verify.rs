//! Holding an immutable answer against the call it answers (`[cache] verify`), before it is
//! returned or kept: the pure part, no I/O (and the setting, as the pool holds it).
//!
//! Some answers carry their own identity. A P-chain block's ID is the SHA-256 of its bytes and a
//! transaction's the SHA-256 of its signed bytes, so `platform.getBlock` and `platform.getTx` in
//! `hex` (`hexc`, `hexnc`) can be proved to be the block or the transaction asked for, whichever
//! node gave them. A block's bytes also carry its height, so `platform.getBlockByHeight` can be
//! shown to be a block of the height asked: consistent, not proved (another block at that height
//! would pass). In `json` an answer can only be held against the ID or height it names.
//!
//! Two kinds of answers cannot be held against their call, and they are told apart:
//! * [`Verdict::Unchecked`]: nothing here is checkable for this call (another method, an argument
//!   or an encoding not read here). One node's word, as the setting takes it.
//! * [`Verdict::Unreadable`]: the check applies, but the answer leaves out what it reads (a json
//!   block or tx without its `id`, a json block without its `height`) or is of a codec version or
//!   block type not known here. A liar that knows the check answers exactly that, and an honest
//!   node never does (its json names both, its blocks are of the known types) except after a new
//!   release brings a block type: so such an answer is not a lie (a new release's blocks never
//!   make every node a liar), but it is never kept until a second node returns the same bytes.
//!
//! Which answers are then kept on one node's word, and what happens to a node whose answer
//! contradicts its call, is `vouch.rs`'s business. What each setting requires of an answer read
//! back from the fleet's Redis, which another instance kept at its own [`Kept`], is
//! [`serves_from_shared`]'s.

use std::sync::atomic::{AtomicU8, Ordering};

use sha2::{Digest, Sha256};

use crate::call::Kept;
use crate::config::Verify;
use crate::jsonrpc::formatting::{checksum, id_str, parse_id};
use crate::jsonrpc::gojson::{fold_eq, scan_object_members};
use crate::jsonrpc::{args, Json};

/// `[cache] verify` as the pool holds it: set at start (a change of `[cache]` needs a restart).
#[derive(Debug, Default)]
pub(crate) struct Setting(AtomicU8);

impl Setting {
    pub(crate) fn get(&self) -> Verify {
        match self.0.load(Ordering::Relaxed) {
            1 => Verify::Quorum,
            2 => Verify::Off,
            _ => Verify::Hash,
        }
    }

    pub(crate) fn set(&self, verify: Verify) {
        let n = match verify {
            Verify::Hash => 0,
            Verify::Quorum => 1,
            Verify::Off => 2,
        };
        self.0.store(n, Ordering::Relaxed);
    }
}

/// What an answer is worth once held against its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its bytes hash to the ID asked: it is the answer asked for, whoever gave it.
    Proved,
    /// It names or carries the ID or the height asked, but nothing proves the rest of it.
    Consistent,
    /// Nothing here can be held against the call (another method, an argument or an encoding
    /// not read here).
    Unchecked,
    /// The check applies to the call, but the answer leaves out what it reads (a json block or tx
    /// without `id`, a json block without `height`) or is of a codec version or block type not
    /// known here: one node's word that is never kept before a second node agrees.
    Unreadable,
    /// It contradicts the call.
    Wrong(Mismatch),
}

impl Verdict {
    /// The `result` label of `snowgate_answer_checks_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Verdict::Proved => "proved",
            Verdict::Consistent => "consistent",
            Verdict::Unchecked => "unchecked",
            Verdict::Unreadable => "unreadable",
            Verdict::Wrong(_) => "refuted",
        }
    }
}

/// What contradicted the call, and in which method's answer: fixed words, never the node's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) method: &'static str,
    pub(crate) check: Check,
}

/// The check an answer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Its bytes hash to another ID than the one asked.
    Hash,
    /// A block of another height than the one asked.
    Height,
    /// A `json` answer that names another ID than the one asked.
    Id,
    /// Not what the method answers: bytes that do not decode (bad hex, a wrong checksum), a
    /// missing or doubled member, a string where an object belongs or the reverse.
    Form,
}

impl Check {
    /// The state change's `reason` and the log line's field.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Check::Hash => "hash",
            Check::Height => "height",
            Check::Id => "id",
            Check::Form => "form",
        }
    }

    /// What the node answered, in words.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Check::Hash => "bytes that hash to another ID",
            Check::Height => "a block of another height",
            Check::Id => "an answer that names another ID",
            Check::Form => "bytes that do not decode",
        }
    }
}

/// Holds `payload`, a node's `result` for a call of `method` with `params`, against the call.
pub(crate) fn check(method: &str, params: Option<&Json>, payload: &[u8]) -> Verdict {
    // The arguments as a node reads them (`jsonrpc::args`): params a node cannot decode are its
    // own error, never a result to hold.
    let Ok(args) = args::object(params) else {
        return Verdict::Unchecked;
    };
    let verdict = match method {
        "platform.getBlock" => by_id(args, "blockID", "block", payload),
        "platform.getTx" => by_id(args, "txID", "tx", payload),
        "platform.getBlockByHeight" => by_height(args, payload),
        _ => return Verdict::Unchecked,
    };
    let method = match method {
        "platform.getBlock" => "platform.getBlock",
        "platform.getTx" => "platform.getTx",
        _ => "platform.getBlockByHeight",
    };
    match verdict {
        Ok(v) => v,
        Err(check) => Verdict::Wrong(Mismatch { method, check }),
    }
}

/// Whether an answer the checks let through still needs a second node's word before it may be
/// kept: always under `quorum`; under `hash`, an unreadable one, and a fallback's (a paid
/// provider's) unless proved.
pub(crate) fn wants_second(setting: Verify, verdict: Verdict, fallback: bool) -> bool {
    match setting {
        Verify::Off => false,
        Verify::Quorum => true,
        Verify::Hash => verdict == Verdict::Unreadable || (fallback && verdict != Verdict::Proved),
    }
}

/// Whether an instance set to `setting` may serve an answer that another instance kept at `kept`,
/// once held against its call again on read (`verdict`, never [`Verdict::Wrong`]: a refuted
/// value is dropped before this is asked). `judged`: the call is one the pool judges (an
/// immutable call); any other answer is served at any level, as a node's would be.
///
/// Each setting asks of the value what it asks of a node's answer before it keeps one:
/// * `off` believes the first word: any level.
/// * `hash`: a proof needs no one's word (it is proved again on read, whoever wrote it); an
///   unreadable answer needs a second node ([`Kept::Seconded`]); anything else needs to have
///   been held against its call when kept ([`Kept::Word`]): an `off` instance's unchecked word
///   is not enough.
/// * `quorum` keeps nothing before a second node agrees, proved or not: [`Kept::Seconded`].
pub(crate) fn serves_from_shared(
    setting: Verify,
    judged: bool,
    verdict: Verdict,
    kept: Kept,
) -> bool {
    if !judged {
        return true;
    }
    match setting {
        Verify::Off => true,
        Verify::Quorum => kept >= Kept::Seconded,
        Verify::Hash => match verdict {
            Verdict::Proved => true,
            Verdict::Unreadable => kept >= Kept::Seconded,
            Verdict::Consistent | Verdict::Unchecked | Verdict::Wrong(_) => kept >= Kept::Word,
        },
    }
}

/// The encodings of `formatting.Encoding` a node answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// `hex` and `hexc` (`checksum`), `hexnc`.
    Hex {
        checksum: bool,
    },
    Json,
}

/// The `encoding` argument (hex when absent or null; matched as a node matches it, in any case);
/// `None` for what a node would refuse.
fn encoding(args: Option<&Json>) -> Option<Encoding> {
    match args::field(args, "encoding") {
        None | Some(Json::Null) => Some(Encoding::Hex { checksum: true }),
        Some(Json::String(s)) => match s.to_ascii_lowercase().as_str() {
            "hex" | "hexc" => Some(Encoding::Hex { checksum: true }),
            "hexnc" => Some(Encoding::Hex { checksum: false }),
            "json" => Some(Encoding::Json),
            _ => None,
        },
        Some(_) => None,
    }
}

/// Longer than the CB58 text of any ID (36 bytes with the checksum: at most 50 characters).
/// Nothing longer is decoded: base58 takes time quadratic in the length, and the text is the
/// client's (a node that answers a megabyte-long ID with a result must not hold a thread).
const MAX_ID_TEXT: usize = 64;

/// `getBlock` and `getTx`: the block or tx `member` of the answer against the ID argument `param`.
fn by_id(args: Option<&Json>, param: &str, member: &str, payload: &[u8]) -> Result<Verdict, Check> {
    let asked = args::field(args, param)
        .and_then(Json::as_str)
        .filter(|s| s.len() <= MAX_ID_TEXT)
        .and_then(|s| parse_id(s).ok());
    let (Some(asked), Some(encoding)) = (asked, encoding(args)) else {
        return Ok(Verdict::Unchecked);
    };
    let value = sole_member(payload, member)?.ok_or(Check::Form)?;
    match encoding {
        Encoding::Hex { checksum } => {
            let bytes = hex_bytes(value, checksum)?;
            let hash: [u8; 32] = Sha256::digest(&bytes).into();
            if hash == asked {
                Ok(Verdict::Proved)
            } else {
                Err(Check::Hash)
            }
        }
        Encoding::Json => {
            if !value.starts_with(b"{") {
                return Err(Check::Form);
            }
            // Every node names it: an answer without it is one a liar wrote to pass the check.
            let Some(named) = sole_member(value, "id")? else {
                return Ok(Verdict::Unreadable);
            };
            let want = format!("\"{}\"", id_str(&asked));
            if named == want.as_bytes() {
                Ok(Verdict::Consistent)
            } else {
                Err(Check::Id)
            }
        }
    }
}

/// `getBlockByHeight`: the height the answer's block carries against the `height` argument.
fn by_height(args: Option<&Json>, payload: &[u8]) -> Result<Verdict, Check> {
    // The height a node reads: 0 when it is left out (the genesis block's, checked as any).
    let asked = match args::height(args, "height") {
        Ok(args::Height::At(height)) => Some(height),
        Ok(args::Height::Proposed) | Err(_) => None,
    };
    let (Some(asked), Some(encoding)) = (asked, encoding(args)) else {
        return Ok(Verdict::Unchecked);
    };
    let value = sole_member(payload, "block")?.ok_or(Check::Form)?;
    let carried = match encoding {
        Encoding::Hex { checksum } => block_height(&hex_bytes(value, checksum)?)?,
        Encoding::Json => {
            if !value.starts_with(b"{") {
                return Err(Check::Form);
            }
            match sole_member(value, "height")? {
                Some(raw) => Some(
                    std::str::from_utf8(raw)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or(Check::Form)?,
                ),
                None => None,
            }
        }
    };
    match carried {
        Some(h) if h == asked => Ok(Verdict::Consistent),
        Some(_) => Err(Check::Height),
        // No height in a json block, or a codec or block type not known here.
        None => Ok(Verdict::Unreadable),
    }
}

/// The raw value of the one member of the JSON object `raw` that a client would read as `name`
/// (Go's decoder folds case and takes the last; JavaScript takes the last exact one): `None`
/// when there is none. Two such members, or an escaped key (which could decode to `name`), are a
/// [`Check::Form`] failure: no node writes them, and clients could read them differently.
fn sole_member<'a>(raw: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, Check> {
    let members = scan_object_members(raw)
        .map_err(|_| Check::Form)?
        .ok_or(Check::Form)?;
    let mut found = None;
    for (key, value) in members {
        if key.contains(&b'\\') {
            return Err(Check::Form);
        }
        let key = std::str::from_utf8(key).map_err(|_| Check::Form)?;
        if fold_eq(key, name) {
            if found.is_some() {
                return Err(Check::Form);
            }
            found = Some(value);
        }
    }
    Ok(found)
}

/// The bytes of a hex string member as a node writes it (`"0x…"`, plain hex digits, no escape),
/// the trailing checksum checked and cut when `checksum`.
fn hex_bytes(value: &[u8], checksum_follows: bool) -> Result<Vec<u8>, Check> {
    let digits = value
        .strip_prefix(b"\"0x")
        .and_then(|v| v.strip_suffix(b"\""))
        .ok_or(Check::Form)?;
    if digits.len() % 2 != 0 {
        return Err(Check::Form);
    }
    let nibble = |c: u8| char::from(c).to_digit(16).ok_or(Check::Form);
    let mut bytes = Vec::with_capacity(digits.len() / 2);
    for pair in digits.chunks_exact(2) {
        bytes.push((nibble(pair[0])? << 4 | nibble(pair[1])?) as u8);
    }
    if checksum_follows {
        let Some(at) = bytes.len().checked_sub(4) else {
            return Err(Check::Form);
        };
        if checksum(&bytes[..at]) != bytes[at..] {
            return Err(Check::Form);
        }
        bytes.truncate(at);
    }
    Ok(bytes)
}

/// Codec type IDs of the P-chain's blocks (avalanchego's `vms/platformvm/block` codec): Apricot's
/// proposal, abort, commit, standard and atomic blocks, then Banff's.
const APRICOT_BLOCKS: std::ops::RangeInclusive<u32> = 0..=4;
const BANFF_PROPOSAL_BLOCK: u32 = 29;
const BANFF_OPTION_OR_STANDARD_BLOCKS: std::ops::RangeInclusive<u32> = 30..=32;

/// The height a P-chain block's bytes carry: `None` for a codec version or a block type not known
/// here; [`Check::Form`] when the bytes are too short for their type.
///
/// Every block starts with the codec version (2 bytes) and its type ID (4). An Apricot block then
/// has its parent ID (32) and height (8); a Banff block puts its time (8) first; a Banff proposal
/// block also a list of transactions (a 4-byte count, zero in every block so far) before them.
fn block_height(bytes: &[u8]) -> Result<Option<u64>, Check> {
    let u32_at = |at: usize| -> Result<u32, Check> {
        let b = bytes.get(at..at + 4).ok_or(Check::Form)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let version = bytes.get(0..2).ok_or(Check::Form)?;
    if version != [0, 0] {
        return Ok(None);
    }
    let kind = u32_at(2)?;
    let at = if APRICOT_BLOCKS.contains(&kind) {
        6 + 32
    } else if BANFF_OPTION_OR_STANDARD_BLOCKS.contains(&kind) {
        6 + 8 + 32
    } else if kind == BANFF_PROPOSAL_BLOCK {
        if u32_at(6 + 8)? != 0 {
            return Ok(None);
        }
        6 + 8 + 4 + 32
    } else {
        return Ok(None);
    };
    let h = bytes.get(at..at + 8).ok_or(Check::Form)?;
    Ok(Some(u64::from_be_bytes([
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
    ])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::formatting::{hex_checksum, hex_plain};
    use proptest::prelude::*;

    fn params(text: &str) -> Json {
        Json::parse(text.as_bytes()).unwrap()
    }

    fn sha(bytes: &[u8]) -> [u8; 32] {
        Sha256::digest(bytes).into()
    }

    /// A Banff standard block's bytes as a node writes them (no transactions).
    fn standard_block(time: u64, parent: [u8; 32], height: u64) -> Vec<u8> {
        let mut b = vec![0, 0, 0, 0, 0, 32];
        b.extend_from_slice(&time.to_be_bytes());
        b.extend_from_slice(&parent);
        b.extend_from_slice(&height.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b
    }

    fn hex_answer(member: &str, bytes: &[u8], encoding: &str) -> String {
        let text = if encoding == "hexnc" {
            hex_plain(bytes)
        } else {
            hex_checksum(bytes)
        };
        format!(r#"{{"{member}":"{text}","encoding":"{encoding}"}}"#)
    }

    fn wrong(method: &'static str, check: Check) -> Verdict {
        Verdict::Wrong(Mismatch { method, check })
    }

    #[test]
    fn the_setting_keeps_what_it_is_given() {
        let s = Setting::default();
        assert_eq!(s.get(), Verify::Hash);
        for v in [Verify::Quorum, Verify::Off, Verify::Hash] {
            s.set(v);
            assert_eq!(s.get(), v);
        }
    }

    #[test]
    fn a_block_or_tx_in_hex_is_proved_by_its_hash_and_refuted_by_another() {
        let block = standard_block(1_700_000_000, [7; 32], 42);
        let other = standard_block(1_700_000_000, [7; 32], 43);
        let id = id_str(&sha(&block));
        for encoding in ["hex", "hexc", "hexnc", "HEX"] {
            let call = params(&format!(r#"{{"blockID":"{id}","encoding":"{encoding}"}}"#));
            let enc = encoding.to_ascii_lowercase();
            let good = hex_answer("block", &block, &enc);
            let bad = hex_answer("block", &other, &enc);
            assert_eq!(
                check("platform.getBlock", Some(&call), good.as_bytes()),
                Verdict::Proved,
                "{encoding}"
            );
            assert_eq!(
                check("platform.getBlock", Some(&call), bad.as_bytes()),
                wrong("platform.getBlock", Check::Hash),
                "{encoding}"
            );
        }
        // The default encoding is hex; params may be the object in an array.
        let tx = b"a signed tx".to_vec();
        let tx_id = id_str(&sha(&tx));
        let answer = hex_answer("tx", &tx, "hex");
        for p in [
            format!(r#"{{"txID":"{tx_id}"}}"#),
            format!(r#"[{{"TXID":"{tx_id}","encoding":null}}]"#),
        ] {
            assert_eq!(
                check("platform.getTx", Some(&params(&p)), answer.as_bytes()),
                Verdict::Proved,
                "{p}"
            );
        }
    }

    #[test]
    fn hex_that_does_not_decode_is_the_wrong_form() {
        let tx = b"a signed tx".to_vec();
        let id = id_str(&sha(&tx));
        let call = params(&format!(r#"{{"txID":"{id}"}}"#));
        let good = hex_checksum(&tx);
        let mut bad_sum = good.clone();
        bad_sum.pop();
        bad_sum.push(if good.ends_with('0') { '1' } else { '0' });
        for answer in [
            format!(r#"{{"tx":"{}","encoding":"hex"}}"#, hex_plain(&tx)),
            format!(r#"{{"tx":"{bad_sum}","encoding":"hex"}}"#),
            format!(r#"{{"tx":"{}","encoding":"hex"}}"#, &good[2..]),
            format!(r#"{{"tx":"{}0","encoding":"hex"}}"#, good),
            r#"{"tx":"0xzz","encoding":"hex"}"#.to_string(),
            r#"{"tx":{"id":"x"},"encoding":"hex"}"#.to_string(),
            r#"{"encoding":"hex"}"#.to_string(),
            r#""0x00""#.to_string(),
            // Two members a client could read as `tx`, or one behind an escape.
            format!(r#"{{"tx":"{good}","TX":"{good}","encoding":"hex"}}"#),
            format!(r#"{{"tx":"{good}","\u0074x":"{good}","encoding":"hex"}}"#),
            // An escape inside the hex.
            format!(r#"{{"tx":"\u0030x{}","encoding":"hex"}}"#, &good[2..]),
        ] {
            assert_eq!(
                check("platform.getTx", Some(&call), answer.as_bytes()),
                wrong("platform.getTx", Check::Form),
                "{answer}"
            );
        }
    }

    #[test]
    fn a_block_by_height_is_held_to_the_height_it_carries() {
        let block = standard_block(5, [1; 32], 1_000_001);
        for p in [
            r#"{"height":1000001}"#,
            r#"{"height":"1000001","encoding":"hex"}"#,
            r#"[{"height":1000001,"encoding":"hexnc"}]"#,
        ] {
            let enc = if p.contains("hexnc") { "hexnc" } else { "hex" };
            let answer = hex_answer("block", &block, enc);
            assert_eq!(
                check(
                    "platform.getBlockByHeight",
                    Some(&params(p)),
                    answer.as_bytes()
                ),
                Verdict::Consistent,
                "{p}"
            );
        }
        let call = params(r#"{"height":1000002}"#);
        let answer = hex_answer("block", &block, "hex");
        assert_eq!(
            check("platform.getBlockByHeight", Some(&call), answer.as_bytes()),
            wrong("platform.getBlockByHeight", Check::Height)
        );
        // In json, the height the block names.
        let call = params(r#"{"height":9,"encoding":"json"}"#);
        for (answer, verdict) in [
            (
                r#"{"block":{"time":1,"parentID":"x","height":9,"id":"y","txs":[]},"encoding":"json"}"#,
                Verdict::Consistent,
            ),
            (
                r#"{"block":{"time":1,"parentID":"x","height":8,"id":"y","txs":[]},"encoding":"json"}"#,
                wrong("platform.getBlockByHeight", Check::Height),
            ),
            // What the check reads left out: never a verdict on one node's word.
            (
                r#"{"block":{"time":1,"txs":[]},"encoding":"json"}"#,
                Verdict::Unreadable,
            ),
            (
                r#"{"block":"0x00","encoding":"json"}"#,
                wrong("platform.getBlockByHeight", Check::Form),
            ),
        ] {
            assert_eq!(
                check("platform.getBlockByHeight", Some(&call), answer.as_bytes()),
                verdict,
                "{answer}"
            );
        }
    }

    #[test]
    fn every_known_block_type_gives_its_height_and_an_unknown_one_none() {
        let height = 77u64.to_be_bytes();
        let with = |kind: u32, before: &[u8]| {
            let mut b = vec![0, 0];
            b.extend_from_slice(&kind.to_be_bytes());
            b.extend_from_slice(before);
            b.extend_from_slice(&[3; 32]);
            b.extend_from_slice(&height);
            b.extend_from_slice(&[9; 40]);
            b
        };
        for kind in 0..=4 {
            assert_eq!(block_height(&with(kind, &[])), Ok(Some(77)), "{kind}");
        }
        for kind in 30..=32 {
            assert_eq!(block_height(&with(kind, &[5; 8])), Ok(Some(77)), "{kind}");
        }
        let mut proposal = vec![5; 8];
        proposal.extend_from_slice(&[0; 4]);
        assert_eq!(block_height(&with(29, &proposal)), Ok(Some(77)));
        // Transactions in a Banff proposal block (never so far), another type, another codec.
        proposal[11] = 1;
        assert_eq!(block_height(&with(29, &proposal)), Ok(None));
        assert_eq!(block_height(&with(33, &[5; 8])), Ok(None));
        let mut v1 = with(32, &[5; 8]);
        v1[1] = 1;
        assert_eq!(block_height(&v1), Ok(None));
        // Too short for its type.
        assert_eq!(block_height(&with(32, &[5; 8])[..50]), Err(Check::Form));
        assert_eq!(block_height(&[0, 0, 0]), Err(Check::Form));
    }

    #[test]
    fn a_json_block_or_tx_is_held_to_the_id_it_names() {
        let id = id_str(&[4; 32]);
        let call = params(&format!(r#"{{"blockID":"{id}","encoding":"json"}}"#));
        let named = |id: &str| {
            format!(
                r#"{{"block":{{"time":1,"parentID":"p","height":3,"id":"{id}","txs":[]}},"encoding":"json"}}"#
            )
        };
        assert_eq!(
            check("platform.getBlock", Some(&call), named(&id).as_bytes()),
            Verdict::Consistent
        );
        assert_eq!(
            check(
                "platform.getBlock",
                Some(&call),
                named(&id_str(&[5; 32])).as_bytes()
            ),
            wrong("platform.getBlock", Check::Id)
        );
        let call = params(&format!(r#"{{"txID":"{id}","encoding":"Json"}}"#));
        let tx = format!(
            r#"{{"tx":{{"unsignedTx":{{}},"credentials":[],"id":"{id}"}},"encoding":"json"}}"#
        );
        assert_eq!(
            check("platform.getTx", Some(&call), tx.as_bytes()),
            Verdict::Consistent
        );
        // Without `id` (in any case), the answer cannot be read: never consistent.
        let no_id = r#"{"tx":{"unsignedTx":{},"credentials":[]},"encoding":"json"}"#;
        assert_eq!(
            check("platform.getTx", Some(&call), no_id.as_bytes()),
            Verdict::Unreadable
        );
        let block_call = params(&format!(r#"{{"blockID":"{id}","encoding":"json"}}"#));
        let no_id = r#"{"block":{"time":1,"parentID":"p","height":3,"txs":[]},"encoding":"json"}"#;
        assert_eq!(
            check("platform.getBlock", Some(&block_call), no_id.as_bytes()),
            Verdict::Unreadable
        );
        let other_case = named(&id).replace(r#""id""#, r#""ID""#);
        assert_eq!(
            check(
                "platform.getBlock",
                Some(&block_call),
                other_case.as_bytes()
            ),
            Verdict::Consistent,
            "read as Go's decoder reads it"
        );
    }

    #[test]
    fn a_block_of_a_type_or_codec_not_known_here_is_unreadable_not_wrong() {
        let mut block = standard_block(5, [1; 32], 77);
        let call = params(r#"{"height":77}"#);
        block[1] = 1;
        let answer = hex_answer("block", &block, "hex");
        assert_eq!(
            check("platform.getBlockByHeight", Some(&call), answer.as_bytes()),
            Verdict::Unreadable
        );
        block[1] = 0;
        block[2..6].copy_from_slice(&99u32.to_be_bytes());
        let answer = hex_answer("block", &block, "hex");
        assert_eq!(
            check("platform.getBlockByHeight", Some(&call), answer.as_bytes()),
            Verdict::Unreadable
        );
    }

    #[test]
    fn what_cannot_be_read_is_left_unchecked() {
        let answer = br#"{"block":"0x00","encoding":"hex"}"#;
        // A megabyte of base58 is not decoded (it would take minutes).
        let long_id = format!(r#"{{"txID":"{}"}}"#, "a".repeat(1024 * 1024));
        for (method, p) in [
            ("platform.getTxStatus", r#"{"txID":"x"}"#),
            ("platform.getBlock", r#"{"blockID":"not cb58"}"#),
            ("platform.getBlock", r#"{}"#),
            (
                "platform.getBlock",
                r#"{"blockID":"11111111111111111111111111111111LpoYY","encoding":"cb58"}"#,
            ),
            (
                "platform.getBlock",
                r#"{"blockID":"11111111111111111111111111111111LpoYY","encoding":7}"#,
            ),
            ("platform.getBlockByHeight", r#"{"height":"proposed"}"#),
            ("platform.getTx", &long_id),
            ("platform.getBlockByHeight", r#"{"height":-1}"#),
        ] {
            assert_eq!(
                check(method, Some(&params(p)), answer),
                Verdict::Unchecked,
                "{method} {p}"
            );
        }
        assert_eq!(check("platform.getBlock", None, answer), Verdict::Unchecked);
    }

    #[test]
    fn a_second_word_is_wanted_under_quorum_for_the_unreadable_and_from_a_fallback_unless_proved() {
        use Verdict::*;
        for v in [Proved, Consistent, Unchecked, Unreadable] {
            assert!(!wants_second(Verify::Off, v, true));
            assert!(wants_second(Verify::Quorum, v, false));
            assert_eq!(wants_second(Verify::Hash, v, false), v == Unreadable);
            assert_eq!(wants_second(Verify::Hash, v, true), v != Proved);
        }
    }

    #[test]
    fn a_shared_value_serves_only_at_the_level_the_setting_asks_of_a_node() {
        use Kept::*;
        use Verdict::*;
        let all = [Unjudged, Word, Seconded];
        for kept in all {
            // An answer the pool never judges, and any under `off`: any level.
            for v in [Proved, Consistent, Unchecked, Unreadable] {
                assert!(serves_from_shared(Verify::Hash, false, v, kept));
                assert!(serves_from_shared(Verify::Quorum, false, v, kept));
                assert!(serves_from_shared(Verify::Off, true, v, kept));
                // `quorum`: only what a second node returned, proved or not.
                assert_eq!(
                    serves_from_shared(Verify::Quorum, true, v, kept),
                    kept == Seconded
                );
            }
            // `hash`: a proof from anyone; the unreadable seconded; the rest checked when kept.
            assert!(serves_from_shared(Verify::Hash, true, Proved, kept));
            assert_eq!(
                serves_from_shared(Verify::Hash, true, Unreadable, kept),
                kept == Seconded
            );
            for v in [Consistent, Unchecked] {
                assert_eq!(
                    serves_from_shared(Verify::Hash, true, v, kept),
                    kept != Unjudged
                );
            }
        }
        // The byte stored: every level and nothing else.
        for kept in all {
            assert_eq!(Kept::from_byte(kept.byte()), Some(kept));
        }
        assert_eq!(Kept::from_byte(3), None);
        assert_eq!(Kept::from_byte(255), None);
    }

    proptest! {
        #[test]
        fn only_the_bytes_of_the_id_asked_are_proved(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            flip in any::<proptest::sample::Index>(),
            nc in any::<bool>(),
        ) {
            let encoding = if nc { "hexnc" } else { "hex" };
            let id = id_str(&sha(&bytes));
            let call = params(&format!(r#"{{"blockID":"{id}","encoding":"{encoding}"}}"#));
            let answer = hex_answer("block", &bytes, encoding);
            prop_assert_eq!(check("platform.getBlock", Some(&call), answer.as_bytes()), Verdict::Proved);
            // Any one hex digit changed: never proved, whatever else it is.
            let mut changed = answer.clone().into_bytes();
            let digits = r#"{"block":"0x"#.len()..answer.len() - r#"","encoding":""#.len() - encoding.len() - 1;
            if !digits.is_empty() {
                let at = digits.start + flip.index(digits.len());
                changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
                let changed = String::from_utf8(changed).unwrap();
                prop_assert_ne!(check("platform.getBlock", Some(&call), changed.as_bytes()), Verdict::Proved);
            }
        }

        #[test]
        fn a_block_passes_for_its_own_height_only(
            time in any::<u64>(),
            parent in any::<[u8; 32]>(),
            height in any::<u64>(),
            asked in any::<u64>(),
        ) {
            let block = standard_block(time, parent, height);
            let call = params(&format!(r#"{{"height":"{asked}"}}"#));
            let answer = hex_answer("block", &block, "hex");
            let verdict = check("platform.getBlockByHeight", Some(&call), answer.as_bytes());
            if asked == height {
                prop_assert_eq!(verdict, Verdict::Consistent);
            } else {
                prop_assert_eq!(verdict, wrong("platform.getBlockByHeight", Check::Height));
            }
        }
    }
}
