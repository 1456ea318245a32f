//! `etcd://[user:password@]host[:port][,host[:port]…][/prefix][?tls=true&cacert=PATH…]`, parsed.
//!
//! - Several endpoints, comma-separated; a missing port is etcd's client port, 2379. IPv6
//!   addresses go in brackets: `[::1]:2379`.
//! - The path is the prefix of every etcd key baton writes; without one (or with `/` alone) it
//!   is [`DEFAULT_PREFIX`]. Trailing slashes are dropped, so `/ci/` and `/ci` are one prefix.
//! - `user:password@` authenticates with etcd's own users (`etcdctl user add`); both parts are
//!   percent-decoded, so a password may hold `@`, `:` or `/` written as `%40`, `%3A`, `%2F`.
//! - TLS is a query parameter, not a second scheme, so the URL's shape stays baton's:
//!   `?tls=true` connects over TLS, `cacert=PATH` names the CA that signed the servers'
//!   certificates (this build trusts no system roots, so TLS needs it), and `cert=PATH` with
//!   `key=PATH` gives a client certificate (etcd's `--client-cert-auth`). The names are
//!   etcdctl's flags. A `cacert`, `cert` or `key` implies `tls=true`.

use std::path::PathBuf;

use crate::history_retention::{HistoryRetention, KEEP_PARAMETER, MAX_AGE_PARAMETER};
use crate::url::{has_scheme_and_authority, redact_password};
use crate::StoreError;

/// Whether `url` names an etcd store (`etcd://…`, any case), which [`super::EtcdStore::open`] takes.
pub fn is_etcd_url(url: &str) -> bool {
    has_scheme_and_authority(url, SCHEMES)
}

/// The schemes of an etcd store's URL.
pub const SCHEMES: &[&str] = &["etcd"];

/// The key prefix when the URL has no path.
pub const DEFAULT_PREFIX: &str = "/baton";

/// etcd's client port, used when an endpoint names none.
pub const DEFAULT_PORT: u16 = 2379;

/// A parsed `etcd://` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `host:port` of each endpoint, as given (with the default port added).
    pub endpoints: Vec<String>,
    /// Every etcd key baton writes starts with this (no trailing `/`).
    pub prefix: String,
    /// `(user, password)`, percent-decoded.
    pub user: Option<(String, String)>,
    /// TLS settings, when the URL asks for TLS.
    pub tls: Option<TlsFiles>,
    /// How much history each CAS leaves per key (`history_keep`; etcd has no age).
    pub retention: HistoryRetention,
}

/// The files TLS reads (paths as given; read when the store opens).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// The CA certificate (PEM) that signed the servers' certificates.
    pub ca_cert: Option<PathBuf>,
    /// The client certificate (PEM), with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub client_key: Option<PathBuf>,
}

impl std::fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: this may end up in a log.
        f.write_str(&self.describe())
    }
}

impl EtcdUrl {
    /// Parses `url`, which must start with `etcd://` (any case).
    pub fn parse(url: &str) -> Result<EtcdUrl, StoreError> {
        let bad_url = |reason: String| StoreError::BadUrl {
            // The URL as given may hold a password: show it without.
            url: redact_password(url),
            reason,
        };
        let (rest, retention) = HistoryRetention::take_from_url(url)?;
        if retention.max_age.is_some() {
            return Err(bad_url(format!(
                "etcd keeps history by count only (`{KEEP_PARAMETER}=N`): its entries carry no \
                 time, so `{MAX_AGE_PARAMETER}` is not supported here"
            )));
        }
        let mut parsed = parse(&rest).map_err(bad_url)?;
        parsed.retention = retention;
        Ok(parsed)
    }

    /// The URL again, without the password: what `describe()` shows.
    pub fn describe(&self) -> String {
        let user = match &self.user {
            Some((user, _)) => format!("{}@", percent_encode(user)),
            None => String::new(),
        };
        let mut text = format!("etcd://{user}{}{}", self.endpoints.join(","), self.prefix);
        if let Some(tls) = &self.tls {
            text.push_str("?tls=true");
            for (name, path) in [
                ("cacert", &tls.ca_cert),
                ("cert", &tls.client_cert),
                ("key", &tls.client_key),
            ] {
                if let Some(path) = path {
                    text.push_str(&format!("&{name}={}", path.display()));
                }
            }
        }
        text
    }

    /// The endpoints as URLs for the client: `http://host:port` or `https://host:port`.
    pub fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|endpoint| format!("{scheme}://{endpoint}"))
            .collect()
    }
}

fn parse(url: &str) -> Result<EtcdUrl, String> {
    const FORM: &str = "expected `etcd://[user:password@]host[:port][,host[:port]…][/prefix]`";
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("etcd") => rest,
        _ => return Err(FORM.to_owned()),
    };
    // The authority ends at the first `/` or `?`; the query starts at the first `?`.
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(slash) => before_query.split_at(slash),
        None => (before_query, ""),
    };
    // The password may hold `@` (percent-encoded or not): the hosts follow the last one.
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let user = match userinfo {
        None => None,
        Some(userinfo) => {
            let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                "a user needs a password: `etcd://user:password@host:port/prefix`".to_owned()
            })?;
            let user = percent_decode(user)?;
            if user.is_empty() {
                return Err("the user name before `:` is empty".to_owned());
            }
            Some((user, percent_decode(password)?))
        }
    };
    let endpoints = hosts
        .split(',')
        .map(parse_endpoint)
        .collect::<Result<Vec<_>, _>>()?;

    let prefix = path.trim_end_matches('/');
    let prefix = if prefix.is_empty() {
        DEFAULT_PREFIX.to_owned()
    } else {
        prefix.to_owned()
    };
    if prefix.chars().any(char::is_control) {
        return Err("the prefix must not contain control characters".to_owned());
    }

    let tls = parse_query(query.unwrap_or(""))?;
    Ok(EtcdUrl {
        endpoints,
        prefix,
        user,
        tls,
        retention: HistoryRetention::default(),
    })
}

fn parse_endpoint(endpoint: &str) -> Result<String, String> {
    if endpoint.is_empty() {
        return Err("an empty host: expected `host[:port]`, comma-separated".to_owned());
    }
    // `[v6]` or `[v6]:port`; else `host` or `host:port`.
    let (host, port) = if let Some(bracketed) = endpoint.strip_prefix('[') {
        let (address, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("`{endpoint}`: an IPv6 address needs a closing `]`"))?;
        if address.is_empty() {
            return Err(format!("`{endpoint}`: an empty IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| format!("`{endpoint}`: expected `:port` after the `]`"))?,
            ),
        };
        (format!("[{address}]"), port)
    } else {
        match endpoint.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (endpoint.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err(format!("`{endpoint}`: an empty host name"));
    }
    if !host.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!("`{endpoint}`: `{host}` is not a host name"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| format!("`{endpoint}`: `{port}` is not a port (1..=65535)"))?,
    };
    Ok(format!("{host}:{port}"))
}

fn parse_query(query: &str) -> Result<Option<TlsFiles>, String> {
    let mut tls_flag: Option<bool> = None;
    let mut files = TlsFiles::default();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value)?;
        match name {
            "tls" => {
                tls_flag = Some(match value.as_str() {
                    "true" | "1" | "yes" => true,
                    "false" | "0" | "no" => false,
                    _ => return Err(format!("`tls={value}`: expected `tls=true` or `tls=false`")),
                })
            }
            "cacert" | "cert" | "key" if value.is_empty() => {
                return Err(format!("`{name}=` needs a file path"))
            }
            "cacert" => files.ca_cert = Some(PathBuf::from(value)),
            "cert" => files.client_cert = Some(PathBuf::from(value)),
            "key" => files.client_key = Some(PathBuf::from(value)),
            _ => {
                return Err(format!(
                    "unknown parameter `{name}`: accepted are `tls=true`, `cacert=PATH`, \
                     `cert=PATH` and `key=PATH`"
                ))
            }
        }
    }
    if files.client_cert.is_some() != files.client_key.is_some() {
        return Err("a client certificate needs both `cert=PATH` and `key=PATH`".to_owned());
    }
    let any_file = files != TlsFiles::default();
    match tls_flag {
        Some(false) if any_file => Err(
            "`tls=false` with `cacert`, `cert` or `key`: those only make sense with TLS".to_owned(),
        ),
        Some(true) => Ok(Some(files)),
        None if any_file => Ok(Some(files)),
        _ => Ok(None),
    }
}

/// `%XX` escapes decoded; the result must be UTF-8.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes
                .get(index + 1..index + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| "a `%` must be followed by two hex digits".to_owned())?;
            decoded.push(hex);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| "percent-escapes must decode to UTF-8".to_owned())
}

/// Escapes what would end the user name in a URL.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parsed(url: &str) -> EtcdUrl {
        EtcdUrl::parse(url).unwrap_or_else(|error| panic!("{url}: {error}"))
    }

    fn reason(url: &str) -> String {
        match EtcdUrl::parse(url) {
            Err(StoreError::BadUrl { reason, url: shown }) => {
                assert!(!shown.contains("s3cret"), "{shown}");
                reason
            }
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn endpoints_prefix_and_defaults() {
        let cases: &[(&str, &[&str], &str)] = &[
            ("etcd://h", &["h:2379"], "/baton"),
            ("etcd://h/", &["h:2379"], "/baton"),
            ("ETCD://h:1234/ci", &["h:1234"], "/ci"),
            ("etcd://h:1/ci/", &["h:1"], "/ci"),
            ("etcd://a:1,b,c:3/x/y", &["a:1", "b:2379", "c:3"], "/x/y"),
            ("etcd://[::1]:2380/p", &["[::1]:2380"], "/p"),
            ("etcd://[::1]/p", &["[::1]:2379"], "/p"),
            (
                "etcd://127.0.0.1:2379/baton-test",
                &["127.0.0.1:2379"],
                "/baton-test",
            ),
        ];
        for (url, endpoints, prefix) in cases {
            let parsed = parsed(url);
            assert_eq!(parsed.endpoints, *endpoints, "{url}");
            assert_eq!(parsed.prefix, *prefix, "{url}");
            assert_eq!(parsed.user, None, "{url}");
            assert_eq!(parsed.tls, None, "{url}");
        }
    }

    #[test]
    fn credentials_are_decoded_and_never_shown() {
        let parsed = parsed("etcd://ro%40t:p%40ss:w@rd@h:1/p");
        assert_eq!(
            parsed.user,
            Some(("ro@t".to_owned(), "p@ss:w@rd".to_owned()))
        );
        assert_eq!(parsed.endpoints, ["h:1"]);
        assert_eq!(parsed.describe(), "etcd://ro%40t@h:1/p");
        assert!(!format!("{parsed:?}").contains("p@ss"));
        assert_eq!(
            redact_password("etcd://u:s3cret@h:1/p"),
            "etcd://u:***@h:1/p"
        );
        assert!(reason("etcd://u:s3cret@h:notaport/p").contains("not a port"));
        assert!(reason("etcd://justuser@h/p").contains("password"));
    }

    #[test]
    fn tls_parameters() {
        let parsed_tls = parsed("etcd://h:1/p?tls=true");
        assert_eq!(parsed_tls.tls, Some(TlsFiles::default()));
        assert_eq!(parsed_tls.endpoint_urls(), ["https://h:1"]);
        assert_eq!(parsed_tls.describe(), "etcd://h:1/p?tls=true");
        assert_eq!(parsed("etcd://h:1/p?tls=false").tls, None);
        assert_eq!(parsed("etcd://h:1/p").endpoint_urls(), ["http://h:1"]);
        let with_files = parsed("etcd://h:1?cacert=/ca.pem&cert=/c.pem&key=/k.pem");
        assert_eq!(with_files.prefix, "/baton");
        assert_eq!(
            with_files.tls,
            Some(TlsFiles {
                ca_cert: Some("/ca.pem".into()),
                client_cert: Some("/c.pem".into()),
                client_key: Some("/k.pem".into()),
            })
        );
        assert!(reason("etcd://h?tls=maybe").contains("tls=true"));
        assert!(reason("etcd://h?tls=false&cacert=/x").contains("tls=false"));
        assert!(reason("etcd://h?cert=/c.pem").contains("key=PATH"));
        assert!(reason("etcd://h?sslmode=require").contains("unknown parameter"));
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (url, expected) in [
            ("etcd:h:2379", "etcd://"),
            ("etcd://", "empty host"),
            ("etcd://a,,b/p", "empty host"),
            ("etcd://h:0", "not a port"),
            ("etcd://h:99999", "not a port"),
            ("etcd://[::1/p", "closing"),
            ("etcd://[::1]x/p", ":port"),
            ("etcd://h%20x/p", "not a host name"),
            ("etcd://:s3cret@h/p", "user name"),
            ("etcd://u:%zz@h/p", "hex digits"),
        ] {
            let reason = reason(url);
            assert!(reason.contains(expected), "{url}: {reason}");
        }
    }
}
