//! Which webhook destinations are allowed (docs/delivery.md, "Webhook URLs and internal addresses"). The same rules serve the
//! management API (checking a URL when it is configured) and the worker's HTTP client
//! (checking every address a name resolves to when the request is made).
//!
//! And which submitted address an email may go to or name (`plain_address`,
//! docs/delivery.md, "Autoresponders").

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
    if !written_with_authority(raw.trim()) {
        return Err(DestinationError::NoHost);
    }
    let host = url.host().ok_or(DestinationError::NoHost)?;
    if !allow_private && host_is_internal(&host) {
        return Err(DestinationError::InternalAddress);
    }
    Ok(url)
}

/// Whether `raw` is written as `scheme://authority…` with a non-empty authority and
/// nothing the URL parser would silently repair: the WHATWG parser reads `https:///hook`
/// and `https:/hook` as the host `hook`, turns `\\` into `/` and drops tabs and newlines,
/// so a URL the operator did not write would be used. Such input is refused instead.
pub fn written_with_authority(raw: &str) -> bool {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority_ok = rest
        .chars()
        .next()
        .is_some_and(|c| !matches!(c, '/' | '?' | '#' | '@' | ':'));
    let clean = !raw
        .chars()
        .any(|c| c == '\\' || c.is_control() || c.is_whitespace());
    scheme_ok && authority_ok && clean
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

/// Whether a destination address is refused: for IPv4 every special-purpose range
/// (loopback, private, link-local, multicast, reserved, unspecified, CGNAT, documentation,
/// benchmarking, protocol assignments); for IPv6 everything outside global unicast
/// (2000::/3) and the special-purpose blocks inside it, after decoding the forms that
/// carry an IPv4 address (mapped, compatible, NAT64 64:ff9b::/96, 6to4), which are judged
/// by that address.
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
        ([192, 31, 196, 0], 24), // AS112-v4
        ([192, 52, 193, 0], 24), // AMT
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([192, 175, 48, 0], 24), // direct delegation AS112
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
    if let Some(v4) = embedded_v4(address) {
        return is_internal_v4(v4);
    }
    // Only global unicast is a destination…
    if segments[0] & 0xe000 != 0x2000 {
        return true;
    }
    // …less its special-purpose blocks: IETF protocol assignments 2001::/23 (Teredo
    // 2001::/32, which embeds an address we cannot judge, among them), documentation
    // 2001:db8::/32 and 3fff::/20.
    (segments[0] == 0x2001 && (segments[1] < 0x0200 || segments[1] == 0x0db8))
        || (segments[0] & 0xfff0) == 0x3ff0
}

/// The IPv4 address an IPv6 address carries, in the forms that route to it: mapped
/// (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64 well-known prefix (64:ff9b::/96) and
/// 6to4 (2002:aabb:ccdd::/48).
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = address.segments();
    let low = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if let Some(v4) = address.to_ipv4_mapped() {
        return Some(v4);
    }
    match segments {
        // `::` and `::1` are IPv6's own unspecified and loopback addresses, judged as such
        // (refused: outside global unicast).
        [0, 0, 0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0, 0, 0, 1] => None,
        [0, 0, 0, 0, 0, 0, high, low_part] => Some(low(high, low_part)),
        [0x64, 0xff9b, 0, 0, 0, 0, high, low_part] => Some(low(high, low_part)),
        [0x2002, high, low_part, ..] => Some(low(high, low_part)),
        _ => None,
    }
}

/// The longest address an email goes to: RFC 5321's 256 octets of a path, less its angle
/// brackets.
pub const MAX_ADDRESS_LENGTH: usize = 254;

/// The longest local part (RFC 5321).
const MAX_LOCAL_PART_LENGTH: usize = 64;

/// The longest domain label (RFC 1035).
const MAX_LABEL_LENGTH: usize = 63;

/// A submitted address an email may be sent to (an autoresponder's confirmation) or name
/// (a notification's Reply-To): `raw` trimmed of spaces when it is a strict addr-spec,
/// `None` for anything else (docs/delivery.md, "Autoresponders"). At most 254 characters;
/// a local part of dot-atom characters (ASCII letters, digits and ``!#$%&'*+-/=?^_`{|}~``
/// in atoms joined by single dots, at most 64 characters); a domain of at least two labels
/// of letters, digits and inner hyphens, 1–63 characters each (an internationalised domain
/// in its ASCII `xn--` form). No quotes, comments, domain literals, whitespace, control or
/// non-ASCII characters; and never `=?` or `?=`, which open and close an RFC 2047 encoded
/// word: a mail server that decodes one in `To` or `Reply-To` could read a line break and
/// a command in it. The intake statement applies the same rule (`submitted_address`,
/// migration `autoresponder_addresses`), so what it queues the worker sends.
pub fn plain_address(raw: &str) -> Option<&str> {
    let address = raw.trim_matches(' ');
    if address.len() > MAX_ADDRESS_LENGTH || address.contains("=?") || address.contains("?=") {
        return None;
    }
    let (local, domain) = address.split_once('@')?;
    let dot_atom = local.len() <= MAX_LOCAL_PART_LENGTH
        && local
            .split('.')
            .all(|atom| !atom.is_empty() && atom.bytes().all(is_atext));
    let ldh = domain.split('.').count() >= 2
        && domain.split('.').all(|label| {
            (1..=MAX_LABEL_LENGTH).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    (dot_atom && ldh).then_some(address)
}

/// RFC 5322 `atext`: what an atom of a dot-atom is made of.
fn is_atext(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_addresses_only() {
        for plain in [
            "visitor@example.org",
            " Visitor.Name+forms@example.org ",
            "o'brien@mail.example.co.uk",
            "a@xn--bcher-kva.example",
            "x!#$%&'*+-/=^_`{|}~?@example.org",
        ] {
            assert_eq!(plain_address(plain), Some(plain.trim()), "{plain:?}");
        }
        let long_local = format!("{}@example.org", "a".repeat(65));
        let long_label = format!("a@{}.org", "b".repeat(64));
        let labels: Vec<String> = std::iter::repeat_n("b".repeat(60), 5).collect();
        let long = format!("a@{}.org", labels.join("."));
        for hostile in [
            "=?utf-8?q?victim=0D=0ARCPT=20TO=3Ax?=@example.org",
            "=?utf-8?b?dmljdGlt?=@example.org",
            "victim=?x@example.org",
            "victim?=@example.org",
            "\"victim\"@example.org",
            "victim(comment)@example.org",
            "victim@[127.0.0.1]",
            "victim@localhost",
            ".victim@example.org",
            "victim.@example.org",
            "vic..tim@example.org",
            "victim@-example.org",
            "victim@example-.org",
            "victim@example..org",
            "victim@example.org.",
            "victim@exa_mple.org",
            "victim@@example.org",
            "victim@example.org@example.org",
            "vic tim@example.org",
            "victim\t@example.org",
            "victim@example.org\r\nBcc: x@example.org",
            "vïctim@example.org",
            "victim@bücher.example",
            "Victim <victim@example.org>",
            "a@x.org, b@y.org",
            "@example.org",
            "victim@",
            "",
            &long_local,
            &long_label,
            &long,
        ] {
            assert_eq!(plain_address(hostile), None, "{hostile:?}");
        }
    }

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
            // NAT64 local use, Teredo, IPv4-translated, ORCHID, documentation, unique
            // local and other space outside global unicast.
            "http://[64:ff9b:1::5db8:d822]/hook",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",
            "http://[::ffff:0:5db8:d822]/hook",
            "http://[2001:10::1]/hook",
            "http://[2001:db8::1]/hook",
            "http://[3fff::1]/hook",
            "http://[4000::1]/hook",
            "http://[100::1]/hook",
            "http://192.31.196.1/hook",
            "http://192.175.48.1/hook",
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
        // What the parser would repair is refused: an empty authority, a single slash,
        // backslashes, tabs and newlines.
        for repaired in [
            "https:///hook",
            "https:/hook",
            "https:hook",
            "https://\\example.com/hook",
            "https://example.com\\hook",
            "https://exa\tmple.com/hook",
            "https://example.com/ho\nok",
            "https://@example.com/hook",
        ] {
            assert_eq!(
                validate_webhook_url(repaired, true),
                Err(DestinationError::NoHost),
                "{repaired:?}"
            );
        }
        assert_eq!(
            validate_webhook_url("https://:443/hook", true),
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
