//! Node selection: power of two choices over a peak-EWMA latency estimate weighted by the requests
//! in flight (the load metric of tower's `balance::p2c` with `load::PeakEwma`, written as plain
//! functions so they can be tested without a runtime).
//!
//! Peak-EWMA reacts to a slow answer at once (the estimate jumps to the peak) and forgets it
//! gradually, so a node that turns slow is avoided quickly and tried again later.

use std::time::{Duration, Instant};

use rand::Rng;

/// The latency estimate of a node we have not measured yet (or since it came back): zero, so it
/// wins its comparisons until its first answer gives it a real figure. A pessimistic default
/// would starve a returning node: on loopback every measured node beats any guess.
pub(crate) const DEFAULT_RTT: Duration = Duration::ZERO;

/// How fast old latencies are forgotten.
pub(crate) const DECAY: Duration = Duration::from_secs(10);

/// A peak-sensitive exponentially weighted moving average of round-trip times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeakEwma {
    estimate_ns: f64,
    updated: Instant,
}

impl PeakEwma {
    /// A fresh estimate at [`DEFAULT_RTT`].
    pub(crate) fn new(now: Instant) -> PeakEwma {
        PeakEwma {
            estimate_ns: DEFAULT_RTT.as_nanos() as f64,
            updated: now,
        }
    }

    /// Folds in one observed round trip.
    pub(crate) fn observe(&mut self, rtt: Duration, now: Instant) {
        let rtt = rtt.as_nanos() as f64;
        if rtt > self.estimate_ns {
            self.estimate_ns = rtt;
        } else {
            let elapsed = now.saturating_duration_since(self.updated).as_nanos() as f64;
            let w = (-elapsed / DECAY.as_nanos() as f64).exp();
            self.estimate_ns = self.estimate_ns * w + rtt * (1.0 - w);
        }
        self.updated = now;
    }

    /// The current estimate in nanoseconds.
    pub(crate) fn estimate_ns(&self) -> f64 {
        self.estimate_ns
    }
}

/// The load of a candidate: latency estimate times (requests in flight + 1).
pub(crate) fn load(estimate_ns: f64, in_flight: usize) -> f64 {
    estimate_ns * (in_flight as f64 + 1.0)
}

/// Picks the index of one of `n` candidates with power of two choices: two distinct candidates
/// at random, the less loaded wins. `load(i)` is asked only for the two sampled ones, and not at
/// all when there is one candidate. `None` only when `n` is 0.
pub(crate) fn pick_p2c(n: usize, load: impl Fn(usize) -> f64, rng: &mut impl Rng) -> Option<usize> {
    match n {
        0 => None,
        1 => Some(0),
        n => {
            let a = rng.gen_range(0..n);
            let mut b = rng.gen_range(0..n - 1);
            if b >= a {
                b += 1;
            }
            Some(if load(b) < load(a) { b } else { a })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn pick(loads: &[f64], rng: &mut impl rand::Rng) -> Option<usize> {
        pick_p2c(loads.len(), |i| loads[i], rng)
    }

    #[test]
    fn peak_jumps_up_and_decays() {
        let t0 = Instant::now();
        let mut e = PeakEwma::new(t0);
        assert_eq!(e.estimate_ns(), 0.0, "an unmeasured node is tried first");
        e.observe(Duration::from_millis(100), t0);
        assert_eq!(e.estimate_ns(), 100_000_000.0);
        e.observe(Duration::from_millis(1), t0 + DECAY * 5);
        assert!(e.estimate_ns() < 2_000_000.0, "{}", e.estimate_ns());
    }

    #[test]
    fn the_less_loaded_of_two_wins() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let loads = [10.0, 1.0];
        for _ in 0..100 {
            assert_eq!(pick(&loads, &mut rng), Some(1));
        }
    }

    #[test]
    fn the_most_loaded_of_many_is_never_picked() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let loads = [1.0, 2.0, 3.0, 100.0];
        for _ in 0..1000 {
            assert_ne!(pick(&loads, &mut rng), Some(3));
        }
    }

    proptest! {
        #[test]
        fn pick_is_in_range(loads in proptest::collection::vec(0.0f64..1e9, 0..20), seed in any::<u64>()) {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            match pick(&loads, &mut rng) {
                None => prop_assert!(loads.is_empty()),
                Some(i) => prop_assert!(i < loads.len()),
            }
        }
    }
}
