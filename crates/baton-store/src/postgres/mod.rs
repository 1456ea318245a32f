//! The PostgreSQL store: `postgres://…` and `postgresql://…`, for teams that already run one.
//!
//! Four tables in the schema the connection's `search_path` names first (`public` unless the URL
//! says otherwise, e.g. `?options=-csearch_path%3Dbaton`): `baton_meta` (the schema version),
//! `baton_docs` (one row per key: version, document, and the key's history counter),
//! `baton_history` (one row per entry, keyed by key and seq) and `baton_records` (one row per
//! record, keyed by key and name). `schema.rs` creates them on first use, and migrates older
//! ones, safely when many processes start at once.
//!
//! Every operation is ONE statement, so a warm connection pays one round trip for it:
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

mod connections;
mod listen;
mod schema;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgRow, PgSslMode, Postgres};
use sqlx::query::Query;
use sqlx::{ConnectOptions, Row};

use connections::{AcquireError, Connections, Lease};

use crate::boot_clock::BootInstant;
use crate::server_clock::ServerClock;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, DueKey, HistoryRecord, Result,
    Store, StoreClock, StoreError, Version, Versioned, WatchHandle, WithDocs,
};

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

/// The `NOTIFY` channel of every baton store. Stores in other schemas of the same database share
/// it, which only means spurious wake-ups for equal keys.
const CHANNEL: &str = "baton_changed";

/// The largest document a wake-up carries (in bytes, before hex doubles it): `NOTIFY` takes
/// payloads under 8,000 bytes, and a key (up to 256 bytes) and a version go with it. A
/// long-used key's document is about 640 bytes; a larger one wakes its watchers without it, and
/// they read it.
pub const PUSHED_DOCUMENT_MAX: usize = 3_800;

/// The payload of a CAS's wake-up: `KEY \n VERSION \n HEX(DOCUMENT)`, the hex left empty when
/// the document is over [`PUSHED_DOCUMENT_MAX`]. Keys hold no control characters, so the first
/// two newlines split it. `$doc` is the statement's document parameter; `$1` is always the key.
macro_rules! notify_payload {
    ($doc:literal) => {
        concat!(
            "$1 || E'\\n' || written.version || E'\\n' || CASE WHEN octet_length(",
            $doc,
            ") <= 3800 THEN encode(",
            $doc,
            ", 'hex') ELSE '' END"
        )
    };
}

/// The time stamp every reply carries: the server's wall clock in whole milliseconds, rounded
/// down (an estimate that is low by a fraction of a millisecond ends other leases late, never
/// early). `clock_timestamp()`, not `now()`: the time of the reply, not of the transaction's
/// start.
macro_rules! now_ms {
    () => {
        "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}
use now_ms;

const LOAD: &str = concat!(
    "SELECT doc.version, doc.doc, ",
    now_ms!(),
    " AS now_ms
     FROM (VALUES (1)) AS one (x) LEFT JOIN baton_docs AS doc ON doc.key = $1"
);

const CLOCK: &str = concat!("SELECT ", now_ms!(), " AS now_ms");

/// The CAS of an existing document: `$1` key, `$2` expected version, `$3` document, `$4`
/// history entries, `$5` due time (the due index). The current row is read (from the statement's snapshot) only when the
/// update did not happen.
const CAS_UPDATE: &str = concat!(
    "WITH written AS (
        UPDATE baton_docs
        SET version = version + 1,
            doc = $3,
            history_seq = history_seq + cardinality($4::bytea[]),
            due_ms = $5
        WHERE key = $1 AND version = $2
        RETURNING version, history_seq
    ),
    appended AS (
        INSERT INTO baton_history (key, seq, entry)
        SELECT $1, written.history_seq - cardinality($4::bytea[]) + entries.n, entries.entry
        FROM written, unnest($4::bytea[]) WITH ORDINALITY AS entries (entry, n)
    ),
    notified AS (
        SELECT pg_notify('baton_changed', ",
    notify_payload!("$3"),
    ") FROM written
    )
    SELECT
        (SELECT version FROM written) AS written_version,
        (SELECT count(*) FROM notified) AS n_notified,
        current.version AS current_version,
        current.doc AS current_doc,
        ",
    now_ms!(),
    " AS now_ms
    FROM (VALUES (1)) AS one (x)
    LEFT JOIN baton_docs AS current ON current.key = $1 AND NOT EXISTS (SELECT FROM written)"
);

/// The CAS of a key without a document: `$1` key, `$2` document, `$3` history entries, `$4`
/// due time. The
/// history counter starts after any entries already logged for the key (none, unless someone
/// deleted its row by hand), so seqs never repeat.
const CAS_CREATE: &str = concat!(
    "WITH written AS (
        INSERT INTO baton_docs (key, version, doc, history_seq, due_ms)
        SELECT $1, 1, $2, coalesce(max(seq), 0) + cardinality($3::bytea[]), $4
        FROM baton_history WHERE key = $1
        ON CONFLICT (key) DO NOTHING
        RETURNING version, history_seq
    ),
    appended AS (
        INSERT INTO baton_history (key, seq, entry)
        SELECT $1, written.history_seq - cardinality($3::bytea[]) + entries.n, entries.entry
        FROM written, unnest($3::bytea[]) WITH ORDINALITY AS entries (entry, n)
    ),
    notified AS (
        SELECT pg_notify('baton_changed', ",
    notify_payload!("$2"),
    ") FROM written
    )
    SELECT
        (SELECT version FROM written) AS written_version,
        (SELECT count(*) FROM notified) AS n_notified,
        current.version AS current_version,
        current.doc AS current_doc,
        ",
    now_ms!(),
    " AS now_ms
    FROM (VALUES (1)) AS one (x)
    LEFT JOIN baton_docs AS current ON current.key = $1 AND NOT EXISTS (SELECT FROM written)"
);

const HISTORY: &str = "SELECT seq, entry FROM baton_history WHERE key = $1 AND seq > $2
     ORDER BY seq ASC LIMIT $3";

const HISTORY_TAIL: &str =
    "SELECT seq, entry FROM baton_history WHERE key = $1 ORDER BY seq DESC LIMIT $2";

/// `^@` is "starts with": no wildcards, so `%` and `_` in a prefix are plain characters. The key
/// column's collation is "C", so the planner turns it into a range scan of the primary key —
/// when it plans with the prefix in hand, which is why this statement is sent unnamed (planned
/// at each execution) rather than prepared once with a generic plan.
const LIST: &str = "SELECT key FROM baton_docs WHERE key ^@ $1 ORDER BY key";

/// Keys of the due index under a prefix, earliest first: `$1` prefix, `$2` limit. The partial
/// index on (due_ms, key) holds only keys with a due time. Unnamed, as `LIST`.
/// One page of the due index: the `$2` earliest due keys after `($5, $6)` (due time, key),
/// each saying whether it is under the prefix `$1`; of the first `$3` keys under it, those due
/// by `$4` come with their document ([`WithDocs`]). The others' documents stay unread (a
/// TOASTed one is never detoasted).
///
/// The page is read before the prefix is looked at, so the only plan is an ordered scan of the
/// partial due index, whose size does not grow with keys that have no due time: with the
/// prefix in the `WHERE` the planner may take a range scan of the primary key, or a scan of the
/// table, which read every key that ever had a job (measured: 11 ms a look next to 10,000
/// finished keys, against 0.1 ms). Dead index entries left by the writes that took keys out
/// are skipped after the first scan passes them (PostgreSQL marks them), so churn does not slow
/// it either. A prefix costs the due keys outside it that come first, as on Redis.
const DUE_PAGE: &str = "SELECT key, due_ms, under,
       CASE WHEN under AND n <= $3 AND due_ms <= $4 THEN version END AS version,
       CASE WHEN under AND n <= $3 AND due_ms <= $4 THEN doc END AS doc
     FROM (SELECT key, due_ms, version, doc, under,
                  count(*) FILTER (WHERE under) OVER (ORDER BY due_ms, key) AS n
           FROM (SELECT key, due_ms, version, doc, left(key, length($1)) = $1 AS under
                 FROM baton_docs WHERE due_ms IS NOT NULL AND (due_ms, key) > ($5, $6)
                 ORDER BY due_ms, key LIMIT $2) AS page) AS due
     ORDER BY due_ms, key";

/// How many due keys a read of [`DUE_PAGE`] takes.
const DUE_PAGE_KEYS: i64 = 256;

/// Writes a record: `$1` key, `$2` name, `$3` bytes. Replaces the record of that name.
const PUT_RECORD: &str = "INSERT INTO baton_records (key, name, bytes) VALUES ($1, $2, $3)
     ON CONFLICT (key, name) DO UPDATE SET bytes = excluded.bytes";

const GET_RECORD: &str = "SELECT bytes FROM baton_records WHERE key = $1 AND name = $2";

/// The statement [`Store::due_keys`] sends, a page at a time: public so that a test can check
/// its plan against the server.
pub const DUE_KEYS_PAGE: &str = DUE_PAGE;

/// True when `url` names a PostgreSQL server (`postgres://` or `postgresql://`, any case).
pub fn is_postgres_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

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
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("description", &self.inner.description)
            .finish_non_exhaustive()
    }
}

/// What a statement does, for the meaning of its failures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Changes nothing: safe to send again on another connection.
    Read,
    /// May have changed the store even when no reply came back.
    Write,
}

impl PostgresStore {
    /// Connects to the server `url` names and makes sure baton's tables are there, creating or
    /// migrating them on first use.
    ///
    /// Fails with [`StoreError::BadUrl`] for a URL sqlx cannot parse, with
    /// [`StoreError::Unavailable`] when the server cannot be reached or refuses the connection
    /// (within [`CONNECT_TIMEOUT`]), and with [`StoreError::Incompatible`] when a newer baton set
    /// up the tables.
    pub async fn open(url: &str) -> Result<PostgresStore> {
        let bad_url = |reason: String| StoreError::BadUrl {
            url: redact_password(url),
            reason,
        };
        if !is_postgres_url(url) {
            return Err(bad_url(
                "expected `postgres://USER@HOST:PORT/DATABASE` or `postgresql://…`".to_owned(),
            ));
        }
        let mut connect_options = PgConnectOptions::from_str(url).map_err(|error| {
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
            }),
        };
        store.set_up().await?;
        Ok(store)
    }

    /// Creates or checks the tables, on a connection the store then keeps.
    async fn set_up(&self) -> Result<()> {
        let mut lease = self.acquire().await?;
        let connection = lease
            .start()
            .ok_or_else(|| self.backend("a connection lease without a connection"))?;
        let sent = BootInstant::now();
        let migrated = tokio::time::timeout(
            REQUEST_TIMEOUT,
            schema::migrate(connection, &self.inner.description),
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
            conflict_returns_current: true,
            clock: true,
            clock_uncertain_ms: 0,
            due_index: true,
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
        // A bigint; a due time past it is "never" for any real clock.
        let due_ms: Option<i64> = due_ms.and_then(|ms| i64::try_from(ms).ok());
        // A version that is not a number was not made by this store: it matches nothing (NULL
        // compares equal to nothing), and the CAS conflicts like any stale one.
        let expected_number: Option<i64> = expected.and_then(|v| v.0.parse().ok());
        let sent = BootInstant::now();
        let rows = match expected {
            None => {
                self.fetch(Kind::Write, || {
                    sqlx::query(CAS_CREATE)
                        .bind(key)
                        .bind(bytes)
                        .bind(history)
                        .bind(due_ms)
                })
                .await?
            }
            Some(_) => {
                self.fetch(Kind::Write, || {
                    sqlx::query(CAS_UPDATE)
                        .bind(key)
                        .bind(expected_number)
                        .bind(bytes)
                        .bind(history)
                        .bind(due_ms)
                })
                .await?
            }
        };
        let row = rows
            .first()
            .ok_or_else(|| self.backend("the CAS statement returned no row"))?;
        self.observe_clock(row.try_get("now_ms").map_err(|e| self.backend(e))?, sent);
        let written: Option<i64> = row
            .try_get("written_version")
            .map_err(|e| self.backend(e))?;
        if let Some(version) = written {
            return Ok(CasOutcome::Written {
                version: Version(version.to_string()),
            });
        }
        let current = self.versioned(row, "current_version", "current_doc")?;
        // The statement read the current row from its snapshot, taken when it started. A write
        // that committed after that point and beat this one (the UPDATE waited for its row lock
        // and found a new version; the INSERT found a new row) is not in the snapshot, so the
        // row read looks as if this CAS should have won. Only then, read again: a fresh
        // statement sees the winner.
        let snapshot_predates_winner = match (&current, expected) {
            (None, None) => true,
            (Some(current), Some(expected)) => current.version == *expected,
            _ => false,
        };
        let current = if snapshot_predates_winner {
            self.load_row(key).await?
        } else {
            current
        };
        Ok(CasOutcome::Conflict { current })
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
        loop {
            let first = i64::try_from(docs.first.saturating_sub(due.len())).unwrap_or(i64::MAX);
            let rows = self
                .fetch(Kind::Read, || {
                    sqlx::query(DUE_PAGE)
                        .bind(prefix)
                        .bind(DUE_PAGE_KEYS)
                        .bind(first)
                        .bind(due_by_ms)
                        .bind(after.0)
                        .bind(after.1.as_str())
                })
                .await?;
            let full_page = i64::try_from(rows.len()).unwrap_or(i64::MAX) >= DUE_PAGE_KEYS;
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

/// `postgres://user@host:port/database`, plus the options that say where the tables are
/// (`options`, a non-default `sslmode`). Never the password.
fn describe(options: &PgConnectOptions) -> String {
    let mut description = format!(
        "postgres://{}@{}/{}",
        options.get_username(),
        server_address(options),
        options.get_database().unwrap_or(""),
    );
    let mut parameters = Vec::new();
    if let Some(startup_options) = options.get_options() {
        parameters.push(format!("options={startup_options}"));
    }
    let ssl_mode = match options.get_ssl_mode() {
        PgSslMode::Prefer => None,
        PgSslMode::Disable => Some("disable"),
        PgSslMode::Allow => Some("allow"),
        PgSslMode::Require => Some("require"),
        PgSslMode::VerifyCa => Some("verify-ca"),
        PgSslMode::VerifyFull => Some("verify-full"),
    };
    if let Some(ssl_mode) = ssl_mode {
        parameters.push(format!("sslmode={ssl_mode}"));
    }
    if !parameters.is_empty() {
        description.push('?');
        description.push_str(&parameters.join("&"));
    }
    description
}

/// `host:port`, or the socket directory for a Unix socket.
fn server_address(options: &PgConnectOptions) -> String {
    match options.get_socket() {
        Some(socket) => format!("{}:{}", socket.display(), options.get_port()),
        // An IPv6 address, unless it came bracketed from the URL already.
        None if options.get_host().contains(':') && !options.get_host().starts_with('[') => {
            format!("[{}]:{}", options.get_host(), options.get_port())
        }
        None => format!("{}:{}", options.get_host(), options.get_port()),
    }
}

/// `url` with the password of its user info, and any `password=` parameter, replaced by `***`:
/// for error messages about a URL that could not even be parsed.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
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

/// What the server (or the connection) said: a database error's message and SQLSTATE, without
/// sqlx's prefix and the server's source line.
fn server_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(error) => match error.code() {
            Some(code) => format!("{} (SQLSTATE {code})", error.message()),
            None => error.message().to_owned(),
        },
        other => other.to_string(),
    }
}

/// True when `error` means the connection is gone (the statement's fate is unknown).
fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // Connection exceptions, and the server ending the session (shutdown, a terminated
        // backend, crash recovery) arrive as errors from the server just before it hangs up.
        sqlx::Error::Database(error) => error
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// The store's error for a failed statement.
fn statement_error(
    inner: &Inner,
    kind: Kind,
    connection_lost: bool,
    error: sqlx::Error,
) -> StoreError {
    let store = inner.description.clone();
    if connection_lost {
        return match kind {
            Kind::Write => StoreError::Ambiguous {
                store,
                reason: format!("the connection was lost after the write was sent: {error}"),
            },
            Kind::Read => StoreError::Unavailable {
                store,
                reason: format!("the connection was lost: {error}"),
            },
        };
    }
    if let sqlx::Error::Database(database_error) = &error {
        let message = server_message(&error);
        match database_error.code().as_deref() {
            // Only with `default_transaction_isolation = serializable` (or deadlock detection,
            // which baton's one-key statements should never trigger): the statement was rolled
            // back. The coordinator's answer to Ambiguous — read again, apply again — is the
            // right one.
            Some("40001" | "40P01") => {
                return StoreError::Ambiguous {
                    store,
                    reason: format!("the server rolled the statement back: {message}"),
                }
            }
            Some("42P01" | "42703") => {
                return StoreError::Incompatible {
                    store,
                    reason: format!(
                        "baton's tables are missing or changed ({message}); were they \
                         dropped, or is the search_path different from when the store was opened?"
                    ),
                }
            }
            Some("42501") => {
                return StoreError::Unavailable {
                    store,
                    reason: format!(
                        "permission denied ({message}); the user needs SELECT, INSERT and \
                         UPDATE on baton_docs, baton_history and baton_meta"
                    ),
                }
            }
            Some("25006") => {
                return StoreError::Unavailable {
                    store,
                    reason: format!(
                        "the server is read-only ({message}); point the URL at the primary"
                    ),
                }
            }
            _ => {}
        }
    }
    StoreError::Backend {
        store,
        source: Box::new(error),
    }
}

/// The store's error for a connection that could not be opened.
fn connect_error(inner: &Inner, error: sqlx::Error) -> StoreError {
    let address = server_address(&inner.connect_options);
    let reason = match &error {
        sqlx::Error::Io(io_error) => format!(
            "cannot connect to {address}: {io_error}; is PostgreSQL running there and accepting \
             TCP connections (listen_addresses, pg_hba.conf)?"
        ),
        sqlx::Error::Tls(tls_error) => format!(
            "TLS with {address} failed: {tls_error}; the URL's sslmode (disable, prefer, require, \
             verify-ca, verify-full) must match what the server offers, and sslrootcert must name \
             the CA that signed its certificate"
        ),
        sqlx::Error::Database(database_error) => {
            let hint = match database_error.code().as_deref() {
                Some("28P01" | "28000") => {
                    "check the user and password (URL, PGPASSWORD or ~/.pgpass) and pg_hba.conf"
                }
                Some("3D000") => "the database does not exist: create it, or fix the URL's path",
                Some("53300") => "the server has no connections left (max_connections)",
                Some("57P03") => "the server is starting up or shutting down; try again",
                _ => "check the URL",
            };
            format!(
                "{address} refused the connection: {}; {hint}",
                server_message(&error)
            )
        }
        sqlx::Error::Configuration(config_error) => format!("{config_error}; check the URL"),
        other => format!("cannot connect to {address}: {other}"),
    };
    StoreError::Unavailable {
        store: inner.description.clone(),
        reason,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

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
        ];
        for (url, expected) in cases {
            assert_eq!(redact_password(url), expected, "{url}");
        }
    }

    #[test]
    fn descriptions_say_where_without_the_password() {
        let cases = [
            (
                "postgres://baton:secret@db.example:6543/jobs",
                "postgres://baton@db.example:6543/jobs",
            ),
            (
                "postgresql://baton:secret@10.0.0.1/jobs?sslmode=require&options=-csearch_path%3Dbaton",
                "postgres://baton@10.0.0.1:5432/jobs?options=-csearch_path=baton&sslmode=require",
            ),
            (
                "postgres://baton@[::1]:5433/jobs?password=secret",
                "postgres://baton@[::1]:5433/jobs",
            ),
        ];
        for (url, expected) in cases {
            let options = PgConnectOptions::from_str(url).unwrap();
            assert_eq!(describe(&options), expected, "{url}");
        }
    }

    #[test]
    fn every_cas_notifies_the_channel_the_listener_listens_on() {
        for statement in [CAS_CREATE, CAS_UPDATE] {
            assert!(statement.contains(&format!("pg_notify('{CHANNEL}', $1 ||")));
            // The statement's limit is the constant the listener and the docs name.
            assert!(statement.contains(&format!(") <= {PUSHED_DOCUMENT_MAX} THEN encode(")));
        }
    }

    #[test]
    fn postgres_urls_are_recognised() {
        for url in ["postgres://h/db", "POSTGRESQL://h", "PostgreS://u@h"] {
            assert!(is_postgres_url(url), "{url}");
        }
        for url in ["postgres:/h", "sqlite:/x.db", "postgresx://h", "redis://h"] {
            assert!(!is_postgres_url(url), "{url}");
        }
    }
}
