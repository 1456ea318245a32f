//! Reads of a key: its log for people and scripts, and the store-level reads (document,
//! history, records, the list of keys, the store's clock) that the client library's HTTP
//! transport makes, so that every read the CLI does directly it can do through a server.
//!
//! Documents and entries hold no secret (a ticket's token is kept as its hash), so a reader
//! with the `read` scope gets them as stored. Names that are not keys are checked on what they
//! stand for: a shared value on its name; the notification rules (whose URLs are secrets: a
//! Slack webhook's path is its key) need `admin` on every key.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::HeaderMap;
use axum::Json;
use baton_core::{names, Finished};
use baton_store::StoreClock;
use serde::Deserialize;
use serde_json::{json, Value};

use super::checked_key;
use crate::auth::{caller_or_ticket, Caller};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::tokens::Scope;
use crate::State;

/// Refuses (403) unless the caller may read the store name `name` (a key, a shared value, the
/// notification rules).
pub(super) fn require_read(caller: &Caller, name: &str) -> Result<(), ApiError> {
    if name == names::NOTIFY_SETTINGS {
        // The rules are the whole store's: admin on every key (the empty prefix).
        return caller.require(Scope::Admin, "");
    }
    match names::value_name(name) {
        Some(value) => caller.require(Scope::Read, value),
        None => {
            checked_key(name)?;
            caller.require(Scope::Read, name)
        }
    }
}

/// The bytes baton stored (UTF-8 JSON, as the core and the client write everything).
fn text(bytes: Vec<u8>) -> Result<String, ApiError> {
    String::from_utf8(bytes)
        .map_err(|_| ApiError::unavailable("the store holds bytes that are not UTF-8: corrupt"))
}

/// `?n=`: how many entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    #[serde(default = "twenty")]
    n: usize,
}

fn twenty() -> usize {
    20
}

/// The most entries one request returns.
const LOG_MAX: usize = 1000;

/// The newest `n` entries of a key's history, newest first: as `baton log --json`.
pub(super) async fn log(
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

/// A name's document as stored: `{"version", "bytes"}`, both null when it has none.
pub(super) async fn document(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = caller_or_ticket(&state, &headers, caller, &name).await?;
    require_read(&caller, &name)?;
    Ok(Json(match state.store.load(&name).await? {
        Some(read) => json!({ "version": read.version.0, "bytes": text(read.bytes)? }),
        None => json!({ "version": null, "bytes": null }),
    }))
}

/// `?after=SEQ&limit=N` (oldest first) or `?tail=N` (the newest, newest first).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryQuery {
    after: Option<u64>,
    limit: Option<usize>,
    tail: Option<usize>,
}

/// Entries of a name's history as stored: `{"records": [{"seq", "bytes"}]}`.
pub(super) async fn history(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    require_read(&caller, &name)?;
    let in_bounds = |n: usize| (1..=LOG_MAX).contains(&n);
    let records = match (query.after, query.limit, query.tail) {
        (None, None, Some(tail)) if in_bounds(tail) => {
            state.store.history_tail(&name, tail).await?
        }
        (after, Some(limit), None) if in_bounds(limit) => {
            state
                .store
                .history(&name, after.unwrap_or(0), limit)
                .await?
        }
        _ => {
            return Err(ApiError::bad_request(format!(
                "give ?tail=N, or ?limit=N with an optional ?after=SEQ (N in 1..={LOG_MAX})"
            )))
        }
    };
    let records = records
        .into_iter()
        .map(|r| Ok(json!({ "seq": r.seq, "bytes": text(r.bytes)? })))
        .collect::<Result<Vec<Value>, ApiError>>()?;
    Ok(Json(json!({ "records": records })))
}

/// A record of a key (a job's parameters, a run's report, a backlog segment): `{"bytes"}`,
/// null when it was never written. The record's name is one path segment too.
pub(super) async fn record(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath((key, name)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require_read(&caller, &key)?;
    baton_store::check_record_name(&name)
        .map_err(|e| ApiError::bad_request(format!("bad record name: {e}")))?;
    let bytes = match state.store.get_record(&key, &name).await? {
        Some(bytes) => Some(text(bytes)?),
        None => None,
    };
    Ok(Json(json!({ "bytes": bytes })))
}

/// `?prefix=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    prefix: String,
}

/// The names under a prefix that the caller may read, sorted: `{"keys": [...]}`.
pub(super) async fn list(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_somewhere(Scope::Read)?;
    let mut keys = state.store.list(&query.prefix).await?;
    keys.retain(|name| require_read(&caller, name).is_ok());
    Ok(Json(json!({ "keys": keys })))
}

/// `?key=`: a key of which the request names a ticket (`Baton-Ticket`), for a caller whose
/// bearer token no longer proves an identity ([`caller_or_ticket`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClockQuery {
    key: Option<String>,
}

/// The store's clock, read now: `{"kind": "time", "now_ms", "behind_ms", "epoch"}` or
/// `{"kind": "none"}`. A caller adds the time its request took to `behind_ms`.
pub(super) async fn clock(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiQuery(query): ApiQuery<ClockQuery>,
) -> Result<Json<Value>, ApiError> {
    let caller = match &query.key {
        Some(key) => caller_or_ticket(&state, &headers, caller, key).await?,
        None => caller?,
    };
    caller.require_somewhere(Scope::Read)?;
    Ok(Json(match state.store.clock().await? {
        StoreClock::Time {
            now_ms,
            behind_ms,
            epoch,
        } => json!({ "kind": "time", "now_ms": now_ms, "behind_ms": behind_ms, "epoch": epoch }),
        StoreClock::None => json!({ "kind": "none" }),
    }))
}

/// Which store the server serves, and what a client needs to know of it: `{"store", "clock",
/// "clock_uncertain_ms"}`. Any known token may ask (the description holds no secret).
pub(super) async fn store(Shared(state): Shared<Arc<State>>, _caller: Caller) -> Json<Value> {
    let capabilities = state.store.capabilities();
    Json(json!({
        "store": state.store.describe(),
        "clock": capabilities.clock,
        "clock_uncertain_ms": capabilities.clock_uncertain_ms,
    }))
}
