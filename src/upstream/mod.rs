//! The upstream pool: the configured nodes, their health, and forwarding a call to one of them.
//!
//! * [`conn`]: keep-alive HTTP/1.1 connections to each node (a small client of its own),
//!   with connect and per-attempt timeouts.
//! * [`health`]: active checks every `[health] interval` plus passive signals from real requests
//!   (`[health] passive_failures` in a row; timeouts never count), with hysteresis; the pool's
//!   heights judged afresh at every check, so a node more than `max_lag_blocks` behind the quorum
//!   height takes no traffic, nor (with three or more nodes) one implausibly far ahead of it.
//! * [`balance`]: power of two choices over peak-EWMA latency times requests in flight.
//! * [`Pool::forward`]: failover for reads (transport errors, timeouts, 5xx and garbage answers
//!   move to another node within `max_attempts` and one deadline), side-effecting calls
//!   (`issueTx`) re-sent only when the first attempt never connected, height-aware routing.
//! * [`answer`]: what a node sends back is checked before a client sees it.
//!
//! What the public sees of a node's failure (a client's error, `/ext/health`) is a
//! [`health::Fault`] category and the node's configured name; the logs may add its address, never
//! a request's params or a node's answer body. Upstream request ids are random 64-bit numbers, so
//! a node cannot answer a request before it has seen it.

pub mod answer;
pub mod balance;
pub mod conn;
pub mod health;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use parking_lot::Mutex;
use serde::Serialize;

use crate::call::{Answer, AnswerKind, CacheStatus, RpcCall};
use crate::config::{ForwardConfig, HealthConfig, LimitsConfig, UpstreamConfig};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use balance::PeakEwma;
use health::{Check, Fault, HealthState, Heights, Thresholds};

/// Why one attempt on one node failed: the public category, and detail for the logs only (it
/// may name the node's address, never a body).
#[derive(Debug, Clone)]
struct AttemptError {
    fault: Fault,
    detail: String,
}

impl AttemptError {
    fn new(fault: Fault, detail: impl Into<String>) -> AttemptError {
        AttemptError {
            fault,
            detail: detail.into(),
        }
    }

    /// The request never left: no connection could be opened.
    fn never_left(&self) -> bool {
        matches!(
            self.fault,
            Fault::ConnectRefused | Fault::ConnectTimeout | Fault::ConnectFailed
        )
    }

    fn outcome(&self) -> &'static str {
        match self.fault {
            Fault::ConnectRefused | Fault::ConnectTimeout | Fault::ConnectFailed => "connect_error",
            Fault::ConnectionLost | Fault::InvalidHttp => "transport_error",
            Fault::Timeout => "timeout",
            Fault::Http(s) if s >= 500 => "http_5xx",
            Fault::Http(_) => "http_error",
            Fault::BadAnswer | Fault::TooLarge(_) | Fault::RpcError | Fault::NotBootstrapped => {
                "bad_answer"
            }
        }
    }

    /// The client's error: the node's name and the category, nothing the node sent.
    fn into_proxy_error(self, upstream: &str) -> ProxyError {
        let upstream = upstream.to_string();
        match self.fault {
            Fault::Timeout => ProxyError::UpstreamTimeout { upstream },
            Fault::BadAnswer | Fault::TooLarge(_) | Fault::InvalidHttp => {
                ProxyError::BadUpstreamAnswer {
                    upstream,
                    detail: self.fault.to_string(),
                }
            }
            fault => ProxyError::UpstreamUnavailable {
                upstream,
                detail: fault.to_string(),
            },
        }
    }
}

/// One node behind the gateway.
pub struct Upstream {
    /// The configured name.
    pub name: Arc<str>,
    connections: conn::Connections,
    state: Mutex<HealthState>,
    ewma: Mutex<PeakEwma>,
    /// Requests waiting for or holding a slot on this node, with their start times.
    pending: Mutex<Pending>,
    in_flight: AtomicUsize,
    /// Caps the requests in flight to this node (`[upstream] max_concurrency`).
    permits: tokio::sync::Semaphore,
    /// This node's metric series, resolved once.
    metrics: UpstreamMetrics,
}

/// The metric series of one upstream.
struct UpstreamMetrics {
    in_flight: prometheus::IntGauge,
    latency: prometheus::Histogram,
    healthy: prometheus::IntGauge,
    requests: crate::metrics::CounterTable,
}

/// The values of the `outcome` label of `snowgate_upstream_requests_total`.
const UPSTREAM_OUTCOMES: &[&str] = &[
    "ok",
    "rpc_error",
    "connect_error",
    "transport_error",
    "timeout",
    "http_5xx",
    "http_error",
    "bad_answer",
];

impl UpstreamMetrics {
    fn new(metrics: &Metrics, name: &str) -> UpstreamMetrics {
        UpstreamMetrics {
            in_flight: metrics.upstream_in_flight.with_label_values(&[name]),
            latency: metrics.upstream_latency.with_label_values(&[name]),
            healthy: metrics.upstream_healthy.with_label_values(&[name]),
            requests: crate::metrics::CounterTable::new(
                metrics.upstream_requests.clone(),
                1,
                UPSTREAM_OUTCOMES,
            ),
        }
    }
}

impl Upstream {
    fn new(
        config: &UpstreamConfig,
        forward: &ForwardConfig,
        metrics: &Metrics,
    ) -> Result<Upstream, String> {
        let authority = crate::config::parse_base_url(&config.url)?;
        let connections = conn::Connections::new(
            &authority,
            forward.connect_timeout,
            forward.pool_max_idle,
            Duration::from_secs(60),
        )?;
        Ok(Upstream {
            name: config.name.as_str().into(),
            connections,
            state: Mutex::new(HealthState::default()),
            ewma: Mutex::new(PeakEwma::new(Instant::now())),
            pending: Mutex::new(Pending::default()),
            in_flight: AtomicUsize::new(0),
            permits: tokio::sync::Semaphore::new(forward.max_concurrency),
            metrics: UpstreamMetrics::new(metrics, &config.name),
        })
    }

    /// Sends one JSON-RPC body to `path` and returns the answer body (HTTP 200 only).
    async fn post(
        &self,
        path: &'static str,
        body: Vec<u8>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Bytes, AttemptError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let reply = self
            .connections
            .post(path, &body, max_bytes, deadline)
            .await
            .map_err(|e| match e {
                conn::SendError::Connect(fault, d) => AttemptError::new(fault, d),
                conn::SendError::Transport(d) => AttemptError::new(Fault::ConnectionLost, d),
                conn::SendError::Malformed(d) => AttemptError::new(Fault::InvalidHttp, d),
                conn::SendError::TooLarge(n) => {
                    AttemptError::new(Fault::TooLarge(n), format!("answer larger than {n} bytes"))
                }
                conn::SendError::Timeout => AttemptError::new(Fault::Timeout, "no answer in time"),
            })?;
        if reply.status != StatusCode::OK {
            // The body is not kept: a node may echo the request, and with it a password.
            let status = reply.status.as_u16();
            return Err(AttemptError::new(
                Fault::Http(status),
                format!("HTTP status {status}"),
            ));
        }
        Ok(reply.body)
    }

    fn snapshot(&self) -> HealthState {
        self.state.lock().clone()
    }

    /// Peak-EWMA load, where a request still in flight counts as at least as slow as its age so
    /// far: a node that has just turned slow is avoided before its first slow answer arrives.
    fn load(&self) -> f64 {
        let (count, oldest) = {
            let p = self.pending.lock();
            (p.count, p.oldest())
        };
        let age = oldest.map_or(0.0, |t| t.elapsed().as_nanos() as f64);
        balance::load(self.ewma.lock().estimate_ns().max(age), count)
    }

    /// Registers a request as pending until the guard is dropped (also when its future is
    /// cancelled, so the count never leaks).
    fn begin(&self, now: Instant) -> PendingGuard<'_> {
        let seq = self.pending.lock().begin(now);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        PendingGuard {
            upstream: self,
            seq,
        }
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

/// Requests pending on one upstream, oldest first: a ring of start times by sequence number,
/// where a request that ends leaves a gap until every older one has ended too. Steady traffic
/// reuses the ring's room: no allocation per request. A slow request holds the ring open behind
/// it until it ends, which its deadline bounds.
#[derive(Default)]
struct Pending {
    /// The sequence number of `started[0]`.
    first: u64,
    /// Start times from `first` on; `None` where the request has ended.
    started: std::collections::VecDeque<Option<Instant>>,
    /// Requests still pending.
    count: usize,
}

impl Pending {
    /// Records a request started at `now`; returns its sequence number.
    fn begin(&mut self, now: Instant) -> u64 {
        self.started.push_back(Some(now));
        self.count += 1;
        self.first + self.started.len() as u64 - 1
    }

    /// Records the end of request `seq`.
    fn end(&mut self, seq: u64) {
        let Some(slot) = usize::try_from(seq.wrapping_sub(self.first))
            .ok()
            .and_then(|i| self.started.get_mut(i))
        else {
            return;
        };
        if slot.take().is_some() {
            self.count -= 1;
        }
        while self.started.front().is_some_and(Option::is_none) {
            self.started.pop_front();
            self.first += 1;
        }
    }

    /// When the oldest pending request started.
    fn oldest(&self) -> Option<Instant> {
        self.started.front().copied().flatten()
    }
}

struct PendingGuard<'a> {
    upstream: &'a Upstream,
    seq: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.upstream.pending.lock().end(self.seq);
        self.upstream.in_flight.fetch_sub(1, Ordering::Relaxed);
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

/// The state of one upstream as `/ext/health` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    pub name: String,
    /// Passing its health checks.
    pub healthy: bool,
    /// Healthy and its height admitted (within `max_lag_blocks` of the quorum height): receives
    /// requests.
    pub takes_traffic: bool,
    /// Its height is implausibly far ahead of what the other nodes report: it takes no traffic.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub implausible_height: bool,
    pub bootstrapped: bool,
    pub height: Option<u64>,
    pub in_flight: usize,
    /// Why its last check or request failed: a fixed category (`connect refused`, `timeout`,
    /// `http 500`, `bad answer`, `not bootstrapped`, ...), never an address or a body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The pool's state as `/ext/health` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub healthy: bool,
    /// snowgate is shutting down: load balancers should stop sending.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    pub best_height: u64,
    pub upstreams: Vec<UpstreamStatus>,
}

/// The configured nodes and how to reach them.
pub struct Pool {
    upstreams: Vec<Arc<Upstream>>,
    /// [`Heights`], recomputed after every check (three words, read per candidate per request).
    best_height: AtomicU64,
    height_floor: AtomicU64,
    height_ceiling: AtomicU64,
    health: HealthConfig,
    forward: ForwardConfig,
    /// Signalled whenever a concurrency slot is released anywhere in the pool.
    slot_freed: tokio::sync::Notify,
    /// One client request, all attempts included.
    deadline: Duration,
    /// Largest answer accepted from a node.
    max_response_bytes: usize,
    metrics: Metrics,
}

impl Pool {
    /// Builds the pool (no I/O; call [`Pool::spawn_health_checks`] to start checking).
    pub fn new(
        upstreams: &[UpstreamConfig],
        health: HealthConfig,
        forward: ForwardConfig,
        limits: &LimitsConfig,
        metrics: Metrics,
    ) -> Result<Pool, String> {
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
        Ok(Pool {
            upstreams,
            best_height: AtomicU64::new(0),
            height_floor: AtomicU64::new(0),
            height_ceiling: AtomicU64::new(u64::MAX),
            health,
            forward,
            slot_freed: tokio::sync::Notify::new(),
            deadline: limits.request_deadline,
            max_response_bytes: limits.response_bytes,
            metrics,
        })
    }

    /// The highest plausible height the nodes report now (see [`Heights`]).
    pub fn best_height(&self) -> u64 {
        self.best_height.load(Ordering::Relaxed)
    }

    fn heights(&self) -> Heights {
        Heights {
            best: self.best_height.load(Ordering::Relaxed),
            floor: self.height_floor.load(Ordering::Relaxed),
            ceiling: self.height_ceiling.load(Ordering::Relaxed),
        }
    }

    /// The upstreams, in configuration order.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// Finds an upstream by its configured name.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| &*u.name == name)
    }

    fn takes_traffic(&self, state: &HealthState) -> bool {
        health::eligible(state, &self.heights())
    }

    /// The pool's state for `/ext/health`.
    pub fn status(&self) -> PoolStatus {
        let upstreams: Vec<UpstreamStatus> = self
            .upstreams
            .iter()
            .map(|u| {
                let s = u.snapshot();
                UpstreamStatus {
                    name: u.name.to_string(),
                    healthy: s.healthy,
                    takes_traffic: self.takes_traffic(&s),
                    implausible_height: self.heights().implausible(s.height),
                    bootstrapped: s.bootstrapped,
                    height: s.height,
                    in_flight: u.in_flight.load(Ordering::Relaxed),
                    last_error: s.last_error.map(|f| f.to_string()),
                }
            })
            .collect();
        PoolStatus {
            healthy: upstreams.iter().any(|u| u.takes_traffic),
            draining: false,
            best_height: self.best_height(),
            upstreams,
        }
    }

    /// Indices of the upstreams that may take a request needing `min_height`, minus `tried`.
    /// Those at their concurrency cap are left out while others have room; when all are full,
    /// all are given and the caller waits for a slot (within its deadline).
    fn candidates(&self, min_height: Option<u64>, tried: &[usize]) -> Vec<usize> {
        // One allocation: heights are looked up again (under their lock) only for a height
        // requirement, which few calls have.
        let mut ready: Vec<usize> = (0..self.upstreams.len())
            .filter(|i| !tried.contains(i))
            .filter(|&i| self.takes_traffic(&self.upstreams[i].state.lock()))
            .collect();
        let has_room = |i: usize| self.upstreams[i].permits.available_permits() > 0;
        if ready.iter().any(|&i| has_room(i)) {
            ready.retain(|&i| has_room(i));
        }
        if let Some(h) = min_height {
            let reaches = |i: usize| {
                self.upstreams[i]
                    .state
                    .lock()
                    .height
                    .is_some_and(|x| x >= h)
            };
            if ready.iter().any(|&i| reaches(i)) {
                ready.retain(|&i| reaches(i));
            }
        }
        ready
    }

    /// Power of two choices among `candidates` by their load (none computed for a single one).
    fn pick(&self, candidates: &[usize]) -> Option<usize> {
        let load = |k: usize| self.upstreams[candidates[k]].load();
        let chosen = balance::pick_p2c(candidates.len(), load, &mut rand::thread_rng())?;
        Some(candidates[chosen])
    }

    /// One attempt of `call` on one upstream, re-encoded with a fresh id, with the bookkeeping
    /// (in-flight, latency, metrics, passive health).
    async fn attempt(
        &self,
        upstream: &Upstream,
        call: &RpcCall,
        timeout: Duration,
        _slot: Slot<'_>,
    ) -> Result<(AnswerKind, Bytes), AttemptError> {
        let id = upstream_id();
        let body = call.upstream_body(id);
        let handles = &upstream.metrics;
        let started = Instant::now();
        let _pending = upstream.begin(started);
        handles.in_flight.inc();
        let _gauge = scopeguard(|| handles.in_flight.dec());
        let result = upstream
            .post(
                call.spec.family.canonical_path(),
                body,
                timeout,
                self.max_response_bytes,
            )
            .await
            .and_then(|b| {
                answer::check(&b, id).map_err(|why| AttemptError::new(Fault::BadAnswer, why))
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
        match &result {
            Ok(_) => upstream.state.lock().passive_success(),
            Err(e) => {
                // The detail may name the node's address; it never holds a body or params.
                tracing::warn!(request_id = call.caller.request_id(), upstream = %upstream.name, fault = %e.fault, detail = %e.detail, "upstream attempt failed");
                let ejected = upstream
                    .state
                    .lock()
                    .passive_failure(e.fault, self.health.passive_failures);
                if ejected {
                    tracing::warn!(upstream = %upstream.name, fault = %e.fault, failures = self.health.passive_failures, "upstream taken out after failures in a row");
                    handles.healthy.set(0);
                }
            }
        }
        result
    }

    /// Forwards a call: pick a node, send, check the answer; fail over as the module doc says.
    pub async fn forward(&self, call: &RpcCall) -> Result<Answer, ProxyError> {
        let deadline = Instant::now() + self.deadline;
        if let Some(pin) = &call.caller.pin {
            let upstream = self
                .by_name(pin)
                .ok_or_else(|| ProxyError::UnknownUpstream(pin.clone()))?;
            let started = Instant::now();
            let Ok(Ok(permit)) =
                tokio::time::timeout(self.deadline, upstream.permits.acquire()).await
            else {
                return Err(ProxyError::Overloaded);
            };
            let slot = Slot {
                permit: Some(permit),
                pool: self,
                queued: false,
            };
            // The attempt's time runs from when it is sent; only the request's deadline cuts it.
            let timeout = self
                .attempt_timeout(call)
                .min(self.deadline.saturating_sub(started.elapsed()));
            if timeout.is_zero() {
                return Err(ProxyError::UpstreamTimeout {
                    upstream: upstream.name.to_string(),
                });
            }
            return match self.attempt(upstream, call, timeout, slot).await {
                Ok((kind, payload)) => Ok(answer_from(kind, payload, upstream)),
                Err(e) => Err(e.into_proxy_error(&upstream.name)),
            };
        }
        let min_height = call.requested_height().max(call.route_min_height);
        let mut tried: Vec<usize> = Vec::new();
        let mut last_error: Option<ProxyError> = None;
        let mut last_not_found: Option<Answer> = None;
        for _ in 0..self.forward.max_attempts {
            if !tried.is_empty() && Instant::now() >= deadline {
                // The last attempt ran into the deadline: its error stands.
                break;
            }
            let (index, slot) = match self.take_slot(min_height, &tried, deadline).await {
                Ok(Some(taken)) => taken,
                Ok(None) => break,
                Err(overloaded) => {
                    last_error = Some(overloaded);
                    break;
                }
            };
            tried.push(index);
            let upstream = &self.upstreams[index];
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
            let timeout = remaining.min(self.attempt_timeout(call));
            match self.attempt(upstream, call, timeout, slot).await {
                Ok((kind, payload)) => {
                    let answer = answer_from(kind, payload, upstream);
                    if self.should_retry_not_found(call, min_height, &answer) {
                        last_not_found = Some(answer);
                        continue;
                    }
                    return Ok(answer);
                }
                Err(e) => {
                    let never_left = e.never_left();
                    let err = e.into_proxy_error(&upstream.name);
                    if call.spec.side_effect && !never_left {
                        return Err(err);
                    }
                    last_error = Some(err);
                }
            }
        }
        if let Some(answer) = last_not_found {
            return Ok(answer);
        }
        Err(last_error.unwrap_or(ProxyError::NoHealthyUpstream))
    }

    /// The time one attempt of `call` may take: the method's own `timeout`, else
    /// `upstream.request_timeout`.
    fn attempt_timeout(&self, call: &RpcCall) -> Duration {
        call.spec.timeout.unwrap_or(self.forward.request_timeout)
    }

    /// Picks a node and takes one of its concurrency slots. Nodes at their cap are passed over;
    /// when every usable node is full, the request queues at the pool (not at one node) and takes
    /// the first slot freed anywhere. `Ok(None)`: no usable node; `Err`: no slot before the
    /// deadline.
    async fn take_slot(
        &self,
        min_height: Option<u64>,
        tried: &[usize],
        deadline: Instant,
    ) -> Result<Option<(usize, Slot<'_>)>, ProxyError> {
        // The common case first: a node with room, without registering for a wake-up.
        let mut waiting = false;
        loop {
            let freed = self.slot_freed.notified();
            tokio::pin!(freed);
            if waiting {
                // Registered before looking, so a slot freed meanwhile is not missed.
                freed.as_mut().enable();
            }
            let mut candidates = self.candidates(min_height, tried);
            if candidates.is_empty() {
                return Ok(None);
            }
            candidates.retain(|&i| self.upstreams[i].permits.available_permits() > 0);
            if let Some(index) = self.pick(&candidates) {
                if let Ok(permit) = self.upstreams[index].permits.try_acquire() {
                    return Ok(Some((
                        index,
                        Slot {
                            permit: Some(permit),
                            pool: self,
                            queued: waiting,
                        },
                    )));
                }
                continue;
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

    /// Starts one health-check task per upstream, each checking first one interval from now (the
    /// gateway runs a first round itself before it serves); they stop when `shutdown` flips to
    /// true.
    pub fn spawn_health_checks(self: &Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        for index in 0..self.upstreams.len() {
            let pool = Arc::clone(self);
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                // The first round ran when the pool was built: the next is one interval on.
                let every = pool.health.interval;
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = shutdown.changed() => return,
                    }
                    pool.check_once(index).await;
                }
            });
        }
    }

    /// Runs one active check of one upstream and updates the pool.
    pub async fn check_once(&self, index: usize) {
        let upstream = &self.upstreams[index];
        let check = self.run_check(upstream).await;
        let thresholds = Thresholds {
            failures: self.health.failure_threshold,
            recoveries: self.health.recovery_threshold,
        };
        {
            let mut s = upstream.state.lock();
            let was = s.healthy;
            s.record(check, thresholds);
            if !was && s.healthy {
                // Back in the pool: forget the latencies of its failures.
                *upstream.ewma.lock() = PeakEwma::new(Instant::now());
            }
            if was != s.healthy {
                tracing::info!(upstream = %upstream.name, healthy = s.healthy, height = ?s.height, reason = ?s.last_error, "upstream health changed");
            }
        }
        self.refresh_best_height();
    }

    async fn run_check(&self, upstream: &Upstream) -> Check {
        let timeout = self.health.timeout;
        let max = 1024 * 1024;
        let boot_id = upstream_id();
        let height_id = upstream_id();
        let boot_body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{boot_id},\"method\":\"info.isBootstrapped\",\"params\":{{\"chain\":\"P\"}}}}"
        );
        let height_body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{height_id},\"method\":\"platform.getHeight\",\"params\":{{}}}}"
        );
        let (boot, height) = tokio::join!(
            upstream.post("/ext/info", boot_body.into_bytes(), timeout, max),
            upstream.post("/ext/bc/P", height_body.into_bytes(), timeout, max),
        );
        // A failed call's category, logged here with its detail (never a body: a JSON-RPC
        // error's message is not kept either).
        let field = |r: Result<Bytes, AttemptError>,
                     id: u64,
                     name: &str|
         -> Result<crate::jsonrpc::Json, AttemptError> {
            let body = r?;
            let (kind, payload) =
                answer::check(&body, id).map_err(|why| AttemptError::new(Fault::BadAnswer, why))?;
            if kind == AnswerKind::Error {
                return Err(AttemptError::new(Fault::RpcError, "a JSON-RPC error"));
            }
            let v = crate::jsonrpc::Json::parse(&payload)
                .map_err(|_| AttemptError::new(Fault::BadAnswer, "result is not JSON"))?;
            v.field(name)
                .cloned()
                .ok_or_else(|| AttemptError::new(Fault::BadAnswer, format!("no {name} in answer")))
        };
        let failed = |call: &str, e: AttemptError| {
            tracing::debug!(upstream = %upstream.name, call, fault = %e.fault, detail = %e.detail, "health check failed");
            Check::Failed(e.fault)
        };
        let bootstrapped = match field(boot, boot_id, "isBootstrapped") {
            Ok(crate::jsonrpc::Json::Bool(b)) => b,
            Ok(_) => {
                let e = AttemptError::new(Fault::BadAnswer, "isBootstrapped is not a bool");
                return failed("info.isBootstrapped", e);
            }
            Err(e) => return failed("info.isBootstrapped", e),
        };
        let height = match field(height, height_id, "height") {
            Ok(crate::jsonrpc::Json::String(s)) => s.parse::<u64>().ok(),
            Ok(crate::jsonrpc::Json::Number(n)) => n.parse::<u64>().ok(),
            Ok(_) => None,
            Err(e) if !bootstrapped => {
                // A bootstrapping node refuses P-chain calls with a 503: report it as such.
                tracing::debug!(upstream = %upstream.name, fault = %e.fault, "height unavailable while bootstrapping");
                return Check::Answered {
                    bootstrapped: false,
                    height: 0,
                };
            }
            Err(e) => return failed("platform.getHeight", e),
        };
        match height {
            Some(height) => Check::Answered {
                bootstrapped,
                height,
            },
            None => failed(
                "platform.getHeight",
                AttemptError::new(Fault::BadAnswer, "height is not a number"),
            ),
        }
    }

    /// Judges the heights the nodes report now (never a height kept from the past: a node that
    /// left, restarted lower or reset moves the mark at once) and publishes who takes traffic.
    fn refresh_best_height(&self) {
        let reported: Vec<u64> = self
            .upstreams
            .iter()
            .filter_map(|u| u.state.lock().reported_height())
            .collect();
        let heights = Heights::judge(&reported, self.health.max_lag_blocks);
        self.best_height.store(heights.best, Ordering::Relaxed);
        self.height_floor.store(heights.floor, Ordering::Relaxed);
        self.height_ceiling
            .store(heights.ceiling, Ordering::Relaxed);
        self.metrics.best_height.set(heights.best as i64);
        for u in &self.upstreams {
            let s = u.state.lock();
            let name: &str = &u.name;
            self.metrics
                .upstream_healthy
                .with_label_values(&[name])
                .set(i64::from(health::eligible(&s, &heights)));
            if let Some(h) = s.height {
                self.metrics
                    .upstream_height
                    .with_label_values(&[name])
                    .set(h as i64);
            }
        }
    }
}

/// A fresh id for a request to a node: random 64 bits, so a node (or anyone on its connection)
/// cannot prepare an answer to a request it has not seen.
fn upstream_id() -> u64 {
    rand::random()
}

fn answer_from(kind: AnswerKind, payload: Bytes, upstream: &Upstream) -> Answer {
    Answer {
        kind,
        payload,
        upstream: Some(upstream.name.clone()),
        upstream_height: upstream.state.lock().height,
        cache: CacheStatus::Bypass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_requests_keep_the_oldest_start_in_any_end_order() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut p = Pending::default();
        let (a, b, c) = (p.begin(at(1)), p.begin(at(2)), p.begin(at(3)));
        assert_eq!((p.count, p.oldest()), (3, Some(at(1))));
        p.end(b);
        assert_eq!((p.count, p.oldest()), (2, Some(at(1))));
        p.end(a);
        assert_eq!((p.count, p.oldest()), (1, Some(at(3))));
        assert_eq!(
            p.started.len(),
            1,
            "ended requests at the front are dropped"
        );
        // Ending twice, or a number never given out, changes nothing.
        p.end(a);
        p.end(c + 100);
        assert_eq!(p.count, 1);
        let d = p.begin(at(4));
        p.end(c);
        assert_eq!((p.count, p.oldest()), (1, Some(at(4))));
        p.end(d);
        assert_eq!((p.count, p.oldest(), p.started.len()), (0, None, 0));
        // Numbers keep counting up after the ring empties.
        assert_eq!(p.begin(at(5)), d + 1);
    }
}
