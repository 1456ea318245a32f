//! The routes. Keys are one path segment each: a key's `/` is sent as `%2F`
//! (`/v1/keys/deploy%2Fprod/log`), as every HTTP client's path-segment encoding does.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as Shared;
use axum::routing::get;
use axum::{Json, Router};
use baton_core::{names, Finished};
use serde::Deserialize;
use serde_json::{json, Value};
use tower_http::limit::RequestBodyLimitLayer;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::tokens::Scope;
use crate::{State, BODY_MAX_BYTES};

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Every route.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/whoami", get(whoami))
        .route("/v1/keys/{key}/log", get(log))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_MAX_BYTES))
        .layer(RequestBodyLimitLayer::new(BODY_MAX_BYTES))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::NOT_FOUND,
        code: "not_found",
        message: format!(
            "no route {}; the API is under /v1 (see `baton serve --help`)",
            uri.path()
        ),
    }
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: format!("{} does not take {method}", uri.path()),
    }
}

/// The process answers.
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The store answers (a read of the notification settings, which every store has room for).
async fn readyz(Shared(state): Shared<Arc<State>>) -> Result<Json<Value>, ApiError> {
    let store = state.store.describe();
    match tokio::time::timeout(READY_TIMEOUT, state.store.load(names::NOTIFY_SETTINGS)).await {
        Ok(Ok(_)) => Ok(Json(json!({ "status": "ready", "store": store }))),
        Ok(Err(error)) => Err(ApiError::unavailable(format!("{store}: {error}"))),
        Err(_) => Err(ApiError::unavailable(format!(
            "{store}: no answer in {} s",
            READY_TIMEOUT.as_secs()
        ))),
    }
}

/// The caller's token: its name and scopes (never the token).
async fn whoami(caller: Caller) -> Json<Value> {
    let scopes: Vec<String> = caller.0.grants.iter().map(|g| g.to_text()).collect();
    Json(json!({ "name": caller.0.name, "scopes": scopes }))
}

fn checked_key(key: &str) -> Result<(), ApiError> {
    baton_core::limits::check_key(key).map_err(|e| ApiError::bad_request(format!("bad key: {e}")))
}

/// `?n=`: how many entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    #[serde(default = "twenty")]
    n: usize,
}

fn twenty() -> usize {
    20
}

/// The most entries one request returns.
const LOG_MAX: usize = 1000;

/// The newest `n` entries of a key's history, newest first: as `baton log --json`.
async fn log(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    caller.require(Scope::Read, &key)?;
    if query.n == 0 || query.n > LOG_MAX {
        return Err(ApiError::bad_request(format!("n must be 1..={LOG_MAX}")));
    }
    let records = state.store.history_tail(&key, query.n).await?;
    let entries: Vec<Value> = records
        .iter()
        .map(|record| match Finished::decode(&record.bytes) {
            Ok(finished) => entry_json(record.seq, &finished),
            Err(error) => json!({ "seq": record.seq, "error": error }),
        })
        .collect();
    Ok(Json(json!({ "key": key, "entries": entries })))
}

/// A history entry as the API shows it: the record, without the notification notes it carries
/// for deliverers.
fn entry_json(seq: u64, finished: &Finished) -> Value {
    let mut value = serde_json::to_value(finished).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("events");
        map.insert("seq".into(), json!(seq));
    }
    value
}
