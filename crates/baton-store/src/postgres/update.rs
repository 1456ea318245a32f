//! [`Store::update`] on PostgreSQL: the computation runs between a `SELECT … FOR UPDATE` of the
//! key's row and the CAS statement, in one transaction, so no other write to the key comes in
//! between: writers that would lose CASes to each other queue on the row's lock instead.
//!
//! It costs four round trips (`BEGIN`, the locking read, the CAS statement, `COMMIT`) where a
//! CAS costs one, so a coordinator takes it only for a key where its CASes lose
//! ([`crate::Capabilities::update_when_contended`]). A key without a row has nothing to lock:
//! the update runs nothing and answers `None`, and the caller writes by CAS.
//!
//! A client stopped inside its transaction (a paused process, a host under swap) would hold
//! every write to the key until it ran again: the transaction tells the server to end the
//! session once it has waited [`IDLE_IN_TRANSACTION_MS`] for the client's next statement, which
//! frees the row. Its writes were never committed; its `COMMIT`, if it ever sends one, finds the
//! session gone.
//!
//! What a failure means: until `COMMIT` is sent nothing can have been written (a session that
//! ends inside a transaction is rolled back), so the update is [`StoreError::Unavailable`];
//! once it is sent without an answer, [`StoreError::Ambiguous`]. After any failure the
//! connection is closed, not reused, which ends its transaction on the server.

use std::sync::atomic::Ordering;

use sqlx::postgres::{PgArguments, PgConnection, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::Row;

use super::cas::due_bigint;
use super::errors::{connection_lost, statement_error, Kind};
use super::layout::{BEGIN, LOCK_ROW, PUT_RECORD};
use super::{PostgresStore, REQUEST_TIMEOUT};
use crate::boot_clock::BootInstant;
use crate::{check_record, Change, Compute, Replacement, Result, StoreError, Updated, Versioned};

/// How far an update got: what a failure may have left written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before `COMMIT`: nothing.
    Open,
    /// `COMMIT` sent: the write may have landed.
    Committing,
}

impl PostgresStore {
    /// [`Store::update`](crate::Store::update): see the module's documentation.
    pub(super) async fn update_row(&self, key: &str, compute: Compute) -> Result<Option<Updated>> {
        let mut lease = self.acquire().await?;
        let connection = lease
            .start()
            .ok_or_else(|| self.backend("a connection lease without a connection"))?;
        let mut stage = Stage::Open;
        let ran = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.transact(connection, key, compute, &mut stage),
        )
        .await;
        match ran {
            Ok(Ok(updated)) => {
                lease.done();
                Ok(updated)
            }
            // The lease is dropped without `done`: the connection is closed, and with it the
            // transaction if the server still has it.
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => {
                let reason = format!(
                    "no reply within {} s (a lock held by another session, or a server in \
                     trouble)",
                    REQUEST_TIMEOUT.as_secs()
                );
                Err(match stage {
                    Stage::Open => self.unavailable(reason),
                    Stage::Committing => self.ambiguous(reason),
                })
            }
        }
    }

    /// The transaction of an update on `connection`, `stage` kept up to date.
    async fn transact(
        &self,
        connection: &mut PgConnection,
        key: &str,
        compute: Compute,
        stage: &mut Stage,
    ) -> Result<Option<Updated>> {
        self.inner.n_statements.fetch_add(1, Ordering::Relaxed);
        sqlx::raw_sql(BEGIN)
            .execute(&mut *connection)
            .await
            .map_err(|error| self.failed(Stage::Open, error))?;
        let sent = BootInstant::now();
        let rows = self
            .send(connection, Stage::Open, sqlx::query(LOCK_ROW).bind(key))
            .await?;
        let Some(row) = rows.first() else {
            self.send(connection, Stage::Open, sqlx::query("ROLLBACK"))
                .await?;
            return Ok(None);
        };
        self.observe_clock(row.try_get("now_ms").map_err(|e| self.backend(e))?, sent);
        let current = self.versioned(row, "version", "doc")?;
        let Some(current) = current else {
            return Err(self.backend("the locked row has no version or document"));
        };
        let replacement = match compute(Some(&current)) {
            Change::Keep => {
                self.send(connection, Stage::Open, sqlx::query("ROLLBACK"))
                    .await?;
                return Ok(Some(Updated::Kept));
            }
            Change::Write(replacement) => replacement,
        };
        let version = self
            .write_locked(connection, key, &current, &replacement)
            .await?;
        *stage = Stage::Committing;
        self.send(connection, Stage::Committing, sqlx::query("COMMIT"))
            .await?;
        Ok(Some(Updated::Written { version }))
    }

    /// Writes `replacement` over the locked row `current` (records first), and returns the new
    /// version: under the lock the CAS cannot lose.
    async fn write_locked(
        &self,
        connection: &mut PgConnection,
        key: &str,
        current: &Versioned,
        replacement: &Replacement,
    ) -> Result<crate::Version> {
        for (name, bytes) in &replacement.records {
            check_record(name, bytes)?;
        }
        for (name, bytes) in &replacement.records {
            let put = sqlx::query(PUT_RECORD).bind(key).bind(name).bind(bytes);
            self.send(connection, Stage::Open, put).await?;
        }
        let sent = BootInstant::now();
        let cas = self.cas_update(
            key,
            &current.version,
            &replacement.bytes,
            &replacement.history,
            due_bigint(replacement.due_ms),
        );
        let rows = self.send(connection, Stage::Open, cas).await?;
        let (_, written) = self.cas_answer(&rows, sent)?;
        let version = written.ok_or_else(|| {
            self.backend("the CAS of a row locked by this transaction did not write")
        })?;
        Ok(crate::Version(version.to_string()))
    }

    /// Sends one statement of an update's transaction; a failure is classified by `stage`.
    async fn send<'q>(
        &self,
        connection: &mut PgConnection,
        stage: Stage,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Result<Vec<PgRow>> {
        self.inner.n_statements.fetch_add(1, Ordering::Relaxed);
        query
            .fetch_all(connection)
            .await
            .map_err(|error| self.failed(stage, error))
    }

    /// The store's error for a statement of an update that failed at `stage`.
    fn failed(&self, stage: Stage, error: sqlx::Error) -> StoreError {
        let kind = match stage {
            Stage::Open => Kind::Read,
            Stage::Committing => Kind::Write,
        };
        let lost = connection_lost(&error);
        match statement_error(&self.inner, kind, lost, error) {
            // A statement of an open transaction that the server rolled back wrote nothing.
            StoreError::Ambiguous { store, reason } if stage == Stage::Open => {
                StoreError::Unavailable { store, reason }
            }
            other => other,
        }
    }
}
