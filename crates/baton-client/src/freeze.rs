//! Freeze windows (`baton pause`, `baton resume`): the freezes in the store's settings
//! document ([`baton_core::freeze`]), and the writes that make the keys they cover say so.
//!
//! A pause or a resume is a change of the settings the coordinator's transport makes
//! (`Coordinator::change_settings`): directly, it waits until every writer's copy of the
//! settings has it and ticks the keys it covers; through `baton serve`, the server does the
//! same with its own coordinator.

use baton_core::freeze::{self, Freeze};

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::settings::SettingsChange;
pub use crate::settings::{Freezes, Touched};
use crate::time::wall_ms;

/// Adds `freeze` to the store's settings, waits until every writer's copy has it, and writes
/// each key it covers. A freeze with the same target and window replaces the earlier one.
pub async fn pause(coord: &Coordinator, freeze: Freeze) -> Result<Touched, ClientError> {
    let changed = coord.change_settings(SettingsChange::Pause(freeze)).await?;
    Ok(changed.touched)
}

/// Removes every freeze set on exactly `target` (`by`: who resumed, for the log) and writes
/// each key they covered; none ended when no freeze is set on `target` itself
/// ([`covering`] says which do cover it).
pub async fn resume(
    coord: &Coordinator,
    target: &str,
    by: &str,
) -> Result<(Vec<Freeze>, Touched), ClientError> {
    freeze::check_target(target).map_err(|e| ClientError::refused(target, e))?;
    let change = SettingsChange::Resume {
        target: target.to_owned(),
        by: by.to_owned(),
    };
    let changed = coord.change_settings(change).await?;
    Ok((changed.ended, changed.touched))
}

/// The freezes that cover every key under `target` (a key, or a prefix), set on another
/// target: what to resume instead.
pub async fn covering(coord: &Coordinator, target: &str) -> Result<Vec<Freeze>, ClientError> {
    let settings = list(coord).await?;
    let inner = target.trim_end_matches('/');
    Ok(settings
        .freezes
        .into_iter()
        .filter(|f| f.target != target && freeze::target_covers(&f.target, inner))
        .collect())
}

/// The store's freezes ([`Freezes`]).
pub async fn list(coord: &Coordinator) -> Result<Freezes, ClientError> {
    let mut list = coord.freezes().await?;
    let now = wall_ms();
    list.freezes.retain(|f| !f.is_over(now));
    Ok(list)
}
