//! The real `snowgate serve` binary as a child process: for what only a process shows (signals,
//! its resident memory, its log lines). The child is killed when the handle is dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `snowgate serve`.
pub struct Served {
    child: Child,
    pub url: String,
    dir: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Served {
    /// Starts `snowgate serve` with `config` (TOML without `[server] listen`, which is set to
    /// 127.0.0.1:0) and `RUST_LOG=rust_log`; returns once it listens.
    pub fn start(config: &str, rust_log: &str) -> Served {
        Served::start_logging(config, Some(rust_log))
    }

    /// As [`Served::start`]; with `rust_log` `None`, `RUST_LOG` is unset (the file's `[log]
    /// filter` rules).
    pub fn start_logging(config: &str, rust_log: Option<&str>) -> Served {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("snowgate-bin-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snowgate.toml");
        let text = if config.contains("[server]") {
            config.replacen("[server]", "[server]\nlisten = \"127.0.0.1:0\"", 1)
        } else {
            format!("[server]\nlisten = \"127.0.0.1:0\"\n{config}")
        };
        std::fs::write(&path, text).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_snowgate"));
        command.args(["serve", "--config"]).arg(&path);
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "snowgate exited before listening: {}",
                    stderr.lock().unwrap()
                );
            };
            if let Some(url) = line.strip_prefix("snowgate listening on ") {
                break url.trim().to_string();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Served {
            child,
            url,
            dir,
            stderr,
        }
    }

    /// The config file it was started with (a test edits it, then sends `HUP`).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("snowgate.toml")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`TERM`, `HUP`, `INT`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// Resident memory in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Waits at most `limit` for `needle` in its stderr.
    pub fn logged(&self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.logs().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.logs().contains(needle)
    }

    /// Everything the child has written to stderr so far.
    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits at most `limit` for the child to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.try_wait().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
