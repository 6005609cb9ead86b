//! The devnode's HTTP side. (Skeleton: faults, control endpoint and health are being filled in.)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::chain::{CallError, Chain, ChainConfig, NodeIdentity, View, BAD_ARGS};
use super::{DevNodeConfig, Network};
use crate::jsonrpc::{self, names, response, Verdict};

/// Faults a test can inject (skeleton).
#[derive(Debug, Clone, Default)]
pub struct Faults {}

/// The P-chain's five routes.
pub const P_CHAIN_PATHS: [&str; 5] = [
    "/ext/bc/P",
    "/ext/P",
    "/ext/platform",
    "/ext/bc/platform",
    "/ext/bc/11111111111111111111111111111111LpoYY",
];

struct NodeState {
    network: Network,
    identity: NodeIdentity,
}

/// A running devnode. Dropping it shuts the server down.
pub struct DevNode {
    addr: SocketAddr,
    network: Network,
    _shutdown: watch::Sender<bool>,
}

impl DevNode {
    /// Starts a devnode with its own network.
    pub async fn spawn(config: DevNodeConfig) -> std::io::Result<DevNode> {
        let network = Network::start(ChainConfig {
            network_id: config.network_id,
            seed: config.seed,
            block_interval: config.block_interval,
        });
        DevNode::spawn_in(network, config).await
    }

    /// Starts a devnode that joins `network` (shares its chain).
    pub async fn spawn_in(network: Network, config: DevNodeConfig) -> std::io::Result<DevNode> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(NodeState {
            network: network.clone(),
            identity: NodeIdentity::generate(config.seed, config.node_index),
        });
        let (tx, rx) = watch::channel(false);
        tokio::spawn(accept_loop(listener, state, rx));
        Ok(DevNode {
            addr,
            network,
            _shutdown: tx,
        })
    }

    /// The address the node listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node's base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The network this node belongs to.
    pub fn network(&self) -> &Network {
        &self.network
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<NodeState>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r { Ok(s) => s, Err(_) => continue },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(
    state: Arc<NodeState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let service = match req.uri().path() {
        "/ext/info" => "info",
        p if P_CHAIN_PATHS.contains(&p) => "platform",
        _ => return Ok(text(StatusCode::NOT_FOUND, "404 page not found\n")),
    };
    if req.method() != Method::POST {
        let msg = format!("rpc: POST method required, received {}", req.method());
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "");
        *r.body_mut() = Full::new(Bytes::from(msg));
        return Ok(r);
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ct = ct.split(';').next().unwrap_or("");
    if !ct.eq_ignore_ascii_case("application/json") {
        let mut r = text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "");
        *r.body_mut() = Full::new(Bytes::from(format!("rpc: unrecognized Content-Type: {ct}")));
        return Ok(r);
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(text(StatusCode::BAD_REQUEST, "")),
    };
    let decoded = jsonrpc::decode(&body);
    let id = decoded.envelope.id.as_deref();
    let answer = match decoded.verdict() {
        Verdict::ParseError(msg) => Some(response::error(
            -32700,
            &msg,
            Some(&decoded.error_data()),
            id,
        )),
        Verdict::InvalidVersion => Some(response::error(
            -32600,
            "jsonrpc must be 2.0",
            Some(&decoded.error_data()),
            id,
        )),
        Verdict::Call => {
            let out = match names::resolve(&decoded.envelope.method, service, |m| {
                Chain::has_method(service, m)
            }) {
                Err(e) => response::error(-32000, &e.0, None, id),
                Ok(go) => {
                    let chain = state.network.chain().read();
                    let view = View {
                        height_cap: None,
                        bootstrapped: true,
                        identity: &state.identity,
                    };
                    match chain.call(&view, service, &go, decoded.envelope.params.as_ref()) {
                        Ok(result) => response::success(result.as_bytes(), id),
                        Err(CallError::BadArgs) => response::error(-32000, BAD_ARGS, None, id),
                        Err(CallError::App(msg)) => response::error(-32000, &msg, None, id),
                    }
                }
            };
            Some(out)
        }
    };
    let parse_error = matches!(decoded.verdict(), Verdict::ParseError(_));
    let answer = if id.is_none() && !parse_error {
        None
    } else {
        answer
    };
    let has_body = answer.is_some();
    let mut r = Response::new(Full::new(answer.map(Bytes::from).unwrap_or_default()));
    if has_body {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(response::JSON_CONTENT_TYPE),
        );
    }
    Ok(r)
}
