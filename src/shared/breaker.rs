//! The circuit breaker in front of Redis: pure state, no I/O, so that the rules are tested without a
//! server.
//!
//! Requests only ask [`Breaker::closed`] (one atomic load): while the breaker is open they do not
//! touch Redis at all, so a dead or frozen Redis costs them nothing. A run of
//! [`FAILURES_TO_OPEN`] failed commands opens it, and so does one timeout ([`Breaker::timeout`]):
//! a request that has waited `[redis] timeout` once must not wait again for its next command (a
//! call asks Redis for its quota, then for its answer); the shared tier's watcher then probes Redis
//! after a backoff that doubles on every failed probe (from [`MIN_BACKOFF`] to [`MAX_BACKOFF`],
//! with jitter so that a fleet does not probe in step) and closes it on the first success.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::time::Duration;

/// Consecutive failed commands that open the breaker.
pub const FAILURES_TO_OPEN: u32 = 3;
/// First wait before probing an open breaker.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between probes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where the breaker stands (the `snowgate_redis_breaker_state` gauge's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Redis answers: requests use it.
    Closed = 0,
    /// Redis failed: requests skip it until a probe succeeds.
    Open = 1,
    /// A probe is under way; requests still skip Redis.
    HalfOpen = 2,
}

/// The breaker's state, shared by every request and the watcher.
#[derive(Debug)]
pub struct Breaker {
    state: AtomicU8,
    /// Consecutive failures while closed.
    failures: AtomicU32,
    /// Failed probes in a row while open (for the backoff).
    probes_failed: AtomicU32,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::new(State::Closed)
    }
}

impl Breaker {
    /// A breaker in `state` (the shared tier starts open: Redis is trusted once a probe answers).
    pub fn new(state: State) -> Breaker {
        Breaker {
            state: AtomicU8::new(state as u8),
            failures: AtomicU32::new(0),
            probes_failed: AtomicU32::new(0),
        }
    }

    /// The state now.
    pub fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Closed,
            1 => State::Open,
            _ => State::HalfOpen,
        }
    }

    /// May a request use Redis now?
    pub fn closed(&self) -> bool {
        self.state() == State::Closed
    }

    /// A command succeeded: the run of failures ends.
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A command failed or timed out; returns true when this failure opened the breaker.
    pub fn failure(&self) -> bool {
        let run = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        run >= FAILURES_TO_OPEN && self.open()
    }

    /// A command timed out: the breaker opens at once (see the module doc); true if this opened it.
    pub fn timeout(&self) -> bool {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.open()
    }

    /// Opens the breaker (a failed watcher ping does this at once); true if it was closed.
    pub fn open(&self) -> bool {
        self.state
            .compare_exchange(
                State::Closed as u8,
                State::Open as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The watcher starts a probe.
    pub fn probing(&self) {
        self.state.store(State::HalfOpen as u8, Ordering::Release);
    }

    /// The probe answered: requests use Redis again.
    pub fn probe_succeeded(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.probes_failed.store(0, Ordering::Relaxed);
        self.state.store(State::Closed as u8, Ordering::Release);
    }

    /// The probe failed: open again, and wait longer before the next.
    pub fn probe_failed(&self) {
        self.probes_failed.fetch_add(1, Ordering::Relaxed);
        self.state.store(State::Open as u8, Ordering::Release);
    }

    /// How long to wait before the next probe: [`MIN_BACKOFF`] doubled per failed probe, at most
    /// [`MAX_BACKOFF`], scaled by `jitter` (expected in 0.5..=1.0).
    pub fn backoff(&self, jitter: f64) -> Duration {
        let doublings = self.probes_failed.load(Ordering::Relaxed).min(16);
        let full = MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF);
        full.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_opens_it_and_a_success_breaks_the_run() {
        let b = Breaker::default();
        assert!(!b.failure());
        assert!(!b.failure());
        b.success();
        assert!(!b.failure());
        assert!(!b.failure());
        assert!(b.closed());
        assert!(b.failure(), "the third failure in a row opens it");
        assert_eq!(b.state(), State::Open);
        assert!(!b.failure(), "opening is reported once");
    }

    #[test]
    fn one_timeout_opens_it() {
        let b = Breaker::default();
        assert!(b.timeout());
        assert!(!b.closed());
        assert!(!b.timeout(), "opening is reported once");
    }

    #[test]
    fn probes_close_it_and_failed_probes_back_off() {
        let b = Breaker::new(State::Open);
        assert!(!b.closed());
        assert_eq!(b.backoff(1.0), MIN_BACKOFF);
        b.probing();
        assert_eq!(b.state(), State::HalfOpen);
        assert!(!b.closed(), "requests wait for the probe");
        b.probe_failed();
        assert_eq!(b.backoff(1.0), MIN_BACKOFF * 2);
        for _ in 0..40 {
            b.probe_failed();
        }
        assert_eq!(b.backoff(1.0), MAX_BACKOFF);
        assert_eq!(b.backoff(0.5), MAX_BACKOFF / 2);
        b.probing();
        b.probe_succeeded();
        assert!(b.closed());
        assert_eq!(b.backoff(1.0), MIN_BACKOFF);
        // The run of failures starts again from zero.
        assert!(!b.failure());
    }
}
