//! rusqlite's errors, as the store's errors that say what to do (a locked file, a file that is
//! not a database, a read-only disk). Only a locked file heals by itself
//! ([`StoreError::Unavailable`]); the others need someone to move or fix the file
//! ([`StoreError::Unusable`]).

use std::path::Path;

use rusqlite::ErrorCode;

use super::BUSY_TIMEOUT;
use crate::StoreError;

/// Maps a SQLite error to the store's error, saying what to do where there is something to do.
pub(super) fn sqlite_error(description: &str, path: &Path, error: rusqlite::Error) -> StoreError {
    let unavailable = |reason: String| StoreError::Unavailable {
        store: description.to_owned(),
        reason,
    };
    let unusable = |reason: String| StoreError::Unusable {
        store: description.to_owned(),
        reason,
    };
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => unavailable(format!(
            "{} is locked: another process holds a write transaction on it (waited up to {} s); \
             try again, or find that process with `fuser {}`",
            path.display(),
            BUSY_TIMEOUT.as_secs(),
            path.display()
        )),
        Some(ErrorCode::NotADatabase) => unusable(format!(
            "{} is not a SQLite database; move it away or choose another file for the store",
            path.display()
        )),
        Some(ErrorCode::ReadOnly) => unusable(format!(
            "{} cannot be written ({error}); put the store on a writable local disk",
            path.display()
        )),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
            unusable(format!("{}: {error}", path.display()))
        }
        _ => StoreError::Backend {
            store: description.to_owned(),
            source: Box::new(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_and_foreign_files_say_what_to_do() {
        let path = Path::new("/data/baton.db");
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        // (code, what the message says, whether it heals)
        let cases = [
            (
                rusqlite::ffi::SQLITE_BUSY,
                "another process holds a write transaction",
                true,
            ),
            (
                rusqlite::ffi::SQLITE_LOCKED,
                "another process holds a write transaction",
                true,
            ),
            (rusqlite::ffi::SQLITE_NOTADB, "not a SQLite database", false),
            (rusqlite::ffi::SQLITE_READONLY, "writable local disk", false),
            (rusqlite::ffi::SQLITE_CANTOPEN, "/data/baton.db", false),
            (rusqlite::ffi::SQLITE_PERM, "/data/baton.db", false),
        ];
        for (code, expected, heals) in cases {
            let error = sqlite_error("sqlite:/data/baton.db", path, failure(code));
            let message = error.to_string();
            assert_eq!(error.heals(), heals, "{code}: {error:?}");
            assert!(message.contains(expected), "{code}: {message}");
            assert!(message.contains("/data/baton.db"), "{code}: {message}");
        }
        let other = sqlite_error(
            "sqlite:/data/baton.db",
            path,
            failure(rusqlite::ffi::SQLITE_IOERR),
        );
        assert!(matches!(other, StoreError::Backend { .. }), "{other:?}");
    }
}
