//! The HTTP half of the request path, one layer per file, in the order [`crate::stack`] composes
//! them (outermost first):
//!
//! * [`request_id`]: every answer and log line of a request carries `x-request-id`;
//! * [`trace`]: one span per request;
//! * [`cors`]: CORS as a node answers it (preflights end here);
//! * [`drain`]: while draining, answers close their connection;
//! * [`compress`]: gzip for clients that ask;
//! * [`router`]: routes, the node's HTTP refusals (404/405/415), the request body within its
//!   limits, and [`admin`]'s endpoints (the [`status`] page among them); RPC bodies go on to
//! * [`decode`]: the JSON-RPC envelope (or a [`batch`] of them) into calls for the per-call
//!   layers, and their answers written back with each client's id.
//!
//! Each hand-written layer is a `FooLayer` plus a `Foo<S>` service (tower-http's shape). Their
//! futures are concrete types, not boxed: a cache hit crosses all of them, and a boxed future per
//! layer would cost an allocation each (only the router boxes, once, as its future holds the
//! request body while the call runs).

pub mod admin;
pub mod batch;
pub mod compress;
pub mod cors;
pub mod decode;
pub mod drain;
pub mod record;
pub mod request_body;
pub mod request_id;
pub mod router;
pub mod rpc;
pub mod status;
pub mod trace;
pub mod usage;

use std::net::SocketAddr;

use http::header::HeaderName;
use http::{header, HeaderValue, Response, StatusCode};
use tokio::sync::Semaphore;

use crate::body::Chunks;

/// An answer as the layers under compression make it.
pub type HttpResponse = Response<Chunks>;

/// The header that carries a request's id, both ways.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What the HTTP layers know of the connection a request came on (one per connection).
pub struct ConnInfo {
    /// The client's socket address.
    pub peer: SocketAddr,
    /// The listener it came in on.
    pub surface: Surface,
    /// Room for this connection's request bodies (`limits.connection_body_bytes`): its HTTP/2
    /// streams together cannot buffer more.
    pub(crate) body_room: Semaphore,
}

impl ConnInfo {
    /// A connection from `peer` whose request bodies may buffer `body_room` bytes together.
    pub fn new(peer: SocketAddr, body_room: usize) -> ConnInfo {
        ConnInfo::on(Surface::Public, peer, body_room)
    }

    /// A connection to the `surface` listener.
    pub fn on(surface: Surface, peer: SocketAddr, body_room: usize) -> ConnInfo {
        ConnInfo {
            peer,
            surface,
            body_room: Semaphore::new(body_room),
        }
    }
}

/// The listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `[server] listen`: the RPC paths and health, and (without `[admin] listen`) the
    /// operator's endpoints behind the admin key.
    Public,
    /// `[admin] listen`: the operator's endpoints and health; no RPC.
    Admin,
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, body: impl Into<Chunks>) -> HttpResponse {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::jsonrpc::response::JSON_CONTENT_TYPE),
    );
    r
}

/// HTTP 200 with an empty body: what a node answers to a notification.
pub(crate) fn empty() -> HttpResponse {
    Response::new(Chunks::default())
}
