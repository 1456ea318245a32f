//! Jobs for clients in any language: submit to a key, claim from keys with a long poll, renew
//! and complete a run by its token, and read or wait for a job's end. Each runs as the CLI's
//! `submit`, `worker`, `complete` and `wait` run it (the client library's `jobs`); a claimed
//! run's lease is the client's to renew, counted by the one rule of the turns
//! ([`super::turns::Counted`]).
//!
//! A job runs at least once: a worker that finishes the work and dies before its completion
//! lands leaves the run to lapse, and the job to run again (the fence tells the runs apart).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_client::durations::{millis, parse_delay, parse_duration, parse_lease};
use baton_client::jobs::{
    self, look_for_job, ClaimOptions, JobStanding, KeyPatterns, Look, SubmitOptions, WorkWaker,
};
use baton_core::{JobResult, JobSpec, Op, TicketState, TicketView};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ops::{authorise, with_identity};
use super::turns::{renewal, turn_error, Counted, RenewAsk};
use super::{checked_key, duration_field};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::tokens::Scope;
use crate::State;

/// The body of `POST /v1/jobs/{key}`: `baton submit`'s flags.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitAsk {
    /// The job's id: a second submit with it changes nothing.
    id: Option<String>,
    /// The parameters, any JSON (default `{}`), at most 256 KiB.
    params: Option<Value>,
    limit: Option<u32>,
    order: Option<String>,
    #[serde(default)]
    supersede: bool,
    #[serde(default)]
    keep: bool,
    #[serde(default)]
    cancel_running: bool,
    max_attempts: Option<u32>,
    /// The first retry's backoff (`"30s"`); it doubles.
    backoff: Option<String>,
    /// Not ready before this long after it is queued.
    delay: Option<String>,
    /// A run longer than this counts as a failed attempt.
    max_run: Option<String>,
    context: Option<String>,
}

impl SubmitAsk {
    fn options(&self) -> Result<SubmitOptions, ApiError> {
        let defaults = JobSpec::default();
        let spec = JobSpec {
            max_attempts: self.max_attempts.unwrap_or(defaults.max_attempts),
            backoff_ms: duration_field("backoff", self.backoff.as_deref(), parse_lease)?
                .map_or(defaults.backoff_ms, millis),
            delay_ms: duration_field("delay", self.delay.as_deref(), parse_delay)?
                .map_or(0, millis),
            max_run_ms: duration_field("max_run", self.max_run.as_deref(), parse_lease)?
                .map(millis),
        };
        spec.check().map_err(bad)?;
        let limit = self.limit.unwrap_or(1);
        baton_core::limits::check_limit(limit).map_err(bad)?;
        let context = self.context.clone().unwrap_or_default();
        baton_core::limits::check_context(&context).map_err(bad)?;
        if let Some(id) = &self.id {
            baton_core::limits::check_id(id).map_err(|e| bad(e.0))?;
        }
        Ok(SubmitOptions {
            id: self.id.clone(),
            limit,
            order: self.order.clone(),
            supersede: self.supersede,
            keep: self.keep,
            spec,
            context,
            cancel_running: self.cancel_running,
            ..SubmitOptions::default()
        })
    }
}

/// `POST /v1/jobs/{key}`: queues a job; `{key, id, state, already}`.
pub(super) async fn submit(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath(key): ApiPath<String>,
    ApiJson(ask): ApiJson<SubmitAsk>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    let mut options = ask.options()?;
    caller.require(Scope::Lock, &key)?;
    if caller.0.from_trust {
        options.context = with_identity(&caller.0.name, &options.context);
    }
    let params = match &ask.params {
        Some(params) => serde_json::to_vec(params).map_err(bad)?,
        None => b"{}".to_vec(),
    };
    jobs::check_params(&params).map_err(ApiError::bad_request)?;
    let submitted = jobs::submit(&state.coord, &key, &params, &options)
        .await
        .map_err(turn_error)?;
    Ok(Json(json!({
        "key": key,
        "id": submitted.id,
        "state": view_state(&submitted.view),
        "already": submitted.already,
    })))
}

/// The body of `POST /v1/claims`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClaimAsk {
    /// The keys served: exact keys, and prefixes ending in `/`.
    keys: Vec<String>,
    /// How long to wait for a job (default: `--turn-wait`, and never longer).
    wait: Option<String>,
    /// The run's lease (default 30s).
    ttl: Option<String>,
}

/// `POST /v1/claims`: claims the next ready job of the keys served, waiting for one up to
/// `wait`: the job, its parameters and its lease, or 204.
pub(super) async fn claim(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiJson(ask): ApiJson<ClaimAsk>,
) -> Result<Response, ApiError> {
    if ask.keys.is_empty() {
        return Err(ApiError::bad_request(
            "keys: name the keys this worker serves: exact keys, or prefixes ending in /",
        ));
    }
    for pattern in &ask.keys {
        checked_key(pattern)?;
        caller.require(Scope::Lock, pattern)?;
    }
    let wait = duration_field("wait", ask.wait.as_deref(), parse_duration)?
        .map_or(state.turn_wait, |w| w.min(state.turn_wait));
    let ttl = duration_field("ttl", ask.ttl.as_deref(), parse_lease)?;
    let options = ClaimOptions {
        ttl: ttl.unwrap_or(ClaimOptions::default().ttl),
    };
    baton_core::limits::check_ttl("ttl", millis(options.ttl)).map_err(bad)?;
    let patterns = KeyPatterns::new(ask.keys);
    let deadline = tokio::time::Instant::now() + wait;
    let mut waker = WorkWaker::new(&state.coord, &patterns)
        .await
        .map_err(turn_error)?;
    let received_ms = state.coord.local_ms();
    // A job claimed after the first look began its lease long after the request was sent: its
    // client renews it first ([`Counted`]).
    let mut waited = false;
    loop {
        let look = look_for_job(&state.coord, &patterns, &options).await;
        let next_due_in = match look.map_err(turn_error)? {
            Look::Claimed(job) => return Ok(claimed(&job, received_ms, waited).into_response()),
            Look::Idle { next_due_in } => next_due_in,
        };
        waited = true;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        let poll = next_due_in.unwrap_or(Duration::from_secs(1));
        waker
            .wait(poll.min(left).max(Duration::from_millis(50)))
            .await;
    }
}

/// A claimed job's answer: the server's heartbeat stops, its client renews from now on.
fn claimed(job: &jobs::Job, received_ms: u64, waited: bool) -> Json<Value> {
    job.heartbeat.stop_all();
    let counted = Counted::of_lease(&job.lease, received_ms, waited);
    let params: Value = serde_json::from_slice(&job.params).unwrap_or(Value::Null);
    Json(json!({
        "key": job.lease.key,
        "id": job.lease.id,
        "token": job.lease.token,
        "fence": job.lease.fence,
        "params": params,
        "attempt": job.attempt,
        "run": job.run,
        "max_run_ms": job.max_run.map(millis),
        "lease_ms": counted.lease_ms,
        "started_before_ms": counted.started_before_ms,
        "margin_ms": counted.margin_ms,
        "renew_first": counted.renew_first,
    }))
}

/// `POST /v1/jobs/{key}/{id}/renew`: extends a claimed run by its token, as a turn is renewed.
pub(super) async fn renew_run(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath((key, id)): ApiPath<(String, String)>,
    ApiJson(ask): ApiJson<RenewAsk>,
) -> Result<Json<Value>, ApiError> {
    let mut answer = renewal(&state, &headers, caller, &key, &ask).await?;
    answer["id"] = json!(id);
    Ok(Json(answer))
}

/// The body of a run's completion.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CompleteRun {
    token: String,
    /// `succeeded`, `failed` (an attempt spent) or `released_back` (no attempt spent).
    result: String,
    /// Why it failed.
    error: Option<String>,
    /// For `released_back`: ready again after this long (default 0).
    delay: Option<String>,
}

/// `POST /v1/jobs/{key}/{id}/complete`: ends a run by its token; the job's state after it.
pub(super) async fn complete(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    ApiPath((key, id)): ApiPath<(String, String)>,
    ApiJson(ask): ApiJson<CompleteRun>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    let result = match ask.result.as_str() {
        "succeeded" => JobResult::Succeeded,
        "failed" => JobResult::Failed { error: ask.error },
        "released_back" => JobResult::ReleasedBack {
            delay_ms: duration_field("delay", ask.delay.as_deref(), parse_delay)?.map_or(0, millis),
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "result {other:?}: write succeeded, failed or released_back"
            )))
        }
    };
    let mut op = Op::Complete {
        token: ask.token.clone(),
        id: Some(id.clone()),
        result: result.clone(),
    };
    authorise(&state, &headers, caller, &mut op, &key)?;
    let view = jobs::complete_job(&state.coord, &key, &id, &ask.token, result)
        .await
        .map_err(turn_error)?;
    Ok(Json(
        json!({ "key": key, "id": id, "state": view_state(&view) }),
    ))
}

/// `GET /v1/jobs/{key}/{id}`: where the job stands.
pub(super) async fn get(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath((key, id)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    checked_key(&key)?;
    caller.require(Scope::Read, &key)?;
    let standing = jobs::standing(&state.coord, &key, &id)
        .await
        .map_err(turn_error)?;
    standing_answer(&key, &id, &standing).map(Json)
}

/// `?timeout=DUR` of a wait.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    timeout: Option<String>,
}

/// `GET /v1/jobs/{key}/{id}/wait?timeout=DUR`: waits for the job's end (up to `timeout`, and
/// never longer than `--turn-wait`): 200 with how it ended, or 202 with where it stands.
pub(super) async fn wait(
    Shared(state): Shared<Arc<State>>,
    caller: Caller,
    ApiPath((key, id)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> Result<Response, ApiError> {
    checked_key(&key)?;
    caller.require(Scope::Read, &key)?;
    let timeout = duration_field("timeout", query.timeout.as_deref(), parse_duration)?
        .map_or(state.turn_wait, |t| t.min(state.turn_wait));
    let ended = jobs::wait(&state.coord, &key, &id, Duration::from_secs(1), &|_| {});
    match tokio::time::timeout(timeout, ended).await {
        Ok(Ok(end)) => standing_answer(&key, &id, &JobStanding::Ended(end))
            .map(|body| Json(body).into_response()),
        Ok(Err(error)) => Err(no_such_job_or(&key, &id, error)),
        Err(_) => {
            let standing = jobs::standing(&state.coord, &key, &id)
                .await
                .map_err(turn_error)?;
            let body = standing_answer(&key, &id, &standing)?;
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}

fn standing_answer(key: &str, id: &str, standing: &JobStanding) -> Result<Value, ApiError> {
    Ok(match standing {
        JobStanding::Live {
            state,
            position,
            attempt,
        } => json!({ "key": key, "id": id, "state": live_state(*state),
                     "position": position, "attempt": attempt }),
        JobStanding::Ended(end) => json!({ "key": key, "id": id, "state": end.outcome,
                     "forced": end.forced, "reason": end.reason, "run": end.run }),
        JobStanding::Unknown => return Err(no_such_job(key, id)),
    })
}

fn view_state(view: &TicketView) -> Value {
    match view {
        TicketView::Live(status) => json!(live_state(status.state)),
        TicketView::Finished { outcome, .. } => json!(outcome),
    }
}

fn live_state(state: TicketState) -> &'static str {
    match state {
        TicketState::Queued => "queued",
        TicketState::Held => "running",
    }
}

fn no_such_job_or(key: &str, id: &str, error: baton_client::ClientError) -> ApiError {
    match error.refusal() {
        Some(baton_core::Refusal::UnknownId { .. }) => no_such_job(key, id),
        _ => turn_error(error),
    }
}

fn no_such_job(key: &str, id: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "no_such_job",
        message: format!("{key}: no job {id} (not queued, running, nor in the key's history)"),
        more: Vec::new(),
    }
}

fn bad(error: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(error.to_string())
}
