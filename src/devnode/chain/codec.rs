//! Avalanche's value encodings, as a node prints and parses them: CB58 IDs, `NodeID-` node IDs,
//! bech32 `P-<hrp>1…` addresses, `0x` hex with a 4-byte checksum, and RFC 3339 times.
//!
//! Pure functions over bytes; every method of the simulated chain formats through here. CB58 and
//! hex are the gateway's too (it checks a node's answers against the IDs asked): they live in
//! [`crate::jsonrpc::formatting`] and are re-exported here.

use sha2::{Digest, Sha256};

pub use crate::jsonrpc::formatting::{
    base58_decode, base58_encode, cb58_decode, cb58_encode, hex_checksum, hex_decode, hex_plain,
    id_str, parse_id, push_hex, DecodeError,
};

/// A 32-byte ID (tx, block, chain, subnet, asset, UTXO).
pub type Id = [u8; 32];
/// A 20-byte short ID (node IDs, addresses).
pub type ShortId = [u8; 20];

/// The empty ID (P-chain ID, Primary Network ID).
pub const EMPTY_ID: Id = [0; 32];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Id {
    Sha256::digest(data).into()
}

/// SHA-256 over several parts, for deriving deterministic values from a seed.
pub fn hash_parts(parts: &[&[u8]]) -> Id {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `NodeID-<cb58>` text of a node ID.
pub fn node_id_str(id: &ShortId) -> String {
    format!("NodeID-{}", cb58_encode(id))
}

/// Parses `NodeID-<cb58 of 20 bytes>`.
pub fn parse_node_id(s: &str) -> Option<ShortId> {
    let rest = s.strip_prefix("NodeID-")?;
    let bytes = cb58_decode(rest).ok()?;
    <ShortId>::try_from(bytes.as_slice()).ok()
}

const BECH32_CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";

fn polymod(values: &[u8]) -> u32 {
    const GEN: [u32; 5] = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];
    let mut chk: u32 = 1;
    for &v in values {
        let top = chk >> 25;
        chk = (chk & 0x1ffffff) << 5 ^ u32::from(v);
        for (i, g) in GEN.iter().enumerate() {
            if (top >> i) & 1 == 1 {
                chk ^= g;
            }
        }
    }
    chk
}

fn hrp_expand(hrp: &str) -> Vec<u8> {
    let mut v: Vec<u8> = hrp.bytes().map(|b| b >> 5).collect();
    v.push(0);
    v.extend(hrp.bytes().map(|b| b & 31));
    v
}

fn convert_bits(data: &[u8], from: u32, to: u32, pad: bool) -> Option<Vec<u8>> {
    let mut acc: u32 = 0;
    let mut bits: u32 = 0;
    let maxv = (1u32 << to) - 1;
    let mut out = Vec::new();
    for &d in data {
        if u32::from(d) >> from != 0 {
            return None;
        }
        acc = acc << from | u32::from(d);
        bits += from;
        while bits >= to {
            bits -= to;
            out.push(((acc >> bits) & maxv) as u8);
        }
    }
    if pad {
        if bits > 0 {
            out.push(((acc << (to - bits)) & maxv) as u8);
        }
    } else if bits >= from || ((acc << (to - bits)) & maxv) != 0 {
        return None;
    }
    Some(out)
}

/// Bech32 (BIP-173) encoding of `data` under `hrp`.
pub fn bech32_encode(hrp: &str, data: &[u8]) -> String {
    let five = convert_bits(data, 8, 5, true).unwrap_or_default();
    let mut values = hrp_expand(hrp);
    values.extend_from_slice(&five);
    values.extend_from_slice(&[0; 6]);
    let pm = polymod(&values) ^ 1;
    let mut out = String::with_capacity(hrp.len() + 1 + five.len() + 6);
    out.push_str(hrp);
    out.push('1');
    for d in five {
        out.push(char::from(BECH32_CHARSET[usize::from(d)]));
    }
    for i in 0..6 {
        out.push(char::from(
            BECH32_CHARSET[((pm >> (5 * (5 - i))) & 31) as usize],
        ));
    }
    out
}

/// Decodes bech32 into (hrp, bytes).
pub fn bech32_decode(s: &str) -> Result<(String, Vec<u8>), DecodeError> {
    let lower = s.to_ascii_lowercase();
    if lower != s && s.to_ascii_uppercase() != s {
        return Err(DecodeError(
            "string not all lowercase or all uppercase".into(),
        ));
    }
    let Some(pos) = lower.rfind('1') else {
        return Err(DecodeError("invalid separator index -1".into()));
    };
    if pos < 1 || pos + 7 > lower.len() {
        return Err(DecodeError(format!("invalid separator index {pos}")));
    }
    let (hrp, rest) = lower.split_at(pos);
    let mut values = Vec::with_capacity(rest.len());
    for c in rest[1..].bytes() {
        let Some(v) = BECH32_CHARSET.iter().position(|&x| x == c) else {
            return Err(DecodeError(format!(
                "invalid character not part of charset: {c}"
            )));
        };
        values.push(v as u8);
    }
    let mut all = hrp_expand(hrp);
    all.extend_from_slice(&values);
    if polymod(&all) != 1 {
        return Err(DecodeError("invalid checksum".into()));
    }
    let data = &values[..values.len() - 6];
    let bytes = convert_bits(data, 5, 8, false).ok_or_else(|| {
        DecodeError("unable to convert address from 5-bit to 8-bit formatting".into())
    })?;
    Ok((hrp.to_string(), bytes))
}

/// `P-<hrp>1…` text of an address.
pub fn address_str(hrp: &str, addr: &ShortId) -> String {
    let mut s = String::with_capacity(48);
    s.push_str("P-");
    s.push_str(&bech32_encode(hrp, addr));
    s
}

/// Parses a P-chain address the way `avax.ParseServiceAddress` does (error texts approximated).
pub fn parse_address(hrp: &str, s: &str) -> Result<ShortId, DecodeError> {
    let Some((chain, rest)) = s.split_once('-') else {
        return Err(DecodeError("no separator found in address".into()));
    };
    if chain != "P" && chain != "platform" && chain != "11111111111111111111111111111111LpoYY" {
        return Err(DecodeError(format!(
            "expected chainID to be \"11111111111111111111111111111111LpoYY\" but was {}",
            crate::jsonrpc::gojson::go_quote(chain)
        )));
    }
    let (got_hrp, bytes) = bech32_decode(rest)?;
    if got_hrp != hrp {
        return Err(DecodeError(format!(
            "expected hrp \"{hrp}\" but got \"{got_hrp}\""
        )));
    }
    <ShortId>::try_from(bytes.as_slice())
        .map_err(|_| DecodeError(format!("expected 20 bytes but got {}", bytes.len())))
}

/// RFC 3339 text (UTC, `Z`) of Unix seconds, as Go's `time.Time` marshals.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    // IDs themselves are tested with their codec, in `crate::jsonrpc::formatting`.
    #[test]
    fn known_mainnet_node_ids_decode() {
        let n = parse_node_id("NodeID-7Xhw2mDxuDS44j42TCB6U5579esbSt3Lg").unwrap();
        assert_eq!(node_id_str(&n), "NodeID-7Xhw2mDxuDS44j42TCB6U5579esbSt3Lg");
    }

    #[test]
    fn bech32_round_trips_and_matches_bip173_vector() {
        // BIP-173 valid test vector.
        assert!(bech32_decode("a12uel5l").is_ok());
        let addr = [9u8; 20];
        let s = address_str("avax", &addr);
        assert!(s.starts_with("P-avax1"));
        assert_eq!(parse_address("avax", &s).unwrap(), addr);
        assert!(parse_address("fuji", &s).is_err());
        assert!(parse_address("avax", &s.replace('q', "p")).is_err() || !s.contains('q'));
        assert!(parse_address("avax", "avax1xyz").is_err());
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_763_568_012), "2025-11-19T16:00:12Z");
    }
}
