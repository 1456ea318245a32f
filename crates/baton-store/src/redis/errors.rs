//! The redis client's errors, as the store's errors that say what to check (credentials, a
//! replica, a cluster, a server still loading). An unanswered or interrupted write is
//! ambiguous: it may have landed. Refused credentials or commands and a cluster need someone
//! to act ([`StoreError::Unusable`]); a server loading or a replica a failover will promote
//! heal by themselves ([`StoreError::Unavailable`]).

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use super::{OPERATION_TIMEOUT, RESPONSE_TIMEOUT};
use crate::StoreError;

/// Whether an operation writes: an unanswered write may have landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// Changes nothing.
    Read,
    /// May have changed the store even when no reply came.
    Write,
}

/// Maps a redis error to the store's error, saying what to check where there is something to
/// check. An unanswered or interrupted write is ambiguous: it may have landed.
pub(super) fn redis_error(description: &str, error: RedisError, access: Access) -> StoreError {
    if let Some(refused) = refused(description, &error) {
        return refused;
    }
    if error
        .to_string()
        .to_ascii_lowercase()
        .contains("certificate")
    {
        return unusable(
            description,
            format!(
            "the TLS handshake failed ({error}): the server's certificate is not trusted here; \
             set SSL_CERT_FILE to a PEM file with the CA that signed it, or check the URL's host"
        ),
        );
    }
    if error.is_connection_refusal() {
        return unavailable(
            description,
            format!(
            "connection refused ({error}): check that Redis is running and listening on the host \
             and port of the URL"
        ),
        );
    }
    if error.is_timeout() {
        return timed_out(description, access);
    }
    if error.is_io_error() || error.is_connection_dropped() {
        return match access {
            Access::Write => StoreError::Ambiguous {
                store: description.to_owned(),
                reason: format!("the connection failed while the write was under way: {error}"),
            },
            Access::Read => unavailable(
                description,
                format!("the connection failed ({error}): check that Redis is up and reachable"),
            ),
        };
    }
    StoreError::Backend {
        store: description.to_owned(),
        source: Box::new(error),
    }
}

/// What the server's refusal in `error` says someone must do (credentials, permissions, a
/// cluster) or wait for (a server loading, a replica); `None` when it is no such refusal.
fn refused(description: &str, error: &RedisError) -> Option<StoreError> {
    let code = error.code().unwrap_or("");
    if error.kind() == ErrorKind::AuthenticationFailed || matches!(code, "NOAUTH" | "WRONGPASS") {
        return Some(unusable(
            description,
            format!(
                "authentication failed ({error}): put the password in the URL, as \
             redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@HOST:PORT for an ACL user; \
             percent-encode `@`, `:` and `/` in it)"
            ),
        ));
    }
    Some(match error.kind() {
        ErrorKind::Server(ServerErrorKind::NoPerm) => unusable(
            description,
            format!(
                "the Redis user may not run a command baton needs ({error}): baton runs EVALSHA, \
                 SCRIPT LOAD, HMGET, HSET, HGET, XRANGE, XREVRANGE, ZRANGEBYLEX, TIME, SUBSCRIBE \
                 and PUBLISH on its namespace's keys and channels"
            ),
        ),
        ErrorKind::Server(ServerErrorKind::BusyLoading) => unavailable(
            description,
            "Redis is loading its data into memory; try again in a moment".to_owned(),
        ),
        ErrorKind::Server(ServerErrorKind::ReadOnly) => unavailable(
            description,
            format!("the server is a read-only replica ({error}); point the URL at the primary"),
        ),
        ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::CrossSlot,
        ) => unusable(
            description,
            format!(
                "the server is a Redis Cluster ({error}), which the Redis store does not support; \
             use a single server or a primary with replicas"
            ),
        ),
        _ => return None,
    })
}

/// A failure that may heal by itself.
fn unavailable(description: &str, reason: String) -> StoreError {
    StoreError::Unavailable {
        store: description.to_owned(),
        reason,
    }
}

/// A failure someone must fix first.
fn unusable(description: &str, reason: String) -> StoreError {
    StoreError::Unusable {
        store: description.to_owned(),
        reason,
    }
}

/// A request that got no reply in time: a write may have taken effect.
pub(super) fn timed_out(description: &str, access: Access) -> StoreError {
    match access {
        Access::Write => StoreError::Ambiguous {
            store: description.to_owned(),
            reason: format!(
                "no reply within {} s; the write may or may not have taken effect",
                RESPONSE_TIMEOUT.as_secs()
            ),
        },
        Access::Read => StoreError::Unavailable {
            store: description.to_owned(),
            reason: format!(
                "no reply within {} s: check that Redis is up and reachable, and not blocked by \
                 a long-running command",
                OPERATION_TIMEOUT.as_secs()
            ),
        },
    }
}
