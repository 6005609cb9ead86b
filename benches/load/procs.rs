//! The processes of the load benchmark: started pinned to a CPU set, stopped on drop (SIGTERM,
//! then SIGKILL), and all of them killed by a watchdog if the run ever overstays its time bound.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// PIDs of every process started and not yet stopped, for the watchdog.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Kills every live process and exits if the benchmark is still running after `limit`.
pub fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("load benchmark: time bound of {limit:?} exceeded; stopping everything");
        let pids = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
        for pid in &pids {
            signal(*pid, "-TERM");
        }
        std::thread::sleep(Duration::from_secs(2));
        for pid in &pids {
            signal(*pid, "-KILL");
        }
        std::process::exit(2);
    });
}

/// A free port on 127.0.0.1 (bound then released; the child binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("the loopback interface can bind an ephemeral port")
}

/// Which CPUs the servers and the load generator run on.
#[derive(Clone, Debug)]
pub struct Pinning {
    /// `taskset -c` list for every server (empty: no pinning).
    pub server: String,
    /// `taskset -c` list for the load generator and this harness.
    pub client: String,
    /// Worker threads / processes each server gets: the number of CPUs in `server`.
    pub workers: usize,
}

impl Pinning {
    /// Servers on the last CPU, the load generator on the others; `LOAD_SERVER_CPUS` and
    /// `LOAD_CLIENT_CPUS` (taskset lists) override.
    pub fn detect() -> Pinning {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let have_taskset = Command::new("taskset")
            .arg("-V")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let (server, client) = match (
            std::env::var("LOAD_SERVER_CPUS"),
            std::env::var("LOAD_CLIENT_CPUS"),
        ) {
            (Ok(s), Ok(c)) => (s, c),
            _ if cpus >= 2 && have_taskset => (
                format!("{}", cpus - 1),
                format!("0-{}", cpus.saturating_sub(2)),
            ),
            _ => (String::new(), String::new()),
        };
        let workers = if server.is_empty() {
            cpus
        } else {
            count_cpus(&server)
        };
        Pinning {
            server,
            client,
            workers,
        }
    }

    /// Pins this process (the harness) to the client CPUs.
    pub fn pin_self(&self) {
        if !self.client.is_empty() {
            let _ = Command::new("taskset")
                .args([
                    "-a",
                    "-p",
                    "-c",
                    &self.client,
                    &std::process::id().to_string(),
                ])
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// Number of CPUs in a taskset list such as `1`, `0-2` or `0,2-3`.
fn count_cpus(list: &str) -> usize {
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().unwrap_or(0);
                let b: usize = b.trim().parse().unwrap_or(a);
                b.saturating_sub(a) + 1
            }
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

/// A command, prefixed with `taskset -c CPUS` when `cpus` is not empty.
pub fn pinned(cpus: &str, program: &Path) -> Command {
    if cpus.is_empty() {
        Command::new(program)
    } else {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(cpus).arg(program);
        c
    }
}

/// A child process, stopped when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with its output in `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> std::io::Result<Proc> {
        let out = File::create(log)?;
        let err = out.try_clone()?;
        let child = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?;
        if let Ok(mut live) = LIVE.lock() {
            live.push(child.id());
        }
        Ok(Proc {
            name: name.to_string(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory (VmRSS) in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// CPU time used so far by the process and its descendants (nginx's workers), in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        tree(self.pid()).into_iter().map(cpu_ticks).sum()
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} exited early: {status}", self.name)),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }
}

/// `pid` and every process descending from it.
fn tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse().ok());
            if let Some(ppid) = ppid {
                parents.push((child, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// CPU time used by `pid` so far (user + system, all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let stime: u64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    utime + stime
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when unknown).
pub fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = self.pid();
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first: nginx's master stops its workers, snowgate drains.
            signal(pid, "-TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|p| *p != pid);
        }
    }
}

/// Waits until `addr` accepts TCP connections.
pub fn wait_listening(proc: &mut Proc, addr: SocketAddr, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        proc.check_alive()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} is not listening on {addr} after {limit:?}",
                proc.name
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs wrk and nginx with apt when they are missing (Debian; needs root).
pub fn ensure_tools() -> Result<(), String> {
    let missing: Vec<&str> = ["wrk", "nginx"]
        .into_iter()
        .filter(|p| !have(p) && !Path::new(&format!("/usr/sbin/{p}")).exists())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("installing {} with apt-get", missing.join(" "));
    let run = |args: &[&str]| -> Result<(), String> {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("apt-get {} failed: {status}", args.join(" ")))
        }
    };
    run(&["update", "-q"])?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    run(&args)
}

/// The nginx binary (it lives in /usr/sbin, which a non-root PATH may lack).
pub fn nginx_binary() -> std::path::PathBuf {
    if have("nginx") {
        "nginx".into()
    } else {
        "/usr/sbin/nginx".into()
    }
}

/// Installs redis-server (and redis-cli, same package) with apt when it is missing (Debian; needs
/// root), as [`ensure_tools`] does for wrk and nginx.
pub fn ensure_redis() -> Result<(), String> {
    if have("redis-server") || Path::new("/usr/bin/redis-server").exists() {
        return Ok(());
    }
    eprintln!("installing redis-server with apt-get");
    for args in [
        &["update", "-q"][..],
        &[
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "redis-server",
        ][..],
    ] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get: {e}"))?;
        if !status.success() {
            return Err(format!("apt-get {} failed: {status}", args.join(" ")));
        }
    }
    Ok(())
}

/// A redis-server on the unix socket `dir/redis.sock` only (`--port 0`: no TCP), without
/// persistence, pinned to `cpus`, its log in `dir/redis.log`; returns once it answers PING (it is
/// stopped on drop like every [`Proc`]).
pub fn start_redis(dir: &Path, cpus: &str) -> Result<(Proc, std::path::PathBuf), String> {
    let sock = dir.join("redis.sock");
    let _ = std::fs::remove_file(&sock);
    let mut cmd = pinned(cpus, Path::new("redis-server"));
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(&sock)
        .args(["--unixsocketperm", "700"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .current_dir(dir);
    let mut redis = Proc::spawn("redis-server", cmd, &dir.join("redis.log"))
        .map_err(|e| format!("starting redis-server: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        redis.check_alive()?;
        if redis_cli(&sock, &["PING"]).is_ok_and(|r| r == "PONG") {
            return Ok((redis, sock));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "redis-server does not answer PING on {} after 20 s",
                sock.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One `redis-cli -s SOCK ARGS...` command; its output, trimmed.
pub fn redis_cli(sock: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(sock)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "redis-cli {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
