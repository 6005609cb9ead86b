//! The A/B mode of the load benchmark: `LOAD_AB=/path/a,/path/b cargo bench --bench load`.
//!
//! It compares two snowgate builds in one sitting, alternating, so that the machine's other
//! tenants (2 shared cores) weigh on both alike. Each of `LOAD_ROUNDS` rounds (default 3) runs
//! binary a, then binary b, and each run starts afresh: a new devnode (always the bench's own
//! build, so both binaries forward to the same node code) and new snowgate instances of the
//! binary under test, with the same configuration as the full benchmark (shipped defaults, rate
//! limiting on). A run measures:
//!
//! 1. cache hits over the getBlock/getTx mix (every key cached and checked a HIT beforehand);
//! 2. forwarded calls (`platform.sampleValidators`, never cached);
//! 3. cache hits over 100 keys, then 4. over `LOAD_KEYS` (1,000,000) keys, each in its own
//!    instance (`benches/wrk/nonce.lua`);
//! 5. resident memory with `[cache] max_bytes = 64 MiB` filled past capacity (`LOAD_AB_MEMORY=0`
//!    skips it).
//!
//! The figure compared is snowgate's CPU time per call, read from its own process's
//! `/proc/<pid>/stat` (the devnode's is not counted): time the host gives to other tenants is not
//! in it, whereas requests/s drops with it. The report gives each run (requests/s, CPU µs per call,
//! the 1-minute load average when it was measured), each pair's b/a ratio of CPU per call, and the
//! mean, spread and standard deviation of the ratios. At the defaults (3 rounds, 5 s runs) the
//! whole A/B takes about 10 minutes on an otherwise idle 2-core machine, most of it filling the
//! 1,000,000-key instances; the watchdog allows 30 minutes per 3 rounds, since those fills slow
//! down most when the machine is shared.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procs::Proc;
use crate::wrk::{self, Load};
use crate::{client, env_or, machine, mib, now_utc, script_path, write_bodies, Bench};

/// The measured workloads, in the order of a run.
const WORKLOADS: [&str; 4] = [
    "cache hits, getBlock/getTx mix",
    "forwarded, sampleValidators",
    "cache hits, 100 keys",
    "cache hits, LOAD_KEYS keys",
];

/// One workload of one run.
#[derive(Clone, Debug, Default)]
struct Point {
    rps: f64,
    /// snowgate's own CPU time per call, µs.
    cpu_us: f64,
    errors: u64,
    /// The 1-minute load average at the end of the measurement.
    load: f64,
}

/// One run of one binary.
#[derive(Clone, Debug, Default)]
struct Run {
    points: Vec<Point>,
    /// VmRSS (MiB) of the 64 MiB instance idle, and filled past capacity.
    memory: Option<(f64, f64)>,
}

/// The two binaries from `LOAD_AB` (`a,b`), when it is set.
pub fn binaries() -> Result<Option<[PathBuf; 2]>, String> {
    let Ok(spec) = std::env::var("LOAD_AB") else {
        return Ok(None);
    };
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    let [a, b] = parts.as_slice() else {
        return Err(format!(
            "LOAD_AB must be two binaries separated by a comma, not {spec:?}"
        ));
    };
    for p in [a, b] {
        if !Path::new(p).is_file() {
            return Err(format!("LOAD_AB: {p} is not a file"));
        }
    }
    Ok(Some([PathBuf::from(a), PathBuf::from(b)]))
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Runs the A/B comparison and returns its markdown report.
pub fn run(b: &Bench, bins: &[PathBuf; 2], load: &Load) -> Result<String, String> {
    let rounds: usize = env_or("LOAD_ROUNDS", 3).max(1);
    let keys: usize = env_or("LOAD_KEYS", 1_000_000).max(100);
    let memory = env_or("LOAD_AB_MEMORY", 1u8) != 0;
    let started = Instant::now();
    let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (i, bin) in bins.iter().enumerate() {
            let label = ["a", "b"][i];
            eprintln!(
                "[{:>4}s] A/B round {}/{rounds}: {label} = {}",
                started.elapsed().as_secs(),
                round + 1,
                bin.display()
            );
            let r = one(b, bin, keys, memory, load)?;
            for (w, p) in WORKLOADS.iter().zip(&r.points) {
                eprintln!(
                    "    {}: {:.0} req/s, {:.2} µs CPU/call, load {:.2}",
                    w.replace("LOAD_KEYS", &keys.to_string()),
                    p.rps,
                    p.cpu_us,
                    p.load
                );
            }
            if let Some((idle, full)) = r.memory {
                eprintln!("    64 MiB instance: {idle:.1} MiB idle, {full:.1} MiB filled");
            }
            runs[i].push(r);
        }
    }
    Ok(report(bins, &runs, keys, load, started.elapsed()))
}

/// One fresh run of `bin`: devnode, instances, the four workloads and the memory step.
fn one(b: &Bench, bin: &Path, keys: usize, memory: bool, load: &Load) -> Result<Run, String> {
    let (devnode, node_port, node) = b.start_devnode()?;
    let (_, txs, mix, forward) = b.bodies(&node)?;
    let mix_file = b.dir.join("mix.txt");
    let forward_file = b.dir.join("forward.txt");
    write_bodies(&mix_file, &mix)?;
    write_bodies(&forward_file, &forward)?;
    let mix_env = vec![("SNOWGATE_BODIES", mix_file.display().to_string())];
    let fwd_env = vec![("SNOWGATE_BODIES", forward_file.display().to_string())];
    let txid = txs[0].clone();
    let nonce_env = |n: usize| {
        vec![
            ("SNOWGATE_TXID", txid.clone()),
            ("SNOWGATE_KEYS", n.to_string()),
        ]
    };
    // Each instance is fresh, so each measurement gets the warm-up.
    let measure = |url: &str,
                   script: &str,
                   env: &[(&str, String)],
                   servers: &[&Proc]|
     -> Result<Point, String> {
        let m = wrk::measure(load, url, &script_path(script), env, servers, b.ticks)?;
        Ok(Point {
            rps: m.rps,
            // The first server is snowgate; the devnode behind it (forwarded) is not counted.
            cpu_us: m.first_us_per_request(),
            errors: m.errors,
            load: load_average(),
        })
    };
    let mut run = Run::default();

    let (sg, url) = b.start_gateway(bin, "ab-snowgate", node_port, 256 * 1024 * 1024)?;
    b.send_all(&url, &mix, "x-cache")?;
    let second = b.send_all(&url, &mix, "x-cache")?;
    if let Some((i, _)) = second
        .iter()
        .enumerate()
        .find(|(_, (_, h))| h.as_deref() != Some("HIT"))
    {
        return Err(format!("{} did not cache {}", bin.display(), mix[i].1));
    }
    run.points.push(measure(&url, "mix.lua", &mix_env, &[&sg])?);
    run.points
        .push(measure(&url, "mix.lua", &fwd_env, &[&sg, &devnode])?);
    drop(sg);

    let big_bytes: u64 = (keys as u64 * 2048).max(256 * 1024 * 1024);
    for n in [100, keys] {
        let (sg, url) = b.start_gateway(bin, "ab-snowgate-keys", node_port, big_bytes)?;
        b.fill(&url, &txid, 0..n)?;
        let entries = client::metric(&b.metrics(&url), "snowgate_cache_entries");
        if (entries as usize) < n * 99 / 100 {
            return Err(format!("the cache holds {entries} entries, not {n}"));
        }
        run.points
            .push(measure(&url, "nonce.lua", &nonce_env(n), &[&sg])?);
    }

    if memory {
        let (sg, url) = b.start_gateway(bin, "ab-snowgate-64mib", node_port, 64 * 1024 * 1024)?;
        std::thread::sleep(Duration::from_secs(1));
        let idle = sg.rss_kib();
        b.fill(&url, &txid, 0..160_000)?;
        std::thread::sleep(Duration::from_secs(2));
        run.memory = Some((mib(idle), mib(sg.rss_kib())));
    }
    drop(devnode);
    Ok(run)
}

/// Mean, min, max and (sample) standard deviation.
fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, min, max, var.sqrt())
}

fn report(
    bins: &[PathBuf; 2],
    runs: &[Vec<Run>; 2],
    keys: usize,
    load: &Load,
    took: Duration,
) -> String {
    let name = |w: &str| w.replace("LOAD_KEYS", &keys.to_string());
    let mut out = String::new();
    let _ = writeln!(out, "\n## snowgate A/B load benchmark, {}", now_utc());
    let _ = writeln!(
        out,
        "\n{}; wrk -t{} -c{} -d{}s after a {}s warm-up, a fresh devnode and snowgate per run; snowgate with its shipped defaults, rate limiting on (only the quota's rate and burst raised so that the load cannot exhaust it). CPU µs/call is snowgate's own process (user + system) over the run divided by the calls; load is the 1-minute load average at the end of the measurement.\n",
        machine(),
        load.threads,
        load.connections,
        load.duration.as_secs(),
        load.warmup.as_secs(),
    );
    let _ = writeln!(
        out,
        "* a = `{}`\n* b = `{}`\n",
        bins[0].display(),
        bins[1].display()
    );
    let _ = writeln!(
        out,
        "| round | workload | a req/s | a CPU µs/call | a load | b req/s | b CPU µs/call | b load | b/a CPU per call | errors a/b |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); WORKLOADS.len()];
    for (r, (ra, rb)) in runs[0].iter().zip(&runs[1]).enumerate() {
        for (w, workload) in WORKLOADS.iter().enumerate() {
            let (Some(pa), Some(pb)) = (ra.points.get(w), rb.points.get(w)) else {
                continue;
            };
            let ratio = if pa.cpu_us > 0.0 {
                pb.cpu_us / pa.cpu_us
            } else {
                0.0
            };
            ratios[w].push(ratio);
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.2} | {:.1} | {:.0} | {:.2} | {:.1} | {ratio:.3} | {}/{} |",
                r + 1,
                name(workload),
                pa.rps,
                pa.cpu_us,
                pa.load,
                pb.rps,
                pb.cpu_us,
                pb.load,
                pa.errors,
                pb.errors
            );
        }
    }
    let _ = writeln!(
        out,
        "\n| workload | a CPU µs/call (mean) | b CPU µs/call (mean) | b/a CPU per call: mean | min-max | std dev | a req/s (mean) | b req/s (mean) |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (w, workload) in WORKLOADS.iter().enumerate() {
        let of = |i: usize, f: fn(&Point) -> f64| -> Vec<f64> {
            runs[i]
                .iter()
                .filter_map(|r| r.points.get(w).map(f))
                .collect()
        };
        let (ra, rb) = (stats(&of(0, |p| p.cpu_us)).0, stats(&of(1, |p| p.cpu_us)).0);
        let (qa, qb) = (stats(&of(0, |p| p.rps)).0, stats(&of(1, |p| p.rps)).0);
        let (mean, min, max, sd) = stats(&ratios[w]);
        let _ = writeln!(
            out,
            "| {} | {ra:.2} | {rb:.2} | {mean:.3} | {min:.3}-{max:.3} | {sd:.3} | {qa:.0} | {qb:.0} |",
            name(workload)
        );
    }
    let mem: Vec<String> = runs[0]
        .iter()
        .zip(&runs[1])
        .enumerate()
        .filter_map(|(r, (ra, rb))| {
            let (ia, fa) = ra.memory?;
            let (ib, fb) = rb.memory?;
            Some(format!(
                "round {}: a {ia:.1} idle / {fa:.1} filled, b {ib:.1} idle / {fb:.1} filled",
                r + 1
            ))
        })
        .collect();
    if !mem.is_empty() {
        let _ = writeln!(
            out,
            "\n* resident memory (MiB) with max_bytes = 64 MiB, idle and after 160,000 distinct answers: {}",
            mem.join("; ")
        );
    }
    let _ = writeln!(out, "* total A/B time {} s", took.as_secs());
    out
}
