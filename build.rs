//! Build script: records the git commit snowgate is built from, for `snowgate_build_info`.
//!
//! `SNOWGATE_GIT_COMMIT` is `git rev-parse --short=12 HEAD`, or "unknown" when git is missing or
//! the source is not in a git checkout (a crate tarball). It never fails the build. A value set in
//! the environment wins (a build from an exported tree that knows its commit).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SNOWGATE_GIT_COMMIT");
    let commit = std::env::var("SNOWGATE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SNOWGATE_GIT_COMMIT={commit}");
    // Rerun when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit) and the
    // packed refs. Paths that do not exist are left out: Cargo would rerun the script every time.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = PathBuf::from(path);
            // Relative paths are the package directory's, which is also the script's.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}

/// The trimmed output of `git ARGS` run in the package's directory, or `None` if it fails.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}
