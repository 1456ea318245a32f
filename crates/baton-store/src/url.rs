//! Store URLs: which store `--store` / `BATON_STORE` names, opened.
//!
//! Accepted: `memory:`, `sqlite:PATH` (absolute or relative to the current directory) and
//! `sqlite:///ABSOLUTE/PATH` (paths taken literally: no percent-decoding, no `~` expansion);
//! `postgres://…`/`postgresql://…`, `redis://…`/`rediss://…` and `etcd://…`, which their stores
//! parse whole. The design's other schemes (`s3://`, `dynamodb://`, `http(s)://`) are recognised
//! so that their users get "not in this build yet" rather than "bad URL"; so are the server
//! stores in a build compiled without them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use crate::memory::MemoryStore;
use crate::{Result, Store, StoreError};

/// The forms a URL may take in this build, for error messages.
const ACCEPTED_FORMS: &str = "expected `sqlite:PATH`, `sqlite:///ABSOLUTE/PATH`, \
    `postgres://USER@HOST:PORT/DB`, `redis://HOST:PORT/DB`, `rediss://…`, \
    `etcd://HOST:PORT[,HOST:PORT]/PREFIX`, `s3://BUCKET/PREFIX`, `dynamodb://TABLE` or \
    `memory:`";

/// Opens the store `url` names.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    // The Redis store takes its URL whole (credentials, database, TLS, namespace).
    #[cfg(feature = "redis")]
    if crate::redis::RedisStore::handles(url) {
        return Ok(Arc::new(crate::redis::RedisStore::open(url).await?));
    }
    // The PostgreSQL store takes its URL whole (sqlx parses it, with libpq's environment).
    #[cfg(feature = "postgres")]
    if crate::postgres::is_postgres_url(url) {
        return Ok(Arc::new(crate::postgres::PostgresStore::open(url).await?));
    }
    // The etcd store takes its URL whole (endpoints, credentials, prefix, TLS).
    #[cfg(feature = "etcd")]
    if crate::etcd::is_etcd_url(url) {
        return Ok(Arc::new(crate::etcd::EtcdStore::open(url).await?));
    }
    // The S3 store takes its URL whole (bucket, prefix); the rest comes from the AWS chain.
    #[cfg(feature = "s3")]
    if crate::s3::is_s3_url(url) {
        return Ok(Arc::new(crate::s3::S3Store::open(url).await?));
    }
    // The DynamoDB store takes its URL whole (the table; the rest comes from the AWS chain).
    #[cfg(feature = "dynamodb")]
    if crate::dynamodb::is_dynamodb_url(url) {
        return Ok(Arc::new(crate::dynamodb::DynamoStore::open(url).await?));
    }
    match parse(url)? {
        Target::Memory => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        Target::Sqlite(path) => Ok(Arc::new(crate::sqlite::SqliteStore::open(&path).await?)),
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

/// A parsed store URL.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Memory,
    /// An absolute path.
    #[cfg(feature = "sqlite")]
    Sqlite(PathBuf),
}

fn parse(url: &str) -> Result<Target> {
    let bad_url = |reason: String| StoreError::BadUrl {
        url: url.to_owned(),
        reason,
    };
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(bad_url(ACCEPTED_FORMS.to_owned()));
    };
    // Schemes are case-insensitive (RFC 3986); paths are not.
    match scheme.to_ascii_lowercase().as_str() {
        "memory" if rest.is_empty() || rest == "//" => Ok(Target::Memory),
        "memory" => Err(bad_url(
            "the memory store takes no path: `memory:`".to_owned(),
        )),
        "sqlite" => parse_sqlite_path(rest).map_err(bad_url),
        // Reached only in a build without these stores: with them, `open` hands them over first.
        "postgres" | "postgresql" => Err(bad_url(compiled_without("PostgreSQL", "postgres"))),
        "redis" | "rediss" => Err(bad_url(compiled_without("Redis", "redis"))),
        "etcd" => Err(bad_url(compiled_without("etcd", "etcd"))),
        "s3" => Err(bad_url(compiled_without("S3", "s3"))),
        "dynamodb" => Err(bad_url(compiled_without("DynamoDB", "dynamodb"))),
        "http" | "https" => Err(bad_url(not_in_this_build("HTTP (`baton serve`)"))),
        _ => Err(bad_url(ACCEPTED_FORMS.to_owned())),
    }
}

fn compiled_without(name: &str, feature: &str) -> String {
    format!("this build of baton was compiled without the {name} store (cargo feature `{feature}`)")
}

fn not_in_this_build(name: &str) -> String {
    format!("this build of baton does not include the {name} store yet; use sqlite:PATH")
}

#[cfg(feature = "sqlite")]
fn parse_sqlite_path(rest: &str) -> std::result::Result<Target, String> {
    let path = match rest.strip_prefix("//") {
        // `sqlite://` must be followed by an absolute path: `sqlite:///tmp/x.db`. Anything else
        // (`sqlite://host/x.db`) would be a host, which a local file cannot have.
        Some(after_slashes) if after_slashes.starts_with('/') => after_slashes,
        Some(_) => return Err(
            "`sqlite://` must be followed by an absolute path, as in `sqlite:///tmp/baton.db`; \
                 for a relative path write `sqlite:PATH`"
                .to_owned(),
        ),
        None => rest,
    };
    if path.is_empty() {
        return Err("no path after `sqlite:`; expected `sqlite:PATH`".to_owned());
    }
    // Resolved now so that `describe()` and error messages show where the file really is.
    let path = std::path::absolute(path).map_err(|error| {
        format!("cannot resolve `{path}` against the current directory: {error}")
    })?;
    Ok(Target::Sqlite(path))
}

#[cfg(not(feature = "sqlite"))]
fn parse_sqlite_path(_rest: &str) -> std::result::Result<Target, String> {
    Err("this build of baton does not include the SQLite store (feature `sqlite`)".to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match parse(url) {
            Err(StoreError::BadUrl { reason, .. }) => reason,
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn memory_urls() {
        assert_eq!(parse("memory:").unwrap(), Target::Memory);
        assert_eq!(parse("MEMORY:").unwrap(), Target::Memory);
        assert!(reason("memory:x").contains("no path"));
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_urls() {
        let cwd = std::env::current_dir().unwrap();
        let cases: &[(&str, PathBuf)] = &[
            ("sqlite:/tmp/x.db", PathBuf::from("/tmp/x.db")),
            ("sqlite:///tmp/x.db", PathBuf::from("/tmp/x.db")),
            ("sqlite:x.db", cwd.join("x.db")),
            (
                "sqlite:dir/with space/ü%20.db",
                cwd.join("dir/with space/ü%20.db"),
            ),
            ("SQLite:/a:b.db", PathBuf::from("/a:b.db")),
        ];
        for (url, expected) in cases {
            assert_eq!(
                parse(url).unwrap(),
                Target::Sqlite(expected.clone()),
                "{url}"
            );
        }
        assert!(reason("sqlite:").contains("no path"));
        assert!(reason("sqlite://host/x.db").contains("absolute path"));
    }

    #[cfg(not(feature = "sqlite"))]
    #[test]
    fn sqlite_urls_without_the_sqlite_store() {
        assert!(reason("sqlite:/tmp/x.db").contains("does not include the SQLite store"));
    }

    /// `parse` never opens a server store; a build without one names the missing feature.
    #[test]
    fn server_stores_are_handed_over_or_named_as_compiled_out() {
        for (url, name) in [
            ("postgres://u@h/db", "PostgreSQL"),
            ("postgresql://h/db", "PostgreSQL"),
            ("redis://h", "Redis"),
            ("rediss://h", "Redis"),
            ("etcd://h:2379/p", "etcd"),
            ("s3://bucket/p", "S3"),
            ("dynamodb://table", "DynamoDB"),
        ] {
            let reason = reason(url);
            assert!(
                reason.contains(name) && reason.contains("compiled without"),
                "{url}: {reason}"
            );
        }
    }

    #[test]
    fn other_schemes_are_not_in_this_build() {
        let cases = [("http://h:8080", "HTTP"), ("https://h", "HTTP")];
        for (url, name) in cases {
            let reason = reason(url);
            assert!(
                reason.contains(name) && reason.contains("use sqlite:PATH"),
                "{url}: {reason}"
            );
        }
    }

    #[test]
    fn unknown_forms_list_the_accepted_ones() {
        for url in ["", "baton.db", "ftp://x", "mysql://h/db"] {
            assert!(reason(url).contains("sqlite:PATH"), "{url}");
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
