//! A worker's claim of a job, the lease and heartbeat that come with it, its report and its
//! completion (retried while the lease stands).

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::job::JobResult;
use baton_core::op::TicketView;
use baton_core::{Op, Outcome, Refusal, Reply, Request, TicketState};
use serde::{Deserialize, Serialize};

use super::errors::{params_replaced, unexpected};
use super::records::{bound_params, read_record_bytes, run_record};
use crate::coordinator::{Coordinator, Executed};
use crate::error::ClientError;
use crate::heartbeat::Heartbeat;
use crate::hold::{end_retrying, renew};
use crate::retry::Doubling;
use crate::turn::{ids, Lease};
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

    /// Tells the store this run's command succeeded, before its report is kept and its end
    /// recorded: from then on a lease that runs out ends the job succeeded
    /// ([`baton_core::job::JobState::succeeded_run`]) instead of running it again. Sent again
    /// after a store error while the lease stands. `false`: the run no longer holds the job
    /// (its lease ran out first, or an operator ended it), so its success is not recorded and
    /// the job may run again; its report must not say it succeeded.
    pub async fn succeeded(&self) -> Result<bool, ClientError> {
        let op = Op::RunSucceeded {
            token: self.lease.token.clone(),
        };
        let mut request = Request::new(ids::new_attempt_id(), op);
        let stands = |pause: Duration| {
            let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
            let until_ms = self
                .heartbeat
                .holds_until_ms()
                .unwrap_or(self.lease.holds_until_ms);
            self.coord.local_ms().saturating_add(pause_ms) < until_ms
        };
        let (executed, _) = end_retrying(&self.coord, self.key(), &mut request, stands).await;
        match executed {
            Ok(_) => Ok(true),
            // A try that landed unseen, then the lease ran out: the job ended succeeded by it.
            Err(ClientError::Refused {
                refusal:
                    Refusal::Ended {
                        outcome: Outcome::Succeeded,
                        ..
                    },
                ..
            }) => Ok(true),
            Err(ClientError::Refused {
                refusal: Refusal::Ended { .. } | Refusal::RunEnded { .. } | Refusal::UnknownToken,
                ..
            }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Writes this run's report (before [`Job::complete`], so the record is there when the
    /// job's end is seen). A store error is retried while the lease stands (the write replaces
    /// the whole record, so a retry of one that landed changes nothing). A report may say the
    /// command succeeded only once [`Job::succeeded`] was heard: the record is written beside
    /// the document, unfenced, and may land after the lease ran out.
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
    /// ([`RunReport::awaiting_complete`]). A first run reads nothing. A worker that tells the
    /// store first ([`Job::succeeded`]) never leaves such a job to be claimed (its lapse ends
    /// it succeeded): this is for the reports of workers that did not.
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
/// [`baton_core::JobState::params_sha256`]) is never handed out: its run is ended as a failed attempt
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
