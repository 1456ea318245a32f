//! Store URLs: which store `--store` / `BATON_STORE` names, opened.
//!
//! Every kind of store is one row of [`STORES`]: its schemes, its name, the cargo feature that
//! compiles it in, the forms of URL it takes and how to open it. `open`, the message that lists
//! the accepted forms and the "compiled without" and "not in this build" messages all read that
//! one table, so adding a store is adding a row. A store takes its URL whole (everything after
//! the scheme is its own, parsed in its folder's `url.rs`); `memory:` is the only store parsed
//! here. The design's other schemes (`http(s)://`) are rows without an opener, so that their
//! users get "not in this build yet" rather than "bad URL".
//!
//! The helpers every store's `url.rs` shares live here too: [`has_scheme`] (schemes are
//! case-insensitive, RFC 3986) and [`redact_password`] (a URL fit for an error message).

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::memory::MemoryStore;
use crate::{Result, Store, StoreError};

/// A store being opened.
pub type Opening<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn Store>>> + Send + 'a>>;

/// Opens the store a URL names (the whole URL, scheme included), in a mode.
pub type Opener = for<'a> fn(&'a str, OpenMode) -> Opening<'a>;

/// Whether opening a store may create it.
///
/// A command that only reads must not turn a mistyped path into a new, empty store that then
/// reports that nothing is held: it opens with [`OpenMode::Existing`], and a store that is not
/// there is [`StoreError::Missing`]. The stores that create something on open (SQLite its file
/// and tables, PostgreSQL its tables) honour the mode; the others create nothing either way
/// (Redis, etcd and S3 need nothing created; a DynamoDB table is made by `baton init` only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Create what the store needs if it is missing (the file, the tables), as writers do.
    Create,
    /// Use only a store that exists; create nothing.
    Existing,
}

/// One kind of store a URL can name: a row of [`STORES`].
pub struct StoreKind {
    /// The schemes it answers to (the URL's part before the first `:`), in lower case.
    pub schemes: &'static [&'static str],
    /// Its name in messages.
    pub name: &'static str,
    /// The cargo feature that compiles it in; `None` for a store no feature builds yet.
    pub feature: Option<&'static str>,
    /// The forms of URL it takes, for the message that lists them (empty: not listed).
    pub forms: &'static [&'static str],
    /// How to open it; `None` in a build without it.
    pub open: Option<Opener>,
}

/// The opener that calls `$open(url)` (a store's async constructor from a URL; with `mode`,
/// `$open(url, mode)`, for a store that creates something on open), or `None` in a build
/// without the feature `$feature`. A macro because a `#[cfg]` must stand on an item or a
/// statement.
macro_rules! opener {
    ($feature:literal, |$url:ident, $mode:ident| $call:expr) => {{
        #[cfg(feature = $feature)]
        fn open($url: &str, $mode: OpenMode) -> Opening<'_> {
            Box::pin(async move { Ok(Arc::new($call.await?) as Arc<dyn Store>) })
        }
        #[cfg(feature = $feature)]
        let open: Option<Opener> = Some(open);
        #[cfg(not(feature = $feature))]
        let open: Option<Opener> = None;
        open
    }};
    ($feature:literal, $open:path) => {
        opener!($feature, |url, _mode| $open(url))
    };
    ($feature:literal, $open:path, mode) => {
        opener!($feature, |url, mode| $open(url, mode))
    };
}

/// Every kind of store a URL can name, in the order the accepted forms are listed.
pub const STORES: &[StoreKind] = &[
    StoreKind {
        schemes: &["sqlite"],
        name: "SQLite",
        feature: Some("sqlite"),
        forms: &["sqlite:PATH", "sqlite:///ABSOLUTE/PATH"],
        open: opener!("sqlite", crate::sqlite::SqliteStore::open_url_in, mode),
    },
    StoreKind {
        schemes: &["postgres", "postgresql"],
        name: "PostgreSQL",
        feature: Some("postgres"),
        forms: &["postgres://USER@HOST:PORT/DB"],
        open: opener!("postgres", crate::postgres::PostgresStore::open_in, mode),
    },
    StoreKind {
        schemes: &["redis", "rediss"],
        name: "Redis",
        feature: Some("redis"),
        forms: &["redis://HOST:PORT/DB", "rediss://…"],
        open: opener!("redis", crate::redis::RedisStore::open),
    },
    StoreKind {
        schemes: &["etcd"],
        name: "etcd",
        feature: Some("etcd"),
        forms: &["etcd://HOST:PORT[,HOST:PORT]/PREFIX"],
        open: opener!("etcd", crate::etcd::EtcdStore::open),
    },
    StoreKind {
        schemes: &["s3"],
        name: "S3",
        feature: Some("s3"),
        forms: &["s3://BUCKET/PREFIX"],
        open: opener!("s3", crate::s3::S3Store::open),
    },
    StoreKind {
        schemes: &["dynamodb"],
        name: "DynamoDB",
        feature: Some("dynamodb"),
        forms: &["dynamodb://TABLE"],
        open: opener!("dynamodb", crate::dynamodb::DynamoStore::open),
    },
    StoreKind {
        schemes: &["memory"],
        name: "memory",
        feature: None,
        forms: &["memory:"],
        open: Some(open_memory),
    },
    StoreKind {
        schemes: &["http", "https"],
        name: "HTTP (`baton serve`)",
        feature: None,
        forms: &[],
        open: None,
    },
];

/// Opens the store `url` names, creating it if it is missing ([`OpenMode::Create`]).
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_in(url, OpenMode::Create).await
}

/// Opens the store `url` names in `mode`: with [`OpenMode::Existing`], a store that is not
/// there is [`StoreError::Missing`] and nothing is created.
pub async fn open_in(url: &str, mode: OpenMode) -> Result<Arc<dyn Store>> {
    let kind = kind_of(url)?;
    match kind.open {
        Some(open) => open(url, mode).await,
        None => Err(bad_url(url, not_in_this_build(kind))),
    }
}

/// The row of [`STORES`] whose scheme `url` has.
fn kind_of(url: &str) -> Result<&'static StoreKind> {
    STORES
        .iter()
        .find(|kind| has_scheme(url, kind.schemes))
        .ok_or_else(|| bad_url(url, accepted_forms()))
}

/// Whether `url`'s scheme (its part before the first `:`) is one of `schemes`, in any case.
/// `schemes` are lower case.
pub fn has_scheme(url: &str, schemes: &[&str]) -> bool {
    url.split_once(':').is_some_and(|(scheme, _)| {
        schemes
            .iter()
            .any(|candidate| scheme.eq_ignore_ascii_case(candidate))
    })
}

/// Whether `url` starts with `SCHEME://` for one of `schemes`, in any case: the stores whose
/// URLs have an authority (a host) say so with `//`.
pub fn has_scheme_and_authority(url: &str, schemes: &[&str]) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        schemes
            .iter()
            .any(|candidate| scheme.eq_ignore_ascii_case(candidate))
    })
}

/// `url` with the password of its user info, and any `password=` parameter, replaced by
/// `***`: for error messages about a URL that may not even parse. A URL without `://` is
/// returned as it is.
pub fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // The password may hold `@`: the host follows the last one.
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let parameters: Vec<String> = query
                .split('&')
                .map(|parameter| match parameter.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                        format!("{name}=***")
                    }
                    _ => parameter.to_owned(),
                })
                .collect();
            format!("{path}?{}", parameters.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

fn bad_url(url: &str, reason: String) -> StoreError {
    StoreError::BadUrl {
        url: redact_password(url),
        reason,
    }
}

/// "expected `A`, `B` … or `Z`": every form of every row that lists one.
fn accepted_forms() -> String {
    let forms: Vec<String> = STORES
        .iter()
        .flat_map(|kind| kind.forms.iter())
        .map(|form| format!("`{form}`"))
        .collect();
    match forms.split_last() {
        Some((last, [])) => format!("expected {last}"),
        Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
        None => "no store is known".to_owned(),
    }
}

/// Why a known kind of store cannot be opened by this build.
fn not_in_this_build(kind: &StoreKind) -> String {
    match kind.feature {
        Some(feature) => format!(
            "this build of baton was compiled without the {} store (cargo feature `{feature}`)",
            kind.name
        ),
        None => format!(
            "this build of baton does not include the {} store yet; use sqlite:PATH",
            kind.name
        ),
    }
}

/// `memory:` (or `memory://`): a fresh in-process store.
fn open_memory(url: &str, _mode: OpenMode) -> Opening<'_> {
    Box::pin(async move {
        parse_memory(url)?;
        Ok(Arc::new(MemoryStore::new()) as Arc<dyn Store>)
    })
}

fn parse_memory(url: &str) -> Result<()> {
    match url.split_once(':') {
        Some((_, "" | "//")) => Ok(()),
        _ => Err(bad_url(
            url,
            "the memory store takes no path: `memory:`".to_owned(),
        )),
    }
}

/// The default store file when no store is chosen: `$XDG_STATE_HOME/baton/baton.db`, else
/// `$HOME/.local/state/baton/baton.db`; `None` when neither variable gives an absolute path.
pub fn default_sqlite_path() -> Option<PathBuf> {
    default_sqlite_path_from(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// [`default_sqlite_path`] with the environment passed in, so tests need not change it.
fn default_sqlite_path_from(
    xdg_state_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    // The XDG spec says to ignore a relative XDG_STATE_HOME; a relative HOME is as unusable.
    let absolute =
        |value: Option<OsString>| value.map(PathBuf::from).filter(|path| path.is_absolute());
    if let Some(state_home) = absolute(xdg_state_home) {
        return Some(state_home.join("baton").join("baton.db"));
    }
    absolute(home).map(|home| home.join(".local/state/baton/baton.db"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn reason(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(StoreError::BadUrl { reason, .. }) => reason,
            other => panic!("expected BadUrl, got {other:?}"),
        }
    }

    fn kind_reason(url: &str) -> String {
        reason(kind_of(url).map(|kind| kind.name))
    }

    #[test]
    fn memory_urls() {
        assert!(parse_memory("memory:").is_ok());
        assert!(parse_memory("memory://").is_ok());
        assert_eq!(kind_of("MEMORY:").unwrap().name, "memory");
        assert!(reason(parse_memory("memory:x")).contains("no path"));
    }

    /// Each URL goes to its row; a build without that store names the missing feature.
    #[test]
    fn server_stores_are_handed_over_or_named_as_compiled_out() {
        for (url, name, feature) in [
            ("sqlite:/tmp/x.db", "SQLite", "sqlite"),
            ("postgres://u@h/db", "PostgreSQL", "postgres"),
            ("postgresql://h/db", "PostgreSQL", "postgres"),
            ("redis://h", "Redis", "redis"),
            ("rediss://h", "Redis", "redis"),
            ("etcd://h:2379/p", "etcd", "etcd"),
            ("s3://bucket/p", "S3", "s3"),
            ("dynamodb://table", "DynamoDB", "dynamodb"),
        ] {
            let kind = kind_of(url).unwrap();
            assert_eq!((kind.name, kind.feature), (name, Some(feature)), "{url}");
            let reason = not_in_this_build(kind);
            assert!(
                reason.contains(name) && reason.contains("compiled without"),
                "{url}: {reason}"
            );
        }
    }

    /// Which rows open in this build follows the cargo features.
    #[test]
    fn openers_follow_the_features() {
        let built = |name: &str| STORES.iter().any(|k| k.name == name && k.open.is_some());
        assert_eq!(built("SQLite"), cfg!(feature = "sqlite"));
        assert_eq!(built("PostgreSQL"), cfg!(feature = "postgres"));
        assert_eq!(built("Redis"), cfg!(feature = "redis"));
        assert_eq!(built("etcd"), cfg!(feature = "etcd"));
        assert_eq!(built("S3"), cfg!(feature = "s3"));
        assert_eq!(built("DynamoDB"), cfg!(feature = "dynamodb"));
        assert!(built("memory"));
    }

    #[tokio::test]
    async fn other_schemes_are_not_in_this_build() {
        let cases = [("http://h:8080", "HTTP"), ("https://h", "HTTP")];
        for (url, name) in cases {
            let reason = reason(open(url).await);
            assert!(
                reason.contains(name) && reason.contains("use sqlite:PATH"),
                "{url}: {reason}"
            );
        }
    }

    #[test]
    fn unknown_forms_list_the_accepted_ones() {
        for url in ["", "baton.db", "ftp://x", "mysql://h/db"] {
            assert!(kind_reason(url).contains("sqlite:PATH"), "{url}");
        }
        assert_eq!(
            accepted_forms(),
            "expected `sqlite:PATH`, `sqlite:///ABSOLUTE/PATH`, \
             `postgres://USER@HOST:PORT/DB`, `redis://HOST:PORT/DB`, `rediss://…`, \
             `etcd://HOST:PORT[,HOST:PORT]/PREFIX`, `s3://BUCKET/PREFIX`, `dynamodb://TABLE` or \
             `memory:`"
        );
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        let cases = [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?password=secret&sslmode=require",
                "postgres://h/db?password=***&sslmode=require",
            ),
            ("postgres://u:p@ss:w@rd@h/db", "postgres://u:***@h/db"),
            ("postgres://u:secret@h", "postgres://u:***@h"),
            ("not a url", "not a url"),
            ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:p@w@h", "redis://:***@h"),
            ("redis://h:1/0", "redis://h:1/0"),
            ("etcd://u:s3cret@h:1/p", "etcd://u:***@h:1/p"),
            (
                "etcd://ro%40t:p%40ss:w@rd@h:1,h:2/p",
                "etcd://ro%40t:***@h:1,h:2/p",
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_password(url), expected, "{url}");
        }
    }

    #[test]
    fn schemes_match_in_any_case() {
        assert!(has_scheme("SQLite:/a:b.db", &["sqlite"]));
        assert!(!has_scheme("sqlitex:/a", &["sqlite"]));
        for url in ["postgres://h/db", "POSTGRESQL://h", "PostgreS://u@h"] {
            assert!(
                has_scheme_and_authority(url, &["postgres", "postgresql"]),
                "{url}"
            );
        }
        for url in ["postgres:/h", "sqlite:/x.db", "postgresx://h", "redis://h"] {
            assert!(
                !has_scheme_and_authority(url, &["postgres", "postgresql"]),
                "{url}"
            );
        }
    }

    #[test]
    fn default_path_prefers_xdg_state_home() {
        let path = |xdg: Option<&str>, home: Option<&str>| {
            default_sqlite_path_from(xdg.map(OsString::from), home.map(OsString::from))
        };
        assert_eq!(
            path(Some("/state"), Some("/home/u")),
            Some(PathBuf::from("/state/baton/baton.db"))
        );
        assert_eq!(
            path(None, Some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/baton/baton.db"))
        );
        assert_eq!(
            path(Some("relative"), Some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/baton/baton.db"))
        );
        assert_eq!(path(Some(""), None), None);
        assert_eq!(path(None, None), None);
    }
}
