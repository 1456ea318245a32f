//! The memory store with probes, shared by the client's tests: it counts loads and CASes, can
//! hide its wake-ups (a store that cannot push, as S3 and DynamoDB), and can be switched off
//! for writes (a store gone away); and waiting for a key's arrivals on any store.
#![allow(dead_code)] // each test file uses part of it

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use baton_store::memory::MemoryStore;
use baton_store::{
    Capabilities, CasOutcome, Change, Compute, HistoryRecord, Store, StoreClock, StoreError,
    Updated, Version, Versioned, WatchHandle,
};

/// A view of a shared [`MemoryStore`], as one process has it.
#[derive(Debug)]
pub struct Probe {
    inner: Arc<MemoryStore>,
    /// Loads made through this view.
    pub loads: AtomicU64,
    /// CASes made through this view (not counting those refused while `down`).
    pub cases: AtomicU64,
    /// Subscriptions made through this view.
    pub watches: AtomicU64,
    /// Arrivals appended through this view.
    pub appends: AtomicU64,
    /// What this view says of `Capabilities::arrivals_by_default` (the memory store: no).
    pub arrivals_by_default: AtomicBool,
    /// Whether `watch` pushes (false: as S3 and DynamoDB, waiters poll).
    push: bool,
    /// Whether its wake-ups leave the document out (as SQLite's, and PostgreSQL's and Redis's
    /// above a size): a waiter must read to look.
    bare: bool,
    /// Wake-ups pass on at most once per this long (as a busy process takes them), each
    /// standing for every change since the last: several writes in one wake-up.
    wake_every: Option<Duration>,
    /// While set, every CAS fails as `Unavailable`.
    pub down: AtomicBool,
    /// While set, every load, CAS and clock reading fails as `Unavailable` (a store restarting).
    pub unreachable: AtomicBool,
    /// When set, the next CAS is written, then the store becomes unreachable before answering
    /// (`Ambiguous`): a server that went down right after taking the write.
    pub vanish_after_cas: AtomicBool,
    /// When set (ms), the next CAS is written and its answer is held that long, then comes
    /// back `Ambiguous` while the store stays reachable: a reply lost in a slow network.
    pub lose_reply_after_ms: AtomicU64,
    /// How far behind the store's time this view's clock readings are: a process whose writes
    /// land long after it computed them (held in a network), with the deadlines it set in them.
    pub clock_lag_ms: AtomicU64,
    /// How long the reply to a CAS takes to come back after the write has landed: a process
    /// stopped between its write and reading the answer, or an answer held in a network.
    pub reply_delay_ms: AtomicU64,
    /// Keys whose CASes take this long to reach the store (then land): a slow or half-dead
    /// connection for some requests only.
    pub slow_keys: Mutex<HashMap<String, u64>>,
    /// The next this many record writes (a job's parameters, a run's report) are written and
    /// their answers lost (`Ambiguous`): a connection cut under them.
    pub lose_record_replies: AtomicU64,
    /// The next this many CASes lose without writing, answered with the document as it is:
    /// as if another process had written just before each.
    pub lose_next_cases: AtomicU64,
    /// Where set, the store locks a key for an update as PostgreSQL locks its row
    /// (`Capabilities::update_when_contended`), and a CAS waits for it: shared by every view
    /// of the store, one lock for every key (enough for a test).
    row_lock: Option<Arc<tokio::sync::Mutex<()>>>,
    /// CASes that lost, and updates asked for.
    pub conflicts: AtomicU64,
    pub updates: AtomicU64,
    /// Reads of the due index made through this view.
    pub due_looks: AtomicU64,
    /// CASes under way through this view, and the loads made while one was.
    pub writing: AtomicU64,
    pub loads_while_writing: AtomicU64,
    /// Answers the next reads of the due index give instead of the store's, first first: the
    /// index as it was a moment before (other workers have claimed since).
    pub stale_due: Mutex<Vec<Vec<baton_store::DueKey>>>,
}

impl Probe {
    /// A view of `inner`, pushing wake-ups or not.
    pub fn new(inner: Arc<MemoryStore>, push: bool) -> Arc<Probe> {
        Self::with_wakes(inner, push, false)
    }

    /// A view of `inner` whose wake-ups carry no document.
    pub fn bare(inner: Arc<MemoryStore>) -> Arc<Probe> {
        Self::with_wakes(inner, true, true)
    }

    /// A view of `inner` whose wake-ups, with their documents, pass on at most once per `every`.
    pub fn slow_wakes(inner: Arc<MemoryStore>, every: Duration) -> Arc<Probe> {
        let mut probe = Self::with_wakes(inner, true, false);
        if let Some(probe) = Arc::get_mut(&mut probe) {
            probe.wake_every = Some(every);
        }
        probe
    }

    /// A view of `inner` that locks keys for updates with `row_lock`, which every view of the
    /// store shares.
    pub fn row_locked(
        inner: Arc<MemoryStore>,
        row_lock: &Arc<tokio::sync::Mutex<()>>,
    ) -> Arc<Probe> {
        let mut probe = Self::with_wakes(inner, true, false);
        if let Some(probe) = Arc::get_mut(&mut probe) {
            probe.row_lock = Some(row_lock.clone());
        }
        probe
    }

    fn with_wakes(inner: Arc<MemoryStore>, push: bool, bare: bool) -> Arc<Probe> {
        Arc::new(Probe {
            inner,
            loads: AtomicU64::new(0),
            cases: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            appends: AtomicU64::new(0),
            arrivals_by_default: AtomicBool::new(false),
            push,
            bare,
            wake_every: None,
            down: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            vanish_after_cas: AtomicBool::new(false),
            lose_reply_after_ms: AtomicU64::new(0),
            clock_lag_ms: AtomicU64::new(0),
            reply_delay_ms: AtomicU64::new(0),
            slow_keys: Mutex::new(HashMap::new()),
            lose_record_replies: AtomicU64::new(0),
            lose_next_cases: AtomicU64::new(0),
            row_lock: None,
            conflicts: AtomicU64::new(0),
            updates: AtomicU64::new(0),
            due_looks: AtomicU64::new(0),
            writing: AtomicU64::new(0),
            loads_while_writing: AtomicU64::new(0),
            stale_due: Mutex::new(Vec::new()),
        })
    }

    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::SeqCst)
    }

    pub fn cases(&self) -> u64 {
        self.cases.load(Ordering::SeqCst)
    }

    pub fn watches(&self) -> u64 {
        self.watches.load(Ordering::SeqCst)
    }

    fn reach(&self) -> baton_store::Result<()> {
        if self.unreachable.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable {
                store: "memory, probed".into(),
                reason: "unreachable: switched off by the test".into(),
            });
        }
        Ok(())
    }
}

/// A CAS under way, counted in [`Probe::writing`] until dropped.
struct Writing<'a>(&'a AtomicU64);

impl<'a> Writing<'a> {
    fn enter(count: &'a AtomicU64) -> Writing<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Writing(count)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Store for Probe {
    fn describe(&self) -> String {
        "memory, probed".into()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: self.push,
            update_when_contended: self.row_lock.is_some(),
            // A store that locks its rows keeps no arrivals (as PostgreSQL): a locked update
            // reads the document alone.
            arrivals: self.row_lock.is_none() && self.inner.capabilities().arrivals,
            arrivals_by_default: self.arrivals_by_default.load(Ordering::SeqCst),
            ..self.inner.capabilities()
        }
    }
    async fn load(&self, key: &str) -> baton_store::Result<Option<Versioned>> {
        self.reach()?;
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.writing.load(Ordering::SeqCst) > 0 {
            self.loads_while_writing.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.load(key).await
    }
    async fn append_arrival(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> baton_store::Result<Option<Versioned>> {
        self.reach()?;
        self.appends.fetch_add(1, Ordering::SeqCst);
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
        let _writing = Writing::enter(&self.writing);
        self.reach()?;
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable {
                store: self.describe(),
                reason: "switched off by the test".into(),
            });
        }
        let slow_ms = self
            .slow_keys
            .lock()
            .ok()
            .and_then(|keys| keys.get(key).copied());
        if let Some(slow_ms) = slow_ms {
            tokio::time::sleep(Duration::from_millis(slow_ms)).await;
        }
        self.cases.fetch_add(1, Ordering::SeqCst);
        let loses = self
            .lose_next_cases
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if loses {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
            let current = self.inner.load(key).await?;
            return Ok(CasOutcome::Conflict { current });
        }
        let row = match &self.row_lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        let outcome = self
            .inner
            .cas_due(key, expected, bytes, history, due_ms)
            .await;
        drop(row);
        if matches!(outcome, Ok(CasOutcome::Conflict { .. })) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        let delay_ms = self.reply_delay_ms.load(Ordering::SeqCst);
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        let lost_after_ms = self.lose_reply_after_ms.swap(0, Ordering::SeqCst);
        if lost_after_ms > 0 {
            tokio::time::sleep(Duration::from_millis(lost_after_ms)).await;
            return Err(StoreError::Ambiguous {
                store: self.describe(),
                reason: "the answer was lost after the write landed (the test)".into(),
            });
        }
        if self.vanish_after_cas.swap(false, Ordering::SeqCst) {
            self.unreachable.store(true, Ordering::SeqCst);
            return Err(StoreError::Ambiguous {
                store: self.describe(),
                reason: "the server went away after taking the write (the test)".into(),
            });
        }
        outcome
    }
    async fn history(
        &self,
        key: &str,
        after_seq: u64,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        self.inner.history(key, after_seq, limit).await
    }
    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        self.inner.history_tail(key, limit).await
    }
    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: baton_store::WithDocs,
    ) -> baton_store::Result<Option<Vec<baton_store::DueKey>>> {
        self.due_looks.fetch_add(1, Ordering::SeqCst);
        let stale = {
            let mut stale = self.stale_due.lock().unwrap_or_else(|e| e.into_inner());
            (!stale.is_empty()).then(|| stale.remove(0))
        };
        if let Some(due) = stale {
            return Ok(Some(due));
        }
        self.inner.due_keys(prefix, limit, docs).await
    }
    async fn list(&self, prefix: &str) -> baton_store::Result<Vec<String>> {
        self.inner.list(prefix).await
    }
    async fn watch(&self, key: &str) -> baton_store::Result<Option<WatchHandle>> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        if !self.push {
            return Ok(None);
        }
        let Some(mut inner) = self.inner.watch(key).await? else {
            return Ok(None);
        };
        if !self.bare && self.wake_every.is_none() {
            return Ok(Some(inner));
        }
        // Each wake-up passed on without its document, or late, counting the changes it
        // stands for.
        let (tx, rx) = tokio::sync::watch::channel(baton_store::Wake::read_again());
        let (bare, every) = (self.bare, self.wake_every);
        tokio::spawn(async move {
            let mut told = inner.told();
            loop {
                if let Some(every) = every {
                    tokio::time::sleep(every).await;
                }
                let Ok(document) = inner.changed().await else {
                    return;
                };
                if tx.is_closed() {
                    return;
                }
                let wake = match document {
                    Some(document) if !bare => baton_store::Wake::with(document),
                    _ => baton_store::Wake::read_again(),
                };
                wake.of_changes(inner.told().wrapping_sub(told)).send(&tx);
                told = inner.told();
            }
        });
        Ok(Some(WatchHandle::new(rx)))
    }
    async fn clock(&self) -> baton_store::Result<StoreClock> {
        self.reach()?;
        let lag_ms = self.clock_lag_ms.load(Ordering::SeqCst);
        Ok(match self.inner.clock().await? {
            StoreClock::Time {
                now_ms,
                behind_ms,
                epoch,
            } => StoreClock::Time {
                now_ms: now_ms.saturating_sub(lag_ms),
                // Its requests were held, not quick: the reading says how far behind it may be.
                behind_ms: behind_ms + lag_ms,
                epoch,
            },
            StoreClock::None => StoreClock::None,
        })
    }
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> baton_store::Result<()> {
        self.inner.put_record(key, name, bytes).await?;
        let lose = self
            .lose_record_replies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lose.is_ok() {
            return Err(StoreError::Ambiguous {
                store: self.describe(),
                reason: "the answer to a record's write was lost (the test's fault)".into(),
            });
        }
        Ok(())
    }
    async fn get_record(&self, key: &str, name: &str) -> baton_store::Result<Option<Vec<u8>>> {
        self.inner.get_record(key, name).await
    }
    /// A locked update, as [`Probe::row_locked`] makes one: the key's document read and
    /// written under the row lock; a key without one has nothing to lock.
    async fn update(&self, key: &str, compute: Compute) -> baton_store::Result<Option<Updated>> {
        let Some(lock) = &self.row_lock else {
            return Ok(None);
        };
        self.reach()?;
        self.updates.fetch_add(1, Ordering::SeqCst);
        let _row = lock.lock().await;
        let Some(current) = self.inner.load(key).await? else {
            return Ok(None);
        };
        let replacement = match compute(Some(&current)) {
            Change::Keep => return Ok(Some(Updated::Kept)),
            Change::Write(replacement) => replacement,
        };
        for (name, bytes) in &replacement.records {
            self.inner.put_record(key, name, bytes).await?;
        }
        let expected = Some(&current.version);
        let (bytes, history) = (&replacement.bytes, &replacement.history);
        match self
            .inner
            .cas_due(key, expected, bytes, history, replacement.due_ms)
            .await?
        {
            CasOutcome::Written { version } => Ok(Some(Updated::Written { version })),
            CasOutcome::Conflict { .. } => Err(StoreError::Backend {
                store: self.describe(),
                source: "a write came between the locked read and its write".into(),
            }),
        }
    }
}

/// The arrival of ticket `id`, as another process would append it.
pub fn arrival(id: &str, unsettled_seen: u64) -> Vec<u8> {
    let enqueue: baton_core::Enqueue = serde_json::from_value(serde_json::json!({
        "id": id, "token": format!("token-of-{id}"), "mode": "normal", "limit": 1,
        "context": "arrived", "supersede": false, "keep": false, "ttl_ms": 30_000,
        "waiter_ttl_ms": 60_000, "claim_ms": 5_000, "max_live": 1_000,
    }))
    .expect("an enqueue");
    baton_core::arrival::Arrival::of(&enqueue, unsettled_seen).encode()
}

/// Waits until `key` has `n` arrivals pending in `store`.
pub async fn until_pending(store: &dyn Store, key: &str, n: usize) {
    for _ in 0..2_000 {
        let pending = store
            .load(key)
            .await
            .unwrap()
            .map_or(0, |k| k.arrivals.len());
        if pending >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} arrivals never came");
}
