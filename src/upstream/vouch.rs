//! What the pool vouches for an immutable answer (`[cache] verify`), and what becomes of a node
//! whose answer contradicts its call.
//!
//! The forward loop (`pool.rs`) hands every answer a node gives to [`Pool::vouch`] before it
//! returns it: a miss's answer, since a hit never reaches the pool. The answer is held against its
//! call ([`verify::check`]); one that contradicts it is dropped and the loop asks another node, so
//! a client never gets it and the cache never keeps it. Its node is taken out as `lying`: it takes
//! no traffic (its `/ext/health` entry and the status page say why, one log line and a state
//! change name the method and the check, never the bytes) until its checks bring it back, as after
//! any failure (`[health] recovery_threshold` good checks in a row). A health check cannot tell a
//! liar (it asks the height), so a node that keeps lying is taken out again at its next lie: each
//! one costs an attempt, never a wrong answer.
//!
//! An answer the checks let through is marked [`Trust::Checked`] (kept at once, stored in the
//! fleet's Redis as one node's checked word), unless it is one node's word that the setting wants
//! seconded ([`verify::wants_second`]: under `hash` an unreadable answer, or a fallback's that is
//! not proved): it goes back marked [`Trust::Unseconded`], and the cache asks
//! another node for the same call (its [`Lookup::second_to`](crate::call::Lookup) names the node
//! the pool then leaves out) and keeps the answer only once they agree.

use super::events::{self, NodeEvent};
use super::health::HealthState;
use super::node::Upstream;
use super::pool::{Members, Pool};
use crate::call::{Answer, AnswerKind, RpcCall, Trust};
use crate::config::Verify;
use crate::error::ProxyError;
use crate::methods::CacheClass;
use crate::verify::{self, Mismatch, Verdict};

impl HealthState {
    /// It answered with bytes that contradict the call: out, its recovery started afresh.
    /// Whether it was not lying already (a new state, reported once).
    fn lied(&mut self, mismatch: Mismatch) -> bool {
        let new = self.lying.is_none();
        self.lying = Some(mismatch);
        self.healthy = false;
        self.ok_streak = 0;
        self.passive_streak = 0;
        new
    }
}

impl Pool {
    /// Applies `[cache] verify` (the default is `hash`); the gateway sets it when it builds the
    /// pool.
    pub fn set_verify(&self, verify: Verify) {
        self.verify.set(verify);
    }

    /// The node a call of the cache's own leaves out: the one whose answer it seconds.
    pub(super) fn seconding(&self, members: &Members, call: &RpcCall) -> Option<usize> {
        let name = call.lookup.as_ref()?.second_to.as_deref()?;
        members.upstreams.iter().position(|u| &*u.name == name)
    }

    /// Holds `answer`, which `upstream` gave to `call`, against the call. `Err` when it
    /// contradicts the call: the node is taken out as lying and the answer must not be returned
    /// (the error is the client's if no other node answers). Else the answer is marked with what
    /// the pool vouches for it.
    pub(super) fn vouch(
        &self,
        call: &RpcCall,
        upstream: &Upstream,
        answer: &mut Answer,
    ) -> Result<(), ProxyError> {
        let setting = self.verify.get();
        if setting == Verify::Off
            || answer.kind != AnswerKind::Result
            || call.spec.cache != CacheClass::Immutable
        {
            return Ok(());
        }
        let verdict = verify::check(&call.spec.name, call.params.as_ref(), &answer.payload);
        self.metrics
            .answer_checks
            .with_label_values(&[&call.spec.name, verdict.label()])
            .inc();
        if let Verdict::Wrong(mismatch) = verdict {
            self.lied(upstream, mismatch);
            return Err(ProxyError::BadUpstreamAnswer {
                upstream: upstream.name.to_string(),
                detail: "wrong answer".into(),
            });
        }
        answer.trust = if verify::wants_second(setting, verdict, upstream.fallback) {
            Trust::Unseconded
        } else {
            Trust::Checked
        };
        Ok(())
    }

    /// Takes `upstream` out as lying (reported once, however many of its answers are refuted
    /// before it is out).
    fn lied(&self, upstream: &Upstream, mismatch: Mismatch) {
        let new = upstream.state.lock().lied(mismatch);
        upstream.metrics.healthy.set(0);
        if new {
            // Asked again who it is when it comes back (as after any ejection).
            upstream.identity.lock().asked = None;
            events::report(&self.metrics, &upstream.name, NodeEvent::Lying { mismatch });
            if !upstream.fallback {
                self.judge_primaries(&self.members());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_liar_is_out_until_its_checks_bring_it_back() {
        use super::super::health::{Check, Thresholds};
        let t = Thresholds {
            failures: 2,
            recoveries: 2,
        };
        let ok = Check::Answered {
            bootstrapped: true,
            height: 5,
        };
        let mut s = HealthState::default();
        s.record(ok.clone(), t);
        assert!(s.healthy);
        let m = Mismatch {
            method: "platform.getBlock",
            check: verify::Check::Hash,
        };
        assert!(s.lied(m), "a new state");
        assert!(!s.lied(m), "reported once");
        assert!(!s.healthy && s.lying == Some(m));
        s.record(ok.clone(), t);
        assert!(!s.healthy, "one good check is not enough");
        s.record(ok, t);
        assert!(s.healthy, "back after recovery_threshold good checks");
    }
}
