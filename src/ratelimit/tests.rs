//! The limiter's own rules, as plain calls (no server): prices, pruning, the table's bound,
//! refusals before the body, what a client is told.

use super::*;

fn limiter(rps: u32, burst: u32, factor: f64) -> Arc<Limiter> {
    let cfg = RateLimitConfig {
        requests_per_second: rps,
        burst,
        cached_cost_factor: factor,
        max_clients: 3,
        ..Default::default()
    };
    Limiter::new(&cfg, &Metrics::new())
}

#[test]
fn quota_is_in_cost_units_and_hits_are_cheaper() {
    let l = limiter(1, 10, 0.5);
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    assert_eq!(l.units(10, false), 100);
    assert_eq!(l.units(10, true), 50);
    assert_eq!(l.units(1, true), 5);
    assert!(l.charge(&a, l.units(5, false)).is_ok());
    assert!(l.charge(&a, l.units(5, false)).is_ok());
    let over = l.charge(&a, l.units(1, false)).unwrap_err();
    assert!(over.retry_after > Duration::ZERO && over.retry_after <= Duration::from_secs(1));
    // Another client is untouched.
    let b = ClientId::Ip("192.0.2.2".parse().unwrap());
    assert!(l.charge(&b, l.units(10, false)).is_ok());
}

#[test]
fn what_a_client_is_told_remains_comes_back_at_its_rate() {
    // 1000 cost units a second: 10 tenths a millisecond.
    let l = limiter(1000, 10, 1.0);
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    assert_eq!(
        l.state(&a).unwrap().remaining(),
        10,
        "a new client: its burst"
    );
    assert!(l.charge(&a, 100).is_ok());
    let left = l.state(&a).unwrap().remaining();
    assert!(left <= 1, "{left}");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        l.state(&a).unwrap().remaining(),
        10,
        "whole again after 10 ms"
    );
}

#[test]
fn free_hits_cost_nothing() {
    let l = limiter(1, 1, 0.0);
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    for _ in 0..100 {
        assert!(l.charge(&a, l.units(1, true)).is_ok());
    }
}

#[test]
fn pruning_keeps_clients_whose_bucket_has_not_refilled() {
    let l = limiter(1, 20, 1.0);
    let a = ClientId::Ip("127.0.0.1".parse().unwrap());
    assert!(l.charge(&a, 100).is_ok());
    l.prune();
    assert!(l.charge(&a, 100).is_ok());
    l.prune();
    assert!(
        l.charge(&a, 100).is_err(),
        "a prune gave the client a fresh bucket"
    );
}

#[test]
fn the_client_table_is_bounded() {
    let l = limiter(1, 10, 1.0);
    for i in 0..50u8 {
        let ip = ClientId::Ip(IpAddr::from([198, 51, 100, i]));
        let _ = l.charge(&ip, 10);
    }
    assert!(l.tracked() <= 3, "{}", l.tracked());
}

#[test]
fn past_the_table_a_new_address_spends_its_networks_quota_and_past_the_networks_the_overflow() {
    // Units are tenths: a charge of 10 is one cost unit; an address holds 10, a network 40.
    let l = limiter(1, 10, 1.0);
    let ip = |s: &str| ClientId::Ip(s.parse().unwrap());
    for i in 1..=3u8 {
        assert!(l.charge(&ip(&format!("198.51.100.{i}")), 10).is_ok());
    }
    // Beyond the table, 198.51.100.0/24's new addresses share 40 units, then are refused...
    for i in 4..44u8 {
        assert!(l.charge(&ip(&format!("198.51.100.{i}")), 10).is_ok(), "{i}");
    }
    // (Ten units: 2.5 s of the network's refill.)
    assert!(l.charge(&ip("198.51.100.44"), 100).is_err());
    let policy = |s: &str| l.state(&ip(s)).unwrap().policy.name.clone();
    assert_eq!(policy("198.51.100.99"), "network");
    // ...while another network's newcomers have their own.
    assert!(l.before_body(&ip("203.0.113.1")).is_ok());
    assert!(l.charge(&ip("203.0.113.1"), 100).is_ok());
    assert!(l.charge(&ip("2001:db8:1:2::"), 100).is_ok());
    assert_eq!(l.networks(), 3);
    // Past three networks (`max_clients`), the rest share the overflow.
    assert!(l.charge(&ip("192.0.2.1"), 100).is_ok());
    assert_eq!(policy("192.0.2.1"), "shared");
    assert_eq!(l.networks(), 3);
    assert_eq!(l.tracked(), 3);
}

#[test]
fn a_refused_client_is_refused_before_its_body_until_its_wait_has_passed() {
    let l = limiter(1, 10, 1.0);
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    assert!(l.before_body(&a).is_ok());
    assert!(l.charge(&a, 100).is_ok());
    assert!(
        l.before_body(&a).is_ok(),
        "spent but never refused: its next call decides"
    );
    let over = l.charge(&a, 10).unwrap_err();
    assert!(over.retry_after > Duration::ZERO);
    assert!(l
        .before_body(&a)
        .is_err_and(|o| o.retry_after > Duration::ZERO));
    // Asking changes nothing for others, and adds nobody to the table.
    let b = ClientId::Ip("192.0.2.2".parse().unwrap());
    assert!(l.before_body(&b).is_ok());
    assert_eq!(l.tracked(), 1);
    // Both refusals (the charge and the one before the body) are counted.
    assert_eq!(l.limited.with_label_values(&["ip"]).get(), 2);
}

#[test]
fn a_limiter_rebuilt_on_the_same_metrics_counts_into_the_exposed_series() {
    let metrics = Metrics::new();
    let cfg = RateLimitConfig {
        requests_per_second: 1,
        burst: 1,
        ..Default::default()
    };
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    for _ in 0..2 {
        // As a reload that changes `[rate_limit]` does: a new limiter, the gateway's metrics.
        let l = Limiter::new(&cfg, &metrics);
        assert!(l.charge(&a, l.units(1, false)).is_ok());
        assert!(l.charge(&a, l.units(1, false)).is_err());
    }
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(
        text.contains("snowgate_rate_limited_total{client=\"ip\"} 2\n"),
        "{text}"
    );
}

#[test]
fn a_body_costs_a_unit_per_64_kib_and_a_charge_at_most_the_burst() {
    let l = limiter(1, 10, 1.0);
    assert_eq!(l.body_units(65_535), 0);
    assert_eq!(l.body_units(65_536), 10);
    assert_eq!(l.body_units(1 << 20), 160);
    let a = ClientId::Ip("192.0.2.1".parse().unwrap());
    assert_eq!(l.burst_units(&a), 100);
}

#[test]
fn a_full_table_is_not_pruned_by_the_request_that_finds_it_full() {
    // Buckets refill in 110 ms: after that, every tracked client is forgettable.
    let l = limiter(1000, 10, 1.0);
    for i in 0..3u8 {
        let ip = ClientId::Ip(IpAddr::from([198, 51, 100, i]));
        assert!(l.charge(&ip, 10).is_ok());
    }
    std::thread::sleep(Duration::from_millis(300));
    let new = ClientId::Ip("203.0.113.1".parse().unwrap());
    assert!(l.charge(&new, 10).is_ok());
    assert_eq!(l.tracked(), 3, "the request pruned the table, or grew it");
    // The pruner does it (woken by the full table).
    l.prune();
    assert_eq!(l.tracked(), 0);
    assert!(l.charge(&new, 10).is_ok());
    assert_eq!(l.tracked(), 1);
}

#[tokio::test]
async fn a_full_table_wakes_the_pruner() {
    let l = limiter(1000, 10, 1.0);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    l.spawn_pruner(stopped);
    // The pruner's first tick is at once: fill the table after it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..3u8 {
        let ip = ClientId::Ip(IpAddr::from([198, 51, 100, i]));
        assert!(l.charge(&ip, 10).is_ok());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = ClientId::Ip("203.0.113.1".parse().unwrap());
    assert!(l.charge(&new, 10).is_ok());
    // Well before the pruner's next tick (5 s), with a generous margin for a slow machine.
    let mut pruned = false;
    for _ in 0..40 {
        if l.tracked() == 0 {
            pruned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    assert!(pruned, "a full table did not wake the pruner");
}
