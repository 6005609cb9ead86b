//! What `snowgate serve` says when it cannot start: the operator reads the key and the value to
//! fix, not a bare OS error.
#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn an_address_in_use_is_named_with_its_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(["serve", "--listen", &addr.to_string()])
        .args(["--upstream", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")) && stderr.contains("server.listen"),
        "{stderr}"
    );
    drop(taken);
}

fn snowgate(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A start-up error is one line with each cause once, and no backtrace even when the unit or
/// shell sets `RUST_BACKTRACE=1` (it added about 70 lines).
#[test]
fn a_start_up_error_is_one_clear_line_without_a_backtrace() {
    let dir = std::env::temp_dir().join(format!("sg-missing-{}", std::process::id()));
    let missing = dir.join("snowgate.toml");
    let (ok, _, stderr) = snowgate(
        &["serve", "--config", missing.to_str().unwrap()],
        &[("RUST_BACKTRACE", "1"), ("RUST_LIB_BACKTRACE", "1")],
    );
    assert!(!ok);
    let errors: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].starts_with("error: cannot read "), "{stderr}");
    assert_eq!(
        errors[0].matches("No such file").count(),
        1,
        "the cause said once: {stderr}"
    );
    assert!(!stderr.contains("Caused by") && !stderr.contains("backtrace"));
}

/// `snowgate devnode` on a busy port names the address, as `serve` does.
#[test]
fn a_devnode_on_a_busy_port_names_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (ok, _, stderr) = snowgate(&["devnode", "--listen", &addr], &[("RUST_BACKTRACE", "1")]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(!stderr.contains("backtrace"), "{stderr}");
}

/// `snowgate check` refuses a misspelt method (the override would never apply) and suggests the
/// name meant; shows a bad duration with an example; and accepts a short health interval alone
/// (the check timeout follows it).
#[test]
fn check_catches_a_misspelt_method_and_a_bad_duration() {
    let dir = std::env::temp_dir().join(format!("sg-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let node = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n";
    let check = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{node}{text}")).unwrap();
        snowgate(&["check", "--config", path.to_str().unwrap()], &[])
    };
    let (ok, _, stderr) = check("typo.toml", "[methods.\"platform.getHeigth\"]\ncost = 3\n");
    assert!(!ok);
    assert!(
        stderr.contains("methods.\"platform.getHeigth\"")
            && stderr.contains("did you mean `platform.getHeight`"),
        "{stderr}"
    );
    let (ok, stdout, stderr) = check(
        "new.toml",
        "[methods.\"info.brandNew\"]\nfamily = \"info\"\naccess = \"public\"\n",
    );
    assert!(ok, "a new method declared on purpose: {stderr}");
    assert!(stdout.contains("ok"), "{stdout}");
    let (ok, _, stderr) = check("duration.toml", "[health]\ninterval = \"200\"\n");
    assert!(!ok);
    assert!(
        stderr.contains("`200`") && stderr.contains("`500ms`") && stderr.contains("interval"),
        "{stderr}"
    );
    let (ok, _, stderr) = check("short.toml", "[health]\ninterval = \"200ms\"\n");
    assert!(ok, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `snowgate --version` names the commit, as `snowgate_build_info` does.
#[test]
fn the_version_names_the_commit() {
    let (ok, stdout, _) = snowgate(&["--version"], &[]);
    assert!(ok);
    assert!(
        stdout.starts_with("snowgate ") && stdout.contains("(commit "),
        "{stdout}"
    );
}

/// `serve --admin-listen ADDR` opens the operator's listener, as `demo --admin-listen` does.
#[test]
fn serve_takes_the_admin_listener_from_the_command_line() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_snowgate"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", &format!("127.0.0.1:{port}")])
        .args(["--upstream", "http://127.0.0.1:9"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut answer = String::new();
    for _ in 0..600 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(
                b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n",
            );
            answer.clear();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("snowgate_build_info"), "{answer}");
}
