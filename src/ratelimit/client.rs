//! Who a client is, for rate limiting: a configured key it presents, or else its IP address.
//!
//! The IP is the socket's peer, unless that peer is a trusted proxy (`[rate_limit]
//! trusted_proxies`): then the address a proxy recorded in `X-Forwarded-For` (or `Forwarded`) is
//! used, walking from the nearest hop outwards past trusted proxies. Headers from untrusted peers are
//! ignored, so a client cannot pick its own identity. IPv6 clients are grouped by /64, the block a
//! single host usually controls.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

/// The identity a quota is kept for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientId {
    /// Index of a key in `[[rate_limit.keys]]`.
    Key(usize),
    /// An IPv4 address or an IPv6 /64.
    Ip(IpAddr),
}

/// The client's address as the rate limiter keys it.
pub fn client_ip(
    peer: IpAddr,
    trusted: &[IpNet],
    forwarded_for: Option<&str>,
    forwarded: Option<&str>,
) -> IpAddr {
    let peer = canonical(peer);
    if !is_trusted(peer, trusted) {
        return group(peer);
    }
    let hops: Vec<IpAddr> = match (forwarded_for, forwarded) {
        (Some(xff), _) => xff.split(',').filter_map(|h| parse_hop(h.trim())).collect(),
        (None, Some(fwd)) => fwd
            .split(',')
            .filter_map(|element| {
                element.split(';').find_map(|pair| {
                    let (k, v) = pair.trim().split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| parse_hop(v.trim()))
                        .flatten()
                })
            })
            .collect(),
        (None, None) => Vec::new(),
    };
    // Nearest hop last: skip our own proxies, the first untrusted address is the client.
    for hop in hops.iter().rev() {
        let hop = canonical(*hop);
        if !is_trusted(hop, trusted) {
            return group(hop);
        }
    }
    // Everything was a trusted proxy: the outermost recorded address, or the peer itself.
    group(hops.first().copied().map(canonical).unwrap_or(peer))
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

/// One hop of `X-Forwarded-For` or a `for=` value of `Forwarded`: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `"[2001:db8::1]:4711"`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim_matches('"');
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let (host, _port) = hop.rsplit_once(':')?;
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peers_cannot_choose_their_address() {
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(ip("203.0.113.9"), &t, Some("1.1.1.1"), None),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_ip(ip("203.0.113.9"), &[], Some("1.1.1.1"), Some("for=2.2.2.2")),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &t, Some("198.51.100.7, 10.0.0.2"), None),
            ip("198.51.100.7")
        );
        // A client-supplied left part cannot hide the real client.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &t, Some("1.1.1.1, 198.51.100.7"), None),
            ip("198.51.100.7")
        );
        assert_eq!(client_ip(ip("10.0.0.1"), &t, None, None), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_header() {
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(
                ip("10.0.0.1"),
                &t,
                None,
                Some(r#"for="[2001:db8::1]:4711";proto=http, for=10.0.0.3"#)
            ),
            ip("2001:db8::")
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), &t, None, Some("for=192.0.2.60;by=10.0.0.1")),
            ip("192.0.2.60")
        );
    }

    #[test]
    fn ipv6_is_grouped_by_64_and_mapped_v4_is_v4() {
        assert_eq!(
            client_ip(ip("2001:db8:1:2:3:4:5:6"), &[], None, None),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            client_ip(ip("::ffff:192.0.2.1"), &[], None, None),
            ip("192.0.2.1")
        );
    }
}
