//! The dashboard: a page served by the binary itself (`/`, with its script and style; no
//! external assets, so it works offline), and the overview it shows.
//!
//! - `GET /v1/overview?prefix=P`: every key under `P` the caller may read, as `baton status
//!   --json` shows it, with whether the caller may act on it (`admin`), and the shared
//!   values' names.
//! - `GET /v1/overview/watch?prefix=P`: the same, live (server-sent events): a `key` event
//!   with a key's status whenever its document changes (from the key's feed, [`crate::feeds`],
//!   so a dashboard costs the store no more than one waiter), `gone` when a key disappears,
//!   `values` when the names change. Keys are listed again every few seconds.
//!
//! The page acts through the API as any client: a cancel or a force-release is `POST
//! /v1/keys/{key}/ops` with a `cancel` operation, which needs `admin` on the key.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State as Shared;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_client::status::KeyStatus;
use baton_core::names;
use baton_store::StoreClock;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::feeds::Latest;
use crate::tokens::Scope;
use crate::State;

const PAGE: &str = include_str!("../dashboard/index.html");
const SCRIPT: &str = include_str!("../dashboard/app.js");
const STYLE: &str = include_str!("../dashboard/style.css");

/// How often a live overview looks at its keys' feeds.
const TICK: Duration = Duration::from_millis(250);
/// How often it lists the keys again (new keys, gone keys, values).
const RELIST: Duration = Duration::from_secs(3);
/// The most keys one overview follows.
const MAX_KEYS: usize = 500;

/// The page: only this origin's script, style and API.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                      form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `?prefix=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OverviewQuery {
    #[serde(default)]
    prefix: String,
}

/// Every readable key under the prefix, and the values' names.
pub(super) async fn overview(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<OverviewQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_somewhere(Scope::Read)?;
    let keys = readable_keys(&state, &caller, &query.prefix).await?;
    let clock = state.store.clock().await?;
    let mut statuses = Vec::new();
    for key in &keys {
        let read = state.store.load(key).await?;
        if let Some(status) = status_json(&state, &caller, key, read.as_ref(), &clock) {
            statuses.push(status);
        }
    }
    Ok(Json(json!({
        "store": state.store.describe(),
        "keys": statuses,
        "values": value_names(&state, &caller, &query.prefix).await?,
    })))
}

/// The overview, live.
pub(super) async fn watch(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<OverviewQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    caller.require_somewhere(Scope::Read)?;
    let (events, received) = mpsc::channel(64);
    tokio::spawn(follow(state, caller, query.prefix, events));
    let stream = futures_util::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|event| (Ok(event), received))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Feeds one live overview until its client leaves or the server stops.
async fn follow(state: Arc<State>, caller: Caller, prefix: String, events: mpsc::Sender<Event>) {
    let mut closing = state.feeds.closing();
    let mut overview = Overview {
        state,
        caller,
        prefix,
        events,
        followed: BTreeMap::new(),
        sent: HashMap::new(),
        values: None,
    };
    let mut listed_at: Option<Instant> = None;
    let mut tick = tokio::time::interval(TICK);
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            stopping = closing.wait_for(|closing| *closing) => stopping.is_ok(),
            _ = overview.events.closed() => return,
        };
        if stopping {
            let _ = overview
                .events
                .send(Event::default().event("closing").data("{}"))
                .await;
            return;
        }
        if listed_at.is_none_or(|at| at.elapsed() >= RELIST) {
            listed_at = Some(Instant::now());
            match overview.relist().await {
                Step::Done => {}
                Step::Skipped => continue,
                Step::ClientGone => return,
            }
        }
        match overview.send_changes().await {
            Step::Done | Step::Skipped => {}
            Step::ClientGone => return,
        }
    }
}

/// One live overview: whom it is for, what it follows, and what its client was last sent.
struct Overview {
    state: Arc<State>,
    caller: Caller,
    prefix: String,
    events: mpsc::Sender<Event>,
    /// The keys followed, each with its feed.
    followed: BTreeMap<String, watch::Receiver<Latest>>,
    /// Each key's status as last sent.
    sent: HashMap<String, String>,
    /// The value names as last sent.
    values: Option<Vec<String>>,
}

/// What a step of a live overview came to.
enum Step {
    Done,
    /// The store could not answer: the rest of this tick is skipped.
    Skipped,
    /// The client left: the overview ends.
    ClientGone,
}

impl Overview {
    /// Lists the keys again: keys gone are dropped (and the client told), new ones followed;
    /// the value names are sent when they changed.
    async fn relist(&mut self) -> Step {
        let Ok(keys) = readable_keys(&self.state, &self.caller, &self.prefix).await else {
            return Step::Skipped;
        };
        for gone in self
            .followed
            .keys()
            .filter(|k| !keys.contains(k))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.followed.remove(&gone);
            self.sent.remove(&gone);
            if !send(&self.events, "gone", json!({ "key": gone })).await {
                return Step::ClientGone;
            }
        }
        for key in keys.into_iter().take(MAX_KEYS) {
            self.followed
                .entry(key.clone())
                .or_insert_with(|| self.state.feeds.subscribe(&key));
        }
        if let Ok(names) = value_names(&self.state, &self.caller, &self.prefix).await {
            if self.values.as_ref() != Some(&names) {
                if !send(&self.events, "values", json!({ "values": names })).await {
                    return Step::ClientGone;
                }
                self.values = Some(names);
            }
        }
        Step::Done
    }

    /// Sends the status of each followed key whose feed changed, where it reads differently
    /// from what was sent last.
    async fn send_changes(&mut self) -> Step {
        let Ok(clock) = self.state.store.clock().await else {
            return Step::Skipped;
        };
        for (key, feed) in &mut self.followed {
            let changed = feed.has_changed().unwrap_or(false) || !self.sent.contains_key(key);
            let latest = feed.borrow_and_update().read.clone();
            let Some(read) = latest.filter(|_| changed) else {
                continue;
            };
            let status = status_json(&self.state, &self.caller, key, read.as_deref(), &clock);
            let Some(status) = status else { continue };
            let text = status.to_string();
            if self.sent.get(key) != Some(&text) {
                if !send(&self.events, "key", status).await {
                    return Step::ClientGone;
                }
                self.sent.insert(key.clone(), text);
            }
        }
        Step::Done
    }
}

async fn send(events: &mpsc::Sender<Event>, name: &str, data: Value) -> bool {
    let event = Event::default().event(name).data(data.to_string());
    events.send(event).await.is_ok()
}

/// The keys under `prefix` the caller may read, sorted.
async fn readable_keys(
    state: &State,
    caller: &Caller,
    prefix: &str,
) -> Result<Vec<String>, ApiError> {
    let mut keys = state
        .coord
        .keys(prefix)
        .await
        .map_err(super::ops::refused)?;
    keys.retain(|key| caller.0.may(Scope::Read, key));
    Ok(keys)
}

/// The names of the shared values under `prefix` the caller may read.
async fn value_names(
    state: &State,
    caller: &Caller,
    prefix: &str,
) -> Result<Vec<String>, ApiError> {
    let stored = state.store.list(&names::value_prefix(prefix)).await?;
    Ok(stored
        .iter()
        .filter_map(|key| names::value_name(key))
        .filter(|name| caller.0.may(Scope::Read, name))
        .map(str::to_owned)
        .collect())
}

/// A key's status as `baton status --json` shows it, with what the caller may do; `None`
/// when the key has no document (or one this build cannot read).
fn status_json(
    state: &State,
    caller: &Caller,
    key: &str,
    read: Option<&baton_store::Versioned>,
    clock: &StoreClock,
) -> Option<Value> {
    let doc = baton_core::decode(&read?.bytes).ok()?;
    let uncertain_ms = state.store.capabilities().clock_uncertain_ms;
    let status = KeyStatus::of(key, &doc, clock, uncertain_ms, baton_client::wall_ms());
    let mut json = status.json();
    json["admin"] = json!(caller.0.may(Scope::Admin, key));
    json["jobs"] = json!({
        "running": status.holders.iter().filter(|t| t.job).count(),
        "queued": status.queue.iter().filter(|t| t.job).count() as u64 + status.backlog,
    });
    Some(json)
}
