//! The live config: the gateway's `Core`, the `Generation` in force and its stack, and the
//! reload that reads the file again (`SIGHUP`, `POST /snowgate/reload`) and applies it without
//! dropping a connection.
//!
//! A reload is all or nothing. The file is read and validated as `snowgate check` does; then the
//! next generation is built beside the one serving (registry, limiter, stack); then the pool,
//! which lives across generations, takes its new members and settings (`[[upstreams]]`,
//! `[health]`, `[upstream]`; each new node checked once before it is published), which is the
//! last step that can fail and changes the pool only when it succeeds; then the log filter; then
//! one store swaps the stack. So an invalid file (or a node URL that cannot be built) changes
//! nothing and leaves the config in force serving, and says why: in the log at error, in the
//! admin endpoint's answer, and in `snowgate_config_reloads_total{result="error"}`. A valid one
//! is applied in that order: for the moment between the pool's change and the store, a request
//! may meet the new nodes under the old stack's rules (both valid configs, never a mix that
//! failed validation).
//!
//! What changes live: upstreams (added, removed: their in-flight calls finish; changed: a new node
//! under the name), `[health]`, `[upstream]`, `[limits]` (but `max_connections`), `[admin]` keys,
//! `[rate_limit]` (a limiter with unchanged settings keeps its buckets), `[methods]` (cached
//! answers of a method whose cache rule changed are dropped), `[log] filter`. What needs a
//! restart, logged and answered as such and kept at its old value meanwhile: `[server]`,
//! `[network]`, `[cache]`, `[redis]`, `log.format`, `admin.listen`, `limits.max_connections`.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::{unix_now, Core, Generation, Stacks, StartError};
use crate::call::{Reload, ReloadFailure, ReloadReport};
use crate::config::{Config, ConfigError};
use crate::methods::Registry;
use crate::metrics::Event;
use crate::ratelimit::Limiter;
use crate::upstream::UpstreamError;

/// Where a gateway's config comes from: read at start and at every reload, then validated by the
/// gateway as `snowgate check` validates it (once: [`Config::check`], which also builds the
/// method registry the gateway runs with), its errors naming the file the source is [`named`]
/// after.
///
/// [`named`]: ConfigSource::named
#[derive(Clone)]
pub struct ConfigSource {
    read: Arc<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>,
    /// The file validation errors name (`None`: a config built in code).
    origin: Option<String>,
}

impl ConfigSource {
    /// A TOML file.
    pub fn file(path: impl Into<PathBuf>) -> ConfigSource {
        let path = path.into();
        let origin = path.display().to_string();
        ConfigSource::new(move || Config::read(&path)).named(origin)
    }

    /// Any recipe (`snowgate serve` reads the file and applies its flags on top). What it gives
    /// need not be validated: the gateway validates it.
    pub fn new(
        read: impl Fn() -> Result<Config, ConfigError> + Send + Sync + 'static,
    ) -> ConfigSource {
        ConfigSource {
            read: Arc::new(read),
            origin: None,
        }
    }

    /// The same source, its validation errors naming `origin` (the file the recipe starts from).
    pub fn named(mut self, origin: impl Into<String>) -> ConfigSource {
        self.origin = Some(origin.into());
        self
    }

    /// Reads it now (not validated).
    pub fn read(&self) -> Result<Config, ConfigError> {
        (self.read)()
    }

    /// Validates a config this source read, naming its file; gives the registry it makes.
    pub(crate) fn check(&self, config: &Config) -> Result<Registry, ConfigError> {
        config.check().map_err(|e| match &self.origin {
            Some(origin) => e.in_file(origin),
            None => e,
        })
    }
}

/// Why a reload changed nothing: logged at error, counted
/// (`snowgate_config_reloads_total{result="error"}`), answered by `POST /snowgate/reload`.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The gateway was started from a config built in code: there is nothing to read again.
    #[error("snowgate was started without a config file (--config)")]
    NoFile,
    /// The task reading the config did not finish.
    #[error("reading the config failed: {0}")]
    Reading(tokio::task::JoinError),
    /// The file cannot be read, or is not a valid config (with what caused it).
    #[error("{}", with_causes(.0))]
    Config(ConfigError),
    /// Valid as written, but not with the restart-only settings kept at the values in force.
    #[error("{0} (with the restart-only settings kept as they are)")]
    Kept(ConfigError),
    /// A node of the new `[[upstreams]]` cannot be set up, as the pool says it.
    #[error(transparent)]
    Pool(#[from] UpstreamError),
}

/// `e`, then each of its causes, `: `-joined.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A running gateway's state: what lives as long as it does, and the generation in force.
pub(crate) struct Live {
    pub(crate) core: Core,
    stacks: Stacks,
    /// The config in force and what it built; a reload holds it for its whole run, so reloads
    /// take turns.
    state: tokio::sync::Mutex<(Config, Generation)>,
    /// The limiter in force, for [`Live::limiter`] without the lock.
    limiter: ArcSwap<Option<Arc<Limiter>>>,
    source: Option<ConfigSource>,
    background: Option<watch::Receiver<bool>>,
    /// This gateway as the admin endpoint reaches it (weak: the stack it sits in is the
    /// gateway's).
    me: Weak<Live>,
}

impl Live {
    /// Starts the gateway's state over a validated `config` and the `registry` its check made.
    pub(crate) async fn start(
        config: &Config,
        registry: Registry,
        background: Option<watch::Receiver<bool>>,
        source: Option<ConfigSource>,
    ) -> Result<Arc<Live>, StartError> {
        // First, so that the file's filter rules the start's own lines too.
        crate::logging::set_filter(config.log.filter.as_deref())?;
        tracing::info!(
            version = crate::metrics::VERSION,
            commit = crate::metrics::GIT_COMMIT,
            "snowgate starting"
        );
        let core = Core::build(config, &registry, background.clone()).await?;
        let generation = Generation::build(config, registry, &core, None, background.as_ref());
        Ok(Arc::new_cyclic(|me: &Weak<Live>| {
            let reload = source
                .as_ref()
                .map(|_| Arc::new(Reloader(me.clone())) as Arc<dyn Reload>);
            let stack = generation.stack(&core, config, reload);
            Live {
                core,
                stacks: Arc::new(ArcSwap::from_pointee(stack)),
                limiter: ArcSwap::from_pointee(generation.limiter.clone()),
                state: tokio::sync::Mutex::new((config.clone(), generation)),
                source,
                background,
                me: me.clone(),
            }
        }))
    }

    /// The stack the server reads per request.
    pub(crate) fn stacks(&self) -> Stacks {
        self.stacks.clone()
    }

    pub(crate) fn limiter(&self) -> Option<Arc<Limiter>> {
        self.limiter.load().as_ref().clone()
    }

    pub(crate) fn reloader(this: &Arc<Live>) -> Arc<dyn Reload> {
        Arc::new(Reloader(Arc::downgrade(this)))
    }

    /// Reads the source again and applies it; logs and counts the result.
    pub(crate) async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        let result = self.apply().await;
        let metrics = &self.core.metrics;
        match &result {
            Ok(report) => {
                metrics.config_reloads.with_label_values(&["ok"]).inc();
                metrics.config_loaded.set(unix_now());
                let changed = if report.changed.is_empty() {
                    "nothing".to_string()
                } else {
                    report.changed.join(", ")
                };
                tracing::info!(changed = changed.as_str(), "config reloaded");
                let mut message = format!("config reloaded: {changed}");
                if !report.restart_needed.is_empty() {
                    let keys = report.restart_needed.join(", ");
                    tracing::warn!(keys = keys.as_str(), "changed in the file, but applied only at the next restart (the old values stay in force)");
                    message.push_str(&format!(" (at the next restart: {keys})"));
                }
                metrics
                    .events
                    .push(Event::now("reload", None, "ok", "reload", message));
            }
            Err(e) => {
                metrics.config_reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, "config reload failed; the config in force is unchanged");
                let message = format!("config reload failed, nothing changed: {e}");
                metrics
                    .events
                    .push(Event::now("reload", None, "error", "reload", message));
            }
        }
        result
    }

    async fn apply(&self) -> Result<ReloadReport, ReloadError> {
        let Some(source) = &self.source else {
            return Err(ReloadError::NoFile);
        };
        let mut state = self.state.lock().await;
        let (old, previous) = &*state;
        // The file, validated as `snowgate check` does (the source's own errors name the file),
        // off the runtime's workers: reading a file and compiling a log filter may block.
        let reading = source.clone();
        let mut next = tokio::task::spawn_blocking(move || reading.read())
            .await
            .map_err(ReloadError::Reading)?
            .map_err(ReloadError::Config)?;
        // Validated once, building the registry the next generation runs with.
        let registry = source.check(&next).map_err(ReloadError::Config)?;
        let mut report = ReloadReport::default();
        keep_restart_only(old, &mut next, &mut report.restart_needed);
        // The old values put back may not fit what changed around them (the registry stays: no
        // restart-only setting is a method's).
        if !report.restart_needed.is_empty() {
            next.validate_with(&registry).map_err(ReloadError::Kept)?;
        }
        let generation = Generation::build(
            &next,
            registry,
            &self.core,
            Some((previous, old)),
            self.background.as_ref(),
        );
        let methods_changed = previous.registry.all() != generation.registry.all();
        describe(old, &next, methods_changed, &mut report.changed);
        let reclassed = reclassed(&previous.registry, &generation.registry);
        // The last step that can fail; it changes the pool only when it succeeds.
        let changes = self
            .core
            .pool
            .reconfigure(
                &next.upstreams,
                next.health.clone(),
                next.upstream.clone(),
                &next.limits,
            )
            .await
            .map_err(ReloadError::Pool)?;
        for (what, names) in [
            ("upstream added", &changes.added),
            ("upstream removed", &changes.removed),
            ("upstream changed", &changes.changed),
            ("upstream cordoned by the file", &changes.cordoned),
            ("upstream uncordoned by the file", &changes.uncordoned),
        ] {
            report
                .changed
                .extend(names.iter().map(|n| format!("{what}: {n}")));
        }
        // Checked by validation; a failure here leaves the old filter, and is said.
        if let Err(e) = crate::logging::set_filter(next.log.filter.as_deref()) {
            report.changed.push(format!("log.filter not applied: {e}"));
        }

        let reload = Some(Arc::new(Reloader(self.me.clone())) as Arc<dyn Reload>);
        let stack = generation.stack(&self.core, &next, reload);
        self.stacks.store(Arc::new(stack));
        self.limiter.store(Arc::new(generation.limiter.clone()));
        if let Some(cache) = &self.core.cache {
            if methods_changed {
                cache.registry_changed(generation.registry.len());
            }
            if !reclassed.is_empty() {
                if let Err(e) = cache.purge(Some(&reclassed)).await {
                    tracing::warn!(error = %e, "could not drop the answers of reclassed methods");
                }
                report.changed.push(format!(
                    "cached answers dropped for: {}",
                    reclassed.join(", ")
                ));
            }
        }
        *state = (next, generation);
        Ok(report)
    }
}

/// The admin endpoint's way to the gateway's reload.
struct Reloader(Weak<Live>);

impl Reload for Reloader {
    fn reload(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ReloadReport, ReloadFailure>> + Send>,
    > {
        let live = self.0.upgrade();
        Box::pin(async move {
            match live {
                // A task of its own: an admin whose client gives up (the answer's future is
                // dropped) must not cut a reload half-way, unlogged and uncounted.
                Some(live) => match tokio::spawn(async move { live.reload().await }).await {
                    Ok(result) => result.map_err(|e| ReloadFailure::Refused(Box::new(e))),
                    Err(e) => Err(ReloadFailure::Task(e)),
                },
                None => Err(ReloadFailure::ShuttingDown),
            }
        })
    }
}

/// Puts back in `next` the settings that cannot change while snowgate runs, naming each one
/// that the file changed.
fn keep_restart_only(old: &Config, next: &mut Config, restart: &mut Vec<String>) {
    if next.server != old.server {
        restart.push("server".into());
        next.server = old.server.clone();
    }
    if next.network != old.network {
        restart.push("network".into());
        next.network = old.network.clone();
    }
    if next.cache != old.cache {
        restart.push("cache".into());
        next.cache = old.cache.clone();
    }
    if next.redis != old.redis {
        restart.push("redis".into());
        next.redis = old.redis.clone();
    }
    if next.log.format != old.log.format {
        restart.push("log.format".into());
        next.log.format = old.log.format;
    }
    if next.tracing != old.tracing {
        restart.push("tracing".into());
        next.tracing = old.tracing.clone();
    }
    if next.admin.listen != old.admin.listen {
        restart.push("admin.listen".into());
        next.admin.listen = old.admin.listen;
    }
    if next.limits.max_connections != old.limits.max_connections {
        restart.push("limits.max_connections".into());
        next.limits.max_connections = old.limits.max_connections;
    }
}

/// The sections that changed, named (never their values: keys and URLs are secrets).
fn describe(old: &Config, next: &Config, methods_changed: bool, changed: &mut Vec<String>) {
    let sections = [
        ("health", old.health != next.health),
        ("upstream", old.upstream != next.upstream),
        ("limits", old.limits != next.limits),
        ("admin", old.admin != next.admin),
        ("rate_limit", old.rate_limit != next.rate_limit),
        ("log", old.log != next.log),
        ("methods", methods_changed),
    ];
    changed.extend(
        sections
            .iter()
            .filter(|(_, differs)| *differs)
            .map(|(name, _)| (*name).to_string()),
    );
}

/// Methods whose cached answers the new registry would not have kept the same way: another
/// cache class, another height param, or gone.
fn reclassed(old: &Registry, new: &Registry) -> Vec<String> {
    old.all()
        .iter()
        .filter(|o| {
            !matches!(new.get(&o.name),
                Some(n) if n.cache == o.cache && n.height_param == o.height_param)
        })
        .map(|o| o.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `POST /snowgate/reload` answers is the error's text: the same through the trait as
    /// from the gateway, word for word.
    #[test]
    fn a_refused_reload_says_the_gateways_words() {
        let e = ReloadError::Pool(UpstreamError::Credentials);
        assert_eq!(e.to_string(), "the URL's credentials cannot be sent");
        let through = ReloadFailure::Refused(Box::new(e));
        assert_eq!(through.to_string(), "the URL's credentials cannot be sent");
        let ReloadFailure::Refused(inner) = &through else {
            panic!("{through:?}");
        };
        assert!(matches!(
            inner.downcast_ref::<ReloadError>(),
            Some(ReloadError::Pool(UpstreamError::Credentials))
        ));
        let e = ReloadError::Pool(UpstreamError::Url(
            crate::config::upstream::UrlError::NoHost,
        ));
        assert_eq!(e.to_string(), "missing host");
        assert_eq!(
            ReloadFailure::Refused(Box::new(ReloadError::NoFile)).to_string(),
            "snowgate was started without a config file (--config)"
        );
    }

    #[tokio::test]
    async fn a_gateway_gone_cannot_be_reloaded() {
        let reloader = Reloader(Weak::new());
        let e = reloader.reload().await.expect_err("nothing to reload");
        assert!(matches!(e, ReloadFailure::ShuttingDown), "{e:?}");
        assert_eq!(e.to_string(), "the gateway is shutting down");
    }
}
