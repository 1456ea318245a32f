//! Freeze windows (`baton pause`, `baton resume`): the freezes in the store's settings
//! document ([`baton_core::freeze`]), and the writes that make the keys they cover say so.
//!
//! A writer applies the freeze from its copy of the settings, at most
//! [`SETTINGS_FRESH_MS`] old. So [`pause`] waits that long after its write before it returns:
//! from then on no process grants the key (a grant a moment earlier was made by a writer whose
//! copy predated the pause). It then ticks the keys the freeze covers, so their documents show
//! it to waiters, `status` and the dashboard at once and the `paused` event is raised. [`resume`]
//! ticks them at once (its own copy is fresh: the next in line is granted by that write) and
//! once more after the same delay, in case a writer with an older copy wrote the pause again.

use std::time::Duration;

use baton_core::freeze::{self, Freeze, Resumed};
use baton_core::limits::InvalidInput;
use baton_core::{Op, Request};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::notify::{change_settings, read_settings, SETTINGS_FRESH_MS};
use crate::remote::RunError;
use crate::time::wall_ms;
use crate::turn::ids::new_attempt_id;
use crate::{ClientError, Coordinator};

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

/// Adds `freeze` to the store's settings, waits until every writer's copy has it, and writes
/// each key it covers. A freeze with the same target and window replaces the earlier one.
pub async fn pause(coord: &Coordinator, freeze: Freeze) -> Result<Touched, ClientError> {
    let target = freeze.target.clone();
    if let Some(server) = coord.server() {
        let answer = through(server, &target, json!({ "pause": freeze })).await?;
        return parsed(&answer["touched"]);
    }
    change_settings(coord.store().as_ref(), |settings| {
        settings
            .pause(freeze.clone(), wall_ms())
            .map_err(|e| refused(&target, e))
    })
    .await?;
    coord.forget_settings();
    tokio::time::sleep(copies_fresh()).await;
    tick_covered(coord, &target).await
}

/// Removes every freeze set on exactly `target` (`by`: who resumed, for the log) and writes
/// each key they covered; none ended when no freeze is set on `target` itself
/// ([`covering`] says which do cover it).
pub async fn resume(
    coord: &Coordinator,
    target: &str,
    by: &str,
) -> Result<(Vec<Freeze>, Touched), ClientError> {
    freeze::check_target(target).map_err(|e| refused(target, e))?;
    if let Some(server) = coord.server() {
        let change = json!({ "resume": { "target": target, "by": by } });
        let answer = through(server, target, change).await?;
        return Ok((parsed(&answer["ended"])?, parsed(&answer["touched"])?));
    }
    let ended = change_settings(coord.store().as_ref(), |settings| {
        Ok(settings.resume(target, by, wall_ms()))
    })
    .await?;
    let mut touched = Touched::default();
    if ended.is_empty() {
        return Ok((ended, touched));
    }
    coord.forget_settings();
    for freeze in &ended {
        touched = tick_covered(coord, &freeze.target).await?;
    }
    tokio::time::sleep(copies_fresh()).await;
    for freeze in &ended {
        tick_covered(coord, &freeze.target).await?;
    }
    Ok((ended, touched))
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

/// The store's freezes that may still be in force, and those ended by a resume (through a
/// server: those the caller may read).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Freezes {
    /// Set, in the order they were set.
    pub freezes: Vec<Freeze>,
    /// Ended by `baton resume`, newest last.
    pub resumed: Vec<Resumed>,
}

/// The store's freezes ([`Freezes`]).
pub async fn list(coord: &Coordinator) -> Result<Freezes, ClientError> {
    let mut list = match coord.server() {
        Some(server) => parsed(&server.freezes().await?)?,
        None => {
            let settings = read_settings(coord.store().as_ref()).await?;
            Freezes {
                freezes: settings.freezes,
                resumed: settings.resumed,
            }
        }
    };
    let now = wall_ms();
    list.freezes.retain(|f| !f.is_over(now));
    Ok(list)
}

/// Sends a pause or a resume of `target` to the server: its answer.
async fn through(
    server: &crate::remote::RemoteStore,
    target: &str,
    change: Value,
) -> Result<Value, ClientError> {
    match server.change_freezes(&change).await {
        Ok(answer) => Ok(answer),
        Err(RunError::Refused(refusal)) => Err(ClientError::Refused {
            key: target.to_owned(),
            refusal,
        }),
        Err(RunError::Ambiguous { error, .. } | RunError::Failed(error)) => Err(error.into()),
        Err(RunError::ValueRefused(refused)) => Err(odd_answer(format!(
            "the server answered a freeze with a value's refusal: {refused}"
        ))),
    }
}

fn parsed<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, ClientError> {
    serde_json::from_value(value.clone()).map_err(|e| {
        odd_answer(format!(
            "the server's answer about freezes is not one ({e}): {value}"
        ))
    })
}

fn odd_answer(message: String) -> ClientError {
    ClientError::Store(baton_store::StoreError::Backend {
        store: "baton serve".into(),
        source: message.into(),
    })
}

/// Long enough for every writer's copy of the settings to be read again.
fn copies_fresh() -> Duration {
    Duration::from_millis(SETTINGS_FRESH_MS + 100)
}

/// Writes every existing key `target` covers (an empty operation: the write records the freeze
/// in force, grants what may be granted, raises the events).
async fn tick_covered(coord: &Coordinator, target: &str) -> Result<Touched, ClientError> {
    let keys = if target == "*" {
        coord.keys("").await?
    } else if target.ends_with('/') {
        coord.keys(target).await?
    } else {
        let exists = coord.read(target).await?.doc.is_some();
        if exists {
            vec![target.to_owned()]
        } else {
            Vec::new()
        }
    };
    let mut touched = Touched::default();
    for key in keys {
        let mut tick = Request::new(new_attempt_id(), Op::Tick);
        let executed = coord.execute(&key, &mut tick).await?;
        if executed.doc.holders().next().is_some() {
            touched.held.push(key.clone());
        }
        touched.waiting += executed.doc.queued().len();
        touched.keys.push(key);
    }
    Ok(touched)
}

fn refused(target: &str, error: InvalidInput) -> ClientError {
    ClientError::Refused {
        key: target.to_owned(),
        refusal: error.into(),
    }
}
