//! An in-process store, for unit tests of the core and the client.
//!
//! It keeps the whole contract (CAS, history, list, watch, a clock) in one `HashMap` behind a
//! mutex (and records in another, apart from the keys' entries), so tests of the layers above run fast and without files. Its clock is controllable:
//! [`MemoryStore::advance`] moves time forward and [`MemoryStore::set_epoch`] simulates a reboot.
//! It is never a stand-in for a store under test: every real store runs the conformance suite.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::watch;

use crate::arrivals_seen;
use crate::history_retention::HistoryRetention;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, DueKey, HistoryRecord, Result,
    Store, StoreClock, Version, Versioned, Wake, WatchHandle, WithDocs,
};

/// An in-process [`Store`]. Cloning is not offered: share it through an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    /// Every operation takes this lock briefly and never across an `.await`, so a std mutex is
    /// right (and cheaper than an async one).
    state: Mutex<State>,
    /// The clock's zero: `now_ms` counts from the store's creation.
    created: Instant,
    /// History entries kept per key (the newest), trimmed by each CAS that appends.
    history_keep: u64,
    /// What [`Store::describe`] says: `None` for the usual words.
    description: Option<String>,
}

#[derive(Debug)]
struct State {
    entries: HashMap<String, Entry>,
    /// Records by (key, name). Apart from `entries`, so that a key with records only has no
    /// entry: it is neither listed nor loaded.
    records: HashMap<(String, String), Vec<u8>>,
    /// Added to the real elapsed time by [`MemoryStore::advance`].
    clock_offset_ms: u64,
    epoch: String,
}

/// One key. An entry can exist without a document: `watch` on a key never written creates one
/// so that the first write wakes the watcher.
#[derive(Debug)]
struct Entry {
    /// The current document and its version (1 for the first write); `None` until written.
    document: Option<(u64, Vec<u8>)>,
    /// A queue, not a `Vec`: each write past `history_keep` drops the oldest entry, which from
    /// a `Vec` moved every other entry (a third of a warm acquire + release on this store).
    history: VecDeque<HistoryRecord>,
    /// When the key next needs a worker ([`Store::cas_due`]).
    due_ms: Option<u64>,
    /// Pending arrivals, oldest first ([`Store::append_arrival`]).
    arrivals: Vec<Vec<u8>>,
    /// Told every successful CAS, with the document written, and every append under a
    /// document, with it again (telling of no change); receivers are handed out by `watch`.
    changes: watch::Sender<Wake>,
}

impl Entry {
    fn new() -> Self {
        Self {
            document: None,
            history: VecDeque::new(),
            due_ms: None,
            arrivals: Vec::new(),
            changes: watch::Sender::new(Wake::read_again()),
        }
    }

    /// The document, its version naming the arrivals pending (as many as there are).
    fn versioned(&self) -> Option<Versioned> {
        self.document.as_ref().map(|(version, bytes)| Versioned {
            version: arrivals_seen::compose(&version.to_string(), self.arrivals.len() as u64),
            bytes: bytes.clone(),
            arrivals: self.arrivals.clone(),
        })
    }

    /// Whether a CAS naming `expected` may write: the document is as read (absent for
    /// `None`) and, for a version that read no arrival, none is pending. The arrivals a version
    /// read are the first `seen` still pending: they only grow between writes.
    fn is_at(&self, expected: Option<&Version>) -> bool {
        match (&self.document, expected) {
            (None, None) => true,
            (Some((current, _)), Some(expected)) => {
                let (doc, seen) = arrivals_seen::split(expected);
                let pending = self.arrivals.len() as u64;
                doc == current.to_string()
                    && if seen == 0 {
                        pending == 0
                    } else {
                        seen <= pending
                    }
            }
            _ => false,
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store whose clock reads 0 now and whose epoch no other `MemoryStore` shares.
    pub fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0);
        Self {
            state: Mutex::new(State {
                entries: HashMap::new(),
                records: HashMap::new(),
                clock_offset_ms: 0,
                epoch: format!("memory-{}-{nanos}", std::process::id()),
            }),
            created: Instant::now(),
            history_keep: HistoryRetention::default().keep,
            description: None,
        }
    }

    /// An empty store standing in for a store that does not exist yet, described as
    /// `description`: what a reader of the per-user default store finds before anything has
    /// created it (nothing held, no history), saying which store it is.
    pub fn standing_for(description: String) -> Self {
        Self {
            description: Some(description),
            ..Self::new()
        }
    }

    /// An empty store that keeps at most `retention.keep` history entries per key, as the
    /// other stores do with `history_keep` (the memory store has no age: its history lives as
    /// long as the process).
    pub fn with_history_retention(retention: HistoryRetention) -> Self {
        Self {
            history_keep: retention.keep,
            ..Self::new()
        }
    }

    /// Moves the store's clock forward by `ms` (tests of expiry use this instead of sleeping).
    pub fn advance(&self, ms: u64) {
        let mut state = self.lock();
        state.clock_offset_ms = state.clock_offset_ms.saturating_add(ms);
    }

    /// Replaces the clock's epoch, as a reboot of the SQLite host would: every deadline measured
    /// on the previous epoch is void.
    pub fn set_epoch(&self, epoch: &str) {
        self.lock().epoch = epoch.to_owned();
    }

    /// The state, even if a test panicked while holding the lock: every mutation below is
    /// complete before anything that could panic, so a poisoned state is still consistent.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        match &self.description {
            Some(description) => description.clone(),
            None => "memory: (in-process, for tests)".to_owned(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: true,
            watch_documents: true,
            watch_tagged: false,
            conflict_returns_current: true,
            clock: true,
            clock_uncertain_ms: 0,
            due_index: true,
            locked_update: false,
            update_when_contended: false,
            watch_complete: false,
            arrivals: true,
            arrivals_by_default: false,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        Ok(self.lock().entries.get(key).and_then(Entry::versioned))
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        let mut state = self.lock();
        let current_version = state
            .entries
            .get(key)
            .and_then(|entry| entry.document.as_ref().map(|(version, _)| *version));
        let matches = match state.entries.get(key) {
            Some(entry) => entry.is_at(expected),
            None => expected.is_none(),
        };
        if !matches {
            return Ok(CasOutcome::Conflict {
                current: state.entries.get(key).and_then(Entry::versioned),
            });
        }
        let new_version = current_version.map_or(1, |version| version.saturating_add(1));
        // Only a write (or `watch`) creates an entry, so failed CASes leave nothing behind.
        let entry = state
            .entries
            .entry(key.to_owned())
            .or_insert_with(Entry::new);
        entry.document = Some((new_version, bytes.to_vec()));
        entry.due_ms = due_ms;
        if let Some(expected) = expected {
            // The first `seen` were read (`is_at`); later ones, and all on a first write, stay.
            let (_, seen) = arrivals_seen::split(expected);
            let seen = usize::try_from(seen).unwrap_or(usize::MAX);
            entry.arrivals.drain(..seen.min(entry.arrivals.len()));
        }
        let last_seq = entry.history.back().map_or(0, |record| record.seq);
        entry.history.extend(
            (last_seq + 1..)
                .zip(history)
                .map(|(seq, bytes)| HistoryRecord {
                    seq,
                    bytes: bytes.clone(),
                }),
        );
        // Trimmed by the write that appends: the oldest go, seqs stay.
        let keep = usize::try_from(self.history_keep).unwrap_or(usize::MAX);
        let n_over = entry.history.len().saturating_sub(keep);
        entry.history.drain(..n_over);
        // As a load would return it: with the arrivals left pending, as etcd pushes them.
        if let Some(written) = entry.versioned() {
            Wake::with(written).send(&entry.changes);
        }
        Ok(CasOutcome::Written {
            version: Version(new_version.to_string()),
        })
    }

    async fn append_arrival(&self, key: &str, bytes: &[u8]) -> Result<Option<Versioned>> {
        let mut state = self.lock();
        let entry = state
            .entries
            .entry(key.to_owned())
            .or_insert_with(Entry::new);
        entry.arrivals.push(bytes.to_vec());
        // The document again, with the new arrival, telling of no change of it (as etcd).
        let versioned = entry.versioned();
        if let Some(document) = versioned.clone() {
            Wake::with(document).of_changes(0).send(&entry.changes);
        }
        Ok(versioned)
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        let state = self.lock();
        let Some(entry) = state.entries.get(key) else {
            return Ok(Vec::new());
        };
        // Search rather than index: a trimmed log starts past seq 1.
        let start = entry
            .history
            .partition_point(|record| record.seq <= after_seq);
        Ok(entry.history.range(start..).take(limit).cloned().collect())
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        let state = self.lock();
        Ok(state
            .entries
            .get(key)
            .map(|entry| entry.history.iter().rev().take(limit).cloned().collect())
            .unwrap_or_default())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let state = self.lock();
        let mut keys: Vec<String> = state
            .entries
            .iter()
            .filter(|(key, entry)| entry.document.is_some() && key.starts_with(prefix))
            .map(|(key, _)| key.clone())
            .collect();
        // `String`'s order is byte-wise, as the contract asks.
        keys.sort_unstable();
        Ok(keys)
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        let state = self.lock();
        let mut due: Vec<DueKey> = state
            .entries
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .filter_map(|(key, entry)| {
                entry.due_ms.map(|due_ms| DueKey {
                    key: key.clone(),
                    due_ms,
                    doc: None,
                })
            })
            .collect();
        due.sort_unstable_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        due.truncate(limit);
        for (n, d) in due.iter_mut().enumerate() {
            if docs.wants(n, d.due_ms) {
                d.doc = state.entries.get(&d.key).and_then(Entry::versioned);
            }
        }
        Ok(Some(due))
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        let mut state = self.lock();
        let entry = state
            .entries
            .entry(key.to_owned())
            .or_insert_with(Entry::new);
        Ok(Some(WatchHandle::new(entry.changes.subscribe())))
    }

    async fn clock(&self) -> Result<StoreClock> {
        let elapsed_ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        let state = self.lock();
        Ok(StoreClock::Time {
            now_ms: elapsed_ms.saturating_add(state.clock_offset_ms),
            behind_ms: 0,
            epoch: state.epoch.clone(),
        })
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        self.lock()
            .records
            .insert((key.to_owned(), name.to_owned()), bytes.to_vec());
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        Ok(self
            .lock()
            .records
            .get(&(key.to_owned(), name.to_owned()))
            .cloned())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn time(clock: StoreClock) -> (u64, String) {
        match clock {
            StoreClock::Time { now_ms, epoch, .. } => (now_ms, epoch),
            StoreClock::None => panic!("the memory store has a clock"),
        }
    }

    #[tokio::test]
    async fn advance_moves_the_clock_forward() {
        let store = MemoryStore::new();
        let (before_ms, _) = time(store.clock().await.unwrap());
        store.advance(60_000);
        let (after_ms, _) = time(store.clock().await.unwrap());
        assert!(
            after_ms >= before_ms + 60_000,
            "{after_ms} < {before_ms} + 60000"
        );
    }

    #[tokio::test]
    async fn set_epoch_changes_the_epoch() {
        let store = MemoryStore::new();
        let (_, before) = time(store.clock().await.unwrap());
        store.set_epoch("rebooted");
        let (_, after) = time(store.clock().await.unwrap());
        assert_ne!(before, after);
        assert_eq!(after, "rebooted");
    }

    #[tokio::test]
    async fn two_stores_have_different_epochs() {
        let (_, first) = time(MemoryStore::new().clock().await.unwrap());
        std::thread::sleep(std::time::Duration::from_millis(1));
        let (_, second) = time(MemoryStore::new().clock().await.unwrap());
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn watch_on_a_key_never_written_does_not_make_it_listed() {
        let store = MemoryStore::new();
        let _handle = store.watch("watched").await.unwrap();
        assert!(store.list("").await.unwrap().is_empty());
        assert_eq!(store.load("watched").await.unwrap(), None);
    }
}
