//! Real Redis for the fleet tests: Debian's `redis-server`, started per test on a unix socket in a
//! fresh temporary directory or on a free loopback port (never a fixed one), and a three-master
//! Redis Cluster created the way operators create one (`redis-cli --cluster create`).
//!
//! The tests read and write Redis's keys behind the gateways' backs (to corrupt the shared cache,
//! to see what a fleet stored) through a small RESP client in this file rather than through the
//! gateway's own Redis client: a test that used the code under test to inspect it would share its
//! bugs. Every server is killed (SIGKILL) and its directory removed when its handle drops, also
//! when the test panics.
//!
//! A missing `redis-server` fails the test with the install command; nothing is skipped, since a
//! skipped fleet test would hide exactly the regressions it guards against.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, temp_dir};

/// How to get `redis-server` and `redis-cli` on this machine.
pub const INSTALL: &str =
    "run `bash .ci/test` (it installs them), or `apt-get install -y redis-server`";

/// Where a server listens.
#[derive(Debug, Clone)]
enum Endpoint {
    Unix(PathBuf),
    Tcp(u16),
}

impl Endpoint {
    /// The URL snowgate's `[redis] url` takes.
    fn url(&self) -> String {
        match self {
            Endpoint::Unix(path) => format!("redis+unix://{}", path.display()),
            Endpoint::Tcp(port) => format!("redis://127.0.0.1:{port}/0"),
        }
    }

    /// `redis-cli`'s arguments to reach it.
    fn cli_args(&self) -> Vec<String> {
        match self {
            Endpoint::Unix(path) => vec!["-s".into(), path.display().to_string()],
            Endpoint::Tcp(port) => vec![
                "-h".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
        }
    }
}

/// One `redis-server` process.
pub struct RedisServer {
    child: Option<Child>,
    dir: PathBuf,
    endpoint: Endpoint,
    /// Arguments beyond the listening ones (the cluster's).
    extra: Vec<String>,
}

impl RedisServer {
    /// A server on a unix socket in a fresh temporary directory (`--port 0`: no TCP at all).
    pub fn start() -> RedisServer {
        let dir = temp_dir("redis");
        let socket = dir.join("redis.sock");
        assert!(
            socket.as_os_str().len() < 100,
            "{} is too long for a unix socket (at most 107 bytes): set TMPDIR to a shorter directory",
            socket.display()
        );
        let endpoint = Endpoint::Unix(socket);
        let mut server = RedisServer {
            child: None,
            dir,
            endpoint,
            extra: Vec::new(),
        };
        if let Err(e) = server.spawn() {
            panic!("redis-server did not start on a unix socket: {e}");
        }
        server
    }

    /// A server on a unix socket that keeps its data across [`RedisServer::restart`] (and a
    /// SIGKILL): an append-only file fsynced before each reply, as an operator who must not lose
    /// writes runs it.
    pub fn start_persistent() -> RedisServer {
        let mut server = RedisServer::start();
        server.extra = ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec();
        server.restart();
        server
    }

    /// A server on a free loopback TCP port.
    pub fn start_tcp() -> RedisServer {
        RedisServer::start_tcp_with(|_| Vec::new())
    }

    /// A server on a free loopback port with the extra arguments `extra(dir)` gives; another
    /// port is tried when it fails to start (the free port was taken in between).
    fn start_tcp_with(extra: impl Fn(&Path) -> Vec<String>) -> RedisServer {
        let mut errors = Vec::new();
        for _ in 0..5 {
            let dir = temp_dir("redis");
            let mut server = RedisServer {
                child: None,
                endpoint: Endpoint::Tcp(free_port()),
                extra: extra(&dir),
                dir,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => errors.push(e),
            }
        }
        panic!("redis-server did not start on a loopback port in 5 tries: {errors:#?}");
    }

    /// Starts the process on `self.endpoint` and waits until it answers PING.
    fn spawn(&mut self) -> Result<(), String> {
        let bin = find("redis-server");
        let mut cmd = Command::new(&bin);
        match &self.endpoint {
            Endpoint::Unix(path) => {
                // A socket left by a killed server would be refused as in use by some versions.
                let _ = std::fs::remove_file(path);
                cmd.args(["--port", "0", "--unixsocket"])
                    .arg(path)
                    .args(["--unixsocketperm", "700"]);
            }
            Endpoint::Tcp(port) => {
                cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
            }
        }
        // No persistence (`--save ""`): a restarted server starts empty, and nothing is written
        // outside the temporary directory. `DEBUG` is refused by default since Redis 7; the
        // slow-Redis test needs `DEBUG SLEEP` from this machine.
        cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e} ({INSTALL})", bin.display()))?;
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!(
                    "redis-server exited with {status}; its log:\n{}",
                    std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
                ));
            }
            if let Ok(Resp::Simple(s)) = self.command_timeout(&[b"PING"], Duration::from_secs(1)) {
                if s == "PONG" {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Err(format!(
            "redis-server did not answer PING within 10 s; its log:\n{}",
            std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
        ))
    }

    /// The URL for `[redis] url`: `redis+unix:///tmp/.../redis.sock` or
    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        self.endpoint.url()
    }

    /// The TCP port (`None` on a unix socket).
    pub fn port(&self) -> Option<u16> {
        match self.endpoint {
            Endpoint::Tcp(port) => Some(port),
            Endpoint::Unix(_) => None,
        }
    }

    /// Whether the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL: the process is gone when this returns (no graceful shutdown, as in a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs and starts it again on the same socket or port: empty, but for
    /// a [`RedisServer::start_persistent`] one.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // The port is the same by design; if something else took it meanwhile, waiting a
        // little is all that can be done.
        for _ in 0..5 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("redis-server did not restart on {}: {last}", self.url());
    }

    /// Makes the server unresponsive for `dur` (`DEBUG SLEEP`, sent from a thread so the test
    /// goes on) and returns once it is asleep (a PING goes unanswered for 100 ms); join the handle
    /// to wait for the end of the sleep. `dur` should be well over 100 ms.
    pub fn sleep(&self, dur: Duration) -> std::thread::JoinHandle<()> {
        let endpoint = self.endpoint.clone();
        let secs = format!("{:.3}", dur.as_secs_f64());
        let handle = std::thread::spawn(move || {
            let _ = command_on(
                &endpoint,
                &[b"DEBUG", b"SLEEP", secs.as_bytes()],
                dur + Duration::from_secs(10),
            );
        });
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if self
                .command_timeout(&[b"PING"], Duration::from_millis(100))
                .is_err()
            {
                return handle;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("DEBUG SLEEP {dur:?} did not make the server unresponsive within 5 s");
    }

    /// Runs `redis-cli` against the server with `args`; its stdout (panics if it fails).
    pub fn cli(&self, args: &[&str]) -> String {
        run_cli(&self.endpoint.cli_args(), args)
    }

    /// Sends one command; its reply (a Redis error is `Resp::Error`, not a panic).
    pub fn command(&self, args: &[&[u8]]) -> Resp {
        self.command_timeout(args, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{} on {}: {e}", show(args), self.url()))
    }

    fn command_timeout(&self, args: &[&[u8]], timeout: Duration) -> std::io::Result<Resp> {
        command_on(&self.endpoint, args, timeout)
    }

    /// Every key matching `pattern` (a `SCAN` glob), via SCAN (never KEYS, which blocks Redis).
    pub fn keys(&self, pattern: &str) -> Vec<Vec<u8>> {
        scan(|args| self.command(args), pattern)
    }

    /// `SET key value`, binary-safe.
    pub fn set_raw(&self, key: &[u8], value: &[u8]) {
        set(|args| self.command(args), key, value)
    }

    /// `GET key`, binary-safe (`None` when there is no such key).
    pub fn get_raw(&self, key: &[u8]) -> Option<Vec<u8>> {
        get(|args| self.command(args), key)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters and no replicas, each on its own free loopback port with its
/// cluster bus on another. Dropping it kills all three.
pub struct RedisCluster {
    masters: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli --cluster create` and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let masters: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_tcp_with(|dir| {
                    let bus = free_port();
                    vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-port".into(),
                        bus.to_string(),
                        "--cluster-config-file".into(),
                        dir.join("nodes.conf").display().to_string(),
                        "--cluster-node-timeout".into(),
                        "5000".into(),
                    ]
                })
            })
            .collect();
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        for m in &masters {
            args.push(format!("127.0.0.1:{}", m.port().unwrap()));
        }
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_cli(&[], &args);
        let cluster = RedisCluster { masters };
        let start = Instant::now();
        loop {
            let ok = cluster.masters.iter().all(|m| {
                matches!(m.command(&[b"CLUSTER", b"INFO"]),
                    Resp::Bulk(Some(info)) if String::from_utf8_lossy(&info).contains("cluster_state:ok"))
            });
            if ok {
                return cluster;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the cluster did not reach cluster_state:ok within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The masters' URLs, for `[redis] cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.masters
            .iter()
            .map(|m| format!("redis://127.0.0.1:{}", m.port().unwrap()))
            .collect()
    }

    /// The masters themselves.
    pub fn masters(&self) -> &[RedisServer] {
        &self.masters
    }

    /// SIGKILLs master `i` (a third of the slots lose their owner; no replica takes over).
    pub fn kill_master(&mut self, i: usize) {
        self.masters[i].kill();
    }

    /// Sends one command about one key to the master that owns it, following `MOVED`.
    pub fn command(&self, args: &[&[u8]]) -> Resp {
        let mut endpoint = self.masters[0].endpoint.clone();
        for _ in 0..4 {
            let reply = command_on(&endpoint, args, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{}: {e}", show(args)));
            match &reply {
                Resp::Error(e) if e.starts_with("MOVED ") => {
                    let port = e
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or_else(|| panic!("unreadable redirect {e:?}"));
                    endpoint = Endpoint::Tcp(port);
                }
                _ => return reply,
            }
        }
        panic!("{}: redirected more than 3 times", show(args));
    }

    /// Every key matching `pattern` on all masters (SCAN on each).
    pub fn keys(&self, pattern: &str) -> Vec<Vec<u8>> {
        self.masters.iter().flat_map(|m| m.keys(pattern)).collect()
    }

    /// `SET key value` on the master that owns `key`.
    pub fn set_raw(&self, key: &[u8], value: &[u8]) {
        set(|args| self.command(args), key, value)
    }

    /// `GET key` from the master that owns it.
    pub fn get_raw(&self, key: &[u8]) -> Option<Vec<u8>> {
        get(|args| self.command(args), key)
    }

    /// Runs `redis-cli -c` (following redirects) against the first master.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut base = self.masters[0].endpoint.cli_args();
        base.push("-c".into());
        run_cli(&base, args)
    }
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

/// One command on a fresh connection, each read and write bounded by `timeout`.
fn command_on(endpoint: &Endpoint, args: &[&[u8]], timeout: Duration) -> std::io::Result<Resp> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        request.extend_from_slice(a);
        request.extend_from_slice(b"\r\n");
    }
    match endpoint {
        Endpoint::Unix(path) => {
            let mut s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            s.write_all(&request)?;
            read_resp(&mut BufReader::new(s))
        }
        Endpoint::Tcp(port) => {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
            let mut s = TcpStream::connect_timeout(&addr, timeout)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            s.write_all(&request)?;
            read_resp(&mut BufReader::new(s))
        }
    }
}

fn read_resp(r: &mut impl BufRead) -> std::io::Result<Resp> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(bad("truncated RESP line"));
    }
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let number = || text.parse::<i64>().map_err(|_| bad("bad RESP length"));
    Ok(match line[0] {
        b'+' => Resp::Simple(text),
        b'-' => Resp::Error(text),
        b':' => Resp::Int(number()?),
        b'$' => {
            let n = number()?;
            if n < 0 {
                Resp::Bulk(None)
            } else {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Resp::Bulk(Some(buf))
            }
        }
        b'*' => {
            let n = number()?;
            if n < 0 {
                Resp::Array(None)
            } else {
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(read_resp(r)?);
                }
                Resp::Array(Some(items))
            }
        }
        _ => return Err(bad("unknown RESP type")),
    })
}

/// SCAN to the end (bounded: a test's Redis holds few keys).
/// `SET key value` through `command` (one server's, or a cluster's that follows redirects).
fn set(command: impl Fn(&[&[u8]]) -> Resp, key: &[u8], value: &[u8]) {
    let r = command(&[b"SET", key, value]);
    assert_eq!(r, Resp::Simple("OK".into()), "SET {}", show(&[key]));
}

/// `GET key` through `command` (`None` when there is no such key).
fn get(command: impl Fn(&[&[u8]]) -> Resp, key: &[u8]) -> Option<Vec<u8>> {
    match command(&[b"GET", key]) {
        Resp::Bulk(v) => v,
        other => panic!("GET {}: {other:?}", show(&[key])),
    }
}

fn scan(command: impl Fn(&[&[u8]]) -> Resp, pattern: &str) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..100_000 {
        let reply = command(&[
            b"SCAN",
            &cursor,
            b"MATCH",
            pattern.as_bytes(),
            b"COUNT",
            b"1000",
        ]);
        let Resp::Array(Some(parts)) = reply else {
            panic!("SCAN: {reply:?}");
        };
        let [Resp::Bulk(Some(next)), Resp::Array(Some(found))] = &parts[..] else {
            panic!("SCAN: {parts:?}");
        };
        for k in found {
            if let Resp::Bulk(Some(k)) = k {
                keys.push(k.clone());
            }
        }
        if next == b"0" {
            return keys;
        }
        cursor = next.clone();
    }
    panic!("SCAN did not finish");
}

/// A command's words for messages (binary shown escaped).
fn show(args: &[&[u8]]) -> String {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn run_cli(base: &[String], args: &[&str]) -> String {
    let bin = find("redis-cli");
    let out = Command::new(&bin)
        .args(base)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e} ({INSTALL})", bin.display()));
    assert!(
        out.status.success(),
        "redis-cli {base:?} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `/usr/bin/NAME` (Debian's package), else NAME on PATH; a missing program fails the test.
fn find(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(PathBuf::from("/usr/bin")).chain(std::env::split_paths(&path));
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("{name} is not installed: {INSTALL}");
}

/// What the fleet scenarios need of the shared tier, whether one server or a cluster: the
/// `[redis]` section that points the gateways at it, and raw access to its keys.
pub trait SharedRedis: Sync {
    /// The `[redis]` section of a gateway's config (defaults for the other keys).
    fn redis_toml(&self) -> String;
    /// Every key matching `pattern`, on every master.
    fn scan_keys(&self, pattern: &str) -> Vec<Vec<u8>>;
    /// `GET key` on the master that owns it.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// `SET key value` on the master that owns it.
    fn set(&self, key: &[u8], value: &[u8]);
}

impl SharedRedis for RedisServer {
    fn redis_toml(&self) -> String {
        format!("[redis]\nurl = \"{}\"\n", self.url())
    }
    fn scan_keys(&self, pattern: &str) -> Vec<Vec<u8>> {
        self.keys(pattern)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_raw(key)
    }
    fn set(&self, key: &[u8], value: &[u8]) {
        self.set_raw(key, value)
    }
}

impl SharedRedis for RedisCluster {
    fn redis_toml(&self) -> String {
        let urls: Vec<String> = self.urls().iter().map(|u| format!("\"{u}\"")).collect();
        format!("[redis]\ncluster = [{}]\n", urls.join(", "))
    }
    fn scan_keys(&self, pattern: &str) -> Vec<Vec<u8>> {
        self.keys(pattern)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_raw(key)
    }
    fn set(&self, key: &[u8], value: &[u8]) {
        self.set_raw(key, value)
    }
}
