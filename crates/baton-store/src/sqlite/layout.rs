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
pub const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) FROM baton_history WHERE key = ?1";

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
     AND seq IN (SELECT seq FROM baton_history WHERE key = ?1 ORDER BY seq LIMIT 64)
     AND coalesce(written_ms, 0) < ?2";

/// `?3` entries of `?1`'s history after the seq `?2`, oldest first.
pub const HISTORY_AFTER: &str = "SELECT seq, entry FROM baton_history WHERE key = ?1 AND seq > ?2
     ORDER BY seq ASC LIMIT ?3";

/// The newest `?2` entries of `?1`'s history, newest first.
pub const HISTORY_TAIL: &str =
    "SELECT seq, entry FROM baton_history WHERE key = ?1 ORDER BY seq DESC LIMIT ?2";

/// Keys from `?1` up to (not including) `?2`.
pub const LIST_RANGE: &str = "SELECT key FROM baton_docs WHERE key >= ?1 AND key < ?2 ORDER BY key";

/// Keys from `?1` up (a prefix without successor).
pub const LIST_FROM: &str = "SELECT key FROM baton_docs WHERE key >= ?1 ORDER BY key";

/// The due index under a prefix: `?1` prefix, `?2` its successor (or NULL), `?3` limit. The
/// partial index on (due_ms, key) gives the rows in order; the key range filters them (keys
/// that have no due time are not in the index at all).
pub const DUE_KEYS: &str = "SELECT key, due_ms FROM baton_docs
     WHERE due_ms IS NOT NULL AND key >= ?1 AND (?2 IS NULL OR key < ?2)
     ORDER BY due_ms, key LIMIT ?3";

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
