//! Real reverse proxies for the integration tests: nginx and haproxy, each started in the
//! foreground on a free loopback port with its config, pid file and logs in its own temporary
//! directory, configured the way operators usually put them in front of a service, and killed when
//! its handle drops.
//!
//! A missing binary fails the test loudly with the install command: these tests guard the rate
//! limiter against spoofing through exactly these proxies, so skipping them would hide a regression.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, temp_dir};

/// What installs the proxies on Debian (and what `.ci/run` does).
pub const INSTALL: &str = "apt-get install -y nginx-light haproxy";

/// A running proxy: its listening address, killed (and its directory removed) on drop.
pub struct Proxy {
    /// `nginx` or `haproxy`.
    pub kind: &'static str,
    pub addr: SocketAddr,
    child: Child,
    dir: PathBuf,
}

impl Proxy {
    /// nginx in front of `upstream`, forwarding with
    /// `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for`.
    pub fn nginx(upstream: SocketAddr) -> Proxy {
        let bin = find("nginx");
        let dir = temp_dir("nginx");
        let port = free_port();
        let d = dir.display();
        // `master_process off`: one process, so killing the handle leaves no worker behind.
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"#
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(dir.join("error.log"));
        Proxy::spawn("nginx", cmd, dir, port)
    }

    /// haproxy in front of `upstream` with `option forwardfor`, which appends its own
    /// `X-Forwarded-For` line after whatever the client sent.
    pub fn haproxy(upstream: SocketAddr) -> Proxy {
        let bin = find("haproxy");
        let dir = temp_dir("haproxy");
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            r#"global
    pidfile {d}/haproxy.pid
    maxconn 256

defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option forwardfor

frontend public
    bind 127.0.0.1:{port}
    default_backend snowgate

backend snowgate
    server gateway {upstream}
"#
        );
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new(bin);
        // -db: foreground, no daemon.
        cmd.arg("-db").arg("-f").arg(&path);
        Proxy::spawn("haproxy", cmd, dir, port)
    }

    fn spawn(kind: &'static str, mut cmd: Command, dir: PathBuf, port: u16) -> Proxy {
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = cmd
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let mut proxy = Proxy {
            kind,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            dir,
        };
        proxy.wait_listening();
        proxy
    }

    /// Waits (at most 10 s) until the proxy accepts connections; panics with its logs otherwise.
    fn wait_listening(&mut self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("proxy exited ({status}):\n{}", self.logs());
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "proxy not listening on {} after 10 s:\n{}",
            self.addr,
            self.logs()
        );
    }

    /// Everything the proxy wrote to its logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in ["stderr.log", "error.log"] {
            if let Ok(text) = std::fs::read_to_string(self.dir.join(name)) {
                out.push_str(&format!("--- {name}\n{text}"));
            }
        }
        out
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary's path: on PATH or in the sbin directories Debian installs daemons to.
fn find(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return candidate;
        }
    }
    panic!("{name} is not installed (not on PATH nor in /usr/sbin): run `{INSTALL}`");
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
