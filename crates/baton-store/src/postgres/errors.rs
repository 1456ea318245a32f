//! sqlx's errors, as the store's errors that say what to check: a lost connection (a write's
//! fate unknown), a statement rolled back, missing tables or permissions, a read-only server,
//! and why a connection could not be opened. What heals by itself (a lost connection, a
//! server starting or out of connections, a read-only server that a failover will replace) is
//! [`StoreError::Unavailable`]; what needs someone to fix it (credentials, a missing database
//! or permission, TLS settings) is [`StoreError::Unusable`].

use super::url::server_address;
use super::Inner;
use crate::StoreError;

/// What a statement does, for the meaning of its failures.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Changes nothing: safe to send again on another connection.
    Read,
    /// May have changed the store even when no reply came back.
    Write,
}

/// What the server (or the connection) said: a database error's message and SQLSTATE, without
/// sqlx's prefix and the server's source line.
pub(super) fn server_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(error) => match error.code() {
            Some(code) => format!("{} (SQLSTATE {code})", error.message()),
            None => error.message().to_owned(),
        },
        other => other.to_string(),
    }
}

/// True when `error` means the connection is gone (the statement's fate is unknown).
pub(super) fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // Connection exceptions, and the server ending the session (shutdown, a terminated
        // backend, crash recovery, a transaction left idle too long) arrive as errors from the
        // server just before it hangs up.
        sqlx::Error::Database(error) => error.code().is_some_and(|code| {
            code.starts_with("08") || code.starts_with("57P") || code == "25P03"
        }),
        _ => false,
    }
}

/// The store's error for a failed statement.
pub(super) fn statement_error(
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
                return StoreError::Unusable {
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
pub(super) fn connect_error(inner: &Inner, error: sqlx::Error) -> StoreError {
    let address = server_address(&inner.connect_options);
    let mut heals = true;
    let reason = match &error {
        sqlx::Error::Io(io_error) => format!(
            "cannot connect to {address}: {io_error}; is PostgreSQL running there and accepting \
             TCP connections (listen_addresses, pg_hba.conf)?"
        ),
        sqlx::Error::Tls(tls_error) => {
            heals = false;
            format!(
            "TLS with {address} failed: {tls_error}; the URL's sslmode (disable, prefer, require, \
             verify-ca, verify-full) must match what the server offers, and sslrootcert must name \
             the CA that signed its certificate"
            )
        }
        sqlx::Error::Database(database_error) => {
            let code = database_error.code();
            // Out of connections and starting up pass; the rest needs someone to act.
            heals = matches!(code.as_deref(), Some("53300" | "57P03"));
            let hint = match code.as_deref() {
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
        sqlx::Error::Configuration(config_error) => {
            heals = false;
            format!("{config_error}; check the URL")
        }
        other => format!("cannot connect to {address}: {other}"),
    };
    let store = inner.description.clone();
    if heals {
        StoreError::Unavailable { store, reason }
    } else {
        StoreError::Unusable { store, reason }
    }
}
