//! `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?namespace=NAME]`, or `rediss://…` for TLS: the
//! namespace baton's names start with, whether to use TLS, and the description shown in
//! messages (never the password). The redis client parses the rest (host, database, TLS).

use crate::url::has_scheme;

/// The schemes of a Redis store's URL.
pub const SCHEMES: &[&str] = &["redis", "rediss"];

/// Whether `url` names a Redis store (`redis:` or `rediss:`, in any case).
pub fn is_redis_url(url: &str) -> bool {
    has_scheme(url, SCHEMES)
}

/// The namespace when the URL names none.
pub const DEFAULT_NAMESPACE: &str = "baton:";

/// The longest namespace accepted, in bytes (every Redis name of a key repeats it).
pub const NAMESPACE_MAX_BYTES: usize = 64;

/// A URL taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// The prefix of every Redis name the store uses.
    pub namespace: String,
    /// `rediss://`.
    pub tls: bool,
    /// The URL without password and without query parameters other than `namespace`.
    pub description: String,
}

/// Takes a store URL apart: the namespace (checked), whether it uses TLS, and the description
/// (the URL without password and without query parameters other than `namespace`).
pub(super) fn parse_url(url: &str) -> std::result::Result<Target, String> {
    let Some(mut parsed) = ::redis::parse_redis_url(url) else {
        return Err(
            "expected `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?namespace=NAME]` (or rediss:// \
             for TLS)"
                .to_owned(),
        );
    };
    let tls = match parsed.scheme() {
        "redis" => false,
        "rediss" => true,
        other => return Err(format!("the scheme `{other}` is not redis or rediss")),
    };
    if parsed.fragment() == Some("insecure") {
        return Err(
            "`#insecure` (TLS without checking the certificate) is not supported; to trust a \
             private CA, name its PEM file in SSL_CERT_FILE"
                .to_owned(),
        );
    }
    let mut namespace = None;
    for (name, value) in parsed.query_pairs() {
        match name.as_ref() {
            "namespace" => namespace = Some(value.into_owned()),
            // Parameters the redis client reads itself.
            "protocol" => {}
            other => {
                return Err(format!(
                    "unknown parameter `{other}`; accepted: `namespace`, `protocol`"
                ))
            }
        }
    }
    let namespace = namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    if namespace.is_empty() || namespace.len() > NAMESPACE_MAX_BYTES {
        return Err(format!(
            "the namespace must be 1 to {NAMESPACE_MAX_BYTES} bytes long"
        ));
    }
    if namespace.chars().any(char::is_control) {
        return Err("the namespace must not contain control characters".to_owned());
    }
    // `set_password` only fails for URLs that cannot have one, which a parsed redis URL can.
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    if namespace != DEFAULT_NAMESPACE {
        parsed
            .query_pairs_mut()
            .append_pair("namespace", &namespace);
    }
    Ok(Target {
        namespace,
        tls,
        description: parsed.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn urls_give_namespace_tls_and_a_description_without_password() {
        let cases = [
            (
                "redis://127.0.0.1:6379",
                "baton:",
                false,
                "redis://127.0.0.1:6379",
            ),
            ("redis://:secret@h:1/2", "baton:", false, "redis://h:1/2"),
            (
                "redis://user:secret@h/0?protocol=resp3",
                "baton:",
                false,
                "redis://user@h/0",
            ),
            (
                "rediss://:pw@h:6380?namespace=ci%20locks:",
                "ci locks:",
                true,
                "rediss://h:6380?namespace=ci+locks%3A",
            ),
            ("redis://h?namespace=baton:", "baton:", false, "redis://h"),
        ];
        for (url, namespace, tls, description) in cases {
            let target = parse_url(url).unwrap();
            assert_eq!(
                (
                    target.namespace.as_str(),
                    target.tls,
                    target.description.as_str()
                ),
                (namespace, tls, description),
                "{url}"
            );
        }
    }

    #[test]
    fn bad_urls_say_what_is_expected() {
        let cases = [
            ("redis://h?namespace=", "1 to 64 bytes"),
            ("redis://h?db=3", "unknown parameter `db`"),
            ("rediss://h#insecure", "SSL_CERT_FILE"),
            ("http://h", "expected `redis://"),
        ];
        for (url, expected) in cases {
            let reason = parse_url(url).unwrap_err();
            assert!(reason.contains(expected), "{url}: {reason}");
        }
        let long = format!(
            "redis://h?namespace={}",
            "n".repeat(NAMESPACE_MAX_BYTES + 1)
        );
        assert!(parse_url(&long).is_err());
    }
}
