//! Who a client is, for rate limiting: a configured key it presents, or else its IP address.
//!
//! The IP is the socket's peer, unless that peer is a trusted proxy (`[rate_limit]
//! trusted_proxies`): then the address a proxy recorded in one header, chosen by `[rate_limit]
//! client_ip_header` (`X-Forwarded-For` or `Forwarded`, never both), is used. Every line of that
//! header is read as one comma-separated list (RFC 9110 §5.3: haproxy's `option forwardfor` adds
//! its own line after the client's), and the list is walked from the nearest hop outwards past
//! trusted proxies. A hop that cannot be read (non-ASCII, not an address, `for=unknown`) ends the
//! walk at the peer: whatever lies to its left was written by someone no trusted proxy vouches for.
//! Headers from untrusted peers are ignored, so a client cannot pick its own identity. IPv6 clients
//! are grouped by /64, the block a single host usually controls.

use std::net::{IpAddr, Ipv6Addr};

use http::HeaderMap;
use ipnet::IpNet;

// `[rate_limit] client_ip_header` is defined with its section, in the config.
pub use crate::config::ClientIpHeader;

/// The client's address as the rate limiter keys it: `peer`, or when `peer` is a trusted proxy,
/// the nearest untrusted hop of the `which` header in `headers`.
pub fn client_ip(
    peer: IpAddr,
    trusted: &[IpNet],
    which: ClientIpHeader,
    headers: &HeaderMap,
) -> IpAddr {
    let peer = canonical(peer);
    if !is_trusted(peer, trusted) {
        return group(peer);
    }
    // All lines as one list, walked from the end: the nearest proxy's hop is the last element of
    // the last line. Skip our own proxies; the first untrusted address is the client.
    let hops = headers
        .get_all(which.name())
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        // RFC 9110 §5.6.1: empty list elements are allowed and mean nothing.
        .filter(|element| !element.is_empty());
    let mut outermost = peer;
    for element in hops {
        let hop = match which {
            ClientIpHeader::XForwardedFor => parse_hop(element),
            ClientIpHeader::Forwarded => forwarded_for(element).and_then(parse_hop),
        };
        // Unreadable: nothing to its left is vouched for, so the peer answers for the request.
        let Some(hop) = hop else {
            return group(peer);
        };
        let hop = canonical(hop);
        if !is_trusted(hop, trusted) {
            return group(hop);
        }
        outermost = hop;
    }
    // Everything was a trusted proxy: the outermost recorded address, or the peer itself.
    group(outermost)
}

/// The `for=` value of one `Forwarded` element (`for=192.0.2.60;proto=http;by=203.0.113.43`).
fn forwarded_for(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').find_map(|pair| {
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (k, v) = (pair[..eq].trim_ascii(), pair[eq + 1..].trim_ascii());
        k.eq_ignore_ascii_case(b"for").then_some(v)
    })
}

fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|net| net.contains(&ip))
}

/// An IPv4-mapped IPv6 address is the IPv4 address.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// IPv6 addresses are grouped by /64.
pub(crate) fn group(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// The prefix lengths of a client's network (IPv4 /24, IPv6 /48): one notion of a network for
/// the quota past `max_clients` and the shares of hedges and secondings.
pub use crate::call::{NETWORK_V4, NETWORK_V6};

/// The network `ip` (a client's address as [`client_ip`] gives it) belongs to: its IPv4 /24 or
/// IPv6 /48. Past `max_clients` tracked addresses, a new address shares its network's quota, so
/// that many addresses of one network cannot spend the quota of clients of another.
pub fn network(ip: IpAddr) -> IpNet {
    let len = match ip {
        IpAddr::V4(_) => NETWORK_V4,
        IpAddr::V6(_) => NETWORK_V6,
    };
    // The prefix lengths are within each family's bounds: `new` cannot fail.
    IpNet::new(ip, len).map_or(IpNet::from(ip), |net| net.trunc())
}

/// One hop of `X-Forwarded-For` or a `for=` value of `Forwarded`: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `"[2001:db8::1]:4711"`. Anything else (non-ASCII, `unknown`, `_hidden`) is
/// `None`.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let hop = std::str::from_utf8(hop).ok()?;
    let hop = hop.strip_prefix('"').unwrap_or(hop);
    let hop = hop.strip_suffix('"').unwrap_or(hop);
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (host, port) = rest.split_once(']')?;
        return (port.is_empty() || is_port(port.strip_prefix(':')?))
            .then(|| host.parse().ok())
            .flatten();
    }
    let (host, port) = hop.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const XFF: ClientIpHeader = ClientIpHeader::XForwardedFor;
    const FWD: ClientIpHeader = ClientIpHeader::Forwarded;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A header map with these lines, in order (values may be any bytes).
    fn lines(list: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in list {
            h.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        h
    }

    fn xff(value: &str) -> HeaderMap {
        lines(&[("x-forwarded-for", value.as_bytes())])
    }

    #[test]
    fn untrusted_peers_cannot_choose_their_address() {
        let t = nets(&["10.0.0.0/8"]);
        let h = lines(&[
            ("x-forwarded-for", b"1.1.1.1"),
            ("forwarded", b"for=2.2.2.2"),
        ]);
        assert_eq!(client_ip(ip("203.0.113.9"), &t, XFF, &h), ip("203.0.113.9"));
        assert_eq!(
            client_ip(ip("203.0.113.9"), &[], FWD, &h),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let t = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        let h = xff("198.51.100.7, 10.0.0.2");
        assert_eq!(client_ip(peer, &t, XFF, &h), ip("198.51.100.7"));
        // A client-supplied left part cannot hide the real client.
        let h = xff("1.1.1.1, 198.51.100.7");
        assert_eq!(client_ip(peer, &t, XFF, &h), ip("198.51.100.7"));
        assert_eq!(client_ip(peer, &t, XFF, &HeaderMap::new()), peer);
        // Only proxies recorded: the outermost of them.
        let h = xff("10.0.0.3, 10.0.0.2");
        assert_eq!(client_ip(peer, &t, XFF, &h), ip("10.0.0.3"));
    }

    #[test]
    fn every_line_of_the_header_is_one_list() {
        // haproxy's `option forwardfor` appends its own line after the client's forged ones.
        let t = nets(&["10.0.0.0/8"]);
        let h = lines(&[
            ("x-forwarded-for", b"1.1.1.1"),
            ("x-forwarded-for", b"2.2.2.2, 3.3.3.3"),
            ("x-forwarded-for", b"198.51.100.7"),
        ]);
        assert_eq!(client_ip(ip("10.0.0.1"), &t, XFF, &h), ip("198.51.100.7"));
        // Empty elements and lines mean nothing.
        let h = lines(&[
            ("x-forwarded-for", b"1.1.1.1,,"),
            ("x-forwarded-for", b" , 198.51.100.7 ,"),
            ("x-forwarded-for", b""),
        ]);
        assert_eq!(client_ip(ip("10.0.0.1"), &t, XFF, &h), ip("198.51.100.7"));
    }

    #[test]
    fn an_unreadable_hop_from_a_trusted_peer_is_the_peer() {
        let t = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        for bad in [
            &b"\xc3\xa9t\xc3\xa9"[..],
            b"garbage",
            b"1.1.1.1, unknown",
            b"1.1.1.1:99999",
            b"1.1.1.1, 300.1.1.1",
        ] {
            let mut h = lines(&[("x-forwarded-for", bad)]);
            // A client-supplied Forwarded is never a fallback.
            h.append("forwarded", HeaderValue::from_static("for=192.0.2.1"));
            assert_eq!(client_ip(peer, &t, XFF, &h), peer, "{bad:?}");
        }
        // Non-ASCII left of the nearest readable hop does not matter: that hop is the client.
        let h = lines(&[("x-forwarded-for", b"\xc3\xa9, 198.51.100.7")]);
        assert_eq!(client_ip(peer, &t, XFF, &h), ip("198.51.100.7"));
        // Past a trusted hop, garbage still stops the walk at the peer.
        let h = xff("1.1.1.1, nonsense, 10.0.0.2");
        assert_eq!(client_ip(peer, &t, XFF, &h), peer);
    }

    #[test]
    fn exactly_one_header_is_read() {
        let t = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        let only_fwd = lines(&[("forwarded", b"for=192.0.2.60")]);
        assert_eq!(client_ip(peer, &t, XFF, &only_fwd), peer);
        let only_xff = xff("192.0.2.60");
        assert_eq!(client_ip(peer, &t, FWD, &only_xff), peer);
    }

    #[test]
    fn forwarded_header() {
        let t = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        let h = lines(&[(
            "forwarded",
            br#"for="[2001:db8::1]:4711";proto=http, for=10.0.0.3"#,
        )]);
        assert_eq!(client_ip(peer, &t, FWD, &h), ip("2001:db8::"));
        let h = lines(&[("forwarded", b"for=192.0.2.60;by=10.0.0.1")]);
        assert_eq!(client_ip(peer, &t, FWD, &h), ip("192.0.2.60"));
        let h = lines(&[
            ("forwarded", b"for=1.1.1.1"),
            ("forwarded", b"For=192.0.2.60"),
        ]);
        assert_eq!(client_ip(peer, &t, FWD, &h), ip("192.0.2.60"));
        // An element without a readable `for=` (obfuscated, unknown, missing) is the peer.
        for bad in [
            "for=1.1.1.1, for=unknown",
            "for=1.1.1.1, for=_hidden",
            "for=1.1.1.1, proto=https",
        ] {
            let h = lines(&[("forwarded", bad.as_bytes())]);
            assert_eq!(client_ip(peer, &t, FWD, &h), peer, "{bad}");
        }
    }

    #[test]
    fn ipv6_is_grouped_by_64_and_mapped_v4_is_v4() {
        let none = HeaderMap::new();
        assert_eq!(
            client_ip(ip("2001:db8:1:2:3:4:5:6"), &[], XFF, &none),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            client_ip(ip("::ffff:192.0.2.1"), &[], XFF, &none),
            ip("192.0.2.1")
        );
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(
                ip("10.0.0.1"),
                &t,
                XFF,
                &xff("[2001:db8::5]:80, ::ffff:10.0.0.2")
            ),
            ip("2001:db8::")
        );
    }

    #[test]
    fn the_header_names_parse_from_config() {
        #[derive(serde::Deserialize)]
        struct T {
            h: ClientIpHeader,
        }
        let t: T = toml::from_str("h = \"x-forwarded-for\"").unwrap();
        assert_eq!(t.h, XFF);
        let t: T = toml::from_str("h = \"forwarded\"").unwrap();
        assert_eq!(t.h, FWD);
        assert!(toml::from_str::<T>("h = \"x-real-ip\"").is_err());
    }

    #[test]
    fn a_network_is_an_ipv4_slash_24_or_an_ipv6_slash_48() {
        let net = |s: &str| network(s.parse().unwrap()).to_string();
        assert_eq!(net("198.51.100.77"), "198.51.100.0/24");
        assert_eq!(net("198.51.100.0"), "198.51.100.0/24");
        assert_eq!(net("2001:db8:1:2::"), "2001:db8:1::/48");
        assert_ne!(net("198.51.100.1"), net("198.51.101.1"));
    }
}
