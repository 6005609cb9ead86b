//! gorilla/rpc v2 with avalanchego's json2 codec, for one service at one route: the 405/415 texts
//! checked before the body is read, the envelope decoded with a node's rules ([`jsonrpc::decode`]),
//! the method name mapped ([`names::resolve`]), the call counted and run, and the answer written
//! as a node writes it: every JSON-RPC error HTTP 200, notifications answered with an empty body,
//! `X-Content-Type-Options: nosniff` only once the method actually ran.

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::health;
use super::reply::{self, Resp, NOSNIFF};
use super::NodeState;
use crate::devnode::chain::{CallError, Chain, NodeVersion, BAD_ARGS};
use crate::jsonrpc::http as http_rules;
use crate::jsonrpc::{self, names, response, Json, Verdict};

/// Bodies larger than this are refused (413) instead of buffered: a devnode is a test tool, not a
/// sink for arbitrary uploads.
const MAX_BODY: usize = 16 << 20;

/// The gorilla service registered at a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `info.*` at `/ext/info`.
    Info,
    /// `platform.*` at the five P-chain routes.
    Platform,
    /// `health.*` for POST `/ext/health`.
    Health,
    /// `proposervm.*` at `/ext/bc/P/proposervm` (v1.14.0+).
    ProposerVm,
}

impl Service {
    /// The name gorilla registered the service under.
    fn name(self) -> &'static str {
        match self {
            Service::Info => "info",
            Service::Platform => "platform",
            Service::Health => "health",
            Service::ProposerVm => "proposervm",
        }
    }

    /// Does a node of release `version` serve `go_method` in this service?
    fn has_method(self, version: NodeVersion, go_method: &str) -> bool {
        match self {
            Service::Health => health::has_method(go_method),
            s => Chain::serves(version, s.name(), go_method),
        }
    }
}

/// Serves one JSON-RPC request to `service`.
pub async fn serve(node: &NodeState, req: Request<Incoming>, service: Service) -> Resp {
    if req.method() != Method::POST {
        return reply::rpc_error(
            StatusCode::METHOD_NOT_ALLOWED,
            http_rules::post_required_text(req.method()),
        );
    }
    // gorilla: the part before `;`, looked up lower-cased; the message shows it as sent.
    let (media, json) = http_rules::media_type(req.headers().get(header::CONTENT_TYPE));
    if !json {
        let msg = http_rules::unsupported_media_text(media);
        return reply::rpc_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, msg);
    }
    if let Some(traceparent) = req.headers().get("traceparent") {
        node.record_traceparent(traceparent.as_bytes());
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply::bare(StatusCode::PAYLOAD_TOO_LARGE),
    };
    if node.faults.hangs_methods() {
        node.faults
            .hold_method(&jsonrpc::decode(&body).envelope.method)
            .await;
    }
    answer(node, service, &body)
}

/// Decodes, dispatches and writes the answer for a request body.
fn answer(node: &NodeState, service: Service, body: &[u8]) -> Resp {
    let decoded = jsonrpc::decode(body);
    let env = &decoded.envelope;
    let id = env.id.as_deref();
    let (out, ran) = match decoded.verdict() {
        // Parse errors are answered even without an id.
        Verdict::ParseError(msg) => {
            let data = decoded.error_data();
            return json_answer(response::error(-32700, &msg, Some(&data), id), false);
        }
        Verdict::InvalidVersion => {
            let data = decoded.error_data();
            (
                response::error(-32600, "jsonrpc must be 2.0", Some(&data), id),
                false,
            )
        }
        Verdict::Call if node.faults.fails_method(&env.method) => {
            node.calls.record(&env.method);
            return reply::rpc_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "devnode: injected fault for this method\n",
            );
        }
        Verdict::Call => {
            node.calls.record(&env.method);
            dispatch(node, service, &env.method, env.params.as_ref(), id)
        }
    };
    if id.is_none() {
        // A notification: the method ran (if it could), nothing is written.
        let mut r = reply::bare(StatusCode::OK);
        if ran {
            r.headers_mut()
                .insert(header::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
        }
        return r;
    }
    json_answer(out, ran)
}

/// Resolves and runs the method; returns the body and whether the method ran.
fn dispatch(
    node: &NodeState,
    service: Service,
    method: &str,
    params: Option<&Json>,
    id: Option<&[u8]>,
) -> (Vec<u8>, bool) {
    let version = node.version();
    let go_method = match names::resolve(method, service.name(), |m| service.has_method(version, m))
    {
        Ok(m) => m,
        Err(e) => return (response::error(-32000, &e.0, None, id), false),
    };
    let result = match service {
        Service::Health => health::rpc(node, &go_method, params),
        Service::Info | Service::Platform | Service::ProposerVm => {
            node.call_chain(service.name(), &go_method, params)
        }
    };
    match result {
        Ok(result) => (response::success(result.as_bytes(), id), true),
        // avalanchego decodes params before the call: the method did not run.
        Err(CallError::BadArgs) => (response::error(-32000, BAD_ARGS, None, id), false),
        Err(CallError::App(msg)) => (response::error(-32000, &msg, None, id), true),
    }
}

fn json_answer(body: Vec<u8>, ran: bool) -> Resp {
    let mut r = reply::json(
        StatusCode::OK,
        Bytes::from(body),
        response::JSON_CONTENT_TYPE,
    );
    if ran {
        r.headers_mut()
            .insert(header::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
    }
    r
}
