//! A fleet whose Redis speaks TLS (`rediss://`): Debian's redis-server with a certificate from a
//! private CA made here (rcgen), trusted through `[redis] ca_file`. Without the CA the instances
//! refuse the certificate, say `"redis":"down"` and keep serving from their nodes.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::fleet::Fleet;
use support::private_ca;

/// A redis-server with TLS only on a loopback port (no plain TCP), killed on drop.
struct TlsRedis {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsRedis {
    fn start(cert: &str, key: &str) -> TlsRedis {
        let dir = support::temp_dir("redis-tls");
        std::fs::write(dir.join("cert.pem"), cert).unwrap();
        std::fs::write(dir.join("key.pem"), key).unwrap();
        for _ in 0..5 {
            let port = support::free_port();
            let child = Command::new("redis-server")
                .args(["--port", "0", "--bind", "127.0.0.1"])
                .args(["--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(dir.join("cert.pem"))
                .arg("--tls-key-file")
                .arg(dir.join("key.pem"))
                .args([
                    "--tls-auth-clients",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("redis-server: {e} ({})", support::redis::INSTALL));
            let mut server = TlsRedis {
                child,
                dir: dir.clone(),
                port,
            };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if server.child.try_wait().unwrap().is_some() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    // Dropped without a handshake: a harmless error line in Redis's log.
                    return server;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // The port was taken in between: kill this one (keeping the directory) and retry.
            let _ = server.child.kill();
            let _ = server.child.wait();
            std::mem::forget(server);
        }
        panic!("redis-server with TLS did not start in 5 tries");
    }
}

async fn block(fleet: &Fleet, i: usize, height: u64) -> support::Reply {
    fleet
        .p(
            i,
            "platform.getBlockByHeight",
            &format!(r#"{{"height":{height}}}"#),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_shares_through_redis_over_tls_with_a_private_ca() {
    let (ca, cert, key) = private_ca();
    let redis = TlsRedis::start(&cert, &key);
    let ca_file = redis.dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let toml = format!(
        "[redis]\nurl = \"rediss://127.0.0.1:{}/0\"\nca_file = \"{}\"\n",
        redis.port,
        ca_file.display()
    );
    let fleet = Fleet::start(2, 1, Duration::from_secs(3600), &toml, |_, _| {}).await;
    for i in 0..2 {
        let (status, health) = fleet.health(i).await;
        assert_eq!(status, 200);
        assert_eq!(health["shared"]["redis"], "up", "instance {i}: {health}");
    }
    let before = fleet.calls("platform.getBlockByHeight");
    let a = block(&fleet, 0, 3).await;
    assert_eq!(a.header("x-cache"), Some("MISS"), "{}", a.body);
    // The write to Redis follows A's answer: poll B for a bounded time.
    let start = Instant::now();
    let b = loop {
        let b = block(&fleet, 1, 3).await;
        if b.header("x-cache") == Some("HIT") || start.elapsed() > Duration::from_secs(5) {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(b.header("x-cache"), Some("HIT"), "{}", b.body);
    assert_eq!(b.body, a.body);
    assert_eq!(fleet.calls("platform.getBlockByHeight"), before + 1);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_redis_certificate_is_refused_and_the_fleet_serves_without_it() {
    let (_ca, cert, key) = private_ca();
    let redis = TlsRedis::start(&cert, &key);
    // No ca_file: the private CA is not among the public roots.
    let toml = format!("[redis]\nurl = \"rediss://127.0.0.1:{}/0\"\n", redis.port);
    let fleet = Fleet::start(2, 1, Duration::from_secs(3600), &toml, |_, _| {}).await;
    for i in 0..2 {
        let (status, health) = fleet.health(i).await;
        assert_eq!(status, 200);
        assert_eq!(health["shared"]["redis"], "down", "instance {i}: {health}");
        let r = block(&fleet, i, 4).await;
        assert_eq!(r.status, 200);
        assert!(r.json()["result"].is_object(), "{}", r.body);
    }
    // Nothing was shared: each instance asked a node.
    assert_eq!(fleet.calls("platform.getBlockByHeight"), 2);
    fleet.shutdown().await;
}
