//! Hedged reads (`LOAD_ONLY=hedge`): three devnodes that each answer a few per cent of calls
//! slowly at random (`LOAD_HEDGE_SLOW_RATE`, default 0.04, taking `LOAD_HEDGE_SLOW`, default
//! 300 ms, more), the rest at once: the tail a balancer cannot steer around, since any call on
//! any node may be the slow one. One snowgate in front of them, without hedging and then with
//! `[upstream] hedge_after` (`LOAD_HEDGE_AFTER`, default 20 ms) and the default budget; each
//! takes `LOAD_HEDGE_CALLS` (default 4000) uncached calls (`platform.sampleValidators`) from
//! `LOAD_HEDGE_CLIENTS` (default 8) clients at once. Reported: the client's latency percentiles
//! (as the client timed them, on a shared machine: compare the two rows of one run) and hedges
//! as a share of calls (snowgate's `snowgate_hedges_total`).

use std::time::{Duration, Instant};

use super::{addr, client, env_or, free_port, pinned, procs, Bench, Proc};

/// The devnodes, each slow for a fraction of calls at random.
fn start_nodes(b: &Bench, rate: f64, slow: Duration) -> Result<Vec<(Proc, u16)>, String> {
    let mut nodes = Vec::new();
    for i in 0..3 {
        let port = free_port();
        let mut cmd = pinned(&b.pin.server, &b.snowgate);
        cmd.args(["devnode", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--block-interval", "60s", "--node-index", &i.to_string()])
            .args(["--slow-rate", &rate.to_string()])
            .args(["--slow-latency", &format!("{}ms", slow.as_millis())]);
        let mut p = b.server(&format!("hedge-devnode-{i}"), cmd)?;
        procs::wait_listening(&mut p, addr(port), Duration::from_secs(20))?;
        nodes.push((p, port));
    }
    Ok(nodes)
}

/// A snowgate in front of `ports`, hedging after `hedge` (`None`: off).
fn start_gateway(
    b: &Bench,
    name: &str,
    ports: &[u16],
    hedge: Option<Duration>,
) -> Result<(Proc, String), String> {
    let port = free_port();
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n\n[admin]\napi_keys = [\"{}\"]\n\n[rate_limit]\nenabled = false\n\n",
        client::ADMIN_KEY
    );
    if let Some(after) = hedge {
        text.push_str(&format!(
            "[upstream]\nhedge_after = \"{}ms\"\n\n",
            after.as_millis()
        ));
    }
    for (i, node) in ports.iter().enumerate() {
        text.push_str(&format!(
            "[[upstreams]]\nname = \"node-{i}\"\nurl = \"http://127.0.0.1:{node}\"\n\n"
        ));
    }
    let config = b.dir.join(format!("{name}.toml"));
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let mut cmd = pinned(&b.pin.server, &b.snowgate);
    cmd.arg("serve").arg("--config").arg(&config);
    let mut p = b.server(name, cmd)?;
    procs::wait_listening(&mut p, addr(port), Duration::from_secs(20))?;
    let url = format!("http://127.0.0.1:{port}");
    b.wait_healthy(&url)?;
    Ok((p, url))
}

/// `calls` calls from `clients` clients at once; each call's latency, sorted.
fn drive(b: &Bench, url: &str, calls: usize, clients: usize) -> Result<Vec<Duration>, String> {
    let body = client::rpc_body("platform.sampleValidators", &serde_json::json!({"size": 1}));
    let target = format!("{url}/ext/bc/P");
    let mut all = b.rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (http, target, body) = (client::http(), target.clone(), body.clone());
            let n = calls / clients;
            tasks.push(tokio::spawn(async move {
                let mut took = Vec::with_capacity(n);
                for _ in 0..n {
                    let started = Instant::now();
                    let r = client::post(&http, &target, body.clone(), "").await?;
                    if r.status != 200 {
                        return Err(format!("HTTP {}", r.status));
                    }
                    took.push(started.elapsed());
                }
                Ok::<_, String>(took)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.map_err(|e| e.to_string())??);
        }
        Ok::<_, String>(all)
    })?;
    all.sort();
    Ok(all)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// The section's table.
pub fn run(b: &Bench) -> Result<String, String> {
    let rate: f64 = env_or("LOAD_HEDGE_SLOW_RATE", 0.04);
    let slow = Duration::from_millis(env_or("LOAD_HEDGE_SLOW", 300));
    let after = Duration::from_millis(env_or("LOAD_HEDGE_AFTER", 20));
    let calls: usize = env_or("LOAD_HEDGE_CALLS", 4000);
    let clients: usize = env_or("LOAD_HEDGE_CLIENTS", 8).max(1);
    let nodes = start_nodes(b, rate, slow)?;
    let ports: Vec<u16> = nodes.iter().map(|(_, p)| *p).collect();
    let mut out = format!(
        "\n### Hedged reads: three devnodes, each answering {:.0} % of calls {} ms late at random; {calls} uncached calls from {clients} clients\n\n| snowgate | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | hedges sent | hedges won | share of calls |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        rate * 100.0,
        slow.as_millis()
    );
    for (name, hedge) in [("no hedging", None), ("hedge_after", Some(after))] {
        let (gateway, url) =
            start_gateway(b, &format!("hedge-{}", hedge.is_some()), &ports, hedge)?;
        // A warm-up: connections open, latency estimates settled.
        drive(b, &url, 200, clients)?;
        let before = b.metrics(&url);
        let took = drive(b, &url, calls, clients)?;
        let after_metrics = b.metrics(&url);
        let count = |text: &str, outcome: &str| {
            client::metric(
                text,
                &format!("snowgate_hedges_total{{outcome=\"{outcome}\"}}"),
            )
        };
        let sent = count(&after_metrics, "sent") - count(&before, "sent");
        let won = count(&after_metrics, "won") - count(&before, "won");
        let label = match hedge {
            Some(a) => format!("{name} = \"{}ms\"", a.as_millis()),
            None => name.to_string(),
        };
        out.push_str(&format!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {sent:.0} | {won:.0} | {:.1} % |\n",
            percentile(&took, 0.5),
            percentile(&took, 0.9),
            percentile(&took, 0.99),
            percentile(&took, 0.999),
            percentile(&took, 1.0),
            100.0 * sent / took.len().max(1) as f64
        ));
        drop(gateway);
    }
    drop(nodes);
    Ok(out)
}
