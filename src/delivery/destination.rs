//! Which webhook destinations are allowed (SPEC section 6.6). The same rules serve the
//! management API (checking a URL when it is configured) and the worker's HTTP client
//! (checking every address a name resolves to when the request is made).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

pub const MAX_URL_LENGTH: usize = 2048;

/// Why a webhook URL is refused. The text is for people; the API reports
/// `invalid_webhook_url` with the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("the URL is longer than 2048 characters")]
    TooLong,
    #[error("the URL cannot be parsed")]
    Unparsable,
    #[error("the URL must use http or https")]
    Scheme,
    #[error("the URL has no host")]
    NoHost,
    #[error("the URL names a loopback, private, link-local or otherwise internal address")]
    InternalAddress,
}

/// Checks a URL as configured. With `allow_private` (development only) internal
/// addresses pass; the form checks (scheme, host, length) always apply.
pub fn validate_webhook_url(raw: &str, allow_private: bool) -> Result<Url, DestinationError> {
    if raw.chars().count() > MAX_URL_LENGTH {
        return Err(DestinationError::TooLong);
    }
    // The WHATWG parser normalises every IPv4 spelling (`127.1`, `2130706433`, `0x7f.1`)
    // to the dotted form, so the checks below see the address that would be used.
    let url = Url::parse(raw.trim()).map_err(|_| DestinationError::Unparsable)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(DestinationError::Scheme);
    }
    let host = url.host().ok_or(DestinationError::NoHost)?;
    if !allow_private && host_is_internal(&host) {
        return Err(DestinationError::InternalAddress);
    }
    Ok(url)
}

/// Whether a host names an internal destination by itself: an internal address literal,
/// or `localhost` and its subdomains. Other names are judged by what they resolve to.
pub fn host_is_internal<S: AsRef<str>>(host: &Host<S>) -> bool {
    match host {
        Host::Domain(name) => {
            let name = name.as_ref().trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        Host::Ipv4(address) => is_internal_address(IpAddr::V4(*address)),
        Host::Ipv6(address) => is_internal_address(IpAddr::V6(*address)),
    }
}

/// Loopback, private, link-local, multicast, reserved, unspecified, CGNAT, documentation
/// and benchmarking ranges, and IPv6 forms that embed an internal IPv4 address.
pub fn is_internal_address(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn in_v4(address: Ipv4Addr, network: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(address) & mask == u32::from(Ipv4Addr::from(network)) & mask
}

fn is_internal_v4(address: Ipv4Addr) -> bool {
    const RANGES: &[([u8; 4], u32)] = &[
        ([0, 0, 0, 0], 8),       // "this network", unspecified
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // carrier-grade NAT
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local, cloud metadata
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // documentation
        ([203, 0, 113, 0], 24),  // documentation
        ([224, 0, 0, 0], 4),     // multicast
        ([240, 0, 0, 0], 4),     // reserved, broadcast
    ];
    RANGES
        .iter()
        .any(|(network, prefix)| in_v4(address, *network, *prefix))
}

fn is_internal_v6(address: Ipv6Addr) -> bool {
    let segments = address.segments();
    if address.is_unspecified() || address.is_loopback() {
        return true;
    }
    // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d): judge the IPv4 address.
    if let Some(v4) = address.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    if segments[..6] == [0, 0, 0, 0, 0, 0] {
        return is_internal_v4(Ipv4Addr::from(
            ((segments[6] as u32) << 16) | segments[7] as u32,
        ));
    }
    // NAT64 (64:ff9b::/96) embeds an IPv4 address in its last 32 bits.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_internal_v4(Ipv4Addr::from(
            ((segments[6] as u32) << 16) | segments[7] as u32,
        ));
    }
    // 6to4 (2002::/16) embeds one in bits 16..48.
    if segments[0] == 0x2002 {
        return is_internal_v4(Ipv4Addr::from(
            ((segments[1] as u32) << 16) | segments[2] as u32,
        ));
    }
    (segments[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (segments[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
        || (segments[0] & 0xff00) == 0xff00 // multicast ff00::/8
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation 2001:db8::/32
        || (segments[..4] == [0x0100, 0, 0, 0]) // discard-only 100::/64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_internal_destination_is_refused() {
        for url in [
            "http://localhost/hook",
            "http://LOCALHOST./hook",
            "http://api.localhost/hook",
            "http://127.0.0.1/hook",
            "http://127.1/hook",
            "http://2130706433/hook",
            "http://0x7f.1/hook",
            "http://0177.0.0.1/hook",
            "http://[::1]/hook",
            "http://[::ffff:127.0.0.1]/hook",
            "http://[::127.0.0.1]/hook",
            "http://10.1.2.3/hook",
            "http://172.16.0.1/hook",
            "http://172.31.255.255/hook",
            "http://192.168.1.1/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://0.0.0.0/hook",
            "http://100.64.0.1/hook",
            "http://100.127.255.255/hook",
            "http://[fc00::1]/hook",
            "http://[fd12:3456::1]/hook",
            "http://[fe80::1]/hook",
            "http://224.0.0.1/hook",
            "http://[ff02::1]/hook",
            "http://255.255.255.255/hook",
            "http://240.0.0.1/hook",
            "http://[64:ff9b::7f00:1]/hook",
            "http://[2002:7f00:1::]/hook",
        ] {
            assert_eq!(
                validate_webhook_url(url, false),
                Err(DestinationError::InternalAddress),
                "{url}"
            );
            assert!(
                validate_webhook_url(url, true).is_ok(),
                "{url} with the development flag"
            );
        }
    }

    #[test]
    fn public_destinations_pass() {
        for url in [
            "https://example.com/hook",
            "http://93.184.216.34:8080/x?y=z",
            "https://[2606:2800:220:1:248:1893:25c8:1946]/hook",
            "http://172.32.0.1/hook",
            "http://100.128.0.1/hook",
            "https://[::ffff:93.184.216.34]/hook",
            "https://localhost.example.com/hook",
        ] {
            assert!(validate_webhook_url(url, false).is_ok(), "{url}");
        }
    }

    #[test]
    fn form_rules() {
        assert_eq!(
            validate_webhook_url("ftp://example.com/x", false),
            Err(DestinationError::Scheme)
        );
        assert_eq!(
            validate_webhook_url("mailto:a@example.com", false),
            Err(DestinationError::Scheme)
        );
        assert_eq!(
            validate_webhook_url("not a url", false),
            Err(DestinationError::Unparsable)
        );
        assert_eq!(
            validate_webhook_url("http://", true),
            Err(DestinationError::Unparsable)
        );
        let long = format!("https://example.com/{}", "a".repeat(2048));
        assert_eq!(
            validate_webhook_url(&long, false),
            Err(DestinationError::TooLong)
        );
        let exact = format!("https://example.com/{}", "a".repeat(2048 - 20));
        assert_eq!(exact.len(), 2048);
        assert!(validate_webhook_url(&exact, false).is_ok());
    }
}
