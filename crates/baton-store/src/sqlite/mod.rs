//! The embedded default store: one SQLite file that many processes on one host share.
//!
//! Every CAS is one `BEGIN IMMEDIATE` transaction (read the version, write the document, append
//! the history), so it costs one round trip to the file and two processes can never both win.
//! An [`Store::update`] is the same transaction with the caller's computation between the read
//! and the write: the lock is the file's, held for microseconds, so writers of a hot key queue
//! on it (the busy handler, `schema.rs`) instead of losing CASes and retrying.
//! The file runs in WAL mode so readers never wait for the writer; a writer waits for another
//! up to [`BUSY_TIMEOUT`]. Records are rows of a table of their own (`baton_records`, keyed by
//! key and name), written by one upsert outside any CAS. The clock is the host's boot-time clock ([`crate::boot_clock`]): every
//! process sharing the file shares the host, so none is needed from the file.
//!
//! rusqlite is blocking: the store keeps one connection behind a mutex and runs every operation
//! on tokio's blocking pool, never on the async workers, but in a process that runs one command
//! and has nothing else to do while a call waits (`blocking.rs`).

mod blocking;
mod doorbell;
mod errors;
mod layout;
mod schema;
mod tags;
pub mod url;
mod watch;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::boot_clock::host_boot_clock;
use crate::history_retention::HistoryRetention;
use crate::key_range::successor_text;
use crate::url::OpenMode;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, Change, Compute, DueKey,
    HistoryRecord, Replacement, Result, Store, StoreClock, StoreError, Updated, Version, Versioned,
    WatchHandle, WithDocs,
};
pub use blocking::{calls_on_the_calling_thread, CallsElsewhere};
use errors::sqlite_error;
use layout::{history_record, read_row, versioned};
pub use schema::one_command_per_process;

/// How long a write waits for another process's write transaction before giving up with
/// [`StoreError::Unavailable`]. baton's transactions last microseconds, so reaching this means
/// a process is stuck holding the file (or a human has it open in a shell).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`Store`] in one SQLite file. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// One connection per store: SQLite serialises writers per file anyway, and operations only
    /// hold the lock inside one blocking call (`blocking.rs`), never across an `.await`.
    connection: Mutex<Connection>,
    path: PathBuf,
    /// Wake-ups for any write to the file, from inotify, started by the first `watch_prefix`
    /// (or `watch`, where no doorbell can be bound).
    watcher: Mutex<Option<watch::Watcher>>,
    /// Wake-ups for one key, with its document, from its writers (`doorbell.rs`), started by
    /// the first `watch`.
    doorbell: std::sync::OnceLock<Option<doorbell::Doorbell>>,
    /// Sends this store's writes to their keys' watchers.
    ringer: doorbell::Ringer,
    /// Watchers whose names nobody holds any more, removed by this store's next write.
    gone_watchers: Mutex<Vec<(String, String)>>,
    /// Per key, this store's watch tags left for its next write to the key (`watch_by`).
    deferred_tags: Mutex<HashMap<String, tags::Entries>>,
    /// `sqlite:<absolute path>`, computed once.
    description: String,
    /// How much history each CAS leaves per key.
    retention: HistoryRetention,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file and its directories if missing. A relative
    /// `path` is taken from the current directory.
    ///
    /// Fails with [`StoreError::Unusable`] when the file cannot be used (not a SQLite file,
    /// read-only, a file system where WAL cannot work), with [`StoreError::Unavailable`] when it
    /// stayed locked for longer than [`BUSY_TIMEOUT`], and with [`StoreError::Incompatible`]
    /// when a newer baton wrote it.
    pub async fn open(path: &Path) -> Result<SqliteStore> {
        Self::open_with_vfs(path, None).await
    }

    /// [`SqliteStore::open`], keeping the history `retention` says (each CAS that appends
    /// history trims the key's oldest entries in the same transaction).
    pub async fn open_with_retention(
        path: &Path,
        retention: HistoryRetention,
    ) -> Result<SqliteStore> {
        Self::open_with(path, None, retention, OpenMode::Create).await
    }

    /// Opens the store a `sqlite:PATH` or `sqlite:///ABSOLUTE/PATH` URL names (see [`url`]).
    pub async fn open_url(url: &str) -> Result<SqliteStore> {
        Self::open_url_in(url, OpenMode::Create).await
    }

    /// [`SqliteStore::open_url`] in `mode`: with [`OpenMode::Existing`], a file that is not
    /// there, or that baton never set up, is [`StoreError::Missing`], and nothing is created
    /// (no directory, no file, no table).
    pub async fn open_url_in(url: &str, mode: OpenMode) -> Result<SqliteStore> {
        let (path, retention) = url::parse(url)?;
        Self::open_with(&path, None, retention, mode).await
    }

    /// Opens the store through the named SQLite VFS (`None`: the default). Tests use
    /// `unix-dotfile`, whose files have no shared memory, to stand for a file system where WAL
    /// cannot work.
    #[doc(hidden)]
    pub async fn open_with_vfs(path: &Path, vfs: Option<&'static str>) -> Result<SqliteStore> {
        Self::open_with(path, vfs, HistoryRetention::default(), OpenMode::Create).await
    }

    async fn open_with(
        path: &Path,
        vfs: Option<&'static str>,
        retention: HistoryRetention,
        mode: OpenMode,
    ) -> Result<SqliteStore> {
        let path = std::path::absolute(path).map_err(|error| StoreError::Unusable {
            store: format!("sqlite:{}", path.display()),
            reason: format!("cannot resolve the path against the current directory: {error}"),
        })?;
        let description = format!("sqlite:{}", path.display());
        let opened = {
            let (path, description) = (path.clone(), description.clone());
            blocking::run(move || schema::open_connection(&path, &description, vfs, mode)).await
        };
        let connection = opened.map_err(|error| StoreError::Backend {
            store: description.clone(),
            source: error,
        })??;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                connection: Mutex::new(connection),
                path,
                watcher: Mutex::new(None),
                doorbell: std::sync::OnceLock::new(),
                ringer: doorbell::Ringer::default(),
                gone_watchers: Mutex::new(Vec::new()),
                deferred_tags: Mutex::new(HashMap::new()),
                description,
                retention,
            }),
        })
    }

    /// The absolute path of the store's file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The socket names entered as watchers of `key` (`doorbell.rs`), for tests.
    #[doc(hidden)]
    pub async fn watcher_names(&self, key: &str) -> Result<Vec<String>> {
        let key = key.to_owned();
        self.run(move |connection| {
            connection
                .prepare_cached(layout::WATCHERS_OF)?
                .query_map([&key], |row| row.get(0))?
                .collect()
        })
        .await
    }

    /// How many wake-up datagrams this store's writes have sent (`doorbell.rs`), for tests.
    #[doc(hidden)]
    pub fn wake_ups_sent(&self) -> u64 {
        self.inner.ringer.sent()
    }

    /// A watch of `key` (by `tag`: [`Store::watch_tagged`]) through this store's doorbell,
    /// its entries in the file brought to what its watchers need (`tags::plan`); through
    /// the file's inotify watch where no doorbell can be bound.
    ///
    /// The entries are written before it returns, but for a watch by tag of a key already
    /// entered here, whose tag entries are left to this store's next write to the key (in that
    /// write's transaction): a waiter watches before its enqueue, and a transaction of its own
    /// for each wait cost a loop of waits in one process a fifth of its turns. Until then, a
    /// write naming only other tags may pass the socket by. A second watch of the key before
    /// that write writes them at once.
    async fn watch_by(&self, key: &str, tag: Option<&str>) -> Result<Option<WatchHandle>> {
        let bell = self.inner.doorbell.get_or_init(|| {
            doorbell::Doorbell::start(&self.inner.path)
                .inspect_err(|error| {
                    tracing::debug!(%error, "no wake-up socket; waiters follow the file instead");
                })
                .ok()
        });
        let Some(bell) = bell else {
            return Ok(self.watch_file());
        };
        let mut entered = bell.entries().await;
        let receiver = bell.subscribe(key, tag);
        let entries = bell.plan(&entered, key);
        let deferred = lock(&self.inner.deferred_tags).remove(key);
        if tag.is_some() && deferred.is_none() && entries.only_tags() {
            if !entries.is_empty() {
                tags::record(&mut entered, key, &entries);
                lock(&self.inner.deferred_tags).insert(key.to_owned(), entries);
            }
            return Ok(Some(WatchHandle::new(receiver)));
        }
        let entries = Arc::new(deferred.unwrap_or_default().then(entries));
        if !entries.is_empty() {
            let (owned_key, name, planned) =
                (key.to_owned(), bell.name().to_owned(), Arc::clone(&entries));
            self.run(move |connection| {
                let transaction =
                    connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                enter(&transaction, &owned_key, &name, &planned)?;
                transaction.commit()
            })
            .await?;
            tags::record(&mut entered, key, &entries);
        }
        Ok(Some(WatchHandle::new(receiver)))
    }

    /// A wake-up at every write to the file, from inotify: one watcher per store, started on
    /// first use. Where inotify is not available (or runs out of watches), `None`: waiters poll.
    fn watch_file(&self) -> Option<WatchHandle> {
        let mut watcher = self
            .inner
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if watcher.is_none() {
            match watch::Watcher::start(&self.inner.path) {
                Ok(started) => *watcher = Some(started),
                Err(error) => {
                    tracing::debug!(%error, "no inotify watch; waiters poll");
                    return None;
                }
            }
        }
        watcher.as_ref().map(|w| WatchHandle::new(w.subscribe()))
    }

    /// Runs `operation` on the connection, on tokio's blocking pool or where the process asked
    /// (`blocking.rs`).
    async fn run<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = Arc::clone(&self.inner);
        let joined = blocking::run(move || {
            // A panic while the lock was held cannot leave a transaction open (rusqlite rolls
            // back on drop), so a poisoned connection is still usable.
            let mut connection = inner
                .connection
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            operation(&mut connection)
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(sqlite_error(
                &self.inner.description,
                &self.inner.path,
                error,
            )),
            Err(failed) => Err(StoreError::Backend {
                store: self.inner.description.clone(),
                source: failed,
            }),
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.inner.description.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: true,
            watch_documents: true,
            watch_tagged: true,
            conflict_returns_current: true,
            clock: true,
            clock_uncertain_ms: 0,
            due_index: true,
            locked_update: true,
            update_when_contended: false,
            watch_complete: false,
            arrivals: false,
            arrivals_by_default: false,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        let key = key.to_owned();
        self.run(move |connection| Ok(read_row(connection, &key)?.map(versioned)))
            .await
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        self.cas_waking(key, expected, bytes, history, due_ms, None)
            .await
    }

    async fn cas_waking(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
        wake: Option<&[String]>,
    ) -> Result<CasOutcome> {
        let key = key.to_owned();
        let expected = expected.cloned();
        let replacement = Replacement {
            bytes: bytes.to_vec(),
            history: history.to_vec(),
            due_ms,
            records: Vec::new(),
            wake: wake.map(<[String]>::to_vec),
            ended_tags: Vec::new(),
        };
        let inner = Arc::clone(&self.inner);
        self.run(move |connection| {
            // IMMEDIATE: take the write lock before reading the version, so the version read is
            // the one the write replaces (a DEFERRED read upgraded to a write can fail instead).
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let current = read_row(&transaction, &key)?;
            let matches = match (&current, &expected) {
                (None, None) => true,
                (Some((version, _)), Some(expected)) => expected.0 == version.to_string(),
                _ => false,
            };
            if !matches {
                // Dropping the transaction rolls it back; it wrote nothing.
                return Ok(CasOutcome::Conflict {
                    current: current.map(versioned),
                });
            }
            let current_version = current.map(|(version, _)| version);
            let version = replace(&inner, transaction, &key, current_version, replacement)?;
            Ok(CasOutcome::Written { version })
        })
        .await
    }

    async fn update(&self, key: &str, compute: Compute) -> Result<Option<Updated>> {
        let key = key.to_owned();
        let inner = Arc::clone(&self.inner);
        let updated = self.run(move |connection| {
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let row = read_row(&transaction, &key)?;
            let current_version = row.as_ref().map(|(version, _)| *version);
            match compute(row.map(versioned).as_ref()) {
                Change::Keep => Ok(Updated::Kept),
                Change::Write(replacement) => {
                    let version = replace(&inner, transaction, &key, current_version, replacement)?;
                    Ok(Updated::Written { version })
                }
            }
        });
        Ok(Some(updated.await?))
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = key.to_owned();
        // Sequence numbers are stored as SQLite's i64: nothing lies beyond i64::MAX.
        let after_seq = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |connection| {
            let mut select = connection.prepare_cached(layout::HISTORY_AFTER)?;
            let records = select.query_map((&key, after_seq, limit), history_record)?;
            records.collect()
        })
        .await
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = key.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |connection| {
            let mut select = connection.prepare_cached(layout::HISTORY_TAIL)?;
            let records = select.query_map((&key, limit), history_record)?;
            records.collect()
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let prefix = prefix.to_owned();
        self.run(move |connection| {
            // A range on the primary key, not LIKE: `%` and `_` in a prefix are plain
            // characters, and the range uses the index. SQLite compares TEXT with memcmp, which
            // for UTF-8 is code point order, the order `successor_text` works in.
            let keys: Vec<String> = match successor_text(&prefix) {
                Some(upper_bound) => connection
                    .prepare_cached(layout::LIST_RANGE)?
                    .query_map((&prefix, &upper_bound), |row| row.get(0))?
                    .collect::<rusqlite::Result<_>>()?,
                None => connection
                    .prepare_cached(layout::LIST_FROM)?
                    .query_map([&prefix], |row| row.get(0))?
                    .collect::<rusqlite::Result<_>>()?,
            };
            debug_assert!(keys.iter().all(|key| key.starts_with(&prefix)));
            Ok(keys)
        })
        .await
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        let prefix = prefix.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |connection| {
            let upper_bound = successor_text(&prefix);
            let rows: Vec<(String, i64)> = connection
                .prepare_cached(layout::DUE_KEYS)?
                .query_map((&prefix, &upper_bound, limit), |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let mut due = Vec::with_capacity(rows.len());
            for (n, (key, due_ms)) in rows.into_iter().enumerate() {
                let due_ms = u64::try_from(due_ms).unwrap_or(0);
                // Read apart from the index (no transaction spans both): as current as a
                // cache, which is all a worker trusts it to be.
                let doc = if docs.wants(n, due_ms) {
                    read_row(connection, &key)?.map(versioned)
                } else {
                    None
                };
                due.push(DueKey { key, due_ms, doc });
            }
            Ok(Some(due))
        })
        .await
    }

    async fn watch_prefix(&self, _prefix: &str) -> Result<Option<WatchHandle>> {
        // The file's watcher wakes at every commit, for any key: a prefix is all keys.
        Ok(self.watch_file())
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        self.watch_by(key, None).await
    }

    async fn watch_tagged(&self, key: &str, tag: &str) -> Result<Option<WatchHandle>> {
        self.watch_by(key, Some(tag)).await
    }

    async fn clock(&self) -> Result<StoreClock> {
        // Every process on this file runs on this host, so the host's clock is the store's, read
        // without touching the file (corrected for this process's time namespace, so that all
        // read the same). Where it cannot be known the store refuses for good: a wait would not
        // make it known.
        let host = host_boot_clock().map_err(|reason| StoreError::Backend {
            store: self.describe(),
            source: reason.into(),
        })?;
        Ok(StoreClock::Time {
            now_ms: host.now_ms,
            behind_ms: 0,
            epoch: host.epoch,
        })
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        let (key, name, bytes) = (key.to_owned(), name.to_owned(), bytes.to_vec());
        self.run(move |connection| {
            // One statement in autocommit: its own transaction.
            connection
                .prepare_cached(layout::PUT_RECORD)?
                .execute((&key, &name, &bytes))?;
            Ok(())
        })
        .await
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let (key, name) = (key.to_owned(), name.to_owned());
        self.run(move |connection| {
            connection
                .prepare_cached(layout::GET_RECORD)?
                .query_row((&key, &name), |row| row.get(0))
                .optional()
        })
        .await
    }
}

/// Brings the entries of watcher `name` to what `entries` says for `key`, in `transaction`.
fn enter(
    transaction: &rusqlite::Transaction<'_>,
    key: &str,
    name: &str,
    entries: &tags::Entries,
) -> rusqlite::Result<()> {
    for gone in &entries.forget {
        transaction
            .prepare_cached(layout::REMOVE_WATCHER)?
            .execute((gone, name))?;
        transaction
            .prepare_cached(layout::REMOVE_WATCH_TAGS)?
            .execute((gone, name))?;
    }
    if let Some(key) = &entries.enter {
        transaction
            .prepare_cached(layout::ENTER_WATCHER)?
            .execute((key, name))?;
    }
    for tag in &entries.remove_tags {
        transaction
            .prepare_cached(layout::REMOVE_WATCH_TAG)?
            .execute((key, name, tag))?;
    }
    for tag in &entries.add_tags {
        transaction
            .prepare_cached(layout::ENTER_WATCH_TAG)?
            .execute((key, name, tag))?;
    }
    Ok(())
}

/// Writes `replacement` over the key's document at `current_version` (as read in `transaction`,
/// which holds the write lock), commits, and wakes the key's watchers with the new document: the one write
/// path of [`Store::cas_due`] and [`Store::update`].
fn replace(
    inner: &Inner,
    transaction: rusqlite::Transaction<'_>,
    key: &str,
    current_version: Option<i64>,
    replacement: Replacement,
) -> rusqlite::Result<Version> {
    let Replacement {
        bytes,
        history,
        due_ms,
        records,
        wake,
        ended_tags,
    } = replacement;
    // SQLite's integers are i64; a due time past that is "never" for any real clock.
    let due_ms: Option<i64> = due_ms.and_then(|ms| i64::try_from(ms).ok());
    let new_version = match current_version {
        None => 1,
        Some(version) => version
            .checked_add(1)
            .ok_or(rusqlite::Error::IntegralValueOutOfRange(1, version))?,
    };
    for (name, record) in &records {
        // Records a caller computed under the lock are checked here, as `put_record` checks
        // them: a bad one is a bug, and the whole write is refused.
        check_record(name, record)
            .map_err(|error| rusqlite::Error::ToSqlConversionFailure(Box::new(error)))?;
        transaction
            .prepare_cached(layout::PUT_RECORD)?
            .execute((key, name, record))?;
    }
    transaction
        .prepare_cached(layout::WRITE_DOC)?
        .execute((key, new_version, &bytes, due_ms))?;
    if !history.is_empty() {
        append_history(&transaction, key, &history, inner.retention)?;
    }
    let gone = std::mem::take(&mut *lock(&inner.gone_watchers));
    let deferred = lock(&inner.deferred_tags).remove(key);
    let put_back = |inner: &Inner, gone, deferred: Option<tags::Entries>| {
        lock(&inner.gone_watchers).extend(gone);
        if let Some(entries) = deferred {
            lock(&inner.deferred_tags).insert(key.to_owned(), entries);
        }
    };
    let watchers = match watchers_of(&transaction, key, &gone, &ended_tags).and_then(|watchers| {
        enter_deferred(inner, &transaction, key, deferred.as_ref())?;
        Ok(watchers)
    }) {
        Ok(watchers) => watchers,
        Err(error) => {
            put_back(inner, gone, deferred);
            return Err(error);
        }
    };
    if let Err(error) = transaction.commit() {
        put_back(inner, Vec::new(), deferred);
        return Err(error);
    }
    wake_watchers(
        inner,
        tags::targets(watchers, wake.as_deref()),
        key,
        new_version,
        &bytes,
    );
    Ok(Version(new_version.to_string()))
}

/// Sends a committed write's wake-ups to the other sockets among `targets`, then delivers the
/// one to this store's own socket in memory: on a hot key two of every three went to the
/// writer's own socket (its release to its own ended ticket, its enqueue while its socket had
/// no tags, its claim to its own ticket), each a send, a receive and a copy of the document
/// through the kernel. The others go first: the next holder is in another process.
fn wake_watchers(
    inner: &Inner,
    mut targets: Vec<tags::Target>,
    key: &str,
    version: i64,
    doc: &[u8],
) {
    let bell = inner.doorbell.get().and_then(Option::as_ref);
    let own = bell.and_then(|bell| {
        let at = targets.iter().position(|t| t.name == bell.name())?;
        Some((bell, targets.swap_remove(at)))
    });
    if !targets.is_empty() {
        let gone = inner.ringer.ring(&targets, key, version, doc);
        lock(&inner.gone_watchers).extend(gone.into_iter().map(|name| (key.to_owned(), name)));
    }
    if let Some((bell, target)) = own {
        bell.deliver_own(key, version, doc, target.tags);
    }
}

/// Appends `history` to `key`'s log and trims it as `retention` says, in the transaction that
/// appends: the oldest go, seqs stay.
fn append_history(
    transaction: &rusqlite::Transaction<'_>,
    key: &str,
    history: &[Vec<u8>],
    retention: HistoryRetention,
) -> rusqlite::Result<()> {
    let last_seq: i64 = transaction
        .prepare_cached(layout::LAST_SEQ)?
        .query_row([key], |row| row.get(0))?;
    let mut insert = transaction.prepare_cached(layout::APPEND_HISTORY)?;
    let written_ms = wall_ms();
    let mut seq = last_seq;
    for entry in history {
        seq = seq
            .checked_add(1)
            .ok_or(rusqlite::Error::IntegralValueOutOfRange(1, seq))?;
        insert.execute((key, seq, entry, written_ms))?;
    }
    let keep = i64::try_from(retention.keep).unwrap_or(i64::MAX);
    transaction
        .prepare_cached(layout::TRIM_HISTORY_BY_COUNT)?
        .execute((key, seq.saturating_sub(keep)))?;
    if let Some(max_age_ms) = retention.max_age_ms() {
        let cut_ms = written_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
        transaction
            .prepare_cached(layout::TRIM_HISTORY_BY_AGE)?
            .execute((key, cut_ms))?;
    }
    Ok(())
}

/// Writes this store's watch tags of `key` left for its next write (`SqliteStore::watch_by`).
fn enter_deferred(
    inner: &Inner,
    transaction: &rusqlite::Transaction<'_>,
    key: &str,
    deferred: Option<&tags::Entries>,
) -> rusqlite::Result<()> {
    let name = inner
        .doorbell
        .get()
        .and_then(Option::as_ref)
        .map(|bell| bell.name());
    match (deferred, name) {
        (Some(entries), Some(name)) => enter(transaction, key, name, entries),
        _ => Ok(()),
    }
}

/// The watchers of `key`, each with its tags, read under the write lock; first removes the
/// `gone` ones (names whose sends were refused), and after the read the `ended` tags, which no
/// later write names.
fn watchers_of(
    transaction: &rusqlite::Transaction<'_>,
    key: &str,
    gone: &[(String, String)],
    ended: &[String],
) -> rusqlite::Result<Vec<(String, Option<String>)>> {
    for (key, name) in gone {
        transaction
            .prepare_cached(layout::REMOVE_WATCHER)?
            .execute((key, name))?;
        transaction
            .prepare_cached(layout::REMOVE_WATCH_TAGS)?
            .execute((key, name))?;
    }
    // Two statements, not a join: SQLite prepared the join again at every step (half of a
    // lone writer's lost cycles, measured in BENCHMARKS.md).
    let mut watchers: Vec<(String, Option<String>)> = transaction
        .prepare_cached(layout::WATCHERS_OF)?
        .query_map([key], |row| Ok((row.get(0)?, None)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // A socket's tags are entered with or after its own entry and removed with it, so a key
    // nobody watches has no tags to read or forget: a lone writer's case, spared two
    // statements a write.
    if watchers.is_empty() {
        return Ok(watchers);
    }
    let mut tags: HashMap<String, Vec<String>> = HashMap::new();
    for row in transaction
        .prepare_cached(layout::WATCH_TAGS_OF)?
        .query_map([key], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))?
    {
        let (socket, tag) = row?;
        tags.entry(socket).or_default().push(tag);
    }
    if !tags.is_empty() {
        let mut with_tags = Vec::with_capacity(watchers.len());
        for (socket, _) in watchers.drain(..) {
            match tags.get(&socket) {
                Some(mine) => {
                    with_tags.extend(mine.iter().map(|t| (socket.clone(), Some(t.clone()))))
                }
                None => with_tags.push((socket, None)),
            }
        }
        watchers = with_tags;
    }
    // Only tags some socket entered: most tickets end with no watcher ever tagged by them (a
    // turn granted at once), and the statement would find nothing.
    let entered = |tag: &String| tags.values().any(|mine| mine.contains(tag));
    for tag in ended.iter().filter(|tag| entered(tag)) {
        transaction
            .prepare_cached(layout::FORGET_WATCH_TAG)?
            .execute((key, tag))?;
    }
    Ok(watchers)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This host's wall clock in ms since the Unix epoch, as history entries record when they were
/// written (the store's clock restarts with the host: no use for an age kept across reboots).
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
