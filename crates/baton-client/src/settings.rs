//! The store's settings document — the notification rules and the freezes — as this process
//! reads it ([`SettingsCache`], at most [`SETTINGS_FRESH_MS`] old when a write records events
//! or applies a freeze) and changes it ([`change_settings_of`], by CAS, under the client's one
//! retry policy: [`crate::retry`]), in a store or through `baton serve` alike ([`SettingsDoc`]).

use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use baton_core::freeze::{Freeze, Resumed};
use baton_core::names;
use baton_core::notify::{Rule, Settings};
use baton_store::{CasOutcome, Store, StoreError, Version, Versioned};

use crate::error::ClientError;
use crate::retry::{AfterConflict, Conflicts, SETTINGS_CONFLICTS};
use serde::{Deserialize, Serialize};

/// A change of the settings: a freeze set or ended (`baton pause`, `baton resume`), which takes
/// effect on the keys it covers, or a notification rule added or removed (`baton notify add`,
/// `rm`), which every process picks up within [`SETTINGS_FRESH_MS`].
#[derive(Clone, Debug)]
pub enum SettingsChange {
    /// Set a freeze (one with the same target and window replaces the earlier one).
    Pause(Freeze),
    /// End every freeze set on exactly `target`.
    Resume {
        /// A key, a prefix ending in `/`, or `*`.
        target: String,
        /// Who resumed, for the log.
        by: String,
    },
    /// Add or remove a notification rule.
    Rule(RuleChange),
}

/// A notification rule added or removed.
#[derive(Clone, Debug)]
pub enum RuleChange {
    /// Add `rule`, replacing the rule of the same name.
    Add(Rule),
    /// Remove the rule named `name`.
    Remove {
        /// The rule's name.
        name: String,
    },
}

/// What a [`SettingsChange`] did: once it returns, every writer's copy of the settings has
/// it, and the keys it covers say so.
#[derive(Clone, Debug, Default)]
pub struct SettingsChanged {
    /// The freezes a resume ended (none when none was set on its target; none for a pause).
    pub ended: Vec<Freeze>,
    /// The keys written.
    pub touched: Touched,
    /// For a rule's change: a rule of that name was there before (added: it was replaced;
    /// removed: it was removed).
    pub rule_was_there: bool,
}

/// The store's freezes that may still be in force, and those ended by a resume (through a
/// server: those the caller may read).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Freezes {
    /// Set, in the order they were set.
    pub freezes: Vec<Freeze>,
    /// Ended by `baton resume`, newest last.
    pub resumed: Vec<Resumed>,
}

/// What a pause or a resume did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Touched {
    /// The keys the freeze covers that have a document (each was written).
    pub keys: Vec<String>,
    /// Of those, the keys with holders now (they finish their turns).
    pub held: Vec<String>,
    /// Tickets waiting on those keys (they keep their places).
    pub waiting: usize,
}

/// How old the cached rules may be when a change's events are recorded: a change of rules
/// takes effect within it. The default poll interval's upper end.
pub const SETTINGS_FRESH_MS: u64 = 1_000;
/// The rules as one process last read them.
///
/// A write takes the copy it has while the copy is young enough, even with a read under way: a
/// read started in the background ([`SettingsCache::prefetch`], at half the copy's life) is
/// there to keep writes from waiting, and a write that waited for it paid a round trip before
/// its own (every other release after a turn of over half a second did). The executors start
/// that read once a write has its answer, not before: started first, it went out beside the
/// write it could not serve and slowed it (every other release of a turn of a third of a
/// second sent the read alongside on Redis and PostgreSQL).
#[derive(Debug, Default)]
pub struct SettingsCache {
    copy: std::sync::Mutex<Copy>,
    /// Held while a read is under way, so that one runs at a time.
    reading: tokio::sync::Mutex<()>,
}

/// The copy, and how many times it was dropped (a read started before a drop is not kept).
#[derive(Debug, Default)]
struct Copy {
    /// When it was read (the reader's monotonic ms at its start), and what it holds.
    read: Option<(u64, Arc<Settings>)>,
    dropped: u64,
}

impl SettingsCache {
    /// Starts reading the rules in the background when the copy is older than half its life,
    /// so it is fresh when a write needs it.
    pub(crate) fn prefetch(self: &Arc<Self>, store: &Arc<dyn Store>, mono_ms: u64) {
        let stale = self.fresh(mono_ms, SETTINGS_FRESH_MS / 2).is_none();
        // A read under way will do.
        if stale && self.reading.try_lock().is_ok() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (cache, store) = (self.clone(), store.clone());
                runtime.spawn(async move {
                    let _ = cache.settings(&store, mono_ms, SETTINGS_FRESH_MS / 2).await;
                });
            }
        }
    }

    /// Drops the copy: the next use reads the settings (after this process changed them), and
    /// a read under way, which may have missed the change, is not kept.
    pub(crate) fn forget(&self) {
        let mut copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        copy.read = None;
        copy.dropped += 1;
    }

    /// The settings, read again when the copy is older than `max_age_ms` (waiting for a read
    /// under way rather than starting another).
    pub(crate) async fn settings(
        &self,
        store: &Arc<dyn Store>,
        mono_ms: u64,
        max_age_ms: u64,
    ) -> Result<Arc<Settings>, ClientError> {
        if let Some(settings) = self.fresh(mono_ms, max_age_ms) {
            return Ok(settings);
        }
        let _reading = self.reading.lock().await;
        if let Some(settings) = self.fresh(mono_ms, max_age_ms) {
            return Ok(settings);
        }
        let dropped = self.copy_now().dropped;
        let settings = Arc::new(read_settings(store.as_ref()).await?);
        let mut copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        if copy.dropped == dropped {
            copy.read = Some((mono_ms, settings.clone()));
        }
        Ok(settings)
    }

    /// The copy, when it is younger than `max_age_ms` at `mono_ms`.
    fn fresh(&self, mono_ms: u64, max_age_ms: u64) -> Option<Arc<Settings>> {
        let copy = self.copy_now();
        copy.read
            .as_ref()
            .filter(|(read_at, _)| mono_ms < read_at + max_age_ms)
            .map(|(_, settings)| settings.clone())
    }

    fn copy_now(&self) -> std::sync::MutexGuard<'_, Copy> {
        self.copy.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads the rules. A settings document this baton cannot read is reported in the log and
/// taken as no rules: it must not stop every lock of the store.
pub async fn read_settings(store: &dyn Store) -> Result<Settings, ClientError> {
    let Some(read) = store.load(names::NOTIFY_SETTINGS).await? else {
        return Ok(Settings::default());
    };
    Ok(Settings::decode(&read.bytes).unwrap_or_else(|error| {
        tracing::warn!("notifications are off: {error}");
        Settings::default()
    }))
}

/// Where the settings document is read, and written by CAS: a key of a store, or the settings
/// endpoint of `baton serve` (`crate::remote`), so that [`change_settings_of`]'s loop is
/// written once for both.
#[async_trait]
pub(crate) trait SettingsDoc: Send + Sync {
    /// The document and its version (`None`: never written).
    async fn load_settings(&self) -> Result<Option<Versioned>, StoreError>;
    /// Writes `bytes` if the document is still at `expected`.
    async fn cas_settings(
        &self,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<CasOutcome, StoreError>;
}

#[async_trait]
impl SettingsDoc for dyn Store + '_ {
    async fn load_settings(&self) -> Result<Option<Versioned>, StoreError> {
        self.load(names::NOTIFY_SETTINGS).await
    }

    async fn cas_settings(
        &self,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<CasOutcome, StoreError> {
        self.cas(names::NOTIFY_SETTINGS, expected, bytes, &[]).await
    }
}

/// Changes the settings in `store` with `change` by CAS ([`change_settings_of`]).
pub async fn change_settings<T>(
    store: &dyn Store,
    change: impl FnMut(&mut Settings) -> Result<T, ClientError> + Send,
) -> Result<T, ClientError> {
    change_settings_of(store, change).await
}

/// Changes the settings with `change` by CAS; returns what `change` returned the last time.
///
/// After a conflict `change` is judged again against the document that won, after the pause
/// the retry policy calls for, up to `SETTINGS_CONFLICTS` in a row. A write whose answer was
/// lost is recognised by reading the document again: the very bytes it wrote there are its own
/// (or a write of the same change: the same end); anything else, and the change is judged again.
pub(crate) async fn change_settings_of<T, D: SettingsDoc + ?Sized>(
    doc: &D,
    mut change: impl FnMut(&mut Settings) -> Result<T, ClientError> + Send,
) -> Result<T, ClientError> {
    let mut conflicts = Conflicts::new(SETTINGS_CONFLICTS);
    let mut read = doc.load_settings().await?;
    loop {
        let mut settings = match &read {
            Some(read) => {
                Settings::decode(&read.bytes).map_err(|e| ClientError::refused("notify", e))?
            }
            None => Settings::default(),
        };
        let result = change(&mut settings)?;
        let bytes = settings.encode();
        let expected = read.as_ref().map(|r| &r.version);
        match doc.cas_settings(expected, &bytes).await {
            Ok(CasOutcome::Written { .. }) => return Ok(result),
            Ok(CasOutcome::Conflict { current }) => {
                read = match (conflicts.lost_one("notify").await?, current) {
                    (AfterConflict::Again, Some(current)) => Some(current),
                    _ => doc.load_settings().await?,
                };
            }
            Err(StoreError::Ambiguous { .. }) => {
                read = doc.load_settings().await?;
                if read.as_ref().is_some_and(|read| read.bytes == bytes) {
                    return Ok(result);
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Makes a rule's change in `doc` by CAS ([`change_settings_of`]): every transport's way to
/// add or remove a rule, the settings document being the same bytes wherever it is kept.
pub(crate) async fn change_rule<D: SettingsDoc + ?Sized>(
    doc: &D,
    change: &RuleChange,
) -> Result<SettingsChanged, ClientError> {
    let rule_was_there = change_settings_of(doc, |settings| match change {
        RuleChange::Add(rule) => {
            let there = settings.rules.iter().any(|r| r.name == rule.name);
            settings
                .add(rule.clone())
                .map_err(|e| ClientError::refused("notify", e))?;
            Ok(there)
        }
        RuleChange::Remove { name } => Ok(settings.remove(name)),
    })
    .await?;
    Ok(SettingsChanged {
        rule_was_there,
        ..SettingsChanged::default()
    })
}

/// The freezes in `store`'s settings ([`Freezes`]), ended ones included.
pub(crate) async fn read_freezes(store: &dyn Store) -> Result<Freezes, ClientError> {
    let settings = read_settings(store).await?;
    Ok(Freezes {
        freezes: settings.freezes,
        resumed: settings.resumed,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use baton_store::memory::MemoryStore;
    use baton_store::{Capabilities, HistoryRecord, StoreClock, WatchHandle};
    use tokio::sync::{Notify, Semaphore};

    use super::*;

    /// The memory store, whose reads of the settings wait for a permit once `gate` is closed,
    /// telling `entered` when one starts waiting.
    #[derive(Debug)]
    struct Gated {
        inner: MemoryStore,
        closed: std::sync::atomic::AtomicBool,
        gate: Semaphore,
        entered: Notify,
        loads: AtomicU64,
    }

    #[async_trait]
    impl Store for Gated {
        fn describe(&self) -> String {
            "memory, gated".into()
        }
        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }
        async fn load(&self, key: &str) -> baton_store::Result<Option<Versioned>> {
            self.loads.fetch_add(1, Ordering::SeqCst);
            if self.closed.load(Ordering::SeqCst) {
                self.entered.notify_one();
                let _permit = self.gate.acquire().await;
            }
            self.inner.load(key).await
        }
        async fn cas_due(
            &self,
            key: &str,
            expected: Option<&Version>,
            bytes: &[u8],
            history: &[Vec<u8>],
            due_ms: Option<u64>,
        ) -> baton_store::Result<CasOutcome> {
            self.inner
                .cas_due(key, expected, bytes, history, due_ms)
                .await
        }
        async fn history(
            &self,
            k: &str,
            after: u64,
            n: usize,
        ) -> baton_store::Result<Vec<HistoryRecord>> {
            self.inner.history(k, after, n).await
        }
        async fn history_tail(&self, k: &str, n: usize) -> baton_store::Result<Vec<HistoryRecord>> {
            self.inner.history_tail(k, n).await
        }
        async fn list(&self, prefix: &str) -> baton_store::Result<Vec<String>> {
            self.inner.list(prefix).await
        }
        async fn watch(&self, key: &str) -> baton_store::Result<Option<WatchHandle>> {
            self.inner.watch(key).await
        }
        async fn clock(&self) -> baton_store::Result<StoreClock> {
            self.inner.clock().await
        }
        async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> baton_store::Result<()> {
            self.inner.put_record(key, name, bytes).await
        }
        async fn get_record(&self, key: &str, name: &str) -> baton_store::Result<Option<Vec<u8>>> {
            self.inner.get_record(key, name).await
        }
    }

    /// Long enough to tell a wait that never ends (the settings read is held) from none.
    const STUCK: Duration = Duration::from_secs(5);

    /// A store whose first settings read has been made at 0, and whose later ones are held.
    async fn read_once_then_held() -> (Arc<Gated>, Arc<dyn Store>, Arc<SettingsCache>) {
        let gated = Arc::new(Gated {
            inner: MemoryStore::new(),
            closed: Default::default(),
            gate: Semaphore::new(0),
            entered: Notify::new(),
            loads: AtomicU64::new(0),
        });
        let store: Arc<dyn Store> = gated.clone();
        let cache = Arc::new(SettingsCache::default());
        cache
            .settings(&store, 0, SETTINGS_FRESH_MS)
            .await
            .expect("read");
        gated.closed.store(true, Ordering::SeqCst);
        (gated, store, cache)
    }

    #[tokio::test]
    async fn a_write_takes_its_young_enough_copy_while_the_prefetch_reads() {
        let (gated, store, cache) = read_once_then_held().await;
        let half = SETTINGS_FRESH_MS / 2;
        cache.prefetch(&store, half + 10);
        tokio::time::timeout(STUCK, gated.entered.notified())
            .await
            .expect("past half its life, the copy is read again in the background");
        let taken =
            tokio::time::timeout(STUCK, cache.settings(&store, half + 20, SETTINGS_FRESH_MS))
                .await
                .expect("a write with a copy younger than its limit does not wait for the read");
        assert!(taken.is_ok());
        assert_eq!(gated.loads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_write_whose_copy_is_too_old_waits_for_the_read_under_way_instead_of_another() {
        let (gated, store, cache) = read_once_then_held().await;
        cache.prefetch(&store, SETTINGS_FRESH_MS / 2 + 10);
        tokio::time::timeout(STUCK, gated.entered.notified())
            .await
            .expect("a read in the background");
        let waiting = tokio::spawn({
            let (cache, store) = (cache.clone(), store.clone());
            async move {
                cache
                    .settings(&store, SETTINGS_FRESH_MS + 10, SETTINGS_FRESH_MS)
                    .await
            }
        });
        gated.gate.add_permits(1);
        let got = tokio::time::timeout(STUCK, waiting)
            .await
            .expect("the read ended");
        assert!(got.expect("no panic").is_ok());
        assert_eq!(gated.loads.load(Ordering::SeqCst), 2, "one read, shared");
    }

    #[tokio::test]
    async fn a_read_under_way_when_the_copy_is_dropped_is_not_kept() {
        let (gated, store, cache) = read_once_then_held().await;
        cache.prefetch(&store, SETTINGS_FRESH_MS / 2 + 10);
        tokio::time::timeout(STUCK, gated.entered.notified())
            .await
            .expect("a read in the background");
        cache.forget();
        gated.gate.add_permits(2);
        gated.closed.store(false, Ordering::SeqCst);
        cache
            .settings(&store, SETTINGS_FRESH_MS / 2 + 20, SETTINGS_FRESH_MS)
            .await
            .expect("read");
        assert_eq!(
            gated.loads.load(Ordering::SeqCst),
            3,
            "read again after the drop"
        );
    }
}
