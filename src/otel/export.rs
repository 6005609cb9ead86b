//! The queue between finished spans and the OTLP exporter: bounded, never waited on, counted.
//!
//! A finished span is put in a channel of `[tracing] max_queued_spans` without waiting; when it is
//! full the span is dropped and counted. One task on the gateway's runtime takes batches of up to
//! [`BATCH`] spans, every [`EVERY`] or as soon as a batch (or half the queue) is waiting, and
//! exports them one batch at a time, each within `[tracing] export_timeout`: a collector that is
//! down or slow loses batches (counted as failed) and fills the queue (counted as dropped), and
//! never slows an answer. What tracing holds is at most the queue and the batch in flight.
//!
//! Hand-written around the SDK's exporter instead of its `BatchSpanProcessor`, which counts what it
//! drops only for a log line at shutdown and runs its exports on a thread of its own, blocking on a
//! client made for that: the operator needs the losses as a metric
//! (`snowgate_trace_spans_total{outcome}`), and the hyper client runs on the gateway's runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot, Notify};

use super::Settings;

/// Spans per export, at most (the SDK's own default).
pub const BATCH: usize = 512;
/// The longest a finished span waits for its batch to leave.
pub const EVERY: Duration = Duration::from_secs(1);

/// Spans by what became of them, since the process started.
struct Stats {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

static STATS: Stats = Stats {
    exported: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    failed: AtomicU64::new(0),
};

/// Spans exported, dropped (the queue was full) and failed (their export did not succeed in
/// time), for `snowgate_trace_spans_total`.
pub fn counts() -> [(&'static str, u64); 3] {
    [
        ("exported", STATS.exported.load(Ordering::Relaxed)),
        ("dropped", STATS.dropped.load(Ordering::Relaxed)),
        ("failed", STATS.failed.load(Ordering::Relaxed)),
    ]
}

/// The provider's span processor: the sending end of the queue.
#[derive(Debug)]
pub struct Queue {
    spans: mpsc::Sender<SpanData>,
    /// Wakes the exporting task when a batch is waiting.
    wake: Arc<Notify>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        match self.spans.try_send(span) {
            Ok(()) => {
                let room = self.spans.max_capacity();
                let queued = room - self.spans.capacity();
                if queued >= BATCH.min(room.div_ceil(2)) {
                    self.wake.notify_one();
                }
            }
            Err(_) => {
                STATS.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        // Flushed by `Handle::close` at shutdown, the one time it matters.
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Stops the exporting task.
pub struct Handle {
    close: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    timeout: Duration,
}

impl Handle {
    /// Exports what is queued, then stops: within one `export_timeout` in all, whatever the
    /// collector does (a stop must not wait on it).
    pub async fn close(mut self) {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        let _ = tokio::time::timeout(self.timeout, &mut self.task).await;
        self.task.abort();
    }
}

/// The processor for a provider and the task that exports what it queues (spawned on the current
/// runtime).
pub fn queue<E>(exporter: E, config: &Settings) -> (Queue, Handle)
where
    E: SpanExporter + 'static,
{
    let (spans, received) = mpsc::channel(config.max_queued_spans);
    let wake = Arc::new(Notify::new());
    let (close, closing) = oneshot::channel();
    let timeout = config.export_timeout;
    let task = tokio::spawn(run(exporter, received, wake.clone(), timeout, closing));
    let handle = Handle {
        close: Some(close),
        task,
        timeout,
    };
    (Queue { spans, wake }, handle)
}

/// The exporting task.
async fn run<E: SpanExporter>(
    exporter: E,
    mut received: mpsc::Receiver<SpanData>,
    wake: Arc<Notify>,
    timeout: Duration,
    mut closing: oneshot::Receiver<()>,
) {
    let mut failing = false;
    loop {
        let last = tokio::select! {
            () = tokio::time::sleep(EVERY) => false,
            () = wake.notified() => false,
            _ = &mut closing => true,
        };
        loop {
            let mut batch = Vec::with_capacity(BATCH.min(received.len()));
            while batch.len() < BATCH {
                match received.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
            }
            let n = batch.len();
            if n == 0 {
                break;
            }
            let n64 = n as u64;
            match tokio::time::timeout(timeout, exporter.export(batch)).await {
                Ok(Ok(())) => {
                    STATS.exported.fetch_add(n64, Ordering::Relaxed);
                    if std::mem::take(&mut failing) {
                        tracing::info!("traces reach the collector again");
                    }
                }
                Ok(Err(e)) => {
                    STATS.failed.fetch_add(n64, Ordering::Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, "spans could not be exported: they are lost until the collector takes them again (snowgate_trace_spans_total)");
                    }
                }
                Err(_) => {
                    STATS.failed.fetch_add(n64, Ordering::Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                        tracing::warn!(timeout_ms, "spans could not be exported: the collector did not answer in time, and they are lost until it does (snowgate_trace_spans_total)");
                    }
                }
            }
            if n < BATCH {
                break;
            }
        }
        if last {
            return;
        }
    }
}
