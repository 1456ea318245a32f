//! A freeze set or ended by a transport that writes the store itself: the settings document
//! changed by CAS, then the keys the freeze covers written so they say so.
//!
//! A writer applies the freeze from its copy of the settings, at most [`SETTINGS_FRESH_MS`] old.
//! So a pause waits that long after its write before it returns: from then on no process
//! grants the key (a grant a moment earlier was made by a writer whose copy predated the
//! pause). It then ticks the keys the freeze covers, so their documents show it to waiters,
//! `status` and the dashboard at once and the `paused` event is raised. A resume ticks them at
//! once (its own copy is fresh: the next in line is granted by that write) and once more after
//! the same delay, in case a writer with an older copy wrote the pause again.

use std::sync::Arc;
use std::time::Duration;

use baton_core::freeze::Freeze;
use baton_core::{Op, Request};
use baton_store::Store;

use super::{execute, list_keys, Executor};
use crate::error::ClientError;
use crate::settings::{
    change_rule, change_settings, SettingsCache, SettingsChange, SettingsChanged, Touched,
    SETTINGS_FRESH_MS,
};
use crate::time::wall_ms;
use crate::turn::ids::new_attempt_id;

/// Makes `change` through `executor` on `store`, whose settings `settings` caches.
pub(super) async fn change(
    executor: &dyn Executor,
    store: &Arc<dyn Store>,
    settings: &SettingsCache,
    change: SettingsChange,
) -> Result<SettingsChanged, ClientError> {
    let covered = Covered { executor, store };
    match change {
        SettingsChange::Pause(freeze) => pause(&covered, settings, freeze).await,
        SettingsChange::Resume { target, by } => resume(&covered, settings, &target, &by).await,
        SettingsChange::Rule(rule) => change_rule(store.as_ref(), &rule).await,
    }
}

/// Adds `freeze` to the settings, waits until every writer's copy has it, and writes each key
/// it covers. A freeze with the same target and window replaces the earlier one.
async fn pause(
    covered: &Covered<'_>,
    settings: &SettingsCache,
    freeze: Freeze,
) -> Result<SettingsChanged, ClientError> {
    let target = freeze.target.clone();
    change_settings(covered.store.as_ref(), |doc| {
        doc.pause(freeze.clone(), wall_ms())
            .map_err(|e| ClientError::refused(&target, e))
    })
    .await?;
    settings.forget();
    tokio::time::sleep(copies_fresh()).await;
    let touched = covered.tick(&target).await?;
    Ok(SettingsChanged {
        touched,
        ..SettingsChanged::default()
    })
}

/// Removes every freeze set on exactly `target` (`by`: who resumed, for the log) and writes
/// each key they covered; none ended when no freeze is set on `target` itself (checked by the
/// caller: `crate::freeze::resume`).
async fn resume(
    covered: &Covered<'_>,
    settings: &SettingsCache,
    target: &str,
    by: &str,
) -> Result<SettingsChanged, ClientError> {
    let ended = change_settings(covered.store.as_ref(), |doc| {
        Ok(doc.resume(target, by, wall_ms()))
    })
    .await?;
    let mut touched = Touched::default();
    if ended.is_empty() {
        return Ok(SettingsChanged {
            ended,
            ..SettingsChanged::default()
        });
    }
    settings.forget();
    for freeze in &ended {
        touched = covered.tick(&freeze.target).await?;
    }
    tokio::time::sleep(copies_fresh()).await;
    for freeze in &ended {
        covered.tick(&freeze.target).await?;
    }
    Ok(SettingsChanged {
        ended,
        touched,
        rule_was_there: false,
    })
}

/// Long enough for every writer's copy of the settings to be read again.
fn copies_fresh() -> Duration {
    Duration::from_millis(SETTINGS_FRESH_MS + 100)
}

/// The keys of a store a freeze covers, written through an executor.
struct Covered<'a> {
    executor: &'a dyn Executor,
    store: &'a Arc<dyn Store>,
}

impl Covered<'_> {
    /// Writes every existing key `target` covers (an empty operation: the write records the
    /// freeze in force, grants what may be granted, raises the events).
    async fn tick(&self, target: &str) -> Result<Touched, ClientError> {
        let keys = if target == "*" {
            list_keys(self.store.as_ref(), "").await?
        } else if target.ends_with('/') {
            list_keys(self.store.as_ref(), target).await?
        } else if self.store.load(target).await?.is_some() {
            vec![target.to_owned()]
        } else {
            Vec::new()
        };
        let mut touched = Touched::default();
        for key in keys {
            let mut tick = Request::new(new_attempt_id(), Op::Tick);
            let executed = execute(self.executor, &key, &mut tick).await?;
            if executed.doc.holders().next().is_some() {
                touched.held.push(key.clone());
            }
            touched.waiting += executed.doc.queued().len();
            touched.keys.push(key);
        }
        Ok(touched)
    }
}
