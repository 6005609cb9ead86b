//! When an answer may be kept, and for how long: the cache classes of the method registry plus
//! the conditions some immutable methods put on the answer itself (and on the call: an immutable
//! method with a height param, `getValidatorsAt` or `getAllValidatorsAt`, is final only for a
//! numeric height, never for `"proposed"`). Pure functions over the call
//! and the answer, so the rules are tested without a runtime.

use std::time::Duration;

use crate::call::{AnswerKind, RpcCall};
use crate::jsonrpc::Json;
use crate::methods::CacheClass;

/// Lifetimes of the classes that expire.
#[derive(Debug, Clone, Copy)]
pub struct Ttls {
    /// Cap for head-class entries (they also end when the pool's best height moves).
    pub head: Duration,
    pub network: Duration,
    pub volatile: Duration,
}

/// Whether a call may be looked up in the cache at all (before it is sent).
pub fn cacheable_request(call: &RpcCall) -> bool {
    match call.spec.cache {
        CacheClass::Never => false,
        // Only a numeric height is final; "proposed" is this node's view of the moment.
        CacheClass::Immutable if call.spec.height_param.is_some() => {
            call.requested_height().is_some()
        }
        _ => true,
    }
}

/// How long an answer may be kept (`Some(None)` = until evicted), or `None` if it must not be.
pub fn lifetime(
    call: &RpcCall,
    kind: AnswerKind,
    payload: &[u8],
    ttls: &Ttls,
) -> Option<Option<Duration>> {
    // Errors are never kept: a "not found" may be found a second later.
    if kind == AnswerKind::Error {
        return None;
    }
    match call.spec.cache {
        CacheClass::Never => None,
        CacheClass::Head => Some(Some(ttls.head)),
        CacheClass::Network => Some(Some(ttls.network)),
        CacheClass::Volatile => Some(Some(ttls.volatile)),
        CacheClass::Immutable => final_answer(&call.spec.name, payload).then_some(None),
    }
}

/// The answer-level conditions of immutable methods.
fn final_answer(method: &str, payload: &[u8]) -> bool {
    match method {
        "platform.getTxStatus" => {
            field_str(payload, "status").is_some_and(|s| s == "Committed" || s == "Aborted")
        }
        "platform.getRewardUTXOs" => match Json::parse(payload)
            .ok()
            .and_then(|v| v.field("utxos").cloned())
        {
            Some(Json::Array(items)) => !items.is_empty(),
            _ => false,
        },
        _ => true,
    }
}

fn field_str(payload: &[u8], name: &str) -> Option<String> {
    Json::parse(payload)
        .ok()?
        .field(name)?
        .as_str()
        .map(str::to_string)
}

/// Whether an answer may be stored under a head-class key made at best height `head`: only when
/// the node that gave it had reached that height (an answer from a lagging node would otherwise
/// be served as the answer at a height it never saw). Other classes (`head` is `None`) always may.
pub fn fresh_enough(head: Option<u64>, answered_at: Option<u64>) -> bool {
    match head {
        Some(h) => answered_at.is_some_and(|at| at >= h),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Caller;
    use crate::methods::Registry;

    const T: Ttls = Ttls {
        head: Duration::from_secs(2),
        network: Duration::from_secs(600),
        volatile: Duration::from_secs(1),
    };

    fn call(method: &str, params: &str) -> RpcCall {
        RpcCall {
            spec: Registry::builtin().get(method).unwrap().clone(),
            params: Some(Json::parse(params.as_bytes()).unwrap()),
            id: None,
            caller: Caller {
                admin: false,
                pin: None,
                ip: [127, 0, 0, 1].into(),
                client: crate::call::ClientId::Ip([127, 0, 0, 1].into()),
                request_id: None,
                trace: Default::default(),
            },
            lookup: None,
        }
    }

    #[test]
    fn head_answers_are_kept_only_from_nodes_at_the_height() {
        assert!(fresh_enough(None, None));
        assert!(fresh_enough(Some(100), Some(100)));
        assert!(fresh_enough(Some(100), Some(101)));
        assert!(!fresh_enough(Some(100), Some(99)));
        assert!(!fresh_enough(Some(100), None), "a node of unknown height");
    }

    #[test]
    fn tx_status_is_kept_only_when_final() {
        let c = call("platform.getTxStatus", r#"{"txID":"x"}"#);
        assert_eq!(
            lifetime(&c, AnswerKind::Result, br#"{"status":"Committed"}"#, &T),
            Some(None)
        );
        assert_eq!(
            lifetime(&c, AnswerKind::Result, br#"{"status":"Aborted"}"#, &T),
            Some(None)
        );
        assert_eq!(
            lifetime(&c, AnswerKind::Result, br#"{"status":"Processing"}"#, &T),
            None
        );
        assert_eq!(
            lifetime(
                &c,
                AnswerKind::Result,
                br#"{"status":"Dropped","reason":"x"}"#,
                &T
            ),
            None
        );
        assert_eq!(
            lifetime(&c, AnswerKind::Result, br#"{"status":"Unknown"}"#, &T),
            None
        );
    }

    #[test]
    fn reward_utxos_are_kept_only_when_paid() {
        let c = call("platform.getRewardUTXOs", r#"{"txID":"x"}"#);
        assert_eq!(
            lifetime(
                &c,
                AnswerKind::Result,
                br#"{"numFetched":"0","utxos":[],"encoding":"hex"}"#,
                &T
            ),
            None
        );
        assert_eq!(
            lifetime(
                &c,
                AnswerKind::Result,
                br#"{"numFetched":"1","utxos":["0x00"],"encoding":"hex"}"#,
                &T
            ),
            Some(None)
        );
    }

    #[test]
    fn validators_at_only_for_a_numeric_height() {
        assert!(cacheable_request(&call(
            "platform.getValidatorsAt",
            r#"{"height":5}"#
        )));
        assert!(cacheable_request(&call(
            "platform.getValidatorsAt",
            r#"{"height":"5"}"#
        )));
        assert!(!cacheable_request(&call(
            "platform.getValidatorsAt",
            r#"{"height":"proposed"}"#
        )));
    }

    #[test]
    fn all_validators_at_only_for_a_numeric_height_and_then_for_good() {
        let numeric = call("platform.getAllValidatorsAt", r#"{"height":5}"#);
        assert!(cacheable_request(&numeric));
        assert!(cacheable_request(&call(
            "platform.getAllValidatorsAt",
            r#"{"height":"5"}"#
        )));
        assert!(!cacheable_request(&call(
            "platform.getAllValidatorsAt",
            r#"{"height":"proposed"}"#
        )));
        assert_eq!(
            lifetime(&numeric, AnswerKind::Result, br#"{"validatorSets":{}}"#, &T),
            Some(None)
        );
        let epoch = call("proposervm.getCurrentEpoch", "{}");
        assert_eq!(
            lifetime(&epoch, AnswerKind::Result, br#"{"number":"1"}"#, &T),
            Some(Some(T.volatile))
        );
    }

    #[test]
    fn errors_and_never_methods_are_not_kept() {
        let c = call("platform.getTx", r#"{"txID":"x"}"#);
        assert_eq!(
            lifetime(&c, AnswerKind::Error, br#"{"code":-32000}"#, &T),
            None
        );
        assert!(!cacheable_request(&call(
            "platform.issueTx",
            r#"{"tx":"0x"}"#
        )));
        assert!(!cacheable_request(&call(
            "platform.sampleValidators",
            r#"{"size":1}"#
        )));
        let h = call("platform.getHeight", "{}");
        assert_eq!(
            lifetime(&h, AnswerKind::Result, br#"{"height":"5"}"#, &T),
            Some(Some(T.head))
        );
    }
}
