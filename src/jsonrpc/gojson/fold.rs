//! Go's case folding of struct field names, and the duplicate-key check built on it.
//!
//! Hand-written for node compatibility: Go's decoder matches `"HEIGHT"` and `"height"` (and `"ſ"`,
//! `"K"` with their ASCII twins) to one field and keeps the last, so the gateway must see two keys
//! that fold alike as a node would. The set and the hash are shaped by a measured need: a 1 MiB
//! body of 60,000 keys held a runtime thread for tens of seconds with pairwise checks; with [`FoldSet`]
//! and word-at-a-time [`Folded`] hashing the worst 1 MiB body of each shape decodes and keys in
//! 3–21 ms on one core (`cargo bench --bench hostile`).

/// Go's `foldName`: ASCII letters upper-cased, and the two non-ASCII runes whose case-fold orbit
/// reaches an ASCII letter (U+017F LATIN SMALL LETTER LONG S and U+212A KELVIN SIGN) mapped onto it.
/// Two keys a Go struct decoder would treat as the same field fold to the same string. The
/// reference the tests hold [`fold_eq`], [`fold_cmp`] and [`Folded`] to; the gateway itself
/// folds without allocating.
#[cfg(test)]
pub(crate) fn fold_key(key: &str) -> String {
    key.chars().map(fold_char).collect()
}

/// One character of [`fold_key`].
pub(crate) fn fold_char(c: char) -> char {
    match c {
        'a'..='z' => c.to_ascii_uppercase(),
        '\u{017F}' => 'S',
        '\u{212A}' => 'K',
        _ => c,
    }
}

/// Do two keys fold to the same name? (No allocation.)
pub(crate) fn fold_eq(a: &str, b: &str) -> bool {
    // Equal but for ASCII case: fold-equal (other characters are then byte-equal), in one pass.
    if a.len() == b.len() && a.eq_ignore_ascii_case(b) {
        return true;
    }
    if a.is_ascii() && b.is_ascii() {
        // The common case: only ASCII letters fold, and they fold as ASCII case does.
        return false;
    }
    a.chars().map(fold_char).eq(b.chars().map(fold_char))
}

/// Orders keys by their folded names. (No allocation.)
pub(crate) fn fold_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        // The common case, a byte at a time: an ASCII character is its one byte, and folds as
        // ASCII upper case does.
        let upper = |c: u8| c.to_ascii_uppercase();
        return a.bytes().map(upper).cmp(b.bytes().map(upper));
    }
    a.chars().map(fold_char).cmp(b.chars().map(fold_char))
}

/// A key that compares and hashes by its folded name ([`fold_eq`]), so that a hash set finds two
/// keys a Go decoder takes for the same field in one pass over an object, without folded copies.
/// (std's hasher is keyed per process, so a client cannot choose keys that all collide.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct Folded<'a>(pub(crate) &'a str);

impl PartialEq for Folded<'_> {
    fn eq(&self, other: &Self) -> bool {
        fold_eq(self.0, other.0)
    }
}

impl Eq for Folded<'_> {}

impl std::hash::Hash for Folded<'_> {
    /// Feeds the hasher the folded name's UTF-8 bytes as little-endian words of eight, the last
    /// one partial with its length in the top byte: the calls depend only on those bytes, so
    /// fold-equal keys hash alike whichever path (ASCII or not) each takes, and words keep the
    /// keyed hash (SipHash) at a few nanoseconds a key.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if self.0.is_ascii() {
            let mut chunks = self.0.as_bytes().chunks_exact(8);
            for chunk in &mut chunks {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                word.make_ascii_uppercase();
                state.write_u64(u64::from_le_bytes(word));
            }
            // The last partial word, as `WordFeeder` would have packed it (a shift per byte: a
            // copy into a buffer read back as a word stalled on every key).
            let rest = chunks.remainder();
            let word = rest.iter().enumerate().fold(0u64, |word, (i, b)| {
                word | u64::from(b.to_ascii_uppercase()) << (8 * i)
            });
            state.write_u64(word | (rest.len() as u64) << 56);
        } else {
            let mut words = WordFeeder::default();
            for c in self.0.chars().map(fold_char) {
                let mut utf8 = [0u8; 4];
                for &b in c.encode_utf8(&mut utf8).as_bytes() {
                    words.push(state, b);
                }
            }
            words.finish(state);
        }
    }
}

/// Packs bytes into little-endian words for a hasher (see [`Folded`]'s `Hash`).
#[derive(Default)]
struct WordFeeder {
    word: u64,
    len: u32,
}

impl WordFeeder {
    fn push<H: std::hash::Hasher>(&mut self, state: &mut H, b: u8) {
        self.word |= u64::from(b) << (8 * self.len);
        self.len += 1;
        if self.len == 8 {
            state.write_u64(self.word);
            *self = WordFeeder::default();
        }
    }

    fn finish<H: std::hash::Hasher>(self, state: &mut H) {
        state.write_u64(self.word | u64::from(self.len) << 56);
    }
}

/// The keys of one object seen so far, by folded name: [`FoldSet::insert`] says whether a key is
/// new. Small objects (nearly all) are compared in a list; past 16 keys the set
/// moves to a hash set, so an object of n keys costs O(n), not O(n²), whatever its keys.
#[derive(Debug)]
pub(crate) struct FoldSet<'a> {
    /// The first keys, compared one by one (no allocation for a small object).
    list: [&'a str; FoldSet::LIST],
    listed: usize,
    /// Every key once there are more than fit in the list.
    hashed: std::collections::HashSet<Folded<'a>>,
    /// How many keys are expected in all: the hash set's size when it is made.
    expected: usize,
}

impl<'a> FoldSet<'a> {
    /// The most keys kept in the list before moving to the hash set.
    const LIST: usize = 16;

    /// An empty set for an object of `members` keys (the hash set, if one is needed, is made
    /// that large at once instead of growing).
    pub(crate) fn for_members(members: usize) -> FoldSet<'a> {
        FoldSet {
            list: [""; FoldSet::LIST],
            listed: 0,
            hashed: std::collections::HashSet::new(),
            expected: members,
        }
    }

    /// Adds `key`; false when a key of the same folded name was already there.
    pub(crate) fn insert(&mut self, key: &'a str) -> bool {
        if self.hashed.is_empty() {
            let listed = &self.list[..self.listed];
            if listed.iter().any(|k| fold_eq(k, key)) {
                return false;
            }
            if self.listed < Self::LIST {
                self.list[self.listed] = key;
                self.listed += 1;
                return true;
            }
            self.hashed.reserve(self.expected.max(2 * Self::LIST));
            self.hashed.extend(listed.iter().copied().map(Folded));
        }
        self.hashed.insert(Folded(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn fold_equal_keys_are_equal_and_hash_alike(
            a in "[a-zA-Z\u{17F}\u{212A}k_0-9]{0,150}",
            flips in proptest::collection::vec(proptest::num::u8::ANY, 150),
            b in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}",
        ) {
            use std::hash::BuildHasher;
            // A fold-equal variant of `a`: each letter recased or swapped for its non-ASCII twin.
            let variant: String = a
                .chars()
                .zip(flips.iter().cycle())
                .map(|(c, &f)| match (fold_char(c), f % 3) {
                    ('K', 0) => '\u{212A}',
                    ('S', 0) => '\u{17F}',
                    (up, 1) => up,
                    (up, _) => up.to_ascii_lowercase(),
                })
                .collect();
            let hasher = std::collections::hash_map::RandomState::new();
            proptest::prop_assert_eq!(Folded(&a), Folded(&variant));
            proptest::prop_assert_eq!(hasher.hash_one(Folded(&a)), hasher.hash_one(Folded(&variant)));
            proptest::prop_assert_eq!(Folded(&a) == Folded(&b), fold_key(&a) == fold_key(&b));
            proptest::prop_assert_eq!(fold_cmp(&a, &b), fold_key(&a).cmp(&fold_key(&b)));
        }

        #[test]
        fn fold_set_finds_what_a_pairwise_search_finds(
            keys in proptest::collection::vec("[kK\u{212A}sS\u{17F}]{1,3}|x[0-9]{1,2}", 0..60),
        ) {
            let mut set = FoldSet::for_members(keys.len() / 2);
            for (i, k) in keys.iter().enumerate() {
                let fresh = !keys[..i].iter().any(|e| fold_eq(e, k));
                proptest::prop_assert_eq!(set.insert(k), fresh, "{:?} at {}", keys, i);
            }
        }

        #[test]
        fn fold_eq_matches_fold_key(a in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}", b in "[a-zA-Z\u{17F}\u{212A}k_]{0,4}") {
            proptest::prop_assert_eq!(fold_eq(&a, &b), fold_key(&a) == fold_key(&b));
        }
    }
}
