//! baton's tables in PostgreSQL, created and migrated on first use.
//!
//! Opening a store reads the schema version and the server's time in one round trip. Only when
//! the tables are missing (or older: version 1 had no `baton_records`, version 2 no due index) does it take the migration
//! path: one transaction that first
//! takes a transaction-scoped advisory lock, so that when many processes start at once against a
//! fresh schema (a CI fan-out, a dozen `baton run`s) they take turns: the first creates the
//! tables, the others find them there. `CREATE TABLE IF NOT EXISTS` alone is not enough: two
//! sessions creating the same table at once can both pass the "not exists" check and one then
//! fails on the catalog's unique index.
//!
//! The tables go where unqualified names go: the first schema of the connection's `search_path`
//! that exists (`public` by default; a URL can choose another with
//! `?options=-csearch_path%3DNAME`).

use sqlx::{PgConnection, Row};

use super::layout::now_ms;
use crate::url::OpenMode;
use crate::{Result, StoreError};

/// The schema this code reads and writes. Bump it with a step in [`MIGRATIONS`].
pub(super) const SCHEMA_VERSION: u64 = 4;

/// The advisory lock the migration takes: the bytes of "baton" — one lock for every schema of
/// the database, which only makes first-time setups of different schemas take turns.
const MIGRATION_LOCK_ID: i64 = 0x62_61_74_6f_6e;

/// The schema version (null when baton has not set one up) and the server's time, in one
/// simple-protocol query (one round trip: no prepare).
const READ_VERSION: &str = concat!(
    "SELECT (SELECT value FROM baton_meta WHERE name = 'schema_version') AS schema_version, ",
    now_ms!(),
    " AS now_ms"
);

/// Version 1. `COLLATE "C"`: keys compare byte-wise (code point order for UTF-8), so `list` is
/// sorted the way the contract says and its prefix match can use the primary key's index. The
/// key's history counter lives in its document row, so a CAS numbers its entries from the row
/// it has locked anyway. A fill factor below 100 leaves room on each page for the new version
/// of a row, so the frequent updates of a hot document stay heap-only (no index update).
const CREATE_TABLES_V1: &str = "
    CREATE TABLE IF NOT EXISTS baton_docs (
        key text COLLATE \"C\" PRIMARY KEY,
        version bigint NOT NULL,
        doc bytea NOT NULL,
        history_seq bigint NOT NULL DEFAULT 0
    ) WITH (fillfactor = 70);
    CREATE TABLE IF NOT EXISTS baton_history (
        key text COLLATE \"C\" NOT NULL,
        seq bigint NOT NULL,
        entry bytea NOT NULL,
        PRIMARY KEY (key, seq)
    );
    INSERT INTO baton_meta (name, value) VALUES ('schema_version', '1');
";

/// Version 2: records, kept beside their key's document and never read with it. A table of
/// their own, so that `list` (on `baton_docs`) never meets one and a key's document row stays
/// small; keyed by key and name (`COLLATE "C"` like the keys: byte-wise, no locale).
const CREATE_RECORDS_V2: &str = "
    CREATE TABLE IF NOT EXISTS baton_records (
        key text COLLATE \"C\" NOT NULL,
        name text COLLATE \"C\" NOT NULL,
        bytes bytea NOT NULL,
        PRIMARY KEY (key, name)
    );
    UPDATE baton_meta SET value = '2' WHERE name = 'schema_version';
";

/// Version 3: the due index — when each key next needs a worker, set by every CAS
/// (`Store::cas_due`), so an idle worker reads only the keys that have jobs to look at. A
/// partial index: keys without a due time (most, once their jobs are done) cost it nothing.
const DUE_INDEX_V3: &str = "
    ALTER TABLE baton_docs ADD COLUMN IF NOT EXISTS due_ms bigint;
    CREATE INDEX IF NOT EXISTS baton_docs_due ON baton_docs (due_ms, key)
        WHERE due_ms IS NOT NULL;
    UPDATE baton_meta SET value = '3' WHERE name = 'schema_version';
";

/// Version 4: when each history entry was written (the server's clock, ms since the Unix
/// epoch), so that `history_max_age` can trim by age in the CAS that appends. Entries written
/// before it have none and count as old.
const HISTORY_WRITTEN_V4: &str = "
    ALTER TABLE baton_history ADD COLUMN IF NOT EXISTS written_ms bigint;
    UPDATE baton_meta SET value = '4' WHERE name = 'schema_version';
";

/// The step to each version from the one before it: `MIGRATIONS[n]` brings a schema at version
/// `n` (0: never set up) to `n + 1`, and records that version in `baton_meta`. All the steps a
/// schema needs run in one transaction, under the migration lock.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    CREATE_TABLES_V1,
    CREATE_RECORDS_V2,
    DUE_INDEX_V3,
    HISTORY_WRITTEN_V4,
];

/// Makes sure the tables are at [`SCHEMA_VERSION`], creating (with [`OpenMode::Create`]) or
/// migrating them if needed; returns the server's time (in ms) read on the way. With
/// [`OpenMode::Existing`], a schema baton never set up is [`StoreError::Missing`].
pub(super) async fn migrate(
    connection: &mut PgConnection,
    description: &str,
    mode: OpenMode,
) -> Result<i64> {
    let mut migrated = false;
    loop {
        let (version, now_ms) = match read_version(connection).await {
            Ok(read) => read,
            // No baton_meta table: baton has never run in this schema.
            Err(error) if error_code(&error).as_deref() == Some("42P01") && !migrated => (None, 0),
            Err(error) => return Err(setup_error(description, error)),
        };
        let found = check_version(version.as_deref(), description)?;
        if found == Some(SCHEMA_VERSION) {
            return Ok(now_ms);
        }
        if found.is_none() && mode == OpenMode::Existing {
            return Err(StoreError::Missing {
                store: description.to_owned(),
                reason: "baton's tables are not in this database (nor in the schema of its \
                         search_path); check the URL, or run `baton init` (or any command that \
                         writes) to create them"
                    .to_owned(),
            });
        }
        if migrated {
            return Err(StoreError::Incompatible {
                store: description.to_owned(),
                reason: "baton's tables were set up but their schema version is not there; \
                         baton_meta may have been changed by hand"
                    .to_owned(),
            });
        }
        migrate_locked(connection, description)
            .await
            .map_err(|error| match error {
                MigrateError::Sql(error) => setup_error(description, error),
                MigrateError::Store(error) => error,
            })?;
        migrated = true;
    }
}

async fn read_version(connection: &mut PgConnection) -> sqlx::Result<(Option<String>, i64)> {
    let row = sqlx::raw_sql(READ_VERSION).fetch_one(connection).await?;
    Ok((row.try_get("schema_version")?, row.try_get("now_ms")?))
}

enum MigrateError {
    Sql(sqlx::Error),
    Store(StoreError),
}

impl From<sqlx::Error> for MigrateError {
    fn from(error: sqlx::Error) -> Self {
        Self::Sql(error)
    }
}

/// Creates or migrates the tables under the migration lock, from whichever version they are at,
/// unless another process did while this one waited for it. A newer schema found here is
/// refused (and the transaction rolled back).
async fn migrate_locked(
    connection: &mut PgConnection,
    description: &str,
) -> Result<(), MigrateError> {
    use sqlx::Connection;
    let mut transaction = connection.begin().await?;
    // `client_min_messages`: the "already exists, skipping" notices are expected here.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET LOCAL client_min_messages = warning;
         SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID});
         CREATE TABLE IF NOT EXISTS baton_meta (name text PRIMARY KEY, value text NOT NULL);"
    )))
    .execute(&mut *transaction)
    .await?;
    let version: Option<String> =
        sqlx::raw_sql("SELECT value FROM baton_meta WHERE name = 'schema_version'")
            .fetch_optional(&mut *transaction)
            .await?
            .map(|row| row.try_get("value"))
            .transpose()?;
    let found = check_version(version.as_deref(), description)
        .map_err(MigrateError::Store)?
        .unwrap_or(0);
    // `found` is at most SCHEMA_VERSION, the length of MIGRATIONS.
    let steps = MIGRATIONS.get(found as usize..).unwrap_or_default();
    for step in steps {
        sqlx::raw_sql(*step).execute(&mut *transaction).await?;
    }
    if !steps.is_empty() {
        tracing::info!(
            store = description,
            from = found,
            to = SCHEMA_VERSION,
            "created or migrated baton's tables"
        );
    }
    transaction.commit().await?;
    Ok(())
}

/// The schema version as a number: `None` when baton has not set one up, else one from 1 to
/// [`SCHEMA_VERSION`] (an older one is migrated). A version newer than this code, or one it
/// cannot read, is [`StoreError::Incompatible`].
fn check_version(version: Option<&str>, description: &str) -> Result<Option<u64>> {
    let Some(text) = version else {
        return Ok(None);
    };
    let incompatible = |reason: String| StoreError::Incompatible {
        store: description.to_owned(),
        reason,
    };
    match text.trim().parse::<u64>() {
        Ok(version) if (1..=SCHEMA_VERSION).contains(&version) => Ok(Some(version)),
        Ok(version) if version > SCHEMA_VERSION => Err(incompatible(format!(
            "schema version {version} is newer than this baton understands ({SCHEMA_VERSION}); \
             upgrade baton"
        ))),
        _ => Err(incompatible(format!(
            "schema version `{text}` is not one this baton understands ({SCHEMA_VERSION}); \
             baton_meta was not written by baton, or is damaged"
        ))),
    }
}

fn error_code(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(error) => error.code().map(|code| code.into_owned()),
        _ => None,
    }
}

/// The store's error for a failure while setting up the tables.
fn setup_error(description: &str, error: sqlx::Error) -> StoreError {
    let unavailable = |reason: String| StoreError::Unavailable {
        store: description.to_owned(),
        reason,
    };
    let unusable = |reason: String| StoreError::Unusable {
        store: description.to_owned(),
        reason,
    };
    let message = super::errors::server_message(&error);
    match error_code(&error).as_deref() {
        Some("3F000") => unusable(format!(
            "{message}: no schema of the search_path exists; create it (CREATE SCHEMA …) or fix \
             the URL's `options=-csearch_path%3D…`"
        )),
        Some("42501") => unusable(format!(
            "{message}: the user may not create baton's tables here; create them once as a user \
             who may (run baton with that user), or GRANT CREATE ON SCHEMA"
        )),
        Some("25006") => unavailable(format!(
            "{message}: the server is read-only; point the URL at the primary"
        )),
        _ if matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => {
            unavailable(format!("the connection was lost while setting up: {error}"))
        }
        _ => StoreError::Backend {
            store: description.to_owned(),
            source: Box::new(error),
        },
    }
}
