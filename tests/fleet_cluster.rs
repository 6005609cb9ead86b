//! A fleet (issue 14) over a Redis Cluster the test creates (three masters, no replicas, on free
//! loopback ports): the shared cache and the global quotas hold when keys spread over several
//! masters, as they do on one server (`tests/fleet.rs`).
#![allow(clippy::unwrap_used)]

mod support;

use support::fleet::*;
use support::redis::RedisCluster;

#[test]
fn the_cluster_harness_spreads_keys_over_three_masters() {
    let c = RedisCluster::start();
    assert_eq!(c.urls().len(), 3);
    for i in 0..30 {
        c.set_raw(format!("snowgate:{i}:c:x").as_bytes(), &[i as u8, 0, 255]);
    }
    assert_eq!(c.keys("snowgate:*:c:*").len(), 30);
    assert!(c.masters().iter().all(|m| !m.keys("snowgate:*").is_empty()));
    assert_eq!(c.get_raw(b"snowgate:7:c:x").unwrap(), vec![7, 0, 255]);
    // redis-cli -c follows the MOVED redirect to the master holding the key.
    assert_eq!(c.cli(&["GET", "snowgate:8:c:x"]).as_bytes()[0], 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_on_one_instance_is_a_shared_hit_on_another_over_a_cluster() {
    let cluster = RedisCluster::start();
    a_miss_on_one_instance_is_a_hit_on_another(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_or_corrupted_values_in_a_cluster_are_never_served() {
    let cluster = RedisCluster::start();
    foreign_or_corrupted_shared_values_are_never_served(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_spraying_three_instances_get_one_global_quota_each_over_a_cluster() {
    let cluster = RedisCluster::start();
    each_client_spraying_three_instances_gets_one_global_quota(&cluster).await;
}
