//! Opening a store file: the connection's settings, WAL, and the schema and its version.
//!
//! Many processes may open one fresh file at the same moment (a build starting a dozen `baton
//! run`s), so every step here is safe under that race: the journal-mode switch and the schema
//! creation retry on `SQLITE_BUSY`, and the schema is created with `IF NOT EXISTS` inside
//! `BEGIN IMMEDIATE`, so exactly one process creates it and the others find it done.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use super::errors::sqlite_error;
use super::BUSY_TIMEOUT;
use crate::url::OpenMode;
use crate::{Result, StoreError};

/// The schema this code reads and writes. Bump it with a step in [`MIGRATIONS`].
pub(super) const SCHEMA_VERSION: u64 = 4;

/// The WAL's length, in pages, past which a commit checkpoints it, in a process that stays
/// (a server, a worker, an application): SQLite's default, where each checkpoint (two
/// `fsync`s) costs that process's own writes; at 128 pages one writer alone ran 15% fewer
/// cycles a second (B2 of BENCHMARKS.md, alternating rounds).
const WAL_CHECKPOINT_PAGES: u32 = 1000;

/// The same, in a process that runs one command and exits ([`one_command_per_process`]):
/// every such process that opens the file alone reads the whole WAL to rebuild its index, so
/// it keeps the WAL short for the next one (a fraction of a millisecond to read); a command
/// writes a handful of pages, so a checkpoint comes every few dozen commands.
const WAL_CHECKPOINT_PAGES_ONE_COMMAND: u32 = 128;

/// Whether this process runs one command and exits ([`one_command_per_process`]).
static ONE_COMMAND: AtomicBool = AtomicBool::new(false);

/// Says that this process runs one command and exits (the CLI's, but for `serve` and
/// `worker`): the files it opens from then on keep their WAL short for the next process.
pub fn one_command_per_process() {
    ONE_COMMAND.store(true, Ordering::Relaxed);
}

/// How long opening keeps retrying steps that failed with `SQLITE_BUSY` without waiting (the
/// busy timeout does not cover every lock SQLite takes while a fresh file is set up).
const OPEN_RETRY_FOR: Duration = Duration::from_secs(10);

/// Version 1: the schema's version, documents, history.
const CREATE_TABLES_V1: &str = "
    CREATE TABLE IF NOT EXISTS baton_meta (name TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE IF NOT EXISTS baton_docs (
        key TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        doc BLOB NOT NULL
    );
    CREATE TABLE IF NOT EXISTS baton_history (
        key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry BLOB NOT NULL,
        PRIMARY KEY (key, seq)
    );
";

/// Version 2: records, kept beside their key's document and never read with it. A table of
/// their own, so that `list` (on `baton_docs`) never meets one, and a key's records are the
/// rows of its own (key, name) range. A rowid table, not `WITHOUT ROWID`: a record may be
/// 320 KiB, far past the row size `WITHOUT ROWID` suits.
const CREATE_RECORDS_V2: &str = "
    CREATE TABLE IF NOT EXISTS baton_records (
        key TEXT NOT NULL,
        name TEXT NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (key, name)
    );
";

/// Version 3: the due index — when each key next needs a worker, set by every CAS
/// (`Store::cas_due`), so an idle worker reads only the keys that have jobs to look at. A
/// partial index: keys without a due time (most of them, once their jobs are done) cost it
/// nothing.
const DUE_INDEX_V3: &str = "
    ALTER TABLE baton_docs ADD COLUMN due_ms INTEGER;
    CREATE INDEX IF NOT EXISTS baton_docs_due ON baton_docs (due_ms, key)
        WHERE due_ms IS NOT NULL;
";

/// Version 4: when each history entry was written (the writer's wall clock, ms since the Unix
/// epoch), so that `history_max_age` can trim by age in the CAS that appends. Entries written
/// before it have none and count as old.
const HISTORY_WRITTEN_V4: &str = "
    ALTER TABLE baton_history ADD COLUMN written_ms INTEGER;
";

/// Who to wake when a key changes, and the tags a watcher is woken for alone (`doorbell.rs`).
/// Not a schema version of its own: an older baton must keep opening the file (it neither
/// reads nor writes these tables, and only its wake-ups are slower for a newer watcher, which
/// then reads by timer; it wakes a tagged watcher at every write, as it wakes any). `IF NOT
/// EXISTS` on a table that exists takes no write lock, so opening an existing file writes
/// nothing.
const CREATE_WATCHERS: &str = "
    CREATE TABLE IF NOT EXISTS baton_watchers (
        key TEXT NOT NULL,
        socket TEXT NOT NULL,
        PRIMARY KEY (key, socket)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS baton_watch_tags (
        key TEXT NOT NULL,
        socket TEXT NOT NULL,
        tag TEXT NOT NULL,
        PRIMARY KEY (key, socket, tag)
    ) WITHOUT ROWID;
";

/// The step to each version from the one before it: `MIGRATIONS[n]` brings a file at version
/// `n` (0: never set up) to `n + 1`. All the steps a file needs run in one transaction with the
/// version's update, under the write lock, after the version was read again under it: each
/// step runs once per file.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    CREATE_TABLES_V1,
    CREATE_RECORDS_V2,
    DUE_INDEX_V3,
    HISTORY_WRITTEN_V4,
];

/// Opens `path` (absolute) in WAL mode with the current schema: with [`OpenMode::Create`],
/// creating it and its directories if missing; with [`OpenMode::Existing`], only a file baton
/// set up. Blocking: call it through `blocking::run`.
pub(super) fn open_connection(
    path: &Path,
    description: &str,
    vfs: Option<&str>,
    mode: OpenMode,
) -> Result<Connection> {
    let unusable = |reason: String| StoreError::Unusable {
        store: description.to_owned(),
        reason,
    };
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    match mode {
        OpenMode::Create => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|error| {
                    unusable(format!(
                        "cannot create the directory {}: {error}; choose a writable place for \
                         the store (--store sqlite:PATH or BATON_STORE)",
                        parent.display()
                    ))
                })?;
            }
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        OpenMode::Existing if !path.exists() => return Err(missing(description)),
        OpenMode::Existing => {}
    }
    // No SQLITE_OPEN_URI: the path is a file name, even if it starts with `file:`. No mutex in
    // SQLite either: the store keeps the connection behind its own.
    let opened = match vfs {
        Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs),
        None => Connection::open_with_flags(path, flags),
    };
    let mut connection = opened.map_err(|error| sqlite_error(description, path, error))?;
    connection
        .busy_handler(Some(wait_while_busy))
        .map_err(|error| sqlite_error(description, path, error))?;
    // SQLite silently opens a write-protected file read-only; baton must write to take a lock.
    if connection.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(unusable(format!(
            "{} is read-only; baton writes to its store on every operation: put it on a writable local disk",
            path.display()
        )));
    }

    if mode == OpenMode::Existing {
        // A file baton never set up (an empty file, another program's database) is no store
        // either; checked before WAL mode is enabled, which would write to it.
        let version = retry_while_busy(
            || read_schema_version(&connection, description),
            description,
            path,
        )?;
        if version.is_none() {
            return Err(missing(description));
        }
    }
    retry_while_busy(|| enable_wal(&connection), description, path)?;
    connection
        .pragma_update(None, "synchronous", "NORMAL")
        .map_err(|error| sqlite_error(description, path, error))?;
    keep_wal_on_close(&connection).map_err(|error| sqlite_error(description, path, error))?;
    retry_while_busy(|| migrate(&mut connection, description), description, path)?;
    retry_while_busy(
        || Ok(connection.execute_batch(CREATE_WATCHERS)?),
        description,
        path,
    )?;
    Ok(connection)
}

/// Most baton processes live for one command, and the last connection to a file to close
/// would checkpoint its WAL into it (three `fsync`s), then delete the WAL and its index, for
/// the next process to create again: in a `baton run` that was more time than its turn's
/// writes. The WAL is left for the next process instead, which rebuilds the index by reading
/// it (a few microseconds a page); so that this stays small, the WAL is checkpointed by
/// whichever commit takes it past [`WAL_CHECKPOINT_PAGES_ONE_COMMAND`] in a short-lived
/// process, [`WAL_CHECKPOINT_PAGES`] in one that stays.
fn keep_wal_on_close(connection: &Connection) -> rusqlite::Result<()> {
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    let pages = if ONE_COMMAND.load(Ordering::Relaxed) {
        WAL_CHECKPOINT_PAGES_ONE_COMMAND
    } else {
        WAL_CHECKPOINT_PAGES
    };
    connection.pragma_update(None, "wal_autocheckpoint", pages)
}

/// The error for a store that is not there, opened to be read.
fn missing(description: &str) -> StoreError {
    StoreError::Missing {
        store: description.to_owned(),
        reason: "check the path, or run `baton init` (or any command that writes) to create it"
            .to_owned(),
    }
}

/// How long a writer that finds the file's write lock taken waits before it tries again: a
/// little at first, more as the wait goes on.
///
/// SQLite's own handler (`busy_timeout`) sleeps 1, 2, 5, 10, … up to 100 ms between tries. A
/// baton transaction holds the lock for tens of microseconds, so a writer that just missed it
/// slept dozens of times longer than it stayed taken — and on a first-come key everyone waits
/// for that writer when it is the holder releasing (B3 of BENCHMARKS.md: waits of 100–200 ms at the
/// 99th percentile, and grants per second that varied 2.5-fold from run to run).
fn pause_before_try(n_tries: u32) -> Duration {
    match n_tries {
        0..=63 => Duration::from_micros(50),
        64..=127 => Duration::from_micros(250),
        _ => Duration::from_millis(1),
    }
}

thread_local! {
    /// When the wait for the write lock that this thread's connection is in began.
    static BUSY_SINCE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// The connection's busy handler: called by SQLite with the number of earlier calls for this
/// wait, on the thread running the statement; `true` tries again, `false` gives up with
/// `SQLITE_BUSY` (after [`BUSY_TIMEOUT`], as `busy_timeout` would).
fn wait_while_busy(n_earlier_calls: i32) -> bool {
    let now = Instant::now();
    let n_tries = u32::try_from(n_earlier_calls).unwrap_or(0);
    let since = BUSY_SINCE.with(|since| match since.get() {
        Some(started) if n_tries > 0 => started,
        _ => {
            since.set(Some(now));
            now
        }
    });
    if now.duration_since(since) >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(pause_before_try(n_tries));
    true
}

/// WAL lets readers run while one process writes, which many processes on one file need.
/// Networked and virtual file systems (NFS, SMB, 9p) cannot share its memory-mapped index, and
/// SQLite then keeps the old journal mode: refuse such a file rather than run with locks that
/// may not hold.
fn enable_wal(connection: &Connection) -> Result<(), OpenError> {
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if mode.eq_ignore_ascii_case("wal") {
        Ok(())
    } else {
        Err(OpenError::Refused(format!(
            "SQLite's WAL mode cannot work on this file (journal mode stayed `{mode}`), as on \
             network, 9p or read-only file systems; put the store on a local disk"
        )))
    }
}

/// Brings the file's schema to [`SCHEMA_VERSION`] from whichever earlier version it is at, or
/// refuses a file written by a newer baton.
fn migrate(connection: &mut Connection, description: &str) -> Result<(), OpenError> {
    // Fast path, without the write lock: an existing file at the current version.
    if read_schema_version(connection, description)? == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    // IMMEDIATE takes the write lock before reading, so racing openers take turns: the first
    // migrates, the others find it done. The version is read again under the lock for that.
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // `read_schema_version` refuses every version above ours; `None` is a file baton never set
    // up.
    let found = read_schema_version(&transaction, description)?.unwrap_or(0);
    if found < SCHEMA_VERSION {
        // `found` is at most SCHEMA_VERSION, the length of MIGRATIONS.
        let steps = MIGRATIONS.get(found as usize..).unwrap_or_default();
        for step in steps {
            transaction.execute_batch(step)?;
        }
        transaction.execute(
            "INSERT INTO baton_meta (name, value) VALUES ('schema_version', ?1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [SCHEMA_VERSION.to_string()],
        )?;
        tracing::debug!(
            store = description,
            from = found,
            to = SCHEMA_VERSION,
            "migrated the store's schema"
        );
    }
    transaction.commit()?;
    Ok(())
}

/// The file's schema version: `None` when baton has not set one up yet, else one from 1 to
/// [`SCHEMA_VERSION`] (an older one is migrated). A version newer than this code, or one it
/// cannot read, is [`StoreError::Incompatible`].
fn read_schema_version(
    connection: &Connection,
    description: &str,
) -> Result<Option<u64>, OpenError> {
    let has_meta: Option<i64> = connection
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'baton_meta'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if has_meta.is_none() {
        return Ok(None);
    }
    let value: Option<Value> = connection
        .query_row(
            "SELECT value FROM baton_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    let text = match value {
        None => return Ok(None),
        Some(Value::Text(text)) => text,
        Some(Value::Integer(number)) => number.to_string(),
        Some(other) => format!("{other:?}"),
    };
    let incompatible = |reason: String| {
        OpenError::Store(StoreError::Incompatible {
            store: description.to_owned(),
            reason,
        })
    };
    match text.trim().parse::<u64>() {
        Ok(version) if (1..=SCHEMA_VERSION).contains(&version) => Ok(Some(version)),
        Ok(version) if version > SCHEMA_VERSION => Err(incompatible(format!(
            "schema version {version} is newer than this baton understands ({SCHEMA_VERSION}); upgrade baton"
        ))),
        _ => Err(incompatible(format!(
            "schema version `{text}` is not one this baton understands ({SCHEMA_VERSION}); \
             the file was not written by baton, or is damaged"
        ))),
    }
}

/// Why a step of opening failed.
enum OpenError {
    Sqlite(rusqlite::Error),
    /// The file cannot serve as a store; the reason says why and what to do.
    Refused(String),
    Store(StoreError),
}

impl From<rusqlite::Error> for OpenError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Sqlite(error)
    }
}

/// Runs `step` until it succeeds, fails with anything but busy/locked, or [`OPEN_RETRY_FOR`]
/// has passed, sleeping a little longer each time (with jitter, so racing openers spread out).
fn retry_while_busy<T>(
    mut step: impl FnMut() -> Result<T, OpenError>,
    description: &str,
    path: &Path,
) -> Result<T> {
    let started = Instant::now();
    let mut n_attempts: u32 = 0;
    loop {
        n_attempts = n_attempts.saturating_add(1);
        let error = match step() {
            Ok(value) => return Ok(value),
            Err(OpenError::Store(error)) => return Err(error),
            Err(OpenError::Refused(reason)) => {
                return Err(StoreError::Unusable {
                    store: description.to_owned(),
                    reason,
                })
            }
            Err(OpenError::Sqlite(error)) => error,
        };
        let busy = matches!(
            error.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        );
        if !busy || started.elapsed() >= OPEN_RETRY_FOR {
            return Err(sqlite_error(description, path, error));
        }
        tracing::debug!(path = %path.display(), n_attempts, "store file busy while opening; retrying");
        std::thread::sleep(backoff(n_attempts));
    }
}

/// 5 ms, 10 ms, … up to 200 ms, plus up to 15 ms of jitter from the clock's low bits (no random
/// number generator needed for this).
fn backoff(n_attempts: u32) -> Duration {
    let base_ms = 5u64.saturating_mul(u64::from(n_attempts.min(40)));
    let jitter_ms = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_micros())
            .unwrap_or(0)
            % 16,
    );
    Duration::from_millis(base_ms.min(200) + jitter_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_waits_briefly_for_the_lock_at_first_and_longer_later() {
        assert_eq!(pause_before_try(0), Duration::from_micros(50));
        let pauses: Vec<_> = (0..1000).map(pause_before_try).collect();
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(pause_before_try(u32::MAX), Duration::from_millis(1));
        // The first hundred tries together wait less than SQLite's first two.
        let first: Duration = (0..100).map(pause_before_try).sum();
        assert!(first < Duration::from_millis(15), "{first:?}");
    }

    #[test]
    fn a_writer_gives_up_after_the_busy_timeout_and_a_new_wait_starts_afresh() {
        let long_ago = Instant::now()
            .checked_sub(BUSY_TIMEOUT + Duration::from_secs(1))
            .expect("the machine has been up for longer than the busy timeout");
        BUSY_SINCE.with(|since| since.set(Some(long_ago)));
        assert!(!wait_while_busy(7), "a wait past BUSY_TIMEOUT gives up");
        assert!(
            wait_while_busy(0),
            "the first call of a new wait tries again"
        );
        assert!(wait_while_busy(1));
    }
}
