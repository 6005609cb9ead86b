//! avalanchego's allowed-hosts filter (`api/server/allowed_hosts.go`, default list `localhost`):
//! it guards against DNS rebinding. An empty Host or an IP literal passes; a name passes only if it
//! is `localhost` (any case, any port). Anything else is answered 403 `invalid host specified\n`.

use std::net::IpAddr;

/// Whether a request with this Host (`r.Host`: the authority of an absolute URI or HTTP/2
/// `:authority`, else the Host header; `None` when absent) is let through.
pub fn allowed(host: Option<&[u8]>) -> bool {
    let Some(host) = host else { return true };
    if host.is_empty() {
        return true;
    }
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let name = split_host(host);
    name.parse::<IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost")
}

/// Go's `net.SplitHostPort(h)` host part, or all of `h` when it does not split.
fn split_host(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((inner, port))
                if port.starts_with(':') && !port[1..].contains([':', '[', ']']) =>
            {
                inner
            }
            _ => h,
        };
    }
    match h.rfind(':') {
        Some(i) if !h[..i].contains(':') => &h[..i],
        _ => h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_default_list() {
        for ok in [
            "",
            "localhost",
            "LOCALHOST:9650",
            "localhost:",
            "127.0.0.1",
            "127.0.0.1:9650",
            "[::1]:9650",
            "::1",
            "10.1.2.3:80",
        ] {
            assert!(allowed(Some(ok.as_bytes())), "{ok}");
        }
        assert!(allowed(None));
        for bad in [
            "example.com",
            "example.com:9650",
            "localhost.example",
            "[::1]",
            "01.2.3.4",
            "a:b:c",
        ] {
            assert!(!allowed(Some(bad.as_bytes())), "{bad}");
        }
    }
}
