//! Secret keys that clients present: the one parser for `Authorization: Bearer <key>` and the one
//! comparison, shared by the admin keys ([`crate::policy::AdminKeys`]) and the rate-limit keys
//! (`ratelimit::Limiter::identify`), so the two cannot drift apart.
//!
//! Keys are held as SHA-256 digests and compared with `subtle` in constant time: the digests have
//! a fixed length, so neither where a guess first differs nor how long the key is shows in the
//! time an answer takes. Every configured key is compared, matched or not.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// The key in an `Authorization` value of the `Bearer` scheme (RFC 6750 §2.1): the scheme name
/// in any case (RFC 9110 §11.1), one or more spaces, then the key. `None` for any other scheme
/// or an empty key.
pub fn bearer(authorization: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    if authorization.len() <= SCHEME.len()
        || !authorization[..SCHEME.len()].eq_ignore_ascii_case(SCHEME)
    {
        return None;
    }
    let rest = &authorization[SCHEME.len()..];
    let token = rest.trim_ascii_start();
    // At least one space between the scheme and the key (`Bearerkey` is another scheme), and
    // only spaces: RFC 9110's `1*SP`.
    let gap = &rest[..rest.len() - token.len()];
    if gap.is_empty() || gap.iter().any(|&b| b != b' ') {
        return None;
    }
    let token = token.trim_ascii_end();
    (!token.is_empty()).then_some(token)
}

/// A fixed set of secret keys, each kept only as its SHA-256 digest. Cheap to clone.
#[derive(Clone, Default)]
pub struct KeySet {
    digests: Arc<[[u8; 32]]>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySet([{} redacted])", self.digests.len())
    }
}

impl KeySet {
    /// The set of these keys, in order (positions index them).
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> KeySet {
        KeySet {
            digests: keys.into_iter().map(digest).collect(),
        }
    }

    /// The position of the key `presented` is, comparing it with every key in constant time.
    pub fn position(&self, presented: &[u8]) -> Option<usize> {
        let presented = digest(presented);
        let mut found = subtle::Choice::from(0);
        let mut at = 0u64;
        for (i, key) in self.digests.iter().enumerate() {
            let equal = key.ct_eq(&presented);
            at.conditional_assign(&(i as u64), equal);
            found |= equal;
        }
        bool::from(found).then_some(at as usize)
    }

    /// Does `presented` equal one of the keys?
    pub fn contains(&self, presented: &[u8]) -> bool {
        self.position(presented).is_some()
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// No keys at all: nothing presented can match, so no header need be looked at.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_is_case_insensitive_with_one_or_more_spaces() {
        for value in [
            &b"Bearer k-1"[..],
            b"bearer k-1",
            b"BEARER k-1",
            b"bEaReR   k-1",
            b"Bearer k-1  ",
        ] {
            assert_eq!(bearer(value), Some(&b"k-1"[..]), "{value:?}");
        }
        for value in [
            &b"Bearerk-1"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearer\tk-1",
            b"Basic k-1",
            b"k-1",
            b"",
            b"Bearer\xff",
        ] {
            assert_eq!(bearer(value), None, "{value:?}");
        }
    }

    #[test]
    fn keys_match_whole_and_exact() {
        let keys = KeySet::new([&b"k-0123456789abcdef"[..], b"second-key-0123456789"]);
        assert_eq!(keys.position(b"k-0123456789abcdef"), Some(0));
        assert_eq!(keys.position(b"second-key-0123456789"), Some(1));
        for wrong in [
            &b"k-0123456789abcdeg"[..],
            b"k-0123456789abcde",
            b"k-0123456789abcdefg",
            b"K-0123456789ABCDEF",
            b"",
        ] {
            assert_eq!(keys.position(wrong), None, "{wrong:?}");
        }
        assert!(!KeySet::default().contains(b""));
        assert!(!format!("{keys:?}").contains("0123"));
    }
}
