//! Which hosts a server without a tokens file answers: the defence against DNS rebinding.
//!
//! Without tokens every request may do everything, and the loopback listen address is what
//! keeps others out. A web page gets past it: a page at `http://rebind.example:7878/` whose
//! name is then made to resolve to 127.0.0.1 has the browser send its requests to this
//! server, as requests to the page's own origin, and read the answers (the webhook URLs in
//! the notification rules; a rule of its own added). The browser names the page's host in
//! `Host`, and in `Origin` when it sends one, so such a server answers only requests whose
//! `Host` and `Origin` name a loopback host — `localhost` or a loopback address — whatever
//! the port, and refuses the rest with 403 (`host_not_allowed`).
//!
//! An address literal cannot be rebound: a request whose `Host` is an address was sent to
//! that address. So with `--insecure` the listen address is answered too (and any address
//! when it listens on every interface, `0.0.0.0` or `[::]`), and names the operator gives
//! with `--allow-host`. A request with no `Host` at all comes from no browser (they always
//! send one) and is answered. With a tokens file nothing here applies: a page cannot make
//! the browser send a token.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State as Shared};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::State;

/// The hosts a tokenless server answers, besides loopback ones.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
    /// Names given with `--allow-host`, in lower case, without a trailing dot.
    names: BTreeSet<String>,
    /// Addresses: the listen address's own with `--insecure`.
    addresses: Vec<IpAddr>,
    /// Every address literal (listening on every interface with `--insecure`).
    any_address: bool,
}

/// A host as a request names it, the port left out.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    Name(String),
    Address(IpAddr),
}

impl AllowedHosts {
    /// The hosts a server listening on `listen` answers: loopback ones, and with `insecure`
    /// the listen address; `names` besides (each a name or an address, without a port).
    pub fn new(listen: SocketAddr, insecure: bool, names: &[String]) -> Result<Self, String> {
        let mut allowed = AllowedHosts::default();
        if insecure {
            if listen.ip().is_unspecified() {
                allowed.any_address = true;
            } else {
                allowed.addresses.push(listen.ip());
            }
        }
        for name in names {
            match parse_host(name) {
                Some(Host::Name(name)) => {
                    allowed.names.insert(name);
                }
                Some(Host::Address(address)) => allowed.addresses.push(address),
                None => {
                    return Err(format!(
                        "--allow-host {name:?} must be a host name or an address without a port \
                         (it is allowed on every port), as ci-lock.internal or 10.0.0.5"
                    ))
                }
            }
        }
        Ok(allowed)
    }

    /// Whether a request naming `host` is answered.
    fn allows(&self, host: &Host) -> bool {
        match host {
            Host::Name(name) => name == "localhost" || self.names.contains(name),
            Host::Address(address) => {
                is_loopback(address) || self.any_address || self.addresses.contains(address)
            }
        }
    }

    /// Refuses (403) a request whose `Host` (or the authority of an absolute URI) or `Origin`
    /// names a host this server does not answer.
    pub fn check(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
        let mut hosts: Vec<&str> = Vec::new();
        if let Some(authority) = uri.authority() {
            hosts.push(authority.as_str());
        }
        for value in headers.get_all(HOST) {
            hosts.push(value.to_str().unwrap_or("\u{fffd}"));
        }
        for host in hosts {
            if !parse_authority(host).is_some_and(|h| self.allows(&h)) {
                return Err(refused("Host", host));
            }
        }
        for value in headers.get_all(ORIGIN) {
            let origin = value.to_str().unwrap_or("\u{fffd}");
            let host = origin
                .split_once("://")
                .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
                .and_then(|(_, authority)| parse_authority(authority));
            if !host.is_some_and(|h| self.allows(&h)) {
                return Err(refused("Origin", origin));
            }
        }
        Ok(())
    }
}

/// The middleware: a tokenless server's requests pass [`AllowedHosts::check`] first.
pub async fn check(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    if let Some(allowed) = &state.hosts {
        if let Err(error) = allowed.check(request.headers(), request.uri()) {
            return error.into_response();
        }
    }
    next.run(request).await
}

fn refused(header: &str, value: &str) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        code: "host_not_allowed",
        message: format!(
            "this server has no tokens file, so it answers only requests addressed to a \
             loopback name or address (http://127.0.0.1:PORT/, http://localhost:PORT/); the \
             request's {header} {value:?} is not one, and a web page whose name was made to \
             resolve to this machine (DNS rebinding) must not act here: use such an address, \
             start baton serve with --tokens FILE, or name a host that is yours with \
             --allow-host NAME"
        ),
        more: Vec::new(),
    }
}

fn is_loopback(address: &IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `HOST[:PORT]` (as `Host` and an origin write it) to its host; `None` when malformed.
fn parse_authority(authority: &str) -> Option<Host> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, after) = rest.split_once(']')?;
            (&authority[..inside.len() + 2], after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    parse_host(host)
}

/// A host without a port: a name (lower case, one trailing dot dropped), an IPv4 address, or
/// an IPv6 address in brackets or bare.
fn parse_host(host: &str) -> Option<Host> {
    if let Some(inside) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inside.parse().ok().map(Host::Address);
    }
    if let Ok(address) = host.parse::<IpAddr>() {
        return Some(Host::Address(address));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
    if name.is_empty() || name.starts_with('.') || !name.bytes().all(plain) {
        return None;
    }
    Some(Host::Name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(allowed: &AllowedHosts, host: &str) -> bool {
        parse_authority(host).is_some_and(|h| allowed.allows(&h))
    }

    #[test]
    fn loopback_names_and_addresses_on_any_port() {
        let allowed = AllowedHosts::new("127.0.0.1:7878".parse().expect("an address"), false, &[])
            .expect("allowed");
        for host in [
            "localhost",
            "localhost:1",
            "LOCALHOST.:7878",
            "127.0.0.1",
            "127.255.0.9:80",
            "[::1]:7878",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(allows(&allowed, host), "{host}");
        }
        for host in [
            "",
            ":7878",
            "rebind.example",
            "rebind.example:7878",
            "localhost.rebind.example",
            "sub.localhost",
            "127.0.0.1.rebind.example",
            "2130706433",
            "10.0.0.5:7878",
            "[fe80::1]",
            "localhost:",
            "localhost:x",
            "[::1",
            "local host",
            "0.0.0.0:7878",
        ] {
            assert!(!allows(&allowed, host), "{host}");
        }
    }

    #[test]
    fn insecure_adds_the_listen_address_and_allow_host_names() {
        let names = ["Lock.CI.internal.".to_owned(), "10.9.9.9".to_owned()];
        let listen = "10.0.0.5:7878".parse().expect("an address");
        let allowed = AllowedHosts::new(listen, true, &names).expect("allowed");
        for host in [
            "10.0.0.5:7878",
            "10.0.0.5:1",
            "lock.ci.internal:7878",
            "10.9.9.9",
        ] {
            assert!(allows(&allowed, host), "{host}");
        }
        for host in ["10.0.0.6:7878", "ci.internal", "rebind.example"] {
            assert!(!allows(&allowed, host), "{host}");
        }
        // Without --insecure the listen address is not added (it is loopback anyway).
        let plain = AllowedHosts::new(listen, false, &[]).expect("allowed");
        assert!(!allows(&plain, "10.0.0.5:7878"));
        // On every interface, any address literal: it cannot be rebound; names still not.
        let every = AllowedHosts::new("0.0.0.0:7878".parse().expect("an address"), true, &[])
            .expect("allowed");
        assert!(allows(&every, "192.168.1.20:7878") && allows(&every, "[2001:db8::1]:7878"));
        assert!(!allows(&every, "rebind.example:7878"));
    }

    #[test]
    fn allow_host_takes_names_and_addresses_without_a_port() {
        let listen = "127.0.0.1:0".parse().expect("an address");
        for name in ["ci.internal", "10.0.0.5", "::1", "[2001:db8::1]"] {
            assert!(
                AllowedHosts::new(listen, false, &[name.to_owned()]).is_ok(),
                "{name}"
            );
        }
        for name in ["ci.internal:7878", "", "a b", "http://ci.internal"] {
            let refused =
                AllowedHosts::new(listen, false, &[name.to_owned()]).expect_err("refused");
            assert!(refused.contains("--allow-host"), "{refused}");
        }
    }

    #[test]
    fn origins_are_judged_by_their_host() {
        let allowed = AllowedHosts::new("127.0.0.1:7878".parse().expect("an address"), false, &[])
            .expect("allowed");
        let check = |origin: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(HOST, "127.0.0.1:7878".parse().expect("an address"));
            headers.insert(ORIGIN, origin.parse().expect("an address"));
            allowed.check(&headers, &Uri::from_static("/")).is_ok()
        };
        assert!(check("http://127.0.0.1:7878") && check("https://localhost"));
        for origin in [
            "null",
            "http://rebind.example",
            "file://",
            "ftp://localhost",
        ] {
            assert!(!check(origin), "{origin}");
        }
        // An absolute request URI names its host too.
        let uri = Uri::from_static("http://rebind.example/v1/whoami");
        assert!(allowed.check(&HeaderMap::new(), &uri).is_err());
        assert!(allowed
            .check(&HeaderMap::new(), &Uri::from_static("/"))
            .is_ok());
    }
}
