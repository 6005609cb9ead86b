//! Avalanche's byte formats on the wire, as avalanchego's `utils/formatting` and `ids` write and
//! read them: CB58 (base58 with a 4-byte checksum: every ID) and `0x` hex, with (`hex`, `hexc`)
//! or without (`hexnc`) that checksum.
//!
//! Both halves of snowgate speak them: the simulated node formats its blocks, transactions and
//! IDs through here (with Go's error texts, which it must answer word for word), and the gateway
//! reads the IDs a call asks for and the bytes a node answers, to check the one against the
//! other (`crate::upstream`'s answer checks). Pure functions over bytes.

use sha2::{Digest, Sha256};

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

/// The last 4 bytes of the SHA-256 of `data`: the checksum of CB58 and of `hex`.
pub fn checksum(data: &[u8]) -> [u8; 4] {
    let h: [u8; 32] = Sha256::digest(data).into();
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
pub fn id_str(id: &[u8; 32]) -> String {
    cb58_encode(id)
}

/// Parses a CB58 ID (`ids.FromString`).
pub fn parse_id(s: &str) -> Result<[u8; 32], DecodeError> {
    let bytes = cb58_decode(s)?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        DecodeError(format!(
            "invalid hash length: expected 32 bytes but got {}",
            bytes.len()
        ))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_id_encodes_to_the_known_vector() {
        assert_eq!(id_str(&[0; 32]), "11111111111111111111111111111111LpoYY");
        assert_eq!(
            parse_id("11111111111111111111111111111111LpoYY").unwrap(),
            [0; 32]
        );
    }

    #[test]
    fn cb58_round_trips_and_checks_its_checksum() {
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
    }

    #[test]
    fn hex_with_a_checksum_round_trips_and_bad_input_is_refused() {
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
        assert_eq!(hex_decode(&hex_plain(data), false).unwrap(), data);
    }
}
