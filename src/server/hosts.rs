//! Which `Host` the server answers for: the defence against DNS rebinding. A page at
//! `http://rebind.attacker.example:3021` whose name the attacker then points at
//! 127.0.0.1 reaches a server on loopback as its own origin, so the browser lets it
//! read the console's list of private files and then the files themselves from
//! `/proxy`. Such a request still names the attacker's host, so a server on a loopback
//! address answers only `localhost`, IP addresses (a browser sends one only when its
//! URL named that address, which no page can rebind) and the names in
//! `allowed_hosts`; any other host is 421 Misdirected Request. A server on another
//! address answers every host, as a service behind a balancer is reached by names it
//! cannot know, unless `allowed_hosts` lists them; `*` there turns the check off.
//!
//! `observe` asks once per request, before the router, so every route is covered. The
//! check allocates nothing; on a loopback server it costs about 150 (`localhost`) to 300
//! (`127.0.0.1`) instructions, 1-2 % of a health check's, and without a list on
//! another address one comparison.

use std::net::{Ipv6Addr, SocketAddr};

use axum::extract::Request;
use axum::http::{HeaderValue, header};

use super::headers::named;
use crate::config::AllowedHost;

/// The hosts a server answers for.
pub enum HostPolicy {
    /// Every host.
    Any,
    /// `localhost`, IP addresses, and these names (lowercase, no trailing dot).
    Listed(Box<[Box<str>]>),
}

impl HostPolicy {
    /// The policy of a server on `bind` with `allowed_hosts`. An entry that does not
    /// parse was refused with the config; here it is passed over.
    pub fn new(bind: SocketAddr, allowed_hosts: &[String]) -> Self {
        let entries: Vec<AllowedHost> = allowed_hosts
            .iter()
            .filter_map(|entry| AllowedHost::parse(entry).ok())
            .collect();
        if entries.contains(&AllowedHost::Any) || (entries.is_empty() && !bind.ip().is_loopback()) {
            return HostPolicy::Any;
        }
        let names = entries
            .into_iter()
            .filter_map(|entry| match entry {
                AllowedHost::Name(name) => Some(name.into_boxed_str()),
                AllowedHost::Any | AllowedHost::Address => None,
            })
            .collect();
        HostPolicy::Listed(names)
    }

    /// The host the request names (its `Host`, or its absolute-form target's), when
    /// it is one this server does not answer for. Without a `Host` (HTTP/1.0) the
    /// request is answered: every browser sends one.
    pub fn refused<'r>(&self, request: &'r Request) -> Option<&'r [u8]> {
        let HostPolicy::Listed(names) = self else {
            return None;
        };
        if let Some(authority) = request.uri().authority()
            && !allows(names, authority.as_str().as_bytes())
        {
            return Some(authority.as_str().as_bytes());
        }
        // Every `Host` a request carries is asked.
        named(request.headers(), &header::HOST)
            .map(HeaderValue::as_bytes)
            .find(|host| !allows(names, host))
    }
}

/// Whether `host` (`name[:port]`, `address[:port]` or `[v6 address][:port]`) is
/// `localhost`, an IP address, or one of `names`; names compare in any case, with or
/// without a trailing dot. Read as bytes, from the port backwards, each part once:
/// this is on the path of every request.
fn allows(names: &[Box<str>], host: &[u8]) -> bool {
    let Some(name) = without_port(host) else {
        return false;
    };
    if let Some(bracketed) = name.strip_prefix(b"[") {
        return bracketed
            .strip_suffix(b"]")
            .and_then(|address| std::str::from_utf8(address).ok())
            .is_some_and(|address| address.parse::<Ipv6Addr>().is_ok());
    }
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.first().is_some_and(u8::is_ascii_digit) && is_ipv4(name) {
        return true;
    }
    // Browsers send names in lowercase, as the known ones are kept: comparing bytes
    // first spares folding the case of every byte on every request.
    let is = |known: &[u8]| name == known || name.eq_ignore_ascii_case(known);
    is(b"localhost") || names.iter().any(|allowed| is(allowed.as_bytes()))
}

/// `host` without its `:port`; `None` for a `:` without digits after it. What else
/// follows a `:` stays in the name, which then matches nothing.
fn without_port(host: &[u8]) -> Option<&[u8]> {
    let mut colon = host.len();
    while colon > 0 && host[colon - 1].is_ascii_digit() {
        colon -= 1;
    }
    match host[..colon].split_last() {
        Some((b':', _)) if colon == host.len() => None,
        Some((b':', name)) => Some(name),
        _ => Some(host),
    }
}

/// Four decimal numbers of at most 255 between dots, without leading zeros, as a
/// browser writes an IPv4 address in `Host`. One plain pass: std's parser takes a
/// `str` and cost several times more on every request.
fn is_ipv4(name: &[u8]) -> bool {
    let (mut parts, mut digits, mut number) = (1, 0, 0u16);
    for &b in name {
        if b == b'.' {
            if digits == 0 {
                return false;
            }
            (parts, digits, number) = (parts + 1, 0, 0);
        } else if b.is_ascii_digit() && !(digits == 1 && number == 0) {
            number = number * 10 + u16::from(b - b'0');
            digits += 1;
            if number > 255 {
                return false;
            }
        } else {
            return false;
        }
    }
    parts == 4 && digits > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: &str) -> Request {
        Request::builder()
            .uri("/console/api/downloads")
            .header(header::HOST, host)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    fn policy(bind: &str, allowed: &[&str]) -> HostPolicy {
        let allowed: Vec<String> = allowed.iter().map(|&a| a.to_owned()).collect();
        HostPolicy::new(bind.parse().unwrap(), &allowed)
    }

    #[test]
    fn on_loopback_only_localhost_addresses_and_listed_names_are_answered() {
        let loopback = policy("127.0.0.1:3021", &["Symbols.Example.com"]);
        for host in [
            "localhost",
            "localhost:3021",
            "LOCALHOST:3021",
            "localhost.:3021",
            "127.0.0.1",
            "127.0.0.1:3021",
            "127.45.6.7:1",
            "10.0.0.5:3021",
            "[::1]",
            "[::1]:3021",
            "[0:0:0:0:0:0:0:1]:3021",
            "[::ffff:127.0.0.1]:3021",
            "symbols.example.com",
            "SYMBOLS.example.COM:443",
            "symbols.example.com.",
        ] {
            assert!(loopback.refused(&request(host)).is_none(), "{host}");
        }
        for host in [
            "rebind.attacker.example",
            "rebind.attacker.example:3021",
            "localhost.attacker.example",
            "127.0.0.1.nip.io:3021",
            "sub.symbols.example.com",
            "symbols.example.com:",
            "symbols.example.com:80:80",
            "symbols.example.com:x",
            "localhost:3021@evil",
            "[::1",
            "[::1]x",
            "[rebind.attacker.example]",
            "2130706433",
            "",
        ] {
            assert_eq!(
                loopback.refused(&request(host)),
                Some(host.as_bytes()),
                "{host}"
            );
        }
        // Every `Host` a request carries is asked.
        let mut two = request("localhost");
        two.headers_mut().append(
            header::HOST,
            HeaderValue::from_static("rebind.attacker.example"),
        );
        assert!(loopback.refused(&two).is_some());
        // The target's own authority is asked too.
        let absolute = Request::builder()
            .uri("http://rebind.attacker.example/console")
            .header(header::HOST, "localhost")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(
            loopback.refused(&absolute),
            Some(&b"rebind.attacker.example"[..])
        );
        // No `Host` at all: not a browser.
        let mut bare = request("localhost");
        bare.headers_mut().remove(header::HOST);
        assert!(loopback.refused(&bare).is_none());
        assert!(
            policy("[::1]:3021", &[])
                .refused(&request("a.example"))
                .is_some()
        );
    }

    #[test]
    fn ipv4_addresses_are_what_std_parses() {
        for text in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.0.0.5",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3",
            "1..2.3",
            "1.2.3.",
            ".1.2.3",
            "1234.0.0.1",
            "1.2.3.a",
            "010.0.0.1",
            "0.0.0.00",
            "",
        ] {
            assert_eq!(
                is_ipv4(text.as_bytes()),
                text.parse::<std::net::Ipv4Addr>().is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn elsewhere_every_host_is_answered_unless_names_are_listed() {
        let host = request("symbols.example.com:3021");
        assert!(policy("0.0.0.0:3021", &[]).refused(&host).is_none());
        assert!(policy("10.0.0.5:3021", &[]).refused(&host).is_none());
        let listed = policy("0.0.0.0:3021", &["other.example", "10.0.0.5"]);
        assert!(listed.refused(&host).is_some());
        assert!(listed.refused(&request("other.example")).is_none());
        assert!(listed.refused(&request("10.0.0.9:3021")).is_none());
        // `*` turns the check off, on loopback too.
        assert!(policy("127.0.0.1:3021", &["*"]).refused(&host).is_none());
    }
}
