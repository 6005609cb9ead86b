//! Assembling a running gateway from a [`Config`]: the pool and its health checks, the stack, the
//! front, the server. Tests, `snowgate serve` and `snowgate demo` all start it through here.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cache::AnswerCache;
use crate::config::Config;
use crate::front::Front;
use crate::methods::Registry;
use crate::metrics::Metrics;
use crate::policy::AdminKeys;
use crate::ratelimit::Limiter;
use crate::upstream::Pool;

/// A running gateway. Dropping it does not stop it; call [`Gateway::shutdown`].
pub struct Gateway {
    addr: SocketAddr,
    pool: Arc<Pool>,
    cache: Option<Arc<AnswerCache>>,
    metrics: Metrics,
    limiter: Option<Arc<Limiter>>,
    draining: Arc<std::sync::atomic::AtomicBool>,
    drain_grace: std::time::Duration,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Binds `config.server.listen` and starts serving.
    pub async fn start(config: Config) -> anyhow::Result<Gateway> {
        let listener = TcpListener::bind(config.server.listen).await?;
        Gateway::start_on(config, listener).await
    }

    /// Starts serving on an already bound listener (tests bind `127.0.0.1:0`).
    pub async fn start_on(config: Config, listener: TcpListener) -> anyhow::Result<Gateway> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let parts = assemble(&config, Some(stop_rx.clone())).await?;
        let mut stop_rx2 = stop_rx;
        let shutdown = async move {
            let _ = stop_rx2.wait_for(|v| *v).await;
        };
        let done = tokio::spawn(crate::server::run(
            listener,
            parts.front,
            config.limits.clone(),
            config.rate_limit.trusted_proxies.clone(),
            shutdown,
            config.server.drain_timeout,
        ));
        Ok(Gateway {
            addr,
            pool: parts.pool,
            cache: parts.cache,
            metrics: parts.metrics,
            limiter: parts.limiter,
            draining: parts.draining,
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

    /// The upstream pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The answer cache (`None` when disabled).
    pub fn cache(&self) -> Option<&Arc<AnswerCache>> {
        self.cache.as_ref()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The rate limiter (`None` when disabled).
    pub fn limiter(&self) -> Option<&Arc<Limiter>> {
        self.limiter.as_ref()
    }

    /// Stops accepting, drains requests in flight (`/ext/health` answers 503 meanwhile, and
    /// connections close after their answer), stops the health checks.
    pub async fn shutdown(self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !self.drain_grace.is_zero() {
            tracing::info!(grace = ?self.drain_grace, "draining: /ext/health answers 503");
            tokio::time::sleep(self.drain_grace).await;
        }
        let _ = self.stop.send(true);
        let _ = self.done.await;
    }

    /// Runs until the returned future of `stop` resolves.
    pub async fn wait(self) {
        let _ = self.done.await;
    }
}

/// The parts of a gateway, assembled without a listener (the server, tests and benchmarks share
/// this one recipe).
pub struct Parts {
    pub front: Arc<Front>,
    pub pool: Arc<Pool>,
    pub cache: Option<Arc<AnswerCache>>,
    pub limiter: Option<Arc<Limiter>>,
    pub metrics: Metrics,
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

/// Validates `config` and builds the pool (one round of health checks done, so the first requests
/// find healthy nodes), the cache, the rate limiter, the stack and the front. With `background`,
/// the periodic health checks and the limiter's pruning run until it flips to true.
pub async fn assemble(
    config: &Config,
    background: Option<watch::Receiver<bool>>,
) -> anyhow::Result<Parts> {
    config.validate()?;
    let metrics = Metrics::new();
    let pool = Arc::new(
        Pool::new(
            &config.upstreams,
            config.health.clone(),
            config.upstream.clone(),
            &config.limits,
            metrics.clone(),
        )
        .map_err(|e| anyhow::anyhow!(e))?,
    );
    let first_round = (0..pool.upstreams().len()).map(|i| pool.check_once(i));
    futures_util::future::join_all(first_round).await;
    let registry = Registry::with_overrides(&config.methods);
    let cache = config
        .cache
        .enabled
        .then(|| AnswerCache::new(&config.cache, pool.clone(), &metrics, registry.len()));
    let limiter = config
        .rate_limit
        .enabled
        .then(|| Limiter::new(&config.rate_limit, &metrics));
    if let Some(stop) = background {
        pool.spawn_health_checks(stop.clone());
        if let Some(l) = &limiter {
            l.spawn_pruner(stop);
        }
    }
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let front = Arc::new(Front {
        registry: registry.clone(),
        admin: AdminKeys::new(&config.admin.api_keys),
        rpc: crate::stack::rpc_stack(pool.clone(), cache.clone(), limiter.clone()),
        cache: cache.clone(),
        limiter: limiter.clone(),
        pool: pool.clone(),
        requests: crate::metrics::CounterTable::new(
            metrics.requests.clone(),
            registry.len() + 1,
            crate::metrics::OUTCOMES,
        ),
        metrics: metrics.clone(),
        limits: config.limits.clone(),
        draining: draining.clone(),
        body_room: tokio::sync::Semaphore::new(config.limits.total_body_bytes),
    });
    Ok(Parts {
        front,
        pool,
        cache,
        limiter,
        metrics,
        draining,
    })
}
