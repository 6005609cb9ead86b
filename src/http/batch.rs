//! Batches: snowgate's extension (a node refuses a JSON array). Each call of a batch goes through
//! the whole per-call stack on its own (policy, quota, cache, a node), at most
//! `limits.batch_concurrency` at a time; the answers keep the order of the calls, notifications
//! get no entry, and a batch whose calls are all notifications gets an empty 200.

use bytes::Bytes;
use futures_util::StreamExt;
use http::{header, HeaderValue, StatusCode};
use tower::Service;

use super::decode::{Decode, Outcome};
use super::{empty, json, HttpResponse};
use crate::body::Chunks;
use crate::call::{Answer, Caller, RpcCall};
use crate::error::ProxyError;
use crate::jsonrpc::gojson;
use crate::methods::Family;

impl<S> Decode<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + Sync + 'static,
    S::Future: Send,
{
    /// Answers the batch `raw` (a whole JSON array).
    pub(super) async fn batch(
        &self,
        family: Family,
        path: &'static str,
        raw: &[u8],
        caller: &Caller,
    ) -> (HttpResponse, usize) {
        let elements = gojson::array_elements(raw).unwrap_or_default();
        let limit = self.shared.limits.batch_len;
        if elements.is_empty() {
            let refused = self.refuse_whole(ProxyError::EmptyBatch, caller);
            return (refused.into_response(), 0);
        }
        if elements.len() > limit {
            let e = ProxyError::BatchTooLong {
                len: elements.len(),
                limit,
            };
            return (self.refuse_whole(e, caller).into_response(), 0);
        }
        type Pending<'a> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send + 'a>>;
        caller.trace.record_batch(elements.len());
        // Traced, each call has a span of its own under the request's.
        let mut callers: Vec<Caller> = Vec::new();
        if caller.trace.is_on() {
            callers.extend(elements.iter().map(|_| Caller {
                trace: caller.trace.batch_call(),
                ..caller.clone()
            }));
        }
        let calls: Vec<Pending<'_>> = (elements.into_iter().enumerate())
            .map(|(i, e)| {
                let caller = callers.get(i).unwrap_or(caller);
                Box::pin(self.one(family, path, e, caller, true)) as Pending<'_>
            })
            .collect();
        let len = calls.len();
        let outcomes: Vec<Outcome> = futures_util::stream::iter(calls)
            .buffered(self.shared.limits.batch_concurrency)
            .collect()
            .await;
        let retry_after = outcomes.iter().filter_map(|o| o.retry_after).max();
        let Some(body) = join(outcomes.into_iter().filter_map(|o| o.body)) else {
            return (empty(), len);
        };
        let mut r = json(StatusCode::OK, body);
        if let Some(secs) = retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        (r, len)
    }
}

/// A batch's answer: the calls' answers as one JSON array (`None` when every call was a
/// notification). Small answers are copied into one buffer; large ones stay shared chunks.
pub fn join(bodies: impl Iterator<Item = Chunks>) -> Option<Chunks> {
    let mut parts: Vec<Bytes> = Vec::new();
    let mut small: Vec<u8> = Vec::new();
    let mut any = false;
    for body in bodies {
        small.push(if any { b',' } else { b'[' });
        any = true;
        let mut pieces = body.into_parts();
        // Each answer ends with a newline, which the array does not keep.
        if let Some(last) = pieces.last_mut() {
            if last.ends_with(b"\n") {
                *last = last.slice(..last.len() - 1);
            }
        }
        for piece in pieces {
            if piece.len() > crate::body::SHARE_ABOVE {
                parts.push(Bytes::from(std::mem::take(&mut small)));
                parts.push(piece);
            } else {
                small.extend_from_slice(&piece);
            }
        }
    }
    if !any {
        return None;
    }
    small.extend_from_slice(b"]\n");
    parts.push(Bytes::from(small));
    Some(if parts.len() == 1 {
        Chunks::from(parts.remove(0))
    } else {
        Chunks::many(parts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_join_in_order_without_their_newlines() {
        let big = Bytes::from(vec![b'1'; crate::body::SHARE_ABOVE + 1]);
        let bodies = vec![
            Chunks::from(b"{\"a\":1}\n".to_vec()),
            Chunks::many([
                Bytes::from_static(b"{\"b\":"),
                big.clone(),
                Bytes::from_static(b"}\n"),
            ]),
        ];
        let joined = join(bodies.into_iter()).map(|c| c.to_bytes());
        let mut expected = b"[{\"a\":1},{\"b\":".to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"}]\n");
        assert_eq!(joined.as_deref(), Some(&expected[..]));
        assert!(join(std::iter::empty()).is_none());
    }
}
