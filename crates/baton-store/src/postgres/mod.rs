//! The PostgreSQL store: `postgres://…` and `postgresql://…`, for teams that already run one.
//!
//! Four tables in the schema the connection's `search_path` names first (`public` unless the URL
//! says otherwise, e.g. `?options=-csearch_path%3Dbaton`): `baton_meta` (the schema version),
//! `baton_docs` (one row per key: version, document, and the key's history counter),
//! `baton_history` (one row per entry, keyed by key and seq) and `baton_records` (one row per
//! record, keyed by key and name). `schema.rs` creates them on first use, and migrates older
//! ones, safely when many processes start at once.
//!
//! Every operation but one is ONE statement, so a warm connection pays one round trip for it
//! (the exception, [`Store::update`], locks a hot key's row for a write that lost a CAS:
//! `update.rs`):
//! - a CAS is one statement of data-modifying CTEs: the conditional `UPDATE` (or, for a create,
//!   `INSERT … ON CONFLICT DO NOTHING`) bumps the version and the key's history counter by the
//!   number of entries; the history rows are inserted only from the row the write returned, with
//!   seqs taken from that counter; `pg_notify` wakes the key's watchers with the new version and
//!   document (delivered at commit, and only if the write happened), so a woken waiter needs
//!   no read; and the reply carries the current row (when the CAS lost)
//!   and the server's time either way. A statement in autocommit is its own transaction. (A CAS
//!   that lost to a write committed after its statement began reads again: see `cas`.)
//! - a load reads the row and the server's time together.
//! - a record is written by one upsert (`INSERT … ON CONFLICT DO UPDATE`) and read by one
//!   `SELECT`, outside any CAS.
//!
//! A store keeps up to [`MAX_CONNECTIONS`] connections, opened when needed and reused
//! (`connections.rs` says why this is not sqlx's pool); prepared statements are cached per
//! connection, so only a connection's first use of a statement pays a second round trip.
//!
//! Time comes from the server: every load and CAS reply carries `clock_timestamp()`, so
//! [`Store::clock`] is an estimate from the last reply plus local monotonic time, with no round
//! trip of its own ([`crate::server_clock`]).
//!
//! Watching is one `LISTEN` connection per store (`listen.rs`), shared by all its watch handles.
//!
//! TLS follows the URL's `sslmode` (`disable`, `prefer` — the default —, `require`,
//! `verify-ca`, `verify-full`; sqlx does the handshake). The usual libpq environment variables
//! (`PGHOST`, `PGUSER`, `PGPASSWORD`, `PGSSLMODE`…) and `~/.pgpass` fill what the URL leaves out.

mod cas;
mod connections;
mod errors;
mod layout;
mod listen;
mod schema;
mod update;
pub mod url;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::{ConnectOptions, Row};

use connections::{AcquireError, Connections, Lease};

use crate::boot_clock::BootInstant;
use crate::history_retention::HistoryRetention;
use crate::server_clock::ServerClock;
use crate::url::OpenMode;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, Compute, DueKey, HistoryRecord,
    Result, Store, StoreClock, StoreError, Updated, Version, Versioned, WatchHandle, WithDocs,
};
use errors::{connect_error, connection_lost, statement_error, Kind};
use layout::*;
pub use layout::{IDLE_IN_TRANSACTION_MS, PUSHED_DOCUMENT_MAX};
pub use url::is_postgres_url;
use url::{describe, server_address};

/// How long opening a connection may take (TCP, TLS, authentication), and how long an operation
/// waits for one of the store's connections to be free, before [`StoreError::Unavailable`].
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one statement may take once sent. Past it, a CAS is [`StoreError::Ambiguous`] (the
/// server may still commit it) and a read is [`StoreError::Unavailable`]. baton's statements
/// take milliseconds; reaching this means a lock held by someone else, or a server in trouble.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per store (besides the listener's). A CLI process uses one at a time; `baton
/// serve` a few. Kept small because every baton process counts against the server's
/// `max_connections`.
pub const MAX_CONNECTIONS: usize = 5;

/// The statement [`Store::due_keys`] sends, a page at a time: public so that a test can check
/// its plan against the server.
pub const DUE_KEYS_PAGE: &str = layout::DUE_PAGE;

/// A [`Store`] in a PostgreSQL database. Cheap to clone; clones share the connections, the clock
/// and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Connections,
    /// What the connections are opened with; the listener opens its own with the same.
    connect_options: PgConnectOptions,
    /// `postgres://user@host:port/database…`, without the password.
    description: String,
    /// The server's time, from the last reply that carried it.
    clock: ServerClock,
    /// The `LISTEN` connection and its watchers, set up by the first `watch`. An async mutex:
    /// setting up awaits the server, and concurrent first watches must set up only one.
    listener: tokio::sync::Mutex<listen::State>,
    /// Statements sent, for tests of the round-trip contract.
    n_statements: AtomicU64,
    /// How much history each CAS leaves per key.
    retention: HistoryRetention,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("description", &self.inner.description)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the server `url` names and makes sure baton's tables are there, creating or
    /// migrating them on first use.
    ///
    /// Fails with [`StoreError::BadUrl`] for a URL sqlx cannot parse, with
    /// [`StoreError::Unavailable`] when the server cannot be reached (within
    /// [`CONNECT_TIMEOUT`]) or is starting, with [`StoreError::Unusable`] when it refuses the
    /// credentials, the database or the TLS settings, and with [`StoreError::Incompatible`] when a newer baton set
    /// up the tables.
    ///
    /// The history parameters (`history_keep`, `history_max_age`) are baton's: they are taken
    /// out before sqlx sees the URL.
    pub async fn open(url: &str) -> Result<PostgresStore> {
        Self::open_in(url, OpenMode::Create).await
    }

    /// [`PostgresStore::open`] in `mode`: with [`OpenMode::Existing`], a database (or schema)
    /// without baton's tables is [`StoreError::Missing`], and nothing is created.
    pub async fn open_in(url: &str, mode: OpenMode) -> Result<PostgresStore> {
        let bad_url = |reason: String| StoreError::BadUrl {
            url: crate::url::redact_password(url),
            reason,
        };
        if !is_postgres_url(url) {
            return Err(bad_url(
                "expected `postgres://USER@HOST:PORT/DATABASE` or `postgresql://…`".to_owned(),
            ));
        }
        let (url_for_sqlx, retention) = HistoryRetention::take_from_url(url)?;
        let mut connect_options = PgConnectOptions::from_str(&url_for_sqlx).map_err(|error| {
            bad_url(format!(
                "{error}; expected `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=…]`"
            ))
        })?;
        if connect_options.get_application_name().is_none() {
            // So that `pg_stat_activity` says who holds the connections.
            connect_options = connect_options.application_name("baton");
        }
        // sqlx logs every statement, and slow ones as warnings; baton's CLI shows warnings by
        // default, and a CAS waiting on a lock is not something to warn about on its own.
        let connect_options = connect_options.disable_statement_logging();
        let description = describe(&connect_options);
        let store = PostgresStore {
            inner: Arc::new(Inner {
                connections: Connections::new(connect_options.clone()),
                connect_options,
                description,
                clock: ServerClock::new("postgres-server-time"),
                listener: tokio::sync::Mutex::new(listen::State::NotStarted),
                n_statements: AtomicU64::new(0),
                retention,
            }),
        };
        store.set_up(mode).await?;
        Ok(store)
    }

    /// Creates (in [`OpenMode::Create`]) or checks the tables, on a connection the store then
    /// keeps.
    async fn set_up(&self, mode: OpenMode) -> Result<()> {
        let mut lease = self.acquire().await?;
        let connection = lease
            .start()
            .ok_or_else(|| self.backend("a connection lease without a connection"))?;
        let sent = BootInstant::now();
        let migrated = tokio::time::timeout(
            REQUEST_TIMEOUT,
            schema::migrate(connection, &self.inner.description, mode),
        )
        .await;
        match migrated {
            Ok(Ok(now_ms)) => {
                lease.done();
                self.observe_clock(now_ms, sent);
                Ok(())
            }
            // The lease is dropped without `done`: the connection is closed, whatever state
            // the failure left it in.
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => Err(self.unavailable(format!(
                "setting up baton's tables took longer than {} s; another session may hold a \
                 lock on them",
                REQUEST_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Statements this store has sent since it was opened (not counting the listener's). A
    /// warm uncontended CAS is one.
    #[doc(hidden)]
    pub fn n_statements(&self) -> u64 {
        self.inner.n_statements.load(Ordering::Relaxed)
    }

    /// Notifications this store's listener has received since it started (0 before the first
    /// `watch`): how many writes woke this process. For tests that a process is told of the
    /// keys it watches only.
    #[doc(hidden)]
    pub async fn notifications_received(&self) -> u64 {
        self.inner.listener.lock().await.received()
    }

    /// How the server planned the statements prepared on the connection the next statement
    /// takes (the only one, for a store used by one task at a time): each statement's text
    /// with the number of generic plans and of plans made for one call, from
    /// `pg_prepared_statements`. For tests that a statement is planned once.
    #[doc(hidden)]
    pub async fn prepared_plans(&self) -> Result<Vec<(String, i64, i64)>> {
        let rows = self
            .fetch(Kind::Read, || {
                sqlx::query(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements",
                )
            })
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|error| self.backend(error))
    }

    /// A connection, or why there is none.
    async fn acquire(&self) -> Result<Lease<'_>> {
        self.inner
            .connections
            .acquire()
            .await
            .map_err(|error| match error {
                AcquireError::Busy => self.unavailable(format!(
                    "all {MAX_CONNECTIONS} connections stayed busy for {} s",
                    CONNECT_TIMEOUT.as_secs()
                )),
                AcquireError::TimedOut => self.unavailable(format!(
                    "no answer from {} within {} s: check the host and port, and that no \
                     firewall drops the connection",
                    server_address(&self.inner.connect_options),
                    CONNECT_TIMEOUT.as_secs()
                )),
                AcquireError::Connect(error) => connect_error(&self.inner, error),
            })
    }

    /// Runs the query `make_query` builds and returns its rows. A read that fails because its
    /// connection died is sent again on another connection (the store may hold several that the
    /// server closed while they were idle); a write is not, since it may have committed.
    async fn fetch<'q>(
        &self,
        kind: Kind,
        make_query: impl Fn() -> Query<'q, Postgres, PgArguments>,
    ) -> Result<Vec<PgRow>> {
        let mut n_attempts = 0;
        loop {
            n_attempts += 1;
            let mut lease = self.acquire().await?;
            let connection = lease
                .start()
                .ok_or_else(|| self.backend("a connection lease without a connection"))?;
            self.inner.n_statements.fetch_add(1, Ordering::Relaxed);
            let outcome =
                tokio::time::timeout(REQUEST_TIMEOUT, make_query().fetch_all(connection)).await;
            let error = match outcome {
                Ok(Ok(rows)) => {
                    lease.done();
                    return Ok(rows);
                }
                Ok(Err(error)) => error,
                Err(_elapsed) => {
                    // The lease is dropped without `done`: the connection, mid-statement, is
                    // closed.
                    let reason = format!(
                        "no reply within {} s (a lock held by another session, or a server in \
                         trouble)",
                        REQUEST_TIMEOUT.as_secs()
                    );
                    return Err(match kind {
                        Kind::Read => self.unavailable(reason),
                        Kind::Write => self.ambiguous(reason),
                    });
                }
            };
            let connection_lost = connection_lost(&error);
            if !connection_lost {
                // The server answered with an error: the connection is fine.
                lease.done();
            }
            // Otherwise the lease is dropped without `done`, closing the dead connection.
            drop(lease);
            if connection_lost && kind == Kind::Read && n_attempts <= MAX_CONNECTIONS {
                tracing::debug!(%error, "connection lost during a read; trying another");
                continue;
            }
            return Err(statement_error(&self.inner, kind, connection_lost, error));
        }
    }

    /// Records the server's time `now_ms`, carried by the reply to a request sent at `sent`.
    fn observe_clock(&self, now_ms: i64, sent: BootInstant) {
        if let Ok(now_ms) = u64::try_from(now_ms) {
            self.inner.clock.observe(now_ms, sent, BootInstant::now());
        }
    }

    fn unavailable(&self, reason: String) -> StoreError {
        StoreError::Unavailable {
            store: self.inner.description.clone(),
            reason,
        }
    }

    fn ambiguous(&self, reason: String) -> StoreError {
        StoreError::Ambiguous {
            store: self.inner.description.clone(),
            reason,
        }
    }

    fn backend(&self, error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Backend {
            store: self.inner.description.clone(),
            source: error.into(),
        }
    }

    /// A load that also records the server's time.
    async fn load_row(&self, key: &str) -> Result<Option<Versioned>> {
        let sent = BootInstant::now();
        let rows = self
            .fetch(Kind::Read, || sqlx::query(LOAD).bind(key))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| self.backend("the load statement returned no row"))?;
        self.observe_clock(row.try_get("now_ms").map_err(|e| self.backend(e))?, sent);
        self.versioned(row, "version", "doc")
    }

    /// The document in the columns named, or `None` when they are null (no row).
    fn versioned(&self, row: &PgRow, version: &str, doc: &str) -> Result<Option<Versioned>> {
        let version: Option<i64> = row.try_get(version).map_err(|e| self.backend(e))?;
        let bytes: Option<Vec<u8>> = row.try_get(doc).map_err(|e| self.backend(e))?;
        Ok(match (version, bytes) {
            (Some(version), Some(bytes)) => Some(Versioned {
                version: Version(version.to_string()),
                bytes,
                arrivals: Vec::new(),
            }),
            _ => None,
        })
    }

    fn history_records(&self, rows: Vec<PgRow>) -> Result<Vec<HistoryRecord>> {
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get("seq").map_err(|e| self.backend(e))?;
                Ok(HistoryRecord {
                    // baton writes seqs from 1; a negative one was not written by baton.
                    seq: u64::try_from(seq)
                        .map_err(|_| self.backend(format!("history seq {seq} is negative")))?,
                    bytes: row.try_get("entry").map_err(|e| self.backend(e))?,
                })
            })
            .collect()
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.inner.description.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: true,
            watch_documents: true,
            watch_tagged: false,
            conflict_returns_current: true,
            clock: true,
            clock_uncertain_ms: 0,
            due_index: true,
            locked_update: false,
            update_when_contended: true,
            watch_complete: false,
            arrivals: false,
            arrivals_by_default: false,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        self.load_row(key).await
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        let sent = BootInstant::now();
        let rows = self.send_cas(key, expected, bytes, history, due_ms).await?;
        self.outcome_of_write(key, expected, &rows, sent).await
    }

    async fn update(&self, key: &str, compute: Compute) -> Result<Option<Updated>> {
        self.update_row(key, compute).await
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Seqs are bigints: nothing lies beyond i64::MAX.
        let after_seq = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .fetch(Kind::Read, || {
                sqlx::query(HISTORY).bind(key).bind(after_seq).bind(limit)
            })
            .await?;
        self.history_records(rows)
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .fetch(Kind::Read, || {
                sqlx::query(HISTORY_TAIL).bind(key).bind(limit)
            })
            .await?;
        self.history_records(rows)
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        let due_by_ms = i64::try_from(docs.due_by_ms).unwrap_or(i64::MAX);
        let mut due: Vec<DueKey> = Vec::new();
        let mut after: (i64, String) = (i64::MIN, String::new());
        let mut page = i64::try_from(limit)
            .unwrap_or(DUE_PAGE_KEYS)
            .clamp(1, DUE_PAGE_KEYS);
        loop {
            let first = i64::try_from(docs.first.saturating_sub(due.len())).unwrap_or(i64::MAX);
            let rows = self
                .fetch(Kind::Read, || {
                    sqlx::query(DUE_PAGE)
                        .bind(prefix)
                        .bind(page)
                        .bind(first)
                        .bind(due_by_ms)
                        .bind(after.0)
                        .bind(after.1.as_str())
                })
                .await?;
            let full_page = i64::try_from(rows.len()).unwrap_or(i64::MAX) >= page;
            for row in &rows {
                let key: String = row.try_get("key").map_err(|e| self.backend(e))?;
                let due_ms: i64 = row.try_get("due_ms").map_err(|e| self.backend(e))?;
                let under: bool = row.try_get("under").map_err(|e| self.backend(e))?;
                if under && due.len() < limit {
                    due.push(DueKey {
                        key: key.clone(),
                        due_ms: u64::try_from(due_ms).unwrap_or(0),
                        doc: self.versioned(row, "version", "doc")?,
                    });
                }
                after = (due_ms, key);
            }
            if !full_page || due.len() >= limit {
                break;
            }
            page = page.saturating_mul(2).min(DUE_PAGE_KEYS);
        }
        Ok(Some(due))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let rows = self
            .fetch(Kind::Read, || {
                sqlx::query(LIST).bind(prefix).persistent(false)
            })
            .await?;
        let keys = rows
            .iter()
            .map(|row| row.try_get::<String, _>("key").map_err(|e| self.backend(e)))
            .collect::<Result<Vec<String>>>()?;
        debug_assert!(keys.iter().all(|key| key.starts_with(prefix)));
        Ok(keys)
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        let mut state = self.inner.listener.lock().await;
        Ok(state
            .subscribe(
                listen::Watched::Key(key),
                &self.inner.connect_options,
                &self.inner.connections,
            )
            .await)
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<Option<WatchHandle>> {
        let mut state = self.inner.listener.lock().await;
        Ok(state
            .subscribe(
                listen::Watched::Prefix(prefix),
                &self.inner.connect_options,
                &self.inner.connections,
            )
            .await)
    }

    async fn clock(&self) -> Result<StoreClock> {
        if let Some(now) = self.inner.clock.now() {
            return Ok(now);
        }
        // No reply has carried the time yet (every open does, so this is rare): ask for it.
        let sent = BootInstant::now();
        let rows = self.fetch(Kind::Read, || sqlx::query(CLOCK)).await?;
        let row = rows
            .first()
            .ok_or_else(|| self.backend("the clock statement returned no row"))?;
        self.observe_clock(row.try_get("now_ms").map_err(|e| self.backend(e))?, sent);
        self.inner
            .clock
            .now()
            .ok_or_else(|| self.backend("the server's clock reads before 1970"))
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        // A write: not sent again when its connection dies (it may have landed); the caller
        // writes the same bytes again.
        self.fetch(Kind::Write, || {
            sqlx::query(PUT_RECORD).bind(key).bind(name).bind(bytes)
        })
        .await?;
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let rows = self
            .fetch(Kind::Read, || sqlx::query(GET_RECORD).bind(key).bind(name))
            .await?;
        rows.first()
            .map(|row| row.try_get::<Vec<u8>, _>("bytes"))
            .transpose()
            .map_err(|e| self.backend(e))
    }
}
