//! The routes. Keys are one path segment each: a key's `/` is sent as `%2F`
//! (`/v1/keys/deploy%2Fprod/log`), as every HTTP client's path-segment encoding does.
//!
//! - this module: the router, health and readiness, the JSON 404 and 405;
//! - [`keys`]: reads of a key (its log, and the store-level reads the client library's HTTP
//!   transport makes: document, history, records, the list of keys, the store's clock);
//! - [`ops`]: operations, run by the server's coordinator as the CLI's would run them;
//! - [`writes`]: shared values as the CLI writes them, a job's records, the notification rules;
//! - [`values`]: shared values as HTTP resources (`ETag`, `If-Match`, a fence header);
//! - [`turns`]: turns for clients in any language, the server doing the waiting;
//! - [`once`]: run once for them, the verdict and the turn to run in;
//! - [`jobs`]: jobs for them: submit, claim with a long poll, renew, complete, wait;
//! - [`watch`]: a key's feed, as server-sent events;
//! - [`dashboard`]: the page at `/` and the overview it shows.

mod dashboard;
mod freezes;
mod jobs;
mod keys;
mod once;
mod ops;
pub(crate) mod turns;
mod values;
mod watch;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as Shared;
use axum::handler::Handler;
use axum::routing;
use axum::{Json, Router};
use baton_core::names;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::{State, BODY_MAX_BYTES};

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// The API's description (OpenAPI 3.1), served at `/v1/openapi.json`. A test checks that it
/// names exactly the routes of [`Routes::api`].
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Every route.
pub fn router(state: Arc<State>) -> Router {
    Routes::api()
        .get("/", dashboard::page)
        .get("/dashboard.js", dashboard::script)
        .get("/dashboard.css", dashboard::style)
        .router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_MAX_BYTES))
        // Before any route, the fallbacks included: a tokenless server's host check.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::hosts::check,
        ))
        .with_state(state)
}

/// The routes, each added with its method, and the list of them (for the test that holds the
/// OpenAPI document to them).
pub struct Routes {
    router: Router<Arc<State>>,
    /// `(method, path)`, in lower case, as OpenAPI writes them.
    pub listed: Vec<(&'static str, &'static str)>,
}

impl Routes {
    /// The API: every route but the dashboard's page and assets.
    pub fn api() -> Routes {
        Routes {
            router: Router::new(),
            listed: Vec::new(),
        }
        .get("/healthz", healthz)
        .get("/readyz", readyz)
        .get("/metrics", metrics)
        .get("/v1/openapi.json", openapi)
        .get("/v1/whoami", whoami)
        .get("/v1/store", keys::store)
        .get("/v1/clock", keys::clock)
        .get("/v1/keys", keys::list)
        .get("/v1/keys/{key}/log", keys::log)
        .get("/v1/keys/{key}/document", keys::document)
        .get("/v1/keys/{key}/history", keys::history)
        .get("/v1/keys/{key}/records/{name}", keys::record)
        .put("/v1/keys/{key}/records/{name}", writes::put_record)
        .post("/v1/keys/{key}/ops", ops::execute)
        .get("/v1/keys/{key}/watch", watch::watch)
        .post("/v1/turns/{key}", turns::take)
        .delete("/v1/turns/{key}", turns::end)
        .post("/v1/turns/{key}/renew", turns::renew_turn)
        .get("/v1/turns/{key}/check", turns::check)
        .post("/v1/once/{key}", once::once)
        .post("/v1/jobs/{key}", jobs::submit)
        .post("/v1/claims", jobs::claim)
        .post("/v1/jobs/{key}/{id}/renew", jobs::renew_run)
        .post("/v1/jobs/{key}/{id}/complete", jobs::complete)
        .get("/v1/jobs/{key}/{id}", jobs::get)
        .get("/v1/jobs/{key}/{id}/wait", jobs::wait)
        .post("/v1/values/{name}", writes::write_value)
        .get("/v1/values/{name}", values::get)
        .put("/v1/values/{name}", values::put)
        .delete("/v1/values/{name}", values::delete)
        .post("/v1/settings/notify", writes::write_settings)
        .get("/v1/freezes", freezes::list)
        .post("/v1/freezes", freezes::change)
        .get("/v1/overview", dashboard::overview)
        .get("/v1/overview/watch", dashboard::watch)
    }

    fn get<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, Arc<State>>,
        T: 'static,
    {
        self.add("get", path, routing::get(handler))
    }

    fn put<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, Arc<State>>,
        T: 'static,
    {
        self.add("put", path, routing::put(handler))
    }

    fn post<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, Arc<State>>,
        T: 'static,
    {
        self.add("post", path, routing::post(handler))
    }

    fn delete<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, Arc<State>>,
        T: 'static,
    {
        self.add("delete", path, routing::delete(handler))
    }

    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        route: routing::MethodRouter<Arc<State>>,
    ) -> Routes {
        self.listed.push((method, path));
        self.router = self.router.route(path, route);
        self
    }
}

/// This API's OpenAPI document.
async fn openapi() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
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
/// key (the queue gauges name key prefixes), unless `--metrics-public`.
async fn metrics(
    Shared(state): Shared<Arc<State>>,
    caller: Result<Caller, ApiError>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    if !state.metrics_public {
        caller?.require_somewhere(crate::tokens::Scope::Read)?;
    }
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

/// A body's or a query's duration field, parsed as the CLI parses its flag (`"30s"`), or a 400
/// naming the field.
fn duration_field(
    field: &str,
    text: Option<&str>,
    parse: fn(&str) -> Result<Duration, String>,
) -> Result<Option<Duration>, ApiError> {
    text.map(|text| parse(text).map_err(|e| ApiError::bad_request(format!("{field}: {e}"))))
        .transpose()
}

/// Refuses a malformed key (400).
fn checked_key(key: &str) -> Result<(), ApiError> {
    baton_core::limits::check_key(key).map_err(|e| ApiError::bad_request(format!("bad key: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The OpenAPI document names every route of the API with its method, and nothing else.
    #[test]
    fn the_openapi_document_names_exactly_the_routes() {
        let document: Value = serde_json::from_str(OPENAPI).expect("the document is JSON");
        assert_eq!(document["openapi"], "3.1.0");
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("a path item").keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        let mut routed: Vec<(String, String)> = Routes::api()
            .listed
            .iter()
            .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
            .collect();
        documented.sort();
        routed.sort();
        assert_eq!(documented, routed);
        // Every path parameter is described.
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                let names: Vec<&str> = operation["parameters"]
                    .as_array()
                    .map(|ps| ps.iter().filter_map(|p| p["name"].as_str()).collect())
                    .unwrap_or_default();
                for segment in path.split('/').filter(|s| s.starts_with('{')) {
                    let name = segment.trim_matches(|c| c == '{' || c == '}');
                    assert!(
                        names.contains(&name),
                        "{method} {path} describes {{{name}}}"
                    );
                }
            }
        }
    }
}
