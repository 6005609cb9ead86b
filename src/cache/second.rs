//! A second node's word before one node's answer is kept (`[cache] verify`): the miss that a
//! node answered alone is the client's at once, and kept only when another node, asked in the
//! background, returns the same bytes.

use std::sync::Arc;
use std::time::Duration;

use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::{shares, AnswerCache, Entry, Fingerprint};
use crate::call::{Answer, AnswerKind, Kept, Lookup, RpcCall};
use crate::error::ProxyError;

/// The most secondings (a second node asked before an answer is kept) in flight at once.
pub const MAX_SECONDINGS: usize = 64;

/// Asks another node than the one that gave `first` the same `call`, in a task of its own, and
/// keeps `first` under `key` (in memory, and in the fleet's Redis, as seconded, for a class it
/// shares) only when that node returns the same bytes: one node's word that `[cache] verify` wants
/// seconded. Nothing is kept when the second answers otherwise (which node is right cannot be
/// told: both are logged), fails, or there is no other node. One seconding at a time per key: a
/// miss meanwhile is answered by a node and not kept; and at most [`MAX_SECONDINGS`] at once in all, so that a
/// client sending many distinct misses cannot make the gateway hold as many background calls (a
/// miss beyond is answered and not kept).
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
    {
        let mut seconding = cache.seconding.lock();
        if seconding.len() >= MAX_SECONDINGS || !seconding.insert(fingerprint) {
            return;
        }
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
        struct Done(Arc<AnswerCache>, Fingerprint);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.seconding.lock().remove(&self.1);
            }
        }
        let _done = Done(cache.clone(), fingerprint);
        let (method, class) = (call.spec.name.clone(), call.spec.cache);
        let result = match inner.oneshot(call).await {
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
