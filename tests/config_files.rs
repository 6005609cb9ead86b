//! Every file in `config/` parses and validates, and `snowgate check` agrees, except
//! `public-endpoint.toml`: it ships with a placeholder admin key, and must be refused with exactly
//! that error until an operator who copies it sets a real key.
#![allow(clippy::unwrap_used)]

use std::process::Command;

/// The key of the one error a shipped file is expected to have, if any.
fn expected_error(path: &std::path::Path) -> Option<&'static str> {
    (path.file_name()? == "public-endpoint.toml").then_some("admin.api_keys[0]")
}

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
        let loaded = snowgate::Config::load(&path);
        match expected_error(&path) {
            None => {
                loaded.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            Some(key) => {
                let e = loaded
                    .err()
                    .unwrap_or_else(|| panic!("{} passed", path.display()));
                assert_eq!(e.key(), Some(key), "{}: {e}", path.display());
                assert!(e.to_string().contains("placeholder"), "{e}");
            }
        }
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
        match expected_error(&path) {
            None => assert!(out.status.success(), "{}: {out:?}", path.display()),
            Some(key) => {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(1), "{}: {out:?}", path.display());
                assert!(err.contains(&format!("`{key}`")), "{err}");
                assert!(err.contains("placeholder"), "{err}");
                // The file itself says how to set a real key.
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.contains("openssl rand"), "{}", path.display());
            }
        }
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
