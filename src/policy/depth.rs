//! How far back a call may reach: `[methods."NAME"] max_depth = N` refuses a call whose height
//! param is more than `N` blocks below the pool's best height, as public endpoints limit
//! historical queries (api.avax.network serves `platform.getAllValidatorsAt` within 1000 blocks
//! of the tip). A deep validator set is work for a node (it walks the P-chain's diffs back from
//! the tip), and an endpoint that means to serve recent history says so here.
//!
//! It is a rule of who may call what, so it lives with the access rule and is applied by the same
//! layer ([`super::PolicyLayer`]), first of the per-call layers: a call refused for its depth
//! costs `[rate_limit] refused_cost` (charged by the decoding layer, as every refusal of this
//! layer is), is counted as `outcome="beyond_max_depth"`, and reaches neither the cache nor a
//! node. Even an answer the cache holds is refused: the endpoint's promise is about heights, not
//! about what happens to be cached.
//!
//! The height judged is the one a node reads ([`RpcCall::requested_height`]): a height left out
//! (absent, `null`, misspelt, or params `null`, `[]`, `[null]`, `[{}]` or omitted) is height 0 to
//! a node, whose args struct starts at zero, so it is the deepest call there is and is refused
//! like `{"height":0}`. An attacker who has read this rule gains nothing by leaving the height out.
//!
//! What passes:
//! * a height at or above the tip (above it is the node's "unfinalized height" error to give);
//! * `"proposed"` (getValidatorsAt's height at this node's proposer VM, recent by definition);
//! * params a node cannot decode (`{"height":"abc"}`, `-1`, `1.5`, `[5]`): the node answers its
//!   own "couldn't unmarshal an argument" error without doing the work;
//! * every call while the pool's best height is not known (0): no tip, no depth.
//!
//! An admin caller is not exempt: the limit protects the nodes' work, which an admin's call costs
//! as much as anyone's (a disabled method is refused to admins too); an operator who needs deep
//! history asks a node directly or raises the limit, which a reload applies.

use crate::call::{BestHeight, RpcCall};
use crate::error::ProxyError;

/// The pure rule: how many blocks `height` is behind `tip`, when that is more than `max_depth`
/// (`None`: within it, at or above the tip, or the tip unknown, 0).
pub fn beyond(height: u64, tip: u64, max_depth: u64) -> Option<u64> {
    if tip == 0 {
        return None;
    }
    let behind = tip.saturating_sub(height);
    (behind > max_depth).then_some(behind)
}

/// May this call reach this far back from the pool's best height? The best height is read only
/// for a method with a `max_depth` and a call a node reads a numeric height from.
pub fn check(call: &RpcCall, best: &dyn BestHeight) -> Result<(), ProxyError> {
    let Some(max_depth) = call.spec.max_depth else {
        return Ok(());
    };
    let Some(height) = call.requested_height() else {
        return Ok(());
    };
    match beyond(height, best.best_height(), max_depth) {
        None => Ok(()),
        Some(behind) => Err(ProxyError::BeyondMaxDepth {
            method: call.spec.name.clone(),
            height,
            behind,
            max_depth,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{MethodOverride, Registry};
    use std::collections::BTreeMap;

    #[test]
    fn the_rule() {
        // (height, tip, max_depth) -> blocks behind, when refused
        let table: &[(u64, u64, u64, Option<u64>)] = &[
            (4_000, 5_000, 1_000, None),        // exactly max_depth back
            (3_999, 5_000, 1_000, Some(1_001)), // one further
            (1, 5_000, 1_000, Some(4_999)),
            (0, 5_000, 1_000, Some(5_000)),
            (5_000, 5_000, 1_000, None), // the tip
            (9_999, 5_000, 1_000, None), // above the tip: the node's error
            (u64::MAX, 5_000, 0, None),  // above, with no depth allowed
            (4_999, 5_000, 0, Some(1)),  // max_depth 0: the tip only
            (5_000, 5_000, 0, None),
            (1, 0, 1_000, None), // the tip unknown: nothing refused
            (0, 0, 0, None),
            (0, u64::MAX, u64::MAX - 1, Some(u64::MAX)),
        ];
        for &(height, tip, max_depth, want) in table {
            assert_eq!(
                beyond(height, tip, max_depth),
                want,
                "height {height}, tip {tip}, max_depth {max_depth}"
            );
        }
    }

    struct Tip(u64);

    impl BestHeight for Tip {
        fn best_height(&self) -> u64 {
            self.0
        }
        fn release(&self) -> Option<String> {
            None
        }
    }

    fn limited(method: &str, max_depth: u64) -> Registry {
        let o = MethodOverride {
            max_depth: Some(max_depth),
            ..Default::default()
        };
        Registry::with_overrides(&BTreeMap::from([(method.to_string(), o)]))
    }

    #[test]
    fn calls_are_read_as_the_node_reads_their_height() {
        let method = "platform.getAllValidatorsAt";
        let r = limited(method, 1000);
        let tip = Tip(1_000_012);
        let refused = |params: &str, admin: bool| {
            check(&RpcCall::for_test(&r, method, params, admin), &tip).err()
        };
        let e = refused(r#"{"height":12}"#, false).expect("too deep");
        assert_eq!(
            e.to_string(),
            "height 12 is 1000000 blocks behind the tip; this endpoint serves \
             platform.getAllValidatorsAt at most 1000 blocks back"
        );
        assert_eq!((e.code(), e.outcome()), (Some(-32602), "beyond_max_depth"));
        // A quoted height, the array form, and an admin caller alike.
        for params in [r#"{"height":"12"}"#, r#"[{"height":12}]"#] {
            assert_eq!(refused(params, false), Some(e.clone()), "{params}");
        }
        assert_eq!(refused(r#"{"height":12}"#, true), Some(e.clone()));
        // A height left out is height 0 to a node: the deepest call, refused as such.
        let zero = refused(r#"{"height":0}"#, false).expect("height 0 is too deep");
        for params in [
            "{}",
            "null",
            "[]",
            "[null]",
            "[{}]",
            r#"{"height":null}"#,
            r#"{"heigth":999012}"#,
            r#"[{"Height":null}]"#,
        ] {
            assert_eq!(refused(params, false), Some(zero.clone()), "{params}");
        }
        let absent = RpcCall {
            params: None,
            ..RpcCall::for_test(&r, method, "{}", false)
        };
        assert_eq!(check(&absent, &tip), Err(zero.clone()), "params omitted");
        // Passed on: within the depth, above the tip, "proposed", params a node cannot read.
        for params in [
            r#"{"height":999012}"#,
            r#"{"HEIGHT":"2000000"}"#,
            r#"{"height":"proposed"}"#,
            r#"{"height":"abc"}"#,
            r#"{"height":-1}"#,
            r#"{"height":1.5}"#,
            "[5]",
        ] {
            assert_eq!(refused(params, false), None, "{params}");
        }
        // While the pool's height is unknown, nothing is too deep.
        let call = RpcCall::for_test(&r, method, r#"{"height":1}"#, false);
        assert_eq!(check(&call, &Tip(0)), Ok(()));
        // A method without a max_depth is never refused for its depth.
        let call = RpcCall::for_test(&r, "platform.getValidatorsAt", r#"{"height":1}"#, false);
        assert_eq!(check(&call, &tip), Ok(()));
    }
}
