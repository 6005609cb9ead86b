//! Health of one upstream: the verdict of active checks (`info.isBootstrapped {"chain":"P"}` and
//! `platform.getHeight` every `[health] interval`) and of passive signals from real requests,
//! turned into healthy / unhealthy with hysteresis so one slow answer does not flap a node; and
//! the pool's view of its nodes' heights ([`Heights`]), judged afresh at every check so one node
//! that lies, restarts lower or resets cannot drag the others out of rotation.
//!
//! What the public sees of a failure is a [`Fault`]: a fixed category (`connect refused`,
//! `timeout`, `http 500`, ...), never a node's address, its answer's body or an error's text.

use std::fmt;

/// Why a node failed a request or a check, as the public may see it (`/ext/health`, a client's
/// error message): a fixed category, never an address, a body or a library's error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The node refused the TCP connection.
    ConnectRefused,
    /// No TCP connection within `upstream.connect_timeout`.
    ConnectTimeout,
    /// Any other failure to connect.
    ConnectFailed,
    /// The TLS handshake failed (a certificate snowgate cannot verify, most often): the request
    /// never left. The reason is in the log only.
    TlsHandshake,
    /// The connection failed after the request may have been sent.
    ConnectionLost,
    /// What came back was not a well-formed HTTP/1.1 answer.
    InvalidHttp,
    /// No complete answer in time.
    Timeout,
    /// An HTTP status other than 200.
    Http(u16),
    /// HTTP 413 for a body under `SMALL_BODY` (64 KiB): no proxy in front of a node refuses so
    /// little (nginx's default limit is 1 MiB), so the node is broken, not the request. Counted
    /// against the node and tried on another, like any failure; without this, a node answering
    /// 413 to everything is never taken out, and, fast, draws the traffic.
    RefusedSmallBody,
    /// Not a JSON-RPC answer to the request (or not the answer a health check expects).
    BadAnswer,
    /// An answer larger than `limits.response_bytes` (the gateway's own bound, not the size).
    TooLarge(usize),
    /// A health check's call was answered with a JSON-RPC error.
    RpcError,
    /// The node says it is not done bootstrapping.
    NotBootstrapped,
    /// Its network (`info.getNetworkID`) could not be read while the pool's is known.
    NetworkUnknown,
    /// The request for the node could not be built (its path is not valid): snowgate's fault,
    /// found before any connection was opened.
    InvalidRequest,
    /// HTTP 429, or 503 with `Retry-After`: the node (a provider over its plan's rate) asks to be
    /// left alone for a while. Not a failure: it is put on hold (`HealthState::hold`).
    Throttled,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::ConnectRefused => f.write_str("connect refused"),
            Fault::ConnectTimeout => f.write_str("connect timeout"),
            Fault::ConnectFailed => f.write_str("connect failed"),
            Fault::TlsHandshake => f.write_str("tls handshake failed"),
            Fault::ConnectionLost => f.write_str("connection lost"),
            Fault::InvalidHttp => f.write_str("invalid HTTP answer"),
            Fault::Timeout => f.write_str("timeout"),
            Fault::Http(status) => write!(f, "http {status}"),
            Fault::RefusedSmallBody => f.write_str("http 413 for a small body"),
            Fault::BadAnswer => f.write_str("bad answer"),
            Fault::TooLarge(bound) => write!(f, "answer larger than {bound} bytes"),
            Fault::RpcError => f.write_str("rpc error"),
            Fault::NotBootstrapped => f.write_str("not bootstrapped"),
            Fault::NetworkUnknown => f.write_str("network unknown"),
            Fault::InvalidRequest => f.write_str("invalid request path"),
            Fault::Throttled => f.write_str("throttled"),
        }
    }
}

/// Bodies under this many bytes are never too large for a node (see [`Fault::RefusedSmallBody`]).
pub const SMALL_BODY: usize = 64 * 1024;

impl Fault {
    /// Whether a real request that failed this way counts against the node (passive ejection).
    ///
    /// A timeout does not: a slow method, or time the request spent queued in snowgate, says
    /// nothing about the node's health, which its active checks (with their own short timeout)
    /// judge. Nor does an answer over the size bound: a client can ask for a large answer. Nor
    /// does a request snowgate could not build: the node never saw it. Nor does a refusal of the
    /// request's size ([`Fault::refuses_the_size`]): a node behind nginx's `client_max_body_size`
    /// refuses a large body however healthy it is, and snowgate's own checks, which send the same
    /// request line and headers with a small body, judge the rest.
    pub fn counts_against_node(self) -> bool {
        !matches!(
            self,
            Fault::Timeout | Fault::TooLarge(_) | Fault::InvalidRequest | Fault::Throttled
        ) && !self.refuses_the_size()
    }

    /// HTTP 413 (body too large), 414 (URI too long) or 431 (header fields too large): the node,
    /// or the proxy in front of it, refused this request for its size. Of the three only the
    /// body comes from the client: the path and headers snowgate sends a node are its config's,
    /// the same for every call, so a 414 or 431 is tried on another node like any other failure
    /// (without holding it against this one), while a 413 is the caller's error
    /// ([`Fault::refuses_the_body`]).
    pub fn refuses_the_size(self) -> bool {
        matches!(self, Fault::Http(413 | 414 | 431))
    }

    /// HTTP 413: the node refused the request's body as too large. The same body would be refused
    /// by the next node too (nodes of a pool sit behind alike proxies), so it is not retried.
    pub fn refuses_the_body(self) -> bool {
        self == Fault::Http(413)
    }
}

/// The outcome of one active check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// Both calls answered in time; the node says whether it is bootstrapped, and its height.
    Answered { bootstrapped: bool, height: u64 },
    /// A call failed, timed out or answered garbage.
    Failed(Fault),
    /// The node throttled a call: it asks to be left alone this long (before any cap).
    Throttled(std::time::Duration),
}

/// Thresholds of the hysteresis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Thresholds {
    /// Consecutive failures before a healthy node is taken out.
    pub(crate) failures: u32,
    /// Consecutive successes before an unhealthy node is taken back.
    pub(crate) recoveries: u32,
}

/// The health record of one upstream (pure state machine).
#[derive(Debug, Clone, Default)]
pub(crate) struct HealthState {
    /// Taking traffic (lag is judged separately, at pick time).
    pub(crate) healthy: bool,
    /// At least one check has completed.
    pub(crate) checked: bool,
    pub(crate) bootstrapped: bool,
    /// Last height the node reported.
    pub(crate) height: Option<u64>,
    pub(crate) ok_streak: u32,
    /// Consecutive failed active checks.
    pub(crate) fail_streak: u32,
    /// Consecutive real requests that failed in a way that counts against the node.
    pub(crate) passive_streak: u32,
    /// Why the last check or request failed: a category, never an address or a body.
    pub(crate) last_error: Option<Fault>,
    /// It reports another network than the pool's: it never takes traffic.
    pub(crate) network_mismatch: bool,
    /// Its network could not be read while the pool's is known: it takes no traffic until it is.
    pub(crate) network_unknown: bool,
    /// Healthy but behind the pool's heights at the last judgement (kept to log the change once).
    pub(crate) lagging: bool,
    /// It throttled a call or a check: it takes no calls and is not checked until then, and is
    /// never judged for it ([`Fault::Throttled`]).
    pub(crate) held_until: Option<std::time::Instant>,
    /// It answered a call with bytes that contradict the call (`[cache] verify`): out of the pool
    /// until its checks bring it back, as after any failure (`vouch.rs`).
    pub(crate) lying: Option<crate::verify::Mismatch>,
}

impl HealthState {
    /// Shown to be on the pool's network, or no network is enforced.
    pub(crate) fn network_ok(&self) -> bool {
        !self.network_mismatch && !self.network_unknown
    }

    /// Whether it is on hold at `now` (it throttled).
    pub(crate) fn held(&self, now: std::time::Instant) -> bool {
        self.held_until.is_some_and(|until| until > now)
    }

    /// Puts it on hold until `until` (a later hold than one in force extends it; an earlier one
    /// changes nothing). Returns whether it was not on hold at `now` (a new throttling, reported
    /// once).
    pub(crate) fn hold(&mut self, until: std::time::Instant, now: std::time::Instant) -> bool {
        let new = !self.held(now);
        if self.held_until.map_or(true, |held| held < until) {
            self.held_until = Some(until);
        }
        new
    }
}

impl HealthState {
    /// Folds in one active check. The very first good check makes a node healthy at once (so a
    /// fresh gateway serves immediately); afterwards the thresholds apply.
    pub(crate) fn record(&mut self, check: Check, t: Thresholds) {
        // A throttled check says nothing of the node's health (the pool holds it instead).
        if matches!(check, Check::Throttled(_)) {
            return;
        }
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
                    self.last_error = Some(Fault::NotBootstrapped);
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
            Check::Throttled(_) => {}
            Check::Failed(fault) => {
                self.last_error = Some(fault);
                self.fail();
                if first || self.fail_streak >= t.failures {
                    self.healthy = false;
                }
            }
        }
    }

    /// A real request failed with `fault`. Only faults that [count against the
    /// node](Fault::counts_against_node) do anything, and a node is taken out only after
    /// `threshold` of them in a row (Envoy's consecutive-errors outlier detection): one bad
    /// answer, or a client's slow call, does not eject a node. An ejected node must earn its way
    /// back through the recovery threshold of its active checks. Returns whether this failure
    /// took the node out.
    pub(crate) fn passive_failure(&mut self, fault: Fault, threshold: u32) -> bool {
        if !fault.counts_against_node() {
            return false;
        }
        self.last_error = Some(fault);
        self.passive_streak = self.passive_streak.saturating_add(1);
        if self.passive_streak < threshold || !self.healthy {
            return false;
        }
        self.passive_streak = 0;
        self.ok_streak = 0;
        self.healthy = false;
        true
    }

    /// A real request got a valid answer (a JSON-RPC error included): the failure run ends.
    pub(crate) fn passive_success(&mut self) {
        self.passive_streak = 0;
    }

    /// The height this node contributes to the pool's view: only while its last active check
    /// answered and it is bootstrapped (a node that has left, or is syncing, does not count).
    pub(crate) fn reported_height(&self) -> Option<u64> {
        (self.checked && self.bootstrapped && self.fail_streak == 0)
            .then_some(self.height)
            .flatten()
    }

    fn fail(&mut self) {
        self.ok_streak = 0;
        self.fail_streak = self.fail_streak.saturating_add(1);
    }
}

/// The pool's view of its nodes' heights, recomputed from the heights reported now (never kept
/// from the past: a node that leaves, restarts lower or resets moves it at the next check).
///
/// With three or more reporting nodes, the *quorum height* is the highest height that more than
/// half of them have reached (the (⌊k/2⌋+1)-th highest of k); a node takes traffic only within
/// `max_lag_blocks` of it on either side. So nodes reporting 10,000,000 are implausible and take
/// no traffic while they are fewer than half, and the honest majority keeps serving. Half is not
/// enough: two liars of four would otherwise set the height and take every call. On such a tie
/// the lower height wins: a node behind serves answers that were true (and is caught up with),
/// one ahead may serve answers nobody else can vouch for, and the pool's best height (which keys
/// head-class cache entries) must not follow it. With one or two nodes there is no majority to
/// believe: the highest height is the mark and only lag is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Heights {
    /// The highest plausible height a reporting node has reached (cache validity, "not found"
    /// retries, `/ext/health`).
    pub(crate) best: u64,
    /// A node below this lags.
    pub(crate) floor: u64,
    /// A node above this is implausible (`u64::MAX` when there is no quorum to judge by).
    pub(crate) ceiling: u64,
}

impl Heights {
    /// Judges the heights of the nodes that report one now (see [`HealthState::reported_height`]).
    pub(crate) fn judge(reported: &[u64], max_lag: u64) -> Heights {
        let mut sorted = reported.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let k = sorted.len();
        if k < 3 {
            let best = sorted.first().copied().unwrap_or(0);
            return Heights {
                best,
                floor: best.saturating_sub(max_lag),
                ceiling: u64::MAX,
            };
        }
        // The (k/2+1)-th highest, reached by more than half: with fewer than half of the nodes
        // lying (in either direction), always an honest node's height; on a tie, the lower.
        let quorum = sorted[k / 2];
        let ceiling = quorum.saturating_add(max_lag);
        let best = sorted
            .iter()
            .copied()
            .find(|&h| h <= ceiling)
            .unwrap_or(quorum);
        Heights {
            best,
            floor: quorum.saturating_sub(max_lag),
            ceiling,
        }
    }

    /// Whether a node at `height` may take traffic as far as heights go.
    pub(crate) fn admits(&self, height: Option<u64>) -> bool {
        height.is_some_and(|h| h >= self.floor && h <= self.ceiling)
    }

    /// Whether `height` is above what the quorum makes believable.
    pub(crate) fn implausible(&self, height: Option<u64>) -> bool {
        height.is_some_and(|h| h > self.ceiling)
    }
}

/// One method's run of failures on one node, and the cooling period it earned (the per-method
/// breaker): a node that keeps failing one method stops getting it for a while and keeps
/// getting the others.
#[derive(Debug, Clone, Default)]
pub(crate) struct MethodRun {
    /// Failures of the method in a row.
    pub(crate) failures: u32,
    /// Not sent the method until then.
    pub(crate) cool_until: Option<std::time::Instant>,
}

impl MethodRun {
    /// Whether the node is not sent the method at `now`.
    pub(crate) fn cooling(&self, now: std::time::Instant) -> bool {
        self.cool_until.is_some_and(|until| until > now)
    }

    /// A call of the method failed with `fault` at `now`: `threshold` failures in a row cool it
    /// for `cooldown`. Returns whether this failure started a cooling period.
    pub(crate) fn failed(
        &mut self,
        fault: Fault,
        now: std::time::Instant,
        threshold: u32,
        cooldown: std::time::Duration,
    ) -> bool {
        if !fault.counts_against_method() || self.cooling(now) {
            return false;
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures < threshold {
            return false;
        }
        self.failures = 0;
        self.cool_until = Some(now + cooldown);
        true
    }

    /// Whether the run can be forgotten after a good answer at `now` (not cooling).
    pub(crate) fn over(&self, now: std::time::Instant) -> bool {
        !self.cooling(now)
    }
}

impl Fault {
    /// Whether a call that failed this way counts against the node for its method (the
    /// per-method breaker): a timeout, a 5xx, a connection lost or an answer that is not one.
    /// Not a connection refused (the node, not the method: its checks judge it), a throttle, a
    /// refusal of the request's size, an answer over snowgate's bound (the client asked for it)
    /// or the method's own JSON-RPC errors (answers, not failures).
    pub(crate) fn counts_against_method(self) -> bool {
        match self {
            Fault::Timeout | Fault::ConnectionLost | Fault::InvalidHttp | Fault::BadAnswer => true,
            Fault::Http(status) => (500..=599).contains(&status),
            Fault::RefusedSmallBody => true,
            _ => false,
        }
    }
}

/// How long a node's checker waits before its next check: its own `health_interval`, else
/// `[health] interval` (`pool`); a fallback on standby (a primary can serve) at its own cadence,
/// [`FALLBACK_INTERVAL`](crate::config::upstream::FALLBACK_INTERVAL) when it has none, and once
/// it serves at least as often as the primaries are checked.
pub(crate) fn check_interval(
    own: Option<std::time::Duration>,
    fallback: bool,
    standby: bool,
    pool: std::time::Duration,
) -> std::time::Duration {
    use crate::config::upstream::FALLBACK_INTERVAL;
    match (fallback, standby) {
        (true, true) => own.unwrap_or(FALLBACK_INTERVAL),
        (true, false) => own.map_or(pool, |own| own.min(pool)),
        (false, _) => own.unwrap_or(pool),
    }
}

/// Whether a node that would take traffic but for its height is behind the pool's floor.
pub(crate) fn lagging(state: &HealthState, heights: &Heights) -> bool {
    state.healthy && state.network_ok() && state.height.is_some_and(|h| h < heights.floor)
}

/// The selection rule: a node may be picked only when it is healthy and its height is admitted.
pub(crate) fn eligible(state: &HealthState, heights: &Heights) -> bool {
    state.healthy && state.network_ok() && heights.admits(state.height)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    fn a_fallback_on_standby_is_checked_at_its_own_cadence_and_as_often_as_a_primary_once_it_serves(
    ) {
        use std::time::Duration;
        let s = Duration::from_secs;
        let pool = s(1);
        assert_eq!(check_interval(None, false, true, pool), pool);
        assert_eq!(check_interval(Some(s(5)), false, false, pool), s(5));
        assert_eq!(check_interval(None, true, true, pool), s(30));
        assert_eq!(check_interval(Some(s(120)), true, true, pool), s(120));
        assert_eq!(check_interval(None, true, false, pool), pool);
        assert_eq!(check_interval(Some(s(120)), true, false, pool), pool);
        assert_eq!(
            check_interval(Some(Duration::from_millis(300)), true, false, pool),
            Duration::from_millis(300)
        );
    }

    #[test]
    fn a_method_cools_after_its_failures_in_a_row_and_only_for_failures_of_its_own() {
        use std::time::{Duration, Instant};
        let (now, cool) = (Instant::now(), Duration::from_secs(30));
        let mut run = MethodRun::default();
        for fault in [
            Fault::ConnectRefused,
            Fault::Throttled,
            Fault::Http(413),
            Fault::TooLarge(1),
        ] {
            assert!(!run.failed(fault, now, 1, cool), "{fault:?}");
        }
        assert_eq!(run.failures, 0);
        assert!(!run.failed(Fault::Timeout, now, 3, cool));
        assert!(!run.failed(Fault::Http(502), now, 3, cool));
        assert!(
            run.failed(Fault::BadAnswer, now, 3, cool),
            "the third in a row"
        );
        assert!(run.cooling(now) && !run.cooling(now + cool));
        assert!(!run.failed(Fault::Timeout, now, 1, cool), "already cooling");
        assert!(
            run.failed(Fault::Timeout, now + cool, 1, cool),
            "cooled again once it ended"
        );
    }

    #[test]
    fn a_hold_is_no_failure_and_only_a_later_one_extends_it() {
        use std::time::{Duration, Instant};
        let mut s = HealthState::default();
        s.record(ok(5), T);
        let now = Instant::now();
        assert!(s.hold(now + Duration::from_secs(10), now), "a new hold");
        assert!(!s.hold(now + Duration::from_secs(5), now), "already held");
        assert_eq!(s.held_until, Some(now + Duration::from_secs(10)));
        assert!(!s.hold(now + Duration::from_secs(20), now));
        assert_eq!(s.held_until, Some(now + Duration::from_secs(20)));
        assert!(s.held(now) && !s.held(now + Duration::from_secs(20)));
        // Throttled checks and requests change nothing of its health.
        for _ in 0..10 {
            s.record(Check::Throttled(Duration::from_secs(1)), T);
            assert!(!s.passive_failure(Fault::Throttled, 1));
        }
        assert!(s.healthy && s.fail_streak == 0 && s.passive_streak == 0);
        assert!(
            s.hold(now + Duration::from_secs(30), now + Duration::from_secs(25)),
            "held again after it ended"
        );
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
        s.record(Check::Failed(Fault::Timeout), T);
        assert!(s.healthy, "one failure is tolerated");
        s.record(Check::Failed(Fault::Timeout), T);
        assert!(!s.healthy);
        s.record(ok(6), T);
        s.record(ok(7), T);
        assert!(!s.healthy, "two successes are not enough");
        s.record(ok(8), T);
        assert!(s.healthy);
    }

    #[test]
    fn passive_failures_eject_only_in_a_row() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        assert!(!s.passive_failure(Fault::ConnectionLost, 3));
        assert!(!s.passive_failure(Fault::Http(500), 3));
        s.passive_success();
        assert!(!s.passive_failure(Fault::ConnectionLost, 3));
        assert!(!s.passive_failure(Fault::ConnectionLost, 3));
        assert!(s.healthy, "a success in between starts the count again");
        assert!(s.passive_failure(Fault::BadAnswer, 3));
        assert!(!s.healthy);
        assert_eq!(s.last_error, Some(Fault::BadAnswer));
    }

    #[test]
    fn timeouts_never_eject() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        for _ in 0..100 {
            assert!(!s.passive_failure(Fault::Timeout, 1));
            assert!(!s.passive_failure(Fault::TooLarge(1), 1));
        }
        assert!(s.healthy);
    }

    #[test]
    fn a_refusal_of_the_requests_size_never_ejects() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        for status in [413, 414, 431] {
            for _ in 0..10 {
                assert!(!s.passive_failure(Fault::Http(status), 1));
            }
        }
        assert!(s.healthy);
        assert!(Fault::Http(413).refuses_the_body());
        assert!(!Fault::Http(414).refuses_the_body() && !Fault::Http(400).refuses_the_size());
        // Any other status still counts.
        assert!(s.passive_failure(Fault::Http(400), 1));
    }

    #[test]
    fn a_413_for_a_small_body_is_the_nodes_failure() {
        let mut s = HealthState::default();
        s.record(ok(5), T);
        let fault = Fault::RefusedSmallBody;
        assert!(!fault.refuses_the_body() && !fault.refuses_the_size());
        assert!(!s.passive_failure(fault, 2));
        assert!(s.passive_failure(fault, 2));
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
        assert_eq!(s.reported_height(), None);
    }

    #[test]
    fn categories_name_no_detail() {
        assert_eq!(Fault::Http(500).to_string(), "http 500");
        assert_eq!(Fault::ConnectRefused.to_string(), "connect refused");
        assert_eq!(Fault::InvalidRequest.to_string(), "invalid request path");
    }

    #[test]
    fn one_or_two_nodes_follow_the_highest() {
        let h = Heights::judge(&[98, 100], 2);
        assert_eq!((h.best, h.floor, h.ceiling), (100, 98, u64::MAX));
        assert!(h.admits(Some(98)) && !h.admits(Some(97)) && !h.admits(None));
        assert_eq!(Heights::judge(&[], 2).best, 0);
    }

    #[test]
    fn a_liar_among_three_is_implausible() {
        let h = Heights::judge(&[100, 10_000_000, 101], 2);
        assert_eq!(h.best, 101);
        assert!(h.implausible(Some(10_000_000)));
        assert!(h.admits(Some(100)) && h.admits(Some(101)));
        // A node reset to zero lags; the others are untouched.
        let h = Heights::judge(&[100, 0, 101], 2);
        assert_eq!(h.best, 101);
        assert!(!h.admits(Some(0)) && h.admits(Some(100)));
    }

    #[test]
    fn two_liars_among_four_do_not_set_the_height() {
        let h = Heights::judge(&[100, 10_000_000, 101, 10_000_000], 2);
        assert_eq!((h.best, h.floor, h.ceiling), (101, 99, 103));
        assert!(h.admits(Some(100)) && h.admits(Some(101)));
        assert!(h.implausible(Some(10_000_000)));
        // Three of five likewise; three of four are a majority, and believed.
        let h = Heights::judge(&[100, 9_000, 101, 9_000, 102], 2);
        assert_eq!(h.best, 102);
        let h = Heights::judge(&[100, 9_000, 9_000, 9_000], 2);
        assert_eq!(h.best, 9_000);
        assert!(!h.admits(Some(100)));
    }

    #[test]
    fn a_tie_takes_the_lower_height() {
        // Two behind, two ahead: nobody has a majority, and the lower pair is believed.
        let h = Heights::judge(&[90, 100, 90, 100], 2);
        assert_eq!((h.best, h.floor, h.ceiling), (90, 88, 92));
        assert!(h.admits(Some(90)) && !h.admits(Some(100)));
        // Six nodes, three and three.
        let h = Heights::judge(&[5, 5, 5, 50, 50, 50], 0);
        assert_eq!(h.best, 5);
    }

    #[test]
    fn the_best_height_goes_down_when_the_highest_node_leaves() {
        assert_eq!(Heights::judge(&[1_000, 10], 2).best, 1_000);
        assert_eq!(Heights::judge(&[10], 2).best, 10);
    }

    fn node() -> impl Strategy<Value = HealthState> {
        (
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(0u64..1_000),
        )
            .prop_map(|(healthy, bootstrapped, height)| HealthState {
                healthy,
                checked: true,
                bootstrapped,
                height,
                ..HealthState::default()
            })
    }

    proptest! {
        #[test]
        fn no_unhealthy_lagging_or_implausible_node_is_ever_picked(
            nodes in proptest::collection::vec(node(), 0..8),
            max_lag in 0u64..10,
            seed in any::<u64>(),
        ) {
            use rand::SeedableRng;
            let reported: Vec<u64> = nodes.iter().filter_map(HealthState::reported_height).collect();
            let heights = Heights::judge(&reported, max_lag);
            let candidates: Vec<usize> =
                (0..nodes.len()).filter(|&i| eligible(&nodes[i], &heights)).collect();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            if let Some(k) = super::super::balance::pick_p2c(candidates.len(), |_| 1.0, &mut rng) {
                let s = &nodes[candidates[k]];
                let h = s.height.unwrap_or_default();
                prop_assert!(s.healthy);
                // The rule, restated: within max_lag of the quorum height (the highest that
                // more than half reached) with three or more reporting nodes, else not behind
                // the highest.
                let mut sorted = reported.clone();
                sorted.sort_unstable_by(|a, b| b.cmp(a));
                if sorted.len() >= 3 {
                    let quorum = *sorted
                        .iter()
                        .find(|&&h| 2 * sorted.iter().filter(|&&x| x >= h).count() > sorted.len())
                        .unwrap();
                    prop_assert!(h + max_lag >= quorum, "lagging");
                    prop_assert!(h <= quorum + max_lag, "implausible");
                } else {
                    let top = sorted.first().copied().unwrap_or(0);
                    prop_assert!(h + max_lag >= top, "lagging");
                }
            }
        }

        #[test]
        fn one_liar_among_three_or_more_leaves_the_honest_nodes_serving(
            honest in proptest::collection::vec(0u64..=4, 2..7),
            base in 0u64..1_000_000,
            liar in any::<u64>(),
        ) {
            // Honest nodes within max_lag (4) of each other; one node anywhere at all.
            let max_lag = 4;
            let mut reported: Vec<u64> = honest.iter().map(|d| base + d).collect();
            reported.push(liar);
            let heights = Heights::judge(&reported, max_lag);
            for d in &honest {
                prop_assert!(heights.admits(Some(base + d)), "{heights:?}");
            }
            prop_assert!(heights.best <= base + 4 + max_lag);
        }

        #[test]
        fn fewer_than_half_lying_anywhere_leave_the_honest_nodes_serving(
            honest in proptest::collection::vec(0u64..=4, 2..7),
            base in 1_000u64..1_000_000,
            liars in proptest::collection::vec(any::<u64>(), 0..6),
        ) {
            // However the liars spread (all high, all low, both), while they are fewer than the
            // honest nodes the quorum height is an honest node's.
            let max_lag = 4;
            let liars = &liars[..liars.len().min(honest.len() - 1)];
            let mut reported: Vec<u64> = honest.iter().map(|d| base + d).collect();
            reported.extend_from_slice(liars);
            let heights = Heights::judge(&reported, max_lag);
            if reported.len() >= 3 {
                for d in &honest {
                    prop_assert!(heights.admits(Some(base + d)), "{heights:?} {reported:?}");
                }
            }
        }

        #[test]
        fn the_quorum_height_is_reached_by_more_than_half(
            reported in proptest::collection::vec(0u64..50, 3..9),
        ) {
            let heights = Heights::judge(&reported, 0);
            // max_lag 0: floor and ceiling are the quorum height itself.
            let quorum = heights.floor;
            prop_assert_eq!(heights.ceiling, quorum);
            let reached = |h: u64| reported.iter().filter(|&&x| x >= h).count();
            prop_assert!(2 * reached(quorum) > reported.len(), "{quorum} {reported:?}");
            // No higher height is: the lower one wins a tie.
            prop_assert!(2 * reached(quorum + 1) <= reported.len(), "{quorum} {reported:?}");
        }
    }
}
