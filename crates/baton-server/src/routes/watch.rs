//! `GET /v1/keys/{key}/watch`: a key's feed as server-sent events ([`crate::feeds`]).
//!
//! Each `document` event carries the key's document as stored (`{"version", "bytes"}`, both
//! null when the key has none): the first at once, then one at each change. A `closing`
//! event ends the stream when the server stops: the client reads again and follows another
//! server. A comment every 15 seconds keeps idle connections open through proxies and lets a
//! client notice a server that vanished.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as Shared;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::json;
use tokio::sync::watch;

use super::keys::require_read;
use crate::auth::{caller_or_ticket, Caller};
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::feeds::Latest;
use crate::State;

/// How often an idle stream says it is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Follows a key.
pub(super) async fn watch(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let caller = caller_or_ticket(&state, &headers, caller, &key).await?;
    require_read(&caller, &key)?;
    let feed = state.feeds.subscribe(&key);
    let closing = state.feeds.closing();
    let stream = futures_util::stream::unfold(
        Following {
            feed,
            closing,
            first: true,
            ended: false,
        },
        next_event,
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// One subscriber's place in its feed.
struct Following {
    feed: watch::Receiver<Latest>,
    closing: watch::Receiver<bool>,
    first: bool,
    ended: bool,
}

async fn next_event(mut at: Following) -> Option<(Result<Event, Infallible>, Following)> {
    if at.ended {
        return None;
    }
    let closing = |mut at: Following| {
        at.ended = true;
        Some((Ok(Event::default().event("closing").data("{}")), at))
    };
    // The first event waits for the follower's first read; later ones for a change.
    let changed = async {
        if at.first {
            at.feed
                .wait_for(|latest| latest.read.is_some())
                .await
                .map(|_| ())
        } else {
            at.feed.changed().await
        }
    };
    let woke = tokio::select! {
        changed = changed => changed.is_ok(),
        _ = at.closing.wait_for(|closing| *closing) => false,
    };
    if !woke {
        return closing(at);
    }
    at.first = false;
    let data = match at.feed.borrow_and_update().read.clone().flatten() {
        Some(read) => json!({
            "version": read.version.0,
            "bytes": String::from_utf8_lossy(&read.bytes),
        }),
        None => json!({ "version": null, "bytes": null }),
    };
    Some((
        Ok(Event::default().event("document").data(data.to_string())),
        at,
    ))
}
