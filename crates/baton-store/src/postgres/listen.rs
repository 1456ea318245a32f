//! Wake-ups for the PostgreSQL store: one `LISTEN` connection per store.
//!
//! Every CAS that writes sends `pg_notify('baton_changed', KEY \n VERSION \n b64,BASE64(DOCUMENT))` in
//! its own statement, delivered when it commits (the document only when it fits the payload:
//! see [`super::PUSHED_DOCUMENT_MAX`]).
//! The first [`super::PostgresStore::watch`] opens a [`PgListener`] on a
//! connection of its own, checks that notifications really arrive (a transaction-mode pooler
//! such as PgBouncer accepts `LISTEN` but delivers nothing: then `watch` returns `None` and
//! waiters poll), and starts a task that hands each notification's document to the watchers of
//! the key it names. Every watch handle of the store follows its key's channel.
//!
//! Missed wake-ups are not allowed; spurious ones are. Notifications sent while the connection
//! was down are lost, so every time the listener reconnects it bumps every counter: each waiter
//! reads again and finds whatever changed in the gap.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::task::JoinHandle;

use super::connections::Connections;
use super::{CHANNEL, CONNECT_TIMEOUT};
use crate::wakes::WakeRouter;
use crate::{Version, Versioned, Wake, WatchHandle};

/// How long the first `watch` waits for its test notification to come back. Far longer than a
/// healthy server needs (a round trip); a pooler that never delivers costs this once per
/// [`RETRY_AFTER`].
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// After a failed set-up, how long `watch` answers `None` (poll) before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The longest pause between attempts to bring a lost listener back.
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Where the store's listener is.
pub(super) enum State {
    NotStarted,
    Running(Listener),
    /// The last set-up failed at this instant; waiters poll until [`RETRY_AFTER`] has passed.
    Failed(Instant),
}

/// The wake-up channels of the watched keys and prefixes. Entries whose handles have all been
/// dropped are swept at the next subscription.
type Counters = Arc<Mutex<WakeRouter>>;

/// A running listener: the counters it bumps and the task that bumps them (aborted on drop, so
/// the connection closes with the store).
pub(super) struct Listener {
    counters: Counters,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl State {
    /// A handle that wakes when `key` changes, setting up the listener if this is the first;
    /// `None` when notifications cannot reach this process.
    pub(super) async fn subscribe(
        &mut self,
        watched: Watched<'_>,
        options: &PgConnectOptions,
        connections: &Connections,
    ) -> Option<WatchHandle> {
        match self {
            State::Running(listener) => return Some(listener.subscribe(watched)),
            State::Failed(at) if at.elapsed() < RETRY_AFTER => return None,
            State::Failed(_) | State::NotStarted => {}
        }
        match start(options, connections).await {
            Ok(listener) => {
                let handle = listener.subscribe(watched);
                *self = State::Running(listener);
                Some(handle)
            }
            Err(reason) => {
                tracing::info!(
                    "no wake-ups from PostgreSQL ({reason}); waiters poll instead, which is \
                     slower to notice a released turn"
                );
                *self = State::Failed(Instant::now());
                None
            }
        }
    }
}

/// What a watcher follows: one key, or every key under a prefix.
#[derive(Clone, Copy, Debug)]
pub(super) enum Watched<'a> {
    Key(&'a str),
    Prefix(&'a str),
}

impl Listener {
    fn subscribe(&self, watched: Watched<'_>) -> WatchHandle {
        let mut router = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        WatchHandle::new(match watched {
            Watched::Key(key) => router.subscribe_key(key),
            Watched::Prefix(prefix) => router.subscribe_prefix(prefix),
        })
    }
}

/// Opens the listener, checks that a notification comes back, and starts the task.
async fn start(options: &PgConnectOptions, connections: &Connections) -> Result<Listener, String> {
    let mut listener = connect(options).await?;
    // The test notification goes out on another connection, as other processes' would: an
    // empty payload, which no key can be (keys have at least one byte).
    let mut lease = connections
        .acquire()
        .await
        .map_err(|_| "no connection to send a test notification on".to_owned())?;
    let connection = lease
        .start()
        .ok_or_else(|| "a connection lease without a connection".to_owned())?;
    let sent = tokio::time::timeout(
        CONNECT_TIMEOUT,
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(CHANNEL)
            .execute(connection),
    )
    .await;
    match sent {
        Ok(Ok(_)) => lease.done(),
        Ok(Err(error)) => return Err(format!("cannot send a test notification: {error}")),
        Err(_) => return Err("sending a test notification timed out".to_owned()),
    }
    drop(lease);
    // Any notification on the channel proves delivery works, ours or another process's.
    match tokio::time::timeout(PROBE_WAIT, listener.recv()).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return Err(format!("the listening connection failed: {error}")),
        Err(_) => {
            return Err(format!(
                "LISTEN was accepted but a test notification did not arrive within {} s, as \
                 behind a transaction-mode pooler",
                PROBE_WAIT.as_secs()
            ))
        }
    }
    let counters = Counters::default();
    let task = tokio::spawn(follow(listener, options.clone(), Arc::clone(&counters)));
    Ok(Listener { counters, task })
}

/// A listener on a connection of its own (its pool of one only serves to reconnect), listening;
/// within twice [`CONNECT_TIMEOUT`] (connecting, then `LISTEN`).
async fn connect(options: &PgConnectOptions) -> Result<PgListener, String> {
    tokio::time::timeout(CONNECT_TIMEOUT * 2, connect_and_listen(options))
        .await
        .unwrap_or_else(|_| Err("connecting and LISTEN took too long".to_owned()))
}

async fn connect_and_listen(options: &PgConnectOptions) -> Result<PgListener, String> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .acquire_slow_threshold(CONNECT_TIMEOUT + Duration::from_secs(1))
        // The connection lives as long as the store; idle is its normal state.
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool)
        .await
        .map_err(|error| format!("cannot open a connection to LISTEN on: {error}"))?;
    listener
        .listen(CHANNEL)
        .await
        .map_err(|error| format!("LISTEN failed: {error}"))?;
    Ok(listener)
}

/// Bumps the counter of each notified key, for as long as the store lives.
async fn follow(mut listener: PgListener, options: PgConnectOptions, counters: Counters) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let (key, wake) = parse_payload(notification.payload());
                let router = counters.lock().unwrap_or_else(PoisonError::into_inner);
                router.wake(key, wake);
            }
            // sqlx reconnected and listens again; what was sent in between is lost.
            Ok(None) => wake_all(&counters),
            Err(error) => {
                // A failure sqlx does not recover from by itself (a reset connection, a
                // terminated backend, a failed reconnect): start over with a new listener.
                tracing::debug!(%error, "the PostgreSQL listener failed; reconnecting");
                drop(listener);
                listener = reconnect(&options).await;
                wake_all(&counters);
            }
        }
    }
}

/// A new listener, trying until one is up, pausing longer each time (up to
/// [`RECONNECT_PAUSE_MAX`]). Meanwhile waiters poll on their own timers.
async fn reconnect(options: &PgConnectOptions) -> PgListener {
    let mut pause = Duration::from_millis(50);
    loop {
        tokio::time::sleep(pause).await;
        match connect(options).await {
            Ok(listener) => return listener,
            Err(reason) => tracing::debug!(reason, "the PostgreSQL listener is still down"),
        }
        pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
    }
}

fn wake_all(counters: &Counters) {
    let router = counters.lock().unwrap_or_else(PoisonError::into_inner);
    router.wake_all();
}

/// The key a notification names and what its watchers learn: the version and document when the
/// payload carries them whole, else only that the key changed (an older baton's payload is the
/// bare key, or carries the document in hex; a large document is left out).
fn parse_payload(payload: &str) -> (&str, Wake) {
    let mut parts = payload.splitn(3, '\n');
    let key = parts.next().unwrap_or_default();
    let (Some(version), Some(document)) = (parts.next(), parts.next()) else {
        return (key, Wake::read_again());
    };
    if version.is_empty() || document.is_empty() {
        return (key, Wake::read_again());
    }
    let bytes = match document.strip_prefix(super::layout::BASE64_MARK) {
        // PostgreSQL's base64 breaks its lines every 76 characters.
        Some(base64) => BASE64.decode(base64.replace('\n', "")).ok(),
        None => hex::decode(document).ok(),
    };
    match bytes {
        Some(bytes) => (
            key,
            Wake::with(Versioned {
                version: Version(version.to_owned()),
                bytes,
            }),
        ),
        None => (key, Wake::read_again()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(wake: &Wake) -> Option<(&str, &[u8])> {
        wake.document
            .as_deref()
            .map(|d| (d.version.0.as_str(), d.bytes.as_slice()))
    }

    #[test]
    fn an_older_batons_payload_in_hex_still_delivers_its_document() {
        let (key, wake) = parse_payload("deploy/prod\n42\n7b2261223a317d");
        assert_eq!(key, "deploy/prod");
        assert_eq!(document(&wake), Some(("42", &b"{\"a\":1}"[..])));
    }

    #[test]
    fn a_payload_in_base64_delivers_its_document() {
        let (key, wake) = parse_payload("deploy/prod\n42\nb64,eyJhIjoxfQ==");
        assert_eq!(key, "deploy/prod");
        assert_eq!(document(&wake), Some(("42", &b"{\"a\":1}"[..])));
    }

    #[test]
    fn keys_may_hold_spaces_and_unicode() {
        let (key, wake) = parse_payload("a b/ключ\n7\n00ff");
        assert_eq!(key, "a b/ключ");
        assert_eq!(document(&wake), Some(("7", &[0u8, 255][..])));
        let (key, wake) = parse_payload("a b/ключ\n7\nb64,A\nP8=");
        assert_eq!(key, "a b/ключ");
        assert_eq!(document(&wake), Some(("7", &[0u8, 255][..])));
    }

    #[test]
    fn anything_less_only_says_the_key_changed() {
        for (payload, expected_key) in [
            ("k", "k"),             // an older baton: the bare key
            ("k\n9\n", "k"),        // a document too large to carry
            ("k\n\n00", "k"),       // no version
            ("k\n9\nnot hex", "k"), // not written by baton
            ("k\n9\nb64,not base64!", "k"),
            ("", ""), // the listener's own test notification
        ] {
            let (key, wake) = parse_payload(payload);
            assert_eq!(key, expected_key, "{payload:?}");
            assert!(wake.document.is_none(), "{payload:?}");
        }
    }
}
