//! A fleet of gateways sharing one redis-server: (harness checks first).
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::redis::{RedisServer, Resp};

#[test]
fn the_redis_harness_starts_kills_restarts_and_sleeps_a_server() {
    for mut r in [RedisServer::start(), RedisServer::start_tcp()] {
        r.set_raw(b"snowgate:t:c:\x00\xff", b"\x00bytes\r\n\xff");
        assert_eq!(
            r.get_raw(b"snowgate:t:c:\x00\xff").unwrap(),
            b"\x00bytes\r\n\xff"
        );
        r.set_raw(b"other", b"x");
        assert_eq!(
            r.keys("snowgate:*:c:*"),
            vec![b"snowgate:t:c:\x00\xff".to_vec()]
        );
        assert_eq!(r.cli(&["PING"]).trim(), "PONG");
        let start = Instant::now();
        let sleeping = r.sleep(Duration::from_millis(800));
        sleeping.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(700));
        r.kill();
        assert!(!r.is_running());
        r.restart();
        assert_eq!(r.command(&[b"DBSIZE"]), Resp::Int(0));
        println!("{}", r.url());
    }
}
