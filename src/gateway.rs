//! Assembling a running gateway from a [`Config`]: the pool and its health checks, the stack, the
//! server. Tests, `snowgate serve` and `snowgate demo` all start it through here.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::cache::shared::SharedCache;
use crate::cache::AnswerCache;
use crate::call::{BestHeight, Caller, ClientId, RpcCall};
use crate::config::Config;
use crate::http::admin::Admin;
use crate::http::decode::Decoding;
use crate::http::request_id::RequestIdLayer;
use crate::http::router::Routes;
use crate::methods::Registry;
use crate::metrics::{CounterTable, Metrics, OUTCOMES};
use crate::policy::AdminKeys;
use crate::ratelimit::Limiter;
use crate::shared::Shared;
use crate::stack::{SharedRpc, Stack};
use crate::upstream::Pool;

/// A running gateway. Stop it with [`Gateway::shutdown`] (drain grace, then drain); dropping it
/// stops accepting and drains the connections without the grace, in the background.
pub struct Gateway {
    addr: SocketAddr,
    pool: Arc<Pool>,
    cache: Option<Arc<AnswerCache>>,
    metrics: Metrics,
    limiter: Option<Arc<Limiter>>,
    shared: Option<Arc<Shared>>,
    draining: Arc<AtomicBool>,
    drain_grace: Duration,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Binds `config.server.listen` and starts serving.
    pub async fn start(config: Config) -> anyhow::Result<Gateway> {
        let listen = config.server.listen;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {listen} (`server.listen`): {e}"))?;
        Gateway::start_on(config, listener).await
    }

    /// Starts serving on an already bound listener (tests bind `127.0.0.1:0`).
    pub async fn start_on(config: Config, listener: TcpListener) -> anyhow::Result<Gateway> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let parts = assemble(&config, Some(stop_rx.clone())).await?;
        let mut stopped = stop_rx;
        let shutdown = async move {
            // Also ends when the sender is dropped with the gateway.
            let _ = stopped.wait_for(|v| *v).await;
        };
        let done = tokio::spawn(crate::server::run(
            listener,
            parts.stack,
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
            shared: parts.shared,
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

    /// The fleet's Redis tier (`None` without `[redis]`).
    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.as_ref()
    }

    /// Stops accepting, drains requests in flight (`/ext/health` answers 503 meanwhile, and
    /// connections close after their answer), stops the health checks.
    pub async fn shutdown(self) {
        self.draining.store(true, Ordering::Relaxed);
        if !self.drain_grace.is_zero() {
            tracing::info!(grace = ?self.drain_grace, "draining: /ext/health answers 503");
            tokio::time::sleep(self.drain_grace).await;
        }
        let _ = self.stop.send(true);
        let _ = self.done.await;
    }
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

/// Validates `config` and builds the pool (one round of health checks done, so the first requests
/// find healthy nodes), the cache, the rate limiter and the stack. With `background`, the periodic
/// health checks and the limiter's pruning run until it flips to true.
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
    pool.settle_network(config.network.id);
    let registry = Registry::with_overrides(&config.methods);
    // The fleet's Redis: asked once now (so that a Redis that is up is used from the first
    // request; one that is down costs at most a connect timeout here, and is retried in the
    // background), and told the network the nodes serve (cache keys carry it).
    let shared = match &config.redis {
        Some(redis) => {
            let shared = Shared::new(redis, &metrics).map_err(|e| anyhow::anyhow!(e))?;
            shared.check().await;
            learn_network(&pool, &registry, &shared).await;
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
    let limiter = config.rate_limit.enabled.then(|| match &shared {
        Some(s) if config.global_quotas() => {
            Limiter::new_global(&config.rate_limit, &registry, &metrics, s.clone())
        }
        _ => Limiter::new(&config.rate_limit, &metrics),
    });
    if let Some(stop) = background {
        pool.spawn_health_checks(stop.clone());
        if let Some(shared) = &shared {
            shared.spawn_watcher(stop.clone());
            if shared.network_prefix().is_none() {
                spawn_network_learner(
                    pool.clone(),
                    registry.clone(),
                    shared.clone(),
                    config.health.interval,
                    stop.clone(),
                );
            }
        }
        if let Some(l) = &limiter {
            l.spawn_pruner(stop);
        }
    }
    let draining = Arc::new(AtomicBool::new(false));
    let body_room = Arc::new(Semaphore::new(config.limits.total_body_bytes));
    let admin = Admin {
        registry: registry.clone(),
        keys: AdminKeys::new(&config.admin.api_keys),
        pool: pool.clone(),
        cache: cache.clone(),
        metrics: metrics.clone(),
        draining: draining.clone(),
        body_room: body_room.clone(),
        total_body_bytes: config.limits.total_body_bytes,
        shared: shared.clone(),
    };
    let routes = Routes {
        admin,
        limiter: limiter.clone(),
        limits: config.limits.clone(),
        body_room,
    };
    let decoding = Decoding {
        requests: CounterTable::new(metrics.requests.clone(), registry.len() + 1, OUTCOMES),
        registry,
        limits: config.limits.clone(),
        limiter: limiter.clone(),
    };
    let stack = Arc::new(Stack {
        request_ids: RequestIdLayer::new(),
        draining: draining.clone(),
        routes: Arc::new(routes),
        decoding: Arc::new(decoding),
        rpc: SharedRpc::new(crate::stack::rpc(
            pool.clone(),
            cache.clone(),
            limiter.clone(),
        )),
    });
    Ok(Parts {
        stack,
        pool,
        cache,
        limiter,
        shared,
        metrics,
        draining,
    })
}

/// Asks the pool for the network ID (`info.getNetworkID`) and gives it to the shared tier: cache
/// keys in Redis carry it, and nothing is shared until it is known. Only a plain decimal ID is
/// taken (it becomes part of Redis keys).
async fn learn_network(pool: &Pool, registry: &Registry, shared: &Shared) -> bool {
    let Some(spec) = registry.get("info.getNetworkID") else {
        return false;
    };
    let local = std::net::IpAddr::from([127, 0, 0, 1]);
    let call = RpcCall {
        spec: spec.clone(),
        params: None,
        id: Some(bytes::Bytes::from_static(b"1")),
        caller: Caller {
            admin: true,
            pin: None,
            ip: local,
            client: ClientId::Ip(local),
            request_id: None,
        },
        route_min_height: None,
    };
    let Ok(answer) = pool.forward(&call).await else {
        return false;
    };
    let id = crate::jsonrpc::Json::parse(&answer.payload)
        .ok()
        .and_then(|v| {
            v.field("networkID")
                .and_then(|n| n.as_str().map(str::to_string))
        });
    match id {
        Some(id) if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) => {
            tracing::info!(network_id = %id, "shared tier: keys carry this network ID");
            shared.learn_network(&id);
            true
        }
        _ => {
            tracing::warn!("shared tier: the nodes' network ID is not a number; nothing is shared");
            false
        }
    }
}

/// Retries [`learn_network`] every health interval until it succeeds or `stop` flips.
fn spawn_network_learner(
    pool: Arc<Pool>,
    registry: Registry,
    shared: Arc<Shared>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            if learn_network(&pool, &registry, &shared).await {
                return;
            }
        }
    });
}
