//! Health of one upstream: the verdict of active checks (`info.isBootstrapped {"chain":"P"}` and
//! `platform.getHeight` every `[health] interval`) and of passive signals from real requests,
//! turned into healthy / unhealthy with hysteresis so one slow answer does not flap a node.

/// The outcome of one active check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Both calls answered in time; the node says whether it is bootstrapped, and its height.
    Answered { bootstrapped: bool, height: u64 },
    /// A call failed, timed out or answered garbage.
    Failed(String),
}

/// Thresholds of the hysteresis.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Consecutive failures before a healthy node is taken out.
    pub failures: u32,
    /// Consecutive successes before an unhealthy node is taken back.
    pub recoveries: u32,
}

/// The health record of one upstream (pure state machine).
#[derive(Debug, Clone, Default)]
pub struct HealthState {
    /// Taking traffic (lag is judged separately, at pick time).
    pub healthy: bool,
    /// At least one check has completed.
    pub checked: bool,
    pub bootstrapped: bool,
    /// Last height the node reported.
    pub height: Option<u64>,
    pub ok_streak: u32,
    pub fail_streak: u32,
    /// Why the last check failed (never contains secrets: only node answers and transport errors).
    pub last_error: Option<String>,
}

impl HealthState {
    /// Folds in one active check. The very first good check makes a node healthy at once (so a
    /// fresh gateway serves immediately); afterwards the thresholds apply.
    pub fn record(&mut self, check: Check, t: Thresholds) {
        let first = !self.checked;
        self.checked = true;
        match check {
            Check::Answered {
                bootstrapped,
                height,
            } => {
                self.height = Some(height);
                self.bootstrapped = bootstrapped;
                if !bootstrapped {
                    self.last_error = Some("not bootstrapped".into());
                    self.fail();
                    self.healthy = false;
                    return;
                }
                self.last_error = None;
                self.fail_streak = 0;
                self.ok_streak = self.ok_streak.saturating_add(1);
                if first || self.ok_streak >= t.recoveries {
                    self.healthy = true;
                }
            }
            Check::Failed(why) => {
                self.last_error = Some(why);
                self.fail();
                if first || self.fail_streak >= t.failures {
                    self.healthy = false;
                }
            }
        }
    }

    /// A real request failed on transport, with a 5xx or with "not done bootstrapping": the node
    /// is taken out at once and must earn its way back through the recovery threshold.
    pub fn passive_failure(&mut self, why: String) {
        self.last_error = Some(why);
        self.fail();
        self.healthy = false;
    }

    fn fail(&mut self) {
        self.ok_streak = 0;
        self.fail_streak = self.fail_streak.saturating_add(1);
    }
}

/// Is a node at `height` close enough to the pool's best height to take traffic?
pub fn within_lag(height: Option<u64>, best: u64, max_lag: u64) -> bool {
    match height {
        Some(h) => h.saturating_add(max_lag) >= best,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        failures: 2,
        recoveries: 3,
    };

    fn ok(h: u64) -> Check {
        Check::Answered {
            bootstrapped: true,
            height: h,
        }
    }

    #[test]
    fn first_good_check_makes_healthy() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        assert!(s.healthy);
    }

    #[test]
    fn hysteresis_both_ways() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        s.record(Check::Failed("x".into()), T);
        assert!(s.healthy, "one failure is tolerated");
        s.record(Check::Failed("x".into()), T);
        assert!(!s.healthy);
        s.record(ok(6), T);
        s.record(ok(7), T);
        assert!(!s.healthy, "two successes are not enough");
        s.record(ok(8), T);
        assert!(s.healthy);
    }

    #[test]
    fn passive_failure_ejects_at_once() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        s.passive_failure("reset".into());
        assert!(!s.healthy);
    }

    #[test]
    fn bootstrapping_is_unhealthy_at_once() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        s.record(
            Check::Answered {
                bootstrapped: false,
                height: 5,
            },
            T,
        );
        assert!(!s.healthy);
    }

    #[test]
    fn lag() {
        assert!(within_lag(Some(98), 100, 2));
        assert!(!within_lag(Some(97), 100, 2));
        assert!(!within_lag(None, 100, 2));
    }
}
