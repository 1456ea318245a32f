//! Wake-ups for the PostgreSQL store: one `LISTEN` connection per store.
//!
//! Every CAS that writes sends, in its own statement and delivered when it commits, its key's
//! version and document on the key's own channel (`pg_notify(baton_k_…, KEY \n VERSION \n
//! b64,BASE64(DOCUMENT))`, the document only when it fits the payload: see
//! [`super::PUSHED_DOCUMENT_MAX`] and [`super::layout::key_channel`]), and its bare key on the
//! shared [`CHANNEL`]. The first [`super::PostgresStore::watch`] opens a [`PgListener`] on a
//! connection of its own, checks that notifications really arrive (a transaction-mode pooler
//! such as PgBouncer accepts `LISTEN` but delivers nothing: then `watch` returns `None` and
//! waiters poll), and starts a task that hands each notification's document to the watchers of
//! the key it names. The task listens on the channels of the watched keys, and on the shared
//! one only while a prefix is watched: a process is told of the writes it waits for, not of
//! every write in the database. A `watch` returns once the server listens on its key's channel;
//! the channels of keys no longer watched are left at the next `watch`, or at the first
//! notification on them, whichever comes first. That matters beyond the messages saved: the
//! server signals every backend that listens on any channel of the database at every commit
//! that notifies, and each wakes and reads the queue. A connection that listens on nothing is
//! not signalled, so a process with nothing to wait for (a worker busy with its jobs) costs
//! the server nothing at other processes' writes.
//!
//! Missed wake-ups are not allowed; spurious ones are. Notifications sent while the connection
//! was down are lost, so every time the listener reconnects it bumps every counter: each waiter
//! reads again and finds whatever changed in the gap.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::connections::Connections;
use super::layout::key_channel;
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

/// How long a `watch` waits for the server to listen on its key's channel before it answers
/// `None` (the waiter polls): a round trip, unless the listener is reconnecting.
const LISTEN_WAIT: Duration = CONNECT_TIMEOUT;

/// Where the store's listener is.
pub(super) enum State {
    NotStarted,
    Running(Listener),
    /// The last set-up failed at this instant; waiters poll until [`RETRY_AFTER`] has passed.
    Failed(Instant),
}

/// The wake-up channels of the watched keys and prefixes, and the server channels listened on
/// for them, under one lock: a subscription and the task's leaving of a channel nobody watches
/// never cross (one that needs a channel the task has just left has it listened on again).
/// Entries whose handles have all been dropped are swept at the next subscription.
type Counters = Arc<Mutex<Routes>>;

#[derive(Debug, Default)]
struct Routes {
    router: WakeRouter,
    /// The channels the task listens on, or has been told to.
    listened: BTreeSet<String>,
}

/// What the listener's task is asked to do on its connection (which it alone uses).
enum Command {
    /// Listen on these channels too; `done` is told once the server has answered, or once the
    /// task has given up on the connection (then it listens on every channel again on a new one
    /// and wakes every watcher, which covers the gap).
    Listen(Vec<String>, oneshot::Sender<()>),
    /// Stop listening on these channels.
    Unlisten(Vec<String>),
}

/// A running listener: the counters it bumps, the channels its task was told to listen on, and
/// the task (aborted on drop, so the connection closes with the store).
pub(super) struct Listener {
    counters: Counters,
    commands: mpsc::UnboundedSender<Command>,
    /// Notifications received, for tests: how many writes woke this process.
    received: Arc<AtomicU64>,
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
            State::Running(listener) => return listener.subscribe(watched).await,
            State::Failed(at) if at.elapsed() < RETRY_AFTER => return None,
            State::Failed(_) | State::NotStarted => {}
        }
        match start(options, connections).await {
            Ok(mut listener) => {
                let handle = listener.subscribe(watched).await;
                *self = State::Running(listener);
                handle
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

    /// Notifications the listener has received since it started (0 before), for tests.
    pub(super) fn received(&self) -> u64 {
        match self {
            State::Running(listener) => listener.received.load(Ordering::Relaxed),
            State::NotStarted | State::Failed(_) => 0,
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
    /// Registers the watcher, then has the task listen on the channels now watched and leave
    /// those no longer watched; returns once the server listens (`None` if that takes longer
    /// than [`LISTEN_WAIT`]: the waiter polls). Callers are serialised by the store's lock on
    /// [`State`], so a second watcher of a key never returns before the first one's `LISTEN`.
    async fn subscribe(&mut self, watched: Watched<'_>) -> Option<WatchHandle> {
        let (receiver, gone, new) = {
            let mut routes = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
            let receiver = match watched {
                Watched::Key(key) => routes.router.subscribe_key(key),
                Watched::Prefix(prefix) => routes.router.subscribe_prefix(prefix),
            };
            let needed = channels_of(&routes.router);
            let gone: Vec<String> = routes.listened.difference(&needed).cloned().collect();
            let new: Vec<String> = needed.difference(&routes.listened).cloned().collect();
            routes.listened = needed;
            (receiver, gone, new)
        };
        if !gone.is_empty() {
            // Nobody waits for it: sent without waiting for the server.
            let _ = self.commands.send(Command::Unlisten(gone));
        }
        if !new.is_empty() {
            let (done, listening) = oneshot::channel();
            self.commands.send(Command::Listen(new, done)).ok()?;
            tokio::time::timeout(LISTEN_WAIT, listening)
                .await
                .ok()?
                .ok()?;
        }
        Some(WatchHandle::new(receiver))
    }
}

/// The channels a process listens on for its watchers: each watched key's own, and the shared
/// one while a prefix is watched (a write under it is told there by its key).
fn channels_of(router: &WakeRouter) -> BTreeSet<String> {
    let mut channels: BTreeSet<String> = router.watched_keys().map(key_channel).collect();
    if router.watches_a_prefix() {
        channels.insert(CHANNEL.to_owned());
    }
    channels
}

/// Opens the listener, checks that a notification comes back, and starts the task.
async fn start(options: &PgConnectOptions, connections: &Connections) -> Result<Listener, String> {
    let mut listener = connect(options, &BTreeSet::from([CHANNEL.to_owned()])).await?;
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
    // The shared channel was only for the test; the watchers' channels come with them.
    listener
        .unlisten(CHANNEL)
        .await
        .map_err(|error| format!("UNLISTEN failed: {error}"))?;
    let counters = Counters::default();
    let received = Arc::new(AtomicU64::new(0));
    let (commands, requests) = mpsc::unbounded_channel();
    let task = tokio::spawn(follow(
        listener,
        options.clone(),
        Arc::clone(&counters),
        requests,
        Arc::clone(&received),
    ));
    Ok(Listener {
        counters,
        commands,
        received,
        task,
    })
}

/// A listener on a connection of its own (its pool of one only serves to reconnect), listening
/// on `channels`; within twice [`CONNECT_TIMEOUT`] (connecting, then `LISTEN`).
async fn connect(
    options: &PgConnectOptions,
    channels: &BTreeSet<String>,
) -> Result<PgListener, String> {
    tokio::time::timeout(CONNECT_TIMEOUT * 2, connect_and_listen(options, channels))
        .await
        .unwrap_or_else(|_| Err("connecting and LISTEN took too long".to_owned()))
}

async fn connect_and_listen(
    options: &PgConnectOptions,
    channels: &BTreeSet<String>,
) -> Result<PgListener, String> {
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
    if !channels.is_empty() {
        listener
            .listen_all(channels.iter().map(String::as_str))
            .await
            .map_err(|error| format!("LISTEN failed: {error}"))?;
    }
    Ok(listener)
}

/// What woke the listener's task.
enum Event {
    Received(Result<Option<sqlx::postgres::PgNotification>, sqlx::Error>),
    Asked(Command),
}

/// Bumps the counter of each notified key and carries out the subscriptions' commands, for as
/// long as the store lives (its end closes `commands`).
async fn follow(
    mut listener: PgListener,
    options: PgConnectOptions,
    counters: Counters,
    mut commands: mpsc::UnboundedReceiver<Command>,
    received: Arc<AtomicU64>,
) {
    // The channels the task listens on, or will again after a reconnection.
    let mut channels = BTreeSet::new();
    loop {
        // Both are cancel-safe: a notification half read stays in sqlx's buffer.
        let event = tokio::select! {
            notification = listener.try_recv() => Event::Received(notification),
            command = commands.recv() => match command {
                Some(command) => Event::Asked(command),
                None => return,
            },
        };
        let healthy = match event {
            Event::Received(Ok(Some(notification))) => {
                received.fetch_add(1, Ordering::Relaxed);
                let channel = notification.channel();
                match route(&counters, channel, notification.payload()) {
                    Routed::Told => true,
                    Routed::Unwatched => {
                        let gone = Command::Unlisten(vec![channel.to_owned()]);
                        carry_out(&mut listener, &mut channels, gone).await
                    }
                }
            }
            // sqlx reconnected and listens again; what was sent in between is lost.
            Event::Received(Ok(None)) => {
                wake_all(&counters);
                true
            }
            Event::Received(Err(error)) => {
                // A failure sqlx does not recover from by itself (a reset connection, a
                // terminated backend, a failed reconnect).
                tracing::debug!(%error, "the PostgreSQL listener failed; reconnecting");
                false
            }
            Event::Asked(command) => carry_out(&mut listener, &mut channels, command).await,
        };
        if !healthy {
            drop(listener);
            listener = reconnect(&options, &channels).await;
            wake_all(&counters);
        }
    }
}

/// What became of a notification.
enum Routed {
    /// Handed to the watchers of its channel.
    Told,
    /// Nobody watches its channel any more: it has been taken out of the channels listened on,
    /// and the task leaves it.
    Unwatched,
}

/// Hands a notification to its watchers: one on a key's channel to the key's, one on the
/// shared channel (listened on only while a prefix is watched) to the prefixes': the key's own
/// came on its channel, with the document. A channel whose watchers have all gone is marked
/// left, under the same lock a subscription takes.
fn route(counters: &Counters, channel: &str, payload: &str) -> Routed {
    let (key, wake) = parse_payload(payload);
    let mut routes = counters.lock().unwrap_or_else(PoisonError::into_inner);
    if channel == CHANNEL && routes.router.watches_a_prefix() {
        routes.router.wake_prefixes(key);
        return Routed::Told;
    }
    if channel != CHANNEL && routes.router.watches_key(key) {
        routes.router.wake_key(key, wake);
        return Routed::Told;
    }
    if channels_of(&routes.router).contains(channel) {
        // Another watched key's channel (their names are a hash of the key's): nothing to tell.
        return Routed::Told;
    }
    if !routes.listened.remove(channel) {
        // Already left, or never listened on (a notification that was on its way).
        return Routed::Told;
    }
    Routed::Unwatched
}

/// Listens on or leaves channels; false when the connection failed meanwhile.
async fn carry_out(
    listener: &mut PgListener,
    channels: &mut BTreeSet<String>,
    command: Command,
) -> bool {
    match command {
        Command::Listen(new, done) => {
            channels.extend(new.iter().cloned());
            let listening = listener.listen_all(new.iter().map(String::as_str)).await;
            // Told either way: on failure the task listens again on a new connection and
            // wakes every watcher.
            let _ = done.send(());
            listening
                .map_err(|error| tracing::debug!(%error, "LISTEN failed; reconnecting"))
                .is_ok()
        }
        Command::Unlisten(gone) => {
            for channel in &gone {
                channels.remove(channel);
                if let Err(error) = listener.unlisten(channel).await {
                    tracing::debug!(%error, "UNLISTEN failed; reconnecting");
                    return false;
                }
            }
            true
        }
    }
}

/// A new listener on `channels`, trying until one is up, pausing longer each time (up to
/// [`RECONNECT_PAUSE_MAX`]). Meanwhile waiters poll on their own timers.
async fn reconnect(options: &PgConnectOptions, channels: &BTreeSet<String>) -> PgListener {
    let mut pause = Duration::from_millis(50);
    loop {
        tokio::time::sleep(pause).await;
        match connect(options, channels).await {
            Ok(listener) => return listener,
            Err(reason) => tracing::debug!(reason, "the PostgreSQL listener is still down"),
        }
        pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
    }
}

fn wake_all(counters: &Counters) {
    let routes = counters.lock().unwrap_or_else(PoisonError::into_inner);
    routes.router.wake_all();
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
                arrivals: Vec::new(),
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
