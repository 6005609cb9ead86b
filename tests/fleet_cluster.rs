//! A fleet of gateways sharing a three-master Redis Cluster.
#![allow(clippy::unwrap_used)]

mod support;

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
