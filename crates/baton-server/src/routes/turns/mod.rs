//! Turns for clients in any language: the server waits, renews the waiter, claims the grant,
//! and the client keeps one rule ([`answer`]).
//!
//! - `POST /v1/turns/{key}` ([`take`]): wait for a turn ([`ask::TurnAsk`]); a grant, 202 with
//!   the ticket while it waits on ([`waits`]), or the error its CLI exit code names
//!   (`timed_out` 408; `superseded`, `cancelled`, `lost` 409);
//! - `POST /v1/turns/{key}/renew` ([`renew_turn`]), `DELETE /v1/turns/{key}` ([`end`]): by
//!   the ticket's token;
//! - `GET /v1/turns/{key}/check?fence=F&min_left=DUR` ([`check`]): `baton check`.

mod answer;
mod ask;
mod waits;

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_client::acquire::{release_with_reason, renew};
use baton_client::durations::{millis, parse_lease};
use baton_client::turn::Lease;
use baton_client::ClientError;
use baton_core::check::{check_fence, FenceCheck};
use baton_core::{Op, Outcome, Refusal};
use baton_store::StoreClock;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use answer::Counted;
pub use ask::TurnAsk;
pub use waits::{Attached, Until, Waits, REATTACH};

use super::ops::{authorise, refused, with_identity};
use super::{checked_key, duration_field};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::tokens::Scope;
use crate::State;

/// `?wait=false`: answer as soon as the ticket is queued.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TakeQuery {
    pub(crate) wait: Option<bool>,
}

/// `POST /v1/turns/{key}`: waits for a turn, or takes up a wait this server answered with 202.
pub(crate) async fn take(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<TakeQuery>,
    ApiJson(ask): ApiJson<TurnAsk>,
) -> Result<Response, ApiError> {
    checked_key(&key)?;
    let received_ms = state.coord.local_ms();
    let wait = match &ask.resume {
        Some(token) => resumed(&state, &headers, caller, &key, token)?,
        None => {
            let mut options = ask.options()?;
            let pending = ask.pending(&key)?;
            may_take(&caller?, &key, &mut options)?;
            state
                .waits
                .start(&state.coord, pending, options, turn_error)
        }
    };
    Ok(follow(&state, &wait, query.wait, received_ms)
        .await?
        .into_response())
}

/// The wait this server keeps for the ticket with `token`, if the caller may take it up:
/// judged as a renewal by the ticket's token is.
pub(crate) fn resumed(
    state: &State,
    headers: &HeaderMap,
    caller: Result<Caller, ApiError>,
    key: &str,
    token: &str,
) -> Result<Arc<waits::Wait>, ApiError> {
    let mut op = Op::Renew {
        token: token.to_owned(),
        ttl_ms: None,
    };
    authorise(state, headers, caller, &mut op, key)?;
    state
        .waits
        .find(key, token)
        .ok_or_else(|| no_such_wait(key))
}

/// Refuses a caller without `lock` on `key`; a CI identity is named in the ticket's context.
pub(crate) fn may_take(
    caller: &Caller,
    key: &str,
    options: &mut baton_client::AcquireOptions,
) -> Result<(), ApiError> {
    caller.require(Scope::Lock, key)?;
    if caller.0.from_trust {
        options.context = with_identity(&caller.0.name, &options.context);
    }
    Ok(())
}

/// How a request attached to a wait is answered.
#[derive(Debug)]
pub(crate) enum Taken {
    /// 200: the grant.
    Granted(serde_json::Value),
    /// 202: still waiting; the ticket, to resume.
    Waiting(serde_json::Value),
}

impl IntoResponse for Taken {
    fn into_response(self) -> Response {
        match self {
            Taken::Granted(body) => Json(body).into_response(),
            Taken::Waiting(body) => (StatusCode::ACCEPTED, Json(body)).into_response(),
        }
    }
}

/// Attaches the request to `wait` (until it ends, `--turn-wait`, or, with `?wait=false`,
/// until queued) and says what to answer.
pub(crate) async fn follow(
    state: &State,
    wait: &Arc<waits::Wait>,
    wait_param: Option<bool>,
    received_ms: u64,
) -> Result<Taken, ApiError> {
    let until = match wait_param {
        Some(false) => Until::Queued,
        _ => Until::Ended(state.turn_wait),
    };
    match state.waits.attach(wait, until).await {
        Attached::Done(Ok(lease)) => granted(state, lease, received_ms, wait.queued()).await,
        Attached::Done(Err(error)) => Err(error),
        Attached::Waiting(position) => Ok(Taken::Waiting(json!({
            "key": wait.key,
            "id": wait.id,
            "token": wait.token,
            "position": position,
            "resume_within_ms": millis(REATTACH),
        }))),
    }
}

/// A grant's answer, if the lease still stands now; one that ran out before it could be
/// answered (its client came back late for it) is given back and answered as lost. `waited`:
/// the ticket queued first, so the grant must be claimed with a renewal ([`answer`]).
async fn granted(
    state: &State,
    lease: Lease,
    received_ms: u64,
    waited: bool,
) -> Result<Taken, ApiError> {
    let now_ms = state.coord.local_ms();
    if !lease.stands_at(now_ms) {
        let _ = release_with_reason(
            &state.coord,
            &lease.key,
            &lease.token,
            Outcome::Cancelled,
            None,
        )
        .await;
        return Err(lost(
            &lease.key,
            "the turn came, but its lease ran out before its client asked for it",
        ));
    }
    let counted = Counted::of_lease(&lease, received_ms, waited);
    Ok(Taken::Granted(json!({
        "key": lease.key,
        "id": lease.id,
        "token": lease.token,
        "fence": lease.fence,
        "slot": lease.slots.first(),
        "slots": lease.slots,
        "lease_ms": counted.lease_ms,
        "started_before_ms": counted.started_before_ms,
        "margin_ms": counted.margin_ms,
        "renew_first": counted.renew_first,
    })))
}

/// The body of a renewal.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenewAsk {
    token: String,
    /// A new lease duration (`"30s"`); the ticket's own without it.
    ttl: Option<String>,
}

/// `POST /v1/turns/{key}/renew`: extends (the first time: claims) a held turn by its token.
pub(crate) async fn renew_turn(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiJson(ask): ApiJson<RenewAsk>,
) -> Result<Json<serde_json::Value>, ApiError> {
    renewal(&state, &headers, caller, &key, &ask)
        .await
        .map(Json)
}

/// Renews the turn or run `ask.token` holds at `key` (the first renewal of a grant claims it):
/// the counted answer, and who asked it to stop. A turn's and a job run's renewal alike.
pub(crate) async fn renewal(
    state: &State,
    headers: &HeaderMap,
    caller: Result<Caller, ApiError>,
    key: &str,
    ask: &RenewAsk,
) -> Result<serde_json::Value, ApiError> {
    checked_key(key)?;
    let ttl = duration_field("ttl", ask.ttl.as_deref(), parse_lease)?;
    let mut op = Op::Renew {
        token: ask.token.clone(),
        ttl_ms: ttl.map(millis),
    };
    authorise(state, headers, caller, &mut op, key)?;
    let received_ms = state.coord.local_ms();
    let renewed = renew(&state.coord, key, &ask.token, ttl)
        .await
        .map_err(turn_error)?;
    let counted = Counted::of_renewal(&renewed, received_ms);
    Ok(json!({
        "key": key,
        "lease_ms": counted.lease_ms,
        "started_before_ms": counted.started_before_ms,
        "margin_ms": counted.margin_ms,
        "renew_first": false,
        "stop_asked": renewed.stop_asked,
    }))
}

/// The body of `DELETE /v1/turns/{key}`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndAsk {
    token: String,
    /// `succeeded`, `failed` or `cancelled` (the default: given back, or a wait withdrawn).
    outcome: Option<Outcome>,
    /// Why, for the history.
    reason: Option<String>,
}

/// `DELETE /v1/turns/{key}`: releases a held turn, or withdraws a wait, by its token.
pub(crate) async fn end(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiJson(ask): ApiJson<EndAsk>,
) -> Result<Json<serde_json::Value>, ApiError> {
    checked_key(&key)?;
    let outcome = ask.outcome.unwrap_or(Outcome::Cancelled);
    if !matches!(
        outcome,
        Outcome::Succeeded | Outcome::Failed | Outcome::Cancelled
    ) {
        return Err(ApiError::bad_request(format!(
            "outcome {outcome} is not a holder's to give: write succeeded, failed or cancelled"
        )));
    }
    if let Some(reason) = &ask.reason {
        baton_core::limits::check_reason(reason)
            .map_err(|e| ApiError::bad_request(format!("reason: {e}")))?;
    }
    let mut op = Op::Release {
        token: ask.token.clone(),
        outcome,
        reason: ask.reason.clone(),
    };
    authorise(&state, &headers, caller, &mut op, &key)?;
    if let Some(wait) = state.waits.find(&key, &ask.token) {
        // Still waiting here: the wait stops too, not only its ticket.
        state.waits.withdraw(&wait);
        return Ok(Json(json!({ "key": key, "outcome": Outcome::Cancelled })));
    }
    release_with_reason(&state.coord, &key, &ask.token, outcome, ask.reason)
        .await
        .map_err(turn_error)?;
    Ok(Json(json!({ "key": key, "outcome": outcome })))
}

/// The query of a check.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckQuery {
    fence: u64,
    min_left: Option<String>,
}

/// `GET /v1/turns/{key}/check?fence=F&min_left=DUR`: whether the turn with fence F still holds
/// the key, as `baton check` tells it (200 either way: `holds` says).
pub(crate) async fn check(
    Shared(state): Shared<Arc<State>>,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<CheckQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    checked_key(&key)?;
    caller?.require(Scope::Read, &key)?;
    let min_left = duration_field("min_left", query.min_left.as_deref(), parse_lease)?;
    let snapshot = state.coord.read(&key).await.map_err(refused)?;
    let store_now_ms = match &snapshot.clock {
        StoreClock::Time { now_ms, .. } => Some(*now_ms),
        StoreClock::None => None,
    };
    let uncertain_ms = state.store.capabilities().clock_uncertain_ms;
    let verdict = check_fence(
        snapshot.doc.as_ref(),
        query.fence,
        store_now_ms,
        uncertain_ms,
        min_left.map(millis),
    );
    if verdict == FenceCheck::NoClock {
        return Err(ApiError::bad_request(format!(
            "min_left cannot be judged on this store ({}): it has no clock; check without it",
            state.store.describe()
        )));
    }
    Ok(Json(json!({
        "key": key,
        "fence": query.fence,
        "holds": verdict.holds(),
        "stop_asked": verdict.stop_asked_by(),
        "lease_left_ms": verdict.lease_left_ms(),
        "why": verdict.why(&key, query.fence),
    })))
}

/// A wait's or a holder's error as the API answers it: the names of the CLI's exit codes.
pub(crate) fn turn_error(error: ClientError) -> ApiError {
    match error {
        ClientError::TimedOut { .. } => ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "timed_out",
            message: error.to_string(),
            more: Vec::new(),
        },
        ClientError::Ended {
            outcome, forced, ..
        }
        | ClientError::Refused {
            refusal: Refusal::Ended {
                outcome, forced, ..
            },
            ..
        } => ended(outcome, forced, error.to_string()),
        ClientError::LeaseLost { key, reason } => lost(&key, &reason),
        other => refused(other),
    }
}

/// A ticket that ended, by the word for how.
fn ended(outcome: Outcome, forced: bool, message: String) -> ApiError {
    let code = match (outcome, forced) {
        (_, true) | (Outcome::Cancelled, _) => "cancelled",
        (Outcome::Superseded, _) => "superseded",
        _ => "lost",
    };
    ApiError {
        status: StatusCode::CONFLICT,
        code,
        message,
        more: vec![("outcome", json!(outcome))],
    }
}

/// The turn was lost (409 `lost`).
fn lost(key: &str, reason: &str) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        code: "lost",
        message: format!("{key}: the turn was lost: {reason}"),
        more: Vec::new(),
    }
}

/// A wait ended by a withdrawal (its client's, or for want of one).
fn withdrawn(key: &str) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        code: "cancelled",
        message: format!("{key}: the wait was withdrawn"),
        more: Vec::new(),
    }
}

/// No wait of this server has that token.
fn no_such_wait(key: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "no_such_wait",
        message: format!(
            "{key}: this server keeps no wait with that token: it ended, was withdrawn after \
             {} s without its client, or was kept by another server; ask for the turn again",
            REATTACH.as_secs()
        ),
        more: Vec::new(),
    }
}
