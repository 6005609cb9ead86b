//! The active health checks' I/O: one task per node that asks it `info.isBootstrapped` and
//! `platform.getHeight` every `[health] interval`, folds the verdict into its
//! [`HealthState`](super::health::HealthState) and judges the pool's heights afresh. The rules
//! themselves are pure, in [`super::health`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::answer;
use super::balance::PeakEwma;
use super::health::{self, Check, Fault, Heights, Thresholds};
use super::node::{upstream_id, AttemptError, Upstream};
use super::pool::Pool;
use crate::call::AnswerKind;

impl Pool {
    /// Starts one health-check task per upstream, each checking first one interval from now (the
    /// gateway runs a first round itself before it serves); they stop when `shutdown` flips to
    /// true.
    pub(crate) fn spawn_health_checks(
        self: &Arc<Self>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
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
