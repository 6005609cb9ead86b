//! The record of each request: its whole duration, from its arrival to its answer, into
//! `snowgate_request_duration_seconds{method,cache}`, and with `[log] access = true` one access
//! line. Every request is recorded exactly once, however it ends.
//!
//! Who records what:
//! * a JSON-RPC request (a `POST` to one of [`super::rpc`]'s paths) carries a [`Record`] from the
//!   router down inside its [`super::rpc::RpcRequest`]: the router finishes it when it refuses
//!   the request (415, a body over its limits, over quota before the body), the decoding layer
//!   when it answers (it knows the method, the cache result, the node), and the record's own
//!   `Drop` when neither did because the client went away first (status 499, as nginx logs it);
//! * every other request (health, metrics, a 404, a CORS preflight) is recorded by the trace
//!   layer ([`super::trace`]), which knows nothing of RPC but [`super::rpc::is_rpc`].
//!
//! So the answer carries nothing back up for it, and a call costs no allocation for it
//! (measured: a summary handed up in the response's extensions cost 3 % of a cache hit's CPU).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, StatusCode};

use crate::call::RequestSummary;
use crate::metrics::HistogramTable;

/// What is recorded of each request: its duration, and the access line if asked for.
pub struct RequestLog {
    pub durations: HistogramTable,
    /// `[log] access`.
    pub access: bool,
}

impl RequestLog {
    /// Records the end of a request that began at `started`: its duration under its method (or
    /// batch, or none) and cache result, and its access line when they are on.
    pub fn finish(
        &self,
        started: Instant,
        status: StatusCode,
        request_id: Option<&HeaderValue>,
        summary: &RequestSummary,
    ) {
        let took = started.elapsed();
        let table = &self.durations;
        let row = match summary {
            RequestSummary { batch: true, .. } => table.batch_row(),
            RequestSummary {
                method: Some(spec), ..
            } => spec.index,
            _ => table.none_row(),
        };
        table.observe(row, summary.cache, took.as_secs_f64());
        if self.access {
            let no_id = HeaderValue::from_static("-");
            let id = request_id.unwrap_or(&no_id);
            access_line(id, status.as_u16(), summary, took);
        }
    }
}

/// One JSON-RPC request's record, until it is finished: when it began, its request id, and what
/// it came to ([`Record::summary`], filled on the way). Finished once, by [`Record::finish`] or,
/// when the request's future is dropped before its answer (the client went away), by `Drop`
/// with status 499. A plain value moved down with the request: no allocation.
#[derive(Debug)]
pub struct Record {
    log: Arc<RequestLog>,
    started: Instant,
    request_id: Option<HeaderValue>,
    /// What the request came to so far: the client, then the method, calls, cache result, node.
    pub summary: RequestSummary,
    finished: bool,
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// The status an answer never sent is recorded with: the client closed the request (nginx's).
const CLIENT_GONE: u16 = 499;

impl Record {
    /// The record of a request from `client` that began at `started`.
    pub fn begin(
        log: Arc<RequestLog>,
        started: Instant,
        request_id: Option<HeaderValue>,
        client: IpAddr,
    ) -> Record {
        Record {
            log,
            started,
            request_id,
            summary: RequestSummary {
                client: Some(client),
                ..RequestSummary::default()
            },
            finished: false,
        }
    }

    /// The request was answered with `status`: recorded now.
    pub fn finish(mut self, status: StatusCode) {
        self.record(status);
    }

    fn record(&mut self, status: StatusCode) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        self.log.finish(
            self.started,
            status,
            self.request_id.as_ref(),
            &self.summary,
        );
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if !self.finished {
            let gone = StatusCode::from_u16(CLIENT_GONE).unwrap_or(StatusCode::BAD_REQUEST);
            self.record(gone);
        }
    }
}

/// One access line: who asked what, what came of it, how long it took. Never params, never keys:
/// the method is a registered name, the upstream a configured name, the client an address.
fn access_line(id: &HeaderValue, status: u16, s: &RequestSummary, took: Duration) {
    let method = match (&s.method, s.batch) {
        (_, true) => "batch",
        (Some(spec), false) => spec.name.as_str(),
        (None, false) => "-",
    };
    let client = s
        .client
        .map_or_else(|| "-".to_string(), |ip| ip.to_string());
    tracing::info!(
        target: "snowgate::access",
        request_id = id.to_str().unwrap_or("-"),
        client = client.as_str(),
        method,
        calls = s.calls,
        status,
        cache = s.cache.unwrap_or("-"),
        upstream = s.upstream.as_deref().unwrap_or("-"),
        duration_ms = (took.as_secs_f64() * 1e6).round() / 1e3,
        "request"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> (Arc<RequestLog>, prometheus::HistogramVec) {
        let metrics = crate::metrics::Metrics::new();
        let vec = metrics.request_duration.clone();
        let log = RequestLog {
            durations: HistogramTable::new(vec.clone(), Vec::new()),
            access: false,
        };
        (Arc::new(log), vec)
    }

    fn recorded(vec: &prometheus::HistogramVec) -> u64 {
        use prometheus::core::Collector;
        vec.collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .map(|m| m.get_histogram().get_sample_count())
            .sum()
    }

    #[test]
    fn a_record_is_counted_once_when_finished_and_once_when_dropped() {
        let (log, vec) = log();
        let ip = [127, 0, 0, 1].into();
        let record = Record::begin(log.clone(), Instant::now(), None, ip);
        record.finish(StatusCode::OK);
        assert_eq!(recorded(&vec), 1, "finished, then dropped: once");
        // Dropped unfinished: the client went away.
        drop(Record::begin(log, Instant::now(), None, ip));
        assert_eq!(recorded(&vec), 2);
    }
}
