//! Jobs: submit work for a key, claim it as a worker, complete it, wait for its end.
//!
//! A job is a ticket with parameters and no waiting process ([`baton_core::job`]). Its
//! submission (options and parameters, [`job_record`]) and the report of each run are *records*
//! beside the key ([`Store::put_record`]), outside the hot document, written before the
//! document change that refers to them: a writer that dies in between leaves only a record
//! nothing refers to, never a job without its parameters. A claimed job is a held, claimed lease like any other: [`Job::heartbeat`] renews
//! it, and [`Job::complete`] ends the run.
//!
//! [`Store::put_record`]: baton_store::Store::put_record

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::backlog::{segment_record, Segment, SEGMENT_JOBS};
use baton_core::job::{JobResult, JobSpec, PARAMS_MAX_BYTES};
use baton_core::op::{Submit, TicketView};
use baton_core::{Doc, JobState, Op, Outcome, Refusal, Reply, Request, Ticket, TicketState};
use serde::{Deserialize, Serialize};

use crate::coordinator::{Coordinator, Executed, KeySnapshot};
use crate::error::ClientError;
use crate::heartbeat::Heartbeat;
use crate::hold::{end_retrying, renew};
use crate::retry::Doubling;
use crate::turn::{ids, Lease};

/// The record holding a job's submission: the [`Submit`] as one line of JSON, a newline, then
/// the parameters exactly as submitted.
pub fn job_record(id: &str) -> String {
    format!("job/{id}")
}

fn encode_job_record(submit: &Submit, params: &[u8]) -> Vec<u8> {
    // Compact JSON escapes every newline inside strings: the first newline ends it.
    let mut bytes = serde_json::to_vec(submit).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend_from_slice(params);
    bytes
}

fn decode_job_record(bytes: &[u8]) -> Option<(Submit, Vec<u8>)> {
    let split = bytes.iter().position(|&b| b == b'\n')?;
    let submit = serde_json::from_slice(&bytes[..split]).ok()?;
    Some((submit, bytes[split + 1..].to_vec()))
}

/// A job's submission and parameters, from its record.
async fn read_job_record(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<(Submit, Vec<u8>)>, ClientError> {
    let bytes = coord.store().get_record(key, &job_record(id)).await?;
    Ok(bytes.as_deref().and_then(decode_job_record))
}

/// Job `id`'s record, as stored.
async fn read_record_bytes(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<Vec<u8>>, ClientError> {
    Ok(coord.store().get_record(key, &job_record(id)).await?)
}

/// The parameters a worker may run from job `id`'s record `bytes`, if the record is the one
/// its submit wrote: its hash is the one the ticket keeps (`expected`;
/// [`baton_core::job::record_sha256`]). `Err` says what is there instead. A job of a client
/// older than the binding has no hash: its record runs as it is (`null` if it is gone).
fn bound_params(id: &str, expected: Option<&str>, bytes: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let short = |hash: &str| format!("{}…", hash.get(..12).unwrap_or(hash));
    if let Some(expected) = expected {
        let Some(bytes) = bytes else {
            return Err(format!("its record {} is gone", job_record(id)));
        };
        let found = baton_core::job::record_sha256(bytes);
        if found != expected {
            return Err(format!(
                "its record {} has SHA-256 {}, its submit wrote {}",
                job_record(id),
                short(&found),
                short(expected)
            ));
        }
    }
    let params = bytes.and_then(decode_job_record).map(|(_, params)| params);
    Ok(params.unwrap_or_else(|| b"null".to_vec()))
}

/// The record holding the report of a job's run `run` (1 for its first claim).
pub fn run_record(id: &str, run: u32) -> String {
    format!("run/{id}/{run}")
}

/// How to submit a job.
#[derive(Clone, Debug)]
pub struct SubmitOptions {
    /// The job's id (`--id`): a second submit with it changes nothing. `None`: a new `j-…`.
    pub id: Option<String>,
    /// The key's limit (how many of its jobs and tickets may run at once).
    pub limit: u32,
    /// Sort value: jobs and tickets with one go first, compared as strings.
    pub order: Option<String>,
    /// Cancel every queued job or ticket that sorts before this one, unless it has `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Attempts, backoff, delay, longest run.
    pub spec: JobSpec,
    /// Who submits it, and why (shown to others).
    pub context: String,
    /// Bound on the key's live tickets.
    pub max_live: u32,
    /// Ask the key's lock holders not queued with `keep` to stop (`--cancel-running`).
    pub cancel_running: bool,
}

impl Default for SubmitOptions {
    fn default() -> Self {
        SubmitOptions {
            id: None,
            limit: 1,
            order: None,
            supersede: false,
            keep: false,
            spec: JobSpec::default(),
            context: String::new(),
            max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
            cancel_running: false,
        }
    }
}

/// Checks job parameters: JSON, at most [`PARAMS_MAX_BYTES`]. The message says what is wrong.
pub fn check_params(params: &[u8]) -> Result<(), String> {
    if params.len() > PARAMS_MAX_BYTES {
        return Err(format!(
            "the parameters are {} bytes; they may be at most {PARAMS_MAX_BYTES} bytes (256 KiB): \
             pass a reference (a URL, an object key) to larger data instead",
            params.len()
        ));
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(params)
        .map(|_| ())
        .map_err(|e| format!("the parameters are not valid JSON: {e}"))
}

/// What a submit did.
#[derive(Clone, Debug)]
pub struct Submitted {
    /// The job's id.
    pub id: String,
    /// Where it stands: queued, or, when it was submitted before, that job's state.
    pub view: TicketView,
    /// A job with this id had been submitted before: nothing was queued, and its parameters
    /// and options stay those of the first submit.
    pub already: bool,
}

/// Submits a job to `key` with `params` (JSON) and says where it stands: queued, or, when a
/// job with the same id was submitted before (live, or ended within what the key's history
/// keeps), that job's state, unchanged.
pub async fn submit(
    coord: &Coordinator,
    key: &str,
    params: &[u8],
    options: &SubmitOptions,
) -> Result<Submitted, ClientError> {
    submit_op(coord, key, params, options).await
}

/// Queues a dead job again under its id, with its parameters and options, attempts reset
/// (`baton retry`). Refused unless the job is dead.
pub async fn revive(coord: &Coordinator, key: &str, id: &str) -> Result<TicketView, ClientError> {
    baton_core::limits::check_id(id).map_err(|e| invalid(key, e.0))?;
    let bytes = coord.store().get_record(key, &job_record(id)).await?;
    let Some((mut submit, _)) = bytes.as_deref().and_then(decode_job_record) else {
        return Err(ClientError::Refused {
            key: key.to_owned(),
            refusal: baton_core::Refusal::UnknownId { id: id.to_owned() },
        });
    };
    let ended = final_run(coord, key, id).await?;
    // The first submit's hash, from the entry that ended the job: the record, which anyone who
    // writes the store could have replaced meanwhile, is checked against it, never trusted to
    // say it. A job ended before the binding (no hash kept) is bound to its record from now.
    let first_sha256 = ended.as_ref().and_then(|run| run.params_sha256.clone());
    let record_sha256 = bytes.as_deref().map(baton_core::job::record_sha256);
    let expected = first_sha256.as_deref().or(record_sha256.as_deref());
    if let Err(detail) = bound_params(id, expected, bytes.as_deref()) {
        return Err(params_replaced(key, id, detail));
    }
    submit.params_sha256 = expected.map(str::to_owned);
    submit.revive = true;
    submit.supersede = false;
    // Its new runs number on after the old ones, whose reports stay.
    submit.runs_before = ended.map_or(0, |run| run.run);
    let mut request = Request::new(ids::new_attempt_id(), Op::Submit(submit));
    let executed = coord.execute(key, &mut request).await?;
    match executed.reply {
        Reply::Ticket(view) => Ok(view),
        other => Err(unexpected(key, &other)),
    }
}

async fn submit_op(
    coord: &Coordinator,
    key: &str,
    params: &[u8],
    options: &SubmitOptions,
) -> Result<Submitted, ClientError> {
    check_params(params).map_err(|e| invalid(key, e))?;
    let id = options.id.clone().unwrap_or_else(ids::new_job_id);
    baton_core::limits::check_id(&id).map_err(|e| invalid(key, e.0))?;
    let submit = Submit {
        id: id.clone(),
        limit: options.limit,
        context: options.context.clone(),
        order: options.order.clone(),
        supersede: options.supersede,
        keep: options.keep,
        spec: options.spec.clone(),
        max_live: options.max_live,
        revive: false,
        runs_before: 0,
        cancel_running: options.cancel_running,
        params_sha256: None,
    };
    // The record first: a submit that dies before its document write leaves an orphan record,
    // never a job without parameters. The ticket keeps the record's hash, so a record replaced
    // after this (a writer racing this one, or one at the store) is never run.
    let record = encode_job_record(&submit, params);
    let submit = Submit {
        params_sha256: Some(baton_core::job::record_sha256(&record)),
        ..submit
    };
    if options.id.is_some() {
        if let Some(view) = submitted_before(coord, key, &id).await? {
            return Ok(Submitted {
                id,
                view,
                already: true,
            });
        }
    }
    if options.id.is_none() || may_write_record(coord, key, &id, &record).await? {
        coord.put_record(key, &job_record(&id), &record).await?;
    }
    let mut request = Request::new(ids::new_attempt_id(), Op::Submit(submit));
    let executed = match coord.execute(key, &mut request).await {
        Ok(executed) => executed,
        Err(error) => {
            let (id, view) = submitted_into_backlog(coord, key, &id, error).await?;
            return Ok(Submitted {
                id,
                view,
                already: false,
            });
        }
    };
    match executed.reply {
        Reply::Ticket(view) => Ok(Submitted {
            id,
            view,
            already: false,
        }),
        other => Err(unexpected(key, &other)),
    }
}

/// Job `id` of `key` as it stands, when a submit with the caller's id finds that it was
/// submitted before: live (in the document or its backlog), or ended, as its mark or its
/// history entry says. The document remembers only the last few finished tickets, so the
/// history is what makes a second submit a no-op for as long as the key keeps it.
///
/// `None`: never submitted, or only its record is there, left by a submit that died before its
/// document write, and the history, reaching back to the key's first entry, shows no end of
/// it. When the history no longer reaches back that far, whether it ran cannot be known, and
/// the submit is refused rather than run twice.
async fn submitted_before(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<TicketView>, ClientError> {
    let snapshot = coord.read(key).await?;
    let doc = snapshot.doc.as_ref();
    if let Some(status) = doc.and_then(|doc| baton_core::apply::status_of(doc, id)) {
        return Ok(Some(TicketView::Live(status)));
    }
    if let Some(view) = waiting_in_backlog(coord, key, id).await? {
        return Ok(Some(view));
    }
    let recorded = coord.store().get_record(key, &job_record(id)).await?;
    if recorded.is_none() {
        return Ok(None);
    }
    match standing(coord, key, id).await? {
        JobStanding::Ended(end) => Ok(Some(TicketView::Finished {
            id: id.to_owned(),
            outcome: end.outcome,
            forced: end.forced,
        })),
        // Queued since by another submit: the core answers with it.
        JobStanding::Live { .. } => Ok(None),
        JobStanding::Unknown if history_is_whole(coord, key, doc).await? => Ok(None),
        JobStanding::Unknown => Err(ClientError::Refused {
            key: key.to_owned(),
            refusal: Refusal::Forgotten { id: id.to_owned() },
        }),
    }
}

/// Whether `key`'s history still holds every entry ever appended to it (none trimmed by its
/// retention), so that a job whose end is not there never ended.
async fn history_is_whole(
    coord: &Coordinator,
    key: &str,
    doc: Option<&Doc>,
) -> Result<bool, ClientError> {
    let first = coord.store().history(key, 0, 1).await?;
    Ok(match first.first() {
        Some(entry) => entry.seq == 1,
        None => doc.is_none_or(|doc| doc.finishes == 0),
    })
}

/// After a submit whose write may have landed was refused as uncertain: the core cannot see
/// the key's written backlog segments, where the job may be by now. Found there, it is the
/// answer; else the refusal stands (the job may have run and been forgotten since).
async fn submitted_into_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
    error: ClientError,
) -> Result<(String, TicketView), ClientError> {
    let ClientError::Refused {
        refusal: Refusal::Uncertain,
        ..
    } = &error
    else {
        return Err(error);
    };
    let snapshot = coord.read(key).await?;
    let Some(doc) = &snapshot.doc else {
        return Err(error);
    };
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Err(error);
    };
    match found.standing(doc) {
        Some(JobStanding::Live { position, .. }) => {
            let status = baton_core::TicketStatus {
                position,
                ..baton_core::apply::waiting_status(&found.ticket)
            };
            Ok((id.to_owned(), TicketView::Live(status)))
        }
        _ => Err(error),
    }
}

/// Job `id` of `key`, if it was submitted and waits in a written segment of the backlog.
async fn waiting_in_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<TicketView>, ClientError> {
    let snapshot = coord.read(key).await?;
    let Some(doc) = snapshot.doc.as_ref() else {
        return Ok(None);
    };
    if !doc.backlog.as_ref().is_some_and(|b| b.has_segments()) || live_or_marked(doc, id).is_some()
    {
        return Ok(None);
    }
    if coord
        .store()
        .get_record(key, &job_record(id))
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Ok(None);
    };
    Ok(match found.standing(doc) {
        Some(JobStanding::Live { position, .. }) => {
            Some(TicketView::Live(baton_core::TicketStatus {
                position,
                ..baton_core::apply::waiting_status(&found.ticket)
            }))
        }
        Some(JobStanding::Ended(end)) => Some(TicketView::Finished {
            id: id.to_owned(),
            outcome: end.outcome,
            forced: false,
        }),
        _ => None,
    })
}

/// Whether a submit with an id of the caller's may write the job's record: not when a job with
/// that id exists or existed (a second submit changes nothing), only when no record is there or
/// it is left by a submit that died before its document write.
async fn may_write_record(
    coord: &Coordinator,
    key: &str,
    id: &str,
    record: &[u8],
) -> Result<bool, ClientError> {
    match coord.store().get_record(key, &job_record(id)).await? {
        None => Ok(true),
        Some(existing) if existing == record => Ok(false),
        Some(_) => Ok(matches!(
            standing(coord, key, id).await?,
            JobStanding::Unknown
        )),
    }
}

/// How a worker claims.
#[derive(Clone, Debug)]
pub struct ClaimOptions {
    /// The lease of a run; the heartbeat renews it every third.
    pub ttl: Duration,
}

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            ttl: Duration::from_secs(30),
        }
    }
}

/// A claimed job: its lease (renewed by its heartbeat from the moment it is returned), its
/// parameters, and which attempt and run this is.
#[derive(Debug)]
pub struct Job {
    /// The held lease: key, id, token, fence, how long it stands.
    pub lease: Lease,
    /// The attempt (1 for the first; a release back does not count).
    pub attempt: u32,
    /// The run: this claim's number, which names its report ([`run_record`]).
    pub run: u32,
    /// The parameters, exactly as submitted.
    pub params: Vec<u8>,
    /// The job's `--max-run`.
    pub max_run: Option<Duration>,
    /// Renews the lease while the work runs; its `lost()` fires if it cannot.
    pub heartbeat: Heartbeat,
    coord: Arc<Coordinator>,
}

/// What a run did, kept as its record for `baton jobs show` and `baton wait`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The attempt.
    pub attempt: u32,
    /// The run.
    pub run: u32,
    /// The fence it held.
    pub fence: u64,
    /// Who ran it.
    #[serde(default)]
    pub worker: String,
    /// When it started and ended (the worker's wall clock, ms since the Unix epoch).
    pub started_wall_ms: u64,
    /// See `started_wall_ms`.
    pub ended_wall_ms: u64,
    /// How it ended: `succeeded`, `failed`, `released_back`.
    pub result: String,
    /// The command's exit code, if it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The end of the command's standard output (at most 16 KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout_tail: String,
    /// The end of its standard error (at most 16 KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// A `--async` run whose command exited 0: the job ends when `baton complete` says so, not
    /// by this report ([`Job::unrecorded_success`] does not take it for the job's success).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_complete: bool,
    /// What the worker did instead of running the command, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Job {
    /// The key.
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.lease.id
    }

    /// Writes this run's report (before [`Job::complete`], so the record is there when the
    /// job's end is seen). A store error is retried while the lease stands (the write replaces
    /// the whole record, so a retry of one that landed changes nothing): a report saying the
    /// command succeeded is what keeps the job from running again if this worker stops before
    /// its end is recorded ([`Job::unrecorded_success`]).
    pub async fn report(&self, report: &RunReport) -> Result<(), ClientError> {
        let bytes = serde_json::to_vec(report).unwrap_or_default();
        let name = run_record(self.id(), self.run);
        let mut pause = Doubling::default();
        loop {
            let error = match self.coord.put_record(self.key(), &name, &bytes).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            let pause_ms = u64::try_from(pause.pause().as_millis()).unwrap_or(u64::MAX);
            let until_ms = self
                .heartbeat
                .holds_until_ms()
                .unwrap_or(self.lease.holds_until_ms);
            if !error.is_transient() || self.coord.local_ms().saturating_add(pause_ms) >= until_ms {
                return Err(error);
            }
            tracing::warn!(key = %self.key(), %error, "the run's report failed; retrying");
            pause.sleep().await;
        }
    }

    /// The report of an earlier run of this job that says it succeeded, when the job is still
    /// live: that run's command exited 0 and its worker kept the report, then stopped (killed,
    /// paused past its lease, cut off) before the job's end was recorded, and the lease ran
    /// out. Such a job must be recorded as succeeded, not run again: its work was done.
    ///
    /// Only the latest earlier run that kept a report counts (runs whose worker died before
    /// its command ended keep none); a `--async` run's exit 0 is not a success
    /// ([`RunReport::awaiting_complete`]). A first run reads nothing.
    pub async fn unrecorded_success(&self) -> Result<Option<RunReport>, ClientError> {
        for run in (1..self.run).rev() {
            let name = run_record(self.id(), run);
            let Some(bytes) = self.coord.store().get_record(self.key(), &name).await? else {
                continue;
            };
            let Ok(report) = serde_json::from_slice::<RunReport>(&bytes) else {
                return Ok(None);
            };
            let succeeded = report.result == "succeeded" && !report.awaiting_complete;
            return Ok(succeeded.then_some(report));
        }
        Ok(None)
    }

    /// Ends the run: records `result`, sent again after a store error while the lease stands
    /// (renewed meanwhile), then stops renewing. Returns the job's standing after it (finished,
    /// or queued again).
    pub async fn complete(self, result: JobResult) -> Result<TicketView, ClientError> {
        complete_within_lease(&self.coord, &self.lease, &self.heartbeat, result).await
    }

    /// Gives the job back (exit 75): it keeps its place, spends no attempt, and is ready again
    /// after `delay`.
    pub async fn release_back(self, delay: Duration) -> Result<TicketView, ClientError> {
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.complete(JobResult::ReleasedBack { delay_ms }).await
    }
}

/// Ends the run `lease` holds with `result`, retrying a store error with the same request (the
/// core recognises a retry that landed) for as long as the lease stands: the heartbeat goes on
/// renewing it until the end is confirmed, so a store's blip shorter than the lease never
/// turns a finished run into a lapsed lease, counted as a failed attempt and run again. Then
/// the heartbeat stops. Past the lease's bound (or its TTL since the first try, if renewals
/// succeed while the completion does not) the last error is returned, and the lease lapses.
async fn complete_within_lease(
    coord: &Coordinator,
    lease: &Lease,
    heartbeat: &Heartbeat,
    result: JobResult,
) -> Result<TicketView, ClientError> {
    let mut request = complete_request(None, &lease.token, result);
    let give_up_at = Instant::now() + Duration::from_millis(lease.ttl_ms);
    let stands = |pause: Duration| {
        let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        let until_ms = heartbeat.holds_until_ms().unwrap_or(lease.holds_until_ms);
        Instant::now() + pause < give_up_at && coord.local_ms().saturating_add(pause_ms) < until_ms
    };
    let (executed, _) = end_retrying(coord, &lease.key, &mut request, stands).await;
    heartbeat.stop_all();
    match executed?.reply {
        Reply::Ticket(view) => Ok(view),
        other => Err(unexpected(&lease.key, &other)),
    }
}

/// Claims the head of `key`'s queue if it is a job that is ready and fits; `None` if there is
/// none. The job's lease stands (and is renewed by its heartbeat) when this returns.
///
/// A job whose record is not the one its submit wrote (its hash differs from the ticket's,
/// [`JobState::params_sha256`]) is never handed out: its run is ended as a failed attempt
/// (dead when its attempts are spent) with an error naming the replacement, and that error is
/// returned ([`ClientError::ParamsReplaced`]): a worker says so and looks again.
pub async fn claim(
    coord: &Arc<Coordinator>,
    key: &str,
    options: &ClaimOptions,
) -> Result<Option<Job>, ClientError> {
    let token = ids::new_token();
    let ttl_ms = u64::try_from(options.ttl.as_millis()).unwrap_or(u64::MAX);
    let op = Op::Claim {
        token: token.clone(),
        ttl_ms,
    };
    // The parameters of the job the cached document says is next, read while the claim is
    // written: a worker that found the key through the due index has its document, so the
    // claim is one round trip, not two, in the common case. A wrong guess costs a read.
    let likely = coord.cached_doc(key).and_then(|doc| {
        baton_core::job::claimable_head(&doc, u64::MAX, crate::time::wall_ms())
            .ok()
            .map(|t| t.id.clone())
    });
    let read_likely = async {
        match &likely {
            Some(id) => Some(read_record_bytes(coord, key, id).await),
            None => None,
        }
    };
    let (executed, likely_record) = tokio::join!(claim_write(coord, key, &op), read_likely);
    let executed = executed?;
    let status = match &executed.reply {
        Reply::NoJob { .. } => return Ok(None),
        Reply::Ticket(TicketView::Live(status)) if status.state == TicketState::Held => status,
        other => return Err(unexpected(key, other)),
    };
    let lease = claimed_lease(coord, key, &token, &op, &executed).await?;
    let Some(job_state) = status.job.clone() else {
        return Err(unexpected(key, &executed.reply));
    };
    let heartbeat = Heartbeat::start(coord.clone());
    heartbeat.add(&lease);
    let record = match likely_record {
        Some(Ok(record)) if likely.as_deref() == Some(status.id.as_str()) => Ok(record),
        _ => read_record_bytes(coord, key, &status.id).await,
    };
    let expected = job_state.params_sha256.as_deref();
    let params = match record.map(|bytes| bound_params(&status.id, expected, bytes.as_deref())) {
        Ok(Ok(params)) => params,
        Ok(Err(detail)) => {
            // Never run: the run ends as a failed attempt that says why.
            let error = crate::error::params_replaced_message(&status.id, &detail);
            let failed = JobResult::Failed { error: Some(error) };
            let _ = complete_within_lease(coord, &lease, &heartbeat, failed).await;
            return Err(params_replaced(key, &status.id, detail));
        }
        Err(error) => {
            // Not run without its parameters: given back unspent, to be claimed again.
            let back = JobResult::ReleasedBack { delay_ms: 1_000 };
            let _ = complete_within_lease(coord, &lease, &heartbeat, back).await;
            return Err(error);
        }
    };
    Ok(Some(Job {
        attempt: job_state.attempt(),
        run: job_state.runs,
        max_run: job_state.max_run_ms.map(Duration::from_millis),
        params,
        lease,
        heartbeat,
        coord: coord.clone(),
    }))
}

/// A claim's write. One that found no job but took backlog jobs in (all of which a cancel or
/// a cut had ended) claims again, while each try takes a further segment in.
async fn claim_write(coord: &Coordinator, key: &str, op: &Op) -> Result<Executed, ClientError> {
    let mut taken_before = None;
    loop {
        let mut request = Request::new(ids::new_attempt_id(), op.clone());
        let executed = coord.execute(key, &mut request).await?;
        let wanted = executed.doc.segment_wanted();
        let no_job = matches!(executed.reply, Reply::NoJob { .. });
        if no_job && wanted.is_some() && wanted != taken_before {
            taken_before = wanted;
            continue;
        }
        return Ok(executed);
    }
}

/// The lease a claim set, counted from its write ([`Lease::set_by_write`]); or, when the
/// claim's answer shows a run an earlier, unseen write of it set (a retry), from a renewal
/// sent now.
async fn claimed_lease(
    coord: &Coordinator,
    key: &str,
    token: &str,
    op: &Op,
    executed: &Executed,
) -> Result<Lease, ClientError> {
    let Reply::Ticket(TicketView::Live(status)) = &executed.reply else {
        return Err(unexpected(key, &executed.reply));
    };
    if let Some(lease) = Lease::set_by_write(key, token, &executed.answer(op), coord.now()) {
        return Ok(lease);
    }
    let renewed = renew(coord, key, token, None).await?;
    Ok(Lease::confirmed_by_renewal(key, token, status, &renewed))
}

/// Ends a run by its token (a worker): succeeded, failed (a failed attempt) or released back.
/// Returns the job's standing after it.
pub async fn complete(
    coord: &Coordinator,
    key: &str,
    token: &str,
    result: JobResult,
) -> Result<TicketView, ClientError> {
    complete_op(coord, key, None, token, result).await
}

/// [`complete`] of job `id` (`baton complete KEY JOB_ID --token TOKEN`): a token of another job
/// is refused, nothing changed.
pub async fn complete_job(
    coord: &Coordinator,
    key: &str,
    id: &str,
    token: &str,
    result: JobResult,
) -> Result<TicketView, ClientError> {
    complete_op(coord, key, Some(id), token, result).await
}

async fn complete_op(
    coord: &Coordinator,
    key: &str,
    id: Option<&str>,
    token: &str,
    result: JobResult,
) -> Result<TicketView, ClientError> {
    let mut request = complete_request(id, token, result);
    let executed = coord.execute(key, &mut request).await?;
    match executed.reply {
        Reply::Ticket(view) => Ok(view),
        other => Err(unexpected(key, &other)),
    }
}

/// A completion, as a request its retries reuse (so the core recognises them).
fn complete_request(id: Option<&str>, token: &str, result: JobResult) -> Request {
    Request::new(
        ids::new_attempt_id(),
        Op::Complete {
            token: token.to_owned(),
            id: id.map(str::to_owned),
            result,
        },
    )
}

/// Which keys a worker serves: exact keys, and prefixes ending in `/`; none means every key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPatterns(Vec<String>);

impl KeyPatterns {
    /// Patterns as given on the command line.
    pub fn new(patterns: Vec<String>) -> KeyPatterns {
        KeyPatterns(patterns)
    }

    /// Whether `key` is served.
    pub fn matches(&self, key: &str) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|p| {
                if p.ends_with('/') {
                    key.starts_with(p.as_str())
                } else {
                    key == p
                }
            })
    }

    /// What the due index says of the served keys, or `None` where the store keeps none (then
    /// read every served key). Each pattern is one read of the index (an exact key is a prefix
    /// whose other keys are dropped), at most [`DUE_SCAN`] keys each.
    async fn look_at_due_index(&self, coord: &Coordinator) -> Result<Option<DueLook>, ClientError> {
        let store = coord.store();
        if !store.capabilities().due_index {
            return Ok(None);
        }
        // Job time, as the writers computed the due times: the store's clock, else wall time.
        // A reading may lag the clock a writer read (by its `behind_ms`, or by the skew of two
        // machines' wall clocks): a key due within that slack counts as due now, or a job
        // submitted a millisecond "after" this reading would wait for the next look.
        let (now_ms, slack_ms) = match store.clock().await? {
            baton_store::StoreClock::Time {
                now_ms, behind_ms, ..
            } => (
                now_ms,
                behind_ms.saturating_add(store.capabilities().clock_uncertain_ms),
            ),
            baton_store::StoreClock::None => (crate::time::wall_ms(), WALL_SKEW_SLACK_MS),
        };
        let patterns: Vec<&str> = if self.0.is_empty() {
            vec![""]
        } else {
            self.0.iter().map(String::as_str).collect()
        };
        let due_by = now_ms.saturating_add(slack_ms);
        // The documents of the first keys due come along: a claim starts from them, as from
        // a cache, and needs no read of its own.
        let docs = baton_store::WithDocs {
            first: DUE_DOCS,
            due_by_ms: due_by,
        };
        let mut due: Vec<baton_store::DueKey> = Vec::new();
        for pattern in patterns {
            let found = store
                .due_keys(pattern, DUE_SCAN, docs)
                .await?
                .unwrap_or_default();
            due.extend(
                found
                    .into_iter()
                    .filter(|d| pattern.is_empty() || pattern.ends_with('/') || d.key == pattern),
            );
        }
        due.sort_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        due.dedup_by(|a, b| a.key == b.key);
        let next_in = due
            .first()
            .map(|d| Duration::from_millis(d.due_ms.saturating_sub(due_by)));
        let keys = due.into_iter().take_while(|d| d.due_ms <= due_by).collect();
        Ok(Some(DueLook { keys, next_in }))
    }

    /// Every key that exists and is served, sorted.
    async fn keys(&self, coord: &Coordinator) -> Result<Vec<String>, ClientError> {
        let mut keys = Vec::new();
        if self.0.is_empty() {
            keys = coord.keys("").await?;
        }
        for pattern in &self.0 {
            if pattern.ends_with('/') {
                keys.extend(coord.keys(pattern).await?);
            } else {
                keys.push(pattern.clone());
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// A key whose head is a job a worker may claim now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyKey {
    /// The key.
    pub key: String,
    /// Since when its head job could have run (this machine's wall clock, at worst the clocks
    /// of the processes that wrote the key): submitted, ready, and its key free. The key whose
    /// head has waited longest is served first, so keys take turns.
    pub ready_since_wall_ms: u64,
}

/// How many keys a look at the due index reads per prefix: the earliest due. More due keys
/// than this wait for a later look (they are served earliest first, so none waits forever).
pub const DUE_SCAN: usize = 256;

/// How far apart the wall clocks of two machines may be for a job's due time (on a store
/// without a clock) to count as now: a later look finds it anyway; this only spares a wait.
const WALL_SKEW_SLACK_MS: u64 = 1_000;

/// How many documents of the first keys due a look at the due index reads with it, where the
/// store can ([`baton_store::WithDocs`]): enough for a worker that loses the first few keys to
/// other workers' claims to claim a later one without a read of its own.
const DUE_DOCS: usize = 8;

/// A look at the due index.
struct DueLook {
    /// The served keys due now, earliest first: the key waiting longest for a worker first;
    /// the first few with their documents where the store read them along.
    keys: Vec<baton_store::DueKey>,
    /// When the earliest served key is due, from now (zero: due now).
    next_in: Option<Duration>,
}

/// The served keys whose head job may be claimed now, longest waiting first.
pub async fn ready_keys(
    coord: &Coordinator,
    patterns: &KeyPatterns,
) -> Result<Vec<ReadyKey>, ClientError> {
    let keys = match patterns.look_at_due_index(coord).await? {
        Some(look) => look.keys.into_iter().map(|d| d.key).collect(),
        None => patterns.keys(coord).await?,
    };
    let mut ready = Vec::new();
    for key in keys {
        let snapshot = coord.read(&key).await?;
        let Some((doc, expired)) = as_expired_now(coord, &key, &snapshot) else {
            continue;
        };
        let now_ms = match snapshot.clock {
            baton_store::StoreClock::Time { now_ms, .. } => now_ms,
            baton_store::StoreClock::None => snapshot.wall_ms,
        };
        let head = match baton_core::job::claimable_head(&doc, now_ms, snapshot.wall_ms) {
            Ok(head) => head,
            // Nothing to claim, but a run ran out of lease: a claim's write ends it (and
            // starts its backoff), or it would hold its key until someone wrote.
            Err(_) if expired => {
                ready.push(ReadyKey {
                    key,
                    ready_since_wall_ms: 0,
                });
                continue;
            }
            Err(_) => continue,
        };
        // Job time to this machine's wall clock: the same instant, `now - ready_at` ago.
        let ready_wall_ms = head
            .job
            .as_deref()
            .and_then(|j| j.ready_at_ms)
            .map_or(0, |at| {
                snapshot.wall_ms.saturating_sub(now_ms.saturating_sub(at))
            });
        // Since when the head could run: submitted, past its time, and the key free for it
        // (its last run's end). Not since its submit alone: a key with a long backlog would
        // then always have the longest-waiting head and starve every other key.
        let since = head
            .enqueued_wall_ms
            .max(ready_wall_ms)
            .max(doc.summary.last_finished_wall_ms);
        ready.push(ReadyKey {
            key,
            ready_since_wall_ms: since,
        });
    }
    ready.sort_by(|a, b| (a.ready_since_wall_ms, &a.key).cmp(&(b.ready_since_wall_ms, &b.key)));
    Ok(ready)
}

/// `key`'s document as it will be once what has ended by now is expired, and whether anything
/// has: a run whose worker died holds its key until someone writes, and a claim is that write
/// (its own expiry step ends the run first).
fn as_expired_now(coord: &Coordinator, key: &str, snapshot: &KeySnapshot) -> Option<(Doc, bool)> {
    let doc = snapshot.doc.as_ref()?;
    let observer = coord.observer(key);
    let uncertain_ms = coord.store().capabilities().clock_uncertain_ms;
    let clock = crate::time::core_clock(
        &snapshot.clock,
        uncertain_ms,
        &observer,
        coord.mono_ms(),
        snapshot.wall_ms,
    );
    let tick = Request::new(String::new(), Op::Tick);
    // The freeze the document last recorded stands (a writer's copy of the settings decides).
    let inputs = baton_core::Inputs {
        paused: doc.paused.as_ref(),
        ..Default::default()
    };
    match baton_core::apply_with(Some(doc), &tick, &clock, inputs) {
        Ok(applied) => Some((applied.doc, applied.changed)),
        Err(_) => Some((doc.clone(), false)),
    }
}

/// What a worker's look for work found.
#[derive(Debug)]
pub enum Look {
    /// A job, claimed.
    Claimed(Box<Job>),
    /// Nothing to claim now.
    Idle {
        /// How long until a served key next needs a worker, by the due index (zero: one does
        /// now, though it could not be claimed yet; `None`: no served key has work, or the
        /// store keeps no index). An idle worker waits no longer than this, so a backoff or a
        /// `--not-before` that ends is noticed then, push or no push.
        next_due_in: Option<Duration>,
    },
}

/// Claims the head job of the served key that has waited longest, trying the next key when
/// another worker was first; `None` when no served key has a job to claim now.
pub async fn claim_next(
    coord: &Arc<Coordinator>,
    patterns: &KeyPatterns,
    options: &ClaimOptions,
) -> Result<Option<Job>, ClientError> {
    Ok(match look_for_job(coord, patterns, options).await? {
        Look::Claimed(job) => Some(*job),
        Look::Idle { .. } => None,
    })
}

/// [`claim_next`], saying also when to look again if there is nothing to claim: one read of
/// the due index serves both.
pub async fn look_for_job(
    coord: &Arc<Coordinator>,
    patterns: &KeyPatterns,
    options: &ClaimOptions,
) -> Result<Look, ClientError> {
    // With a due index, its order is the order of service (a key's due time is since when
    // its head job could run): try the keys in it, each read only by its own claim. Without
    // one, read every served key to find the ready ones and their order.
    let (keys, next_due_in): (
        Vec<(String, Option<baton_store::Versioned>)>,
        Option<Duration>,
    ) = match patterns.look_at_due_index(coord).await? {
        Some(look) => (
            look.keys.into_iter().map(|d| (d.key, d.doc)).collect(),
            look.next_in,
        ),
        None => {
            let ready = ready_keys(coord, patterns).await?;
            (ready.into_iter().map(|r| (r.key, None)).collect(), None)
        }
    };
    let mut keys = keys;
    for i in 0..keys.len() {
        let (key, doc) = std::mem::take(&mut keys[i]);
        let read_version = doc.as_ref().map(|d| d.version.clone());
        if let Some(doc) = doc {
            coord.take_read(&key, doc)?;
        }
        if let Some(job) = claim(coord, &key, options).await? {
            return Ok(Look::Claimed(Box::new(job)));
        }
        // Lost to another writer, not merely not ready yet (a key due within the reading's
        // slack): the key changed since the index showed it.
        let lost = read_version.is_some_and(|read| coord.cached_version(&key) != Some(read));
        if lost {
            spread_after_a_loss(&mut keys[i + 1..]);
        }
    }
    Ok(Look::Idle { next_due_in })
}

/// How many of the next keys a worker tries in a random order after losing a key to another
/// worker.
const LOSER_SPREAD: usize = 4;

/// After a claim found nothing on a key the due index had just shown due (another worker took
/// it a moment earlier): the workers that read the same index are going down the same list,
/// and in the same order they would collide again key after key, each collision a wasted
/// write. The next few keys, all due now, are tried in a random order instead; service stays
/// in due order to within those few keys.
fn spread_after_a_loss<T>(rest: &mut [T]) {
    let n = rest.len().min(LOSER_SPREAD);
    for i in (1..n).rev() {
        rest.swap(i, rand::random_range(0..=i));
    }
}

/// Wakes an idle worker when a served key may have new work: a push from the store for each
/// pattern (a prefix, an exact key, or every key) where the store pushes, else nothing — then
/// [`WorkWaker::wait`] is the poll interval alone. A wake-up is a hint to look again
/// ([`claim_next`]), never a claim.
pub struct WorkWaker {
    handles: Vec<baton_store::WatchHandle>,
}

impl WorkWaker {
    /// Subscribes to the store's push for the served keys, where it has one.
    pub async fn new(
        coord: &Coordinator,
        patterns: &KeyPatterns,
    ) -> Result<WorkWaker, ClientError> {
        let store = coord.store();
        let mut handles = Vec::new();
        let prefixes: Vec<&str> = if patterns.0.is_empty() {
            vec![""]
        } else {
            patterns.0.iter().map(String::as_str).collect()
        };
        for pattern in prefixes {
            // An exact key is a prefix too: a wake-up for a longer key is only spurious.
            if let Some(handle) = store.watch_prefix(pattern).await? {
                handles.push(handle);
            }
        }
        Ok(WorkWaker { handles })
    }

    /// Whether a push will wake [`WorkWaker::wait`] (else it waits the poll interval).
    pub fn pushes(&self) -> bool {
        !self.handles.is_empty()
    }

    /// Resolves at the next push that may mean new work, or after `poll`, whichever is first.
    pub async fn wait(&mut self, poll: Duration) {
        if self.handles.is_empty() {
            tokio::time::sleep(poll).await;
            return;
        }
        let changes = self.handles.iter_mut().map(|h| Box::pin(h.changed()));
        let any_change = first_of(changes);
        // A closed store is noticed by the next look; until then, the poll.
        let _ = tokio::time::timeout(poll, any_change).await;
    }
}

/// The first of several futures to finish (without another dependency for `select_all`).
async fn first_of<F: std::future::Future + Unpin>(futures: impl Iterator<Item = F>) {
    let mut futures: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for future in &mut futures {
            if std::pin::Pin::new(future).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// How a job ended, as [`wait`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    /// Its final outcome: `succeeded`, `dead`, `cancelled` or `superseded`.
    pub outcome: Outcome,
    /// By an operator's forced cancel.
    pub forced: bool,
    /// Why, when the history says (a dead job's last error, say).
    pub reason: Option<String>,
    /// Its last run (0: it never ran), when the history says.
    pub run: u32,
}

/// Where a job stands, for [`wait`]'s progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStanding {
    /// Live: queued (with its place) or running.
    Live {
        /// Queued or held.
        state: TicketState,
        /// Queued tickets and jobs ahead of it.
        position: usize,
        /// The attempt.
        attempt: u32,
    },
    /// Ended.
    Ended(JobEnd),
    /// Neither live nor found in the key's history.
    Unknown,
}

/// Where job `id` of `key` stands now: live in the document, or ended (its mark, else its
/// final history entry).
pub async fn standing(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<JobStanding, ClientError> {
    standing_with(coord, key, id, &mut None).await
}

/// [`standing`], remembering in `found` where the job waits in the key's backlog, so that a
/// caller that asks again ([`wait`]) reads no segment twice.
async fn standing_with(
    coord: &Coordinator,
    key: &str,
    id: &str,
    found: &mut Option<InBacklog>,
) -> Result<JobStanding, ClientError> {
    let snapshot = coord.read(key).await?;
    if let Some(doc) = &snapshot.doc {
        if found.is_none() && doc.backlog.as_ref().is_some_and(|b| b.has_segments()) {
            let submitted = coord.store().get_record(key, &job_record(id)).await?;
            if submitted.is_some() && live_or_marked(doc, id).is_none() {
                *found = find_in_backlog(coord, key, doc, id).await?;
            }
        }
        if let Some(standing) = found.as_ref().and_then(|f| f.standing(doc)) {
            return Ok(standing);
        }
    }
    match snapshot
        .doc
        .as_ref()
        .and_then(|doc| live_or_marked(doc, id))
    {
        // The mark says how it ended; its history entry says why, and which run was last.
        Some(JobStanding::Ended(end)) => {
            let entry = final_entry(coord, key, id).await?;
            return Ok(JobStanding::Ended(entry.unwrap_or(end)));
        }
        Some(live) => return Ok(live),
        None => {}
    }
    Ok(match final_entry(coord, key, id).await? {
        Some(end) => JobStanding::Ended(end),
        None => JobStanding::Unknown,
    })
}

fn live_or_marked(doc: &Doc, id: &str) -> Option<JobStanding> {
    if let Some(status) = baton_core::apply::status_of(doc, id) {
        return Some(JobStanding::Live {
            state: status.state,
            position: status.position,
            attempt: status.job.map_or(1, |j| j.attempt()),
        });
    }
    if let Some(backlog) = &doc.backlog {
        // Ended in the backlog by a cancel or a cut: its history entry comes when it is
        // taken in.
        let fate = match backlog.tail_job(id) {
            Some(ticket) => backlog.fate(ticket),
            None => backlog
                .dropped
                .iter()
                .find(|d| d.id == id)
                .map(|d| (Outcome::Cancelled, d.reason())),
        };
        if let Some((outcome, reason)) = fate {
            return Some(ended_in_backlog(outcome, reason));
        }
    }
    let mark = doc.finished.iter().rev().find(|m| m.id == id)?;
    Some(JobStanding::Ended(JobEnd {
        outcome: mark.outcome,
        forced: mark.forced,
        reason: None,
        run: 0,
    }))
}

fn ended_in_backlog(outcome: Outcome, reason: String) -> JobStanding {
    JobStanding::Ended(JobEnd {
        outcome,
        forced: false,
        reason: Some(reason),
        run: 0,
    })
}

/// Where a job waits in a written segment of its key's backlog ([`baton_core::backlog`]).
#[derive(Clone, Debug)]
pub struct InBacklog {
    /// The backlog's generation.
    pub generation: u64,
    /// The segment's number.
    pub number: u64,
    /// Its place in the segment.
    pub index: usize,
    /// The job, as submitted.
    pub ticket: Ticket,
}

impl InBacklog {
    /// Where it stands in `doc`, if it still waits in that segment (`None`: taken in since).
    fn standing(&self, doc: &Doc) -> Option<JobStanding> {
        let backlog = doc.backlog.as_ref().filter(|b| {
            b.generation == self.generation && (b.first..b.next).contains(&self.number)
        })?;
        if let Some((outcome, reason)) = backlog.fate(&self.ticket) {
            return Some(ended_in_backlog(outcome, reason));
        }
        // Every written segment is a full tail.
        let segments_ahead = usize::try_from(self.number - backlog.first).unwrap_or(usize::MAX);
        let ahead = segments_ahead
            .saturating_mul(SEGMENT_JOBS)
            .saturating_add(self.index);
        Some(JobStanding::Live {
            state: TicketState::Queued,
            position: doc.backlog_position(ahead),
            attempt: self.ticket.job.as_deref().map_or(1, JobState::attempt),
        })
    }
}

/// Finds job `id` in the written segments of `doc`'s backlog, oldest first: one read per
/// segment, so only for a job known to have been submitted and not found in the document.
pub async fn find_in_backlog(
    coord: &Coordinator,
    key: &str,
    doc: &Doc,
    id: &str,
) -> Result<Option<InBacklog>, ClientError> {
    let Some(backlog) = &doc.backlog else {
        return Ok(None);
    };
    for number in backlog.first..backlog.next {
        let Some(segment) = read_segment(coord, key, backlog.generation, number).await? else {
            continue;
        };
        if let Some(index) = segment.tickets.iter().position(|t| t.id == id) {
            return Ok(Some(InBacklog {
                generation: backlog.generation,
                number,
                index,
                ticket: segment.tickets[index].clone(),
            }));
        }
    }
    Ok(None)
}

/// Cancels job `id` of `key` if it waits in a written segment of the backlog (where a plain
/// cancel cannot see it); `None` if it is not there.
pub async fn cancel_in_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
    by: &str,
) -> Result<Option<Executed>, ClientError> {
    let snapshot = coord.read(key).await?;
    let Some(doc) = &snapshot.doc else {
        return Ok(None);
    };
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Ok(None);
    };
    let op = Op::CancelInBacklog {
        id: id.to_owned(),
        generation: found.generation,
        segment: found.number,
        by: by.to_owned(),
    };
    let mut request = Request::new(ids::new_attempt_id(), op);
    coord.execute(key, &mut request).await.map(Some)
}

/// Segment `number` of backlog `generation` of `key`, if it is there and reads.
async fn read_segment(
    coord: &Coordinator,
    key: &str,
    generation: u64,
    number: u64,
) -> Result<Option<Segment>, ClientError> {
    let name = segment_record(generation, number);
    let bytes = coord.store().get_record(key, &name).await?;
    Ok(bytes.and_then(|b| Segment::decode(&b, generation, number).ok()))
}

/// How job `id` ended, by the history entry that ended it ([`final_finished`]).
async fn final_entry(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<JobEnd>, ClientError> {
    Ok(final_finished(coord, key, id)
        .await?
        .map(|finished| JobEnd {
            outcome: finished.outcome,
            forced: finished.forced,
            reason: finished.reason,
            run: finished.job.map_or(0, |j| j.run),
        }))
}

/// What the history entry that ended job `id` says of its last run (its number, and the hash
/// that bound its record), if there is one.
async fn final_run(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<baton_core::history::JobRun>, ClientError> {
    Ok(final_finished(coord, key, id).await?.and_then(|f| f.job))
}

/// The history entry that ended job `id`, newest first, looking back through the whole log
/// (in pages) only as far as needed.
async fn final_finished(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<baton_core::Finished>, ClientError> {
    let mut limit = 256;
    loop {
        let entries = coord.store().history_tail(key, limit).await?;
        for entry in &entries {
            let Ok(finished) = baton_core::Finished::decode(&entry.bytes) else {
                continue;
            };
            let requeued = finished.job.as_ref().is_some_and(|j| j.requeued);
            if finished.id == id && !requeued {
                return Ok(Some(finished));
            }
        }
        if entries.len() < limit || limit >= 1 << 20 {
            return Ok(None);
        }
        limit *= 4;
    }
}

/// Waits until job `id` of `key` has ended, and returns how. `on_progress` is told where it
/// stands at each change. Woken by the store where it pushes, else it reads every `poll`.
pub async fn wait(
    coord: &Coordinator,
    key: &str,
    id: &str,
    poll: Duration,
    on_progress: &(dyn Fn(&JobStanding) + Send + Sync),
) -> Result<JobEnd, ClientError> {
    let mut watch = coord.store().watch(key).await?;
    let mut last: Option<JobStanding> = None;
    let mut found = None;
    let started = Instant::now();
    loop {
        let standing = standing_with(coord, key, id, &mut found).await?;
        match &standing {
            JobStanding::Ended(end) => return Ok(end.clone()),
            JobStanding::Unknown if started.elapsed() > Duration::from_secs(5) => {
                return Err(ClientError::Refused {
                    key: key.to_owned(),
                    refusal: baton_core::Refusal::UnknownId { id: id.to_owned() },
                });
            }
            _ => {}
        }
        if last.as_ref() != Some(&standing) {
            on_progress(&standing);
            last = Some(standing);
        }
        match watch.as_mut() {
            Some(handle) => {
                let _ =
                    tokio::time::timeout(poll.max(Duration::from_secs(5)), handle.changed()).await;
            }
            None => tokio::time::sleep(poll).await,
        }
    }
}

/// Where a worker says it serves keys: the record `worker/seen` of the key named by each of its
/// patterns (a prefix such as `deploy/` is a key name too), or of [`EVERY_KEY`] when it serves
/// every key. Written when it starts and every [`SEEN_EVERY`], so `baton why` can tell a key no
/// worker has looked at.
pub const SEEN_RECORD: &str = "worker/seen";
/// The key under whose records a worker serving every key says so.
pub const EVERY_KEY: &str = "*";
/// How often a worker renews its [`SEEN_RECORD`]s.
pub const SEEN_EVERY: Duration = Duration::from_secs(30);

/// What a worker's [`SEEN_RECORD`] says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSeen {
    /// Who the worker is (its context: user@host pid N, or the CI's names).
    pub worker: String,
    /// When it wrote this (its wall clock).
    pub seen_wall_ms: u64,
}

/// Says that a worker serving `patterns` is alive (see [`SEEN_RECORD`]).
pub async fn worker_seen(
    coord: &Coordinator,
    patterns: &KeyPatterns,
    worker: &str,
) -> Result<(), ClientError> {
    let seen = WorkerSeen {
        worker: worker.to_owned(),
        seen_wall_ms: crate::time::wall_ms(),
    };
    let bytes = serde_json::to_vec(&seen).unwrap_or_default();
    let keys: Vec<&str> = if patterns.0.is_empty() {
        vec![EVERY_KEY]
    } else {
        patterns.0.iter().map(String::as_str).collect()
    };
    for key in keys {
        coord.put_record(key, SEEN_RECORD, &bytes).await?;
    }
    Ok(())
}

/// The latest worker that said it serves `key`: by the exact key, any prefix of it ending in
/// `/`, or every key.
pub async fn last_worker_seen(
    coord: &Coordinator,
    key: &str,
) -> Result<Option<WorkerSeen>, ClientError> {
    let mut names: Vec<&str> = vec![key, EVERY_KEY];
    names.extend(
        key.char_indices()
            .filter(|&(_, c)| c == '/')
            .map(|(i, _)| &key[..=i]),
    );
    let mut latest: Option<WorkerSeen> = None;
    for name in names {
        let Some(bytes) = coord.store().get_record(name, SEEN_RECORD).await? else {
            continue;
        };
        let Ok(seen) = serde_json::from_slice::<WorkerSeen>(&bytes) else {
            continue;
        };
        if latest
            .as_ref()
            .is_none_or(|l| l.seen_wall_ms < seen.seen_wall_ms)
        {
            latest = Some(seen);
        }
    }
    Ok(latest)
}

/// One job, as `baton jobs` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    /// The key.
    pub key: String,
    /// The job's id.
    pub id: String,
    /// `queued`, `running`, or how it ended: `succeeded`, `dead`, `cancelled`, `superseded`.
    pub state: String,
    /// The attempt running or next, or the last one.
    pub attempt: u32,
    /// Its place among the key's queued tickets and jobs (queued jobs only).
    pub position: Option<usize>,
    /// When a queued job is ready (this machine's wall clock), if it waits for a time.
    pub ready_at_wall_ms: Option<u64>,
    /// The error of its last failed attempt.
    pub last_error: Option<String>,
    /// Who submitted it, and why.
    pub context: String,
    /// When it was submitted (the submitter's wall clock).
    pub submitted_wall_ms: u64,
    /// When it ended, for an ended job.
    pub ended_wall_ms: Option<u64>,
    /// The fence of its current run, for a running job.
    pub fence: Option<u64>,
}

/// The jobs of every key starting with `prefix`: the live ones (queued, running; of a key's
/// backlog, as many as make `live_limit` rows for the key), and when `ended` is more than 0,
/// up to that many of each key's most recently ended ones. Also returns how many backlog jobs
/// were left unread.
pub async fn list(
    coord: &Coordinator,
    prefix: &str,
    ended: usize,
    live_limit: usize,
) -> Result<(Vec<JobRow>, u64), ClientError> {
    let mut rows = Vec::new();
    let mut unread = 0u64;
    for key in coord.keys(prefix).await? {
        let snapshot = coord.read(&key).await?;
        let mut listed = std::collections::HashSet::new();
        if let Some(doc) = &snapshot.doc {
            let (live, left) = live_rows(coord, &key, &snapshot, doc, live_limit).await?;
            listed.extend(live.iter().map(|row| row.id.clone()));
            rows.extend(live);
            unread += left;
        }
        if ended > 0 {
            // A job retried after it died has ended before: it is listed once, as it stands
            // now (queued or running again, or its newest end).
            rows.extend(ended_jobs(coord, &key, ended, &mut listed).await?);
        }
    }
    Ok((rows, unread))
}

/// The live jobs of `key` in queue order: the window's, then the backlog's (its segments read
/// while fewer than `limit` rows are made), then the window's that wait behind the backlog.
/// Also returns how many backlog jobs were left unread.
async fn live_rows(
    coord: &Coordinator,
    key: &str,
    snapshot: &KeySnapshot,
    doc: &Doc,
    limit: usize,
) -> Result<(Vec<JobRow>, u64), ClientError> {
    let row = |ticket: &Ticket, position: Option<usize>| live_row(key, snapshot, ticket, position);
    let (mut rows, mut behind) = (Vec::new(), Vec::new());
    for ticket in doc.in_queue_order().into_iter().filter(|t| t.job.is_some()) {
        let running = ticket.state == TicketState::Held;
        let status = baton_core::apply::status_of(doc, &ticket.id);
        let position = status.filter(|_| !running).map(|s| s.position);
        if doc.behind_backlog(ticket) {
            behind.push(row(ticket, position));
        } else {
            rows.push(row(ticket, position));
        }
    }
    let mut unread = 0;
    if let Some(backlog) = &doc.backlog {
        let mut ahead = 0usize;
        for number in backlog.first..backlog.next {
            if rows.len() >= limit {
                break;
            }
            let segment = read_segment(coord, key, backlog.generation, number).await?;
            for ticket in segment.map(|s| s.tickets).unwrap_or_default() {
                if backlog.fate(&ticket).is_none() {
                    rows.push(row(&ticket, Some(doc.backlog_position(ahead))));
                }
                ahead += 1;
            }
        }
        unread = backlog.in_segments.saturating_sub(ahead as u64);
        for ticket in &backlog.tail {
            if backlog.fate(ticket).is_none() {
                rows.push(row(ticket, doc.tail_position(&ticket.id)));
            }
        }
    }
    rows.extend(behind);
    Ok((rows, unread))
}

/// The row of a live job of `key`: running, or queued at `position`.
fn live_row(key: &str, snapshot: &KeySnapshot, ticket: &Ticket, position: Option<usize>) -> JobRow {
    let job_now_ms = match snapshot.clock {
        baton_store::StoreClock::Time { now_ms, .. } => now_ms,
        baton_store::StoreClock::None => snapshot.wall_ms,
    };
    let running = ticket.state == TicketState::Held;
    let job = ticket.job.as_deref();
    JobRow {
        key: key.to_owned(),
        id: ticket.id.clone(),
        state: if running { "running" } else { "queued" }.into(),
        attempt: job.map_or(1, JobState::attempt),
        position,
        ready_at_wall_ms: job
            .and_then(|j| j.ready_at_ms)
            .filter(|&at| at > job_now_ms)
            .map(|at| snapshot.wall_ms.saturating_add(at - job_now_ms)),
        last_error: job.and_then(|j| j.last_error.clone()),
        context: ticket.context.clone(),
        submitted_wall_ms: ticket.enqueued_wall_ms,
        ended_wall_ms: None,
        fence: running.then_some(ticket.fence),
    }
}

/// Up to `limit` of `key`'s most recently ended jobs, newest first, from its history: each job
/// once (its newest end), and none already in `listed` (a job retried after it died).
async fn ended_jobs(
    coord: &Coordinator,
    key: &str,
    limit: usize,
    listed: &mut std::collections::HashSet<String>,
) -> Result<Vec<JobRow>, ClientError> {
    let mut rows = Vec::new();
    // Runs queued again have entries too: read more than `limit` entries.
    let entries = coord
        .store()
        .history_tail(key, limit.saturating_mul(4))
        .await?;
    for entry in entries {
        let Ok(finished) = baton_core::Finished::decode(&entry.bytes) else {
            continue;
        };
        let Some(run) = finished.job.as_ref().filter(|run| !run.requeued) else {
            continue;
        };
        if !listed.insert(finished.id.clone()) {
            continue;
        }
        rows.push(JobRow {
            key: key.to_owned(),
            id: finished.id.clone(),
            state: finished.outcome.to_string(),
            attempt: run.attempt,
            position: None,
            ready_at_wall_ms: None,
            last_error: finished.reason.clone(),
            context: finished.context.clone(),
            submitted_wall_ms: finished.enqueued_wall_ms,
            ended_wall_ms: Some(finished.finished_wall_ms),
            fence: None,
        });
        if rows.len() >= limit {
            break;
        }
    }
    Ok(rows)
}

/// Job `id`'s submission: its parameters exactly as submitted, if its record is there.
pub async fn params(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<Vec<u8>>, ClientError> {
    Ok(read_job_record(coord, key, id)
        .await?
        .map(|(_, params)| params))
}

/// The reports of job `id`'s runs `1..=runs` that its workers wrote, in order.
pub async fn reports(
    coord: &Coordinator,
    key: &str,
    id: &str,
    runs: u32,
) -> Result<Vec<RunReport>, ClientError> {
    let mut reports = Vec::new();
    for run in 1..=runs {
        if let Some(bytes) = coord.store().get_record(key, &run_record(id, run)).await? {
            if let Ok(report) = serde_json::from_slice(&bytes) {
                reports.push(report);
            }
        }
    }
    Ok(reports)
}

/// How many runs job `id` has had: its live state's count, or its final history entry's.
pub async fn runs(coord: &Coordinator, key: &str, id: &str) -> Result<u32, ClientError> {
    let snapshot = coord.read(key).await?;
    let live = snapshot
        .doc
        .as_ref()
        .and_then(|doc| doc.by_id(id))
        .and_then(|t| t.job.as_deref())
        .map(|job| job.runs);
    match live {
        Some(runs) => Ok(runs),
        None => Ok(final_entry(coord, key, id).await?.map_or(0, |end| end.run)),
    }
}

/// The report of job `id`'s last run, if it ran and its worker wrote one.
pub async fn last_report(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<RunReport>, ClientError> {
    let run = match standing(coord, key, id).await? {
        JobStanding::Ended(end) => end.run,
        _ => return Ok(None),
    };
    if run == 0 {
        return Ok(None);
    }
    let bytes = coord.store().get_record(key, &run_record(id, run)).await?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

fn params_replaced(key: &str, id: &str, detail: String) -> ClientError {
    ClientError::ParamsReplaced {
        key: key.to_owned(),
        id: id.to_owned(),
        detail,
    }
}

fn invalid(key: &str, message: String) -> ClientError {
    ClientError::Refused {
        key: key.to_owned(),
        refusal: baton_core::Refusal::Invalid(baton_core::limits::InvalidInput(message)),
    }
}

fn unexpected(key: &str, reply: &Reply) -> ClientError {
    ClientError::Unexpected {
        key: key.to_owned(),
        detail: format!("{reply:?}"),
    }
}
