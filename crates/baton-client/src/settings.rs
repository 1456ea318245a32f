//! The store's settings document — the notification rules and the freezes — as this process
//! reads it ([`SettingsCache`], at most [`SETTINGS_FRESH_MS`] old when a write records events
//! or applies a freeze) and changes it ([`change_settings_of`], by CAS, under the client's one
//! retry policy: [`crate::retry`]), in a store or through `baton serve` alike ([`SettingsDoc`]).

use std::sync::Arc;

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
#[derive(Debug, Default)]
pub struct SettingsCache {
    state: tokio::sync::Mutex<Option<(u64, Arc<Settings>)>>,
}

impl SettingsCache {
    /// Starts reading the rules in the background when the copy is older than half its life,
    /// so it is fresh when a write needs it.
    pub(crate) fn prefetch(self: &Arc<Self>, store: &Arc<dyn Store>, mono_ms: u64) {
        let stale = match self.state.try_lock() {
            Ok(state) => state
                .as_ref()
                .is_none_or(|(read_at, _)| mono_ms >= read_at + SETTINGS_FRESH_MS / 2),
            Err(_) => false, // a read is under way
        };
        if stale {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (cache, store) = (self.clone(), store.clone());
                runtime.spawn(async move {
                    let _ = cache.settings(&store, mono_ms, SETTINGS_FRESH_MS / 2).await;
                });
            }
        }
    }

    /// Drops the copy (when it is not being read): the next use reads the settings.
    pub(crate) fn forget(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            *state = None;
        }
    }

    /// The settings, read again when the copy is older than `max_age_ms`.
    pub(crate) async fn settings(
        &self,
        store: &Arc<dyn Store>,
        mono_ms: u64,
        max_age_ms: u64,
    ) -> Result<Arc<Settings>, ClientError> {
        let mut state = self.state.lock().await;
        if let Some((read_at, settings)) = state.as_ref() {
            if mono_ms < read_at + max_age_ms {
                return Ok(settings.clone());
            }
        }
        let settings = Arc::new(read_settings(store.as_ref()).await?);
        *state = Some((mono_ms, settings.clone()));
        Ok(settings)
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
