//! Push wake-ups from etcd: one watch stream per store, two etcd watches per watched key.
//!
//! A background task owns the stream. [`Watcher::subscribe`] asks it for a key; the task creates
//! an etcd watch on the key's document (once per key, shared by every handle of that key) and at
//! each event hands the document the event carries (value and mod revision) to the key's
//! [`WatchHandle`]s, so a woken waiter needs no read.
//!
//! It also watches the key's arrivals (and their stamp, put by a write that took none), from a
//! read of them (the seed) on, and a pushed document carries the arrivals pending at it when
//! they are surely known ([`watched_arrivals`]), with a version naming the revision they are
//! known as of (without them: the mod revision alone, as a read that found none); when the
//! arrivals change under the same document (an append), or become known at it (the events of
//! its write came in a response of their own), the document is pushed again with them, telling
//! of no change of the document. So a holder that follows its key takes in the arrivals its
//! release would otherwise lose a CAS to. A watch of the arrivals from a replaced seed (a
//! reconnection, a key watched again) is cancelled at its first word, its events dropped.
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use tokio::sync::{mpsc, oneshot, watch};

use super::cas::ArrivalsRead;
use super::layout::Layout;
use super::watch_seed::{self, SeedRead, Seeded};
use super::watched_arrivals::{self, Pending, WatchedArrivals};
use crate::arrivals_seen;
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

/// The most responses taken in before the ones told are pushed ([`Stream::take_in`]).
const TAKEN_IN_AT_ONCE: usize = 64;

/// The largest watch response accepted: a document is at most 256 KiB and responses are
/// fragmented above etcd's request limit, so this leaves room for bursts of events.
const MAX_WATCH_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The handle to the watch task of one store (clones share the task).
#[derive(Clone, Debug)]
pub struct Watcher {
    commands: mpsc::UnboundedSender<Command>,
}

/// Where a key's etcd watch of its document stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Asked for, not yet confirmed (or the stream is reconnecting).
    Pending,
    /// Confirmed; the counter stood at `changes_at` right after the confirmation's own bump.
    Created { changes_at: u64 },
    /// etcd refused it (permission denied, say): this key gets no pushes.
    Refused,
}

/// Which of a key's two etcd watches: its document's, or its arrivals' started from the seed
/// of this generation (an older one's events are dropped: a newer seed replaced it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Document,
    Arrivals(u64),
}

/// A request to the task: watch baton key `key`, reply with its receivers.
struct Command {
    key: String,
    reply: oneshot::Sender<Subscription>,
}

struct Subscription {
    changes: watch::Receiver<u64>,
    wakes: watch::Receiver<Wake>,
    state: watch::Receiver<State>,
}

/// One watched key, in the task.
struct Watched {
    /// Bumped at each change of the key's document (and once after each (re)creation of its
    /// watch), with its wake-up: a new handle compares it with its watch's confirmation.
    changes: watch::Sender<u64>,
    /// What the handles receive: the document an event carried, or "read again".
    wakes: watch::Sender<Wake>,
    state: watch::Sender<State>,
    /// When a handle last held it (as seen at a subscription or an event).
    last_used: Instant,
    /// The document's revision and bytes as last told (`None`: not yet, deleted, or after a
    /// gap in its watch).
    doc: Option<(i64, Vec<u8>)>,
    /// What the arrivals watch told.
    arrivals: WatchedArrivals,
    /// The creation revisions of the arrivals the last push carried (`None`: it did not know
    /// them).
    pushed_arrivals: Option<Vec<i64>>,
    /// Changes of the document told by the watch and not pushed yet ([`Task::flush`]).
    unpushed: u64,
    /// The seed asked for last ([`Task::seed`]; 0: none since the last gap): an older seed,
    /// and the arrivals watch it started, are dropped.
    seed_generation: u64,
    /// etcd's ids of the key's two watches, once confirmed.
    doc_watch: Option<i64>,
    arrivals_watch: Option<i64>,
}

impl Watched {
    fn new() -> Watched {
        Watched {
            changes: watch::Sender::new(0),
            wakes: watch::Sender::new(Wake::read_again()),
            state: watch::Sender::new(State::Pending),
            last_used: Instant::now(),
            doc: None,
            arrivals: WatchedArrivals::default(),
            pushed_arrivals: None,
            unpushed: 0,
            seed_generation: 0,
            doc_watch: None,
            arrivals_watch: None,
        }
    }

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

    /// The document as last told, with `pending`, the arrivals pending at it where they are
    /// surely known (remembered for the CAS that names them).
    fn document(
        &self,
        key: &str,
        pending: Option<Pending>,
        read: &ArrivalsRead,
    ) -> Option<Versioned> {
        let (revision, bytes) = self.doc.as_ref()?;
        let Some(Pending { as_of, arrivals }) = pending else {
            return Some(Versioned {
                version: Version(revision.to_string()),
                bytes: bytes.clone(),
                arrivals: Vec::new(),
            });
        };
        let names = arrivals
            .iter()
            .map(|(created, arrival)| (*created, arrival.key.clone()))
            .collect();
        read.remember(key, *revision, as_of, names);
        Some(Versioned {
            // Every arrival created up to `as_of` is among them: later ones stay pending.
            version: arrivals_seen::compose(&revision.to_string(), as_of.max(0) as u64),
            bytes: bytes.clone(),
            arrivals: arrivals.into_iter().map(|(_, a)| a.bytes).collect(),
        })
    }

    /// Pushes what the watches told since the last push: the document, if it changed, with
    /// the arrivals pending at it where they are known; else the document again if the
    /// arrivals known pending at it are not those the last push carried, telling of no change
    /// of the document (a waiter counting writes lets it pass). Nothing is copied for an
    /// arrivals response that changes nothing a push would carry.
    fn push(&mut self, key: &str, read: &ArrivalsRead) {
        let changes = std::mem::take(&mut self.unpushed);
        let pending = self
            .doc
            .as_ref()
            .and_then(|(revision, _)| self.arrivals.at(*revision));
        let carried = pending.as_ref().map(Pending::creations);
        if changes == 0 && (carried.is_none() || carried == self.pushed_arrivals) {
            return;
        }
        let Some(document) = self.document(key, pending, read) else {
            self.wake(Wake::read_again().of_changes(changes));
            return;
        };
        self.pushed_arrivals = carried;
        if changes > 0 {
            self.wake(Wake::with(document).of_changes(changes));
        } else {
            // It may stand in for a "read again" not taken yet: the document is cleared at
            // every gap, and told again only from after it.
            Wake::with(document).of_changes(0).send(&self.wakes);
        }
    }
}

impl Watcher {
    /// Starts the task (on the current tokio runtime) with `client`'s connection, for the keys
    /// of `layout`, remembering the arrivals pushed in `read` for the CASes that take them.
    pub fn start(client: Client, layout: Layout, read: Arc<ArrivalsRead>) -> Watcher {
        let (commands, receiver) = mpsc::unbounded_channel();
        let task = Task {
            client,
            layout,
            read,
            keys: HashMap::new(),
            seeds: mpsc::unbounded_channel(),
            dirty: Vec::new(),
            seeds_asked: 0,
        };
        tokio::spawn(task.run(receiver));
        Watcher { commands }
    }

    /// Whether the task is still there (it ends only when its runtime shuts down).
    pub fn is_running(&self) -> bool {
        !self.commands.is_closed()
    }

    /// A handle woken at each change of baton key `key`; `None` when etcd refuses to watch
    /// it.
    pub async fn subscribe(&self, key: String) -> Result<Option<WatchHandle>, StoreError> {
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

/// The task's state: the watched keys, and the channel the seeds' reads answer on.
struct Task {
    client: Client,
    layout: Layout,
    read: Arc<ArrivalsRead>,
    keys: HashMap<String, Watched>,
    seeds: (
        mpsc::UnboundedSender<Seeded>,
        mpsc::UnboundedReceiver<Seeded>,
    ),
    /// Keys told something since the last [`Task::flush`].
    dirty: Vec<String>,
    /// Numbers every seed, across keys and their comings and goings.
    seeds_asked: u64,
}

impl Task {
    /// Keeps one stream open with the watches of every key, until the store goes away.
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut backoff = BACKOFF_MIN;
        loop {
            if self.keys.is_empty() {
                match commands.recv().await {
                    Some(command) => {
                        self.accept(command);
                    }
                    None => return,
                }
            }
            match Stream::open(&mut self).await {
                Ok(mut stream) => {
                    let ended = stream.serve(&mut self, &mut commands, &mut backoff).await;
                    if ended == Ended::StoreDropped {
                        return;
                    }
                    tracing::debug!("etcd watch stream ended; reconnecting");
                }
                Err(error) => tracing::debug!(%error, "cannot open an etcd watch stream; retrying"),
            }
            // Every watch went with the stream: waiters learn of the gap when it is re-created.
            for watched in self.keys.values_mut() {
                watched.state.send_replace(State::Pending);
                watched.arrivals.forget();
                (watched.doc_watch, watched.arrivals_watch) = (None, None);
                (watched.doc, watched.pushed_arrivals) = (None, None);
                watched.seed_generation = 0;
            }
            // Wait before the next try, still answering subscriptions.
            let sleep = tokio::time::sleep(backoff);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    command = commands.recv() => match command {
                        Some(command) => {
                            self.accept(command);
                        }
                        None => return,
                    },
                }
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Registers a subscription. Returns the key when watches must be created for it on the
    /// stream.
    fn accept(&mut self, command: Command) -> Option<String> {
        let Command { key, reply } = command;
        let mut create = false;
        let watched = self.keys.entry(key.clone()).or_insert_with(|| {
            create = true;
            Watched::new()
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

    /// Reads `key`'s arrivals in a task of its own, answering on the seeds' channel; any
    /// earlier seed of the key is dropped when it answers.
    fn seed(&mut self, key: &str) {
        let Some(watched) = self.keys.get_mut(key) else {
            return;
        };
        watched.arrivals.forget();
        self.seeds_asked += 1;
        let generation = self.seeds_asked;
        watched.seed_generation = generation;
        let kv = self.client.kv_client();
        watch_seed::spawn(kv, &self.layout, key, generation, self.seeds.0.clone());
    }
}

impl Task {
    /// Pushes to the handles of every key told something since the last flush. A flush waits
    /// for the responses already received: the document's and the arrivals' events of one
    /// write come in two responses, in either order, and the document is pushed once, with
    /// the arrivals its write left.
    fn flush(&mut self) {
        for key in std::mem::take(&mut self.dirty) {
            if let Some(watched) = self.keys.get_mut(&key) {
                watched.push(&key, &self.read);
            }
        }
    }
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
    /// Watches whose create requests await etcd's confirmation, in the order they were sent:
    /// etcd answers the creates of one stream in order.
    creating: VecDeque<(String, Which)>,
    /// etcd's watch ids of the confirmed watches.
    ids: HashMap<i64, (String, Which)>,
}

impl Stream {
    /// Opens a stream and asks for a watch of every key's document.
    async fn open(task: &mut Task) -> Result<Stream, String> {
        let keys: Vec<String> = task.keys.keys().cloned().collect();
        let Some(first) = keys.first() else {
            return Err("nothing to watch".to_owned());
        };
        let mut watch_client = task
            .client
            .watch_client()
            .max_decoding_message_size(MAX_WATCH_MESSAGE_BYTES);
        let opened = tokio::time::timeout(
            OPEN_TIMEOUT,
            watch_client.watch(task.layout.doc_key(first), Some(doc_options())),
        )
        .await
        .map_err(|_| format!("no answer within {} s", OPEN_TIMEOUT.as_secs()))?
        .map_err(|error| error.to_string())?;
        let (sender, responses) = opened.split();
        let mut stream = Stream {
            sender,
            responses,
            creating: VecDeque::from([(first.clone(), Which::Document)]),
            ids: HashMap::new(),
        };
        for key in keys.into_iter().skip(1) {
            stream.create_document(task, key).await?;
        }
        Ok(stream)
    }

    /// Asks for a watch of `key`'s document (its arrivals are seeded once it is confirmed).
    async fn create_document(&mut self, task: &mut Task, key: String) -> Result<(), String> {
        let doc_key = task.layout.doc_key(&key);
        self.create(doc_key, doc_options(), key, Which::Document)
            .await
    }

    async fn create(
        &mut self,
        etcd_key: Vec<u8>,
        options: WatchOptions,
        key: String,
        which: Which,
    ) -> Result<(), String> {
        self.sender
            .watch(etcd_key, Some(options))
            .await
            .map_err(|error| error.to_string())?;
        self.creating.push_back((key, which));
        Ok(())
    }

    /// Serves subscriptions, seeds and events until the stream ends or the store goes away.
    async fn serve(
        &mut self,
        task: &mut Task,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        backoff: &mut Duration,
    ) -> Ended {
        loop {
            let handled = tokio::select! {
                command = commands.recv() => {
                    let Some(command) = command else {
                        return Ended::StoreDropped;
                    };
                    match task.accept(command) {
                        Some(key) => self.create_document(task, key).await,
                        None => Ok(()),
                    }
                    .map_err(|_| Ended::StreamLost)
                }
                seeded = task.seeds.1.recv() => match seeded {
                    Some(seeded) => self.seeded(task, seeded).await.map_err(|_| Ended::StreamLost),
                    None => Ok(()),
                },
                message = self.responses.message() => {
                    *backoff = BACKOFF_MIN;
                    self.take_in(message, task).await
                }
            };
            // What was told is pushed once nothing more has come in.
            task.flush();
            if let Err(ended) = handled {
                return ended;
            }
        }
    }

    /// Handles `message` and the further responses already received (without waiting; at most
    /// [`TAKEN_IN_AT_ONCE`], so that subscriptions and seeds are served under a flood too).
    async fn take_in(
        &mut self,
        mut message: Result<Option<WatchResponse>, etcd_client::Error>,
        task: &mut Task,
    ) -> Result<(), Ended> {
        let mut taken = 0;
        loop {
            match message {
                Ok(Some(response)) => self
                    .handle(response, task)
                    .await
                    .map_err(|_| Ended::StreamLost)?,
                Ok(None) => return Err(Ended::StreamLost),
                Err(error) => {
                    tracing::debug!(%error, "etcd watch stream failed");
                    return Err(Ended::StreamLost);
                }
            }
            taken += 1;
            if taken >= TAKEN_IN_AT_ONCE {
                return Ok(());
            }
            match ready_now(self.responses.message()) {
                Some(next) => message = next,
                None => return Ok(()),
            }
        }
    }

    /// A seed read: the key's arrivals start from it, and their watch from just after it; the
    /// document it read, if newer than the last pushed, is pushed with the arrivals pending at
    /// it (telling of no change: a read would have found the same).
    async fn seeded(&mut self, task: &mut Task, seeded: Seeded) -> Result<(), String> {
        let Some(watched) = task.keys.get_mut(&seeded.key) else {
            return Ok(());
        };
        if seeded.generation != watched.seed_generation {
            return Ok(());
        }
        let Some(SeedRead {
            revision,
            doc,
            arrivals,
        }) = seeded.read
        else {
            return Ok(());
        };
        let written = doc.as_ref().map_or(0, |(written, _)| *written);
        watched.arrivals.seed(revision, written, arrivals);
        let newer = |(seeded, _): &(i64, Vec<u8>)| {
            watched
                .doc
                .as_ref()
                .is_none_or(|(pushed, _)| pushed < seeded)
        };
        if let Some(doc) = doc.filter(newer) {
            watched.doc = Some(doc);
        }
        task.dirty.push(seeded.key.clone());
        let options = WatchOptions::new()
            .with_range(task.layout.arrivals_end(&seeded.key))
            .with_start_revision(revision + 1);
        // From the stamp on: the arrivals, and the writes that took none.
        let start = task.layout.arrivals_stamp(&seeded.key);
        self.create(
            start,
            options,
            seeded.key,
            Which::Arrivals(seeded.generation),
        )
        .await
    }

    async fn handle(&mut self, response: WatchResponse, task: &mut Task) -> Result<(), String> {
        let watch_id = response.watch_id();
        if response.created() {
            let Some((key, which)) = self.creating.pop_front() else {
                return Ok(());
            };
            return self.confirmed(task, &response, key, which).await;
        }
        if response.canceled() || response.compact_revision() != 0 {
            // etcd ended a live watch (it cancels only on request, compaction or lost
            // permissions): wake its waiters to re-read, and ask again.
            if let Some((key, which)) = self.ids.remove(&watch_id) {
                return self.recreate(task, key, which).await;
            }
            return Ok(());
        }
        if response.events().is_empty() {
            return Ok(());
        }
        let Some((key, which)) = self.ids.get(&watch_id).cloned() else {
            return Ok(());
        };
        let Some(watched) = task.keys.get_mut(&key) else {
            // The key went (unwatched past its linger) while this watch was being replaced.
            self.ids.remove(&watch_id);
            return self.cancel(watch_id).await;
        };
        if matches!(which, Which::Arrivals(seed) if seed != watched.seed_generation) {
            // A watch from a replaced seed: its events would be told twice, or out of order.
            self.ids.remove(&watch_id);
            return self.cancel(watch_id).await;
        }
        if !watched.unused_past_linger() {
            match which {
                Which::Document => document_changed(watched, &response),
                Which::Arrivals(_) => {
                    arrivals_changed(watched, &response, &task.layout.arrivals_stamp(&key));
                }
            }
            task.dirty.push(key);
            return Ok(());
        }
        // Nobody has watched this key for a while: stop etcd sending its changes.
        let ids = [watched.doc_watch, watched.arrivals_watch];
        task.keys.remove(&key);
        for id in ids.into_iter().flatten() {
            self.ids.remove(&id);
            self.cancel(id).await?;
        }
        Ok(())
    }

    async fn cancel(&mut self, watch_id: i64) -> Result<(), String> {
        self.sender
            .cancel(watch_id)
            .await
            .map_err(|error| error.to_string())
    }

    /// etcd's answer to the creation of `key`'s watch `which`.
    async fn confirmed(
        &mut self,
        task: &mut Task,
        response: &WatchResponse,
        key: String,
        which: Which,
    ) -> Result<(), String> {
        let Some(watched) = task.keys.get_mut(&key) else {
            // The key went while its watch was being made.
            if response.canceled() {
                return Ok(());
            }
            return self.cancel(response.watch_id()).await;
        };
        let stale = matches!(which, Which::Arrivals(seed) if seed != watched.seed_generation);
        if stale && !response.canceled() {
            return self.cancel(response.watch_id()).await;
        }
        if stale {
            return Ok(());
        }
        if response.canceled() {
            tracing::debug!(
                reason = response.cancel_reason(),
                ?which,
                "etcd refused a watch"
            );
            match which {
                Which::Document => {
                    watched.state.send_replace(State::Refused);
                }
                // Pushed without arrivals, as a store whose reads alone name them.
                Which::Arrivals(_) => watched.arrivals.forget(),
            }
            return Ok(());
        }
        self.ids.insert(response.watch_id(), (key.clone(), which));
        match which {
            Which::Document => {
                watched.doc_watch = Some(response.watch_id());
                // Wakes handles given out before this watch existed (a reconnection, or a slow
                // first creation): changes in the gap were not pushed.
                watched.bump();
                let changes_at = *watched.changes.borrow();
                watched.state.send_replace(State::Created { changes_at });
                // Read now, the seed's document is no older than any change of the gap: its
                // push may stand for the bump's "read again".
                task.seed(&key);
            }
            Which::Arrivals(_) => watched.arrivals_watch = Some(response.watch_id()),
        }
        Ok(())
    }

    /// After etcd ended `key`'s live watch `which`: its document's waiters read, its arrivals
    /// are seeded again; either way the watch is asked for again.
    async fn recreate(&mut self, task: &mut Task, key: String, which: Which) -> Result<(), String> {
        let Some(watched) = task.keys.get_mut(&key) else {
            return Ok(());
        };
        match which {
            Which::Document => {
                watched.doc_watch = None;
                // Its document may be stale now: nothing is pushed again until the next one, or
                // the seed asked for when the new watch is confirmed (one in flight is older).
                (watched.doc, watched.pushed_arrivals) = (None, None);
                watched.seed_generation = 0;
                watched.bump();
                watched.state.send_replace(State::Pending);
                let doc_key = task.layout.doc_key(&key);
                self.create(doc_key, doc_options(), key, Which::Document)
                    .await
            }
            Which::Arrivals(seed) if seed == watched.seed_generation => {
                watched.arrivals_watch = None;
                task.seed(&key);
                Ok(())
            }
            // A replaced seed's watch: nothing to ask again.
            Which::Arrivals(_) => Ok(()),
        }
    }
}

/// Takes in a response of a key's document watch: the document its last event put, pushed at
/// the next [`Task::flush`], counting every event of the response; a delete (baton never
/// deletes documents; someone did by hand) is pushed as "read again".
fn document_changed(watched: &mut Watched, response: &WatchResponse) {
    let changes = u64::try_from(response.events().len()).unwrap_or(1).max(1);
    watched.unpushed = watched.unpushed.saturating_add(changes);
    watched.doc = response.events().last().and_then(|event| {
        let kv = event.kv()?;
        (event.event_type() == EventType::Put).then(|| (kv.mod_revision(), kv.value().to_vec()))
    });
}

/// Takes in a response of a key's arrivals watch, for the next [`Task::flush`]; `stamp` is
/// the key's arrivals stamp, whose puts tell of a write that took none.
fn arrivals_changed(watched: &mut Watched, response: &WatchResponse, stamp: &[u8]) {
    let events: Vec<watched_arrivals::Event> = response
        .events()
        .iter()
        .filter_map(|event| {
            let kv = event.kv()?;
            if kv.key() == stamp {
                let revision = kv.mod_revision();
                return Some(watched_arrivals::Event::Stamped { revision });
            }
            Some(match event.event_type() {
                EventType::Put => watched_arrivals::Event::Created {
                    created: kv.create_revision(),
                    arrival: watched_arrivals::Arrival {
                        key: kv.key().to_vec(),
                        bytes: kv.value().to_vec(),
                    },
                },
                EventType::Delete => watched_arrivals::Event::Taken {
                    key: kv.key().to_vec(),
                    revision: kv.mod_revision(),
                },
            })
        })
        .collect();
    watched.arrivals.apply(&events);
}

/// The output of `future` if it is ready at once, without waiting (a response the stream has
/// already received).
fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Every document watch: the key's document from now on, large revisions split into
/// fragments. (An arrivals watch is made without: each of its responses must hold every event
/// up to its revision.)
fn doc_options() -> WatchOptions {
    WatchOptions::new().with_fragment()
}
