//! Operations: `POST /v1/keys/{key}/ops` with a request (`{"attempt", "op": {"op": "enqueue",
//! ...}}`), run by the server's coordinator exactly as the CLI's would run it (load, apply,
//! CAS, retried on conflict). The attempt id makes a retry after a lost answer safe: the core
//! recognises it. Which scope an operation needs is [`scope_of`].

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::{header::AUTHORIZATION, HeaderMap, StatusCode};
use axum::Json;
use baton_client::ClientError;
use baton_core::{Op, Refusal, Request};
use baton_store::{StoreError, Versioned};
use serde_json::{json, Value};

use super::checked_key;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::tokens::Scope;
use crate::State;

/// The scope an operation needs on its key: `lock` for what a holder, a waiter or a worker
/// does with its own tickets (every such operation names its ticket by its secret token, or
/// makes a new ticket), `admin` for what acts on other people's tickets, for an enqueue
/// that gets through a freeze (`--override-freeze`), and for acknowledging notifications
/// (`Op::Notified` moves or drops a rule's cursor: the rules are the operator's, and a
/// client through a server has its events delivered by the server itself).
pub fn scope_of(op: &Op) -> Scope {
    match op {
        // A freeze is an operator's: getting through one is too.
        Op::Enqueue(e) if e.override_freeze.is_some() => Scope::Admin,
        Op::Enqueue(_)
        | Op::Refresh { .. }
        | Op::Renew { .. }
        | Op::Release { .. }
        | Op::Submit(_)
        | Op::Claim { .. }
        | Op::RunSucceeded { .. }
        | Op::Complete { .. }
        | Op::Tick => Scope::Lock,
        Op::Notified(_)
        | Op::Cancel { .. }
        | Op::CancelInBacklog { .. }
        | Op::CancelQueued { .. }
        | Op::RetryOnce => Scope::Admin,
    }
}

/// Whether `op` acts on a ticket the caller already holds, named by the ticket's secret token
/// (a heartbeat, a claim of its own grant, a release, a run's success or completion): one
/// that makes no new ticket and no new holding.
pub fn names_own_ticket(op: &Op) -> bool {
    matches!(
        op,
        Op::Refresh { .. }
            | Op::Renew { .. }
            | Op::Release { .. }
            | Op::RunSucceeded { .. }
            | Op::Complete { .. }
    )
}

/// Refuses `op` unless the caller may do it on `key`. On a server that trusts CI identities, an
/// operation on one's own ticket ([`names_own_ticket`]) is authorised by the ticket's token
/// (the core refuses one it does not know): an ID token lives minutes, a turn may last
/// longer, so the caller's bearer token may have expired since the ticket was made; a bearer
/// token must still be sent. A new ticket made by a CI identity has it in its context, so
/// that the history says who held.
pub(super) fn authorise(
    state: &State,
    headers: &HeaderMap,
    caller: Result<Caller, ApiError>,
    op: &mut Op,
    key: &str,
) -> Result<(), ApiError> {
    if state.trust.is_some() && names_own_ticket(op) && headers.contains_key(AUTHORIZATION) {
        return Ok(());
    }
    let caller = caller?;
    caller.require(scope_of(op), key)?;
    if caller.0.from_trust {
        match op {
            Op::Enqueue(enqueue) => {
                enqueue.context = with_identity(&caller.0.name, &enqueue.context)
            }
            Op::Submit(submit) => submit.context = with_identity(&caller.0.name, &submit.context),
            _ => {}
        }
    }
    Ok(())
}

/// A context that starts with the identity that asked: `IDENTITY: CONTEXT`, within the limit
/// of a context (the caller's part cut first).
pub(super) fn with_identity(identity: &str, context: &str) -> String {
    let mut text = if context.is_empty() {
        identity.to_owned()
    } else {
        format!("{identity}: {context}")
    };
    let mut end = text.len().min(baton_core::limits::CONTEXT_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// Runs an operation: `{"reply", "document", "granted": [[id, fence]],
/// "started_before_ms"}`.
///
/// `started_before_ms` says when the phases the write set (a lease, a claim) began counting:
/// at most this long before the server received the request. A client counts them from
/// before it sent the request, less this, which is never later than the truth: the server
/// received the request after it was sent. It is null when no deadline may be derived from
/// the answer (it describes what an earlier write did, at a time the server cannot know).
///
/// A write whose own answer the server lost (the store's) is 503 `ambiguous`, with the
/// key's finish count the server's attempt had seen (`finishes_seen`), for the retry.
pub(super) async fn execute(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiJson(mut request): ApiJson<Request>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    authorise(&state, &headers, caller, &mut request.op, &key)?;
    let received_ms = state.coord.local_ms();
    let op = request.op.name();
    let result = state.coord.execute(&key, &mut request).await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(ClientError::Refused { .. }) => "refused",
        Err(_) => "error",
    };
    state.metrics.operation(op, outcome);
    let executed = match result {
        Ok(executed) => executed,
        Err(ClientError::Store(error @ StoreError::Ambiguous { .. })) => {
            return Err(ApiError {
                code: "ambiguous",
                message: error.to_string(),
                ..ApiError::unavailable("")
            }
            .with("finishes_seen", json!(request.finishes_seen)))
        }
        Err(error) => return Err(refused(error)),
    };
    if let Some(version) = executed.version.clone() {
        let doc = &executed.doc;
        state
            .metrics
            .wrote(&key, doc, &executed.granted, &executed.ended);
        state.feeds.publish(&key, || {
            let bytes = baton_core::encode(doc).ok()?;
            Some(Versioned {
                version,
                bytes,
                arrivals: Vec::new(),
            })
        });
    }
    let started_before_ms = executed.basis.map(|basis| {
        let started_ms = basis.basis_local_ms.saturating_sub(basis.behind_ms);
        received_ms.saturating_sub(started_ms)
    });
    Ok(Json(json!({
        "reply": executed.reply,
        "document": executed.doc,
        "granted": executed.granted,
        "started_before_ms": started_before_ms,
    })))
}

/// A client error as an answer: a refusal is 400 (bad input) or 409 (the key's state), with
/// the refusal itself so that a client can act on it as on a direct one.
pub(super) fn refused(error: ClientError) -> ApiError {
    match error {
        ClientError::Refused { refusal, .. } => {
            let status = match refusal {
                Refusal::Invalid(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::CONFLICT,
            };
            ApiError {
                status,
                code: "refused",
                message: refusal.to_string(),
                more: vec![("refusal", json!(refusal))],
            }
        }
        ClientError::Store(error) => ApiError::from(error),
        ClientError::TooLarge { .. } => ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            message: error.to_string(),
            more: Vec::new(),
        },
        ClientError::Contention { .. } => ApiError {
            code: "contention",
            ..ApiError::unavailable(error.to_string())
        },
        other => ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "error",
            message: other.to_string(),
            more: Vec::new(),
        },
    }
}
