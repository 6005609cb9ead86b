//! Which node may take a call, as a pure function over what the pool knows of each node at that
//! moment ([`NodeView`]: plain data, no `Pool`, no runtime), so the rules are unit- and
//! property-tested on their own; [`super::pool`] builds the views and takes the slot.
//!
//! A node may take a call when it is healthy, its height is admitted (within `max_lag_blocks` of
//! the quorum height, not implausibly ahead: [`Heights::admits`], the rule of
//! [`health::eligible`](super::health::eligible)), its avalanchego release serves the call's
//! method (a rolling upgrade mixes releases that add and remove methods; a node whose release is
//! not known yet counts as serving) and it has not been tried for this call. When some node is
//! up but none of those up serves the method ([`unserved`]), the pool answers the node's own
//! "can't find method" without a node call. Among
//! those, it must have a free concurrency slot: when none has, the call waits for one. Among those
//! with a slot, it must have reached the height the call needs, while at least one of them has;
//! otherwise a node without the height takes the call, and its "not found" sends the call on to
//! another node (`Pool::should_retry_not_found`). The call does not wait for a busy node that has
//! the height while another has room: a queued call is woken by whichever slot frees first (one
//! `Notify` for the pool), and one that declined the slot it was woken for would swallow the
//! wake-up of a waiter that could use it. Among the nodes that qualify, [`balance::pick_p2c`]
//! picks by load divided by the node's `weight`. A `role = "fallback"` node is usable only while
//! no primary is (healthy, admitted and untried): a busy primary is waited for, a failed one sends
//! the retry to another primary first, then to a fallback (a primary that does not serve the method
//! is not usable for it: a fallback that does takes it). Calls pinned to one node by
//! `X-Snowgate-Upstream` skip this choice: the admin named the node, healthy or not, whatever its
//! release, and the call waits for that node's own slot (a node that does not serve the method
//! answers so itself).

use rand::Rng;

use super::balance;
use super::health::Heights;

/// What the pool knows of one node when it chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeView {
    /// Passing its health checks (and not taken out by passive failures).
    pub(crate) healthy: bool,
    /// The height it last reported.
    pub(crate) height: Option<u64>,
    /// One of its concurrency slots (`[upstream] max_concurrency`) is free.
    pub(crate) room: bool,
    /// Already tried for this call (a retry goes elsewhere).
    pub(crate) tried: bool,
    /// `role = "fallback"`: used only while no primary is usable.
    pub(crate) fallback: bool,
    /// `weight`: its load is divided by this when two nodes are compared.
    pub(crate) weight: u32,
    /// Its release serves the call's method (or its release is not known yet).
    pub(crate) serves: bool,
    /// It serves the call's API (`[[upstreams]] apis`: a P-chain-only provider has no info API).
    pub(crate) has_api: bool,
    /// The call's method is cooling on it (the per-method breaker): not sent while another node
    /// may take the call.
    pub(crate) cooling: bool,
    /// A fallback on standby (a primary can serve): checked at its own slow cadence, so its last
    /// height is not judged against the pool's (it takes a call only once every primary was
    /// tried for it, and is checked at once when the primaries cannot serve).
    pub(crate) standby: bool,
}

/// The outcome of a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Send to this node (its index in the views).
    Node(usize),
    /// Some node may take the call, but every one that may is at its concurrency limit: wait for
    /// a slot to be freed, then choose again.
    Full,
    /// No node may take the call.
    NoNode,
}

/// Chooses the node for a call needing `min_height` among `nodes`, given the pool's
/// [`Heights`]; `load(i)` (the node's peak-EWMA load) is asked only of the two nodes power of
/// two choices samples, and not at all when one node qualifies.
pub(crate) fn choose(
    nodes: &[NodeView],
    heights: &Heights,
    min_height: Option<u64>,
    load: impl Fn(usize) -> f64,
    rng: &mut impl Rng,
) -> Choice {
    let able = |n: &NodeView| {
        !n.tried && n.has_api && n.serves && n.healthy && (n.standby || heights.admits(n.height))
    };
    // A method cooling on a node goes to another node of its role while one may take it; cooling
    // on every one, it is tried anyway: the breaker moves a method, it never refuses one, and
    // never sends it to a (paid) fallback that the primaries' cooling alone would not reach (a
    // client whose calls time out must not be able to move a method to the provider).
    let warm = |fallback: bool| {
        nodes
            .iter()
            .any(|n| able(n) && !n.cooling && n.fallback == fallback)
    };
    let (warm_primary, warm_fallback) = (warm(false), warm(true));
    let usable_node = |n: &NodeView| {
        let warm_peer = if n.fallback {
            warm_fallback
        } else {
            warm_primary
        };
        able(n) && (!n.cooling || !warm_peer)
    };
    // Fallbacks only while no primary is usable (a busy primary is waited for, not spilled over).
    let primaries = nodes.iter().any(|n| !n.fallback && usable_node(n));
    let usable = |n: &NodeView| usable_node(n) && n.fallback != primaries;
    let reaches = |n: &NodeView| min_height.map_or(true, |h| n.height.is_some_and(|x| x >= h));
    if !nodes.iter().any(usable) {
        return Choice::NoNode;
    }
    let ready = |n: &NodeView| usable(n) && n.room;
    // The height is required only when a node with room has it (see the module doc).
    let height_required = nodes.iter().any(|n| ready(n) && reaches(n));
    let qualifies = |n: &NodeView| ready(n) && (!height_required || reaches(n));
    // The qualifying nodes by rank, without collecting them: a pool has a handful of nodes.
    let nth = |k: usize| {
        nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| qualifies(n))
            .nth(k)
            .map(|(i, _)| i)
    };
    let count = nodes.iter().filter(|n| qualifies(n)).count();
    let weighted = |i: usize| load(i) / f64::from(nodes[i].weight.max(1));
    let rank = balance::pick_p2c(count, |k| nth(k).map_or(f64::INFINITY, weighted), rng);
    match rank.and_then(nth) {
        Some(i) => Choice::Node(i),
        None => Choice::Full,
    }
}

/// Whether no node that is up (healthy and admitted, tried or not, busy or not) serves the
/// call's method while some node is up: then every node that could answer would answer "can't
/// find method", and the pool answers it without asking one. With no node up at all, the call
/// fails as any other would.
pub(crate) fn unserved(nodes: &[NodeView], heights: &Heights) -> bool {
    let up = |n: &NodeView| n.has_api && n.healthy && (n.standby || heights.admits(n.height));
    nodes.iter().any(up) && !nodes.iter().any(|n| up(n) && n.serves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn node(healthy: bool, height: u64, room: bool) -> NodeView {
        NodeView {
            healthy,
            height: Some(height),
            room,
            tried: false,
            fallback: false,
            weight: 1,
            serves: true,
            has_api: true,
            cooling: false,
            standby: false,
        }
    }

    fn choose_seeded(nodes: &[NodeView], heights: &Heights, min: Option<u64>) -> Choice {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        choose(nodes, heights, min, |_| 1.0, &mut rng)
    }

    const HEIGHTS: Heights = Heights {
        best: 100,
        floor: 98,
        ceiling: u64::MAX,
    };

    #[test]
    fn a_cooling_method_moves_among_nodes_of_its_role_and_never_to_a_fallback_for_it() {
        let cooling = NodeView {
            cooling: true,
            ..node(true, 100, true)
        };
        let warm = node(true, 100, true);
        let fallback = NodeView {
            fallback: true,
            ..node(true, 100, true)
        };
        // Another primary is warm: it takes the call.
        assert_eq!(
            choose_seeded(&[cooling, warm, fallback], &HEIGHTS, None),
            Choice::Node(1)
        );
        // Every primary cooling: still a primary, not the fallback.
        assert_eq!(
            choose_seeded(&[cooling, fallback], &HEIGHTS, None),
            Choice::Node(0)
        );
    }

    #[test]
    fn only_a_healthy_admitted_untried_node_with_room_is_chosen() {
        let nodes = [
            node(false, 100, true),
            node(true, 97, true),
            node(true, 100, false),
            NodeView {
                tried: true,
                ..node(true, 100, true)
            },
            node(true, 99, true),
        ];
        for _ in 0..20 {
            assert_eq!(choose_seeded(&nodes, &HEIGHTS, None), Choice::Node(4));
        }
    }

    #[test]
    fn a_fallback_takes_calls_only_while_no_primary_can() {
        let fallback = NodeView {
            fallback: true,
            ..node(true, 100, true)
        };
        // A usable primary, even busy, keeps the fallback out.
        let nodes = [node(true, 100, true), fallback];
        for _ in 0..20 {
            assert_eq!(choose_seeded(&nodes, &HEIGHTS, None), Choice::Node(0));
        }
        let busy = [node(true, 100, false), fallback];
        assert_eq!(choose_seeded(&busy, &HEIGHTS, None), Choice::Full);
        // The primary down, or already tried for this call: the fallback.
        let down = [node(false, 100, true), fallback];
        assert_eq!(choose_seeded(&down, &HEIGHTS, None), Choice::Node(1));
        let tried = [
            NodeView {
                tried: true,
                ..node(true, 100, true)
            },
            fallback,
        ];
        assert_eq!(choose_seeded(&tried, &HEIGHTS, None), Choice::Node(1));
    }

    #[test]
    fn only_a_node_whose_release_serves_the_method_is_chosen() {
        let old = NodeView {
            serves: false,
            ..node(true, 100, true)
        };
        let nodes = [old, node(true, 100, true), old];
        for _ in 0..20 {
            assert_eq!(choose_seeded(&nodes, &HEIGHTS, None), Choice::Node(1));
        }
        assert!(!unserved(&nodes, &HEIGHTS));
        // The one that serves is busy: wait for it rather than ask one that does not serve.
        let busy = [old, node(true, 100, false)];
        assert_eq!(choose_seeded(&busy, &HEIGHTS, None), Choice::Full);
        assert!(!unserved(&busy, &HEIGHTS));
        // None serves: no node, and the pool answers for them.
        assert_eq!(choose_seeded(&[old, old], &HEIGHTS, None), Choice::NoNode);
        assert!(unserved(&[old, old], &HEIGHTS));
        // The one that serves is down (or lagging): the nodes up do not serve.
        let down = [old, node(false, 100, true)];
        assert!(unserved(&down, &HEIGHTS));
        assert!(unserved(&[old, node(true, 10, true)], &HEIGHTS));
        // Nobody up: not an unserved method but no node.
        let all_down = [
            NodeView {
                healthy: false,
                ..old
            },
            node(false, 100, true),
        ];
        assert!(!unserved(&all_down, &HEIGHTS));
        assert!(!unserved(&[], &HEIGHTS));
        // A fallback that serves takes the call when no primary serves it.
        let fallback = NodeView {
            fallback: true,
            ..node(true, 100, true)
        };
        assert_eq!(
            choose_seeded(&[old, fallback], &HEIGHTS, None),
            Choice::Node(1)
        );
    }

    #[test]
    fn weight_divides_the_load_the_balancer_compares() {
        let heavy = NodeView {
            weight: 4,
            ..node(true, 100, true)
        };
        let nodes = [node(true, 100, true), heavy];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        // Node 1 carries three times node 0's load, but weighs four times as much.
        let picks = (0..200)
            .filter(|_| {
                choose(&nodes, &HEIGHTS, None, |i| [1.0, 3.0][i], &mut rng) == Choice::Node(1)
            })
            .count();
        assert_eq!(picks, 200);
    }

    #[test]
    fn every_usable_node_full_is_a_wait_and_none_usable_is_no_node() {
        let full = [node(true, 100, false), node(false, 100, true)];
        assert_eq!(choose_seeded(&full, &HEIGHTS, None), Choice::Full);
        let none = [node(false, 100, true), node(true, 10, true)];
        assert_eq!(choose_seeded(&none, &HEIGHTS, None), Choice::NoNode);
        assert_eq!(choose_seeded(&[], &HEIGHTS, None), Choice::NoNode);
    }

    #[test]
    fn a_needed_height_goes_to_a_node_with_room_that_has_it_else_to_any_with_room() {
        let nodes = [node(true, 99, true), node(true, 100, true)];
        for _ in 0..20 {
            assert_eq!(choose_seeded(&nodes, &HEIGHTS, Some(100)), Choice::Node(1));
        }
        // The node that has it is full: the call is not held back from the one with room (whose
        // "not found" the pool retries elsewhere).
        let nodes = [node(true, 99, true), node(true, 100, false)];
        assert_eq!(choose_seeded(&nodes, &HEIGHTS, Some(100)), Choice::Node(0));
        // Beyond every node: any node answers (its "not found" is the answer).
        let nodes = [node(true, 99, true), node(true, 100, true)];
        assert!(choose_seeded(&nodes, &HEIGHTS, Some(500)).is_node());
    }

    #[test]
    fn the_less_loaded_of_two_is_chosen() {
        let nodes = [node(true, 100, true), node(true, 100, true)];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..50 {
            let load = |i: usize| if i == 0 { 10.0 } else { 1.0 };
            assert_eq!(
                choose(&nodes, &HEIGHTS, None, load, &mut rng),
                Choice::Node(1)
            );
        }
    }

    impl Choice {
        fn is_node(self) -> bool {
            matches!(self, Choice::Node(_))
        }
    }

    fn view() -> impl Strategy<Value = NodeView> {
        (
            any::<bool>(),
            proptest::option::of(0u64..40),
            any::<bool>(),
            proptest::bool::weighted(0.2),
            proptest::bool::weighted(0.3),
            1u32..4,
            proptest::bool::weighted(0.8),
        )
            .prop_map(|(healthy, height, room, tried, fallback, weight, serves)| {
                NodeView {
                    healthy,
                    height,
                    room,
                    tried,
                    fallback,
                    weight,
                    serves,
                    has_api: true,
                    cooling: false,
                    standby: false,
                }
            })
    }

    proptest! {
        #[test]
        fn no_unhealthy_lagging_full_tried_or_too_low_node_is_chosen_and_one_is_when_any_qualifies(
            nodes in proptest::collection::vec(view(), 0..8),
            max_lag in 0u64..6,
            min_height in proptest::option::of(0u64..45),
            seed in any::<u64>(),
            loads in proptest::collection::vec(0.0f64..1e6, 8),
        ) {
            // The pool's heights as the health checks judge them, from the healthy nodes.
            let reported: Vec<u64> =
                nodes.iter().filter(|n| n.healthy).filter_map(|n| n.height).collect();
            let heights = Heights::judge(&reported, max_lag);
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let choice = choose(&nodes, &heights, min_height, |i| loads[i], &mut rng);

            let usable_node =
                |n: &NodeView| !n.tried && n.serves && n.healthy && heights.admits(n.height);
            // A fallback only while no primary is usable.
            let primaries = nodes.iter().any(|n| !n.fallback && usable_node(n));
            let usable = |n: &NodeView| usable_node(n) && n.fallback != primaries;
            let reaches = |n: &NodeView| {
                min_height.map_or(true, |h| n.height.is_some_and(|x| x >= h))
            };
            let ready = |n: &NodeView| usable(n) && n.room;
            let some_ready_reaches = nodes.iter().any(|n| ready(n) && reaches(n));
            let qualifies = |n: &NodeView| ready(n) && (reaches(n) || !some_ready_reaches);
            match choice {
                Choice::Node(i) => {
                    let n = &nodes[i];
                    prop_assert!(n.healthy, "unhealthy");
                    prop_assert!(n.serves, "a node whose release does not serve the method");
                    prop_assert!(!n.tried, "tried");
                    prop_assert!(!(n.fallback && primaries), "a fallback while a primary was usable");
                    prop_assert!(n.room, "full");
                    let h = n.height.unwrap_or_default();
                    prop_assert!(h >= heights.floor, "lagging");
                    prop_assert!(h <= heights.ceiling, "implausible");
                    if some_ready_reaches {
                        prop_assert!(reaches(n), "below the needed height");
                    }
                }
                Choice::Full => {
                    prop_assert!(nodes.iter().any(usable));
                    prop_assert!(!nodes.iter().any(ready), "a usable node had room");
                    prop_assert!(!nodes.iter().any(qualifies), "a node qualified");
                }
                Choice::NoNode => prop_assert!(!nodes.iter().any(usable)),
            }
            // The pool answers "can't find method" itself only when some node is up and every
            // node up does not serve the method; then no node may be chosen.
            let up = |n: &NodeView| n.healthy && heights.admits(n.height);
            let unserved_now = unserved(&nodes, &heights);
            prop_assert_eq!(
                unserved_now,
                nodes.iter().any(up) && nodes.iter().filter(|n| up(n)).all(|n| !n.serves)
            );
            if unserved_now {
                prop_assert_eq!(choice, Choice::NoNode);
            }
        }
    }
}
