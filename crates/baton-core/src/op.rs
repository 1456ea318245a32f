//! Operations on a key's document, their replies and their refusals.

use serde::{Deserialize, Serialize};

use crate::doc::{Mode, Outcome, TicketState};
use crate::job::{JobResult, JobSpec, JobState, RunEnd};
use crate::limits::InvalidInput;
use crate::once::OnceSpec;

/// An operation together with the id of this attempt at it.
///
/// The attempt id is made before the first try and reused by every retry of the same
/// operation, so a retry after an ambiguous failure is recognised instead of repeated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Unique per logical operation.
    pub attempt: String,
    /// What to do.
    pub op: Op,
    /// Set on a retry after an ambiguous failure: the document's [`crate::Doc::finishes`] as
    /// the uncertain attempt read it. If more tickets finished since than the document
    /// remembers, a ticket this request names and cannot find may have ended and been
    /// forgotten in between, and the request is refused with [`Refusal::Uncertain`] rather
    /// than repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finishes_seen: Option<u64>,
    /// Set on the enqueue a client writes itself after its arrival's append went unanswered:
    /// the append may still land, late, so a turn this queues is remembered
    /// ([`crate::arrival::Unsettled`]) and that copy queues nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub may_arrive_late: bool,
}

impl Request {
    /// A first attempt at `op`, named `attempt` (made by the caller before the first try: the
    /// core makes no random ids). Retries reuse the same request.
    pub fn new(attempt: impl Into<String>, op: Op) -> Request {
        Request {
            attempt: attempt.into(),
            op,
            finishes_seen: None,
            may_arrive_late: false,
        }
    }
}

/// What to do to a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Join the queue.
    Enqueue(Enqueue),
    /// A waiter's heartbeat: extends its waiter lease while queued, claims (and renews) once
    /// granted.
    Refresh {
        /// The ticket's secret token.
        token: String,
    },
    /// A holder's heartbeat (the first one claims a grant). Refused while still queued.
    Renew {
        /// The ticket's secret token.
        token: String,
        /// A new lease duration, kept for later renewals; `None` keeps the ticket's.
        ttl_ms: Option<u64>,
    },
    /// The owner ends its ticket: `succeeded`, `failed` or `cancelled` when held; `cancelled`
    /// or `timed_out` when still queued.
    Release {
        /// The ticket's secret token.
        token: String,
        /// How it ended.
        outcome: Outcome,
        /// Why, in words, for the history (`held longer than --max-hold 10m`, say).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An operator cancels a queued ticket, or force-releases a held one (recorded as forced).
    Cancel {
        /// The ticket's public id.
        id: String,
        /// Who cancels (their context), for the history and notifications; empty: unknown.
        by: String,
        /// Why, in words, for the history (`its CI run ended (cancelled)`); `None`: the
        /// history says who cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An operator cancels a job of the key's backlog, which the caller found in written
    /// segment `segment` of backlog `generation` ([`crate::backlog`]); it ends when taken in.
    CancelInBacklog {
        /// The job's id.
        id: String,
        /// The backlog's generation.
        generation: u64,
        /// The segment's number.
        segment: u64,
        /// Who cancels (their context); empty: unknown.
        by: String,
        /// Set by a waiter withdrawing its own turn from the backlog: how it ends (`timed_out`
        /// or `cancelled`). A segment holds the token's hash, which the document cannot check,
        /// so a waiter names its turn as an operator would.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        withdrawn: Option<Outcome>,
    },
    /// An operator cancels every queued ticket of the key.
    CancelQueued {
        /// Who cancels (their context); empty: unknown.
        by: String,
    },
    /// Queue a job: a ticket with no waiting process, for a worker to claim.
    Submit(Submit),
    /// A worker takes the head of the queue if it is a job that is ready and fits beside the
    /// holders, holding it under `token` (made by the worker) for `ttl_ms`. Answers
    /// [`Reply::NoJob`] when there is none. A retry finds the job its token holds.
    Claim {
        /// The run's secret token, made by the worker before its first attempt.
        token: String,
        /// The lease of the run.
        ttl_ms: u64,
    },
    /// A worker says the command of the run it holds succeeded, before it keeps the run's
    /// report and completes it: a run whose lease runs out after this ends the job succeeded
    /// ([`crate::job::JobState::succeeded_run`]). Refused when the token no longer holds.
    RunSucceeded {
        /// The run's token.
        token: String,
    },
    /// A worker (or `baton complete`) ends a run it holds.
    Complete {
        /// The run's token.
        token: String,
        /// The job the caller means (`baton complete KEY JOB_ID`): a token of another job is
        /// refused as unknown, nothing changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// How it ended.
        result: JobResult,
    },
    /// `baton retry KEY`: a key whose run-once attempts are spent gets them back.
    RetryOnce,
    /// Only expire what has expired and grant what can be granted.
    Tick,
    /// A deliverer's report: these events reached this rule's receiver (they leave the
    /// outbox), or this one failed (tried again after its backoff) ([`crate::notify`]).
    Notified(crate::notify::Delivered),
}

/// Arguments of [`Op::Enqueue`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enqueue {
    /// The new ticket's public id, made by the client.
    pub id: String,
    /// The new ticket's secret token, made by the client.
    pub token: String,
    /// Normal or shared.
    pub mode: Mode,
    /// The key's limit this ticket expects.
    pub limit: u32,
    /// Who is asking, and why.
    pub context: String,
    /// Sort value (see [`crate::Ticket::order`]).
    pub order: Option<String>,
    /// Cancel every queued ticket that sorts before this one, unless it was enqueued with `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Lease duration once held.
    pub ttl_ms: u64,
    /// Waiter-lease duration while queued.
    pub waiter_ttl_ms: u64,
    /// Claim window after a grant made while the owner was not looking.
    pub claim_ms: u64,
    /// Bound on live tickets of the key.
    pub max_live: u32,
    /// A run-once ticket ([`crate::once`]): granted only when its verdict is to run; with any
    /// other verdict the enqueue makes no ticket and answers how it ended (skipped, dead, out
    /// of order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<OnceSpec>,
    /// Ask the key's holders that were not queued with `keep` to stop (`baton run
    /// --cancel-running`): each learns it at its next renewal ([`TicketStatus::stop_asked`]),
    /// stops its command and releases as superseded. This ticket waits its turn as any other:
    /// nobody is granted beside a holder that has not stopped yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_running: bool,
    /// Granted through a freeze of the key (`baton run --override-freeze REASON`): the queue up
    /// to and including this ticket is granted in order as if the key were not paused (nobody
    /// barges), and the reason is recorded in its history entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_freeze: Option<String>,
    /// The CI run enqueuing it (from the CI's own variables), recorded on the ticket for
    /// `baton reap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_run: Option<crate::ci_run::CiRun>,
    /// A turn at a pool of named slots (`--slots`), and which it wants ([`crate::pool`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::pool::PoolAsk>,
    /// The client can wait in the key's backlog ([`crate::backlog`]): a plain turn that finds
    /// the window full goes there. A client that says nothing always gets a place in the
    /// window, as before backlogs held turns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub may_wait_in_backlog: bool,
}

/// Arguments of [`Op::Submit`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submit {
    /// The job's id: made by the client, or given by the submitter (`--id`). A submit naming a
    /// job that is live, or remembered as finished, changes nothing.
    pub id: String,
    /// The key's limit this job expects.
    pub limit: u32,
    /// Who submitted it, and why.
    pub context: String,
    /// Sort value (see [`crate::Ticket::order`]).
    pub order: Option<String>,
    /// Cancel every queued ticket or job that sorts before this one, unless it has `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Attempts, backoff, delay, longest run.
    pub spec: JobSpec,
    /// Bound on live tickets of the key.
    pub max_live: u32,
    /// `baton retry`: a job remembered as dead may be queued again under its id.
    #[serde(default)]
    pub revive: bool,
    /// With `revive`: the runs the job had before, so its new runs (and their reports) number
    /// on from them instead of over them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs_before: u32,
    /// Ask the key's lock holders not queued with `keep` to stop, as
    /// [`Enqueue::cancel_running`] does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_running: bool,
    /// The SHA-256 (lowercase hex) of the job's record as the submitter wrote it
    /// ([`crate::job::JobState::params_sha256`]): the worker that claims the job runs its record
    /// only if it still has this hash. A revive carries the first submit's. `None` from
    /// clients older than the binding: their jobs run unchecked, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_sha256: Option<String>,
    /// A job of a pool of named slots (`--slots`), and which it wants ([`crate::pool`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::pool::PoolAsk>,
}

/// A live ticket's standing, as returned to its owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketStatus {
    /// The ticket's id.
    pub id: String,
    /// Queued or held.
    pub state: TicketState,
    /// Queued tickets ahead of it (0 when held, or next in line).
    pub position: usize,
    /// Its fence, once granted.
    pub fence: u64,
    /// Whether a held ticket has been claimed.
    pub claimed: bool,
    /// The end of its current phase on the store's clock (`None` when observed).
    pub deadline_ms: Option<u64>,
    /// Its current lease or waiter-lease duration.
    pub phase_ms: u64,
    /// When it was granted (wall clock), or 0.
    pub granted_wall_ms: u64,
    /// A job's state (attempts, readiness), for jobs.
    pub job: Option<Box<JobState>>,
    /// A held ticket asked to stop by a newer one ([`Enqueue::cancel_running`]): who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_asked: Option<String>,
    /// On a pool: the slots it holds, in the pool's order ([`crate::pool`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
}

/// A ticket's standing: live, or ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TicketView {
    /// Still queued or held.
    Live(TicketStatus),
    /// Ended.
    Finished {
        /// The ticket's id.
        id: String,
        /// How it ended.
        outcome: Outcome,
        /// By an operator's forced release.
        forced: bool,
    },
}

/// A ticket an operator's cancel ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CancelledTicket {
    /// The ticket's id.
    pub id: String,
    /// It held the key (force-released) rather than waited (cancelled).
    pub forced: bool,
}

/// Why an operator's cancel ended a ticket, in words that say who: `force-released by …` for a
/// held one, `cancelled by …` for a queued one.
pub fn cancel_reason(forced: bool, by: &str) -> String {
    let verb = if forced {
        "force-released"
    } else {
        "cancelled"
    };
    let who = if by.is_empty() { "an operator" } else { by };
    format!("{verb} by {who}")
}

impl CancelledTicket {
    /// A queued ticket withdrawn (`forced` false) or a held one force-released.
    pub fn new(id: impl Into<String>, forced: bool) -> CancelledTicket {
        CancelledTicket {
            id: id.into(),
            forced,
        }
    }
}

impl Op {
    /// The operation's name, as its JSON form's `op` tag says it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Enqueue(_) => "enqueue",
            Op::Refresh { .. } => "refresh",
            Op::Renew { .. } => "renew",
            Op::Release { .. } => "release",
            Op::Cancel { .. } => "cancel",
            Op::CancelInBacklog { .. } => "cancel_in_backlog",
            Op::CancelQueued { .. } => "cancel_queued",
            Op::Submit(_) => "submit",
            Op::Claim { .. } => "claim",
            Op::RunSucceeded { .. } => "run_succeeded",
            Op::Complete { .. } => "complete",
            Op::RetryOnce => "retry_once",
            Op::Tick => "tick",
            Op::Notified(_) => "notified",
        }
    }

    /// Every operation's name ([`Op::name`]).
    pub const NAMES: [&'static str; 14] = [
        "enqueue",
        "refresh",
        "renew",
        "release",
        "cancel",
        "cancel_in_backlog",
        "cancel_queued",
        "submit",
        "claim",
        "run_succeeded",
        "complete",
        "retry_once",
        "tick",
        "notified",
    ];
}

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The standing of the ticket the operation was about.
    Ticket(TicketView),
    /// The tickets an operator's cancel ended, in the order it ended them.
    Cancelled(Vec<CancelledTicket>),
    /// No job to claim ([`Op::Claim`]): the queue's head is not a ready job that fits.
    NoJob {
        /// When the head job is ready (job time), if a job waiting for that is the reason.
        ready_at_ms: Option<u64>,
    },
    /// Nothing to report ([`Op::Tick`]).
    Nothing,
}

/// Why an operation was refused. A refused operation changes nothing. Serialised (for
/// `baton serve`'s answers) as `{"kind": "unknown_token"}`, with the fields in `detail`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Refusal {
    /// Input breaks a limit or a format rule.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The key's live tickets use another limit.
    #[error(
        "the key is in use with limit {current}, and this asks for limit {asked}; use the same \
         --limit as the others, or wait until the key is idle"
    )]
    LimitMismatch {
        /// The limit asked for.
        asked: u32,
        /// The key's current limit.
        current: u32,
    },
    /// The key's live tickets use another pool of slots (or none, or one where this asks for
    /// none).
    #[error(
        "the key is in use with slots [{current}], and this asks for slots [{asked}]; use the \
         same --slots as the others (none for a plain lock or semaphore), or wait until the key \
         is idle to change them"
    )]
    SlotsMismatch {
        /// The slots asked for, comma-separated.
        asked: String,
        /// The key's slots, comma-separated.
        current: String,
    },
    /// The key has as many live tickets as allowed.
    #[error("the key already has {max} live tickets, its limit; try again later")]
    QueueFull {
        /// The bound.
        max: u32,
    },
    /// A ticket with this id exists with another token.
    #[error("a ticket with id {id} already exists on this key")]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// The token's ticket is still queued.
    #[error("this ticket does not hold the key yet: it is queued with {position} ahead of it")]
    NotHeld {
        /// Queued tickets ahead of it.
        position: usize,
    },
    /// The token's ticket has ended.
    #[error("{}", finished_message(.outcome, *.forced))]
    Ended {
        /// The ticket's id.
        id: String,
        /// How it ended.
        outcome: Outcome,
        /// By an operator's forced release.
        forced: bool,
    },
    /// The new ticket's order value is a number and the key's live tickets use text, or the
    /// reverse ([`crate::order`]): the two would sort by a rule nobody meant.
    #[error(
        "the order value {asked:?} is {}, but this key's live tickets have {} order values (such \
         as {live:?}); give every ticket of a key the same kind (all build numbers, or all \
         text such as zero-padded commit times), or wait until those tickets have ended",
        crate::order::kind(.asked).word(),
        crate::order::kind(.live).adjective()
    )]
    OrderKindMismatch {
        /// The new ticket's order value.
        asked: String,
        /// A live ticket's order value of the other kind.
        live: String,
    },
    /// No live or recently finished ticket has this token.
    #[error(
        "no ticket of this key has that token: it is wrong, or its ticket ended long ago \
         (see `baton log`)"
    )]
    UnknownToken,
    /// No live ticket has this id.
    #[error("no live ticket of this key has id {id} (see `baton status`)")]
    UnknownId {
        /// The id.
        id: String,
    },
    /// The outcome does not fit the ticket's state.
    #[error("a {state} ticket cannot end as {outcome}")]
    BadOutcome {
        /// The ticket's state.
        state: TicketState,
        /// The outcome asked for.
        outcome: Outcome,
    },
    /// A retry whose first attempt's outcome was unknown names a ticket that is neither live
    /// nor remembered, and more tickets ended since than the document remembers: it may have
    /// taken effect and been forgotten. Nothing was changed.
    #[error(
        "the store did not confirm an earlier attempt of this operation, and more than {} \
         tickets of this key have ended since, so baton cannot tell whether it took effect; \
         nothing was changed now: see `baton status` and `baton log` for the key",
        crate::limits::FINISHED_REMEMBERED
    )]
    Uncertain,
    /// A submit names a job id the key has seen (its record is there), but neither the document
    /// nor the key's history, trimmed by its retention, says what became of that job: it may
    /// have run. Nothing was queued.
    #[error(
        "job {id} was submitted to this key before, and its end is no longer in the key's \
         history (trimmed by its retention), so baton cannot tell whether it ran; nothing was \
         queued: submit under a new --id to run it again"
    )]
    Forgotten {
        /// The job's id.
        id: String,
    },
    /// The token's job run has ended, and the job is queued again.
    #[error("this job's run has ended ({}); the job is queued again", .end.as_str())]
    RunEnded {
        /// The job's id.
        id: String,
        /// How the run ended.
        end: RunEnd,
    },
    /// The operation is for jobs, and the token or id names a lock ticket (or the other way
    /// round).
    #[error("{0}")]
    NotAJob(String),
    /// `baton retry` of a job that is not dead.
    #[error("job {id} is {state}, not dead: only a dead job can be retried")]
    NotDead {
        /// The job's id.
        id: String,
        /// Its state.
        state: String,
    },
    /// `baton retry KEY` of a key whose run-once record is not dead.
    #[error(
        "the key is not dead (its run-once runs: {state}): only a dead key can be retried (to \
         retry a dead job, name it: `baton retry KEY JOB_ID`)"
    )]
    OnceNotDead {
        /// The record's state ([`crate::OnceRecord::state_word`]).
        state: String,
    },
    /// The key's backlog holds as many jobs as it may.
    #[error("the key's backlog already holds {max} jobs, its bound; let workers drain it first")]
    BacklogFull {
        /// The bound.
        max: u64,
    },
    /// Too many cancels of backlog jobs wait for their jobs to be taken in.
    #[error(
        "{} cancels of this key's backlog jobs are still pending; cancel the whole queue with \
         `baton cancel KEY --queued`, or retry once workers have taken more jobs in",
        crate::backlog::PENDING_MAX
    )]
    BacklogBusy,
    /// The fence counter is exhausted (needs 2^64 grants, or a wall clock millions of years
    /// ahead).
    #[error("the key's fence counter is exhausted")]
    FenceExhausted,
}

fn finished_message(outcome: &Outcome, forced: bool) -> String {
    match (outcome, forced) {
        (_, true) => "this ticket no longer holds the key: an operator force-released it".into(),
        (Outcome::Expired, _) => {
            "this ticket no longer holds the key: its lease expired (or its grant was not \
             claimed in time)"
                .into()
        }
        (outcome, _) => format!("this ticket has already ended: {outcome}"),
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
