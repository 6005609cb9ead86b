//! The budget of hedged reads (`[upstream] hedge_max_ratio`): each call deposits the ratio, each
//! hedge withdraws one, so hedges stay a share of calls even while every node is slow (when
//! hedging would double the load on nodes that are slow already). The balance is capped, so a
//! long quiet spell does not save up a burst: at most [`MAX_SAVED`] hedges at once. The race
//! itself is the pool's (`Pool::hedged`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The budget is kept in thousandths of a hedge.
const SCALE: f64 = 1000.0;

/// The most hedges a quiet spell saves up.
pub const MAX_SAVED: u64 = 100;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct HedgeBudget {
    /// Thousandths of a hedge.
    balance: AtomicU64,
}

impl HedgeBudget {
    /// A call was made: `ratio` of a hedge is deposited (up to the cap).
    pub(crate) fn deposit(&self, ratio: f64) {
        let add = (ratio * SCALE).round() as u64;
        if add == 0 {
            return;
        }
        let cap = MAX_SAVED * SCALE as u64;
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b < cap).then(|| (b + add).min(cap))
            });
    }

    /// Takes one hedge from the budget; `false` when it holds less than one.
    pub(crate) fn withdraw(&self) -> bool {
        let one = SCALE as u64;
        self.balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(one))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hedges_stay_a_share_of_calls_and_a_quiet_spell_saves_only_so_many() {
        let budget = HedgeBudget::default();
        assert!(!budget.withdraw(), "nothing deposited yet");
        for _ in 0..10 {
            budget.deposit(0.1);
        }
        assert!(budget.withdraw(), "ten calls at 0.1 pay one hedge");
        assert!(!budget.withdraw());
        for _ in 0..1_000_000 {
            budget.deposit(0.5);
        }
        let mut spent = 0;
        while budget.withdraw() {
            spent += 1;
        }
        assert_eq!(spent, MAX_SAVED);
        budget.deposit(0.0);
        assert!(!budget.withdraw(), "a ratio of 0 never hedges");
    }
}
