//! A fleet (issue 14) over a Redis Cluster the test creates (three masters, no replicas, on free
//! loopback ports): the shared cache and the global quotas hold when keys spread over several
//! masters, as they do on one server (`tests/fleet.rs`).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::fleet::*;
use support::redis::{RedisCluster, SharedRedis};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_under_load_fails_no_client_read() {
    let mut cluster = RedisCluster::start();
    let toml = format!(
        "{}[rate_limit]\nrequests_per_second = 2000\nburst = 2000\n",
        cluster.redis_toml()
    );
    let fleet = Fleet::start(2, 1, SLOW_CHAIN, &toml, |_, c| c.rate_limit.enabled = true).await;
    // Entries on every master before the kill.
    for h in 100..130 {
        assert!(is_result(&block(&fleet, 0, h).await));
    }
    wait_for_keys(&cluster, CACHE_KEYS, 30).await;
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let control = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        tokio::task::block_in_place(|| cluster.kill_master(1));
        let killed_at = reads.load(Ordering::Relaxed);
        // Long enough for the other masters to declare the cluster failed (node timeout 5 s):
        // first commands to the dead master fail, then every command does.
        tokio::time::sleep(Duration::from_secs(6)).await;
        stop.store(true, Ordering::Relaxed);
        reads.load(Ordering::Relaxed) - killed_at
    };
    let (failed_a, failed_b, after_kill) = tokio::join!(
        reads_until_stopped(&fleet, 0, &stop, &reads),
        reads_until_stopped(&fleet, 1, &stop, &reads),
        control
    );
    assert!(
        failed_a.is_empty() && failed_b.is_empty(),
        "failed client reads: {:?} {:?}",
        &failed_a[..failed_a.len().min(3)],
        &failed_b[..failed_b.len().min(3)]
    );
    assert!(after_kill > 50, "only {after_kill} reads after the kill");
    // Instance 1 has not read these yet: each is answered (from Redis or a node) and right.
    for h in 100..130 {
        let r = block(&fleet, 1, h).await;
        assert!(is_result(&r), "height {h}: {} {}", r.status, r.body);
    }
    fleet.shutdown().await;
}
