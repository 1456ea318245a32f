//! Freeze windows through the server (`baton pause`, `baton resume`, `baton pause --list`):
//! run by the server's coordinator as the CLI runs them directly ([`baton_client::freeze`]).
//!
//! A freeze is an operator's act on the keys it covers, so it needs `admin` there (on the
//! prefix for `deploy/`, on every key for `*`), not on the whole store as the notification
//! rules, which share its settings document, do. The pause answers once every writer's copy
//! of the settings has it (about a second), as directly.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::Json;
use baton_core::freeze::{self, Freeze};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::tokens::Scope;
use crate::State;

/// A pause (a freeze to set) or a resume (the target whose freezes end, and who ends them).
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum Change {
    Pause(Freeze),
    Resume { target: String, by: String },
}

/// The key a scope is checked on for a freeze's target: the prefix itself, or `""` (every
/// key) for `*`.
fn scope_key(target: &str) -> &str {
    if target == "*" {
        ""
    } else {
        target
    }
}

/// `POST /v1/freezes`: `{"pause": FREEZE}` → `{"touched"}`, or `{"resume": {"target",
/// "by"}}` → `{"ended", "touched"}` (`ended` empty: no freeze is set on that target).
pub(super) async fn change(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiJson(change): ApiJson<Change>,
) -> Result<Json<Value>, ApiError> {
    let target = match &change {
        Change::Pause(freeze) => &freeze.target,
        Change::Resume { target, .. } => target,
    };
    freeze::check_target(target).map_err(|e| ApiError::bad_request(e.to_string()))?;
    caller.require(Scope::Admin, scope_key(target))?;
    let answer = match change {
        Change::Pause(freeze) => {
            let touched = baton_client::freeze::pause(&state.coord, freeze).await;
            json!({ "touched": touched.map_err(super::ops::refused)? })
        }
        Change::Resume { target, by } => {
            let resumed = baton_client::freeze::resume(&state.coord, &target, &by).await;
            let (ended, touched) = resumed.map_err(super::ops::refused)?;
            json!({ "ended": ended, "touched": touched })
        }
    };
    Ok(Json(answer))
}

/// `GET /v1/freezes`: `{"freezes", "resumed"}`, those whose target the caller may read.
pub(super) async fn list(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_somewhere(Scope::Read)?;
    let mut list = baton_client::freeze::list(&state.coord)
        .await
        .map_err(super::ops::refused)?;
    let readable = |target: &str| caller.0.may(Scope::Read, scope_key(target));
    list.freezes.retain(|f| readable(&f.target));
    list.resumed.retain(|r| readable(&r.freeze.target));
    Ok(Json(json!(list)))
}
