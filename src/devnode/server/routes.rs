//! gorilla/mux as avalanchego configures it: exact, case-sensitive routes on the decoded path, no
//! trailing-slash tolerance, and a 301 to the cleaned path for paths like `//ext/bc/P` or
//! `/ext/bc/X/../P` (mux's `cleanPath`, which is Go's `path.Clean` keeping a trailing slash).

use std::borrow::Cow;

pub use crate::jsonrpc::http::{PROPOSERVM_PATHS, P_CHAIN_PATHS};

/// Which health checks a health route reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthKind {
    /// Every check (`/ext/health`, `/ext/health/health`, `health.health`).
    Health,
    /// Checks that gate traffic (`readiness`).
    Readiness,
    /// Checks that the process is alive (`liveness`).
    Liveness,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/ext/info`: JSON-RPC service `info`.
    Info,
    /// One of [`P_CHAIN_PATHS`]: JSON-RPC service `platform`, behind the bootstrapping gate.
    Platform,
    /// One of [`PROPOSERVM_PATHS`] (`/ext/bc/P/proposervm` and the same under the P-chain's
    /// four aliases: a node's router registers each endpoint of a chain under every alias):
    /// JSON-RPC service `proposervm` (v1.14.0+), behind the bootstrapping gate.
    ProposerVm,
    /// `/ext/health`: GET answers the health report, any other method is JSON-RPC `health.*`.
    Health,
    /// `/ext/health/{health,readiness,liveness}`: the report for any method.
    HealthReport(HealthKind),
}

/// The route of a decoded, clean path.
pub fn route(path: &[u8]) -> Option<Route> {
    Some(match path {
        b"/ext/info" => Route::Info,
        p if PROPOSERVM_PATHS.iter().any(|r| r.as_bytes() == p) => Route::ProposerVm,
        b"/ext/health" => Route::Health,
        b"/ext/health/health" => Route::HealthReport(HealthKind::Health),
        b"/ext/health/readiness" => Route::HealthReport(HealthKind::Readiness),
        b"/ext/health/liveness" => Route::HealthReport(HealthKind::Liveness),
        p if P_CHAIN_PATHS.iter().any(|r| r.as_bytes() == p) => Route::Platform,
        _ => return None,
    })
}

/// What the router makes of a request path (as sent, still percent-encoded).
#[derive(Debug, PartialEq, Eq)]
pub enum Routing {
    /// A clean path: its route, if any.
    Clean(Option<Route>),
    /// Not clean: redirect (301) to this path, re-encoded for the `Location` header.
    Redirect(String),
    /// Not a valid escaped path (Go's server answers 400 before any handler).
    BadRequest,
}

/// Decodes `raw` and checks it is clean, the way Go's server and mux do.
pub fn resolve(raw: &str) -> Routing {
    // Hot path: a route's own path is clean and has nothing to decode.
    if let Some(found) = route(raw.as_bytes()) {
        return Routing::Clean(Some(found));
    }
    let decoded: Cow<'_, [u8]> = if raw.contains('%') {
        match percent_decode(raw.as_bytes()) {
            Some(d) => Cow::Owned(d),
            None => return Routing::BadRequest,
        }
    } else {
        Cow::Borrowed(raw.as_bytes())
    };
    let cleaned = clean_path(&decoded);
    if cleaned == *decoded {
        Routing::Clean(route(&decoded))
    } else {
        Routing::Redirect(escape_path(&cleaned))
    }
}

fn percent_decode(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = hex(*raw.get(i + 1)?)?;
            let lo = hex(*raw.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// mux's `cleanPath`: rooted `path.Clean`, with a trailing slash put back (except for `/`).
pub fn clean_path(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b"/".to_vec();
    }
    let mut segments: Vec<&[u8]> = Vec::new();
    for seg in p.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = Vec::with_capacity(p.len() + 1);
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    // An empty result is the root; otherwise a trailing slash is kept.
    if out.is_empty() || p.ends_with(b"/") {
        out.push(b'/');
    }
    out
}

/// Go's `url.URL.EscapedPath` for a path it has to re-encode (`shouldEscape(c, encodePath)`).
fn escape_path(p: &[u8]) -> String {
    let mut out = String::with_capacity(p.len());
    for &c in p {
        if c.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&c) {
            out.push(char::from(c));
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_paths_pass_through() {
        assert_eq!(resolve("/ext/bc/P"), Routing::Clean(Some(Route::Platform)));
        assert_eq!(resolve("/ext/bc/P/"), Routing::Clean(None));
        assert_eq!(route(b"/ext/bc/P/"), None);
        assert_eq!(route(b"/ext/bc/p"), None);
        assert_eq!(route(b"/ext/platform"), Some(Route::Platform));
        assert_eq!(route(b"/ext/bc/P/proposervm"), Some(Route::ProposerVm));
        assert_eq!(route(b"/ext/bc/P/proposervm/"), None);
    }

    #[test]
    fn unclean_paths_redirect() {
        assert_eq!(resolve("//ext/bc/P"), Routing::Redirect("/ext/bc/P".into()));
        assert_eq!(
            resolve("/ext/bc/X/../P"),
            Routing::Redirect("/ext/bc/P".into())
        );
        assert_eq!(
            resolve("/ext/./info"),
            Routing::Redirect("/ext/info".into())
        );
        assert_eq!(
            resolve("/ext//bc/P/"),
            Routing::Redirect("/ext/bc/P/".into())
        );
        assert_eq!(resolve("/.."), Routing::Redirect("/".into()));
    }

    #[test]
    fn escapes_decode_before_routing() {
        assert_eq!(
            resolve("/ext/bc/%50"),
            Routing::Clean(Some(Route::Platform))
        );
        assert_eq!(resolve("/ext/%zz"), Routing::BadRequest);
        assert_eq!(
            resolve("/a%20b/../c%20d"),
            Routing::Redirect("/c%20d".into())
        );
    }
}
