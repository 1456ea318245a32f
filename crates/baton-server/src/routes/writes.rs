//! The writes that are not operations on a key's document: shared values (run by the server's
//! coordinator as `baton kv` runs them directly), the records a job keeps beside its key, and
//! the notification rules.
//!
//! A record is written as bytes: a job's parameters (`job/ID`), a run's report (`run/ID/N`),
//! a worker's "seen" note. A `lock` token may write those on its keys, as it may submit and
//! run jobs there; a backlog segment (`backlog/…`) is written by the coordinator that writes
//! the document counting it, never by a caller. A job's parameters are written by its submit
//! and never replaced ([`keep_job_parameters`]): a `lock` token on a key is no licence to
//! change what someone else's job will run.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::StatusCode;
use axum::Json;
use baton_client::ClientError;
use baton_core::{kv, names};
use baton_store::{CasOutcome, Version};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::checked_key;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::tokens::Scope;
use crate::State;

/// Sets or deletes shared value `name` (`"value": null` deletes, which needs `admin`):
/// `{"version"}`, or 409 with the refusal (`{"kind": "lost" | "stale_fence" | "missing"}`).
/// The write's `id` makes a retry after a lost answer safe: the server recognises it.
pub(super) async fn write_value(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(write): ApiJson<kv::Write>,
) -> Result<Json<Value>, ApiError> {
    kv::check_write(&name, &write).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let scope = match write.value {
        Some(_) => Scope::Lock,
        None => Scope::Admin,
    };
    caller.require(scope, &name)?;
    let op = if write.value.is_some() {
        "kv_set"
    } else {
        "kv_delete"
    };
    let result = baton_client::kv::write_directly(&state.coord, &name, &write).await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(ClientError::ValueRefused { .. } | ClientError::Refused { .. }) => "refused",
        Err(_) => "error",
    };
    state.metrics.operation(op, outcome);
    match result {
        Ok(version) => Ok(Json(json!({ "version": version }))),
        Err(ClientError::ValueRefused { refusal, .. }) => Err(ApiError {
            status: StatusCode::CONFLICT,
            code: "refused",
            message: refusal.to_string(),
            more: vec![("refusal", json!(refusal))],
        }),
        Err(error) => Err(super::ops::refused(error)),
    }
}

/// A record's bytes (baton's own records are UTF-8 JSON).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordBody {
    bytes: String,
}

/// Writes a record of a key: `{}`. Only a job's or a worker's records (see the module).
pub(super) async fn put_record(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath((key, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RecordBody>,
) -> Result<Json<Value>, ApiError> {
    // A worker serving every key says so under the key `*`, which is no key of its own.
    if key != baton_client::jobs::EVERY_KEY {
        checked_key(&key)?;
    }
    caller.require(Scope::Lock, &key)?;
    baton_store::check_record(&name, body.bytes.as_bytes())
        .map_err(|e| ApiError::bad_request(format!("bad record: {e}")))?;
    if !writable_record(&name) {
        return Err(ApiError::bad_request(format!(
            "record {name:?} is written by baton itself with the document that counts it; a \
             caller writes only job/ID, run/ID/N and {}",
            baton_client::jobs::SEEN_RECORD
        )));
    }
    if let Some(id) = name.strip_prefix("job/") {
        keep_job_parameters(&state, &caller, &key, id, body.bytes.as_bytes()).await?;
    }
    state
        .store
        .put_record(&key, &name, body.bytes.as_bytes())
        .await?;
    Ok(Json(json!({})))
}

/// Refuses a write of job `id`'s record that would replace its parameters: the same bytes
/// again are a retried submit (its answer lost) and pass; other bytes for a job the key knows
/// (queued, running, in the backlog, ended) are refused for everyone (409), since a worker
/// runs what the record says. Only for a job the key does not know — the record of a submit
/// that died before its document write, tried again with other input — may `admin` replace
/// them, as the client does directly (`jobs::submit`).
async fn keep_job_parameters(
    state: &State,
    caller: &Caller,
    key: &str,
    id: &str,
    bytes: &[u8],
) -> Result<(), ApiError> {
    let Some(existing) = state.store.get_record(key, &format!("job/{id}")).await? else {
        return Ok(());
    };
    if existing == bytes {
        return Ok(());
    }
    let standing = baton_client::jobs::standing(&state.coord, key, id)
        .await
        .map_err(super::ops::refused)?;
    if standing != baton_client::jobs::JobStanding::Unknown {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            code: "refused",
            message: format!(
                "job {id:?} of {key:?} was submitted with other parameters, and a job's \
                 parameters are never replaced: submit the new ones under another id"
            ),
            more: Vec::new(),
        });
    }
    if caller.0.may(Scope::Admin, key) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "the record of job {id:?} of {key:?} holds another submission's parameters (a submit \
         that did not queue its job); the token {:?} may write it once, and only an admin \
         token replaces it: submit under another id",
        caller.0.name
    )))
}

/// Whether a caller may write record `name` of a key.
fn writable_record(name: &str) -> bool {
    name.starts_with("job/") || name.starts_with("run/") || name == baton_client::jobs::SEEN_RECORD
}

/// A CAS of the notification rules: the version expected (`null`: none yet) and the new
/// bytes.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettingsWrite {
    expected: Option<String>,
    bytes: String,
}

/// Writes the notification rules by CAS, as `baton notify` does directly (they are the whole
/// store's: `admin` on every key): `{"outcome": "written", "version"}` or `{"outcome":
/// "conflict", "current": {"version", "bytes"} | null}`.
pub(super) async fn write_settings(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiJson(write): ApiJson<SettingsWrite>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Admin, "")?;
    baton_core::notify::Settings::decode(write.bytes.as_bytes())
        .map_err(|e| ApiError::bad_request(format!("not notification rules: {e}")))?;
    let expected = write.expected.map(Version);
    let outcome = state
        .store
        .cas(
            names::NOTIFY_SETTINGS,
            expected.as_ref(),
            write.bytes.as_bytes(),
            &[],
        )
        .await?;
    Ok(Json(match outcome {
        CasOutcome::Written { version } => json!({ "outcome": "written", "version": version.0 }),
        CasOutcome::Conflict { current } => json!({
            "outcome": "conflict",
            "current": current.map(|c| json!({
                "version": c.version.0,
                "bytes": String::from_utf8_lossy(&c.bytes),
            })),
        }),
    }))
}
