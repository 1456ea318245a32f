//! How documents, history, records and watchers lie in the file: five tables (created and
//! migrated by `schema.rs`) and the statements that read and write them.
//!
//! | table | key | holds |
//! |---|---|---|
//! | `baton_docs` | `key` | `version` (counts writes from 1), `doc`, `due_ms` (the due index) |
//! | `baton_history` | `key`, `seq` | `entry`, `written_ms`; seqs count from 1 per key |
//! | `baton_records` | `key`, `name` | `bytes` |
//! | `baton_watchers` | `key`, `socket` | who to wake when the key changes (`doorbell.rs`) |
//! | `baton_watch_tags` | `key`, `socket`, `tag` | a watcher woken only by writes that name one of its tags |
//!
//! Keys are TEXT compared with memcmp, which for UTF-8 is code point order: `list` is a range
//! on the primary key up to [`crate::key_range::successor_text`], never `LIKE` (so `%` and `_`
//! are plain characters).

use rusqlite::{Connection, OptionalExtension};

use crate::{HistoryRecord, Version, Versioned};

/// Reads `?1`'s document: its version and bytes.
pub const READ_DOC: &str = "SELECT version, doc FROM baton_docs WHERE key = ?1";

/// Writes a document: `?1` key, `?2` version, `?3` document, `?4` due time.
pub const WRITE_DOC: &str =
    "INSERT INTO baton_docs (key, version, doc, due_ms) VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (key) DO UPDATE SET version = excluded.version,
        doc = excluded.doc, due_ms = excluded.due_ms";

/// The last seq of `?1`'s history (0 for none).
///
/// `CAST(?1 AS TEXT)`, here and in every statement that reads the history's index in seq
/// order, and a `LIMIT` cast to an integer: with a bare parameter in either place SQLite made
/// the plan depend on the value bound, and prepared the statement again at every run
/// (`no_statement_is_prepared_again_for_new_arguments`).
pub const LAST_SEQ: &str =
    "SELECT COALESCE(MAX(seq), 0) FROM baton_history WHERE key = CAST(?1 AS TEXT)";

/// Appends one entry: `?1` key, `?2` seq, `?3` entry, `?4` the writer's wall clock (ms).
pub const APPEND_HISTORY: &str =
    "INSERT INTO baton_history (key, seq, entry, written_ms) VALUES (?1, ?2, ?3, ?4)";

/// Trims `?1`'s history to the entries after seq `?2` (the newest seq less `history_keep`):
/// seqs of a key are consecutive, so exactly `history_keep` stay. A range of the primary key.
pub const TRIM_HISTORY_BY_COUNT: &str = "DELETE FROM baton_history WHERE key = ?1 AND seq <= ?2";

/// Trims, of `?1`'s 64 oldest entries, those written before `?2` (ms; an entry
/// without a time counts as old). Only the oldest are looked at, through the primary key, so a
/// CAS never scans a long history; a backlog of old entries goes over the next writes.
pub const TRIM_HISTORY_BY_AGE: &str = "DELETE FROM baton_history WHERE key = ?1
     AND seq IN (SELECT seq FROM baton_history WHERE key = CAST(?1 AS TEXT) ORDER BY seq LIMIT 64)
     AND coalesce(written_ms, 0) < ?2";

/// `?3` entries of `?1`'s history after the seq `?2`, oldest first.
pub const HISTORY_AFTER: &str = "SELECT seq, entry FROM baton_history
     WHERE key = CAST(?1 AS TEXT) AND seq > ?2 ORDER BY seq ASC LIMIT CAST(?3 AS INTEGER)";

/// The newest `?2` entries of `?1`'s history, newest first.
pub const HISTORY_TAIL: &str = "SELECT seq, entry FROM baton_history WHERE key = CAST(?1 AS TEXT)
     ORDER BY seq DESC LIMIT CAST(?2 AS INTEGER)";

/// Keys from `?1` up to (not including) `?2`.
pub const LIST_RANGE: &str = "SELECT key FROM baton_docs WHERE key >= ?1 AND key < ?2 ORDER BY key";

/// Keys from `?1` up (a prefix without successor).
pub const LIST_FROM: &str = "SELECT key FROM baton_docs WHERE key >= ?1 ORDER BY key";

/// The due index under a prefix: `?1` prefix, `?2` its successor (or NULL), `?3` limit. The
/// partial index on (due_ms, key) gives the rows in order; the key range filters them (keys
/// that have no due time are not in the index at all).
pub const DUE_KEYS: &str = "SELECT key, due_ms FROM baton_docs
     WHERE due_ms IS NOT NULL AND key >= ?1 AND (?2 IS NULL OR key < ?2)
     ORDER BY due_ms, key LIMIT CAST(?3 AS INTEGER)";

/// Writes a record: `?1` key, `?2` name, `?3` bytes, replacing the record of that name.
pub const PUT_RECORD: &str = "INSERT INTO baton_records (key, name, bytes) VALUES (?1, ?2, ?3)
     ON CONFLICT (key, name) DO UPDATE SET bytes = excluded.bytes";

/// Reads a record: `?1` key, `?2` name.
pub const GET_RECORD: &str = "SELECT bytes FROM baton_records WHERE key = ?1 AND name = ?2";

/// The abstract socket names watching `?1` (`doorbell.rs`).
pub const WATCHERS_OF: &str = "SELECT socket FROM baton_watchers WHERE key = ?1";

/// The tags of the sockets watching `?1` by tag (a socket with none is woken by every write),
/// read by a write under its lock.
pub const WATCH_TAGS_OF: &str = "SELECT socket, tag FROM baton_watch_tags WHERE key = ?1";

/// Enters tag `?3` of watcher `?2` of `?1`.
pub const ENTER_WATCH_TAG: &str =
    "INSERT INTO baton_watch_tags (key, socket, tag) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING";

/// Removes tag `?3` of watcher `?2` of `?1`.
pub const REMOVE_WATCH_TAG: &str =
    "DELETE FROM baton_watch_tags WHERE key = ?1 AND socket = ?2 AND tag = ?3";

/// Removes tag `?2` of every watcher of `?1`: its ticket ended. A socket left with no tag is
/// woken by every write, so the first write after its process died finds it gone.
pub const FORGET_WATCH_TAG: &str = "DELETE FROM baton_watch_tags WHERE key = ?1 AND tag = ?2";

/// Removes every tag of watcher `?2` of `?1`.
pub const REMOVE_WATCH_TAGS: &str = "DELETE FROM baton_watch_tags WHERE key = ?1 AND socket = ?2";

/// Enters `?2` as a watcher of `?1`.
pub const ENTER_WATCHER: &str =
    "INSERT INTO baton_watchers (key, socket) VALUES (?1, ?2) ON CONFLICT DO NOTHING";

/// Removes `?2` as a watcher of `?1`.
pub const REMOVE_WATCHER: &str = "DELETE FROM baton_watchers WHERE key = ?1 AND socket = ?2";

/// The version and bytes of `key`'s document.
pub fn read_row(connection: &Connection, key: &str) -> rusqlite::Result<Option<(i64, Vec<u8>)>> {
    connection
        .prepare_cached(READ_DOC)?
        .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
}

pub fn versioned((version, bytes): (i64, Vec<u8>)) -> Versioned {
    Versioned {
        version: Version(version.to_string()),
        bytes,
        arrivals: Vec::new(),
    }
}

pub fn history_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<HistoryRecord> {
    let seq: i64 = row.get(0)?;
    Ok(HistoryRecord {
        // baton writes seqs from 1; a negative one was not written by baton.
        seq: u64::try_from(seq).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, seq))?,
        bytes: row.get(1)?,
    })
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value;
    use rusqlite::{params_from_iter, StatementStatus};

    use super::*;
    use crate::url::OpenMode;

    /// Each statement with arguments of the kinds the store binds.
    fn statements() -> Vec<(&'static str, Vec<Value>)> {
        let key = || Value::Text("deploy/prod".into());
        let text = |s: &str| Value::Text(s.into());
        let int = Value::Integer;
        vec![
            (READ_DOC, vec![key()]),
            (LAST_SEQ, vec![key()]),
            (HISTORY_AFTER, vec![key(), int(0), int(10)]),
            (HISTORY_TAIL, vec![key(), int(10)]),
            (TRIM_HISTORY_BY_COUNT, vec![key(), int(0)]),
            (TRIM_HISTORY_BY_AGE, vec![key(), int(0)]),
            (LIST_RANGE, vec![text("deploy/"), text("deploy0")]),
            (LIST_FROM, vec![text("deploy/")]),
            (DUE_KEYS, vec![text("deploy/"), Value::Null, int(32)]),
            (GET_RECORD, vec![key(), text("segment")]),
            (WATCHERS_OF, vec![key()]),
            (WATCH_TAGS_OF, vec![key()]),
        ]
    }

    /// SQLite prepares a statement again before a run when its plan depended on the value bound
    /// last time, as a plan that reads an index in order did for `key = ?1` on the history
    /// (about a tenth of a lone writer's instructions, once per release): every statement
    /// here keeps one plan whatever it is given.
    #[test]
    fn no_statement_is_prepared_again_for_new_arguments() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("baton.db");
        let connection =
            super::super::schema::open_connection(&path, "test", None, OpenMode::Create)
                .expect("a fresh store file");
        for (sql, arguments) in statements() {
            // As the store runs them: from the connection's cache, a run at a time.
            let mut n_prepared_again = 0;
            for _ in 0..3 {
                let mut statement = connection.prepare_cached(sql).expect("the statement");
                let mut rows = statement
                    .query(params_from_iter(arguments.iter()))
                    .expect("runs");
                while rows.next().expect("a row").is_some() {}
                drop(rows);
                n_prepared_again = statement.get_status(StatementStatus::RePrepare);
            }
            assert_eq!(
                n_prepared_again, 0,
                "prepared again for new arguments: {sql}"
            );
            // And the plan still seeks in an index rather than reading a whole table.
            let plan: Vec<String> = connection
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .expect("a plan")
                .query_map(params_from_iter(arguments.iter()), |row| row.get(3))
                .expect("the plan's rows")
                .collect::<rusqlite::Result<_>>()
                .expect("the plan's rows");
            assert!(
                plan.iter().all(|step| !step.starts_with("SCAN baton_")),
                "{sql}: {plan:?}"
            );
        }
    }
}
