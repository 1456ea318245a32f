//! The store's few connections: opened on demand, at most [`MAX_CONNECTIONS`], reused while
//! they last.
//!
//! Not sqlx's `PgPool`, on purpose: its pool tests every connection handed back to it with a
//! round trip to the server (a `Sync`), in a task of its own. Besides doubling the messages, that
//! keeps the connection out of the pool just when baton wants it again — a CAS follows its load
//! at once — so the pool opens a second connection (a server process, authentication, and every
//! statement prepared again), and a cold `baton` process pays for two connections instead of
//! one. Here a connection goes back the moment its statement is done, and is checked by using
//! it: a statement that finds it dead says so (see `Kind` in the parent module for what that
//! means), and the connection is discarded. So is one whose statement was cut off (a timeout, a
//! dropped future): it is mid-reply and cannot serve another.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::ConnectOptions;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{CONNECT_TIMEOUT, MAX_CONNECTIONS};

/// An idle connection older than this is closed rather than used: servers, poolers and NAT
/// boxes drop connections that stay idle, and a write on a dead connection is ambiguous.
const IDLE_MAX: Duration = Duration::from_secs(60);

/// Why no connection could be had.
pub(super) enum AcquireError {
    /// All [`MAX_CONNECTIONS`] stayed busy for [`CONNECT_TIMEOUT`].
    Busy,
    /// Connecting took longer than [`CONNECT_TIMEOUT`].
    TimedOut,
    /// Connecting failed.
    Connect(sqlx::Error),
}

pub(super) struct Connections {
    options: PgConnectOptions,
    /// Idle connections, with the instant each went idle; the most recently used last.
    idle: Mutex<Vec<(PgConnection, Instant)>>,
    /// One permit per connection in use, so no more than [`MAX_CONNECTIONS`] are open.
    permits: Semaphore,
}

/// A connection in use; back to the idle list on drop, unless it may be mid-reply.
pub(super) struct Lease<'a> {
    connection: Option<PgConnection>,
    connections: &'a Connections,
    /// False while a statement runs; a lease dropped then (its future cancelled) or after a
    /// failure of the connection closes the connection instead of keeping it.
    reusable: bool,
    _permit: SemaphorePermit<'a>,
}

impl Connections {
    pub(super) fn new(options: PgConnectOptions) -> Connections {
        Connections {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(MAX_CONNECTIONS),
        }
    }

    /// An idle connection, or a new one.
    pub(super) async fn acquire(&self) -> Result<Lease<'_>, AcquireError> {
        let permit = tokio::time::timeout(CONNECT_TIMEOUT, self.permits.acquire())
            .await
            .map_err(|_| AcquireError::Busy)?
            // The semaphore is never closed.
            .map_err(|_| AcquireError::Busy)?;
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.retain(|(_, since)| since.elapsed() < IDLE_MAX);
            idle.pop().map(|(connection, _)| connection)
        };
        let connection = match idle {
            Some(connection) => connection,
            None => self.connect().await?,
        };
        Ok(Lease {
            connection: Some(connection),
            connections: self,
            reusable: true,
            _permit: permit,
        })
    }

    /// A new connection within [`CONNECT_TIMEOUT`]. A server that is starting up, or out of
    /// connections for a moment, is tried again until then; any other failure is final at once
    /// (a refused connection does not wait out the timeout).
    async fn connect(&self) -> Result<PgConnection, AcquireError> {
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        let mut pause = Duration::from_millis(20);
        loop {
            match tokio::time::timeout_at(deadline, self.options.connect()).await {
                Ok(Ok(connection)) => return Ok(connection),
                Ok(Err(sqlx::Error::Database(error)))
                    if matches!(error.code().as_deref(), Some("57P03" | "53300"))
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::debug!(%error, "the server cannot take a connection yet; retrying");
                }
                Ok(Err(error)) => return Err(AcquireError::Connect(error)),
                Err(_elapsed) => return Err(AcquireError::TimedOut),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

impl Lease<'_> {
    /// The connection, for one statement. Call [`Lease::done`] once it has replied.
    pub(super) fn start(&mut self) -> Option<&mut PgConnection> {
        self.reusable = false;
        self.connection.as_mut()
    }

    /// The statement has replied (with rows or with an error from the server): the connection
    /// can serve another.
    pub(super) fn done(&mut self) {
        self.reusable = true;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        if self.reusable {
            self.connections
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((connection, Instant::now()));
        }
        // Otherwise dropped: sqlx closes the socket, and the server ends its session.
    }
}
