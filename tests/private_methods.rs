//! Node-specific and keystore methods answer for one node or carry a password: a config that gives
//! one of them a cache class other than `never` is refused, naming the key, so such an answer can
//! never be served to another caller from the cache.
#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn a_cache_class_for_a_node_specific_or_keystore_method_is_a_config_error() {
    let dir = std::env::temp_dir().join(format!("snowgate-private-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("info.getNodeID", "cache = \"immutable\""),
        ("info.getNodeIP", "access = \"public\"\ncache = \"network\""),
        ("info.getVMs", "cache = \"volatile\""),
        ("platform.exportKey", "cache = \"head\""),
        ("platform.listAddresses", "cache = \"immutable\""),
        ("platform.getHeight", "access = \"node_specific\""),
    ];
    let check = |text: &str, i: usize| {
        let path = dir.join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_snowgate"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    for (i, (name, table)) in cases.iter().enumerate() {
        let text = format!("[methods.\"{name}\"]\n{table}\n");
        let out = check(&text, i);
        assert!(!out.status.success(), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("methods.\"{name}\".cache")) && err.contains("never"),
            "{text}: {err}"
        );
    }
    let out = check(
        "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:9651\"\n\
         [methods.\"info.getNodeID\"]\ncache = \"never\"\n",
        99,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
