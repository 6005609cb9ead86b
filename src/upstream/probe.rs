//! The active health checks' I/O: one task per node that asks it `info.isBootstrapped` and
//! `platform.getHeight` every `[health] interval`, folds the verdict into its
//! [`HealthState`](super::health::HealthState) and judges the pool's heights afresh; and, when a
//! node joins, comes back or every few minutes, its network and version ([`super::identity`]). The
//! rules themselves are pure, in [`super::health`] and [`super::identity`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::answer;
use super::balance::PeakEwma;
use super::events::{self, Cause, NodeEvent};
use super::health::{self, Check, Fault, Heights, Thresholds};
use super::node::{upstream_id, AttemptError, Upstream};
use super::pool::{Members, Pool};
use crate::call::AnswerKind;
use tokio::sync::watch;

impl Pool {
    /// Starts one health-check task per upstream, each checking first one interval from now (the
    /// gateway runs a first round itself before it serves); they stop when `shutdown` flips to
    /// true, and a node's own when a reload takes it out. Nodes a reload adds get theirs then.
    pub(crate) fn spawn_health_checks(self: &Arc<Self>, shutdown: watch::Receiver<bool>) {
        *self.checks.lock() = Some(shutdown.clone());
        for upstream in self.members().upstreams.iter() {
            self.spawn_checker(upstream.clone(), shutdown.clone());
        }
    }

    /// The checks of one node, every `[health] interval` (as it is at each turn), until it is
    /// retired or `shutdown` flips.
    pub(super) fn spawn_checker(
        self: &Arc<Self>,
        upstream: Arc<Upstream>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let pool = Arc::downgrade(self);
        let mut retired = upstream.retirement();
        let wanted = self.fallbacks_wanted.clone();
        tokio::spawn(async move {
            loop {
                let (every, standby) = match pool.upgrade() {
                    Some(pool) => {
                        let standby =
                            upstream.fallback && pool.primaries_serve.load(Ordering::Relaxed);
                        let interval = pool.members().health.interval;
                        let every = health::check_interval(
                            upstream.health_interval,
                            upstream.fallback,
                            standby,
                            interval,
                        );
                        (every, standby)
                    }
                    None => return,
                };
                // A node on hold is checked when its hold ends, not before.
                let every = match upstream.state.lock().held_until {
                    Some(until) => every.min(until.saturating_duration_since(Instant::now())),
                    None => every,
                };
                if *retired.borrow() {
                    return;
                }
                // A fallback on standby is woken when the primaries stop serving.
                let woken = wanted.notified();
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    () = woken, if standby => {}
                    _ = shutdown.changed() => return,
                    // Taken out by a reload: let go of it (and its sockets) now.
                    _ = retired.changed() => return,
                }
                let Some(pool) = pool.upgrade() else { return };
                let members = pool.members();
                tokio::select! {
                    () = pool.check_with(&upstream, &members) => {}
                    _ = retired.changed() => return,
                }
            }
        });
    }

    /// Runs one active check of the upstream at `index` (in configuration order) and updates the
    /// pool.
    pub async fn check_once(&self, index: usize) {
        let members = self.members();
        if let Some(upstream) = members.upstreams.get(index) {
            self.check_with(upstream, &members).await;
        }
    }

    /// One round of checks of every node, at once.
    pub async fn check_all(&self) {
        let members = self.members();
        let round = members
            .upstreams
            .iter()
            .map(|u| self.check_with(u, &members));
        futures_util::future::join_all(round).await;
    }

    /// One active check of `upstream` with the settings of `members`.
    pub(super) async fn check_with(&self, upstream: &Upstream, members: &Members) {
        let health = &members.health;
        // On hold: it asked to be left alone (see `Pool::hold`).
        if upstream.state.lock().held(Instant::now()) {
            return;
        }
        upstream.metrics.throttled.set(0);
        let check = if upstream.fallback || !upstream.info_api {
            self.run_height_check(upstream, health.timeout).await
        } else {
            self.run_check(upstream, health.timeout).await
        };
        if let Check::Throttled(wait) = check {
            self.hold(upstream, wait, health);
            return;
        }
        // Its network and version: when it joins (before it takes traffic), after it comes back
        // (a node taken out forgets when it was asked, below), and every few minutes, but not
        // while it is a fallback on standby (a metered provider is asked only what it must be).
        // Not at every check of a node that answers but is not healthy (bootstrapping, behind).
        let periodic = !(upstream.fallback && self.primaries_serve.load(Ordering::Relaxed));
        if matches!(check, Check::Answered { .. })
            && upstream
                .identity
                .lock()
                .due(std::time::Instant::now(), periodic)
        {
            self.ask_identity(upstream, health.timeout).await;
            self.settle_network_late();
            self.judge_network(upstream);
        }
        // A node whose network cannot be read (an error, a number that is no network ID, no
        // answer in time) cannot be shown to be on the pool's: it takes no traffic while the
        // pool's network is known, and is asked again at its next check.
        let check = if matches!(check, Check::Answered { .. })
            && self.network.get().is_some()
            && upstream.identity.lock().network_id.is_none()
        {
            Check::Failed(Fault::NetworkUnknown)
        } else {
            check
        };
        // A failed check may be a restart, perhaps onto another release: asked again who it is
        // at its next good check (an upgrade in place then changes what it is sent, and what
        // the cache keeps per release, within a check or two).
        if matches!(check, Check::Failed(_)) {
            upstream.identity.lock().asked = None;
        }
        let thresholds = Thresholds {
            failures: health.failure_threshold,
            recoveries: health.recovery_threshold,
        };
        let event = {
            let mut s = upstream.state.lock();
            let (was, first) = (s.healthy, !s.checked);
            s.record(check, thresholds);
            if was != s.healthy {
                // Out of the pool or back: a method's failures while the whole node failed say
                // nothing of the method.
                upstream.forget_method_runs();
            }
            if !was && s.healthy {
                // Back in the pool: forget the latencies of its failures, and a lie it was taken
                // out for (`vouch.rs`).
                *upstream.ewma.lock() = PeakEwma::new(Instant::now());
                s.lying = None;
            }
            if was && !s.healthy {
                // Whatever comes back may be another node (a restart, an address reused).
                upstream.identity.lock().asked = None;
                // Judged afresh when it is back: its lag then is a new change.
                s.lagging = false;
            }
            let height = s.height;
            // A node on another network takes no traffic however well it answers: its
            // mismatch line says so, a `joined` would not be true.
            let serves = s.network_ok();
            match (first, was, s.healthy) {
                (true, _, true) if serves => Some(NodeEvent::Joined { height }),
                (false, false, true) if serves => Some(NodeEvent::Back { height }),
                // A node down at start says so at once, as one taken out later does.
                (true, _, false) | (false, true, false) => {
                    s.last_error.map(|fault| NodeEvent::Unhealthy {
                        fault,
                        by: Cause::Check,
                        height,
                    })
                }
                _ => None,
            }
        };
        if let Some(event) = event {
            events::report(&self.metrics, &upstream.name, event);
        }
        self.refresh_best_height();
    }

    /// The check of a fallback or of a P-chain-only provider: one call, `platform.getHeight`; a
    /// bootstrapping node refuses it with a 503 ("not done bootstrapping"), read as such. So a
    /// fallback on standby costs two calls a minute with the default cadence.
    async fn run_height_check(&self, upstream: &Upstream, timeout: std::time::Duration) -> Check {
        let id = upstream_id();
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"platform.getHeight\",\"params\":{{}}}}"
        );
        let path = upstream.path(crate::methods::Family::Platform);
        let answer = upstream
            .post(path, body.into_bytes(), timeout, 1024 * 1024)
            .await;
        if let Err(e) = &answer {
            if e.fault == Fault::Throttled {
                return Check::Throttled(e.wait.unwrap_or(super::node::DEFAULT_HOLD));
            }
        }
        match answer_field(answer, id, "height") {
            Ok(crate::jsonrpc::Json::String(s)) => match s.parse::<u64>() {
                Ok(height) => Check::Answered {
                    bootstrapped: true,
                    height,
                },
                Err(_) => Check::Failed(Fault::BadAnswer),
            },
            Ok(_) => Check::Failed(Fault::BadAnswer),
            // The P-chain's answer while it bootstraps.
            Err(e) if e.fault == Fault::Http(503) => Check::Answered {
                bootstrapped: false,
                height: 0,
            },
            Err(e) => {
                tracing::debug!(upstream = %upstream.name, call = "platform.getHeight", fault = %e.fault, detail = %e.detail, "health check failed");
                Check::Failed(e.fault)
            }
        }
    }

    async fn run_check(&self, upstream: &Upstream, timeout: std::time::Duration) -> Check {
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
            upstream.post(
                upstream.path(crate::methods::Family::Info),
                boot_body.into_bytes(),
                timeout,
                max
            ),
            upstream.post(
                upstream.path(crate::methods::Family::Platform),
                height_body.into_bytes(),
                timeout,
                max
            ),
        );
        // Throttled is not down: the node is held, not judged.
        let throttled = [&boot, &height]
            .into_iter()
            .filter_map(|r| r.as_ref().err())
            .filter(|e| e.fault == Fault::Throttled)
            .map(|e| e.wait.unwrap_or(super::node::DEFAULT_HOLD))
            .max();
        if let Some(wait) = throttled {
            return Check::Throttled(wait);
        }
        let failed = |call: &str, e: AttemptError| {
            tracing::debug!(upstream = %upstream.name, call, fault = %e.fault, detail = %e.detail, "health check failed");
            Check::Failed(e.fault)
        };
        let bootstrapped = match answer_field(boot, boot_id, "isBootstrapped") {
            Ok(crate::jsonrpc::Json::Bool(b)) => b,
            Ok(_) => {
                let e = AttemptError::new(Fault::BadAnswer, "isBootstrapped is not a bool");
                return failed("info.isBootstrapped", e);
            }
            Err(e) => return failed("info.isBootstrapped", e),
        };
        let height = match answer_field(height, height_id, "height") {
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

    /// Asks a node its network and version (in parallel, within the health timeout) and records
    /// them; a failure leaves the identity to be asked again at the next check. A P-chain-only
    /// provider is asked its staking asset instead, which tells its network
    /// ([`super::identity::network_of_asset`]); the others are asked it too while the pool has
    /// such a provider.
    async fn ask_identity(&self, upstream: &Upstream, timeout: std::time::Duration) {
        let (net_id, ver_id, asset_id) = (upstream_id(), upstream_id(), upstream_id());
        let body = |id: u64, method: &str| {
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}").into_bytes()
        };
        let info = upstream.path(crate::methods::Family::Info);
        let platform = upstream.path(crate::methods::Family::Platform);
        let members = self.members();
        let p_only_members = members.upstreams.iter().any(|u| !u.info_api);
        let asked = |call: Option<_>| async move {
            match call {
                Some(call) => Some(call.await),
                None => None,
            }
        };
        let (net, ver, asset) = tokio::join!(
            asked(upstream.info_api.then(|| upstream.post(
                info,
                body(net_id, "info.getNetworkID"),
                timeout,
                64 * 1024
            ))),
            asked(upstream.info_api.then(|| upstream.post(
                info,
                body(ver_id, "info.getNodeVersion"),
                timeout,
                1024 * 1024
            ))),
            asked(p_only_members.then(|| upstream.post(
                platform,
                body(asset_id, "platform.getStakingAssetID"),
                timeout,
                64 * 1024
            ))),
        );
        let asset = match asset.map(|a| answer_field(a, asset_id, "assetID")) {
            Some(Ok(crate::jsonrpc::Json::String(s)))
                if s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                Some(s)
            }
            _ => None,
        };
        let network_id = match net.map(|n| answer_field(n, net_id, "networkID")) {
            Some(Ok(crate::jsonrpc::Json::String(s))) => s.parse::<u32>().ok(),
            Some(Ok(crate::jsonrpc::Json::Number(n))) => n.parse::<u32>().ok(),
            // A P-chain-only provider: the network its staking asset is on.
            None => asset.as_deref().and_then(|a| {
                let known: Vec<(u32, String)> = members
                    .upstreams
                    .iter()
                    .filter(|u| u.info_api)
                    .filter_map(|u| {
                        let id = u.identity.lock();
                        Some((id.network_id?, id.asset_id.clone()?))
                    })
                    .collect();
                super::identity::network_of_asset(a, &known)
            }),
            _ => None,
        };
        let version = match ver.map(|v| answer_field(v, ver_id, "version")) {
            Some(Ok(crate::jsonrpc::Json::String(s)))
                if s.len() <= 64 && s.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                // Shown on `/ext/health` and in a metric label: none of the node's own secrets.
                Some(upstream.secrets.scrub_text(&s).into_owned())
            }
            _ => None,
        };
        let name: &str = &upstream.name;
        let mut identity = upstream.identity.lock();
        let (old_version, old_network) = (identity.version.clone(), identity.network_id);
        identity.asked = network_id.map(|_| std::time::Instant::now());
        if network_id.is_some() {
            identity.network_id = network_id;
        }
        if asset.is_some() {
            identity.asset_id = asset;
        }
        if version.is_some() {
            identity.release = version.as_deref().and_then(|v| v.parse().ok());
            identity.version = version;
        }
        if (old_version.as_deref(), old_network)
            != (identity.version.as_deref(), identity.network_id)
        {
            let (v, n) = info_labels(old_version.as_deref(), old_network);
            let _ = self
                .metrics
                .upstream_info
                .remove_label_values(&[name, &v, &n]);
            let (v, n) = info_labels(identity.version.as_deref(), identity.network_id);
            self.metrics
                .upstream_info
                .with_label_values(&[name, &v, &n])
                .set(1);
        }
    }

    /// Sets the pool's network to `[network] id` before the first checks (so that no majority
    /// can settle another one meanwhile).
    pub(crate) fn expect_network(&self, configured: Option<u32>) {
        if let Some(id) = configured {
            let _ = self.set_network(id);
        }
    }

    /// After the first round of checks: the pool's network is `[network] id`, or the one more
    /// than half of the nodes reported; every node is judged against it.
    pub(crate) fn settle_network(&self, configured: Option<u32>) {
        self.expect_network(configured);
        self.network_judged.store(true, Ordering::Relaxed);
        let members = self.members();
        let reported = reported_networks(&members);
        if self.network.get().is_none() {
            if let Some(id) = super::identity::majority(&reported, members.upstreams.len()) {
                let _ = self.set_network(id);
            }
        }
        match self.network.get() {
            Some(id) => tracing::info!(
                network_id = id,
                configured = configured.is_some(),
                "the pool's network"
            ),
            None => tracing::warn!(
                reported = ?reported,
                "no network is reported by more than half of the nodes: none is enforced until one is (set [network] id to enforce one now)"
            ),
        }
        for u in &members.upstreams {
            self.judge_network(u);
        }
        self.refresh_best_height();
    }

    /// Settles the pool's network once more than half of its nodes report one, when it was not
    /// known at start (nodes down, or a tie); then judges every node against it.
    fn settle_network_late(&self) {
        // Before the start's own decision (`settle_network`, after the first round), or once
        // settled, there is nothing to do here.
        if self.network.get().is_some() || !self.network_judged.load(Ordering::Relaxed) {
            return;
        }
        let members = self.members();
        let reported = reported_networks(&members);
        if let Some(id) = super::identity::majority(&reported, members.upstreams.len()) {
            if self.set_network(id) {
                tracing::info!(
                    network_id = id,
                    "the pool's network (reported by more than half of the nodes)"
                );
            }
            for u in &members.upstreams {
                self.judge_network(u);
            }
        }
    }

    /// Marks a node on another network than the pool's (logged at error when it starts), or
    /// whose network is not known while the pool's is.
    fn judge_network(&self, upstream: &Upstream) {
        let expected = self.network.get().copied();
        let (mismatch, unknown) = {
            let identity = upstream.identity.lock();
            (
                identity.mismatch(expected),
                expected.is_some() && identity.network_id.is_none(),
            )
        };
        let event = {
            let mut s = upstream.state.lock();
            let event = match expected {
                Some(expected) if mismatch && !s.network_mismatch => {
                    Some(NodeEvent::NetworkMismatch {
                        reported: upstream.identity.lock().network_id,
                        expected,
                    })
                }
                // A node that is out already said why (a node that does not answer has no
                // network to read).
                _ if unknown && !s.network_unknown && !mismatch && s.healthy => {
                    Some(NodeEvent::NetworkUnknown)
                }
                _ => None,
            };
            s.network_unknown = unknown;
            s.network_mismatch = mismatch;
            event
        };
        if let Some(event) = event {
            events::report(&self.metrics, &upstream.name, event);
        }
        self.metrics
            .upstream_network_mismatch
            .with_label_values(&[&upstream.name])
            .set(i64::from(mismatch));
    }

    /// Drops the metric series of a node a reload removed (its name is gone from the config).
    pub(super) fn forget_metrics(&self, upstream: &Upstream) {
        let m = &self.metrics;
        let name: &str = &upstream.name;
        let _ = m.upstream_healthy.remove_label_values(&[name]);
        let _ = m.upstream_height.remove_label_values(&[name]);
        let _ = m.upstream_in_flight.remove_label_values(&[name]);
        let _ = m.upstream_cordoned.remove_label_values(&[name]);
        let _ = m.upstream_throttled.remove_label_values(&[name]);
        crate::metrics::remove_series_with(&m.upstream_method_cooldowns, "upstream", name);
        let _ = m.upstream_latency.remove_label_values(&[name]);
        let _ = m.upstream_network_mismatch.remove_label_values(&[name]);
        events::forget(m, name);
        self.forget_identity(upstream);
    }

    /// Sets the `snowgate_upstream_info` series of what a node reported.
    pub(super) fn publish_identity(&self, upstream: &Upstream) {
        let identity = upstream.identity.lock();
        let (v, n) = info_labels(identity.version.as_deref(), identity.network_id);
        self.metrics
            .upstream_info
            .with_label_values(&[&upstream.name, &v, &n])
            .set(1);
    }

    /// Drops the `snowgate_upstream_info` series of what a node reported (a reload replaced it:
    /// the new node under the name reports its own).
    pub(super) fn forget_identity(&self, upstream: &Upstream) {
        let identity = upstream.identity.lock();
        let (v, n) = info_labels(identity.version.as_deref(), identity.network_id);
        let _ = self
            .metrics
            .upstream_info
            .remove_label_values(&[&upstream.name, &v, &n]);
    }

    /// Judges the heights the nodes report now (never a height kept from the past: a node that
    /// left, restarted lower or reset moves the mark at once) and publishes who takes traffic.
    pub(super) fn refresh_best_height(&self) {
        let members = self.members();
        let reported: Vec<u64> = members
            .upstreams
            .iter()
            .filter_map(|u| u.state.lock().reported_height())
            .collect();
        let heights = Heights::judge(&reported, members.health.max_lag_blocks);
        if self.best_height.swap(heights.best, Ordering::Relaxed) != heights.best {
            self.best_moved_ms
                .store(crate::metrics::unix_ms(), Ordering::Relaxed);
        }
        self.height_floor.store(heights.floor, Ordering::Relaxed);
        self.height_ceiling
            .store(heights.ceiling, Ordering::Relaxed);
        self.judge_primaries(&members);
        let standby = self.primaries_serve.load(Ordering::Relaxed);
        self.metrics.best_height.set(heights.best as i64);
        for u in &members.upstreams {
            let mut s = u.state.lock();
            let name: &str = &u.name;
            // Lagging or back in sync: compared with the last verdict, under the node's lock,
            // so concurrent judgements report a change once. A fallback on standby is checked at
            // its own slow cadence: its height is not judged until it leaves standby.
            let lagging = health::lagging(&s, &heights) && !(u.fallback && standby);
            if lagging != s.lagging {
                s.lagging = lagging;
                // Out of lag because it went out altogether: that line is already written.
                let event = match s.height {
                    Some(height) if lagging => Some(NodeEvent::Lagging {
                        height,
                        best: heights.best,
                    }),
                    Some(height) if s.healthy && s.network_ok() => Some(NodeEvent::InSync {
                        height,
                        best: heights.best,
                    }),
                    _ => None,
                };
                if let Some(event) = event {
                    events::report(&self.metrics, name, event);
                }
            }
            // A fallback on standby counts as up while it is healthy (its height is not judged).
            let up = health::eligible(&s, &heights)
                || (u.fallback && standby && s.healthy && s.network_ok());
            self.metrics
                .upstream_healthy
                .with_label_values(&[name])
                .set(i64::from(up));
            if let Some(h) = s.height {
                self.metrics
                    .upstream_height
                    .with_label_values(&[name])
                    .set(h as i64);
            }
        }
    }
}

/// The `version` and `network_id` labels of `snowgate_upstream_info`.
fn info_labels(version: Option<&str>, network: Option<u32>) -> (String, String) {
    (
        version.unwrap_or("unknown").to_string(),
        network.map_or("unknown".to_string(), |n| n.to_string()),
    )
}

/// The `name` field of the result of a health-check call answered with `id` (a failed call's
/// category; nothing of the body is kept: a JSON-RPC error's message is not either).
fn answer_field(
    r: Result<Bytes, AttemptError>,
    id: u64,
    name: &str,
) -> Result<crate::jsonrpc::Json, AttemptError> {
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
}

/// The networks the members reported when last asked (a node never asked says none).
fn reported_networks(members: &Members) -> Vec<u32> {
    members
        .upstreams
        .iter()
        .filter_map(|u| u.identity.lock().network_id)
        .collect()
}
