//! Classification of addresses a source download must not reach.
//!
//! Sources come from untrusted symbolication requests, so without this a request could
//! make the server fetch from its own network (cloud metadata endpoints, admin APIs).

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::{Ipv4Net, Ipv6Net};
use url::{Host, Url};

use super::FetchConfig;
use crate::error::{CacheError, CacheResult};

pub(super) const RESERVED_ADDRESS_MSG: &str = "refusing to connect to a reserved IP address";

/// Why a connection was refused; surfaces as the root cause of a client's error.
#[derive(Debug)]
pub(super) struct ReservedAddress;

impl fmt::Display for ReservedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(RESERVED_ADDRESS_MSG)
    }
}

impl StdError for ReservedAddress {}

/// Whether downloads may reach reserved addresses (`connect_to_reserved_ips`): decided
/// once, when the downloader is built, and applied by each backend where it connects,
/// since only there are a redirect's next hop and a name's addresses known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReservedIps {
    Refuse,
    Allow,
}

impl ReservedIps {
    pub fn from_config(config: &FetchConfig) -> Self {
        if config.connect_to_reserved_ips {
            ReservedIps::Allow
        } else {
            ReservedIps::Refuse
        }
    }

    pub fn refused(self) -> bool {
        self == ReservedIps::Refuse
    }

    /// Fails for a URL whose host is a reserved IP literal: clients connect to literals
    /// without asking the filtering resolver.
    pub fn check_literal(self, url: &Url) -> CacheResult<()> {
        if self.refused() && url_has_reserved_ip_host(url) {
            return Err(CacheError::DownloadError(RESERVED_ADDRESS_MSG.to_owned()));
        }
        Ok(())
    }
}

/// Resolves `host` with the system resolver and drops reserved addresses, so a public name
/// pointing at an internal address (or rebinding to one) cannot be used to reach it. Every
/// HTTP client that talks to request-supplied hosts resolves through this.
pub(super) async fn resolve_public(
    host: &str,
) -> Result<Vec<SocketAddr>, Box<dyn StdError + Send + Sync>> {
    let resolved = tokio::net::lookup_host((host, 0)).await?;
    let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
        resolved.partition(|addr| !is_reserved_ip(addr.ip()));
    if !refused.is_empty() {
        tracing::debug!(%host, ?refused, "dropped reserved addresses from resolution");
    }
    if allowed.is_empty() {
        return Err(Box::new(ReservedAddress));
    }
    Ok(allowed)
}

/// Resolves `url`'s host and fails unless every address it has is public. For clients
/// that resolve names themselves and take no resolver (the GCS crate's): checked just
/// before each request, it leaves open only a name that changes its answer between this
/// lookup and the client's own (DNS rebinding), which the filtering resolver closes.
pub(super) async fn ensure_public_url(url: &Url) -> Result<(), Box<dyn StdError + Send + Sync>> {
    let host = match url.host() {
        Some(Host::Domain(name)) => name,
        Some(Host::Ipv4(_) | Host::Ipv6(_)) if url_has_reserved_ip_host(url) => {
            return Err(Box::new(ReservedAddress));
        }
        Some(Host::Ipv4(_) | Host::Ipv6(_)) => return Ok(()),
        None => return Err("the URL has no host".into()),
    };
    let port = url.port_or_known_default().unwrap_or(0);
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    if resolved.is_empty() {
        return Err(format!("{host} has no addresses").into());
    }
    if resolved.iter().any(|addr| is_reserved_ip(addr.ip())) {
        tracing::debug!(%host, ?resolved, "refused a name with reserved addresses");
        return Err(Box::new(ReservedAddress));
    }
    Ok(())
}

/// IPv4 blocks that are not reachable public unicast. Upstream's list, plus TEST-NET-3,
/// and the whole of 192.0.0.0/24 rather than its /29: the few anycast services in that
/// block are never symbol servers.
const RESERVED_V4: &[Ipv4Net] = &[
    v4(0, 0, 0, 0, 8),       // "this network", includes unspecified
    v4(10, 0, 0, 0, 8),      // private
    v4(100, 64, 0, 0, 10),   // carrier-grade NAT
    v4(127, 0, 0, 0, 8),     // loopback
    v4(169, 254, 0, 0, 16),  // link-local, cloud metadata
    v4(172, 16, 0, 0, 12),   // private
    v4(192, 0, 0, 0, 24),    // IETF protocol assignments
    v4(192, 0, 2, 0, 24),    // TEST-NET-1
    v4(192, 88, 99, 0, 24),  // 6to4 relay anycast
    v4(192, 168, 0, 0, 16),  // private
    v4(198, 18, 0, 0, 15),   // benchmarking
    v4(198, 51, 100, 0, 24), // TEST-NET-2
    v4(203, 0, 113, 0, 24),  // TEST-NET-3
    v4(224, 0, 0, 0, 4),     // multicast
    v4(240, 0, 0, 0, 4),     // reserved, includes broadcast
];

/// Reserved blocks inside [`GLOBAL_UNICAST_V6`], the only IPv6 range with public hosts.
const RESERVED_V6_IN_GLOBAL: &[Ipv6Net] = &[
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), // IETF protocol assignments, Teredo
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), // documentation (RFC 9637)
];

const GLOBAL_UNICAST_V6: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);
/// NAT64's well-known prefix: the last 32 bits are the IPv4 address reached.
const NAT64_V6: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
/// 6to4: the 32 bits after the prefix are the IPv4 address reached.
const SIX_TO_FOUR_V6: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// A block as the tables write it; a bad prefix length fails the build.
const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(segments: [u16; 8], prefix: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), prefix)
}

/// Whether `ip` is in a reserved, private, loopback, link-local, multicast or otherwise
/// non-public range that downloads must not connect to.
pub fn is_reserved_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_reserved_v4(v4),
        IpAddr::V6(v6) => is_reserved_v6(v6),
    }
}

fn is_reserved_v4(ip: Ipv4Addr) -> bool {
    RESERVED_V4.iter().any(|net| net.contains(&ip))
}

fn is_reserved_v6(ip: Ipv6Addr) -> bool {
    // Forms that carry an IPv4 address reach that address (the kernel for mapped ones,
    // a translator for NAT64 and 6to4), so they are judged by it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_reserved_v4(v4);
    }
    let bits = u128::from(ip);
    if NAT64_V6.contains(&ip) {
        return is_reserved_v4(Ipv4Addr::from(bits as u32));
    }
    if SIX_TO_FOUR_V6.contains(&ip) {
        return is_reserved_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    // Allow-listing global unicast covers loopback, unspecified, IPv4-compatible,
    // discard, ULA, link-local, site-local and multicast in one go.
    if !GLOBAL_UNICAST_V6.contains(&ip) {
        return true;
    }
    RESERVED_V6_IN_GLOBAL.iter().any(|net| net.contains(&ip))
}

/// Whether the URL's host is an IP literal in a reserved range.
///
/// HTTP clients connect to IP literals without asking the resolver, so the resolver
/// filter alone would miss them.
pub(super) fn url_has_reserved_ip_host(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => is_reserved_v4(ip),
        Some(Host::Ipv6(ip)) => is_reserved_v6(ip),
        Some(Host::Domain(_)) | None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved(s: &str) -> bool {
        is_reserved_ip(s.parse().unwrap())
    }

    #[test]
    fn ipv4_reserved_ranges() {
        for ip in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.2.10",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(reserved(ip), "{ip} should be reserved");
        }
    }

    #[test]
    fn ipv4_public() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.3.1",
            "192.169.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "151.101.1.69",
        ] {
            assert!(!reserved(ip), "{ip} should be public");
        }
    }

    #[test]
    fn ipv6_reserved_ranges() {
        for ip in [
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "3fff::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
        ] {
            assert!(reserved(ip), "{ip} should be reserved");
        }
    }

    #[test]
    fn ipv6_public() {
        for ip in [
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2400:cb00::1",
        ] {
            assert!(!reserved(ip), "{ip} should be public");
        }
    }

    #[test]
    fn url_literals() {
        let check = |s: &str| url_has_reserved_ip_host(&Url::parse(s).unwrap());
        assert!(check("http://127.0.0.1:8080/x"));
        assert!(check("http://[::1]/x"));
        assert!(check("http://[::ffff:7f00:1]/x"));
        // The URL parser normalises these spellings of 127.0.0.1 to an IPv4 host.
        assert!(check("http://2130706433/x"));
        assert!(check("http://0x7f.1/x"));
        assert!(check("https://169.254.169.254/latest/meta-data"));
        assert!(!check("http://8.8.8.8/x"));
        // Names are left to the filtering resolver.
        assert!(!check("http://localhost/x"));
    }

    #[tokio::test]
    async fn resolved_urls_must_be_public_throughout() {
        let check = |s: &str| {
            let url = Url::parse(s).unwrap();
            async move { ensure_public_url(&url).await.map_err(|e| e.to_string()) }
        };
        assert_eq!(
            check("http://127.0.0.1:4443/").await,
            Err(RESERVED_ADDRESS_MSG.into())
        );
        assert_eq!(
            check("http://[::1]/").await,
            Err(RESERVED_ADDRESS_MSG.into())
        );
        // `localhost` resolves without DNS traffic, to loopback only.
        assert_eq!(
            check("http://localhost:9/").await,
            Err(RESERVED_ADDRESS_MSG.into())
        );
        assert_eq!(check("https://8.8.8.8/").await, Ok(()));
    }
}
