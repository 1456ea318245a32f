//! Notifications: the rules (`baton notify add|ls|rm`), the cache each process keeps of them,
//! and delivery of the events keys' histories hold ([`baton_core::notify`]).
//!
//! **Recording never waits on a receiver.** The coordinator notes a change's events on the
//! tickets they are about in the same CAS as the change (in the document while a ticket lives,
//! in its finished history entry once it ends), from rules cached for at most
//! [`SETTINGS_FRESH_MS`] (read ahead, in the background, once the cache is half that old, so a
//! warm process rarely waits for it; a cold one reads them beside its first document read):
//! `crate::settings`.
//!
//! **Delivery happens after the CAS, off the lock's path** (`crate::delivery`): the process that
//! wrote events spawns a delivery for the key; a short-lived CLI gives those at most
//! [`EXIT_FLUSH`] before it exits ([`flush`]); whatever is left is delivered by the next
//! process that writes the key, or by `baton notify deliver --follow` ([`deliver_all`]).

use baton_core::notify::{Rule, Settings};
use baton_core::{Op, Request};

use crate::coordinator::Coordinator;
pub use crate::delivery::{body, flush, post, posts_made, KeyDelivery, EXIT_FLUSH, POST_TIMEOUT};
use crate::error::ClientError;
pub use crate::settings::{change_settings, read_settings, SettingsCache, SETTINGS_FRESH_MS};
use crate::settings::{RuleChange, SettingsChange};
use crate::time::wall_ms;
use crate::turn::ids::new_attempt_id;

/// Adds `rule` to the notification rules, replacing the rule of the same name (whether one was
/// replaced), through `coord`'s transport; every process picks it up within
/// [`SETTINGS_FRESH_MS`].
pub async fn add_rule(coord: &Coordinator, rule: Rule) -> Result<bool, ClientError> {
    let change = SettingsChange::Rule(RuleChange::Add(rule));
    Ok(coord.change_settings(change).await?.rule_was_there)
}

/// Removes the notification rule named `name` (whether there was one), through `coord`'s
/// transport.
pub async fn remove_rule(coord: &Coordinator, name: &str) -> Result<bool, ClientError> {
    let change = SettingsChange::Rule(RuleChange::Remove {
        name: name.to_owned(),
    });
    Ok(coord.change_settings(change).await?.rule_was_there)
}

/// Delivers the due events of `key` (`crate::delivery::deliver_key`), reading and recording
/// through `coord`.
pub async fn deliver_key(
    coord: &Coordinator,
    key: &str,
    settings: &Settings,
) -> Result<KeyDelivery, ClientError> {
    crate::delivery::deliver_key(coord, key, settings).await
}

/// What one pass of [`deliver_all`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Keys read.
    pub keys: usize,
    /// Events delivered.
    pub delivered: usize,
    /// Failures, in words.
    pub failures: Vec<String>,
}

/// One pass over every key some rule watches: raises the `waited` events that are due (a
/// tick records them), and delivers what is due. `baton notify deliver` runs it once, or
/// again and again with `--follow`.
pub async fn deliver_all(coord: &Coordinator, settings: &Settings) -> Result<Pass, ClientError> {
    let mut prefixes: Vec<&str> = settings.rules.iter().map(|r| r.prefix.as_str()).collect();
    prefixes.sort_unstable();
    // A prefix that another covers adds nothing.
    prefixes.dedup_by(|later, earlier| later.starts_with(*earlier));
    let mut keys = Vec::new();
    for prefix in prefixes {
        keys.extend(coord.keys(prefix).await?);
    }
    let mut pass = Pass::default();
    for key in keys {
        pass.keys += 1;
        if waited_due(coord, &key, settings).await? {
            let mut tick = Request::new(new_attempt_id(), Op::Tick);
            coord.execute(&key, &mut tick).await?;
        }
        let report = deliver_key(coord, &key, settings).await?;
        pass.delivered += report.delivered;
        pass.failures.extend(report.failures);
    }
    Ok(pass)
}

/// Whether a queued ticket of `key` has waited past a `waited` rule's threshold without its
/// event raised yet.
async fn waited_due(
    coord: &Coordinator,
    key: &str,
    settings: &Settings,
) -> Result<bool, ClientError> {
    let afters: Vec<u64> = settings
        .watching(key)
        .filter_map(|rule| rule.after_ms)
        .collect();
    let Some(shortest) = afters.into_iter().min() else {
        return Ok(false);
    };
    let Some(doc) = coord.read(key).await?.doc else {
        return Ok(false);
    };
    let raised = doc.outbox.map(|o| o.waited).unwrap_or_default();
    let now = wall_ms();
    Ok(doc.tickets.iter().any(|t| {
        t.state == baton_core::TicketState::Queued
            && now.saturating_sub(t.enqueued_wall_ms) >= shortest
            && !raised.contains(&t.id)
    }))
}
