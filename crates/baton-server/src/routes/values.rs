//! Shared values as HTTP resources, for clients in any language: `GET`, `PUT` and `DELETE
//! /v1/values/{name}`, the version as the `ETag`, conditions as `If-Match: "V"` (compare and
//! swap) or `If-None-Match: *` (create only), and the writer's fence as `Baton-Fence: F`.
//! Each runs as `baton kv` runs it; `POST /v1/values/{name}` ([`super::writes`]), which the
//! CLI uses, stays.
//!
//! A failed condition is 412 `precondition_failed` with the current version; a lower fence than
//! the value's last writer's is 409 `stale_fence`; a value that is not there is 404 `missing`.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_client::durations::parse_duration;
use baton_client::ClientError;
use baton_core::kv::{self, Condition, Refused, Write};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::tokens::Scope;
use crate::State;

/// The header a writer's fence travels in.
pub const FENCE_HEADER: &str = "baton-fence";

/// `GET /v1/values/{name}`: the value, its version as the `ETag`.
pub(super) async fn get(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    kv::check_name(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    caller.require(Scope::Read, &name)?;
    let value = baton_client::kv::get(&state.coord, &name)
        .await
        .map_err(super::ops::refused)?
        .ok_or_else(|| missing(&name))?;
    let body = json!({
        "name": value.name,
        "value": value.value,
        "version": value.version,
        "json": value.json,
        "expires_wall_ms": value.expires_wall_ms,
        "written_wall_ms": value.written_wall_ms,
        "context": value.context,
        "fence": value.fence,
    });
    Ok(with_etag(value.version, Json(body)))
}

/// The body of a `PUT`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PutBody {
    value: String,
    /// The value is JSON (checked).
    #[serde(default)]
    json: bool,
    /// How long the value lives (`"1h"`).
    ttl: Option<String>,
    /// Who writes.
    context: Option<String>,
    /// Made by the client and sent again with a retry after a lost answer, so that the write is
    /// recognised rather than applied twice.
    id: Option<String>,
}

/// `PUT /v1/values/{name}`: sets the value; `{"version"}` and the `ETag`.
pub(super) async fn put(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<Response, ApiError> {
    let ttl = super::duration_field("ttl", body.ttl.as_deref(), parse_duration)?;
    let write = Write {
        id: body.id.unwrap_or_else(baton_client::ids::new_attempt_id),
        value: Some(body.value),
        json: body.json,
        condition: condition(&headers)?,
        ttl_ms: ttl.map(baton_client::durations::millis),
        fence: fence(&headers)?,
        context: body.context.unwrap_or_default(),
        seen_version: None,
    };
    run(&state, &caller, &name, write, Scope::Lock).await
}

/// `DELETE /v1/values/{name}`: deletes the value (admin scope, as `baton kv del`).
pub(super) async fn delete(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    let write = Write {
        id: baton_client::ids::new_attempt_id(),
        value: None,
        json: false,
        condition: condition(&headers)?,
        ttl_ms: None,
        fence: fence(&headers)?,
        context: String::new(),
        seen_version: None,
    };
    run(&state, &caller, &name, write, Scope::Admin).await
}

async fn run(
    state: &State,
    caller: &Caller,
    name: &str,
    write: Write,
    scope: Scope,
) -> Result<Response, ApiError> {
    kv::check_write(name, &write).map_err(|e| ApiError::bad_request(e.to_string()))?;
    caller.require(scope, name)?;
    let op = if write.value.is_some() {
        "kv_set"
    } else {
        "kv_delete"
    };
    let result = baton_client::kv::write_directly(&state.coord, name, &write).await;
    state.metrics.operation(
        op,
        match &result {
            Ok(_) => "ok",
            Err(ClientError::ValueRefused { .. }) => "refused",
            Err(_) => "error",
        },
    );
    match result {
        Ok(version) => Ok(with_etag(version, Json(json!({ "version": version })))),
        Err(ClientError::ValueRefused { refusal, .. }) => Err(refusal_error(name, refusal)),
        Err(error) => Err(super::ops::refused(error)),
    }
}

/// `If-Match: "V"` (the version V), `If-None-Match: *` (no value yet), or neither.
fn condition(headers: &HeaderMap) -> Result<Condition, ApiError> {
    let text = |name: header::HeaderName| {
        headers
            .get(&name)
            .map(|v| {
                v.to_str()
                    .map(|s| s.trim().to_owned())
                    .map_err(|_| ApiError::bad_request(format!("{name}: not text")))
            })
            .transpose()
    };
    match (text(header::IF_MATCH)?, text(header::IF_NONE_MATCH)?) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "If-Match and If-None-Match together: give one (If-Match: \"VERSION\" to replace \
             that version, If-None-Match: * to create)",
        )),
        (Some(tag), None) => tag
            .trim_start_matches("W/")
            .trim_matches('"')
            .parse()
            .map(Condition::Version)
            .map_err(|_| {
                ApiError::bad_request(format!(
                    "If-Match: {tag:?} is not a version; send the ETag a read answered, such \
                     as \"3\""
                ))
            }),
        (None, Some(tag)) if tag == "*" => Ok(Condition::Absent),
        (None, Some(tag)) => Err(ApiError::bad_request(format!(
            "If-None-Match: {tag:?}: only * (create only) is understood"
        ))),
        (None, None) => Ok(Condition::Any),
    }
}

/// `Baton-Fence: F`, the writer's fence.
fn fence(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    headers
        .get(FENCE_HEADER)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| ApiError::bad_request("Baton-Fence: not a fence (a whole number)"))
        })
        .transpose()
}

fn refusal_error(name: &str, refusal: Refused) -> ApiError {
    let (status, code) = match &refusal {
        Refused::Lost { .. } => (StatusCode::PRECONDITION_FAILED, "precondition_failed"),
        Refused::StaleFence { .. } => (StatusCode::CONFLICT, "stale_fence"),
        Refused::Missing => (StatusCode::NOT_FOUND, "missing"),
        _ => (StatusCode::CONFLICT, "refused"),
    };
    ApiError {
        status,
        code,
        message: format!("{name}: {refusal}"),
        more: vec![("refusal", json!(refusal))],
    }
}

fn missing(name: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "missing",
        message: format!("{name}: no such value"),
        more: Vec::new(),
    }
}

fn with_etag(version: u64, body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}
