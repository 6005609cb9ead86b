//! Answers made and not yet taken by their clients (see [`super::Tracked`]): what they really
//! hold, per client address and for the gateway, and who is refused a further answer when a bound
//! is reached. What `limits.address_answer_bytes` and `limits.total_answer_bytes` bound: a client
//! that opens many HTTP/2 streams (or connections) and never opens their windows could otherwise
//! leave `max_connections_per_ip` × [`super::H2_MAX_STREAMS`] answers waiting, each until
//! `send_timeout`.
//!
//! * An address is charged every answer it leaves unread, in full (a payload it asked for twice,
//!   twice: what it makes snowgate keep for it is its own business), on all its connections
//!   together. Past `address_answer_bytes` it is refused further answers, on any connection; an
//!   address holding nothing gets its answer, whatever its size (while the gateway holds less than
//!   `total_answer_bytes` and one address's bound more), so the bound is passed by the one answer
//!   that crosses it, never by one answer per connection.
//! * The gateway counts what is really held: a large chunk several answers share (a cached or
//!   coalesced payload, one buffer in memory) once, whichever and however many answers hold it.
//! * Past half of `total_answer_bytes`, an address holding more than its share (the other half
//!   over the addresses holding answers) is refused too: those holding the most are refused first,
//!   and one under its share is never refused because others filled the total. The total so
//!   stays within `total_answer_bytes`, but for the answers made at one moment and the newcomers'
//!   first answers, which stop at `total_answer_bytes + address_answer_bytes`: past that, even an
//!   address holding nothing is refused (only many addresses, each holding its one answer, can
//!   bring the total there; what they hold is memory).
//! * A trusted proxy (reading for many clients) is one address for its share, with no bound of
//!   its own: it is bounded by the gateway's total and, past half of it, by its share.
//!
//! Per answer, the accounting is two atomic additions and two loads; a body with a chunk over
//! [`crate::body::SHARE_ABOVE`] (an answer of more than 16 KiB) also takes a short lock on the
//! table of shared chunks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::body::Held;

/// The bound an answer was refused by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    /// `limits.address_answer_bytes`: the address's own.
    Address,
    /// `limits.total_answer_bytes`: past half of it, the address holds more than its share.
    Gateway,
}

/// Whether an address holding `held` bytes of unread answers gets another answer, and if not, by
/// which bound: the rules of the module doc, over plain numbers (`total`: what the gateway really
/// holds; `holders`: the addresses holding answers).
pub(super) fn refusal(
    held: u64,
    address_bound: u64,
    total: u64,
    total_bound: u64,
    holders: u64,
) -> Option<Bound> {
    if held == 0 {
        // One answer of any size, while the gateway holds less than its bound and one address's
        // more (the slack keeps a newcomer served while the shares hold the total near its
        // bound): past it, only many addresses each holding their one answer can have brought it
        // there, and what they hold is memory that must stay bounded.
        return (total >= total_bound.saturating_add(address_bound)).then_some(Bound::Gateway);
    }
    if held >= address_bound {
        return Some(Bound::Address);
    }
    let reserve = total_bound / 2;
    if total >= reserve && held >= (reserve / holders.max(1)).max(1) {
        return Some(Bound::Gateway);
    }
    None
}

/// The gateway's account of unread answers, shared by every connection of a listener.
#[derive(Default)]
pub(super) struct Ledger {
    /// The bytes really held: a shared chunk once.
    total: AtomicU64,
    /// Addresses holding unread answers. Raised and lowered by whichever answer takes an
    /// address's count from or to zero, so it may be off by one for a moment (read clamped).
    holders: AtomicI64,
    /// The shared chunks held by unread answers, by buffer (its address and length) and how many
    /// answers hold it. Each answer holding one keeps a reference to it until it is taken, so a
    /// buffer named here is never freed and its address reused meanwhile.
    shared: parking_lot::Mutex<HashMap<(usize, usize), u64>>,
}

impl Ledger {
    /// The bytes really held by unread answers.
    pub(super) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    fn holders(&self) -> u64 {
        u64::try_from(self.holders.load(Ordering::Relaxed)).unwrap_or(0)
    }

    fn add(&self, held: &Held) {
        let mut bytes = held.own_bytes();
        if !held.shared.is_empty() {
            let mut table = self.shared.lock();
            for chunk in &held.shared {
                let count = table.entry(key(chunk)).or_insert(0);
                if *count == 0 {
                    bytes += chunk.len() as u64;
                }
                *count += 1;
            }
        }
        self.total.fetch_add(bytes, Ordering::Relaxed);
    }

    fn sub(&self, held: &Held) {
        let mut bytes = held.own_bytes();
        if !held.shared.is_empty() {
            let mut table = self.shared.lock();
            for chunk in &held.shared {
                let k = key(chunk);
                if let Some(count) = table.get_mut(&k) {
                    *count -= 1;
                    if *count == 0 {
                        table.remove(&k);
                        bytes += chunk.len() as u64;
                    }
                }
            }
        }
        self.total.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// A shared chunk's identity: its buffer's address and length (every answer sharing a cached
/// payload holds the same `Bytes`, cloned).
fn key(chunk: &Bytes) -> (usize, usize) {
    (chunk.as_ptr() as usize, chunk.len())
}

/// One client address's unread answer bytes (every answer in full), over all its connections.
#[derive(Default)]
pub(super) struct Account {
    bytes: AtomicU64,
}

/// One connection's view: its address's account, the gateway's ledger and the bounds it was
/// accepted under.
pub(super) struct Unread {
    pub(super) address: Arc<Account>,
    pub(super) ledger: Arc<Ledger>,
    /// `limits.address_answer_bytes` (`u64::MAX` for a trusted proxy).
    pub(super) address_bound: u64,
    pub(super) total_bound: u64,
}

impl Unread {
    /// Counts an answer unread, until [`Unread::sub`].
    pub(super) fn add(&self, held: &Held) {
        if held.bytes == 0 {
            return;
        }
        if self.address.bytes.fetch_add(held.bytes, Ordering::Relaxed) == 0 {
            self.ledger.holders.fetch_add(1, Ordering::Relaxed);
        }
        self.ledger.add(held);
    }

    /// Counts an answer taken.
    pub(super) fn sub(&self, held: &Held) {
        if held.bytes == 0 {
            return;
        }
        if self.address.bytes.fetch_sub(held.bytes, Ordering::Relaxed) == held.bytes {
            self.ledger.holders.fetch_sub(1, Ordering::Relaxed);
        }
        self.ledger.sub(held);
    }

    /// Whether a further answer for this connection's address must be refused, and by which
    /// bound (see [`refusal`]). Two loads for an address holding nothing (most).
    pub(super) fn refusal(&self) -> Option<Bound> {
        let held = self.address.bytes.load(Ordering::Relaxed);
        if held == 0 {
            let full = self.total_bound.saturating_add(self.address_bound);
            return (self.ledger.total() >= full).then_some(Bound::Gateway);
        }
        refusal(
            held,
            self.address_bound,
            self.ledger.total(),
            self.total_bound,
            self.ledger.holders(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn an_address_holding_nothing_gets_its_answer_until_the_total_and_an_address_more() {
        let (address, total) = (16 * MIB, 256 * MIB);
        assert_eq!(refusal(0, address, 270 * MIB, total, 1000), None);
        // Many addresses holding one answer each filled it: memory is the bound.
        assert_eq!(
            refusal(0, address, 272 * MIB, total, 1000),
            Some(Bound::Gateway)
        );
    }

    #[test]
    fn an_address_past_its_bound_is_refused_by_it() {
        assert_eq!(refusal(16 * MIB - 1, 16 * MIB, 0, 256 * MIB, 1), None);
        assert_eq!(
            refusal(16 * MIB, 16 * MIB, 0, 256 * MIB, 1),
            Some(Bound::Address)
        );
    }

    #[test]
    fn past_half_the_total_only_those_over_their_share_are_refused() {
        let (address, total) = (16 * MIB, 256 * MIB);
        // Under half the total, no share applies.
        assert_eq!(refusal(15 * MIB, address, 127 * MIB, total, 100), None);
        // Past it, 100 addresses holding answers: a share of 1.28 MiB each.
        assert_eq!(refusal(MIB, address, 200 * MIB, total, 100), None);
        assert_eq!(
            refusal(2 * MIB, address, 200 * MIB, total, 100),
            Some(Bound::Gateway)
        );
        // The total far past its bound does not refuse one under its share.
        assert_eq!(refusal(MIB, address, 10 * total, total, 100), None);
        // A trusted proxy alone: half the total.
        assert_eq!(refusal(127 * MIB, u64::MAX, 127 * MIB, total, 1), None);
        assert_eq!(
            refusal(128 * MIB, u64::MAX, 128 * MIB, total, 1),
            Some(Bound::Gateway)
        );
        // A count of holders off by one for a moment (zero) reads as one.
        assert_eq!(
            refusal(128 * MIB, u64::MAX, 128 * MIB, total, 0),
            Some(Bound::Gateway)
        );
    }

    fn unread(ledger: &Arc<Ledger>, address: &Arc<Account>) -> Unread {
        Unread {
            address: address.clone(),
            ledger: ledger.clone(),
            address_bound: u64::MAX,
            total_bound: u64::MAX,
        }
    }

    fn held(payload: &Bytes) -> Held {
        Held {
            bytes: payload.len() as u64 + 40,
            shared: vec![payload.clone()],
        }
    }

    #[test]
    fn a_shared_payload_counts_once_for_the_gateway_and_in_full_for_each_address() {
        let ledger = Arc::new(Ledger::default());
        let (a, b) = (Arc::new(Account::default()), Arc::new(Account::default()));
        let payload = Bytes::from(vec![b'x'; 100_000]);
        let other = Bytes::from(vec![b'y'; 100_000]);
        let answers = [
            (unread(&ledger, &a), held(&payload)),
            (unread(&ledger, &a), held(&payload)),
            (unread(&ledger, &b), held(&payload)),
            (unread(&ledger, &b), held(&other)),
        ];
        for (u, h) in &answers {
            u.add(h);
        }
        assert_eq!(ledger.total(), 200_000 + 4 * 40);
        assert_eq!(a.bytes.load(Ordering::Relaxed), 2 * 100_040);
        assert_eq!(ledger.holders(), 2);
        for (u, h) in &answers[..3] {
            u.sub(h);
        }
        assert_eq!(ledger.total(), 100_040);
        assert_eq!((a.bytes.load(Ordering::Relaxed), ledger.holders()), (0, 1));
        answers[3].0.sub(&answers[3].1);
        assert_eq!((ledger.total(), ledger.holders()), (0, 0));
        assert!(ledger.shared.lock().is_empty());
        // An empty answer holds nothing and makes no holder.
        answers[0].0.add(&Held::default());
        assert_eq!(ledger.holders(), 0);
    }
}
