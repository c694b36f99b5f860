//! The client's address as the service sees it: the socket peer, or the address a trusted
//! proxy says it came from. What intake's rate limits count by, and what the audit trail
//! keeps an HMAC of; never logged.

use std::net::IpAddr;

use axum::http::HeaderMap;

/// The client's address: the socket peer, or with `trusted_hops = n > 0` the n-th entry
/// from the right of `X-Forwarded-For` when it has at least n (each trusted proxy appends
/// the address it received the request from).
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted_hops: usize) -> String {
    if trusted_hops > 0 {
        let entries: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .collect();
        if entries.len() >= trusted_hops {
            let entry = entries[entries.len() - trusted_hops];
            return match entry.parse::<IpAddr>() {
                Ok(address) => source_key(address),
                Err(_) => entry.to_string(),
            };
        }
    }
    source_key(peer)
}

/// What one source is counted under: an IPv4 address, or an IPv6 /64 (the unit one
/// subscriber gets, so that rotating through a prefix's 2^64 addresses is one source).
/// Canonical forms, so `::1` and `0::1` are one client; an IPv4-mapped address is the
/// IPv4 client it maps.
fn source_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let prefix = u128::from(v6) & (u128::MAX << 64);
                format!("{}/64", std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_address_with_trusted_hops() {
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            "203.0.113.7, 198.51.100.2".parse().unwrap(),
        );
        headers.append("x-forwarded-for", "192.0.2.1".parse().unwrap());
        assert_eq!(client_address(peer, &headers, 0), "10.0.0.9");
        assert_eq!(client_address(peer, &headers, 1), "192.0.2.1");
        assert_eq!(client_address(peer, &headers, 2), "198.51.100.2");
        assert_eq!(client_address(peer, &headers, 3), "203.0.113.7");
        assert_eq!(
            client_address(peer, &headers, 4),
            "10.0.0.9",
            "fewer entries than hops: the peer"
        );
        assert_eq!(client_address(peer, &HeaderMap::new(), 1), "10.0.0.9");
    }

    #[test]
    fn ipv6_sources_are_counted_by_their_64() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:fffe".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let none = HeaderMap::new();
        assert_eq!(client_address(one, &none, 0), "2001:db8:1:2::/64");
        assert_eq!(
            client_address(one, &none, 0),
            client_address(same_64, &none, 0)
        );
        assert_ne!(
            client_address(one, &none, 0),
            client_address(other_64, &none, 0)
        );
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_address(mapped, &none, 0), "192.0.2.7");
        let mut forwarded = HeaderMap::new();
        forwarded.append("x-forwarded-for", "2001:db8:9:9::5".parse().unwrap());
        assert_eq!(client_address(one, &forwarded, 1), "2001:db8:9:9::/64");
    }
}
