//! Each configuration error names its own key, the same way through `snowgate check FILE` (exit
//! status 1, the key on stderr) and through `Config::parse`; a file `check` accepts is one `serve`
//! runs.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

/// One node with a port, so that only the key under test is wrong.
const NODE: &str = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n";

/// Runs `snowgate ARGS --config FILE` on `text` written to a fresh file named after `test`.
fn run(test: &str, args: &[&str], text: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("snowgate-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snowgate.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(args)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// `snowgate check` refuses `text`, and both it and `Config::parse` name `key` (the parse error
/// names exactly that key).
fn refused_naming(test: &str, text: &str, key: &str) -> String {
    let out = run(test, &["check"], text);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}: {out:?}");
    assert!(stderr.contains(&format!("`{key}`")), "{text}: {stderr}");
    let e = snowgate::Config::parse(text, "t.toml").unwrap_err();
    assert_eq!(e.key(), Some(key), "{text}: {e}");
    e.to_string()
}

#[test]
fn a_zero_connect_timeout_is_reported_under_its_own_key() {
    refused_naming(
        "connect-timeout",
        &format!("{NODE}[upstream]\nconnect_timeout = \"0s\"\n"),
        "upstream.connect_timeout",
    );
}

#[test]
fn a_zero_head_ttl_is_reported_under_cache_head_ttl() {
    refused_naming(
        "head-ttl",
        &format!("{NODE}[cache]\nhead_ttl = \"0s\"\n"),
        "cache.head_ttl",
    );
    for key in ["network_ttl", "volatile_ttl"] {
        refused_naming(
            key,
            &format!("{NODE}[cache]\n{key} = \"0s\"\n"),
            &format!("cache.{key}"),
        );
    }
}

#[test]
fn an_upstream_url_without_a_port_is_an_error() {
    // Before, it was accepted and the node was called on port 80.
    let text = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n\
                [[upstreams]]\nname = \"b\"\nurl = \"http://10.0.0.5\"\n";
    let e = refused_naming("no-port", text, "upstreams[1].url");
    assert!(e.contains("http://10.0.0.5:9650"), "{e}");
}

#[test]
fn the_admin_listener_needs_its_own_address() {
    let text = "[server]\nlisten = \"127.0.0.1:9650\"\n[admin]\nlisten = \"127.0.0.1:9650\"\n\
                [[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n";
    let e = refused_naming("admin-listen", text, "admin.listen");
    assert!(e.contains("is server.listen"), "{e}");
    snowgate::Config::parse(&text.replace(":9650\"\n[[", ":9660\"\n[["), "t.toml").unwrap();
}

#[test]
fn an_upstream_named_only_dots_is_an_error() {
    // A browser resolves `.` and `..` away in the status page's cordon URL.
    for name in [".", ".."] {
        let text = format!("[[upstreams]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:9651\"\n");
        let e = refused_naming("dots", &text, "upstreams[0].name");
        assert!(e.contains("not only dots"), "{e}");
    }
    snowgate::Config::parse(
        "[[upstreams]]\nname = \"node.a\"\nurl = \"http://127.0.0.1:9651\"\n",
        "t.toml",
    )
    .unwrap();
}

#[test]
fn the_placeholder_admin_key_of_the_examples_is_an_error() {
    let text = format!(
        "{NODE}[admin]\napi_keys = [\"a-real-key-0123456789abcdef\", \"{}\"]\n",
        snowgate::config::admin::PLACEHOLDER_KEY
    );
    let e = refused_naming("placeholder", &text, "admin.api_keys[1]");
    assert!(e.contains("placeholder"), "{e}");
    // Never the key itself, even a placeholder.
    assert!(!e.contains("replace-me"), "{e}");
}

/// Runs `snowgate serve --config FILE` on `text`, expecting it to refuse the file and exit: waits
/// at most 30 s, then kills it and fails.
fn serve_refuses(test: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("snowgate-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snowgate.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            panic!("serve started with {text:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success(), "{text}");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn check_refuses_a_file_without_upstreams_as_serve_does() {
    // Before, `check` passed it and `serve` refused it.
    let text = "[server]\nlisten = \"127.0.0.1:0\"\n[rate_limit]\nenabled = false\n";
    let e = refused_naming("no-upstreams", text, "upstreams");
    assert!(e.contains("--upstream"), "{e}");
    let served = serve_refuses("no-upstreams-serve", text);
    assert!(served.contains("`upstreams`"), "{served}");
}

#[test]
fn check_refuses_numbers_serve_cannot_start_with() {
    // Past what a tokio semaphore holds: `serve` panicked in its accept loop or building the
    // pool, while `check` passed the file.
    let huge = 1u64 << 62;
    for (section, key) in [
        ("limits", "max_connections"),
        ("upstream", "max_concurrency"),
    ] {
        let text =
            format!("[server]\nlisten = \"127.0.0.1:0\"\n{NODE}[{section}]\n{key} = {huge}\n");
        refused_naming(key, &text, &format!("{section}.{key}"));
        let served = serve_refuses(&format!("{key}-serve"), &text);
        assert!(served.contains(&format!("`{section}.{key}`")), "{served}");
    }
}

#[test]
fn a_health_timeout_longer_than_its_interval_is_an_error() {
    let text = format!("{NODE}[health]\ninterval = \"1s\"\ntimeout = \"1500ms\"\n");
    let e = refused_naming("health-timeout", &text, "health.timeout");
    assert!(e.contains("health.interval"), "{e}");
    // A timeout equal to the interval is fine.
    snowgate::Config::parse(
        &format!("{NODE}[health]\ninterval = \"1s\"\ntimeout = \"1s\"\n"),
        "t.toml",
    )
    .unwrap();
}

#[test]
fn an_absurd_duration_is_refused_before_it_can_overflow_a_clock() {
    // request_deadline first: it must stay at least request_timeout.
    // The bound is the duration parser's: the error names the key with its table, the line and
    // what the value may be.
    for (test, text, key) in [
        (
            "absurd-deadline",
            format!("{NODE}[limits]\nrequest_deadline = \"1000000 years\"\n"),
            "limits.request_deadline",
        ),
        (
            "absurd-method-timeout",
            format!("{NODE}[methods.\"platform.getHeight\"]\ntimeout = \"400 days\"\n"),
            "methods.\"platform.getHeight\".timeout",
        ),
    ] {
        let out = run(test, &["check"], &text);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{text}: {out:?}");
        assert!(stderr.contains(&format!("(`{key}`)")), "{stderr}");
        assert!(stderr.contains("must be at most 365 days"), "{stderr}");
    }
    // The keys the duration list once missed: `max_hold_off` is added to `Instant::now()`.
    for (section, key) in [
        ("[health]", "max_hold_off"),
        ("[health]", "method_cooldown"),
        ("[upstream]", "hedge_after"),
        (
            "[tracing]\notlp_endpoint = \"http://127.0.0.1:4318\"",
            "export_timeout",
        ),
        ("[redis]\nurl = \"redis://127.0.0.1:6379\"", "timeout"),
    ] {
        let text = format!("{NODE}{section}\n{key} = \"100000 years\"\n");
        let e = snowgate::Config::parse(&text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("at most 365 days") && e.contains(key),
            "{key}: {e}"
        );
    }
    let text = NODE.replace("url = ", "health_interval = \"100000 years\"\nurl = ");
    let e = snowgate::Config::parse(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 365 days"), "{e}");
    assert!(e.contains("(`upstreams[0].health_interval`)"), "{e}");
}

/// The bound lives in the duration parser, so it holds for a key only if the key is read by it:
/// every `Duration` field of a struct the config deserializes (`[methods]` included) names
/// `crate::duration` in its serde attribute. A key read another way (humantime_serde, a
/// `Duration` as a table) fails here, naming its file and field.
#[test]
fn every_duration_key_is_read_by_the_bounded_parser() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("methods.rs")];
    for entry in std::fs::read_dir(src.join("config")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut fields = 0;
    let mut unbounded = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        let mut deserialized = false;
        let mut attributes = String::new();
        for line in code.lines() {
            let t = line.trim();
            if t.starts_with("#[derive(") {
                deserialized = t.contains("Deserialize");
            }
            // Read through another struct (`#[serde(from = "HealthFile")]`): that one is checked.
            if t.starts_with("#[serde(") && t.contains("from = ") {
                deserialized = false;
            }
            if t.starts_with("#[") || t.starts_with("///") {
                attributes.push_str(t);
                continue;
            }
            let duration = t.contains(": Duration,")
                || t.contains(": Option<Duration>,")
                || t.contains(": std::time::Duration,")
                || t.contains(": Option<std::time::Duration>,");
            if deserialized && duration && !t.contains("fn ") {
                fields += 1;
                if !attributes.contains("crate::duration") {
                    unbounded.push(format!("{}: {t}", file.display()));
                }
            }
            attributes.clear();
        }
    }
    assert!(
        unbounded.is_empty(),
        "durations without the bound: {unbounded:#?}"
    );
    // 22 keys today; a rewrite of the structs that hides them from this scan fails here.
    assert!(fields >= 22, "only {fields} duration fields found");
}

/// A syntax error on a line that holds a secret: `check` says where (line, column, key) and never
/// quotes the line or the value.
#[test]
fn a_broken_line_with_a_secret_is_never_quoted() {
    let secret = "hunter2-secret-0123456789";
    for (i, text) in [
        format!(
            "[[upstreams]]\nname = \"a\"\nurl = \"https://u:{secret}@h/v1\" role = \"fallback\"\n"
        ),
        format!("{NODE}[admin]\napi_keys = \"{secret}\"\n"),
    ]
    .iter()
    .enumerate()
    {
        let out = run(&format!("secret-{i}"), &["check"], text);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains(secret), "{stderr}");
        assert!(stderr.contains("at line "), "{stderr}");
    }
}

/// `max_depth` counts back from a height the call names: on a method without a height param it
/// would never apply, and is refused under its own key. With one, built in or given, it is valid.
#[test]
fn max_depth_without_a_height_param_is_refused_under_its_key() {
    let e = refused_naming(
        "max-depth-no-height",
        &format!("{NODE}[methods.\"platform.getHeight\"]\nmax_depth = 1000\n"),
        "methods.\"platform.getHeight\".max_depth",
    );
    assert!(e.contains("height parameter"), "{e}");
    for table in [
        "[methods.\"platform.getAllValidatorsAt\"]\nmax_depth = 1000\n",
        "[methods.\"platform.getHeight\"]\nheight_param = \"height\"\nmax_depth = 10\n",
    ] {
        snowgate::Config::parse(&format!("{NODE}{table}"), "t.toml").unwrap();
    }
}

/// A key of `[[rate_limit.keys]]` whose value must never appear in an error.
const SECRET_KEY: &str = "never-shown-rate-limit-key-0123456789";

#[test]
fn keys_take_a_tiers_numbers_or_their_own() {
    let text = format!(
        "{NODE}[[rate_limit.tiers]]\nname = \"gold\"\nrequests_per_second = 500\nburst = 900\n\
         [[rate_limit.keys]]\nkey = \"{SECRET_KEY}\"\nname = \"acme-prod\"\ntier = \"gold\"\n\
         [[rate_limit.keys]]\nkey = \"another-rate-limit-key-0123456789\"\nrequests_per_second = 7\nburst = 70\n"
    );
    let config = snowgate::Config::parse(&text, "t.toml").unwrap();
    let rl = &config.rate_limit;
    assert_eq!(rl.key_quota(0), (500, 900));
    assert_eq!(rl.key_quota(1), (7, 70));
    assert_eq!(rl.key_name(0), "acme-prod");
    // Unnamed: its `key:` label, never the key.
    assert!(rl.key_name(1).starts_with("key:"), "{}", rl.key_name(1));
    assert!(!format!("{config:?}").contains(SECRET_KEY));
    let out = run("tiers-ok", &["check"], &text);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_key_naming_an_unknown_tier_is_refused_naming_the_key_never_showing_it() {
    let tier = "[[rate_limit.tiers]]\nname = \"gold\"\nrequests_per_second = 500\nburst = 900\n";
    let key = |rest: &str| format!("[[rate_limit.keys]]\nkey = \"{SECRET_KEY}\"\n{rest}");
    let cases = [
        (
            format!("{tier}{}", key("tier = \"platinum\"\n")),
            "rate_limit.keys[0].tier",
        ),
        (
            format!("{tier}{}", key("tier = \"gold\"\nburst = 10\n")),
            "rate_limit.keys[0].tier",
        ),
        (key("burst = 10\n"), "rate_limit.keys[0].requests_per_second"),
        (
            key("name = \"has space\"\nrequests_per_second = 1\nburst = 10\n"),
            "rate_limit.keys[0].name",
        ),
        (
            format!(
                "{}{}",
                key("name = \"a\"\nrequests_per_second = 1\nburst = 10\n"),
                "[[rate_limit.keys]]\nkey = \"another-rate-limit-key-0123456789\"\nname = \"a\"\ntier = \"gold\"\n"
            ),
            "rate_limit.keys[1].name",
        ),
        (format!("{tier}{tier}"), "rate_limit.tiers[1].name"),
        (
            "[[rate_limit.tiers]]\nname = \"gold\"\nrequests_per_second = 0\nburst = 900\n".into(),
            "rate_limit.tiers[0].requests_per_second",
        ),
    ];
    for (i, (rest, path)) in cases.iter().enumerate() {
        let text = format!("{NODE}{rest}");
        let e = refused_naming(&format!("tier-{i}"), &text, path);
        assert!(!e.contains(SECRET_KEY), "{e}");
        let out = run(&format!("tier-out-{i}"), &["check"], &text);
        let all = format!("{out:?}");
        assert!(!all.contains(SECRET_KEY), "{all}");
    }
    let e = refused_naming(
        "tier-unknown",
        &format!("{NODE}{tier}{}", key("tier = \"platinum\"\n")),
        "rate_limit.keys[0].tier",
    );
    assert!(e.contains("platinum"), "{e}");
}
