//! Operations: `POST /v1/keys/{key}/ops` with a request (`{"attempt", "op": {"op": "enqueue",
//! ...}}`), run by the server's coordinator exactly as the CLI's would run it (load, apply,
//! CAS, retried on conflict). The attempt id makes a retry after a lost answer safe: the core
//! recognises it. Which scope an operation needs is [`scope_of`].

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::StatusCode;
use axum::Json;
use baton_client::ClientError;
use baton_core::{Op, Refusal, Request};
use serde_json::{json, Value};

use super::checked_key;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::tokens::Scope;
use crate::State;

/// The scope an operation needs on its key: `lock` for what a holder, a waiter or a worker
/// does with its own tickets (every such operation names its ticket by its secret token, or
/// makes a new ticket), `admin` for what acts on other people's tickets.
pub fn scope_of(op: &Op) -> Scope {
    match op {
        Op::Enqueue(_)
        | Op::Refresh { .. }
        | Op::Renew { .. }
        | Op::Release { .. }
        | Op::Submit(_)
        | Op::Claim { .. }
        | Op::Complete { .. }
        | Op::Tick
        | Op::Notified(_) => Scope::Lock,
        Op::Cancel { .. }
        | Op::CancelInBacklog { .. }
        | Op::CancelQueued { .. }
        | Op::RetryOnce => Scope::Admin,
    }
}

/// Runs an operation: `{"reply", "document", "granted": [[id, fence]], "behind_ms"}`, where
/// `behind_ms` (null when no deadline may be derived from the answer) is how far the store's
/// time may have been ahead of the reading the write was computed with: a client counts the
/// phases the write set from before it sent the request, less this.
pub(super) async fn execute(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(key): ApiPath<String>,
    ApiJson(mut request): ApiJson<Request>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    caller.require(scope_of(&request.op), &key)?;
    let executed = state
        .coord
        .execute(&key, &mut request)
        .await
        .map_err(refused)?;
    Ok(Json(json!({
        "reply": executed.reply,
        "document": executed.doc,
        "granted": executed.granted,
        "behind_ms": executed.basis.map(|basis| basis.behind_ms),
    })))
}

/// A client error as an answer: a refusal is 400 (bad input) or 409 (the key's state), with
/// the refusal itself so that a client can act on it as on a direct one.
fn refused(error: ClientError) -> ApiError {
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
                refusal: Some(json!(refusal)),
            }
        }
        ClientError::Store(error) => ApiError::from(error),
        ClientError::TooLarge { .. } => ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            message: error.to_string(),
            refusal: None,
        },
        ClientError::Contention { .. } => ApiError {
            code: "contention",
            ..ApiError::unavailable(error.to_string())
        },
        other => ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "error",
            message: other.to_string(),
            refusal: None,
        },
    }
}
