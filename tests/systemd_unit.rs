//! `config/systemd/snowgate.service`, checked by systemd's own tools: a copy pointing at the
//! binary under test (and a config file in a temporary directory) passes `systemd-analyze verify`
//! without a warning, is hardened (the sandbox directives, and an exposure level from
//! `systemd-analyze security --offline` of at most 2.0), stops within the drain, reloads with
//! SIGHUP, and its `ExecStartPre` check passes on a valid config; its reload and stop commands,
//! sent to the real binary, reload it and let it drain and exit.
//!
//! A missing `systemd-analyze` fails the tests with the install command: a skipped check would
//! let a unit that systemd refuses or reads differently ship.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Where the unit and its config live once installed (as the unit's comment says).
const BINARY: &str = "/usr/local/bin/snowgate";
const CONFIG: &str = "/etc/snowgate/snowgate.toml";

/// The most `systemd-analyze security` may rate the unit's exposure (0 safe, 10 exposed). A
/// network service keeps some (it needs the network and sockets); the unhardened unit was 8.3.
const MAX_EXPOSURE: f64 = 2.0;

/// The unit as shipped.
fn unit_text() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/systemd/snowgate.service"
    ))
    .unwrap()
}

/// `systemd-analyze`, or a failure that says how to install it.
fn systemd_analyze() -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let path = Path::new(dir).join("systemd-analyze");
        if path.exists() {
            return path;
        }
    }
    panic!(
        "systemd-analyze is not installed: run `sudo apt-get install systemd` (.ci/run installs it)"
    );
}

/// A copy of the unit in a directory of its own, removed when dropped.
struct Installed {
    unit: PathBuf,
}

impl std::ops::Deref for Installed {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.unit
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(dir) = self.unit.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A copy of the unit in a fresh directory, its binary the one under test and its config a copy
/// of `config/minimal.toml` there.
fn installed_copy() -> Installed {
    installed_copy_with(|text| text)
}

/// [`installed_copy`], its text changed by `edit` (after the paths were).
fn installed_copy_with(edit: impl FnOnce(String) -> String) -> Installed {
    let dir = support::temp_dir("unit");
    let config = dir.join("snowgate.toml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/minimal.toml"),
        &config,
    )
    .unwrap();
    let text = unit_text()
        .replace(BINARY, env!("CARGO_BIN_EXE_snowgate"))
        .replace(CONFIG, config.to_str().unwrap());
    let unit = dir.join("snowgate.service");
    std::fs::write(&unit, edit(text)).unwrap();
    Installed { unit }
}

/// Runs `systemd-analyze args... unit`.
fn analyze(args: &[&str], unit: &Path) -> Output {
    Command::new(systemd_analyze())
        .args(args)
        .arg(unit)
        .output()
        .unwrap()
}

/// The lines of `systemd-analyze verify`'s output about `unit` (its file or its name); lines
/// about the machine's own units (which `verify` loads as dependencies) are not the unit's
/// business.
fn warnings_about(output: &Output, unit: &Path) -> Vec<String> {
    let dir = unit.parent().unwrap().to_str().unwrap().to_string();
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&output.stdout).lines())
        .filter(|l| l.contains(&dir) || l.contains("snowgate"))
        .map(str::to_string)
        .collect()
}

/// The unit's directives, in order: (section, key, value).
fn directives(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not a directive: {line:?}"));
        out.push((section.clone(), key.to_string(), value.to_string()));
    }
    out
}

/// The values `key` has in `[Service]` (a key may be given more than once).
fn service<'a>(d: &'a [(String, String, String)], key: &str) -> Vec<&'a str> {
    d.iter()
        .filter(|(s, k, _)| s == "Service" && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect()
}

/// A duration as systemd writes the ones in this unit (`45`, `45s`, `2min`).
fn seconds(value: &str) -> u64 {
    if let Some(min) = value.strip_suffix("min") {
        return min.parse::<u64>().unwrap() * 60;
    }
    value.trim_end_matches('s').parse().unwrap()
}

#[test]
fn the_unit_passes_systemd_analyze_verify_without_a_warning() {
    let unit = installed_copy();
    let out = analyze(&["verify"], &unit);
    let warnings = warnings_about(&out, &unit);
    assert!(
        out.status.success() && warnings.is_empty(),
        "systemd-analyze verify {}: {}\n{warnings:#?}\nstderr:\n{}",
        unit.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // The same check sees a misspelt directive and a binary that is not there: the filter above
    // does not hide the unit's own warnings.
    let typo = installed_copy_with(|t| t.replacen("ProtectSystem=", "ProtectSytem=", 1));
    let out = analyze(&["verify"], &typo);
    let warnings = warnings_about(&out, &typo);
    assert!(
        warnings.iter().any(|w| w.contains("ProtectSytem")),
        "a misspelt directive went unreported: {warnings:#?}"
    );
    let missing =
        installed_copy_with(|t| t.replace(env!("CARGO_BIN_EXE_snowgate"), "/nonexistent/snowgate"));
    let out = analyze(&["verify"], &missing);
    assert!(
        !out.status.success() && !warnings_about(&out, &missing).is_empty(),
        "a missing binary went unreported: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_unit_is_hardened() {
    let d = directives(&unit_text());
    for (key, want) in [
        ("User", "snowgate"),
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("PrivateUsers", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(service(&d, key), [want], "[Service] {key}");
    }
    // Only the address families snowgate uses: TCP over IPv4 and IPv6, and unix sockets (a
    // local Redis).
    let families = service(&d, "RestrictAddressFamilies");
    let mut families: Vec<&str> = families.iter().flat_map(|v| v.split(' ')).collect();
    families.sort_unstable();
    assert_eq!(families, ["AF_INET", "AF_INET6", "AF_UNIX"]);
    assert!(
        service(&d, "SystemCallFilter").contains(&"@system-service"),
        "{:?}",
        service(&d, "SystemCallFilter")
    );

    let unit = installed_copy();
    let out = analyze(&["security", "--offline=true"], &unit);
    let text = String::from_utf8_lossy(&out.stdout);
    let level = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for snowgate.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level from systemd-analyze security: {}\n{text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(level <= MAX_EXPOSURE, "exposure {level}:\n{text}");
}

#[test]
fn the_unit_drains_before_it_is_killed_reloads_with_sighup_and_checks_the_config_first() {
    let d = directives(&unit_text());
    let defaults = snowgate::config::Config::default();

    // systemd kills what is left after TimeoutStopSec: the drain must fit in it.
    let drain = defaults.server.drain_grace + defaults.server.drain_timeout;
    let stop = seconds(service(&d, "TimeoutStopSec")[0]);
    assert!(
        stop > drain.as_secs(),
        "TimeoutStopSec={stop} is within the default drain ({drain:?})"
    );
    assert_eq!(service(&d, "KillSignal"), ["SIGTERM"]);
    let check_first = format!("{BINARY} check --config {CONFIG}");
    assert_eq!(
        service(&d, "ExecReload"),
        [check_first.as_str(), "/bin/kill -HUP $MAINPID"]
    );

    // One descriptor per client connection and per node connection, with room to spare.
    let nofile: usize = service(&d, "LimitNOFILE")[0].parse().unwrap();
    assert!(
        nofile >= 2 * defaults.limits.max_connections,
        "LimitNOFILE={nofile} for limits.max_connections={}",
        defaults.limits.max_connections
    );

    // The unit serves and checks the one config file.
    let serve = format!("{BINARY} serve --config {CONFIG}");
    let check = format!("{BINARY} check --config {CONFIG}");
    assert_eq!(service(&d, "ExecStart"), [serve.as_str()]);
    assert_eq!(service(&d, "ExecStartPre"), [check.as_str()]);

    // The check as the installed copy runs it passes on a valid config (the unit's command line
    // is one `snowgate` understands).
    let unit = installed_copy();
    let copy = directives(&std::fs::read_to_string(&unit.unit).unwrap());
    let line = service(&copy, "ExecStartPre")[0];
    let mut words = line.split(' ');
    let out = Command::new(words.next().unwrap())
        .args(words)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{line}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_units_reload_and_stop_commands_reload_and_drain_the_real_binary() {
    let d = directives(&unit_text());
    // A node nobody listens on: the gateway starts and serves /ext/health without one.
    let config = format!(
        "[[upstreams]]\nname = \"node-0\"\nurl = \"http://127.0.0.1:{}\"\n",
        support::free_port()
    );
    let mut served = support::binary::Served::start(&config, "info");

    // `systemctl reload`: the unit's ExecReload commands in order, stopping at the first that
    // fails (as systemd does), $MAINPID being the service's process; the file is the served one.
    let config_path = served.config_path();
    let reload = |served: &support::binary::Served| -> Result<(), String> {
        for line in service(&d, "ExecReload") {
            let line = line
                .replace("$MAINPID", &served.pid().to_string())
                .replace(BINARY, env!("CARGO_BIN_EXE_snowgate"))
                .replace(CONFIG, config_path.to_str().unwrap());
            let mut words = line.split(' ');
            let out = Command::new(words.next().unwrap())
                .args(words)
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            if !out.status.success() {
                return Err(format!("{line}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        Ok(())
    };
    reload(&served).unwrap();
    assert!(
        served.logged("config reloaded", Duration::from_secs(60)),
        "no reload:\n{}",
        served.logs()
    );
    // A file snowgate refuses fails `systemctl reload` and never reaches the process.
    std::fs::write(
        &config_path,
        format!("{config}[health]\ninterval = \"soon\"\n"),
    )
    .unwrap();
    let refused = reload(&served).expect_err("a refused file fails the reload");
    assert!(
        refused.contains("`soon`") && refused.contains("interval"),
        "{refused}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        served.logs().matches("config reloaded").count(),
        1,
        "{}",
        served.logs()
    );
    assert!(
        !served.logs().contains("reload failed"),
        "{}",
        served.logs()
    );

    // `systemctl stop`: KillSignal, then the drain, well within TimeoutStopSec.
    let signal = service(&d, "KillSignal")[0];
    served.signal(signal.trim_start_matches("SIG"));
    let stop = Duration::from_secs(seconds(service(&d, "TimeoutStopSec")[0]));
    let exit = served.wait_exit(stop);
    assert!(
        exit.is_some_and(|s| s.success()),
        "{signal}: {exit:?} within {stop:?}:\n{}",
        served.logs()
    );
}
