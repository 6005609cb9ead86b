//! What OpenTelemetry traces cost a cache hit (`LOAD_ONLY=tracing`): three snowgate instances in
//! front of one devnode, each with the shipped defaults of the full table, one without
//! `[tracing]`, one sampling 1 request in 100 (`sample_ratio = 0.01`) and one tracing every
//! request (`1.0`), all exporting to an OTLP sink on loopback (a hyper server that takes each
//! export and answers an empty success, so the exporter's own work is counted). Each round
//! drives every instance once with the same wrk load of cache hits (`getBlock`/`getTx` over the
//! devnode's blocks and transactions); the report gives the median round's CPU per request of
//! each and its ratio to the instance without tracing, and the spans exported and dropped.

use std::fmt::Write as _;
use std::time::Duration;

use super::{
    addr, client, free_port, median, pinned, procs, script_path, write_bodies, wrk, Bench, Load,
};

/// The sink's role in this binary (see `main`).
pub const ROLE: &str = "otlp-sink";

/// The configurations compared, by name.
const VARIANTS: [(&str, Option<f64>); 3] = [
    ("tracing off", None),
    ("sample_ratio = 0.01", Some(0.01)),
    ("sample_ratio = 1.0", Some(1.0)),
];

pub fn run(b: &Bench, load: &Load, rounds: usize) -> Result<String, String> {
    let (devnode, node_port, node) = b.start_devnode()?;
    let (blocks, txs, mix, _forward) = b.bodies(&node)?;
    let mix_file = b.dir.join("mix.txt");
    write_bodies(&mix_file, &mix)?;
    let env = [("SNOWGATE_BODIES", mix_file.display().to_string())];
    // The collector: the bench binary in its sink role, pinned with the servers.
    let sink_port = free_port();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = pinned(&b.pin.server, &exe);
    cmd.env("LOAD_BENCH_ROLE", ROLE)
        .env("LOAD_BENCH_PORT", sink_port.to_string());
    let mut sink = b.server("otlp-sink", cmd)?;
    procs::wait_listening(&mut sink, addr(sink_port), Duration::from_secs(20))?;
    let mut gateways = Vec::new();
    for (i, (name, ratio)) in VARIANTS.iter().enumerate() {
        let extra = match ratio {
            None => String::new(),
            Some(r) => format!(
                "\n[tracing]\notlp_endpoint = \"http://127.0.0.1:{sink_port}\"\nsample_ratio = {r}\n"
            ),
        };
        let (p, url) = b.start_gateway_with(
            &b.snowgate,
            &format!("traced-{i}"),
            node_port,
            256 * 1024 * 1024,
            &extra,
        )?;
        b.send_all(&url, &mix, "x-cache")?;
        let second = b.send_all(&url, &mix, "x-cache")?;
        if second.iter().any(|(_, h)| h.as_deref() != Some("HIT")) {
            return Err(format!("{name}: not every key is a hit"));
        }
        gateways.push((p, url));
    }
    let mut results: Vec<Vec<wrk::Measured>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..rounds {
        for (i, (p, url)) in gateways.iter().enumerate() {
            eprintln!("round {}/{rounds}: {}", round + 1, VARIANTS[i].0);
            let mut load = load.clone();
            if round > 0 {
                load.warmup = Duration::ZERO;
            }
            let env: Vec<(&str, String)> = env.to_vec();
            let m = wrk::measure(&load, url, &script_path("mix.lua"), &env, &[p], b.ticks)?;
            results[i].push(m);
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nCache hits ({} blocks, {} txs), wrk -t{} -c{} -d{}s, {rounds} rounds, the median round of each; \
         the exporter posts to an OTLP sink on loopback.\n",
        blocks.len(),
        txs.len(),
        load.threads,
        load.connections,
        load.duration.as_secs()
    );
    let _ = writeln!(
        out,
        "| snowgate | req/s (median) | CPU µs/req | per round | × off | spans exported | dropped | failed |"
    );
    let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---:|---:|");
    let off = median(&results[0]).cpu_us_per_request();
    for (i, (name, _)) in VARIANTS.iter().enumerate() {
        let m = median(&results[i]);
        let per_round: Vec<String> = results[i]
            .iter()
            .map(|m| format!("{:.2}", m.cpu_us_per_request()))
            .collect();
        let metrics = b.metrics(&gateways[i].1);
        // No series without `[tracing]`.
        let spans = |outcome: &str| match VARIANTS[i].1 {
            None => "–".to_string(),
            Some(_) => {
                let series = format!("snowgate_trace_spans_total{{outcome=\"{outcome}\"}}");
                format!("{:.0}", client::metric(&metrics, &series))
            }
        };
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {:.2} | {} | {:.3} | {} | {} | {} |",
            m.rps,
            m.cpu_us_per_request(),
            per_round.join(", "),
            m.cpu_us_per_request() / off,
            spans("exported"),
            spans("dropped"),
            spans("failed"),
        );
    }
    drop(gateways);
    drop(sink);
    drop(devnode);
    Ok(out)
}
