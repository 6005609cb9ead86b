//! Avalanche's value encodings, as a node prints and parses them: CB58 IDs, `NodeID-` node IDs,
//! bech32 `P-<hrp>1…` addresses, `0x` hex with a 4-byte checksum, and RFC 3339 times.
//!
//! Pure functions over bytes; every method of the simulated chain formats through here.

use sha2::{Digest, Sha256};

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

const B58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Plain base58 (Bitcoin alphabet).
pub fn base58_encode(data: &[u8]) -> String {
    let zeros = data.iter().take_while(|&&b| b == 0).count();
    let mut digits: Vec<u8> = Vec::with_capacity(data.len() * 138 / 100 + 1);
    for &byte in &data[zeros..] {
        let mut carry = u32::from(byte);
        for d in digits.iter_mut() {
            carry += u32::from(*d) << 8;
            *d = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    let mut out = String::with_capacity(zeros + digits.len());
    out.extend(std::iter::repeat('1').take(zeros));
    out.extend(
        digits
            .iter()
            .rev()
            .map(|&d| char::from(B58[usize::from(d)])),
    );
    out
}

/// Plain base58 decoding; `None` on a character outside the alphabet.
pub fn base58_decode(s: &str) -> Option<Vec<u8>> {
    let zeros = s.bytes().take_while(|&b| b == b'1').count();
    let mut bytes: Vec<u8> = Vec::with_capacity(s.len());
    for c in s.bytes().skip(zeros) {
        let mut carry = B58.iter().position(|&a| a == c)? as u32;
        for b in bytes.iter_mut() {
            carry += u32::from(*b) * 58;
            *b = (carry & 0xff) as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let mut out = vec![0u8; zeros];
    out.extend(bytes.iter().rev());
    Some(out)
}

/// Why a CB58 or hex string did not decode (Go's error texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn checksum(data: &[u8]) -> [u8; 4] {
    let h = sha256(data);
    [h[28], h[29], h[30], h[31]]
}

/// CB58: base58 of the bytes followed by the last 4 bytes of their SHA-256.
pub fn cb58_encode(data: &[u8]) -> String {
    let mut buf = Vec::with_capacity(data.len() + 4);
    buf.extend_from_slice(data);
    buf.extend_from_slice(&checksum(data));
    base58_encode(&buf)
}

/// Decodes CB58, checking the checksum.
pub fn cb58_decode(s: &str) -> Result<Vec<u8>, DecodeError> {
    let raw = base58_decode(s).ok_or_else(|| DecodeError("invalid base58 string".into()))?;
    if raw.len() < 4 {
        return Err(DecodeError(
            "input string is smaller than the checksum size".into(),
        ));
    }
    let (data, sum) = raw.split_at(raw.len() - 4);
    if checksum(data) != sum {
        return Err(DecodeError("invalid input checksum".into()));
    }
    Ok(data.to_vec())
}

/// CB58 text of an ID.
pub fn id_str(id: &Id) -> String {
    cb58_encode(id)
}

/// Parses a CB58 ID (`ids.FromString`).
pub fn parse_id(s: &str) -> Result<Id, DecodeError> {
    let bytes = cb58_decode(s)?;
    <Id>::try_from(bytes.as_slice()).map_err(|_| {
        DecodeError(format!(
            "invalid hash length: expected 32 bytes but got {}",
            bytes.len()
        ))
    })
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

/// `0x` + hex of the bytes followed by the 4-byte checksum (avalanchego's `hex` encoding).
pub fn hex_checksum(data: &[u8]) -> String {
    let mut out = String::with_capacity(2 + 2 * (data.len() + 4));
    out.push_str("0x");
    push_hex(&mut out, data);
    push_hex(&mut out, &checksum(data));
    out
}

/// `0x` + hex without a checksum (`hexnc`, used for BLS keys and signatures).
pub fn hex_plain(data: &[u8]) -> String {
    let mut out = String::with_capacity(2 + 2 * data.len());
    out.push_str("0x");
    push_hex(&mut out, data);
    out
}

/// Appends lower-case hex.
pub fn push_hex(out: &mut String, data: &[u8]) {
    const H: &[u8; 16] = b"0123456789abcdef";
    for &b in data {
        out.push(char::from(H[usize::from(b >> 4)]));
        out.push(char::from(H[usize::from(b & 15)]));
    }
}

/// Decodes avalanchego hex (`0x` prefix required); `checked` verifies and strips the checksum.
pub fn hex_decode(s: &str, checked: bool) -> Result<Vec<u8>, DecodeError> {
    let Some(body) = s.strip_prefix("0x") else {
        return Err(DecodeError("missing 0x prefix to hex encoding".into()));
    };
    let raw = body.as_bytes();
    let mut out = Vec::with_capacity(raw.len() / 2);
    for pair in raw.chunks(2) {
        let nib = |c: u8| -> Result<u8, DecodeError> {
            char::from(c)
                .to_digit(16)
                .map(|d| d as u8)
                .ok_or_else(|| DecodeError(format!("encoding/hex: invalid byte: {}", go_rune(c))))
        };
        let hi = nib(pair[0])?;
        let Some(&lo_c) = pair.get(1) else {
            return Err(DecodeError("encoding/hex: odd length hex string".into()));
        };
        let lo = nib(lo_c)?;
        out.push(hi << 4 | lo);
    }
    if checked {
        if out.len() < 4 {
            return Err(DecodeError(
                "input string is smaller than the checksum size".into(),
            ));
        }
        let (data, sum) = out.split_at(out.len() - 4);
        if checksum(data) != sum {
            return Err(DecodeError("invalid input checksum".into()));
        }
        out.truncate(out.len() - 4);
    }
    Ok(out)
}

fn go_rune(c: u8) -> String {
    format!("U+{:04X} {:?}", c, char::from(c))
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

    #[test]
    fn empty_id_encodes_to_known_vector() {
        assert_eq!(id_str(&EMPTY_ID), "11111111111111111111111111111111LpoYY");
        assert_eq!(
            parse_id("11111111111111111111111111111111LpoYY").unwrap(),
            EMPTY_ID
        );
    }

    #[test]
    fn cb58_round_trips_and_checks_checksum() {
        for n in [0usize, 1, 5, 20, 32, 65] {
            let data: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37)).collect();
            let s = cb58_encode(&data);
            assert_eq!(cb58_decode(&s).unwrap(), data);
        }
        let s = cb58_encode(&[7; 32]);
        let mut bad = s.clone().into_bytes();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'2' { b'3' } else { b'2' };
        assert!(cb58_decode(std::str::from_utf8(&bad).unwrap()).is_err());
        assert!(cb58_decode("0OIl").is_err());
        assert!(parse_id(&cb58_encode(&[1; 20])).is_err());
    }

    #[test]
    fn known_mainnet_ids_decode() {
        for s in [
            "2oYMBNV4eNHyqk2fjjV5nVQLDbtmNJzq5s3qs3Lo6ftnC6FByM",
            "FvwEAhmxKfeiG8SnEvq42hc6whRyY3EFYAvebMqDNDGCgxN5Z",
            "rWhpuQPF1kb72esV2momhMuTYGkEb1oL29pt2EBXWmSy4kxnT",
        ] {
            let id = parse_id(s).unwrap();
            assert_eq!(id_str(&id), s);
        }
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
    fn hex_checksum_round_trips_and_rejects_bad_input() {
        let data = b"hello avalanche";
        let s = hex_checksum(data);
        assert_eq!(hex_decode(&s, true).unwrap(), data);
        assert_eq!(
            hex_decode("abcd", true).unwrap_err().0,
            "missing 0x prefix to hex encoding"
        );
        let mut bad = s.clone();
        bad.replace_range(2..4, if &s[2..4] == "00" { "01" } else { "00" });
        assert_eq!(
            hex_decode(&bad, true).unwrap_err().0,
            "invalid input checksum"
        );
        assert_eq!(hex_decode("0x0102", false).unwrap(), vec![1, 2]);
        assert!(hex_decode("0x012", false).is_err());
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_763_568_012), "2025-11-19T16:00:12Z");
    }
}
