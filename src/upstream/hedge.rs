//! The budget of hedged reads (`[upstream] hedge_max_ratio`): each call deposits the ratio, each
//! hedge withdraws one, so hedges stay a share of calls even while every node is slow (when
//! hedging would double the load on nodes that are slow already). The balance is capped, so a
//! long quiet spell does not save up a burst: at most [`MAX_SAVED`] hedges at once. The race
//! itself is the pool's (`Pool::hedged`).
//!
//! **Each client's share.** The budget is everyone's, so each client (a key, or an address's
//! network, IPv4 /24 or IPv6 /48: addresses rotated within one network share one account) also
//! has an account of its own, fed by its own calls at the same
//! ratio and capped at [`CLIENT_SAVED`]: a hedge takes one from both. A client whose calls are slow
//! on every node thus hedges at most the ratio of its own calls (plus what it saved), and never
//! spends what other clients' calls deposited; the hedge is also charged to its quota (the pool
//! asks the caller's [`crate::call::Surcharge`]). The accounts are bounded ([`MAX_ACCOUNTS`]):
//! forgetting one only loses what it saved (a new account starts empty), so a full table drops
//! the accounts holding less than a hedge, and if that is not enough, all of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::call::ClientId;

/// The budget is kept in thousandths of a hedge.
const SCALE: f64 = 1000.0;

/// One hedge, in the budget's thousandths.
const ONE: u64 = SCALE as u64;

/// The most hedges a quiet spell saves up.
pub const MAX_SAVED: u64 = 100;

/// The most hedges one client's quiet spell saves up: an eighth of the budget's.
pub const CLIENT_SAVED: u64 = if MAX_SAVED / 8 > 1 { MAX_SAVED / 8 } else { 1 };

/// Clients with an account at most.
pub const MAX_ACCOUNTS: usize = 4096;

/// Why a hedge was not taken from the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoHedge {
    /// The client has spent its own share (`snowgate_hedges_total{outcome="client_share"}`).
    ClientShare,
    /// The budget of all clients is spent (`no_budget`).
    Budget,
}

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct HedgeBudget {
    /// Thousandths of a hedge.
    balance: AtomicU64,
    /// Each client's own account, in thousandths of a hedge.
    accounts: Mutex<HashMap<ClientId, u64>>,
}

impl HedgeBudget {
    /// A call of `client` was made: `ratio` of a hedge is deposited in the budget and in the
    /// client's account (each up to its cap).
    pub(crate) fn deposit(&self, ratio: f64, client: &ClientId) {
        let client = &client.network();
        let add = (ratio * SCALE).round() as u64;
        if add == 0 {
            return;
        }
        let cap = MAX_SAVED * ONE;
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b < cap).then(|| (b + add).min(cap))
            });
        let mut accounts = self.accounts.lock();
        if accounts.len() >= MAX_ACCOUNTS && !accounts.contains_key(client) {
            // Forgetting an account loses only its savings: the ones without a whole hedge go
            // first, and if a flood of clients saved one each, all of them.
            accounts.retain(|_, saved| *saved >= ONE);
            if accounts.len() >= MAX_ACCOUNTS {
                accounts.clear();
            }
            accounts.shrink_to_fit();
        }
        let saved = accounts.entry(client.clone()).or_insert(0);
        *saved = (*saved + add).min(CLIENT_SAVED * ONE);
    }

    /// Takes one hedge for `client` from its account and from the budget, or neither.
    pub(crate) fn withdraw(&self, client: &ClientId) -> Result<(), NoHedge> {
        let client = &client.network();
        // The budget first: with it spent (or a ratio of 0), no share matters.
        if self.balance.load(Ordering::Relaxed) < ONE {
            return Err(NoHedge::Budget);
        }
        let mut accounts = self.accounts.lock();
        let saved = accounts.get_mut(client).ok_or(NoHedge::ClientShare)?;
        if *saved < ONE {
            return Err(NoHedge::ClientShare);
        }
        self.balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(ONE))
            .map_err(|_| NoHedge::Budget)?;
        *saved -= ONE;
        Ok(())
    }

    /// Gives back a hedge [`HedgeBudget::withdraw`] took and that was not sent (its client's quota
    /// refused it).
    pub(crate) fn refund(&self, client: &ClientId) {
        let client = &client.network();
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((b + ONE).min(MAX_SAVED * ONE))
            });
        if let Some(saved) = self.accounts.lock().get_mut(client) {
            *saved = (*saved + ONE).min(CLIENT_SAVED * ONE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client `n`, in a network of its own.
    fn client(n: u32) -> ClientId {
        ClientId::Ip(std::net::IpAddr::from((n << 8).to_be_bytes()))
    }

    #[test]
    fn addresses_of_one_network_share_one_account() {
        let budget = HedgeBudget::default();
        // 24 addresses of one /24, each making calls: one account, one share.
        for n in 0..24u8 {
            let address = ClientId::Ip(std::net::IpAddr::from([198, 51, 100, n]));
            for _ in 0..100 {
                budget.deposit(0.5, &address);
            }
        }
        let mut spent = 0;
        for n in 0..24u8 {
            let address = ClientId::Ip(std::net::IpAddr::from([198, 51, 100, n]));
            while budget.withdraw(&address).is_ok() {
                spent += 1;
            }
        }
        assert_eq!(spent, CLIENT_SAVED);
        // Another network's client still has its own.
        for _ in 0..10 {
            budget.deposit(0.5, &client(7));
        }
        assert!(budget.withdraw(&client(7)).is_ok());
    }

    #[test]
    fn hedges_stay_a_share_of_calls_and_a_quiet_spell_saves_only_so_many() {
        let budget = HedgeBudget::default();
        let a = client(1);
        assert_eq!(budget.withdraw(&a), Err(NoHedge::Budget));
        for _ in 0..10 {
            budget.deposit(0.1, &a);
        }
        assert!(
            budget.withdraw(&a).is_ok(),
            "ten calls at 0.1 pay one hedge"
        );
        assert!(budget.withdraw(&a).is_err());
        for _ in 0..1_000_000 {
            budget.deposit(0.5, &a);
        }
        let mut spent = 0;
        while budget.withdraw(&a).is_ok() {
            spent += 1;
        }
        assert_eq!(spent, CLIENT_SAVED, "one client saves its share only");
        // Eight more clients' savings fill the budget's cap, and it holds no more.
        for n in 2..=20 {
            for _ in 0..1_000 {
                budget.deposit(0.5, &client(n));
            }
        }
        let mut spent = 0;
        for n in 2..=20 {
            while budget.withdraw(&client(n)).is_ok() {
                spent += 1;
            }
        }
        assert_eq!(spent, MAX_SAVED);
        assert_eq!(budget.withdraw(&client(20)), Err(NoHedge::Budget));
        budget.deposit(0.0, &a);
        assert!(budget.withdraw(&a).is_err(), "a ratio of 0 never hedges");
    }

    #[test]
    fn a_client_never_spends_what_others_deposited() {
        let budget = HedgeBudget::default();
        let (honest, greedy) = (client(1), client(2));
        for _ in 0..10 {
            budget.deposit(0.5, &greedy);
            budget.deposit(0.5, &honest);
        }
        let mut greedy_hedges = 0;
        while budget.withdraw(&greedy).is_ok() {
            greedy_hedges += 1;
        }
        assert_eq!(greedy_hedges, 5, "its own calls' worth");
        for _ in 0..5 {
            assert!(budget.withdraw(&honest).is_ok());
        }
        // A refund restores both.
        budget.refund(&honest);
        assert!(budget.withdraw(&honest).is_ok());
    }

    #[test]
    fn the_accounts_are_bounded() {
        let budget = HedgeBudget::default();
        for n in 0..(MAX_ACCOUNTS as u32 * 3) {
            budget.deposit(1.0, &client(n));
        }
        assert!(budget.accounts.lock().len() <= MAX_ACCOUNTS);
    }
}
