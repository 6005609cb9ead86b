//! The process's log subscriber, with a filter a reload can change ([`set_filter`]), and the
//! OpenTelemetry layer when `[tracing]` asks for traces ([`crate::otel`]).
//!
//! The log's filter is the log's own (a per-layer filter), so that the trace layer sees the spans
//! of [`crate::otel::TARGET`] whatever the log shows, and the log never shows them.
//!
//! `RUST_LOG`, when set, wins over `[log] filter` at start and at every reload (an operator who
//! sets it for a debugging session keeps it). A library user that installs its own subscriber
//! (the tests) never calls [`init`]: the filter then stays the caller's.

use std::sync::OnceLock;

use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// The filter when neither `RUST_LOG` nor `[log] filter` says.
pub const DEFAULT_FILTER: &str = "info";

/// Installs the subscriber: logs go to stderr (stdout carries the CLI's own output: the listening
/// line, the demo's help), as text (colour only when stderr is a terminal) or one JSON object per
/// line, filtered by `RUST_LOG` or else [`DEFAULT_FILTER`] until the config is read
/// ([`set_filter`]). With `traces`, spans are exported too: call inside the runtime that runs the
/// exporter, and shut what it returns down before the process exits (it sends what is queued).
pub fn init(
    format: crate::config::LogFormat,
    traces: Option<&crate::otel::Settings>,
) -> Option<crate::otel::Exporting> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| DEFAULT_FILTER.into());
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = match format {
        crate::config::LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        // The request's span (its id, method, path) rides along as `span`.
        crate::config::LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    let (otel, exporting, failed) = match traces.map(crate::otel::install) {
        Some(Ok(installed)) => (Some(installed.layer), Some(installed.exporting), None),
        // Logged once the subscriber is in place; the gateway serves without traces.
        Some(Err(e)) => (None, None, Some(e)),
        None => (None, None, None),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    if registry.with(otel).try_init().is_ok() {
        let _ = FILTER.set(handle);
    }
    match (traces, failed) {
        (Some(_), Some(e)) => {
            tracing::error!(error = %e, "traces are off: the exporter cannot be set up")
        }
        (Some(traces), None) => tracing::info!(
            service = %traces.service_name,
            sample_ratio = traces.sample_ratio,
            "traces go to the OTLP collector"
        ),
        (None, _) => {}
    }
    exporting
}

/// Applies `[log] filter` (`None`: the default). Does nothing while `RUST_LOG` is set or when
/// [`init`] did not install the subscriber. The directives were checked by the config's
/// validation; an error here names them anyway.
pub fn set_filter(filter: Option<&str>) -> Result<(), FilterError> {
    let Some(handle) = FILTER.get() else {
        return Ok(());
    };
    if std::env::var_os("RUST_LOG").is_some() {
        return Ok(());
    }
    let directives = filter.unwrap_or(DEFAULT_FILTER);
    let parsed = crate::config::log::parse_filter(directives).map_err(FilterError::Directives)?;
    handle.reload(parsed).map_err(FilterError::Reload)
}

/// Why [`set_filter`] left the filter as it was.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// `[log] filter` is not a filter (validation refuses it first).
    #[error("log.filter: {0}")]
    Directives(tracing_subscriber::filter::ParseError),
    /// The subscriber that held the filter is gone.
    #[error(transparent)]
    Reload(reload::Error),
}
