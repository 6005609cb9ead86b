//! Assembling a running gateway from a [`Config`]: the pool and its health checks, the stack, the
//! server; and assembling it again from the file on a reload ([`reload`]). Tests, `snowgate
//! serve` and `snowgate demo` all start it through here.
//!
//! What a gateway is made of comes in two lifetimes. The `Core` lives as long as the gateway:
//! the pool (whose nodes a reload changes in place), the cache (which survives a reload), the
//! fleet's Redis, the metrics, the drain flag. A `Generation` is what one version of the config
//! builds on top of it: the method registry (built once, by the config's validation, and handed
//! to the core's cache and to every layer that reads it), the rate limiter, the room for request
//! bodies, and the [`Stack`] they make, which the server reads per request from one `ArcSwap`. A reload builds
//! the next generation beside the one serving and swaps the stack in one store: a request runs
//! wholly on the generation it started on.

pub mod reload;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::cache::shared::SharedCache;
use crate::cache::AnswerCache;
use crate::call::{BestHeight, ReloadReport};
use crate::config::{Config, ConfigError};
use crate::health::HealthApi;
use crate::http::admin::Admin;
use crate::http::decode::Decoding;
use crate::http::record::RequestLog;
use crate::http::request_body::AddressRooms;
use crate::http::request_id::RequestIdLayer;
use crate::http::router::Routes;
use crate::http::status::StatusBoard;
use crate::http::trace::TraceLayer;
use crate::http::Surface;
use crate::logging::FilterError;
use crate::methods::Registry;
use crate::metrics::{CounterTable, HistogramTable, Metrics, OUTCOMES};
use crate::policy::AdminKeys;
use crate::ratelimit::usage::{Book, Usage};
use crate::ratelimit::{Limiter, Quota};
use crate::shared::{RedisSetupError, Shared};
use crate::stack::{SharedRpc, Stack};
use crate::upstream::{Pool, UpstreamError};

pub use reload::{ConfigSource, ReloadError};

/// Why a gateway did not start, named the way an operator reads it (the key, the address, the
/// node); `snowgate serve` prints it and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config is invalid, or its file cannot be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `server.listen` or `admin.listen` cannot be listened on.
    #[error("cannot listen on {addr} (`{key}`): {source}")]
    Listen {
        /// The config key of the address.
        key: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A bound listener's own address cannot be read.
    #[error(transparent)]
    Address(std::io::Error),
    /// A node of `[[upstreams]]` cannot be set up (its URL, headers, TLS roots), as the pool
    /// says it.
    #[error(transparent)]
    Pool(#[from] UpstreamError),
    /// The fleet's Redis (`[redis]`) cannot be set up.
    #[error(transparent)]
    Redis(#[from] RedisSetupError),
    /// `[log] filter` cannot be applied.
    #[error(transparent)]
    LogFilter(#[from] FilterError),
}

/// A running gateway. Stop it with [`Gateway::shutdown`] (drain grace, then drain); dropping it
/// stops accepting and drains the connections without the grace, in the background.
pub struct Gateway {
    addr: SocketAddr,
    /// The admin listener's address (`[admin] listen`).
    admin_addr: Option<SocketAddr>,
    live: Arc<reload::Live>,
    drain_grace: Duration,
    stop: watch::Sender<bool>,
    /// The servers: the public listener's, and the admin listener's.
    done: Vec<tokio::task::JoinHandle<()>>,
}

/// Connections the admin listener takes at once: enough for scrapers and a few pages, and its
/// own, so a flood on the public port never locks the operator out.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

impl Gateway {
    /// Validates `config`, binds `config.server.listen` and starts serving.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        let registry = config.check()?;
        let listener = bind(&config).await?;
        Gateway::launch(config, registry, listener, None).await
    }

    /// Starts serving on an already bound listener (tests bind `127.0.0.1:0`). With no config
    /// source, [`Gateway::reload`] and `POST /snowgate/reload` answer that there is no file.
    pub async fn start_on(config: Config, listener: TcpListener) -> Result<Gateway, StartError> {
        let registry = config.check()?;
        Gateway::launch(config, registry, listener, None).await
    }

    /// Reads the config from `source` and starts serving on `listener` (or on the config's
    /// `server.listen` when `None`); a reload reads `source` again.
    pub async fn start_from(
        source: ConfigSource,
        listener: Option<TcpListener>,
    ) -> Result<Gateway, StartError> {
        let config = source.read()?;
        let registry = source.check(&config)?;
        let listener = match listener {
            Some(l) => l,
            None => bind(&config).await?,
        };
        Gateway::launch(config, registry, listener, Some(source)).await
    }

    /// Starts serving `config`, validated: `registry` is the one its check made.
    async fn launch(
        config: Config,
        registry: Registry,
        listener: TcpListener,
        source: Option<ConfigSource>,
    ) -> Result<Gateway, StartError> {
        let addr = listener.local_addr().map_err(StartError::Address)?;
        // Bound before anything starts, so that a taken address fails the start.
        let admin_listener = match config.admin.listen {
            Some(addr) => Some(listen("admin.listen", addr).await?),
            None => None,
        };
        let (stop, stop_rx) = watch::channel(false);
        let live = reload::Live::start(&config, registry, Some(stop_rx.clone()), source).await?;
        let stopped = |mut stop: watch::Receiver<bool>| async move {
            // Also ends when the sender is dropped with the gateway.
            let _ = stop.wait_for(|v| *v).await;
        };
        let mut admin_addr = None;
        let mut done = Vec::with_capacity(2);
        if let Some(listener) = admin_listener {
            let at = listener.local_addr().map_err(StartError::Address)?;
            tracing::info!(listen = %at, "admin listener: /metrics, /snowgate/status and the admin actions are served here");
            admin_addr = Some(at);
            done.push(tokio::spawn(crate::server::run(
                listener,
                Surface::Admin,
                live.stacks(),
                ADMIN_MAX_CONNECTIONS,
                stopped(stop_rx.clone()),
                config.server.drain_timeout,
            )));
        }
        done.push(tokio::spawn(crate::server::run(
            listener,
            Surface::Public,
            live.stacks(),
            config.limits.max_connections,
            stopped(stop_rx),
            config.server.drain_timeout,
        )));
        Ok(Gateway {
            addr,
            admin_addr,
            live,
            drain_grace: config.server.drain_grace,
            stop,
            done,
        })
    }

    /// The address the gateway listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The admin listener's address, when `[admin] listen` is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// `http://ADDR` of the admin listener, when `[admin] listen` is set.
    pub fn admin_url(&self) -> Option<String> {
        self.admin_addr.map(|a| format!("http://{a}"))
    }

    /// The upstream pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.live.core.pool
    }

    /// The answer cache (`None` when disabled).
    pub fn cache(&self) -> Option<&Arc<AnswerCache>> {
        self.live.core.cache.as_ref()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.live.core.metrics
    }

    /// The rate limiter in force (`None` when disabled).
    pub fn limiter(&self) -> Option<Arc<Limiter>> {
        self.live.limiter()
    }

    /// The fleet's Redis tier (`None` without `[redis]`).
    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.live.core.shared.as_ref()
    }

    /// The usage counts of the rate-limit keys.
    pub fn usage(&self) -> &Arc<Book> {
        &self.live.core.usage
    }

    /// Reads the config source again and applies it (what `SIGHUP` and `POST /snowgate/reload`
    /// do); `Err` says why nothing changed. One reload runs at a time.
    pub async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        self.live.reload().await
    }

    /// A handle that reloads this gateway while it runs (for the `SIGHUP` task), without keeping
    /// it alive.
    pub fn reloader(&self) -> Arc<dyn crate::call::Reload> {
        reload::Live::reloader(&self.live)
    }

    /// Stops accepting, drains requests in flight (`/ext/health` answers 503 meanwhile, and
    /// connections close after their answer), stops the health checks.
    pub async fn shutdown(self) {
        self.live.core.draining.store(true, Ordering::Relaxed);
        if !self.drain_grace.is_zero() {
            tracing::info!(grace = ?self.drain_grace, "draining: /ext/health answers 503");
            tokio::time::sleep(self.drain_grace).await;
        }
        let _ = self.stop.send(true);
        for server in self.done {
            let _ = server.await;
        }
        // Every request has drained: the last usage counts go to the fleet's Redis.
        self.live.core.usage.close().await;
    }
}

async fn bind(config: &Config) -> Result<TcpListener, StartError> {
    listen("server.listen", config.server.listen).await
}

/// Listens on `addr`, the value of the config key `key`.
async fn listen(key: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { key, addr, source })
}

/// The parts of a gateway, assembled without a listener (the server, tests and benchmarks share
/// this one recipe).
pub struct Parts {
    pub stack: Arc<Stack>,
    pub pool: Arc<Pool>,
    pub cache: Option<Arc<AnswerCache>>,
    pub limiter: Option<Arc<Limiter>>,
    /// The fleet's Redis (`None` without `[redis]`).
    pub shared: Option<Arc<Shared>>,
    pub metrics: Metrics,
    pub draining: Arc<AtomicBool>,
}

/// Validates `config` (building its method registry, once) and builds the pool (one round of health checks done, so the first requests
/// find healthy nodes), the cache, the rate limiter and the stack. With `background`, the periodic
/// health checks and the limiter's pruning run until it flips to true.
pub async fn assemble(
    config: &Config,
    background: Option<watch::Receiver<bool>>,
) -> Result<Parts, StartError> {
    let registry = config.check()?;
    let core = Core::build(config, &registry, background.clone()).await?;
    let generation = Generation::build(config, registry, &core, None, background.as_ref());
    let stack = Arc::new(generation.stack(&core, config, None));
    Ok(Parts {
        stack,
        pool: core.pool.clone(),
        cache: core.cache.clone(),
        limiter: generation.limiter.clone(),
        shared: core.shared.clone(),
        metrics: core.metrics.clone(),
        draining: core.draining.clone(),
    })
}

/// What lives as long as the gateway, whatever reloads happen.
pub(crate) struct Core {
    pub(crate) pool: Arc<Pool>,
    pub(crate) cache: Option<Arc<AnswerCache>>,
    pub(crate) shared: Option<Arc<Shared>>,
    pub(crate) metrics: Metrics,
    pub(crate) draining: Arc<AtomicBool>,
    /// The keys' usage, counted across reloads (flushed to Redis with `[redis]`).
    pub(crate) usage: Arc<Book>,
    request_ids: RequestIdLayer,
    /// The status page's samples.
    pub(crate) board: Arc<StatusBoard>,
}

impl Core {
    /// Builds what outlives reloads from a validated `config` and the `registry` it makes.
    async fn build(
        config: &Config,
        registry: &Registry,
        background: Option<watch::Receiver<bool>>,
    ) -> Result<Core, StartError> {
        let metrics = Metrics::new();
        let pool = Arc::new(Pool::new(
            &config.upstreams,
            config.health.clone(),
            config.upstream.clone(),
            &config.limits,
            metrics.clone(),
        )?);
        pool.expect_network(config.network.id);
        // How immutable answers are checked (`[cache] verify`): whether the cache is on or not,
        // an answer that contradicts its call is never returned.
        pool.set_verify(config.cache.verify);
        pool.check_all().await;
        pool.settle_network(config.network.id);
        // The fleet's Redis: asked once now (so that a Redis that is up is used from the first
        // request; one that is down costs at most a connect timeout here, and is retried in the
        // background).
        let shared = match &config.redis {
            Some(redis) => {
                let shared = Shared::new(redis, &metrics)?;
                // Every key carries the pool's network: settled now (`[network] id`, or the
                // start's majority), or later, when more than half of the nodes report one (the
                // follower below); until then nothing keyed by it is read or written.
                if let Some(id) = pool.network() {
                    shared.share_network(id);
                }
                shared.check().await;
                // The fleet's cordons, read before the first request (they outlive restarts).
                pool.share_cordons(shared.clone()).await;
                Some(shared)
            }
            None => None,
        };
        let cache = config.cache.enabled.then(|| {
            let best: Arc<dyn BestHeight> = pool.clone();
            let tier = shared.clone().filter(|_| config.shares_cache()).map(|s| {
                SharedCache::new(
                    s,
                    config.cache.shared_ttl,
                    config
                        .cache
                        .shared_max_bytes
                        .min(config.limits.response_bytes),
                    &metrics,
                )
            });
            AnswerCache::new(&config.cache, best, tier, &metrics, registry.len())
        });
        let board = StatusBoard::new(metrics.clone());
        let usage = Book::new(shared.clone(), &metrics);
        if let Some(stop) = background {
            board.spawn(stop.clone());
            usage.spawn_flusher(stop.clone());
            pool.spawn_health_checks(stop.clone());
            if let Some(shared) = &shared {
                shared.spawn_watcher(stop.clone());
                pool.spawn_fleet_cordons(stop.clone());
                spawn_network_follower(&pool, shared.clone(), stop);
            }
        }
        metrics.config_loaded.set(unix_now());
        Ok(Core {
            pool,
            cache,
            shared,
            metrics,
            draining: Arc::new(AtomicBool::new(false)),
            usage,
            request_ids: RequestIdLayer::new(),
            board,
        })
    }
}

/// What one version of the config builds over the `Core`.
pub(crate) struct Generation {
    pub(crate) registry: Registry,
    pub(crate) limiter: Option<Arc<Limiter>>,
    /// The limiter's background tasks: shared with the next generation when it keeps the
    /// limiter, stopped when the last generation using it goes.
    limiter_tasks: Option<Arc<LimiterTasks>>,
    body_room: Arc<Semaphore>,
    address_rooms: Arc<AddressRooms>,
}

impl Generation {
    /// Over the validated `config` and the `registry` its check made: the limiter (kept from
    /// `previous` when given), the body room.
    fn build(
        config: &Config,
        registry: Registry,
        core: &Core,
        previous: Option<(&Generation, &Config)>,
        background: Option<&watch::Receiver<bool>>,
    ) -> Generation {
        let (limiter, limiter_tasks) = match previous {
            // Unchanged quotas keep their state (a reload is no way to refill a bucket). Of the
            // methods, the limiter keeps only the dearest cost (a local share's floor): a call's
            // cost is read from its method as it is charged, so other method changes keep it.
            Some((prev, old))
                if old.rate_limit == config.rate_limit
                    && dearest(&prev.registry) == dearest(&registry) =>
            {
                (prev.limiter.clone(), prev.limiter_tasks.clone())
            }
            _ => new_limiter(config, core, &registry, background),
        };
        let body_room = match previous {
            Some((prev, old)) if old.limits.total_body_bytes == config.limits.total_body_bytes => {
                prev.body_room.clone()
            }
            _ => Arc::new(Semaphore::new(config.limits.total_body_bytes)),
        };
        // Likewise each address's: the bodies in flight give their room back where they took it.
        let address_rooms = match previous {
            Some((prev, old))
                if old.limits.address_body_bytes == config.limits.address_body_bytes
                    && old.limits.max_connections_per_ip
                        == config.limits.max_connections_per_ip =>
            {
                prev.address_rooms.clone()
            }
            _ => Arc::new(AddressRooms::new(
                config.limits.address_body_bytes,
                config.limits.max_connections_per_ip * crate::server::H2_MAX_STREAMS as usize,
            )),
        };
        Generation {
            registry,
            limiter,
            limiter_tasks,
            body_room,
            address_rooms,
        }
    }

    /// The stack of this generation.
    fn stack(
        &self,
        core: &Core,
        config: &Config,
        reload: Option<Arc<dyn crate::call::Reload>>,
    ) -> Stack {
        let quota = Quota::new(self.limiter.clone()).with_usage(Usage::new(core.usage.clone()));
        let health = Arc::new(HealthApi::new(
            core.pool.clone(),
            core.draining.clone(),
            core.shared.clone(),
        ));
        let admin = Admin {
            registry: self.registry.clone(),
            keys: AdminKeys::new(&config.admin.api_keys),
            pool: core.pool.clone(),
            cache: core.cache.clone(),
            metrics: core.metrics.clone(),
            health: health.clone(),
            body_room: self.body_room.clone(),
            total_body_bytes: config.limits.total_body_bytes,
            reload,
            board: core.board.clone(),
            quota: quota.clone(),
            cache_max_bytes: config.cache.max_bytes,
            admin_listener: config.admin.listen.is_some(),
            public_versions: config.admin.public_versions,
        };
        let log = Arc::new(RequestLog {
            durations: HistogramTable::new(
                core.metrics.request_duration.clone(),
                self.registry.all().iter().map(|m| m.name.clone()).collect(),
            ),
            access: config.log.access,
        });
        let routes = Routes {
            admin,
            quota: quota.clone(),
            limits: config.limits.clone(),
            body_room: self.body_room.clone(),
            address_rooms: self.address_rooms.clone(),
            trusted_proxies: config.rate_limit.trusted_proxies.clone(),
            client_ip_header: config.rate_limit.client_ip_header,
            log: log.clone(),
            limited_unread: std::sync::OnceLock::new(),
        };
        let decoding = Decoding {
            requests: CounterTable::new(
                core.metrics.requests.clone(),
                self.registry.len() + 1,
                OUTCOMES,
            ),
            registry: self.registry.clone(),
            limits: config.limits.clone(),
            quota: quota.clone(),
        };
        Stack {
            request_ids: core.request_ids.clone(),
            draining: core.draining.clone(),
            routes: Arc::new(routes),
            decoding: Arc::new(decoding),
            rpc: SharedRpc::new(crate::stack::rpc(
                core.pool.clone(),
                health,
                core.cache.clone(),
                &quota,
            )),
            limits: config.limits.clone(),
            trusted_proxies: config.rate_limit.trusted_proxies.clone(),
            trace: TraceLayer::new(log, quota),
        }
    }
}

/// The largest method cost in `registry`.
fn dearest(registry: &Registry) -> u32 {
    registry.all().iter().map(|m| m.cost).max().unwrap_or(1)
}

/// A limiter's pruner (and with global quotas its lease sweeper), stopped when the last
/// generation using the limiter is dropped (the sweeper hands its unused leases back first), or
/// with the gateway.
struct LimiterTasks(watch::Sender<bool>);

impl Drop for LimiterTasks {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// A rate limiter for `config` (`None` when disabled), its background tasks started under a stop
/// signal of its own that also follows the gateway's.
fn new_limiter(
    config: &Config,
    core: &Core,
    registry: &Registry,
    background: Option<&watch::Receiver<bool>>,
) -> (Option<Arc<Limiter>>, Option<Arc<LimiterTasks>>) {
    if !config.rate_limit.enabled {
        return (None, None);
    }
    let limiter = match &core.shared {
        Some(s) if config.global_quotas() => {
            Limiter::new_global(&config.rate_limit, registry, &core.metrics, s.clone())
        }
        _ => Limiter::new(&config.rate_limit, &core.metrics),
    };
    let Some(gateway_stop) = background else {
        return (Some(limiter), None);
    };
    let (tx, rx) = watch::channel(false);
    let mut parent = gateway_stop.clone();
    let child = tx.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = parent.wait_for(|v| *v) => { let _ = child.send(true); }
            () = child.closed() => {}
        }
    });
    limiter.spawn_pruner(rx);
    (Some(limiter), Some(Arc::new(LimiterTasks(tx))))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Tells the shared tier the pool's network whenever the pool settles (or, were it ever to,
/// changes) it, until `stop` flips: every Redis key carries it from then on (answers, cordons,
/// usage), and nothing is shared if told two (see `crate::shared::network`). No polling: it waits
/// on the pool.
fn spawn_network_follower(pool: &Pool, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut network = pool.watch_network();
    tokio::spawn(async move {
        loop {
            if let Some(id) = *network.borrow_and_update() {
                shared.share_network(id);
            }
            tokio::select! {
                changed = network.changed() => if changed.is_err() { return },
                _ = stop.changed() => return,
            }
        }
    });
}

/// The stack the server reads per request: swapped whole by a reload.
pub(crate) type Stacks = Arc<ArcSwap<Stack>>;
