//! Every file in `config/` parses and validates, and `snowgate check` agrees.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn config_files() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_config_file_is_valid() {
    let files = config_files();
    assert!(files.len() >= 3, "{files:?}");
    for path in files {
        snowgate::Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
fn check_command_accepts_the_examples() {
    for path in config_files() {
        let out = Command::new(env!("CARGO_BIN_EXE_snowgate"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {out:?}", path.display());
    }
}

#[test]
fn check_command_names_the_offending_key() {
    let dir = std::env::temp_dir().join(format!("snowgate-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("[server]\nlistn = \"127.0.0.1:1\"\n", "listn"),
        ("[health]\nmax_lag_blocks = -1\n", "max_lag_blocks"),
        ("[[upstreams]]\nname = \"a\"\nurl = \"http://x:1/ext\"\n", "upstreams[0].url"),
        ("[[upstreams]]\nname = \"a\"\nurl = \"http://x:1\"\n[[upstreams]]\nname = \"a\"\nurl = \"http://y:1\"\n", "upstreams[1].name"),
        ("[admin]\napi_keys = [\"short\"]\n", "admin.api_keys"),
        ("[methods.\"platform.exportKey\"]\naccess = \"public\"\n", "access"),
        ("[upstream]\nmax_attempts = 0\n", "upstream.max_attempts"),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_snowgate"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{text}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
