//! The pool: picking a node for a call, taking one of its concurrency slots (queueing at the pool
//! when every usable node is full), sending with retries and failover within one deadline, and
//! calls pinned to one node by `X-Snowgate-Upstream`. A call whose method no node that is up
//! serves (by release: [`select::unserved`]) is answered here as such a node answers it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::answer;
use super::cordons::FleetCordons;
use super::events::{self, Cause, NodeEvent};
use super::health::{self, Fault, HealthState, Heights};
use super::hedge::NoHedge;
use super::node::{answer_from, upstream_id, AttemptError, Upstream, UpstreamError, DEFAULT_HOLD};
use super::select::{self, Choice, NodeView};
use crate::call::{Answer, AnswerKind, CacheStatus, RpcCall, Surcharge};
use crate::config::{ForwardConfig, HealthConfig, LimitsConfig, UpstreamConfig};
use crate::error::ProxyError;
use crate::methods::MethodSpec;
use crate::metrics::Metrics;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::watch;

/// The configured nodes and how to reach them.
pub struct Pool {
    /// The nodes and the settings they are used with: replaced whole by a reload
    /// ([`Pool::reconfigure`]); a call takes one snapshot and keeps it to its end, so a node
    /// removed meanwhile finishes the calls it has.
    pub(super) members: ArcSwap<Members>,
    /// [`Heights`], recomputed after every check (three words, read per candidate per request).
    pub(super) best_height: AtomicU64,
    /// When the best height last moved (unix milliseconds; 0: never), for the status page.
    pub(super) best_moved_ms: AtomicU64,
    pub(super) height_floor: AtomicU64,
    pub(super) height_ceiling: AtomicU64,
    /// Signalled whenever a concurrency slot is released anywhere in the pool.
    pub(super) slot_freed: tokio::sync::Notify,
    /// Some primary takes traffic (healthy, admitted, not on hold, not cordoned): the fallbacks
    /// are on standby, checked at their own cadence. Judged after every check and every change
    /// that can take a primary out.
    pub(super) primaries_serve: std::sync::atomic::AtomicBool,
    /// Wakes the fallbacks' checkers when the primaries stop serving: they are checked at once.
    pub(super) fallbacks_wanted: Arc<tokio::sync::Notify>,
    /// What hedged reads may still spend (`[upstream] hedge_max_ratio`).
    hedge_budget: super::hedge::HedgeBudget,
    /// Held by [`Pool::cordon`], and by a reload while it copies the cordons onto the nodes it
    /// publishes: no cordon is set between the copy and the publication, and lost.
    pub(super) cordon_lock: parking_lot::Mutex<()>,
    /// The fleet's cordons in its Redis (`[redis]`): set once, at start (`cordoning.rs`).
    pub(super) fleet_cordons: std::sync::OnceLock<FleetCordons>,
    pub(super) metrics: Metrics,
    /// The network every node must be on: `[network] id`, or the one more than half of the nodes report.
    /// Set once, through [`Pool::set_network`].
    pub(super) network: std::sync::OnceLock<u32>,
    /// The same, for whoever must follow it as it settles (the fleet's shared cache, whose keys
    /// carry it): `None` until settled.
    network_settled: watch::Sender<Option<u32>>,
    /// The start's first round is over and the network was decided on (or could not be): from
    /// then on the checks settle it as soon as a majority reports one.
    pub(super) network_judged: std::sync::atomic::AtomicBool,
    /// The gateway's stop signal, once the health checks run: a node added by a reload gets its
    /// own checker, which stops with it.
    pub(super) checks: Mutex<Option<watch::Receiver<bool>>>,
    /// `[cache] verify`: how the answers of immutable calls are checked (`vouch.rs`).
    pub(super) verify: crate::verify::Setting,
}

/// The pool's nodes and the settings of this generation of the config.
pub(super) struct Members {
    pub(super) upstreams: Vec<Arc<Upstream>>,
    pub(super) health: HealthConfig,
    pub(super) forward: ForwardConfig,
    /// One client request, all attempts included.
    pub(super) deadline: Duration,
    /// Largest answer accepted from a node.
    pub(super) max_response_bytes: usize,
    /// Largest request body sent to a node (`limits.body_bytes`): what a client may send is
    /// what a node is sent, re-encoding included.
    pub(super) max_request_bytes: usize,
}

/// What a reload changed in the pool (names only).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PoolChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, another URL, headers, role, weight or connection settings: a new node under the
    /// old name (its health checked afresh before it takes the old one's place).
    pub changed: Vec<String>,
    /// Names the file cordons now (`[[upstreams]] cordoned` turned true), and no longer.
    pub cordoned: Vec<String>,
    pub uncordoned: Vec<String>,
}

impl Pool {
    /// Builds the pool (no I/O; call [`Pool::spawn_health_checks`] to start checking).
    pub(crate) fn new(
        upstreams: &[UpstreamConfig],
        health: HealthConfig,
        forward: ForwardConfig,
        limits: &LimitsConfig,
        metrics: Metrics,
    ) -> Result<Pool, UpstreamError> {
        let configs = upstreams;
        let upstreams = upstreams
            .iter()
            .map(|u| Upstream::new(u, &forward, &metrics).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        for u in &upstreams {
            metrics
                .upstream_healthy
                .with_label_values(&[&u.name])
                .set(0);
        }
        let pool = Pool {
            members: ArcSwap::from_pointee(Members {
                upstreams,
                health,
                forward,
                deadline: limits.request_deadline,
                max_response_bytes: limits.response_bytes,
                max_request_bytes: limits.body_bytes,
            }),
            best_height: AtomicU64::new(0),
            best_moved_ms: AtomicU64::new(0),
            height_floor: AtomicU64::new(0),
            height_ceiling: AtomicU64::new(u64::MAX),
            slot_freed: tokio::sync::Notify::new(),
            primaries_serve: std::sync::atomic::AtomicBool::new(false),
            fallbacks_wanted: Arc::new(tokio::sync::Notify::new()),
            hedge_budget: super::hedge::HedgeBudget::default(),
            cordon_lock: parking_lot::Mutex::new(()),
            fleet_cordons: std::sync::OnceLock::new(),
            metrics,
            network: std::sync::OnceLock::new(),
            network_settled: watch::Sender::new(None),
            network_judged: std::sync::atomic::AtomicBool::new(false),
            checks: Mutex::new(None),
            verify: Default::default(),
        };
        // The file's cordons hold from the first call.
        let members = pool.members();
        pool.carry_cordons(&pool.cordon_lock.lock(), &[], &members.upstreams, configs);
        Ok(pool)
    }

    /// The nodes and settings now.
    pub(super) fn members(&self) -> Arc<Members> {
        self.members.load_full()
    }

    /// Applies a reloaded config: nodes added, removed or changed, and the `[health]`,
    /// `[upstream]` and limits settings. A node whose table and connection settings are unchanged
    /// is kept as it is (health, connections, latency); a new or changed one is checked once
    /// (within `[health] timeout`) before it is published, so it takes traffic at once if it is
    /// healthy and a changed node leaves no gap. A removed node takes no new call; the calls it
    /// has finish. Fails, changing nothing, when a node cannot be built (its URL, its headers).
    pub(crate) async fn reconfigure(
        self: &Arc<Self>,
        upstreams: &[UpstreamConfig],
        health: HealthConfig,
        forward: ForwardConfig,
        limits: &LimitsConfig,
    ) -> Result<PoolChanges, UpstreamError> {
        let old = self.members();
        let mut changes = PoolChanges::default();
        let mut next = Vec::with_capacity(upstreams.len());
        let mut fresh = Vec::new();
        for config in upstreams {
            let same = old.upstreams.iter().find(|u| u.made_from(config, &forward));
            match same {
                Some(u) => next.push(u.clone()),
                None => {
                    let u = Arc::new(Upstream::new(config, &forward, &self.metrics)?);
                    if let Some(o) = old.upstreams.iter().find(|o| o.name == u.name) {
                        // A cordon is the operator's word about the name: it stays on the
                        // node's new table until lifted.
                        u.set_cordoned_by(o.cordoned_by().carried(config.cordoned));
                        changes.changed.push(config.name.clone());
                    } else {
                        changes.added.push(config.name.clone());
                    }
                    fresh.push(u.clone());
                    next.push(u);
                }
            }
        }
        let leaving: Vec<Arc<Upstream>> = old
            .upstreams
            .iter()
            .filter(|o| !next.iter().any(|n| Arc::ptr_eq(n, o)))
            .cloned()
            .collect();
        for o in &leaving {
            if !next.iter().any(|n| n.name == o.name) {
                changes.removed.push(o.name.to_string());
            }
        }
        // Said before their first checks, whose verdicts follow.
        for name in &changes.added {
            events::report(&self.metrics, name, NodeEvent::Added);
        }
        for name in &changes.changed {
            events::report(&self.metrics, name, NodeEvent::Replaced);
        }
        // The new nodes' first check, with the new settings, before anyone can choose them.
        let candidate = Members {
            upstreams: next,
            health,
            forward,
            deadline: limits.request_deadline,
            max_response_bytes: limits.response_bytes,
            max_request_bytes: limits.body_bytes,
        };
        futures_util::future::join_all(fresh.iter().map(|u| self.check_with(u, &candidate))).await;
        {
            // The cordons as they are now (one may have been set while the new nodes were
            // checked), copied under the lock `cordon` takes, and published with the nodes.
            // The file's own, for every node (`cordoning.rs`).
            let cordons = self.cordon_lock.lock();
            let by_file =
                self.carry_cordons(&cordons, &old.upstreams, &candidate.upstreams, upstreams);
            for (name, on) in by_file {
                if on {
                    changes.cordoned.push(name);
                } else {
                    changes.uncordoned.push(name);
                }
            }
            self.members.store(Arc::new(candidate));
        }
        for name in &changes.removed {
            events::report(&self.metrics, name, NodeEvent::Removed);
        }
        for o in &leaving {
            o.retire();
            if changes.removed.iter().any(|r| **r == *o.name) {
                self.forget_metrics(o);
            } else {
                self.forget_identity(o);
            }
        }
        // A new node under an old name may report what the old one did: its series again.
        for u in &fresh {
            if u.identity.lock().network_id.is_some() {
                self.publish_identity(u);
            }
        }
        let stop = self.checks.lock().clone();
        if let Some(stop) = stop {
            for u in fresh {
                self.spawn_checker(u, stop.clone());
            }
        }
        self.refresh_best_height();
        // Calls queued for a slot look again: a new node may have room.
        self.slot_freed.notify_waiters();
        Ok(changes)
    }

    /// The pool's settled network: `[network] id`, or the one more than half of the configured
    /// nodes report once they do; `None` until then. It never changes once settled.
    pub fn network(&self) -> Option<u32> {
        self.network.get().copied()
    }

    /// Follows [`Pool::network`]: the receiver sees `None` until the network is settled, then
    /// its ID.
    pub fn watch_network(&self) -> watch::Receiver<Option<u32>> {
        self.network_settled.subscribe()
    }

    /// Settles the pool's network on `id` unless it is settled already; whether this call did.
    pub(super) fn set_network(&self, id: u32) -> bool {
        let set = self.network.set(id).is_ok();
        if set {
            self.network_settled.send_replace(Some(id));
        }
        set
    }

    /// The highest plausible height the nodes report now (see `health::Heights`).
    pub fn best_height(&self) -> u64 {
        self.best_height.load(Ordering::Relaxed)
    }

    pub(super) fn heights(&self) -> Heights {
        Heights {
            best: self.best_height.load(Ordering::Relaxed),
            floor: self.height_floor.load(Ordering::Relaxed),
            ceiling: self.height_ceiling.load(Ordering::Relaxed),
        }
    }

    /// Finds an upstream by its configured name.
    fn by_name<'m>(members: &'m Members, name: &str) -> Option<&'m Arc<Upstream>> {
        members.upstreams.iter().find(|u| &*u.name == name)
    }

    pub(super) fn takes_traffic(&self, state: &HealthState) -> bool {
        health::eligible(state, &self.heights())
    }

    /// What the pool knows of each node now, for [`select::choose`] of a call of `spec`: one
    /// lock of each node's health record (and, for a method some release does not serve, of its
    /// identity), one vector.
    fn views(&self, members: &Members, tried: &[usize], spec: &MethodSpec) -> Vec<NodeView> {
        let primaries_serve = self.primaries_serve.load(Ordering::Relaxed);
        let versioned = spec.served.is_versioned();
        let now = std::time::Instant::now();
        let info = spec.family == crate::methods::Family::Info;
        members
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let (healthy, height) = {
                    let s = u.state.lock();
                    (s.healthy && s.network_ok() && !s.held(now), s.height)
                };
                let healthy = healthy && !u.cordoned.load(Ordering::Relaxed);
                // A version that is not a release number is as good as unknown: serving.
                let serves = !versioned || spec.served.serves(u.identity.lock().release);
                NodeView {
                    healthy,
                    height,
                    room: u.permits.available_permits() > 0,
                    tried: tried.contains(&i),
                    fallback: u.fallback,
                    weight: u.weight,
                    serves,
                    has_api: !info || u.info_api,
                    cooling: u.method_cooling(spec.index, now),
                    standby: u.fallback && primaries_serve,
                }
            })
            .collect()
    }

    /// One attempt of `call` on one upstream, re-encoded with a fresh id, with the bookkeeping
    /// (in-flight, latency, metrics, passive health, the trace's span). `nth` counts the call's
    /// attempts from 1; `hedge` is a hedge's.
    async fn attempt(
        &self,
        members: &Members,
        upstream: &Upstream,
        call: &RpcCall,
        (timeout, nth, hedge): (Duration, usize, bool),
        _slot: Slot<'_>,
    ) -> Result<(AnswerKind, Bytes), AttemptError> {
        let id = upstream_id();
        let body = call.upstream_body(id);
        let handles = &upstream.metrics;
        let mut span = call.caller.trace.attempt(&upstream.name, nth, hedge);
        let started = Instant::now();
        let _pending = upstream.begin(started);
        handles.in_flight.inc();
        let _gauge = scopeguard(|| handles.in_flight.dec());
        let result = upstream
            .post_with(
                upstream.path(call.spec.family),
                span.header(),
                body,
                timeout,
                members.max_response_bytes,
            )
            .await
            .and_then(|b| {
                answer::check(&b, id).map_err(|why| AttemptError::new(Fault::BadAnswer, why))
            })
            .map(|(kind, payload)| match kind {
                // A provider's error may echo its request: its own secrets go (`secrets.rs`).
                AnswerKind::Error => match upstream.secrets.scrub_error(&payload) {
                    Some(clean) => (kind, Bytes::from(clean)),
                    None => (kind, payload),
                },
                AnswerKind::Result => (kind, payload),
            });
        let ended = Instant::now();
        let elapsed = ended.saturating_duration_since(started);
        upstream.ewma.lock().observe(elapsed, ended);
        handles.latency.observe(elapsed.as_secs_f64());
        let outcome = match &result {
            Ok((AnswerKind::Result, _)) => "ok",
            Ok((AnswerKind::Error, _)) => "rpc_error",
            Err(e) => e.outcome(),
        };
        handles.requests.inc(0, &[&upstream.name], outcome);
        span.finish(outcome);
        match &result {
            Ok(_) => {
                upstream.state.lock().passive_success();
                upstream.method_answered(call.spec.index, ended);
            }
            Err(e) if e.fault == Fault::Throttled => {
                // Throttled is not down: held, never counted against it (see `Pool::hold`).
                self.hold(upstream, e.wait.unwrap_or(DEFAULT_HOLD), &members.health);
            }
            Err(e) if e.fault.refuses_the_body() => {
                // The caller's doing, so at debug (a client must not be able to flood the log),
                // and not held against the node.
                tracing::debug!(request_id = call.caller.request_id(), upstream = %upstream.name, fault = %e.fault, "the node refused the request as too large");
            }
            Err(e) => {
                // The detail may name the node's address; it never holds a body or params.
                tracing::warn!(request_id = call.caller.request_id(), upstream = %upstream.name, fault = %e.fault, detail = %e.detail, "upstream attempt failed");
                let health = &members.health;
                let (failures, cooldown) = (health.method_failures, health.method_cooldown);
                if upstream.method_failed(&call.spec, e.fault, ended, failures, cooldown) {
                    let method = call.spec.name.as_str();
                    let cooldown_ms = u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX);
                    tracing::warn!(upstream = %upstream.name, method, fault = %e.fault, failures, cooldown_ms, "upstream method cooling down: the node keeps failing it, and gets the other methods");
                    self.metrics
                        .upstream_method_cooldowns
                        .with_label_values(&[&upstream.name, method])
                        .inc();
                }
                let ejected = {
                    let mut s = upstream.state.lock();
                    s.passive_failure(e.fault, members.health.passive_failures)
                        .then_some(s.height)
                };
                if let Some(height) = ejected {
                    // Asked again who it is when it comes back (see `Pool::check_with`).
                    upstream.identity.lock().asked = None;
                    let event = NodeEvent::Unhealthy {
                        fault: e.fault,
                        by: Cause::Requests,
                        height,
                    };
                    events::report(&self.metrics, &upstream.name, event);
                    handles.healthy.set(0);
                    upstream.forget_method_runs();
                    self.judge_primaries(members);
                }
            }
        }
        result
    }

    /// Forwards a call: pick a node, send, check the answer; fail over as the module doc says.
    pub(crate) async fn forward(
        &self,
        call: &RpcCall,
        surcharge: &dyn Surcharge,
    ) -> Result<Answer, ProxyError> {
        let members = self.members();
        let members = &*members;
        // No node is sent more than `limits.body_bytes`, whatever the re-encoding adds (the
        // longest request id, invalid UTF-8 made U+FFFD): the call is refused before any node is
        // chosen, the same way whichever id its attempts would get. A node behind a proxy with
        // the same limit (nginx's `client_max_body_size`) so never refuses what a client was
        // allowed to send.
        if call.upstream_len(u64::MAX) > members.max_request_bytes {
            return Err(ProxyError::TooLargeForNode(members.max_request_bytes));
        }
        let deadline = Instant::now() + members.deadline;
        if let Some(pin) = &call.caller.pin {
            let upstream = Self::by_name(members, pin)
                .ok_or_else(|| ProxyError::UnknownUpstream(pin.clone()))?;
            let started = Instant::now();
            let Ok(Ok(permit)) =
                tokio::time::timeout(members.deadline, upstream.permits.acquire()).await
            else {
                return Err(ProxyError::Overloaded);
            };
            let slot = Slot {
                permit: Some(permit),
                pool: self,
                queued: false,
            };
            // The attempt's time runs from when it is sent; only the request's deadline cuts it.
            let timeout = Self::attempt_timeout(members, call)
                .min(members.deadline.saturating_sub(started.elapsed()));
            if timeout.is_zero() {
                return Err(ProxyError::UpstreamTimeout {
                    upstream: upstream.name.to_string(),
                });
            }
            return match self
                .attempt(members, upstream, call, (timeout, 1, false), slot)
                .await
            {
                Ok((kind, payload)) => Ok(answer_from(kind, payload, upstream)),
                Err(e) => Err(e.into_proxy_error(&upstream.name)),
            };
        }
        let min_height = call.requested_height().max(call.route_height());
        let mut tried: Vec<usize> = Vec::new();
        // The cache's call that seconds a node's answer is sent to another node.
        tried.extend(self.seconding(members, call));
        let mut last_error: Option<ProxyError> = None;
        let mut last_not_found: Option<Answer> = None;
        for attempt in 1..=members.forward.max_attempts {
            if !tried.is_empty() && Instant::now() >= deadline {
                // The last attempt ran into the deadline: its error stands.
                break;
            }
            let taken = self.take_slot(members, &call.spec, min_height, &tried, deadline);
            let (index, slot) = match taken.await {
                Ok(Some(taken)) => taken,
                Ok(None) if tried.is_empty() && self.unserved(members, &call.spec) => {
                    return Ok(not_served(&call.spec));
                }
                Ok(None) => break,
                Err(overloaded) => {
                    last_error = Some(overloaded);
                    break;
                }
            };
            tried.push(index);
            let upstream = &members.upstreams[index];
            // The attempt gets its whole timeout from now (time queued for a slot is not taken
            // from it), within the request's deadline; a timeout never counts against the node.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                last_error.get_or_insert(ProxyError::UpstreamTimeout {
                    upstream: upstream.name.to_string(),
                });
                break;
            }
            // Under overload a request can reach the head of the queue with less time left than
            // the node takes to answer: sending it would spend the slot and the node's work on an
            // answer nobody waits for, and starve the requests behind it. Shed it instead. Only a
            // request that queued: then the nodes are busy and their estimates keep moving (a
            // stale estimate from one slow call must not shed a node's every request).
            if slot.queued {
                let typical = Duration::from_nanos(upstream.ewma.lock().estimate_ns() as u64);
                if remaining < typical {
                    last_error.get_or_insert(ProxyError::Overloaded);
                    break;
                }
            }
            let timeout = remaining.min(Self::attempt_timeout(members, call));
            // The first attempt of a read may be hedged (see `Pool::hedged`).
            let hedge_after = members
                .forward
                .hedge_after
                .filter(|_| tried.len() == 1 && !call.spec.side_effect);
            let (index, result) = match hedge_after {
                Some(after) => {
                    let nth = (timeout, attempt as usize, false);
                    let first = self.attempt(members, upstream, call, nth, slot);
                    let race = (first, after, min_height, deadline);
                    self.hedged(members, call, index, race, (&mut tried, surcharge))
                        .await
                }
                None => (
                    index,
                    (self.attempt(
                        members,
                        upstream,
                        call,
                        (timeout, attempt as usize, false),
                        slot,
                    ))
                    .await,
                ),
            };
            let upstream = &members.upstreams[index];
            match result {
                Ok((kind, payload)) => {
                    let mut answer = answer_from(kind, payload, upstream);
                    // An answer that contradicts its call is never returned: another node is asked.
                    if let Err(wrong) = self.vouch(call, upstream, &mut answer) {
                        last_error = Some(wrong);
                        continue;
                    }
                    if self.should_retry_not_found(call, min_height, &answer) {
                        last_not_found = Some(answer);
                        continue;
                    }
                    return Ok(answer);
                }
                Err(e) => {
                    // A throttled node refused the call before doing anything with it.
                    let never_left = e.never_left() || e.fault == Fault::Throttled;
                    // Refused for its body: so would the next node be (see `Fault::refuses_the_body`).
                    let final_answer = e.fault.refuses_the_body();
                    let err = e.into_proxy_error(&upstream.name);
                    if final_answer || (call.spec.side_effect && !never_left) {
                        return Err(err);
                    }
                    last_error = Some(err);
                }
            }
        }
        if let Some(answer) = last_not_found {
            return Ok(answer);
        }
        Err(last_error.unwrap_or_else(|| self.no_node(members)))
    }

    /// Why no node could take a call: every node that otherwise would is on hold (the soonest
    /// end of a hold is the client's `Retry-After`), or none is healthy.
    fn no_node(&self, members: &Members) -> ProxyError {
        let now = std::time::Instant::now();
        let soonest = members
            .upstreams
            .iter()
            .filter(|u| !u.cordoned.load(Ordering::Relaxed))
            .filter_map(|u| {
                let s = u.state.lock();
                (s.healthy && s.network_ok() && s.held(now))
                    .then_some(s.held_until)
                    .flatten()
            })
            .min();
        match soonest {
            Some(until) => ProxyError::UpstreamsThrottled {
                retry_after_secs: until
                    .saturating_duration_since(now)
                    .as_secs_f64()
                    .ceil()
                    .max(1.0) as u64,
            },
            None => ProxyError::NoHealthyUpstream,
        }
    }

    /// Judges whether some primary takes traffic now; when none does any more, the fallbacks
    /// leave standby and are checked at once (their heights, read at their slow cadence, are
    /// judged again from then on).
    pub(super) fn judge_primaries(&self, members: &Members) {
        let heights = self.heights();
        let now = std::time::Instant::now();
        let serve = members.upstreams.iter().any(|u| {
            let s = u.state.lock();
            !u.fallback
                && health::eligible(&s, &heights)
                && !s.held(now)
                && !u.cordoned.load(Ordering::Relaxed)
        });
        let was = self.primaries_serve.swap(serve, Ordering::Relaxed);
        if was && !serve {
            self.fallbacks_wanted.notify_waiters();
        }
    }

    /// Puts a node that throttled on hold for `wait` (at most `[health] max_hold_off`): it takes
    /// no calls and is not checked until then, and is never ejected or counted as failing for it.
    /// A new hold is one state change (log line, count, the status page's events).
    pub(super) fn hold(&self, upstream: &Upstream, wait: Duration, health: &HealthConfig) {
        let now = std::time::Instant::now();
        let wait = wait.min(health.max_hold_off);
        let new = upstream.state.lock().hold(now + wait, now);
        upstream.metrics.throttled.set(1);
        if !upstream.fallback {
            self.judge_primaries(&self.members());
        }
        if new {
            let hold_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            events::report(
                &self.metrics,
                &upstream.name,
                NodeEvent::Throttled { hold_ms },
            );
        }
    }

    /// Races the first attempt of a read (on node `first`) against a second on another node,
    /// sent once the first has not answered within `after` (if the budget allows and another
    /// node has a slot free now: a hedge never queues). The first good answer wins and the other
    /// attempt is dropped, which cancels it (its connection is closed, never reused mid-answer,
    /// and nothing of it counts for or against its node); a failed attempt waits for the other.
    /// Returns which node's result it is; the hedge's node joins `tried`. A hedge is taken from the
    /// caller's share of the budget and the budget (`hedge.rs`), then charged to the caller's
    /// quota (`surcharge`); refused by either, it is not sent.
    async fn hedged<'a, F>(
        &'a self,
        members: &'a Members,
        call: &'a RpcCall,
        first: usize,
        (attempt, after, min_height, deadline): (F, Duration, Option<u64>, Instant),
        (tried, surcharge): (&mut Vec<usize>, &dyn Surcharge),
    ) -> (usize, Result<(AnswerKind, Bytes), AttemptError>)
    where
        F: std::future::Future<Output = Result<(AnswerKind, Bytes), AttemptError>>,
    {
        let client = &call.caller.client;
        self.hedge_budget
            .deposit(members.forward.hedge_max_ratio, client);
        tokio::pin!(attempt);
        tokio::select! {
            result = &mut attempt => return (first, result),
            () = tokio::time::sleep(after) => {}
        }
        let outcome = |o: &str| self.metrics.hedges.with_label_values(&[o]).inc();
        let taken = self
            .take_slot(members, &call.spec, min_height, tried, Instant::now())
            .await;
        let Ok(Some((second, slot))) = taken else {
            outcome("no_node");
            return (first, attempt.await);
        };
        if let Err(no) = self.hedge_budget.withdraw(client) {
            outcome(match no {
                NoHedge::ClientShare => "client_share",
                NoHedge::Budget => "no_budget",
            });
            drop(slot);
            return (first, attempt.await);
        }
        // What the caller makes the nodes do is charged to it; over its quota, no hedge.
        if !surcharge.surcharge(call) {
            self.hedge_budget.refund(client);
            outcome("over_quota");
            drop(slot);
            return (first, attempt.await);
        }
        outcome("sent");
        tried.push(second);
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = remaining.min(Self::attempt_timeout(members, call));
        let nth = (timeout, tried.len(), true);
        let hedge = self.attempt(members, &members.upstreams[second], call, nth, slot);
        tokio::pin!(hedge);
        tokio::select! {
            result = &mut attempt => match result {
                Ok(_) => (first, result),
                Err(_) => (second, hedge.await),
            },
            result = &mut hedge => match result {
                Ok(_) => {
                    outcome("won");
                    (second, result)
                }
                Err(_) => (first, attempt.await),
            },
        }
    }

    /// The time one attempt of `call` may take: the method's own `timeout`, else
    /// `upstream.request_timeout`.
    fn attempt_timeout(members: &Members, call: &RpcCall) -> Duration {
        call.spec.timeout.unwrap_or(members.forward.request_timeout)
    }

    /// Picks a node and takes one of its concurrency slots. Nodes at their cap are passed over;
    /// when every usable node is full, the request queues at the pool (not at one node) and takes
    /// the first slot freed anywhere. `Ok(None)`: no usable node; `Err`: no slot before the
    /// deadline.
    async fn take_slot<'a>(
        &'a self,
        members: &'a Members,
        spec: &MethodSpec,
        min_height: Option<u64>,
        tried: &[usize],
        deadline: Instant,
    ) -> Result<Option<(usize, Slot<'a>)>, ProxyError> {
        // The common case first: a node with room, without registering for a wake-up.
        let mut waiting = false;
        loop {
            let freed = self.slot_freed.notified();
            tokio::pin!(freed);
            if waiting {
                // Registered before looking, so a slot freed meanwhile is not missed.
                freed.as_mut().enable();
            }
            let choice = select::choose(
                &self.views(members, tried, spec),
                &self.heights(),
                min_height,
                |i| members.upstreams[i].load(),
                &mut rand::thread_rng(),
            );
            match choice {
                Choice::NoNode => return Ok(None),
                Choice::Node(index) => {
                    if let Ok(permit) = members.upstreams[index].permits.try_acquire() {
                        return Ok(Some((
                            index,
                            Slot {
                                permit: Some(permit),
                                pool: self,
                                queued: waiting,
                            },
                        )));
                    }
                    // Taken meanwhile by another request: choose again.
                    continue;
                }
                Choice::Full => {}
            }
            if !waiting {
                // All full: look again, this time registered for the next freed slot.
                waiting = true;
                continue;
            }
            if tokio::time::timeout_at(deadline.into(), freed)
                .await
                .is_err()
            {
                return Err(ProxyError::Overloaded);
            }
        }
    }

    /// Whether no node that is up serves `spec`'s method by its release, while some node is up.
    fn unserved(&self, members: &Members, spec: &MethodSpec) -> bool {
        spec.served.is_versioned()
            && select::unserved(&self.views(members, &[], spec), &self.heights())
    }

    /// A "not found" for a height the pool has already reached means this node is behind: ask
    /// another one.
    fn should_retry_not_found(
        &self,
        call: &RpcCall,
        min_height: Option<u64>,
        answer: &Answer,
    ) -> bool {
        let Some(h) = min_height else { return false };
        if answer.kind != AnswerKind::Error || h > self.best_height() {
            return false;
        }
        answer::error_message(&answer.payload)
            .is_some_and(|m| m.contains("not found") || m.contains("unfinalized height"))
            && call.caller.pin.is_none()
    }
}

/// What a node answers for a method its release does not serve (reference §1.5: -32000, `rpc:
/// can't find method "platform.GetAllValidatorsAt"`, `data` null), made here when every node up
/// would answer it: the client sees what a node of the pool says, without a node call. An
/// error answer, so never cached.
fn not_served(spec: &MethodSpec) -> Answer {
    let service = spec.name.split('.').next().unwrap_or_default();
    let message = match crate::jsonrpc::names::resolve(&spec.name, service, |_| false) {
        Err(e) => e.0,
        // Not reached: nothing is found when nothing is there.
        Ok(_) => format!("rpc: can't find method {:?}", spec.name),
    };
    let mut payload = String::with_capacity(message.len() + 48);
    payload.push_str("{\"code\":-32000,\"message\":");
    crate::jsonrpc::gojson::write_go_string(&mut payload, &message);
    payload.push_str(",\"data\":null}");
    tracing::debug!(method = %spec.name, "no node up serves the method: answered as a node would");
    Answer {
        kind: AnswerKind::Error,
        payload: Bytes::from(payload),
        upstream: None,
        upstream_height: None,
        cache: CacheStatus::Bypass,
        trust: crate::call::Trust::Vouched,
    }
}

/// A concurrency slot on one upstream; releasing it wakes one request queued at the pool.
struct Slot<'a> {
    permit: Option<tokio::sync::SemaphorePermit<'a>>,
    pool: &'a Pool,
    /// Every usable node was full when the request looked: it waited for this slot.
    queued: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // Return the permit first: the woken request must find the room.
        drop(self.permit.take());
        self.pool.slot_freed.notify_one();
    }
}

/// Runs `f` when dropped.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

fn scopeguard<F: FnOnce()>(f: F) -> OnDrop<F> {
    OnDrop(Some(f))
}
