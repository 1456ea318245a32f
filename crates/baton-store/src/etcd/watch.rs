//! Push wake-ups from etcd: one watch stream per store, one etcd watch per watched key.
//!
//! A background task owns the stream. [`Watcher::subscribe`] asks it for a key; the task creates
//! an etcd watch on the key's document (once per key, shared by every handle of that key) and at
//! each event hands the document the event carries (value and mod revision: the version a load
//! would return) to the key's [`WatchHandle`]s, so a woken waiter needs no read.
//!
//! Nothing may be missed, so:
//! - `subscribe` returns only once etcd has confirmed the watch (or after [`SUBSCRIBE_WAIT`],
//!   when the server is slow or away: the task then bumps the counter as soon as the watch
//!   exists, so a change made meanwhile still wakes the handle);
//! - when the stream drops (etcd restarted, the connection broke), the task reconnects with
//!   backoff, re-creates every watch, and bumps each key's counter once its watch is back, since
//!   changes during the gap were not pushed. The task keeps trying for as long as the store
//!   lives: ending it would close every handle, and a closed handle fails its waiter.
//!
//! The task ends when the store is dropped (its command channel closes). A key nobody has
//! watched for [`LINGER`] is cancelled at its next event, so a long-lived process does not pile
//! up watches; until then its watch stays, so a process that waits on the same key again and
//! again (a lock taken in a loop) gets its next handle at once, not after etcd confirms a new
//! watch: a round trip before every enqueue, which then went out behind the writes it raced.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::{StoreError, Version, Versioned, Wake, WatchHandle};

/// How long `subscribe` waits for etcd to confirm a new watch before handing out the handle
/// anyway.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// How long a key's watch outlives its last handle (see the module's doc).
const LINGER: Duration = Duration::from_secs(2);

/// How long opening a watch stream may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The first wait before reconnecting a dropped stream; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The largest watch response accepted: a document is at most 256 KiB and responses are
/// fragmented above etcd's request limit, so this leaves room for bursts of events.
const MAX_WATCH_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The handle to the watch task of one store (clones share the task).
#[derive(Clone, Debug)]
pub struct Watcher {
    commands: mpsc::UnboundedSender<Command>,
}

/// Where a key's etcd watch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Asked for, not yet confirmed (or the stream is reconnecting).
    Pending,
    /// Confirmed; the counter stood at `changes_at` right after the confirmation's own bump.
    Created { changes_at: u64 },
    /// etcd refused it (permission denied, say): this key gets no pushes.
    Refused,
}

/// A request to the task: watch `key`, reply with its receivers.
struct Command {
    key: Vec<u8>,
    reply: oneshot::Sender<Subscription>,
}

struct Subscription {
    changes: watch::Receiver<u64>,
    wakes: watch::Receiver<Wake>,
    state: watch::Receiver<State>,
}

/// One watched key, in the task.
struct Watched {
    /// Bumped at each change of the key (and once after each (re)creation of its watch), with
    /// each wake-up: a new handle compares it with its watch's confirmation.
    changes: watch::Sender<u64>,
    /// What the handles receive: the document an event carried, or "read again".
    wakes: watch::Sender<Wake>,
    state: watch::Sender<State>,
    /// When a handle last held it (as seen at a subscription or an event).
    last_used: Instant,
}

impl Watched {
    /// Wakes the key's handles without a document, after a gap in which changes may have gone
    /// untold: they read.
    fn bump(&self) {
        self.wake(Wake::untold());
    }

    fn wake(&self, wake: Wake) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        wake.send(&self.wakes);
    }

    /// Whether no handle has held the key for [`LINGER`]; a key held now is marked used.
    fn unused_past_linger(&mut self) -> bool {
        let unused = self.wakes.receiver_count() == 0 && self.state.receiver_count() == 0;
        if !unused {
            self.last_used = Instant::now();
        }
        unused && self.last_used.elapsed() >= LINGER
    }
}

impl Watcher {
    /// Starts the task (on the current tokio runtime) with `client`'s connection.
    pub fn start(client: Client) -> Watcher {
        let (commands, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(client, receiver));
        Watcher { commands }
    }

    /// Whether the task is still there (it ends only when its runtime shuts down).
    pub fn is_running(&self) -> bool {
        !self.commands.is_closed()
    }

    /// A handle woken at each change of the etcd key `key`; `None` when etcd refuses to watch
    /// it.
    pub async fn subscribe(&self, key: Vec<u8>) -> Result<Option<WatchHandle>, StoreError> {
        let (reply, replied) = oneshot::channel();
        self.commands
            .send(Command { key, reply })
            .map_err(|_| StoreError::Closed)?;
        let Subscription {
            changes,
            mut wakes,
            mut state,
        } = replied.await.map_err(|_| StoreError::Closed)?;
        let settled = tokio::time::timeout(
            SUBSCRIBE_WAIT,
            state.wait_for(|state| *state != State::Pending),
        )
        .await;
        match settled.map(|state| state.map(|state| *state)) {
            Ok(Ok(State::Refused)) => Ok(None),
            Ok(Ok(State::Created { changes_at })) => {
                // The confirmation bumped the counter for handles given out earlier; this one
                // was made before the watch existed and needs no wake-up for that. Any bump after
                // it is a real change and must wake.
                // Clear first, then compare: a change after the clearing marks the handle by
                // itself, and one before it shows in the count.
                wakes.borrow_and_update();
                let seen = *changes.borrow();
                if seen != changes_at {
                    wakes.mark_changed();
                }
                Ok(Some(WatchHandle::new(wakes)))
            }
            // Still pending: the task bumps the counter once the watch exists.
            Ok(Ok(State::Pending)) | Err(_) => Ok(Some(WatchHandle::new(wakes))),
            Ok(Err(_)) => Err(StoreError::Closed),
        }
    }
}

/// The task: keeps one stream open with a watch per key, until the store goes away.
async fn run(client: Client, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut keys: HashMap<Vec<u8>, Watched> = HashMap::new();
    let mut backoff = BACKOFF_MIN;
    loop {
        if keys.is_empty() {
            match commands.recv().await {
                Some(command) => {
                    accept(&mut keys, command);
                }
                None => return,
            }
        }
        match Stream::open(&client, &keys).await {
            Ok(mut stream) => {
                let ended = stream.serve(&mut keys, &mut commands, &mut backoff).await;
                if ended == Ended::StoreDropped {
                    return;
                }
                tracing::debug!("etcd watch stream ended; reconnecting");
            }
            Err(error) => tracing::debug!(%error, "cannot open an etcd watch stream; retrying"),
        }
        // Every watch went with the stream: waiters learn of the gap when it is re-created.
        for watched in keys.values() {
            watched.state.send_replace(State::Pending);
        }
        // Wait before the next try, still answering subscriptions.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => break,
                command = commands.recv() => match command {
                    Some(command) => {
                        accept(&mut keys, command);
                    }
                    None => return,
                },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Registers a subscription. Returns the key when a watch must be created for it on the stream.
fn accept(keys: &mut HashMap<Vec<u8>, Watched>, command: Command) -> Option<Vec<u8>> {
    let Command { key, reply } = command;
    let mut create = false;
    let watched = keys.entry(key.clone()).or_insert_with(|| {
        create = true;
        Watched {
            changes: watch::Sender::new(0),
            wakes: watch::Sender::new(Wake::read_again()),
            state: watch::Sender::new(State::Pending),
            last_used: Instant::now(),
        }
    });
    watched.last_used = Instant::now();
    // A refused watch is asked for again: permissions may have changed.
    if *watched.state.borrow() == State::Refused {
        watched.state.send_replace(State::Pending);
        create = true;
    }
    // The subscriber may have given up waiting (its future dropped): nothing to do then.
    let _ = reply.send(Subscription {
        changes: watched.changes.subscribe(),
        wakes: watched.wakes.subscribe(),
        state: watched.state.subscribe(),
    });
    create.then_some(key)
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    StoreDropped,
    StreamLost,
}

/// One open watch stream.
struct Stream {
    sender: WatchRequestSender,
    responses: WatchResponseStream,
    /// Keys whose create requests await etcd's confirmation, in the order they were sent:
    /// etcd answers the creates of one stream in order.
    creating: VecDeque<Vec<u8>>,
    /// etcd's watch ids of the confirmed watches.
    ids: HashMap<i64, Vec<u8>>,
}

impl Stream {
    /// Opens a stream and asks for a watch on every key.
    async fn open(client: &Client, keys: &HashMap<Vec<u8>, Watched>) -> Result<Stream, String> {
        let mut all_keys = keys.keys().cloned();
        let Some(first) = all_keys.next() else {
            return Err("nothing to watch".to_owned());
        };
        let mut watch_client = client
            .watch_client()
            .max_decoding_message_size(MAX_WATCH_MESSAGE_BYTES);
        let opened = tokio::time::timeout(
            OPEN_TIMEOUT,
            watch_client.watch(first.clone(), Some(options())),
        )
        .await
        .map_err(|_| format!("no answer within {} s", OPEN_TIMEOUT.as_secs()))?
        .map_err(|error| error.to_string())?;
        let (sender, responses) = opened.split();
        let mut stream = Stream {
            sender,
            responses,
            creating: VecDeque::from([first]),
            ids: HashMap::new(),
        };
        for key in all_keys {
            stream.create(key).await?;
        }
        Ok(stream)
    }

    async fn create(&mut self, key: Vec<u8>) -> Result<(), String> {
        self.sender
            .watch(key.clone(), Some(options()))
            .await
            .map_err(|error| error.to_string())?;
        self.creating.push_back(key);
        Ok(())
    }

    /// Serves subscriptions and events until the stream ends or the store goes away.
    async fn serve(
        &mut self,
        keys: &mut HashMap<Vec<u8>, Watched>,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        backoff: &mut Duration,
    ) -> Ended {
        loop {
            tokio::select! {
                command = commands.recv() => {
                    let Some(command) = command else {
                        return Ended::StoreDropped;
                    };
                    if let Some(key) = accept(keys, command) {
                        if self.create(key).await.is_err() {
                            return Ended::StreamLost;
                        }
                    }
                }
                message = self.responses.message() => match message {
                    Ok(Some(response)) => {
                        *backoff = BACKOFF_MIN;
                        if self.handle(response, keys).await.is_err() {
                            return Ended::StreamLost;
                        }
                    }
                    Ok(None) => return Ended::StreamLost,
                    Err(error) => {
                        tracing::debug!(%error, "etcd watch stream failed");
                        return Ended::StreamLost;
                    }
                },
            }
        }
    }

    async fn handle(
        &mut self,
        response: WatchResponse,
        keys: &mut HashMap<Vec<u8>, Watched>,
    ) -> Result<(), String> {
        let watch_id = response.watch_id();
        if response.created() {
            let Some(key) = self.creating.pop_front() else {
                return Ok(());
            };
            let Some(watched) = keys.get(&key) else {
                return Ok(());
            };
            if response.canceled() {
                tracing::debug!(reason = response.cancel_reason(), "etcd refused a watch");
                watched.state.send_replace(State::Refused);
            } else {
                self.ids.insert(watch_id, key);
                // Wakes handles given out before this watch existed (a reconnection, or a slow
                // first creation): changes in the gap were not pushed.
                watched.bump();
                let changes_at = *watched.changes.borrow();
                watched.state.send_replace(State::Created { changes_at });
            }
            return Ok(());
        }
        if response.canceled() || response.compact_revision() != 0 {
            // etcd ended a live watch (it cancels only on request, compaction or lost
            // permissions): wake its waiters to re-read, and ask again.
            if let Some(key) = self.ids.remove(&watch_id) {
                if let Some(watched) = keys.get(&key) {
                    watched.bump();
                    watched.state.send_replace(State::Pending);
                    self.create(key).await?;
                }
            }
            return Ok(());
        }
        if response.events().is_empty() {
            return Ok(());
        }
        let Some(key) = self.ids.get(&watch_id) else {
            return Ok(());
        };
        let Some(watched) = keys.get_mut(key) else {
            return Ok(());
        };
        if !watched.unused_past_linger() {
            watched.wake(latest_document(&response));
            return Ok(());
        }
        // Nobody has watched this key for a while: stop etcd sending its changes.
        let key = key.clone();
        keys.remove(&key);
        self.ids.remove(&watch_id);
        self.sender
            .cancel(watch_id)
            .await
            .map_err(|error| error.to_string())
    }
}

/// What the last event of a response tells the key's handles: the document it put, as a load
/// would return it (version: the mod revision), or "read again" for a delete (baton never deletes
/// documents; someone did by hand); counting every event of the response.
fn latest_document(response: &WatchResponse) -> Wake {
    let put = response.events().last().and_then(|event| {
        let kv = event.kv()?;
        (event.event_type() == EventType::Put).then(|| Versioned {
            version: Version(kv.mod_revision().to_string()),
            bytes: kv.value().to_vec(),
            arrivals: Vec::new(),
        })
    });
    let changes = u64::try_from(response.events().len()).unwrap_or(1).max(1);
    put.map_or_else(Wake::read_again, Wake::with)
        .of_changes(changes)
}

/// Every watch: the key's document from now on, large revisions split into fragments.
fn options() -> WatchOptions {
    WatchOptions::new().with_fragment()
}
