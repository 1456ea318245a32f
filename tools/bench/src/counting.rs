//! A [`Store`] that counts the calls it passes on, so a benchmark can report how many store
//! round trips an operation cost instead of guessing from the design.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use baton_store::{Capabilities, CasOutcome, HistoryRecord, Store, StoreClock, Version, Versioned};
use serde::{Deserialize, Serialize};

/// Delegates every call to the real store and counts it.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    load: AtomicU64,
    cas: AtomicU64,
    cas_conflicts: AtomicU64,
    updates: AtomicU64,
    appends: AtomicU64,
    clock: AtomicU64,
    watch: AtomicU64,
    other: AtomicU64,
}

/// The calls counted since the last [`CountingStore::reset`].
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Counts {
    /// `Store::load`: a read of the document (a round trip on every store).
    pub load: u64,
    /// `Store::cas`, written or not (a round trip on every store).
    pub cas: u64,
    /// Of those, how many lost to a concurrent write.
    pub cas_conflicts: u64,
    /// `Store::update`, counted in `cas` too: a write under the store's lock (on SQLite one
    /// transaction on the file; on PostgreSQL four statements, the row locked between them).
    #[serde(default)]
    pub updates: u64,
    /// `Store::append_arrival`: an enqueue written beside the document, which loses to
    /// nobody (a round trip; on etcd another, rarely, for each slot it finds taken).
    #[serde(default)]
    pub appends: u64,
    /// `Store::clock`: free on SQLite (the host's clock, no file access), a round trip on a
    /// store whose clock is the server's.
    pub clock: u64,
    /// `Store::watch` and `Store::watch_prefix`: a subscription (on SQLite one inotify watcher
    /// per process).
    pub watch: u64,
    /// `history`, `history_tail` and `list` (never called by acquire and release).
    pub other: u64,
}

impl Counts {
    /// Reads and writes of the document: the round trips every store pays.
    pub fn round_trips(&self) -> u64 {
        self.load + self.cas + self.appends
    }

    /// The sum of two counts (of several processes).
    pub fn add(&self, other: &Counts) -> Counts {
        Counts {
            load: self.load + other.load,
            cas: self.cas + other.cas,
            cas_conflicts: self.cas_conflicts + other.cas_conflicts,
            updates: self.updates + other.updates,
            appends: self.appends + other.appends,
            clock: self.clock + other.clock,
            watch: self.watch + other.watch,
            other: self.other + other.other,
        }
    }
}

impl CountingStore {
    /// Counts the calls to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> CountingStore {
        CountingStore {
            inner,
            load: AtomicU64::new(0),
            cas: AtomicU64::new(0),
            cas_conflicts: AtomicU64::new(0),
            updates: AtomicU64::new(0),
            appends: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            watch: AtomicU64::new(0),
            other: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            load: self.load.load(Ordering::Relaxed),
            cas: self.cas.load(Ordering::Relaxed),
            cas_conflicts: self.cas_conflicts.load(Ordering::Relaxed),
            updates: self.updates.load(Ordering::Relaxed),
            appends: self.appends.load(Ordering::Relaxed),
            clock: self.clock.load(Ordering::Relaxed),
            watch: self.watch.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }

    /// Starts counting from zero (after a warm-up).
    pub fn reset(&self) {
        for counter in [
            &self.load,
            &self.cas,
            &self.cas_conflicts,
            &self.updates,
            &self.appends,
            &self.clock,
            &self.watch,
            &self.other,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[async_trait]
impl Store for CountingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn load(&self, key: &str) -> baton_store::Result<Option<Versioned>> {
        bump(&self.load);
        self.inner.load(key).await
    }

    async fn append_arrival(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> baton_store::Result<Option<Versioned>> {
        bump(&self.appends);
        self.inner.append_arrival(key, bytes).await
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> baton_store::Result<CasOutcome> {
        self.cas_waking(key, expected, bytes, history, due_ms, None)
            .await
    }

    async fn cas_waking(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
        wake: Option<&[String]>,
    ) -> baton_store::Result<CasOutcome> {
        bump(&self.cas);
        let outcome = self
            .inner
            .cas_waking(key, expected, bytes, history, due_ms, wake)
            .await;
        if matches!(outcome, Ok(CasOutcome::Conflict { .. })) {
            bump(&self.cas_conflicts);
        }
        outcome
    }

    async fn history(
        &self,
        key: &str,
        after_seq: u64,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        bump(&self.other);
        self.inner.history(key, after_seq, limit).await
    }

    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        bump(&self.other);
        self.inner.history_tail(key, limit).await
    }

    async fn update(
        &self,
        key: &str,
        compute: baton_store::Compute,
    ) -> baton_store::Result<Option<baton_store::Updated>> {
        bump(&self.cas);
        bump(&self.updates);
        self.inner.update(key, compute).await
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: baton_store::WithDocs,
    ) -> baton_store::Result<Option<Vec<baton_store::DueKey>>> {
        bump(&self.other);
        self.inner.due_keys(prefix, limit, docs).await
    }
    async fn list(&self, prefix: &str) -> baton_store::Result<Vec<String>> {
        bump(&self.other);
        self.inner.list(prefix).await
    }

    async fn watch(&self, key: &str) -> baton_store::Result<Option<baton_store::WatchHandle>> {
        bump(&self.watch);
        self.inner.watch(key).await
    }

    async fn watch_tagged(
        &self,
        key: &str,
        tag: &str,
    ) -> baton_store::Result<Option<baton_store::WatchHandle>> {
        bump(&self.watch);
        self.inner.watch_tagged(key, tag).await
    }

    async fn watch_prefix(
        &self,
        prefix: &str,
    ) -> baton_store::Result<Option<baton_store::WatchHandle>> {
        bump(&self.watch);
        self.inner.watch_prefix(prefix).await
    }

    async fn clock(&self) -> baton_store::Result<StoreClock> {
        bump(&self.clock);
        self.inner.clock().await
    }
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> baton_store::Result<()> {
        self.inner.put_record(key, name, bytes).await
    }
    async fn get_record(&self, key: &str, name: &str) -> baton_store::Result<Option<Vec<u8>>> {
        self.inner.get_record(key, name).await
    }
}
