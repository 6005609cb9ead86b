//! A second node's word before one node's answer is kept (`[cache] verify`): the miss that a
//! node answered alone is the client's at once, and kept only when another node, asked in the
//! background, returns the same bytes.
//!
//! The secondings in flight are bounded in all ([`MAX_SECONDINGS`]) and per client
//! ([`CLIENT_SECONDINGS`], the client its quota is kept for): one client's flood of distinct misses
//! cannot take them all and leave other clients' answers unkept. A seconding is a node request the
//! client's miss caused: it is charged to the client's quota (its method's cost again, by the
//! forwarding service, before it is sent), and not made over quota. A miss whose seconding is
//! refused for any of these is answered and not kept (`snowgate_answer_checks_total` counts it:
//! `busy`, `client_share`, `over_quota`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::{shares, AnswerCache, Entry, Fingerprint};
use crate::call::{Answer, AnswerKind, ClientId, Kept, Lookup, RpcCall};
use crate::error::ProxyError;

/// The most secondings (a second node asked before an answer is kept) in flight at once.
pub const MAX_SECONDINGS: usize = 64;

/// The most secondings one client's misses may have in flight: an eighth of them. A client is its
/// key, or its address's network (IPv4 /24, IPv6 /48): addresses rotated within one network hold
/// one share.
pub const CLIENT_SECONDINGS: usize = if MAX_SECONDINGS / 8 > 1 {
    MAX_SECONDINGS / 8
} else {
    1
};

/// The secondings in flight: their keys, and how many each client has (an entry only while it has
/// one: the map holds at most [`MAX_SECONDINGS`]).
#[derive(Debug, Default)]
pub(super) struct Secondings {
    keys: HashSet<Fingerprint>,
    per_client: HashMap<ClientId, usize>,
}

/// Why a seconding was not started (a seconding of the same key in flight is not counted: the
/// key will be kept by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Busy,
    ClientShare,
    Underway,
}

impl Secondings {
    /// Takes a seconding of `key` for `client` (its share is its network's: see
    /// [`ClientId::network`]).
    fn start(&mut self, key: Fingerprint, client: &ClientId) -> Result<(), Refused> {
        let client = &client.network();
        if self.keys.contains(&key) {
            return Err(Refused::Underway);
        }
        if self.keys.len() >= MAX_SECONDINGS {
            return Err(Refused::Busy);
        }
        let held = self.per_client.get(client).copied().unwrap_or(0);
        if held >= CLIENT_SECONDINGS {
            return Err(Refused::ClientShare);
        }
        self.keys.insert(key);
        self.per_client.insert(client.clone(), held + 1);
        Ok(())
    }

    /// Ends a seconding [`Secondings::start`] took.
    fn end(&mut self, key: Fingerprint, client: &ClientId) {
        let client = &client.network();
        self.keys.remove(&key);
        if let Some(held) = self.per_client.get_mut(client) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.per_client.remove(client);
            }
        }
    }
}

/// Asks another node than the one that gave `first` the same `call`, in a task of its own, and
/// keeps `first` under `key` (in memory, and in the fleet's Redis, as seconded, for a class it
/// shares) only when that node returns the same bytes: one node's word that `[cache] verify` wants
/// seconded. Nothing is kept when the second answers otherwise (which node is right cannot be
/// told: both are logged), fails, or there is no other node. One seconding at a time per key: a
/// miss meanwhile is answered by a node and not kept; and at most [`MAX_SECONDINGS`] at once in all
/// and [`CLIENT_SECONDINGS`] per client, so that a client sending many distinct misses cannot make
/// the gateway hold as many background calls, nor take them from others (a miss beyond is
/// answered and not kept).
pub(super) fn second<S>(
    cache: &Arc<AnswerCache>,
    inner: S,
    call: &RpcCall,
    key: &str,
    fingerprint: Fingerprint,
    ttl: Option<Duration>,
    first: &Answer,
) where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Send + 'static,
    S::Future: Send,
{
    let Some(node) = first.upstream.clone() else {
        return;
    };
    let client = call.caller.client.clone();
    let started = cache.seconding.lock().start(fingerprint, &client);
    if let Err(refused) = started {
        let result = match refused {
            Refused::Underway => return,
            Refused::Busy => "busy",
            Refused::ClientShare => "client_share",
        };
        cache
            .metrics
            .answer_checks
            .with_label_values(&[&call.spec.name, result])
            .inc();
        return;
    }
    let mut call = call.clone();
    // The gateway's own check, after the client has its answer: not part of the client's trace
    // (a span under the request's would keep the request's span open until it ends).
    call.caller.trace = crate::otel::Trace::OFF;
    call.lookup = Some(Lookup {
        key: None,
        height: None,
        second_to: Some(node.clone()),
    });
    let (cache, key, first) = (cache.clone(), key.to_string(), first.clone());
    let task = async move {
        /// Lets the next miss of the key start a seconding, however this one ends.
        struct Done(Arc<AnswerCache>, Fingerprint, ClientId);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.seconding.lock().end(self.1, &self.2);
            }
        }
        let _done = Done(cache.clone(), fingerprint, client);
        let (method, class) = (call.spec.name.clone(), call.spec.cache);
        let result = match inner.oneshot(call).await {
            // The caller's quota could not pay for the seconding (`crate::stack::Forward`).
            Err(ProxyError::RateLimited { .. }) => "over_quota",
            Ok(a) if a.kind == AnswerKind::Result && a.payload == first.payload => "agreed",
            Ok(a) if a.kind == AnswerKind::Result => {
                let second = a.upstream.as_deref().unwrap_or("-");
                tracing::warn!(method = %method, first = %node, second, "two nodes answered an immutable call differently: the answer is not kept");
                "disagreed"
            }
            Ok(_) | Err(_) => "unconfirmed",
        };
        cache
            .metrics
            .answer_checks
            .with_label_values(&[&method, result])
            .inc();
        if result != "agreed" {
            return;
        }
        if let Some(tier) = cache.shared.as_ref().filter(|_| shares(class)) {
            let ttl = ttl.unwrap_or(tier.immutable_ttl);
            tier.store(&key, &first.payload, Kept::Seconded, ttl);
        }
        let entry = Entry::new(&key, first.kind, &first.payload, ttl);
        let stored = cache.store.entry(fingerprint).or_insert(entry).await;
        if stored.is_fresh() {
            cache.index_entry(fingerprint, stored.value());
        }
        cache.refresh_gauges();
    };
    tokio::spawn(task.in_current_span());
}
