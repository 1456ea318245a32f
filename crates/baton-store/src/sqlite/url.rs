//! `sqlite:PATH` and `sqlite:///ABSOLUTE/PATH`: which file the store keeps.
//!
//! Paths are taken literally (no percent-decoding, no `~` expansion) and resolved against the
//! current directory at once, so that `describe()` and error messages show where the file
//! really is.

use std::path::PathBuf;

use crate::url::{has_scheme, redact_password};
use crate::StoreError;

/// The schemes of a SQLite store's URL.
pub const SCHEMES: &[&str] = &["sqlite"];

/// Whether `url` names a SQLite store (`sqlite:`, in any case).
pub fn is_sqlite_url(url: &str) -> bool {
    has_scheme(url, SCHEMES)
}

/// The absolute path a `sqlite:` URL names.
pub fn parse(url: &str) -> Result<PathBuf, StoreError> {
    parse_path(url).map_err(|reason| StoreError::BadUrl {
        url: redact_password(url),
        reason,
    })
}

fn parse_path(url: &str) -> Result<PathBuf, String> {
    let rest = match url.split_once(':') {
        Some((_, rest)) if is_sqlite_url(url) => rest,
        _ => return Err("expected `sqlite:PATH` or `sqlite:///ABSOLUTE/PATH`".to_owned()),
    };
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
    std::path::absolute(path)
        .map_err(|error| format!("cannot resolve `{path}` against the current directory: {error}"))
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
            assert_eq!(parse(url).unwrap(), expected.clone(), "{url}");
        }
        assert!(reason("sqlite:").contains("no path"));
        assert!(reason("sqlite://host/x.db").contains("absolute path"));
        assert!(reason("postgres://h/db").contains("expected `sqlite:PATH`"));
    }
}
