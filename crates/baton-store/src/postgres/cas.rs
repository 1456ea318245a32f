//! The CAS of a key's row as one statement, in the steps every store's `cas_due` takes: the
//! statement (which checks the expected version, writes the row, appends the history, trims
//! it and moves the due index), and what its answer means.

use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::Row;

use super::errors::Kind;
use super::layout::Appends;
use super::PostgresStore;
use crate::boot_clock::BootInstant;
use crate::{CasOutcome, Result, Version};

impl PostgresStore {
    /// Sends the CAS statement: a create when `expected` is `None`, else an update naming it.
    pub(super) async fn send_cas(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<Vec<PgRow>> {
        let due_ms = due_bigint(due_ms);
        match expected {
            None => {
                self.fetch(Kind::Write, || {
                    let appends = self.appends(history);
                    let query = sqlx::query(appends.create_statement())
                        .bind(key)
                        .bind(bytes)
                        .bind(due_ms);
                    self.bind_history(query, appends, history)
                })
                .await
            }
            Some(expected) => {
                self.fetch(Kind::Write, || {
                    self.cas_update(key, expected, bytes, history, due_ms)
                })
                .await
            }
        }
    }

    /// The CAS statement of an existing row at version `expected`.
    pub(super) fn cas_update<'q>(
        &self,
        key: &'q str,
        expected: &Version,
        bytes: &'q [u8],
        history: &'q [Vec<u8>],
        due_ms: Option<i64>,
    ) -> Query<'q, Postgres, PgArguments> {
        // A version that is not a number was not made by this store: it matches nothing (NULL
        // compares equal to nothing), and the CAS conflicts like any stale one.
        let expected_number: Option<i64> = expected.0.parse().ok();
        let appends = self.appends(history);
        let query = sqlx::query(appends.update_statement())
            .bind(key)
            .bind(expected_number)
            .bind(bytes)
            .bind(due_ms);
        self.bind_history(query, appends, history)
    }

    /// What a CAS appending `history` needs of its statement.
    fn appends(&self, history: &[Vec<u8>]) -> Appends {
        Appends::of(history.len(), self.inner.retention.max_age.is_some())
    }

    /// Binds, after the parameters every CAS statement takes, those of its history parts:
    /// the entries and `history_keep`, then `history_max_age` in ms.
    fn bind_history<'q>(
        &self,
        query: Query<'q, Postgres, PgArguments>,
        appends: Appends,
        history: &'q [Vec<u8>],
    ) -> Query<'q, Postgres, PgArguments> {
        let retention = &self.inner.retention;
        let keep = i64::try_from(retention.keep).unwrap_or(i64::MAX);
        let max_age_ms = retention
            .max_age_ms()
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
        match appends {
            Appends::Nothing => query,
            Appends::Entries => query.bind(history).bind(keep),
            Appends::EntriesAged => query.bind(history).bind(keep).bind(max_age_ms),
        }
    }

    /// The row the CAS statement (sent at `sent`) answered and the version it wrote, if it
    /// wrote; the server's time it carried is recorded.
    pub(super) fn cas_answer<'r>(
        &self,
        rows: &'r [PgRow],
        sent: BootInstant,
    ) -> Result<(&'r PgRow, Option<i64>)> {
        let row = rows
            .first()
            .ok_or_else(|| self.backend("the CAS statement returned no row"))?;
        self.observe_clock(row.try_get("now_ms").map_err(|e| self.backend(e))?, sent);
        let written: Option<i64> = row
            .try_get("written_version")
            .map_err(|e| self.backend(e))?;
        Ok((row, written))
    }

    /// What the CAS statement (sent at `sent`) answered: written at its new version, or a
    /// conflict with the current row, read again where the statement's snapshot predates
    /// the winner.
    pub(super) async fn outcome_of_write(
        &self,
        key: &str,
        expected: Option<&Version>,
        rows: &[PgRow],
        sent: BootInstant,
    ) -> Result<CasOutcome> {
        let (row, written) = self.cas_answer(rows, sent)?;
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
}

/// A due time as the statements bind it: a bigint; a due time past it is "never" for any real
/// clock.
pub(super) fn due_bigint(due_ms: Option<u64>) -> Option<i64> {
    due_ms.and_then(|ms| i64::try_from(ms).ok())
}
