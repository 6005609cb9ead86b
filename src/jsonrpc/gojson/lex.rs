//! The bytes of JSON text every reader and writer here classifies alike: whitespace, and where a
//! string's run of plain bytes stops.
//!
//! The floor of the folder: it imports nothing of it, and the scanner, the parsers, the walks and
//! the encoders all build on it, so none of them has to import another for a byte class. The
//! searches are hand-written for a measured need (see [`string_stop`]).

/// JSON's insignificant whitespace: space, tab, CR, LF.
pub(super) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// The index of the first byte of `s` that ends a run of plain string content: `"`, `\\` or a
/// control character (below 0x20, which Go refuses inside a string). Eight bytes a step with the
/// classic "has a zero byte" word trick: the byte-at-a-time search was about a tenth of a forwarded
/// call's instructions (IDs, addresses and hex are most of the bytes). Hand-written because memchr
/// searches for at most three bytes, not a range. The lowest flagged byte of a word is always a
/// true match (a borrow only flags bytes above a real one).
pub(super) fn string_stop(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = zero_byte(w ^ (ONES * u64::from(b'"')))
            | zero_byte(w ^ (ONES * u64::from(b'\\')))
            | w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|p| at + p)
}

/// The index of the first `"` or `\\` in `s`: where a string's run of plain bytes ends for a
/// caller that does not refuse control characters (the tree builder, on text the scanner already
/// accepted; the bracket walk, which only counts).
pub(super) fn quote_or_backslash(s: &[u8]) -> Option<usize> {
    memchr::memchr2(b'"', b'\\', s)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn string_stop_finds_what_a_byte_search_finds(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::num::u8::ANY,
                    proptest::sample::select(vec![b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xa0, b'a']),
                ],
                0..40,
            ),
        ) {
            let naive = |controls: bool| {
                bytes
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || (controls && b < 0x20))
            };
            proptest::prop_assert_eq!(string_stop(&bytes), naive(true));
            proptest::prop_assert_eq!(quote_or_backslash(&bytes), naive(false));
        }
    }
}
