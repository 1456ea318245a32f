//! Not a lock: the store's floor for baton's own writes. Real turns are taken through the
//! library, the bytes the store then held are kept (the documents an acquire, an enqueue and a
//! release wrote, and the history entry a release appended), and from then on clients only
//! write those bytes back by CAS, through the same store code baton uses: no core, no
//! coordinator, no lease, no heartbeat.
//!
//! A client taking a free key writes an acquire's document, and giving it back a release's: a
//! turn recorded on that key. A client asking for a key another client of the same contender
//! holds writes an enqueue's document and waits on the store's watch for the document of the
//! release that grants it, which the holder writes when it gives the key back; it writes
//! nothing more before it holds, as a baton waiter granted by a release. Those two documents
//! come from one real handoff, recorded once per contender on a key of its own.
//!
//! What baton's B1, B2 and B4 cost beyond this is the client's work; what this costs beyond
//! the store's own peer is the writes themselves (the document, the version check, the
//! history, the wake-up). Who holds is kept in this process: only scenarios whose clients are
//! tasks of one process use it, and never where clients race for a key (B3).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use baton_store::{CasOutcome, Store, Version};
use tokio::sync::{oneshot, OnceCell};

use super::contenders::{Baton, Contender, Locker};

/// Makes clients that replay baton's writes on `url`.
pub struct BatonWrites {
    /// The store URL.
    url: String,
    shared: Arc<Shared>,
}

impl BatonWrites {
    pub fn new(url: String) -> BatonWrites {
        BatonWrites {
            url,
            shared: Arc::default(),
        }
    }
}

/// What the clients of one [`BatonWrites`] share: who holds each key, and the recorded
/// handoff.
#[derive(Default)]
struct Shared {
    keys: Mutex<HashMap<String, KeyState>>,
    handoff: OnceCell<Arc<Handoff>>,
}

/// One key as this contender's clients left it.
struct KeyState {
    /// The key's version, after the last replayed write.
    version: Version,
    /// The turn recorded on the key.
    turn: Arc<Turn>,
    held: bool,
    /// A client waits: the next release writes the recorded handoff's grant, once this tells
    /// that the waiter's enqueue landed (a watch may take longer to start than `--settle`).
    waiter: Option<oneshot::Receiver<()>>,
}

/// The bytes one real turn left on a key.
struct Turn {
    acquire: Vec<u8>,
    release: Vec<u8>,
    history: Vec<Vec<u8>>,
}

/// The bytes one real handoff left: the document with the waiter's ticket enqueued behind the
/// holder's, and the one the holder's release wrote, which grants the waiter, with the history
/// entry it appended.
struct Handoff {
    enqueue: Vec<u8>,
    grant: Vec<u8>,
    history: Vec<Vec<u8>>,
}

struct ReplayLocker {
    url: String,
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    requests: u64,
}

/// A client that replays baton's writes on `store` (whose URL is `url`: the turns that
/// record them take connections of their own), alone: it never waits for a key.
pub fn locker(url: String, store: Arc<dyn Store>) -> Box<dyn Locker> {
    Box::new(ReplayLocker {
        url,
        store,
        shared: Arc::default(),
        requests: 0,
    })
}

#[async_trait]
impl Contender for BatonWrites {
    fn name(&self) -> String {
        "floor: baton's writes replayed through the store, no client work".into()
    }

    /// The first client records the handoff, before any scenario starts: a waiter must be
    /// able to enqueue within `--settle`.
    async fn client(&self) -> Result<Box<dyn Locker>> {
        let store = crate::setup::open_store(&self.url).await?;
        self.shared
            .handoff
            .get_or_try_init(|| record_handoff(&self.url, store.as_ref()))
            .await?;
        Ok(Box::new(ReplayLocker {
            url: self.url.clone(),
            store,
            shared: self.shared.clone(),
            requests: 0,
        }))
    }
}

/// Takes and gives back `key` once through the library, as B1's baton client does, reading
/// what each step wrote.
async fn record_turn(url: &str, store: &dyn Store, key: &str) -> Result<(Version, Turn)> {
    let mut client = recorder(url).client().await?;
    client.lock(key).await?;
    let acquire = document(store, key).await?.bytes;
    client.unlock(key).await?;
    let released = document(store, key).await?;
    let turn = Turn {
        acquire,
        release: released.bytes,
        history: last_entry(store, key).await?,
    };
    Ok((released.version, turn))
}

/// One real handoff through the library on a key of its own: a holder, a waiter that queues
/// behind it, the holder's release that grants it.
async fn record_handoff(url: &str, store: &dyn Store) -> Result<Arc<Handoff>> {
    let key = crate::setup::fresh_key("replay-handoff");
    let (mut holder, mut waiter) = (recorder(url).client().await?, recorder(url).client().await?);
    holder.lock(&key).await?;
    let held = document(store, &key).await?.version;
    let waiting_key = key.clone();
    let waiting = tokio::spawn(async move { waiter.lock(&waiting_key).await.map(|()| waiter) });
    let enqueue = enqueued(store, &key, &held).await?;
    holder.unlock(&key).await?;
    let grant = document(store, &key).await?.bytes;
    let history = last_entry(store, &key).await?;
    let mut waiter = waiting.await.context("the recorded waiter panicked")??;
    waiter.unlock(&key).await?;
    Ok(Arc::new(Handoff {
        enqueue,
        grant,
        history,
    }))
}

/// The document of `key` once a waiter has enqueued on it: its version moved from `held`, and
/// stayed put for 100 ms.
async fn enqueued(store: &dyn Store, key: &str, held: &Version) -> Result<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = document(store, key).await?;
        if now.version != *held {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let settled = document(store, key).await?;
            if settled.version == now.version {
                return Ok(settled.bytes);
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the recorded waiter did not enqueue on {key} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The client that records: baton through the library.
fn recorder(url: &str) -> Baton {
    Baton {
        url: url.to_string(),
        ttl: Duration::from_secs(30),
        // The floor replays writes to the document: a turn that arrived wrote none.
        by_arrival: Some(false),
    }
}

async fn document(store: &dyn Store, key: &str) -> Result<baton_store::Versioned> {
    store
        .load(key)
        .await
        .with_context(|| format!("cannot read {key}"))?
        .with_context(|| format!("{key} has no document after a turn"))
}

/// The entry the last write of `key` appended to its history.
async fn last_entry(store: &dyn Store, key: &str) -> Result<Vec<Vec<u8>>> {
    Ok(store
        .history_tail(key, 1)
        .await
        .with_context(|| format!("cannot read the history of {key}"))?
        .into_iter()
        .map(|record| record.bytes)
        .collect())
}

impl ReplayLocker {
    fn with_key<T>(&self, key: &str, f: impl FnOnce(&mut KeyState) -> T) -> Result<T> {
        let mut keys = self
            .shared
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let state = keys
            .get_mut(key)
            .with_context(|| format!("{key} was never recorded"))?;
        Ok(f(state))
    }

    /// Records a turn on `key` unless one was.
    async fn know(&self, key: &str) -> Result<()> {
        let known = |shared: &Shared| {
            let keys = shared.keys.lock().unwrap_or_else(PoisonError::into_inner);
            keys.contains_key(key)
        };
        if known(&self.shared) {
            return Ok(());
        }
        let (version, turn) = record_turn(&self.url, self.store.as_ref(), key).await?;
        let mut keys = self
            .shared
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        keys.entry(key.to_string()).or_insert_with(|| KeyState {
            version,
            turn: Arc::new(turn),
            held: false,
            waiter: None,
        });
        Ok(())
    }

    /// Writes `bytes` over `key`'s document at `expected`, appending `history`.
    async fn write(
        &mut self,
        key: &str,
        expected: &Version,
        bytes: &[u8],
        history: &[Vec<u8>],
    ) -> Result<()> {
        self.requests += 1;
        let written = self
            .store
            .cas_due(key, Some(expected), bytes, history, None)
            .await
            .with_context(|| format!("cannot write {key}"))?;
        match written {
            CasOutcome::Written { version } => self.with_key(key, |k| k.version = version),
            CasOutcome::Conflict { .. } => {
                bail!("another client wrote {key} meanwhile: this floor's clients never race")
            }
        }
    }

    /// Enqueues behind the holder of `key` (`expected`: the key's version), tells the holder
    /// through `landed`, and returns once the holder's release granted it, watching from
    /// before the enqueue as baton's waiter.
    async fn wait(
        &mut self,
        key: &str,
        expected: Version,
        landed: oneshot::Sender<()>,
    ) -> Result<()> {
        let store = self.store.clone();
        let handoff = self.handoff()?;
        let Some(mut watch) = store
            .watch(key)
            .await
            .with_context(|| format!("cannot watch {key}"))?
        else {
            bail!("this store does not push changes: its floor has no handoff");
        };
        self.write(key, &expected, &handoff.enqueue, &[]).await?;
        // The holder is gone only if the scenario failed: that error is the one to tell.
        let _ = landed.send(());
        let granted = async {
            loop {
                let bytes = match watch.changed().await.context("the watch ended")? {
                    Some(pushed) => pushed.bytes,
                    None => {
                        self.requests += 1;
                        document(store.as_ref(), key).await?.bytes
                    }
                };
                if bytes == handoff.grant {
                    return Ok(());
                }
            }
        };
        tokio::time::timeout(GRANT_WITHIN, granted)
            .await
            .with_context(|| {
                format!("no release granted the waiter on {key} within {GRANT_WITHIN:?}")
            })?
    }

    fn handoff(&self) -> Result<Arc<Handoff>> {
        self.shared
            .handoff
            .get()
            .cloned()
            .context("the contender records the handoff before its first client")
    }
}

/// How long a replayed waiter waits for the release that grants it: far longer than any
/// scenario holds a key.
const GRANT_WITHIN: Duration = Duration::from_secs(60);

#[async_trait]
impl Locker for ReplayLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        self.know(key).await?;
        // Free: take it. Held: the holder's release will grant this client.
        let (landed, enqueue_landed) = oneshot::channel();
        let (free, version, turn) = self.with_key(key, |k| {
            let free = !std::mem::replace(&mut k.held, true);
            if !free {
                k.waiter = Some(enqueue_landed);
            }
            (free, k.version.clone(), k.turn.clone())
        })?;
        if free {
            self.write(key, &version, &turn.acquire, &[]).await
        } else {
            self.wait(key, version, landed).await
        }
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        // A waiter is granted by this release and holds on; otherwise the key is free.
        let (version, waiter, turn) = self.with_key(key, |k| {
            let waiter = k.waiter.take();
            k.held = waiter.is_some();
            (k.version.clone(), waiter, k.turn.clone())
        })?;
        let Some(enqueue_landed) = waiter else {
            return self
                .write(key, &version, &turn.release, &turn.history)
                .await;
        };
        tokio::time::timeout(GRANT_WITHIN, enqueue_landed)
            .await
            .with_context(|| {
                format!("the waiter on {key} did not enqueue within {GRANT_WITHIN:?}")
            })?
            .with_context(|| format!("the waiter on {key} failed to enqueue"))?;
        let version = self.with_key(key, |k| k.version.clone())?;
        let handoff = self.handoff()?;
        self.write(key, &version, &handoff.grant, &handoff.history)
            .await
    }

    /// The replayed writes, and the reads of a waiter woken without the document: the turns
    /// that recorded them are not counted.
    fn requests(&self) -> u64 {
        self.requests
    }
}
