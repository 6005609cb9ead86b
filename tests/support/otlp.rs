//! An OpenTelemetry collector in process: an OTLP/HTTP receiver on 127.0.0.1:0 that decodes each
//! `POST /v1/traces` (protobuf, with the protocol's own message types) and keeps the spans, or
//! answers slowly or with an error when a test wants a collector that is slow or down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;

/// A span as received, its ids in lower-case hex (`parent` empty for a root).
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    /// OTLP's `SpanKind`: 2 server, 3 client, 1 internal.
    pub kind: i32,
    pub attrs: BTreeMap<String, String>,
    /// `Status.code` 2 (error).
    pub error: bool,
    /// The links' `(trace_id, span_id)`.
    pub links: Vec<(String, String)>,
    /// `service.name` of the resource it came with.
    pub service: String,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
}

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    Accept,
    /// Holds every export this long before accepting it.
    Slow(Duration),
    /// Answers every export with this HTTP status, keeping nothing.
    Refuse(u16),
}

#[derive(Default)]
struct State {
    spans: Vec<Span>,
    exports: usize,
    mode: Option<Mode>,
}

/// The running receiver; stopped when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`, as `[tracing] otlp_endpoint`.
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state: Arc<Mutex<State>> = Arc::default();
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(receive(&state, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Receiver { url, state, task }
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    /// Every span kept so far.
    pub fn spans(&self) -> Vec<Span> {
        self.state.lock().unwrap().spans.clone()
    }

    /// Export requests received (kept or not).
    pub fn exports(&self) -> usize {
        self.state.lock().unwrap().exports
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &str) -> Vec<Span> {
        let spans = self.spans();
        spans
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// Waits at most `limit` for a span that `pick` accepts, and returns it.
    pub async fn wait_for(&self, limit: Duration, pick: impl Fn(&Span) -> bool) -> Option<Span> {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Some(s) = self.spans().into_iter().find(|s| pick(s)) {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

async fn receive(state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path_ok = req.uri().path() == "/v1/traces";
    let typed = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/x-protobuf");
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let mode = {
        let mut s = state.lock().unwrap();
        s.exports += 1;
        s.mode.unwrap_or(Mode::Accept)
    };
    let status = match mode {
        Mode::Accept => 200,
        Mode::Slow(wait) => {
            tokio::time::sleep(wait).await;
            200
        }
        Mode::Refuse(status) => status,
    };
    let reply = |status: u16, body: Vec<u8>| {
        Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    if status != 200 {
        return reply(status, Vec::new());
    }
    let (Ok(body), true, true) = (body, path_ok, typed) else {
        return reply(400, Vec::new());
    };
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return reply(400, Vec::new());
    };
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for s in scope.spans {
                spans.push(Span {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    attrs: attributes(&s.attributes),
                    error: s.status.is_some_and(|st| st.code == 2),
                    links: (s.links.iter())
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    state.lock().unwrap().spans.extend(spans);
    reply(200, ExportTraceServiceResponse::default().encode_to_vec())
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `snowgate_trace_spans_total{outcome}` in a `/metrics` text (0 when absent).
pub fn spans_counted(metrics: &str, outcome: &str) -> u64 {
    let series = format!("snowgate_trace_spans_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (at most a minute) until the gateway at `url` answers a call with a result.
pub async fn answering(url: &str) {
    let rpc = format!("{url}/ext/bc/P");
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let r = super::post(&rpc, &super::call("platform.getHeight", "{}")).await;
        if r.status == 200 && r.body.contains("\"result\"") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the gateway at {url} never answered");
}
