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
