//! The routes. Keys are one path segment each: a key's `/` is sent as `%2F`
//! (`/v1/keys/deploy%2Fprod/log`), as every HTTP client's path-segment encoding does.
//!
//! - this module: the router, health and readiness, the JSON 404 and 405;
//! - [`keys`]: reads of a key (its log, and the store-level reads the client library's HTTP
//!   transport makes: document, history, records, the list of keys, the store's clock);
//! - [`ops`]: operations, run by the server's coordinator as the CLI's would run them;
//! - [`writes`]: shared values, a job's records, the notification rules;
//! - [`watch`]: a key's feed, as server-sent events;
//! - [`dashboard`]: the page at `/` and the overview it shows.

mod dashboard;
mod keys;
mod ops;
mod watch;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as Shared;
use axum::routing::{get, post};
use axum::{Json, Router};
use baton_core::names;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::{State, BODY_MAX_BYTES};

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Every route.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(dashboard::page))
        .route("/dashboard.js", get(dashboard::script))
        .route("/dashboard.css", get(dashboard::style))
        .route("/v1/overview", get(dashboard::overview))
        .route("/v1/overview/watch", get(dashboard::watch))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/whoami", get(whoami))
        .route("/v1/keys/{key}/log", get(keys::log))
        .route("/v1/keys/{key}/document", get(keys::document))
        .route("/v1/keys/{key}/history", get(keys::history))
        .route(
            "/v1/keys/{key}/records/{name}",
            get(keys::record).put(writes::put_record),
        )
        .route("/v1/keys", get(keys::list))
        .route("/v1/clock", get(keys::clock))
        .route("/v1/store", get(keys::store))
        .route("/v1/keys/{key}/watch", get(watch::watch))
        .route("/v1/keys/{key}/ops", post(ops::execute))
        .route("/v1/values/{name}", post(writes::write_value))
        .route("/v1/settings/notify", post(writes::write_settings))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_MAX_BYTES))
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
        more: Vec::new(),
    }
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: format!("{} does not take {method}", uri.path()),
        more: Vec::new(),
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

/// The metrics, in Prometheus' text format. With a tokens file, a token that may read some
/// key (the queue gauges name key prefixes).
async fn metrics(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    caller.require_somewhere(crate::tokens::Scope::Read)?;
    for (key, read) in state.feeds.latest() {
        if let Ok(doc) = baton_core::decode(&read.bytes) {
            state.metrics.saw(&key, &doc);
        }
    }
    let feeds = (state.feeds.followed(), state.feeds.watchers());
    let text = state.metrics.render(state.coord.conflicts(), feeds);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

/// The caller's token: its name and scopes (never the token).
async fn whoami(caller: Caller) -> Json<Value> {
    let scopes: Vec<String> = caller.0.grants.iter().map(|g| g.to_text()).collect();
    Json(json!({ "name": caller.0.name, "scopes": scopes }))
}

/// Refuses a malformed key (400).
fn checked_key(key: &str) -> Result<(), ApiError> {
    baton_core::limits::check_key(key).map_err(|e| ApiError::bad_request(format!("bad key: {e}")))
}
