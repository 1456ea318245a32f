//! Run once for clients in any language: `POST /v1/once/{key}` with `{seq, max_attempts,
//! retain, ttl, timeout, context}` answers the key's verdict. `run` comes with a turn (as
//! `POST /v1/turns/{key}` answers it: renew it, end it with `DELETE /v1/turns/{key}`), whose
//! release as `succeeded` records the success and as `failed` spends an attempt;
//! `skipped` (a success is remembered) and `replay` (the step is done) say there is nothing to
//! do; `out_of_order` (409, the step before has not completed) and `dead` (409, the attempts
//! are spent) say it may not run. The verdict is the core's ([`baton_core::once`]), judged on a
//! read first, again when the ticket reaches the head, and on a read after a wait that ended
//! without a turn (a duplicate queued behind a run that succeeded ends `skipped`).

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_client::durations::{parse_lease, parse_retention};
use baton_client::once::{attempt_of, judge, NotRun};
use baton_client::turn::Pending;
use baton_core::once::{OnceSpec, Verdict, MAX_ATTEMPTS_DEFAULT, RETAIN_DEFAULT_MS};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::turns::{self, TakeQuery, Taken, TurnAsk};
use super::{checked_key, duration_field};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::State;

/// The body of `POST /v1/once/{key}`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OnceAsk {
    /// The step of a sequence (`--seq`).
    seq: Option<u64>,
    /// Failed attempts after which the key is dead (`--max-attempts`, default 3).
    max_attempts: Option<u32>,
    /// How long a success is remembered (`--retain`, default 7d).
    retain: Option<String>,
    /// The run's lease (`--ttl`).
    ttl: Option<String>,
    /// How long to wait for a running duplicate.
    timeout: Option<String>,
    /// Who runs it.
    context: Option<String>,
    /// Take up a wait this server answered with 202: its ticket's token.
    resume: Option<String>,
}

impl OnceAsk {
    fn spec(&self) -> Result<OnceSpec, ApiError> {
        let retain = duration_field("retain", self.retain.as_deref(), parse_retention)?;
        let spec = OnceSpec {
            seq: self.seq,
            max_attempts: self.max_attempts.unwrap_or(MAX_ATTEMPTS_DEFAULT),
            retain_ms: retain.map_or(RETAIN_DEFAULT_MS, baton_client::durations::millis),
        };
        spec.check()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        duration_field("ttl", self.ttl.as_deref(), parse_lease)?;
        Ok(spec)
    }

    fn turn(&self) -> TurnAsk {
        TurnAsk {
            ttl: self.ttl.clone(),
            timeout: self.timeout.clone(),
            context: self.context.clone(),
            ..TurnAsk::default()
        }
    }
}

/// `POST /v1/once/{key}`: the verdict, and for `run` the turn to run it in.
pub(super) async fn once(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<TakeQuery>,
    ApiJson(ask): ApiJson<OnceAsk>,
) -> Result<Response, ApiError> {
    checked_key(&key)?;
    let received_ms = state.coord.local_ms();
    let spec = ask.spec()?;
    let wait = match &ask.resume {
        Some(token) => turns::resumed(&state, &headers, caller, &key, token)?,
        None => {
            let mut options = ask.turn().options()?;
            turns::may_take(&caller?, &key, &mut options)?;
            let judged = judge(&state.coord, &key, &spec).await;
            if let Some(not_run) = judged.map_err(turns::turn_error)? {
                return not_run_answer(not_run);
            }
            options.once = Some(spec);
            state
                .waits
                .start(&state.coord, Pending::new(&key), options, turns::turn_error)
        }
    };
    match turns::follow(&state, &wait, query.wait, received_ms).await {
        Ok(Taken::Granted(mut grant)) => {
            grant["verdict"] = json!("run");
            grant["attempt"] = json!(attempt_of(&state.coord, &key));
            Ok(Json(grant).into_response())
        }
        Ok(waiting) => Ok(waiting.into_response()),
        // A wait that ended without a turn: a duplicate that succeeded first, a step done or
        // a key gone dead meanwhile. Anything else stands.
        Err(error) if matches!(error.code, "cancelled" | "lost" | "superseded") => {
            match judge(&state.coord, &key, &spec).await {
                Ok(Some(not_run)) => not_run_answer(not_run),
                _ => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// A verdict not to run: 200 for `skipped` and `replay` (nothing to do), 409 for
/// `out_of_order` and `dead` (may not run), with the verdict's details.
fn not_run_answer(not_run: NotRun) -> Result<Response, ApiError> {
    let mut detail = json!(not_run.verdict);
    let word = match not_run.verdict {
        Verdict::Done { .. } => "skipped",
        Verdict::Replay { .. } => "replay",
        Verdict::Gap { .. } => "out_of_order",
        Verdict::Dead { .. } => "dead",
        Verdict::Run { .. } => "run",
    };
    detail["verdict"] = json!(word);
    detail["key"] = json!(not_run.key);
    if not_run.is_done() {
        return Ok(Json(detail).into_response());
    }
    let message = match not_run.verdict {
        Verdict::Dead { failures } => format!(
            "{}: dead after {failures} failed attempts; nothing runs until `baton retry {}`",
            not_run.key, not_run.key
        ),
        _ => format!(
            "{}: out of order: the step before this one has not completed",
            not_run.key
        ),
    };
    Err(ApiError {
        status: StatusCode::CONFLICT,
        code: if word == "dead" {
            "dead"
        } else {
            "out_of_order"
        },
        message,
        more: vec![("verdict", detail)],
    })
}
