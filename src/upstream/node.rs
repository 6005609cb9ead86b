//! One node behind the gateway ([`Upstream`]): its connections, health record, latency
//! estimate, pending requests and concurrency slots, and the exchange of one JSON-RPC body with
//! it ([`Upstream::post`]), whose failure is an [`AttemptError`]: a public [`Fault`] category
//! plus detail for the logs only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use parking_lot::Mutex;

use super::balance::{self, PeakEwma};
use super::conn;
use super::cordons::CordonedBy;
use super::health::{Fault, HealthState};
use super::pending::Pending;
use crate::call::{Answer, AnswerKind, CacheStatus};
use crate::config::parse_base_url;
use crate::config::upstream::{CaFileError, HeaderError, UrlError};
use crate::config::{ForwardConfig, UpstreamConfig};
use crate::error::ProxyError;
use crate::metrics::Metrics;

/// Why one attempt on one node failed: the public category, and detail for the logs only (it
/// may name the node's address, never a body).
#[derive(Debug, Clone)]
pub(super) struct AttemptError {
    pub(super) fault: Fault,
    pub(super) detail: String,
    /// A throttled attempt's wait: the node's `Retry-After` (1 s when it gave none or one that
    /// cannot be read), before `[health] max_hold_off` caps it.
    pub(super) wait: Option<Duration>,
}

/// The hold of a node that throttles without saying for how long.
pub(super) const DEFAULT_HOLD: Duration = Duration::from_secs(1);

/// The longest wait a node's `Retry-After` is read as (the pool holds a node for at most
/// `[health] max_hold_off` anyway; this bounds what a pinned call's client is told).
const LONGEST_HOLD: Duration = Duration::from_secs(3600);

impl AttemptError {
    pub(super) fn new(fault: Fault, detail: impl Into<String>) -> AttemptError {
        AttemptError {
            fault,
            detail: detail.into(),
            wait: None,
        }
    }

    /// The request never left: no connection could be opened.
    pub(super) fn never_left(&self) -> bool {
        matches!(
            self.fault,
            Fault::ConnectRefused
                | Fault::ConnectTimeout
                | Fault::ConnectFailed
                | Fault::TlsHandshake
        )
    }

    pub(super) fn outcome(&self) -> &'static str {
        match self.fault {
            Fault::ConnectRefused
            | Fault::ConnectTimeout
            | Fault::ConnectFailed
            | Fault::TlsHandshake => "connect_error",
            Fault::ConnectionLost | Fault::InvalidHttp => "transport_error",
            Fault::Timeout => "timeout",
            Fault::Http(s) if s >= 500 => "http_5xx",
            Fault::Http(_) | Fault::RefusedSmallBody => "http_error",
            Fault::BadAnswer
            | Fault::TooLarge(_)
            | Fault::RpcError
            | Fault::NotBootstrapped
            | Fault::NetworkUnknown => "bad_answer",
            Fault::InvalidRequest => "invalid_request",
            Fault::Throttled => "throttled",
        }
    }

    /// The client's error: the node's name and the category, nothing the node sent.
    pub(super) fn into_proxy_error(self, upstream: &str) -> ProxyError {
        let upstream = upstream.to_string();
        match self.fault {
            Fault::Timeout => ProxyError::UpstreamTimeout { upstream },
            Fault::Throttled => ProxyError::UpstreamsThrottled {
                retry_after_secs: self.wait.unwrap_or(DEFAULT_HOLD).as_secs().max(1),
            },
            // The request's size is at fault, not the node: the caller's error.
            fault if fault.refuses_the_body() => ProxyError::RefusedAsTooLarge { upstream },
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

/// Why a node of `[[upstreams]]` cannot be set up (when the pool is built, or by a reload): its
/// URL, its headers, its CA file, its connections. Never quotes the URL or a header's value (they
/// may hold a key or a password).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The URL is not a node base URL.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// A header of its `headers` cannot be sent.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The URL's `user:password` do not make a header value.
    #[error("the URL's credentials cannot be sent")]
    Credentials,
    /// Its `tls_ca_file` cannot be used.
    #[error("upstream {upstream}: tls_ca_file: {error}")]
    CaFile {
        upstream: String,
        error: CaFileError,
    },
    /// Its connections (Host header, TLS client) cannot be set up.
    #[error(transparent)]
    Conn(#[from] conn::ConnError),
}

/// One node behind the gateway.
pub(crate) struct Upstream {
    /// The configured name.
    pub(crate) name: Arc<str>,
    connections: conn::Connections,
    /// The info, P-chain and P-chain ProposerVM API paths on this upstream (a provider's prefix
    /// or own paths; the ProposerVM service is the P-chain's path plus `/proposervm`).
    paths: (Box<str>, Box<str>, Box<str>),
    /// `role = "fallback"`.
    pub(crate) fallback: bool,
    /// `weight`.
    pub(super) weight: u32,
    /// `apis` names the info API: `info.*` calls may be sent to it (a P-chain-only provider's
    /// does not), and it is asked its network by `info.getNetworkID`.
    pub(crate) info_api: bool,
    /// `health_interval`: how often it is checked instead of `[health] interval`.
    pub(super) health_interval: Option<Duration>,
    /// The per-method breaker: runs of failures by method (its registry index, with its name for
    /// `/ext/health`); only methods that failed lately are here.
    methods: Mutex<std::collections::HashMap<usize, (Arc<str>, super::health::MethodRun)>>,
    /// How many entries `methods` has: read without its lock on the common path (none).
    methods_tracked: AtomicUsize,
    pub(super) state: Mutex<HealthState>,
    /// Its network and version, as it last said.
    pub(super) identity: Mutex<super::identity::Identity>,
    pub(super) ewma: Mutex<PeakEwma>,
    /// Requests waiting for or holding a slot on this node, with their start times.
    pending: Mutex<Pending>,
    pub(super) in_flight: AtomicUsize,
    /// Cordoned (by the file, an admin or the fleet): it takes no new calls (pinned ones
    /// excepted) until no source cordons it. Kept across reloads that keep the name.
    pub(super) cordoned: std::sync::atomic::AtomicBool,
    /// Who cordons it ([`CordonedBy`]'s bits): `cordoned` is whether any source does. Both are
    /// set together, under the pool's cordon lock (`cordoning.rs`).
    cordoned_by: std::sync::atomic::AtomicU8,
    /// Caps the requests in flight to this node (`[upstream] max_concurrency`).
    pub(super) permits: tokio::sync::Semaphore,
    /// This node's metric series, resolved once.
    pub(super) metrics: UpstreamMetrics,
    /// Its own secrets (header values, credentials, path keys), scrubbed from its error answers
    /// and its reported version before either leaves snowgate.
    pub(super) secrets: super::secrets::Secrets,
    /// What it was built from, to tell on a reload whether it changed.
    recipe: Recipe,
    /// Taken out by a reload: its health checks stop at once, its idle connections close; the
    /// calls it has finish.
    retired: tokio::sync::watch::Sender<bool>,
}

/// What an [`Upstream`] is built from: its table, the `[upstream]` settings baked into its
/// connections and slots, and its CA file's bytes.
#[derive(PartialEq)]
struct Recipe {
    table: UpstreamConfig,
    connect_timeout: Duration,
    pool_max_idle: usize,
    max_concurrency: usize,
    ca: Option<Vec<u8>>,
}

/// The metric series of one upstream.
pub(super) struct UpstreamMetrics {
    pub(super) in_flight: prometheus::IntGauge,
    pub(super) latency: prometheus::Histogram,
    pub(super) healthy: prometheus::IntGauge,
    pub(super) requests: crate::metrics::CounterTable,
    pub(super) cordoned: prometheus::IntGauge,
    pub(super) throttled: prometheus::IntGauge,
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
    "invalid_request",
    "throttled",
];

impl UpstreamMetrics {
    fn new(metrics: &Metrics, name: &str) -> UpstreamMetrics {
        UpstreamMetrics {
            in_flight: metrics.upstream_in_flight.with_label_values(&[name]),
            latency: metrics.upstream_latency.with_label_values(&[name]),
            healthy: metrics.upstream_healthy.with_label_values(&[name]),
            cordoned: metrics.upstream_cordoned.with_label_values(&[name]),
            throttled: metrics.upstream_throttled.with_label_values(&[name]),
            requests: crate::metrics::CounterTable::new(
                metrics.upstream_requests.clone(),
                1,
                UPSTREAM_OUTCOMES,
            ),
        }
    }
}

impl Upstream {
    /// Sets its cordon, and the gauge that shows it.
    fn set_cordoned(&self, on: bool) {
        self.cordoned.store(on, Ordering::Relaxed);
        self.metrics.cordoned.set(i64::from(on));
    }

    /// Who cordons it now.
    pub(super) fn cordoned_by(&self) -> CordonedBy {
        CordonedBy::from_bits(self.cordoned_by.load(Ordering::Relaxed))
    }

    /// Sets who cordons it, its cordon (whether any does) and the gauge.
    pub(super) fn set_cordoned_by(&self, by: CordonedBy) {
        self.cordoned_by.store(by.bits(), Ordering::Relaxed);
        self.set_cordoned(by.any());
    }

    pub(super) fn new(
        config: &UpstreamConfig,
        forward: &ForwardConfig,
        metrics: &Metrics,
    ) -> Result<Upstream, UpstreamError> {
        let base = parse_base_url(&config.url)?;
        let mut headers = config.request_headers()?;
        if let Some(credentials) = &base.credentials {
            use base64::Engine as _;
            let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
            let mut value = http::HeaderValue::from_str(&format!("Basic {basic}"))
                .map_err(|_| UpstreamError::Credentials)?;
            value.set_sensitive(true);
            headers.push((http::header::AUTHORIZATION, value));
        }
        let idle_timeout = Duration::from_secs(60);
        let connections = if base.tls {
            // The TLS config is made here, once per upstream, never per connection.
            let extra_roots = match &config.tls_ca_file {
                Some(path) => crate::config::upstream::read_ca_file(path).map_err(|error| {
                    UpstreamError::CaFile {
                        upstream: config.name.clone(),
                        error,
                    }
                })?,
                None => Vec::new(),
            };
            let tls = conn::TlsClient::new(&config.name, base.authority.host(), extra_roots)?;
            conn::Connections::https(
                &base.authority,
                tls,
                forward.connect_timeout,
                forward.pool_max_idle,
                idle_timeout,
            )?
        } else {
            conn::Connections::new(
                &base.authority,
                forward.connect_timeout,
                forward.pool_max_idle,
                idle_timeout,
            )?
        }
        .with_headers(config.host_header.as_deref(), &headers);
        let secrets = super::secrets::Secrets::of_upstream(config, &base, &headers);
        let (info, platform) = config.api_paths(&base);
        let proposervm = format!("{platform}/proposervm");
        Ok(Upstream {
            name: config.name.as_str().into(),
            connections,
            paths: (info.into(), platform.into(), proposervm.into()),
            fallback: config.role == crate::config::Role::Fallback,
            weight: config.weight.max(1),
            info_api: config.serves_info(),
            health_interval: config.health_interval,
            methods: Mutex::new(std::collections::HashMap::new()),
            methods_tracked: AtomicUsize::new(0),
            state: Mutex::new(HealthState::default()),
            identity: Mutex::new(super::identity::Identity::default()),
            ewma: Mutex::new(PeakEwma::new(Instant::now())),
            pending: Mutex::new(Pending::default()),
            in_flight: AtomicUsize::new(0),
            cordoned: std::sync::atomic::AtomicBool::new(false),
            cordoned_by: std::sync::atomic::AtomicU8::new(0),
            permits: tokio::sync::Semaphore::new(forward.max_concurrency),
            metrics: UpstreamMetrics::new(metrics, &config.name),
            secrets,
            recipe: Self::recipe(config, forward),
            retired: tokio::sync::watch::Sender::new(false),
        })
    }

    fn recipe(config: &UpstreamConfig, forward: &ForwardConfig) -> Recipe {
        Recipe {
            // The file's cordon is applied to the node in place (`cordoning.rs`): not a change.
            table: UpstreamConfig {
                cordoned: false,
                ..config.clone()
            },
            connect_timeout: forward.connect_timeout,
            pool_max_idle: forward.pool_max_idle,
            max_concurrency: forward.max_concurrency,
            // A CA file replaced under the same name (a rotation) is a change too.
            ca: config
                .tls_ca_file
                .as_ref()
                .map(|path| std::fs::read(path).unwrap_or_default()),
        }
    }

    /// Whether this node is what `config` and `forward` would build (a reload keeps it).
    pub(super) fn made_from(&self, config: &UpstreamConfig, forward: &ForwardConfig) -> bool {
        self.recipe == Self::recipe(config, forward)
    }

    /// Takes it out for good (a reload removed or replaced it).
    pub(super) fn retire(&self) {
        self.retired.send_replace(true);
        self.connections.close_idle();
    }

    /// Flips to true when the node is retired.
    pub(super) fn retirement(&self) -> tokio::sync::watch::Receiver<bool> {
        self.retired.subscribe()
    }

    /// The path of `family`'s API on this upstream.
    pub(super) fn path(&self, family: crate::methods::Family) -> &str {
        match family {
            crate::methods::Family::Info => &self.paths.0,
            crate::methods::Family::Platform => &self.paths.1,
            crate::methods::Family::ProposerVm => &self.paths.2,
            // Never asked: the gateway answers the health API itself (`crate::stack::Forward`).
            crate::methods::Family::Health => crate::jsonrpc::http::HEALTH_PATH,
        }
    }

    /// Sends one JSON-RPC body to `path` and returns the answer body (HTTP 200 only).
    pub(super) async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Bytes, AttemptError> {
        self.post_with(path, b"", body, timeout, max_bytes).await
    }

    /// [`Upstream::post`] with header lines of the request's own (its trace context).
    pub(super) async fn post_with(
        &self,
        path: &str,
        own_headers: &[u8],
        body: Vec<u8>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Bytes, AttemptError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let reply = self
            .connections
            .post_with(path, own_headers, &body, max_bytes, deadline)
            .await
            .map_err(|e| match e {
                conn::SendError::Connect(fault, d) => AttemptError::new(fault, d),
                conn::SendError::Transport(d) => AttemptError::new(Fault::ConnectionLost, d),
                conn::SendError::Malformed(d) => AttemptError::new(Fault::InvalidHttp, d),
                conn::SendError::TooLarge(n) => {
                    AttemptError::new(Fault::TooLarge(n), format!("answer larger than {n} bytes"))
                }
                conn::SendError::Timeout => AttemptError::new(Fault::Timeout, "no answer in time"),
                // The path may hold a provider's key: never quoted.
                conn::SendError::InvalidPath => {
                    AttemptError::new(Fault::InvalidRequest, "request path is not valid")
                }
            })?;
        if reply.status != StatusCode::OK {
            // The body is not kept: a node may echo the request, and with it a password.
            let status = reply.status.as_u16();
            // A provider over its plan's rate: held, not failed (503 only when it says for how
            // long: a 503 alone is a node that cannot serve).
            if status == 429 || (status == 503 && reply.retry_after.is_some()) {
                let wait = match reply.retry_after {
                    Some(conn::RetryAfter::Seconds(s)) => {
                        Duration::from_secs(s.max(1)).min(LONGEST_HOLD)
                    }
                    _ => DEFAULT_HOLD,
                };
                return Err(AttemptError {
                    fault: Fault::Throttled,
                    detail: format!("HTTP status {status}"),
                    wait: Some(wait),
                });
            }
            let fault = if status == 413 && body.len() < super::health::SMALL_BODY {
                Fault::RefusedSmallBody
            } else {
                Fault::Http(status)
            };
            return Err(AttemptError::new(fault, format!("HTTP status {status}")));
        }
        Ok(reply.body)
    }

    /// Whether the method of registry index `method` is cooling on this node at `now`.
    pub(super) fn method_cooling(&self, method: usize, now: Instant) -> bool {
        if self.methods_tracked.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.methods
            .lock()
            .get(&method)
            .is_some_and(|(_, run)| run.cooling(now))
    }

    /// A call of `spec` failed with `fault` at `now`; whether that started a cooling period
    /// (`threshold` failures in a row, for `cooldown`).
    pub(super) fn method_failed(
        &self,
        spec: &crate::methods::MethodSpec,
        fault: Fault,
        now: Instant,
        threshold: u32,
        cooldown: Duration,
    ) -> bool {
        if !fault.counts_against_method() {
            return false;
        }
        let mut methods = self.methods.lock();
        let (_, run) = methods
            .entry(spec.index)
            .or_insert_with(|| (spec.name.as_str().into(), Default::default()));
        let opened = run.failed(fault, now, threshold, cooldown);
        self.methods_tracked.store(methods.len(), Ordering::Relaxed);
        opened
    }

    /// A call of the method of registry index `method` was answered: its run of failures ends
    /// (a cooling period runs its course).
    pub(super) fn method_answered(&self, method: usize, now: Instant) {
        if self.methods_tracked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut methods = self.methods.lock();
        if methods.get(&method).is_some_and(|(_, run)| run.over(now)) {
            methods.remove(&method);
        }
        self.methods_tracked.store(methods.len(), Ordering::Relaxed);
    }

    /// Forgets every method's run (the node left the pool or came back: what failed then was the
    /// node, not a method).
    pub(super) fn forget_method_runs(&self) {
        self.methods.lock().clear();
        self.methods_tracked.store(0, Ordering::Relaxed);
    }

    /// The methods cooling on this node at `now`, by name.
    pub(super) fn cooling_methods(&self, now: Instant) -> Vec<String> {
        let mut names: Vec<String> = self
            .methods
            .lock()
            .values()
            .filter(|(_, run)| run.cooling(now))
            .map(|(name, _)| name.to_string())
            .collect();
        names.sort();
        names
    }

    pub(super) fn snapshot(&self) -> HealthState {
        self.state.lock().clone()
    }

    /// Peak-EWMA load, where a request still in flight counts as at least as slow as its age so
    /// far: a node that has just turned slow is avoided before its first slow answer arrives.
    pub(super) fn load(&self) -> f64 {
        let (count, oldest) = {
            let p = self.pending.lock();
            (p.count, p.oldest())
        };
        let age = oldest.map_or(0.0, |t| t.elapsed().as_nanos() as f64);
        balance::load(self.ewma.lock().estimate_ns().max(age), count)
    }

    /// Registers a request as pending until the guard is dropped (also when its future is
    /// cancelled, so the count never leaks).
    pub(super) fn begin(&self, now: Instant) -> PendingGuard<'_> {
        let seq = self.pending.lock().begin(now);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        PendingGuard {
            upstream: self,
            seq,
        }
    }
}

pub(super) struct PendingGuard<'a> {
    upstream: &'a Upstream,
    seq: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.upstream.pending.lock().end(self.seq);
        self.upstream.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A fresh id for a request to a node: random 64 bits, so a node (or anyone on its connection)
/// cannot prepare an answer to a request it has not seen.
pub(super) fn upstream_id() -> u64 {
    rand::random()
}

pub(super) fn answer_from(kind: AnswerKind, payload: Bytes, upstream: &Upstream) -> Answer {
    Answer {
        kind,
        payload,
        upstream: Some(upstream.name.clone()),
        upstream_height: upstream.state.lock().height,
        cache: CacheStatus::Bypass,
        trust: crate::call::Trust::Vouched,
    }
}
