//! Feeds: one follower per watched key, however many clients watch it.
//!
//! A client waiting for a key through the server subscribes to the key's feed
//! (`GET /v1/keys/{key}/watch`, server-sent events). The first subscriber starts the key's
//! follower; it reads the key once per `--poll` on a store that cannot push (S3, DynamoDB), or
//! follows the store's own wake-ups with a read every second besides, and sends each new
//! document to every subscriber. The last subscriber to leave stops it. A write this server
//! makes itself (an operation) is published at once, so a release and a waiter on the same
//! server hand over without waiting for a poll.
//!
//! When the server stops, every feed says so and ends: clients read again and follow another
//! server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_store::{Store, Version, Versioned};
use tokio::sync::watch;

/// How often a follower reads a key whose store pushes its changes: a missed push costs at
/// most this.
const PUSHED_FALLBACK: Duration = Duration::from_secs(1);

/// A key's latest document, as its follower or this server's last write left it.
#[derive(Clone, Debug, Default)]
pub struct Latest {
    /// `None` before the follower's first read.
    pub read: Option<Option<Arc<Versioned>>>,
}

impl Latest {
    fn version(&self) -> Option<&Version> {
        self.read.as_ref()?.as_ref().map(|v| &v.version)
    }
}

/// Every watched key's feed.
#[derive(Debug)]
pub struct Feeds {
    store: Arc<dyn Store>,
    poll: Duration,
    keys: Mutex<HashMap<String, watch::Sender<Latest>>>,
    closing: watch::Sender<bool>,
    /// Reads of the store the followers made (for the metrics and the benchmark).
    reads: AtomicU64,
}

impl Feeds {
    /// Feeds of `store`'s keys, read every `poll` where the store cannot push.
    pub fn new(store: Arc<dyn Store>, poll: Duration) -> Feeds {
        Feeds {
            store,
            poll,
            keys: Mutex::default(),
            closing: watch::Sender::new(false),
            reads: AtomicU64::new(0),
        }
    }

    /// A subscription to `key`'s feed; starts its follower if it has none.
    pub fn subscribe(self: &Arc<Self>, key: &str) -> watch::Receiver<Latest> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = keys.get(key) {
            return sender.subscribe();
        }
        let sender = watch::Sender::new(Latest::default());
        let receiver = sender.subscribe();
        keys.insert(key.to_owned(), sender.clone());
        tokio::spawn(self.clone().follow(key.to_owned(), sender));
        receiver
    }

    /// Tells `key`'s subscribers of a document this server wrote, if anyone watches it
    /// (`written` makes its bytes only then).
    pub fn publish(&self, key: &str, written: impl FnOnce() -> Option<Versioned>) {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = keys.get(key) {
            if let Some(written) = written() {
                offer(sender, Some(written));
            }
        }
    }

    /// How many keys have a follower now.
    pub fn followed(&self) -> usize {
        self.keys.lock().map(|keys| keys.len()).unwrap_or(0)
    }

    /// The latest document of every followed key.
    pub fn latest(&self) -> Vec<(String, Arc<Versioned>)> {
        let Ok(keys) = self.keys.lock() else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|(key, sender)| {
                let read = sender.borrow().read.clone().flatten()?;
                Some((key.clone(), read))
            })
            .collect()
    }

    /// How many watches are open on the followed keys.
    pub fn watchers(&self) -> usize {
        self.keys
            .lock()
            .map(|keys| keys.values().map(watch::Sender::receiver_count).sum())
            .unwrap_or(0)
    }

    /// Reads the followers have made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// A receiver that turns true when the server stops.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Ends every feed (the server is stopping).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Reads `key` and sends what changed, until nobody subscribes.
    async fn follow(self: Arc<Self>, key: String, sender: watch::Sender<Latest>) {
        let mut pushes = self.store.watch(&key).await.ok().flatten();
        let mut closing = self.closing();
        loop {
            self.reads.fetch_add(1, Ordering::Relaxed);
            match self.store.load(&key).await {
                Ok(read) => offer(&sender, read),
                Err(error) => tracing::warn!(key, %error, "a watched key could not be read"),
            }
            let wait = if pushes.is_some() {
                PUSHED_FALLBACK
            } else {
                self.poll
            };
            let woke = tokio::select! {
                _ = tokio::time::sleep(wait) => Woke::Timer,
                changed = next_push(&mut pushes) => Woke::Pushed(changed),
                _ = sender.closed() => Woke::Timer,
                _ = closing.wait_for(|closing| *closing) => return,
            };
            match woke {
                // The store delivered the document: no read needed, wait for the next.
                Woke::Pushed(Ok(Some(document))) => {
                    offer(&sender, Some(document));
                    continue;
                }
                Woke::Pushed(Err(_)) => pushes = None,
                Woke::Pushed(Ok(None)) | Woke::Timer => {}
            }
            if self.unwatched(&key, &sender) {
                return;
            }
        }
    }

    /// Whether nobody subscribes to `sender` any more; then it is forgotten, under the lock
    /// that [`Feeds::subscribe`] takes, so no subscriber joins a feed whose follower left.
    fn unwatched(&self, key: &str, sender: &watch::Sender<Latest>) -> bool {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if sender.receiver_count() > 0 {
            return false;
        }
        if keys.get(key).is_some_and(|s| s.same_channel(sender)) {
            keys.remove(key);
        }
        true
    }
}

/// Why a follower woke.
enum Woke {
    /// To read (its timer, or nobody may be left).
    Timer,
    /// The store pushed a change.
    Pushed(Result<Option<Versioned>, baton_store::StoreError>),
}

/// The store's next wake-up, or never when it cannot push.
async fn next_push(
    pushes: &mut Option<baton_store::WatchHandle>,
) -> Result<Option<Versioned>, baton_store::StoreError> {
    match pushes.as_mut() {
        Some(handle) => handle.changed().await,
        None => std::future::pending().await,
    }
}

/// Sends `read` to the subscribers if it is not the document they have.
fn offer(sender: &watch::Sender<Latest>, read: Option<Versioned>) {
    sender.send_if_modified(|latest| {
        let known = latest.read.is_some();
        if known && latest.version() == read.as_ref().map(|r| &r.version) {
            return false;
        }
        latest.read = Some(read.map(Arc::new));
        true
    });
}
