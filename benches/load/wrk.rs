//! Running wrk: the same threads, connections and duration for every contestant, pinned to the
//! client CPUs, bounded in time; its Lua `done()` prints one `WRK_RESULT key=value ...` line.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::procs::{pinned, Proc};

/// The load shape, identical for every contestant.
#[derive(Clone, Debug)]
pub struct Load {
    pub threads: u32,
    pub connections: u32,
    pub duration: Duration,
    /// A short unrecorded run before each measured one (connections, caches, branch predictors).
    pub warmup: Duration,
    pub cpus: String,
}

/// One measured run.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub errors: u64,
    /// CPU used by the servers under test during the run, in cores (1.0 = one core busy).
    pub server_cores: f64,
    /// Of that, the first server's (the proxy, where a node stands behind it).
    pub first_cores: f64,
}

fn parse(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// Runs wrk once against `url` with `script` and its environment.
fn wrk_once(
    load: &Load,
    duration: Duration,
    url: &str,
    script: &Path,
    env: &[(&str, String)],
) -> Result<Measured, String> {
    let mut cmd = pinned(&load.cpus, Path::new("wrk"));
    cmd.arg("-t")
        .arg(load.threads.to_string())
        .arg("-c")
        .arg(load.connections.to_string())
        .arg("-d")
        .arg(format!("{}s", duration.as_secs().max(1)))
        .arg("--timeout")
        .arg("5s")
        .arg("-s")
        .arg(script)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().map_err(|e| format!("wrk: {e}"))?;
    // wrk ends by itself after `duration`; the watchdog covers a hung wrk.
    let out = child.wait_with_output().map_err(|e| format!("wrk: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("WRK_RESULT"))
        .ok_or_else(|| {
            format!(
                "wrk printed no result ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let get = |k| parse(line, k).unwrap_or(0.0);
    let secs = get("duration_us") / 1e6;
    let requests = get("requests") as u64;
    Ok(Measured {
        rps: if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        },
        p50_us: get("p50_us"),
        p99_us: get("p99_us"),
        errors: (get("errors") + get("status_errors")) as u64,
        server_cores: 0.0,
        first_cores: 0.0,
    })
}

impl Measured {
    /// Server CPU time per request in µs: unlike throughput, it hardly moves when other tenants
    /// of the machine take CPU time away (time not given to the server is not counted).
    pub fn cpu_us_per_request(&self) -> f64 {
        self.per_request(self.server_cores)
    }

    /// The first server's CPU time per request in µs: for a proxy, its own share, measured on
    /// its own process rather than inferred from the node's cost in another run (a node behind a
    /// proxy does not cost what it costs when driven directly).
    pub fn first_us_per_request(&self) -> f64 {
        self.per_request(self.first_cores)
    }

    fn per_request(&self, cores: f64) -> f64 {
        if self.rps > 0.0 {
            cores * 1e6 / self.rps
        } else {
            0.0
        }
    }
}

/// A warm-up run, then the measured run; `servers` are the processes whose CPU use is reported.
pub fn measure(
    load: &Load,
    url: &str,
    script: &Path,
    env: &[(&str, String)],
    servers: &[&Proc],
    ticks_per_second: f64,
) -> Result<Measured, String> {
    if !load.warmup.is_zero() {
        wrk_once(load, load.warmup, url, script, env)?;
    }
    let first = || servers.first().map_or(0, |p| p.cpu_ticks());
    let before: u64 = servers.iter().map(|p| p.cpu_ticks()).sum();
    let first_before = first();
    let started = Instant::now();
    let mut m = wrk_once(load, load.duration, url, script, env)?;
    let wall = started.elapsed().as_secs_f64();
    let after: u64 = servers.iter().map(|p| p.cpu_ticks()).sum();
    let first_after = first();
    m.server_cores = (after.saturating_sub(before)) as f64 / ticks_per_second / wall;
    m.first_cores = (first_after.saturating_sub(first_before)) as f64 / ticks_per_second / wall;
    Ok(m)
}

/// wrk's version line, for the report.
pub fn version() -> String {
    Command::new("wrk")
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            s.lines()
                .next()
                .map(|l| l.split("Copyright").next().unwrap_or(l).trim().to_string())
        })
        .unwrap_or_else(|| "wrk".into())
}
