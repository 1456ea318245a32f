//! `sqlite:PATH` and `sqlite:///ABSOLUTE/PATH`: which file the store keeps.
//!
//! Paths are taken literally (no percent-decoding, no `~` expansion) and resolved against the
//! current directory at once, so that `describe()` and error messages show where the file
//! really is. A query after the last `?` is taken only when every parameter in it is a history
//! retention one (`history_keep`, `history_max_age`); otherwise the `?` is part of the path, as
//! it always was.

use std::path::PathBuf;

use crate::history_retention::HistoryRetention;
use crate::url::{has_scheme, redact_password};
use crate::StoreError;

/// The schemes of a SQLite store's URL.
pub const SCHEMES: &[&str] = &["sqlite"];

/// Whether `url` names a SQLite store (`sqlite:`, in any case).
pub fn is_sqlite_url(url: &str) -> bool {
    has_scheme(url, SCHEMES)
}

/// The absolute path a `sqlite:` URL names, and the history it keeps.
pub fn parse(url: &str) -> Result<(PathBuf, HistoryRetention), StoreError> {
    let (path_url, retention) = match url.rsplit_once('?') {
        Some((path_url, query))
            if query.split('&').all(|parameter| {
                let name = parameter
                    .split_once('=')
                    .map_or(parameter, |(name, _)| name);
                HistoryRetention::is_parameter(name)
            }) =>
        {
            // Only the query after the last `?`: a `?` before it is part of the path.
            let (_, retention) = HistoryRetention::take_from_url(&format!("?{query}")).map_err(
                |error| match error {
                    StoreError::BadUrl { reason, .. } => StoreError::BadUrl {
                        url: redact_password(url),
                        reason,
                    },
                    other => other,
                },
            )?;
            (path_url.to_owned(), retention)
        }
        _ => (url.to_owned(), HistoryRetention::default()),
    };
    let path = parse_path(&path_url).map_err(|reason| StoreError::BadUrl {
        url: redact_password(url),
        reason,
    })?;
    Ok((path, retention))
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
            assert_eq!(
                parse(url).unwrap(),
                (expected.clone(), HistoryRetention::default()),
                "{url}"
            );
        }
        assert!(reason("sqlite:").contains("no path"));
        assert!(reason("sqlite://host/x.db").contains("absolute path"));
        assert!(reason("postgres://h/db").contains("expected `sqlite:PATH`"));
    }

    /// Retention parameters are taken after the last `?`; any other query is part of the path.
    #[test]
    fn retention_parameters_and_question_marks_in_paths() {
        let keep = |keep| HistoryRetention {
            keep,
            max_age: None,
        };
        assert_eq!(
            parse("sqlite:/tmp/x.db?history_keep=5").unwrap(),
            (PathBuf::from("/tmp/x.db"), keep(5))
        );
        assert_eq!(
            parse("sqlite:/tmp/why?.db?history_keep=5&history_max_age=1h").unwrap(),
            (
                PathBuf::from("/tmp/why?.db"),
                HistoryRetention {
                    keep: 5,
                    max_age: Some(std::time::Duration::from_secs(3600))
                }
            )
        );
        assert_eq!(
            parse("sqlite:/tmp/x.db?mode=ro").unwrap(),
            (
                PathBuf::from("/tmp/x.db?mode=ro"),
                HistoryRetention::default()
            )
        );
        assert!(reason("sqlite:/tmp/x.db?history_keep=0").contains("at least 1"));
    }
}
