//! The shared tier of a fleet: one Redis, or a Redis Cluster, that every snowgate instance reads and
//! writes, so that N instances share one cache and one set of quotas. Only built with a `[redis]`
//! section; without one, nothing here runs and nothing needs Redis.
//!
//! This module is the connection and its discipline, not what is stored: the cache
//! (`crate::cache::shared`), the global quotas (`crate::ratelimit::global`), the fleet's cordons
//! (`crate::upstream::cordons`) and usage (`crate::ratelimit::usage`) each own their keys and
//! formats. What they get from here:
//!
//! * **A bound on waiting.** Every command a request waits for is cut at `[redis] timeout`
//!   (default 25 ms): Redis slow or frozen costs a request at most that, once.
//! * **A circuit breaker** ([`breaker`]). A run of failed commands opens it, and then requests do
//!   not touch Redis at all (one atomic load), so a Redis outage costs them nothing. A watcher task
//!   pings Redis every second while it is up, and while it is down probes it with a growing,
//!   jittered backoff; the first answer closes the breaker and sharing resumes on its own. The
//!   tier starts open: Redis is used once it has answered.
//! * **Keys under `[redis] key_prefix` and the network** ([`Shared::network`]): every key is
//!   `{key_prefix}{network ID}:...`, the pool's settled network ([`network`]), so that several
//!   fleets share one Redis and fleets of different networks never read each other's answers,
//!   quotas, cordons or usage, even under one prefix. Before the network is settled nothing keyed
//!   by it is read or written (each user says what it does meanwhile).
//! * Reconnection is redis-rs's (`ConnectionManager`, the cluster connection's own slot map and
//!   reconnects); the breaker only decides whether requests try.
//!
//! The user and password of a Redis URL are never logged or shown: only
//! [`crate::config::redis::redact`]ed URLs are.

pub mod breaker;
pub mod network;

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge};

use network::{NetworkScope, Settled};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisFuture, ScriptInvocation, Value};

use crate::config::redis::redact;
use crate::config::RedisConfig;
use crate::metrics::Metrics;
pub use breaker::{Breaker, State};

/// How often the watcher pings a Redis that is up (a Redis that died while no request used it is
/// reported down within this).
const PING_EVERY: Duration = Duration::from_secs(1);

/// Why the tier cannot be built from `[redis]` ([`Shared::new`]): the key, the file or the
/// address (its password masked), and the reason.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// `redis.ca_file` cannot be read.
    #[error("`redis.ca_file` ({}): {error}", path.display())]
    CaFile {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// `redis.url` is not one redis-rs can use.
    #[error("`redis.url` ({shown}): {error}")]
    Url {
        /// The URL, its password masked.
        shown: String,
        error: redis::RedisError,
    },
    /// `redis.cluster` is not a cluster redis-rs can use.
    #[error("`redis.cluster` ({shown}): {error}")]
    Cluster {
        /// The nodes' URLs, their passwords masked.
        shown: String,
        error: redis::RedisError,
    },
}

/// Why a command did not give an answer. In every case the caller goes on as if there were no
/// shared tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedError {
    /// The breaker is open (or Redis was never reached): Redis was not asked.
    Unavailable,
    /// Redis did not answer within `[redis] timeout`.
    Timeout,
    /// Redis answered with an error, or the connection failed.
    Failed,
}

/// Why one probe of Redis failed: the watcher's reason, logged once per distinct text. redis-rs's
/// own errors are said as it words them; they name no password.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    /// A cluster's first connection failed.
    #[error("{0}")]
    Connect(redis::RedisError),
    /// A cluster's first connection did not open within the connect timeout.
    #[error("connect timed out")]
    ConnectTimeout,
    /// There is no connection to send the `PING` on.
    #[error("not connected")]
    NotConnected,
    /// The `PING` failed.
    #[error("{0}")]
    Ping(redis::RedisError),
    /// The `PING` got no answer in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}

/// The connection: one server (through redis-rs's reconnecting manager) or a cluster.
///
/// Either is replaced by a fresh one after every failed probe ([`Shared::renew`]): redis-rs
/// reconnects when a connection fails, not when it falls silent (a network partition, a NAT that
/// forgot the flow, a server that announced a reply and never sent it), and such a connection
/// would otherwise keep the breaker open for as long as TCP takes to notice, minutes.
// One per gateway: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Link {
    Single {
        client: redis::Client,
        config: ConnectionManagerConfig,
        manager: parking_lot::RwLock<ConnectionManager>,
    },
    /// The cluster's connection is made by the watcher's probes.
    Cluster {
        client: Box<ClusterClient>,
        conn: parking_lot::RwLock<Option<ClusterConnection>>,
    },
}

/// A connection handle for one command (both kinds are cheap clones of a shared handle).
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

struct SharedMetrics {
    /// The status page's events: Redis down and back.
    events: std::sync::Arc<crate::metrics::EventLog>,
    up: IntGauge,
    breaker: IntGauge,
    errors: IntCounterVec,
    /// `snowgate_shared_cache_network_conflict`.
    conflict: IntGauge,
}

impl SharedMetrics {
    fn new(metrics: &Metrics) -> SharedMetrics {
        metrics.show(crate::metrics::Part::Redis);
        SharedMetrics {
            events: metrics.events.clone(),
            up: metrics.redis_up.clone(),
            breaker: metrics.redis_breaker.clone(),
            errors: metrics.redis_errors.clone(),
            conflict: metrics.shared_conflict.clone(),
        }
    }
}

/// The shared tier (one per gateway, when `[redis]` is set).
pub struct Shared {
    link: Link,
    timeout: Duration,
    prefix: Box<str>,
    /// The network every key carries (see [`network`]).
    network: NetworkScope,
    breaker: Breaker,
    /// What the logs call this Redis (the URLs without credentials).
    shown: String,
    /// The last reason logged for Redis being unusable (each reason is logged once).
    last_error: parking_lot::Mutex<Option<String>>,
    metrics: SharedMetrics,
}

impl Shared {
    /// Builds the tier from `[redis]` without any I/O: the watcher ([`Shared::spawn_watcher`])
    /// connects, and until it has, requests do without Redis.
    pub fn new(config: &RedisConfig, metrics: &Metrics) -> Result<Arc<Shared>, RedisSetupError> {
        let timeout = config.timeout;
        let shown = config
            .urls()
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", ");
        // rustls needs one process-wide crypto provider; another part of the process may have
        // installed it already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs = match &config.ca_file {
            Some(path) => Some(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(
                    std::fs::read(path).map_err(|error| RedisSetupError::CaFile {
                        path: path.clone(),
                        error,
                    })?,
                ),
            }),
            None => None,
        };
        // Connecting may take longer than one command may wait: it happens off the request path.
        let connect_timeout = (timeout * 40).max(Duration::from_secs(1));
        let link = match &config.url {
            Some(url) => {
                let client = match certs {
                    Some(certs) => redis::Client::build_with_tls(url.as_str(), certs),
                    None => redis::Client::open(url.as_str()),
                }
                .map_err(|error| RedisSetupError::Url {
                    shown: redact(url),
                    error,
                })?;
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(1));
                let manager =
                    ConnectionManager::new_lazy_with_config(client.clone(), manager_config.clone())
                        .map_err(|error| RedisSetupError::Url {
                            shown: redact(url),
                            error,
                        })?;
                Link::Single {
                    client,
                    config: manager_config,
                    manager: parking_lot::RwLock::new(manager),
                }
            }
            None => {
                let mut builder = ClusterClient::builder(config.cluster.iter().map(String::as_str));
                if let Some(certs) = certs {
                    builder = builder.certs(certs);
                }
                let client = builder
                    .connection_timeout(connect_timeout)
                    .response_timeout(connect_timeout)
                    .retries(1)
                    .build()
                    .map_err(|error| RedisSetupError::Cluster {
                        shown: shown.clone(),
                        error,
                    })?;
                Link::Cluster {
                    client: Box::new(client),
                    conn: parking_lot::RwLock::new(None),
                }
            }
        };
        let metrics = SharedMetrics::new(metrics);
        metrics.breaker.set(State::Open as i64);
        Ok(Arc::new(Shared {
            link,
            timeout,
            prefix: config.key_prefix.clone().into_boxed_str(),
            network: NetworkScope::new(&config.key_prefix),
            breaker: Breaker::new(State::Open),
            shown,
            last_error: parking_lot::Mutex::new(None),
            metrics,
        }))
    }

    /// Whether requests use Redis now (the breaker is closed).
    pub fn available(&self) -> bool {
        self.breaker.closed()
    }

    /// The breaker's state.
    pub fn state(&self) -> State {
        self.breaker.state()
    }

    /// `[redis] timeout`: how long a request waits for one command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `[redis] key_prefix`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The network the keys carry: [`NetworkScope::prefix`] is `{key_prefix}{network ID}:` once
    /// the pool's network is settled.
    pub fn network(&self) -> &NetworkScope {
        &self.network
    }

    /// The pool's network is settled on `id` (or was told again): every key carries it from now
    /// on. Told another network than before, nothing is shared any more, with one error in the
    /// log and `snowgate_shared_cache_network_conflict` at 1.
    pub fn share_network(&self, id: u32) {
        match self.network.settle(id) {
            Settled::First => {
                tracing::info!(
                    network_id = id,
                    "shared tier: keys carry the pool's network"
                );
            }
            Settled::Same => {}
            Settled::Conflict { kept, now } => {
                if self.metrics.conflict.get() == 0 {
                    self.metrics.conflict.set(1);
                    tracing::error!(
                        network_id = kept,
                        told = now,
                        "shared tier: told another network than its keys carry; nothing is shared until restarted"
                    );
                }
            }
        }
    }

    /// A connection handle, if a request may use Redis now.
    fn conn(&self) -> Option<Conn> {
        if !self.breaker.closed() {
            return None;
        }
        self.any_conn()
    }

    /// A connection handle whatever the breaker says (the watcher's probes).
    fn any_conn(&self) -> Option<Conn> {
        match &self.link {
            Link::Single { manager, .. } => Some(Conn::Single(manager.read().clone())),
            Link::Cluster { conn, .. } => conn.read().clone().map(Conn::Cluster),
        }
    }

    /// Drops the connection for a fresh one (after a failed probe; see [`Link`]): commands still
    /// waiting on the old one end at their timeout, the next probe connects anew.
    fn renew(&self) {
        match &self.link {
            Link::Single {
                client,
                config,
                manager,
            } => {
                if let Ok(fresh) =
                    ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                {
                    *manager.write() = fresh;
                }
            }
            Link::Cluster { conn, .. } => *conn.write() = None,
        }
    }

    /// Runs one command for a request: skipped while the breaker is open, cut at `[redis]
    /// timeout`, its failure counted against the breaker. `op` labels the error metric.
    pub async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        cmd: &Cmd,
    ) -> Result<T, SharedError> {
        let mut conn = self.conn().ok_or(SharedError::Unavailable)?;
        let result = tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await;
        self.settle(op, result)
    }

    /// Runs one script for a request (EVALSHA, loading it on the first use), as [`Shared::query`].
    pub async fn invoke<T: FromRedisValue>(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, SharedError> {
        let mut conn = self.conn().ok_or(SharedError::Unavailable)?;
        let result =
            tokio::time::timeout(self.timeout, invocation.invoke_async::<T>(&mut conn)).await;
        self.settle(op, result)
    }

    fn settle<T>(
        &self,
        op: &'static str,
        result: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, SharedError> {
        let (error, opened) = match result {
            Ok(Ok(v)) => {
                self.breaker.success();
                return Ok(v);
            }
            Ok(Err(e)) => {
                tracing::debug!(op, error = %e, "redis command failed");
                let opened = self.breaker.failure();
                if opened {
                    // What Redis said (`OOM command not allowed...`), once per distinct text.
                    self.report(&format!("{op}: {e}"));
                }
                (SharedError::Failed, opened)
            }
            Err(_) => (SharedError::Timeout, self.breaker.timeout()),
        };
        let kind = if error == SharedError::Timeout {
            "timeout"
        } else {
            "error"
        };
        self.metrics.errors.with_label_values(&[op, kind]).inc();
        if opened {
            self.opened(kind);
        }
        Err(error)
    }

    fn opened(&self, why: &str) {
        // A command that timed out may have found a connection that fell silent: the watcher's
        // first probe gets a fresh one.
        self.renew();
        self.metrics.up.set(0);
        self.metrics.breaker.set(State::Open as i64);
        tracing::warn!(redis = %self.shown, reason = why, "shared tier: Redis down, answering without it until it is back");
        self.metrics.events.push(crate::metrics::Event::now(
            "redis",
            None,
            "down",
            why,
            format!("Redis down ({why}): answering without it until it is back"),
        ));
    }

    /// One probe of Redis: connects if needed (a cluster's first connection), then `PING`, both
    /// within a probe's time (the connect timeout while Redis is down, else `[redis] timeout`).
    async fn probe(&self) -> Result<(), ProbeError> {
        let connect_wait = (self.timeout * 40).max(Duration::from_secs(1));
        if let Link::Cluster { client, conn } = &self.link {
            if conn.read().is_none() {
                match tokio::time::timeout(connect_wait, client.get_async_connection()).await {
                    Ok(Ok(c)) => {
                        *conn.write() = Some(c);
                    }
                    Ok(Err(e)) => return Err(ProbeError::Connect(e)),
                    Err(_) => return Err(ProbeError::ConnectTimeout),
                }
            }
        }
        let mut conn = self.any_conn().ok_or(ProbeError::NotConnected)?;
        // While down, the command may also have to (re)connect: give it the connect timeout.
        let wait = if self.breaker.closed() {
            self.timeout
        } else {
            connect_wait
        };
        let ping = redis::cmd("PING");
        let ping = ping.query_async::<String>(&mut conn);
        match tokio::time::timeout(wait, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ProbeError::Ping(e)),
            Err(_) => Err(ProbeError::NoAnswer(wait)),
        }
    }

    /// Logs why Redis cannot be used, once per distinct reason (the watcher probes every few
    /// seconds while it is down).
    fn report(&self, why: &str) {
        let mut last = self.last_error.lock();
        if last.as_deref() != Some(why) {
            tracing::warn!(redis = %self.shown, reason = %why, "shared tier: Redis unavailable, answering without it");
            *last = Some(why.to_string());
        }
    }

    /// Starts the watcher: while Redis is up it pings it every second (a Redis that died unused
    /// is reported down), while it is down it probes it with backoff, and closes the breaker on
    /// the first answer. Stops when `stop` flips to true.
    pub fn spawn_watcher(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let wait = if this.breaker.closed() {
                    PING_EVERY
                } else {
                    this.breaker
                        .backoff(rand::Rng::gen_range(&mut rand::thread_rng(), 0.5..=1.0))
                };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
                this.check().await;
            }
        });
    }

    /// One round of the watcher (also run once before the gateway serves, so that a Redis that
    /// is up is used from the first request).
    pub async fn check(&self) {
        if self.breaker.closed() {
            if let Err(why) = self.probe().await {
                self.metrics
                    .errors
                    .with_label_values(&["ping", "error"])
                    .inc();
                if self.breaker.open() {
                    self.opened("ping failed");
                }
                self.report(&why.to_string());
            }
            return;
        }
        self.breaker.probing();
        self.metrics.breaker.set(State::HalfOpen as i64);
        match self.probe().await {
            Ok(()) => {
                self.breaker.probe_succeeded();
                self.metrics.up.set(1);
                self.metrics.breaker.set(State::Closed as i64);
                *self.last_error.lock() = None;
                tracing::info!(redis = %self.shown, "shared tier: Redis up");
                self.metrics.events.push(crate::metrics::Event::now(
                    "redis",
                    None,
                    "up",
                    "recovered",
                    "Redis up: the shared tier is used again".to_string(),
                ));
            }
            Err(why) => {
                self.breaker.probe_failed();
                self.metrics.breaker.set(State::Open as i64);
                self.report(&why.to_string());
                self.renew();
            }
        }
    }
}
