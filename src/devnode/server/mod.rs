//! The devnode's HTTP side: a hyper server that answers the way avalanchego's API server does
//! (its HTTP stack: `Node-Id`, rs/cors, the host filter, gorilla/mux routing and gorilla/rpc's
//! refusals, as avalanchego v1.14 runs them), plus what tests need from a simulated node:
//! faults on demand, call counts, going down and up again, and a control endpoint.
//!
//! A request goes through, in this order (`handle` and `node_stack`):
//!
//! 1. `control`: `/_devnode/...` is answered first, outside the node's stack (no faults).
//! 2. `faults`: hang, latency, dropped connections, injected 500s.
//! 3. `Node-Id` on every answer, then CORS ([`crate::jsonrpc::http::Cors`], the gateway's rules too;
//!    preflights end here), then the `hosts` filter,
//!    the `Avalanche-Api-Route` header, then `routes` (404, 301 for unclean paths).
//! 4. P-chain routes only (and `/ext/bc/P/proposervm` from v1.14.0): the bootstrapping gate (503).
//! 5. `rpc`: gorilla/rpc's 405/415, the envelope, method dispatch to the chain or `health`.
//!
//! With a [`TlsIdentity`] the node serves HTTPS instead (`tls`): the handshake comes first, the
//! rest is the same.
//!
//! [`DevNode`] owns a running node; [`Control`] is the cheap, cloneable handle that changes it.

mod calls;
mod control;
mod faults;
mod health;
mod hosts;
mod reply;
mod routes;
mod rpc;
mod tls;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::calls::CallCounter;
pub use self::faults::Faults;
use self::faults::{FaultState, Injected};
use self::health::HealthState;
use self::reply::Resp;
pub use self::routes::P_CHAIN_PATHS;
use self::routes::{HealthKind, Route, Routing};
use self::rpc::Service;
pub use self::tls::TlsIdentity;
use super::chain::{CallError, Chain, ChainConfig, NodeIdentity, NodeVersion, View};
use super::{DevNodeConfig, Network};
use crate::jsonrpc::http::{Cors, NOT_FOUND_TEXT};
use crate::jsonrpc::Json;

/// The header avalanchego sets on every answer (Go canonicalises `node-id` to `Node-Id`).
const NODE_ID: HeaderName = HeaderName::from_static("node-id");
/// The header that bypasses path routing on a real node (gRPC/connect handlers).
const API_ROUTE: HeaderName = HeaderName::from_static("avalanche-api-route");
/// Time a client has to finish the TLS handshake (Go's read timeout in avalanchego).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// The `traceparent` headers a node keeps for [`Control::traceparents`].
pub const TRACEPARENTS_KEPT: usize = 256;
/// Pending connections the kernel queues for us.
const BACKLOG: u32 = 1024;

/// Everything one running node shares between its connections and its [`Control`] handles.
struct NodeState {
    network: Network,
    identity: NodeIdentity,
    /// The release this node plays: what `info.getNodeVersion` reports and which methods and
    /// routes it serves. Changeable live ([`Control::set_version`]), as an upgrade does.
    version: parking_lot::RwLock<NodeVersion>,
    node_id_header: HeaderValue,
    addr: SocketAddr,
    /// Set when the node serves HTTPS: every connection is a TLS handshake first.
    tls: Option<tokio_rustls::TlsAcceptor>,
    faults: FaultState,
    calls: CallCounter,
    /// The `traceparent` of the last [`TRACEPARENTS_KEPT`] JSON-RPC requests that carried one,
    /// oldest first: what a node that traces would have continued.
    traceparents: parking_lot::Mutex<std::collections::VecDeque<String>>,
    health: HealthState,
    /// Bumped to drop every open connection (going down, or the node being dropped).
    kill: watch::Sender<u64>,
    /// The accept loop while the node is up.
    listening: parking_lot::Mutex<Option<JoinHandle<()>>>,
    /// Serialises `go_down` / `come_up`.
    transitions: tokio::sync::Mutex<()>,
    /// Set when the [`DevNode`] is dropped: the node never comes up again.
    closed: AtomicBool,
}

impl NodeState {
    /// Keeps a request's `traceparent` (see [`NodeState::traceparents`]).
    fn record_traceparent(&self, value: &[u8]) {
        let mut kept = self.traceparents.lock();
        if kept.len() == TRACEPARENTS_KEPT {
            kept.pop_front();
        }
        kept.push_back(String::from_utf8_lossy(value).into_owned());
    }

    /// The release this node plays now.
    fn version(&self) -> NodeVersion {
        *self.version.read()
    }

    /// How this node sees the chain right now.
    fn view(&self) -> View<'_> {
        View {
            height_cap: self.faults.height_cap(),
            bootstrapped: !self.faults.bootstrapping(),
            identity: &self.identity,
            version: self.version(),
            lie: self.faults.lie(),
        }
    }

    /// The height this node sees.
    fn height(&self) -> u64 {
        self.network.current().height(&self.view())
    }

    /// The network's height, whatever this node's faults.
    fn network_height(&self) -> u64 {
        let view = View {
            height_cap: None,
            bootstrapped: true,
            identity: &self.identity,
            version: self.version(),
            lie: false,
        };
        self.network.current().height(&view)
    }

    /// Runs a chain method as this node.
    fn call_chain(
        &self,
        service: &str,
        go_method: &str,
        params: Option<&Json>,
    ) -> Result<String, CallError> {
        let view = self.view();
        self.network
            .current()
            .call(&view, service, go_method, params)
    }

    fn kill_connections(&self) {
        self.kill
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }
}

/// A running devnode. Dropping it shuts the server down (listener closed, connections dropped).
pub struct DevNode {
    control: Control,
    network: Network,
}

impl DevNode {
    /// Starts a devnode with a network (chain) of its own.
    pub async fn spawn(config: DevNodeConfig) -> io::Result<DevNode> {
        let network = Network::start(ChainConfig {
            network_id: config.network_id,
            seed: config.seed,
            block_interval: config.block_interval,
            genesis: config.genesis,
        })?;
        DevNode::spawn_in(network, config).await
    }

    /// Starts a devnode that joins `network`: several nodes share one chain, as in a real
    /// network (give each its own `node_index`). `config.network_id`, `seed` and
    /// `block_interval` are the network's business and are only used for the node's identity
    /// (`seed`).
    pub async fn spawn_in(network: Network, config: DevNodeConfig) -> io::Result<DevNode> {
        // A bad certificate or key fails here, before the port is taken.
        let tls = config.tls.as_ref().map(TlsIdentity::acceptor).transpose()?;
        let listener = bind(config.listen)?;
        let addr = listener.local_addr()?;
        let identity = NodeIdentity::generate(config.seed, config.node_index);
        let node_id_header = HeaderValue::from_str(&identity.node_id)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let node = Arc::new(NodeState {
            network: network.clone(),
            identity,
            version: parking_lot::RwLock::new(config.version),
            node_id_header,
            addr,
            tls,
            faults: FaultState::default(),
            calls: CallCounter::default(),
            traceparents: parking_lot::Mutex::default(),
            health: HealthState::default(),
            kill: watch::Sender::new(0),
            listening: parking_lot::Mutex::new(None),
            transitions: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
        });
        let control = Control { node };
        control.set_faults(config.faults);
        *control.node.listening.lock() =
            Some(tokio::spawn(accept_loop(listener, control.node.clone())));
        Ok(DevNode { control, network })
    }

    /// The address the node listens on (the real port when `listen` had port 0).
    pub fn addr(&self) -> SocketAddr {
        self.control.node.addr
    }

    /// The node's base URL (`http://127.0.0.1:PORT`, or `https://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.control.node.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr())
    }

    /// The release the node plays.
    pub fn version(&self) -> NodeVersion {
        self.control.node.version()
    }

    /// The network this node belongs to.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The node's `NodeID-…` (sent in every answer's `Node-Id` header).
    pub fn node_id(&self) -> &str {
        &self.control.node.identity.node_id
    }

    /// A handle that changes this node's faults and reads its call counts.
    pub fn control(&self) -> Control {
        self.control.clone()
    }
}

impl Drop for DevNode {
    fn drop(&mut self) {
        let node = &self.control.node;
        let mut listening = node.listening.lock();
        node.closed.store(true, Ordering::Release);
        if let Some(task) = listening.take() {
            task.abort();
        }
        drop(listening);
        node.kill_connections();
    }
}

/// Changes a running devnode: faults, going down and up, call counts. Cheap to clone; works from
/// any task or thread.
#[derive(Clone)]
pub struct Control {
    node: Arc<NodeState>,
}

impl Control {
    /// Replaces the node's faults. Freezing starts at the height of this moment; clearing
    /// `hang` releases held requests.
    pub fn set_faults(&self, faults: Faults) {
        self.update_faults(|f| *f = faults);
    }

    /// Changes some of the node's faults, atomically with respect to other updates.
    pub fn update_faults(&self, change: impl FnOnce(&mut Faults)) {
        self.node
            .faults
            .update(change, || self.node.network_height());
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.node.faults.get()
    }

    /// Freezes the height this node sees at the current height (a lagging node).
    pub fn freeze(&self) {
        self.update_faults(|f| f.frozen = true);
    }

    /// Unfreezes: the node catches up with the network at once.
    pub fn unfreeze(&self) {
        self.update_faults(|f| f.frozen = false);
    }

    /// Starts or stops pretending to bootstrap.
    pub fn set_bootstrapping(&self, bootstrapping: bool) {
        self.update_faults(|f| f.bootstrapping = bootstrapping);
    }

    /// Goes down: closes the listener (new connections are refused) and drops every open
    /// connection. Returns once the listener is closed. Idempotent.
    pub async fn go_down(&self) {
        let _serial = self.node.transitions.lock().await;
        let task = self.node.listening.lock().take();
        if let Some(task) = task {
            task.abort();
            // Resolves once the accept loop (and its listener) has been dropped.
            let _ = task.await;
        }
        self.node.kill_connections();
    }

    /// Comes back up on the same address. Idempotent; fails if the port was taken meanwhile or
    /// the [`DevNode`] was dropped.
    pub async fn come_up(&self) -> io::Result<()> {
        let _serial = self.node.transitions.lock().await;
        if self.node.listening.lock().is_some() {
            return Ok(());
        }
        let listener = bind(self.node.addr)?;
        let mut listening = self.node.listening.lock();
        if self.node.closed.load(Ordering::Acquire) {
            return Err(io::Error::other("the devnode was dropped"));
        }
        *listening = Some(tokio::spawn(accept_loop(listener, self.node.clone())));
        Ok(())
    }

    /// Whether the node is listening.
    pub fn is_up(&self) -> bool {
        self.node.listening.lock().is_some()
    }

    /// Call counts per method string exactly as requests named it (every request that reached
    /// method dispatch, notifications and unknown methods included).
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.node.calls.snapshot()
    }

    /// Calls of `method` (as requests named it) so far.
    pub fn call_count(&self, method: &str) -> u64 {
        self.node.calls.get(method)
    }

    /// Requests answered 429 by the `throttle_rate` fault so far (they never reach the node's
    /// methods, so they are not in the call counts).
    pub fn throttled_count(&self) -> u64 {
        self.node.faults.throttled()
    }

    /// All calls so far.
    pub fn total_calls(&self) -> u64 {
        self.node.calls.total()
    }

    /// Forgets the call counts.
    pub fn reset_calls(&self) {
        self.node.calls.reset();
    }

    /// The `traceparent` headers of the last JSON-RPC requests that carried one, oldest first
    /// (at most [`TRACEPARENTS_KEPT`]).
    pub fn traceparents(&self) -> Vec<String> {
        self.node.traceparents.lock().iter().cloned().collect()
    }

    /// The P-chain height this node reports (capped while frozen).
    pub fn height(&self) -> u64 {
        self.node.height()
    }

    /// The node's `NodeID-…`.
    pub fn node_id(&self) -> &str {
        &self.node.identity.node_id
    }

    /// The release the node plays.
    pub fn version(&self) -> NodeVersion {
        self.node.version()
    }

    /// Plays another release from the next request on (a node upgraded or downgraded in place;
    /// open connections are kept: go down and up around it to mimic a restart).
    pub fn set_version(&self, version: NodeVersion) {
        *self.node.version.write() = version;
    }

    /// The address the node listens on (when up).
    pub fn addr(&self) -> SocketAddr {
        self.node.addr
    }

    /// What `GET /_devnode` answers.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "node_id": self.node.identity.node_id,
            "version": self.node.version().to_string(),
            "addr": self.node.addr.to_string(),
            "up": self.is_up(),
            "height": self.node.height(),
            "network_height": self.node.network_height(),
            "faults": self.faults(),
            "total_calls": self.total_calls(),
        })
    }
}

/// Binds with `SO_REUSEADDR`, so a node can come back up on its port while connections it
/// dropped are still in TIME_WAIT.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Accepts connections until aborted; each connection serves HTTP/1.1 (keep-alive) or HTTP/2
/// (prior knowledge in cleartext, ALPN over TLS) until it ends or the node drops it.
async fn accept_loop(listener: TcpListener, node: Arc<NodeState>) {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Go's ReadHeaderTimeout default in avalanchego.
        .header_read_timeout(Duration::from_secs(30))
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::debug!(error = %e, "devnode accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // Subscribed before the task starts, so a kill sent meanwhile is not missed.
        let mut kill = node.kill.subscribe();
        let node = node.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let Some(acceptor) = node.tls.clone() else {
                serve_connection(&builder, TokioIo::new(stream), node, kill).await;
                return;
            };
            // Go's server gives the handshake the read timeout (30 s); a client that never
            // finishes it is dropped, and so is it when the node goes down meanwhile.
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "devnode tls handshake failed");
                        return;
                    }
                    Err(_) => return,
                },
                _ = kill.changed() => return,
            };
            serve_connection(&builder, TokioIo::new(stream), node, kill).await;
        });
    }
}

/// Serves HTTP on one connection (plain or TLS) until it ends or the node drops it.
async fn serve_connection<I>(
    builder: &hyper_util::server::conn::auto::Builder<TokioExecutor>,
    io: I,
    node: Arc<NodeState>,
    mut kill: watch::Receiver<u64>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| handle(node.clone(), req));
    let conn = builder.serve_connection(io, service);
    tokio::select! {
        _ = conn => {}
        _ = kill.changed() => {}
    }
}

/// The error that makes hyper close a connection without answering (injected drop).
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by an injected fault")]
struct Dropped;

/// One request, outermost first: control endpoint, faults, then the node's own stack.
async fn handle(node: Arc<NodeState>, req: Request<Incoming>) -> Result<Resp, Dropped> {
    let mut resp = if control::is_control(req.uri().path()) {
        // Outside the node's stack: never faulted, so a test can always clear what it set.
        let mut resp = control::serve(&Control { node: node.clone() }, req).await;
        Cors::NODE.decorate(resp.headers_mut(), false);
        resp
    } else {
        match node.faults.before_request().await {
            Injected::Serve => node_stack(&node, req).await,
            Injected::Drop => return Err(Dropped),
            Injected::Error => {
                let mut resp = reply::rpc_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "devnode: injected fault\n",
                );
                Cors::NODE.decorate(resp.headers_mut(), false);
                resp
            }
            Injected::Throttle(wait) => {
                let mut resp =
                    reply::rpc_error(StatusCode::TOO_MANY_REQUESTS, "devnode: throttled\n");
                if let Some(wait) = wait {
                    resp.headers_mut()
                        .insert(http::header::RETRY_AFTER, HeaderValue::from(wait.as_secs()));
                }
                resp
            }
        }
    };
    // avalanchego's wrapHandler sets it before anything else can answer.
    resp.headers_mut()
        .insert(NODE_ID, node.node_id_header.clone());
    Ok(resp)
}

/// avalanchego's handler chain after `Node-Id`: rs/cors wraps everything.
async fn node_stack(node: &NodeState, req: Request<Incoming>) -> Resp {
    // rs/cors answers preflights itself: they never reach the host filter or the router.
    if let Some(headers) = Cors::NODE.preflight(req.method(), req.headers()) {
        let mut resp = reply::bare(StatusCode::OK);
        *resp.headers_mut() = headers;
        return resp;
    }
    let allowed = Cors::NODE.allows(req.method(), req.headers());
    let mut resp = routed(node, req).await;
    Cors::NODE.decorate(resp.headers_mut(), allowed);
    resp
}

/// Host filter, `Avalanche-Api-Route`, path routing and the handlers.
async fn routed(node: &NodeState, req: Request<Incoming>) -> Resp {
    // Go's server refuses an HTTP/1.1 request without Host before any handler.
    let host = match req.uri().authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => req.headers().get(header::HOST).map(HeaderValue::as_bytes),
    };
    if host.is_none() && req.version() == Version::HTTP_11 {
        let mut r = reply::rpc_error(
            StatusCode::BAD_REQUEST,
            "400 Bad Request: missing required Host header",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if !hosts::allowed(host) {
        return reply::go_error(StatusCode::FORBIDDEN, "invalid host specified\n");
    }
    // A real node hands these to gRPC/connect handlers; the devnode registers none.
    if let Some(value) = req.headers().get(API_ROUTE) {
        return reply::bare(if value.is_empty() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::NOT_FOUND
        });
    }
    let route = match routes::resolve(req.uri().path()) {
        Routing::Clean(route) => route,
        Routing::Redirect(mut location) => {
            if let Some(q) = req.uri().query() {
                location.push('?');
                location.push_str(q);
            }
            let mut r = reply::bare(StatusCode::MOVED_PERMANENTLY);
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            return r;
        }
        Routing::BadRequest => {
            return reply::rpc_error(StatusCode::BAD_REQUEST, "400 Bad Request");
        }
    };
    match route {
        None => reply::go_error(StatusCode::NOT_FOUND, NOT_FOUND_TEXT),
        // A P-chain-only provider: no info API at all.
        Some(Route::Info) if node.faults.no_info_api() => {
            reply::go_error(StatusCode::NOT_FOUND, NOT_FOUND_TEXT)
        }
        Some(Route::Info) => rpc::serve(node, req, Service::Info).await,
        Some(Route::Platform) if node.faults.bootstrapping() => reply::go_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "API call rejected because chain is not done bootstrapping\n",
        ),
        Some(Route::Platform) => rpc::serve(node, req, Service::Platform).await,
        // The ProposerVM API exists from v1.14.0 on; before, the path is unknown to the router.
        Some(Route::ProposerVm)
            if !Chain::serves(node.version(), "proposervm", "GetCurrentEpoch") =>
        {
            reply::go_error(StatusCode::NOT_FOUND, NOT_FOUND_TEXT)
        }
        // A chain route: behind the same bootstrapping gate as the P-chain's own.
        Some(Route::ProposerVm) if node.faults.bootstrapping() => reply::go_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "API call rejected because chain is not done bootstrapping\n",
        ),
        Some(Route::ProposerVm) => rpc::serve(node, req, Service::ProposerVm).await,
        Some(Route::Health) if req.method() == Method::GET => health::get(node, HealthKind::Health),
        Some(Route::Health) => rpc::serve(node, req, Service::Health).await,
        Some(Route::HealthReport(kind)) => health::get(node, kind),
    }
}
