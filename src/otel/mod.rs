//! OpenTelemetry traces (`[tracing] otlp_endpoint`): one trace per client request, followed
//! across the cache, Redis and every node attempt, exported to a collector as OTLP over HTTP.
//!
//! **The spans** (all of target `snowgate::otel`, made only here, seen only by the OpenTelemetry
//! layer that [`crate::logging::init`] installs; the log's own filter never shows them):
//!
//! | span | parent | attributes |
//! |---|---|---|
//! | the request (`platform.getHeight`, `batch`, or `POST /ext/bc/P` when refused before a method was read), kind server | the client's `traceparent`, if any | `rpc.method`, `http.response.status_code`, `snowgate.cache`, `snowgate.client` (the address or key label the limiter charges), `snowgate.outcome`, `rpc.jsonrpc.error_code`, `snowgate.batch.size`, `snowgate.request_id` |
//! | each call of a batch (its method) | the request | as the request's, for the call |
//! | `cache` | the call | `snowgate.cache`: hit, miss or coalesced |
//! | `redis` | the call | `db.operation.name` (`quota`, `cache lookup`), `snowgate.found` |
//! | `attempt` (`upstream <name>`), kind client | the call | `snowgate.upstream` (the node's configured name), `snowgate.attempt` (1, 2, …), `snowgate.hedge`, `snowgate.outcome` |
//!
//! Never params, keys, secrets, node addresses or the client's own text: method names are the
//! registry's, paths the canonical ones. Not traced: health checks, the operator's endpoints, and
//! the cache's second ask of an answer (after the client has it: a span under the request's would
//! hold the request's span open, as tracing's registry closes a span after its children).
//!
//! **Propagation** (W3C trace context, the SDK's propagator): a client's `traceparent` (and its
//! `tracestate`, up to 512 bytes, passed on to the nodes but never exported: it is the client's
//! own text, and no span carries it) continues its trace (`client_trace = "follow"`, the default, as
//! OpenTelemetry's parent-based sampling: its sampled flag decides), or starts a new one linked to
//! it (`"link"`, for a public endpoint whose clients should not choose what is traced). Every
//! attempt sends the node a `traceparent` naming the attempt's own span; in follow mode a request
//! not recorded here passes the client's on (as the propagator reads it), so a node that traces
//! still sees it. What clients' sampled flags alone may have traced is bounded
//! (`client_sampled_per_second`, all clients together; beyond, the ratio decides), so that a
//! client cannot choose the collector's volume, nor crowd the queue with traces of its refusals.
//!
//! **Sampling** is decided once, at the request, before any span exists: a request not sampled
//! makes no span at all, so `sample_ratio = 0.01` costs the other 99 % one random number.
//! Without `otlp_endpoint` nothing is installed and [`start`] is one atomic load.
//!
//! **Export** is bounded: see [`export`].

pub mod export;

use std::sync::OnceLock;

use http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The target of every span made here: the OpenTelemetry layer sees these and nothing else.
pub const TARGET: &str = "snowgate::otel";

/// The longest `tracestate` passed on; a longer one is dropped (W3C asks that at least 512
/// characters be kept).
const MAX_TRACESTATE: usize = 512;

/// What [`install`] sets up (from `[tracing]`, checked by the config).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where spans are posted (`…/v1/traces`).
    pub url: http::Uri,
    pub service_name: String,
    /// The share of requests traced when the client's context does not decide.
    pub sample_ratio: f64,
    /// A client's `traceparent` is continued, its sampled flag deciding; else linked to.
    pub follow_client: bool,
    /// The most requests a second a client's sampled flag alone has traced (all clients).
    pub client_sampled_per_second: u32,
    /// Finished spans the queue holds at most.
    pub max_queued_spans: usize,
    /// The longest one export may take.
    pub export_timeout: std::time::Duration,
}

/// How requests are sampled, set once by [`install`].
struct Sampling {
    ratio: f64,
    follow_client: bool,
    /// What clients' sampled flags may still have traced this second (`None`: nothing).
    forced: Option<governor::DefaultDirectRateLimiter>,
}

static SAMPLING: OnceLock<Sampling> = OnceLock::new();

/// What one call's spans hang from: off (the default, and always without `[tracing]`, costing
/// nothing anywhere), recorded, or the client's context passed on. One word, so that every call,
/// traced or not, carries no more.
#[derive(Debug, Clone, Default)]
pub struct Trace(Option<Box<Traced>>);

#[derive(Debug, Clone)]
enum Traced {
    /// Recorded: the call's own span (the request's, or a batch element's), and the client's
    /// `tracestate` (checked by the propagator) for the nodes: never a span's, so never exported.
    On(Span, Option<std::sync::Arc<str>>),
    /// Not recorded here: the client's `traceparent` (and `tracestate`) as header lines, passed on
    /// to the nodes unchanged.
    Passed(Box<[u8]>),
}

/// The OpenTelemetry layer and what keeps its exporter running ([`Exporting::shutdown`] sends
/// what is queued).
pub struct Installed<L> {
    pub layer: L,
    pub exporting: Exporting,
}

/// The running exporter.
pub struct Exporting {
    provider: SdkTracerProvider,
    queue: export::Handle,
}

impl Exporting {
    /// Sends the spans still queued (within one `[tracing] export_timeout` in all), then stops.
    pub async fn shutdown(self) {
        self.queue.close().await;
        // The queue above was the provider's only processor: nothing is left to flush.
        let _ = self.provider.shutdown();
    }
}

/// Why traces cannot be set up (the config's validation says most of it first).
#[derive(Debug, thiserror::Error)]
#[error("the OTLP exporter: {0}")]
pub struct InstallError(#[from] opentelemetry_otlp::ExporterBuildError);

/// Builds the exporter and the layer, and turns sampling on. Call inside the runtime that will run
/// the exporter, once per process (a second call samples as the first said).
pub fn install<S>(config: &Settings) -> Result<Installed<impl Layer<S>>, InstallError>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(config.url.to_string())
        .with_timeout(config.export_timeout)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    // The exporter leaves for its task: it is told the resource here, not by the provider.
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let (processor, queue) = export::queue(exporter, config);
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        // Decided at the request (see the module doc); every span made is kept.
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("snowgate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE),
        );
    let forced = std::num::NonZeroU32::new(config.client_sampled_per_second)
        .map(|n| governor::RateLimiter::direct(governor::Quota::per_second(n)));
    let _ = SAMPLING.set(Sampling {
        ratio: config.sample_ratio,
        follow_client: config.follow_client,
        forced,
    });
    Ok(Installed {
        layer,
        exporting: Exporting { provider, queue },
    })
}

/// Whether [`install`] ran: spans are made and exported.
pub fn installed() -> bool {
    SAMPLING.get().is_some()
}

/// The trace of a JSON-RPC request to `path` with `headers`: a new root span when it is sampled,
/// the client's context passed on when it is not, `Off` without `[tracing]`.
#[inline]
pub fn start(headers: &HeaderMap, path: &'static str) -> Trace {
    match SAMPLING.get() {
        None => Trace::OFF,
        Some(sampling) => sampling.start(headers, path),
    }
}

/// A request's trace not decided yet: its client's context headers, kept (only when traces are
/// installed) until the request's body has been read. A request refused before or instead of its
/// body (over its quota, a declared or actual length over `body_bytes`, a body too slow or
/// broken) is counted, never traced: a flood of refusals, which costs a client little to send,
/// must not cost a span each or crowd the honest ones out of the queue. Its span starts there.
#[derive(Debug, Default)]
pub struct Pending(Option<Box<HeaderMap>>);

impl Pending {
    /// The context headers of a request (`traceparent`, `tracestate`), or nothing without
    /// `[tracing]` (one atomic load).
    #[inline]
    pub fn of(headers: &HeaderMap) -> Pending {
        if !installed() {
            return Pending(None);
        }
        let mut kept = HeaderMap::new();
        for name in ["traceparent", "tracestate"] {
            if let Some(value) = headers.get(name) {
                kept.insert(name, value.clone());
            }
        }
        Pending(Some(Box::new(kept)))
    }

    /// The request's trace, decided now ([`start`]).
    pub fn start(self, path: &'static str) -> Trace {
        match self.0 {
            None => Trace::OFF,
            Some(headers) => start(&headers, path),
        }
    }
}

impl Sampling {
    /// [`start`] once traces are installed.
    fn start(&self, headers: &HeaderMap, path: &'static str) -> Trace {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let remote = parent.span().span_context().clone();
        let follow = self.follow_client && remote.is_valid();
        let by_ratio = || self.ratio >= 1.0 || rand::random::<f64>() < self.ratio;
        let sampled = if !follow {
            by_ratio()
        } else if remote.is_sampled() {
            // The client's flag, within what clients may force; beyond, the ratio.
            let forced = self.forced.as_ref().is_some_and(|f| f.check().is_ok());
            forced || by_ratio()
        } else {
            false
        };
        if !sampled {
            if !follow {
                return Trace::OFF;
            }
            let mut lines = Lines(Vec::new());
            TraceContextPropagator::new().inject_context(&parent, &mut lines);
            return Trace(Some(Box::new(Traced::Passed(lines.0.into()))));
        }
        let span = tracing::trace_span!(
            target: TARGET,
            "request",
            otel.name = %format_args!("POST {path}"),
            otel.kind = "server",
            otel.status_code = Empty,
            http.request.method = "POST",
            url.path = path,
            http.response.status_code = Empty,
            rpc.system = "jsonrpc",
            rpc.method = Empty,
            rpc.jsonrpc.error_code = Empty,
            snowgate.client = Empty,
            snowgate.request_id = Empty,
            snowgate.cache = Empty,
            snowgate.outcome = Empty,
            snowgate.batch.size = Empty,
        );
        // The client's `tracestate` is its own text: the spans never carry it (it would be exported
        // in every span's `trace_state`); the nodes are passed it as they would be without us.
        let mut state = None;
        if follow {
            let header = remote.trace_state().header();
            state = (!header.is_empty()).then(|| header.into());
            let own = opentelemetry::trace::SpanContext::new(
                remote.trace_id(),
                remote.span_id(),
                remote.trace_flags(),
                true,
                Default::default(),
            );
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(own));
        } else if remote.is_valid() {
            // The client's span, without its `tracestate` (the client's own text).
            let linked = opentelemetry::trace::SpanContext::new(
                remote.trace_id(),
                remote.span_id(),
                remote.trace_flags(),
                true,
                Default::default(),
            );
            span.add_link(linked);
        }
        Trace(Some(Box::new(Traced::On(span, state))))
    }
}

impl Trace {
    /// Nothing traced, nothing passed on.
    pub const OFF: Trace = Trace(None);

    /// The span of a call that is recorded.
    #[inline]
    fn span(&self) -> Option<&Span> {
        match self.0.as_deref() {
            Some(Traced::On(span, _)) => Some(span),
            _ => None,
        }
    }

    /// Whether spans are recorded.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.span().is_some()
    }

    /// The request's client as the limiter sees it (an address, or its key's label: the key's
    /// name, never the key) and its id.
    #[inline]
    pub fn record_request(&self, client: &dyn std::fmt::Display, request_id: &str) {
        if let Some(span) = self.span() {
            span.record("snowgate.client", tracing::field::display(client));
            span.record("snowgate.request_id", request_id);
        }
    }

    /// The HTTP status the request was answered with (a 5xx marks the span as failed).
    #[inline]
    pub fn record_status(&self, status: http::StatusCode) {
        if let Some(span) = self.span() {
            span.record("http.response.status_code", status.as_u16());
            if status.is_server_error() {
                span.record("otel.status_code", "ERROR");
            }
        }
    }

    /// The request is a batch of `len` calls.
    #[inline]
    pub fn record_batch(&self, len: usize) {
        if let Some(span) = self.span() {
            span.record("otel.name", "batch");
            span.record("snowgate.batch.size", len);
        }
    }

    /// The span of one call of a batch (its method recorded by [`Trace::record_method`]).
    pub fn batch_call(&self) -> Trace {
        match self.0.as_deref() {
            Some(Traced::On(parent, state)) => Trace(Some(Box::new(Traced::On(
                tracing::trace_span!(
                target: TARGET,
                parent: parent,
                "call",
                otel.name = Empty,
                otel.status_code = Empty,
                rpc.method = Empty,
                rpc.jsonrpc.error_code = Empty,
                snowgate.cache = Empty,
                snowgate.outcome = Empty,
                ),
                state.clone(),
            )))),
            _ => self.clone(),
        }
    }

    /// The call's method, once known (the registry's name, never the client's text).
    #[inline]
    pub fn record_method(&self, method: &str) {
        if let Some(span) = self.span() {
            span.record("otel.name", method);
            span.record("rpc.method", method);
        }
    }

    /// How the call ended: `outcome` as `snowgate_requests_total` counts it, the cache's `X-Cache`
    /// value, and the JSON-RPC error code of a failure; `failed` (not the client's doing) marks
    /// the span as failed.
    #[inline]
    pub fn record_outcome(
        &self,
        outcome: &str,
        cache: Option<&str>,
        error_code: Option<i64>,
        failed: bool,
    ) {
        if let Some(span) = self.span() {
            span.record("snowgate.outcome", outcome);
            if let Some(cache) = cache {
                span.record("snowgate.cache", cache);
            }
            if let Some(code) = error_code {
                span.record("rpc.jsonrpc.error_code", code);
            }
            if failed {
                span.record("otel.status_code", "ERROR");
            }
        }
    }

    /// A span for the cache's lookup of the call (its result recorded by [`Child::cache_result`]).
    pub fn cache(&self) -> Child {
        Child(match self.span() {
            Some(parent) => tracing::trace_span!(
                target: TARGET,
                parent: parent,
                "cache",
                snowgate.cache = Empty,
            ),
            None => Span::none(),
        })
    }

    /// A span for a round trip to Redis on the call's behalf (`op`: `quota`, `cache lookup`).
    pub fn redis(&self, op: &'static str) -> Child {
        Child(match self.span() {
            Some(parent) => tracing::trace_span!(
                target: TARGET,
                parent: parent,
                "redis",
                otel.name = %format_args!("redis {op}"),
                otel.kind = "client",
                db.system.name = "redis",
                db.operation.name = op,
                snowgate.found = Empty,
            ),
            None => Span::none(),
        })
    }

    /// A span for attempt `nth` (from 1) of the call on the node named `upstream`, and the header
    /// lines that carry its context to the node.
    pub fn attempt(&self, upstream: &str, nth: usize, hedge: bool) -> Attempt {
        match self.0.as_deref() {
            None => Attempt {
                span: Span::none(),
                header: None,
                outcome: None,
            },
            Some(Traced::Passed(lines)) => Attempt {
                span: Span::none(),
                header: Some(lines.to_vec()),
                outcome: None,
            },
            Some(Traced::On(parent, state)) => {
                let span = tracing::trace_span!(
                    target: TARGET,
                    parent: parent,
                    "attempt",
                    otel.name = %format_args!("upstream {upstream}"),
                    otel.kind = "client",
                    otel.status_code = Empty,
                    snowgate.upstream = upstream,
                    snowgate.attempt = nth,
                    snowgate.hedge = hedge,
                    snowgate.outcome = Empty,
                );
                let mut lines = Lines(Vec::new());
                TraceContextPropagator::new().inject_context(&span.context(), &mut lines);
                if let Some(state) = state {
                    lines.set("tracestate", state.to_string());
                }
                Attempt {
                    span,
                    header: Some(lines.0),
                    outcome: None,
                }
            }
        }
    }
}

/// A child span of a call, ended when dropped.
pub struct Child(Span);

impl Child {
    /// Records the cache's result (`hit`, `miss`, `coalesced`) on a `cache` span.
    pub fn cache_result(&self, result: &'static str) {
        self.0.record("snowgate.cache", result);
    }

    /// Records whether a Redis lookup found what it looked for.
    pub fn found(&self, found: bool) {
        self.0.record("snowgate.found", found);
    }
}

/// One attempt's span; one that is dropped before [`Attempt::finish`] (a hedge that lost, a
/// client gone) ends as `cancelled`.
pub struct Attempt {
    span: Span,
    header: Option<Vec<u8>>,
    outcome: Option<&'static str>,
}

impl Attempt {
    /// The header lines for the node (`traceparent: …\r\n`, and `tracestate`), empty when none.
    pub fn header(&self) -> &[u8] {
        self.header.as_deref().unwrap_or_default()
    }

    /// How the attempt ended (`ok`, `rpc_error`, or a failure's outcome); anything but the first
    /// two marks the span as failed.
    pub fn finish(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.span.is_none() {
            return;
        }
        let outcome = self.outcome.unwrap_or("cancelled");
        self.span.record("snowgate.outcome", outcome);
        if !matches!(outcome, "ok" | "rpc_error" | "cancelled") {
            self.span.record("otel.status_code", "ERROR");
        }
    }
}

/// A request's headers as the propagator reads them: only `traceparent` and a `tracestate`
/// within [`MAX_TRACESTATE`] bytes.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?.to_str().ok()?;
        (key != "tracestate" || value.len() <= MAX_TRACESTATE).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Header lines as the node's request carries them (`name: value\r\n`). The propagator writes
/// only its own two names and values it checked (hex ids; `tracestate` entries of printable
/// characters without `,` or `=` in values), so no line can be split.
struct Lines(Vec<u8>);

impl Injector for Lines {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` is left out (W3C asks senders not to send one).
        if value.is_empty() || value.bytes().any(|b| !(b == b' ' || b.is_ascii_graphic())) {
            return;
        }
        self.0.extend_from_slice(key.as_bytes());
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value.as_bytes());
        self.0.extend_from_slice(b"\r\n");
    }
}
