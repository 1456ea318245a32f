//! The job operations of `apply` ([`crate::job`]): submit, claim, complete, and how a run ends.
//!
//! A job keeps its place in the key's queue for its whole life: a failed attempt, a lease that
//! ran out and a release back put it back as `queued` with its arrival number, so a later job or
//! ticket never overtakes it (the grant step stops at a job, and a claim takes only the head).

use super::{Answer, Work};
use crate::clock::Clock;
use crate::doc::{token_hash, Doc, Mode, Outcome, Ticket, TicketState};
use crate::history::Finished;
use crate::job::{
    check_params_sha256, claimable_head, cut_text, queued_token_hash, JobResult, JobState, RunEnd,
    RunMark, DELAY_MAX_MS, ERROR_MAX_BYTES, RELEASES_PER_ATTEMPT,
};
use crate::limits;
use crate::op::{Refusal, Reply, Submit, TicketView};
use crate::pool::{Take, Walk};

impl Work<'_> {
    /// Queues a new job, in the window or the backlog's tail; the same id again answers with
    /// that job, unchanged (a retry, or a second submit with `--id`), unless it revives a dead
    /// one.
    pub(super) fn submit(&mut self, s: &Submit) -> Answer {
        check_submit(s)?;
        if let Some(answer) = self.submitted_before(s) {
            return answer;
        }
        if !self.marks_cover_retry() {
            return Err(Refusal::Uncertain);
        }
        let to_backlog = self.goes_to_backlog(s.order.as_deref());
        let segments = self.doc.backlog.as_ref().is_some_and(|b| b.has_segments());
        if to_backlog && segments && self.finishes_seen.is_some() {
            // The retry of a submit whose write may have landed: its job may be in the tail it
            // joined, written out since into a segment this function cannot read. The caller
            // looks there (`baton_client::jobs`); nothing is queued twice.
            return Err(Refusal::Uncertain);
        }
        let slots = s.pool.as_ref().map_or(&[][..], |pool| &pool.slots[..]);
        if to_backlog {
            self.fits_key(s.limit, slots)?;
        } else {
            self.admit(s.order.as_deref(), s.limit, slots, s.max_live)?;
        }
        let ticket = new_job(s, self.doc.next_arrival, self.clock);
        self.doc.next_arrival += 1;
        if to_backlog {
            self.push_to_backlog(ticket)?;
        } else {
            self.doc.tickets.push(ticket);
        }
        if s.supersede {
            self.supersede_before(&s.id);
        }
        if s.cancel_running {
            self.ask_holders_to_stop(&s.id, &s.context);
        }
        Ok((Reply::Ticket(self.view(&s.id)), None))
    }

    /// The answer to a submit of an id the key knows: that job's standing, live, in the
    /// backlog or finished (a revive goes on only for a dead job); a lock ticket's id is
    /// refused. `None`: the id is new (or revives a dead job).
    fn submitted_before(&self, s: &Submit) -> Option<Answer> {
        let standing = || Some(Ok((Reply::Ticket(self.view(&s.id)), None)));
        if let Some(ticket) = self.doc.by_id(&s.id) {
            if ticket.job.is_none() {
                return Some(Err(Refusal::DuplicateId { id: s.id.clone() }));
            }
            return standing();
        }
        if let Some(backlog) = &self.doc.backlog {
            if backlog.tail_job(&s.id).is_some() || backlog.dropped.iter().any(|d| d.id == s.id) {
                return standing();
            }
        }
        let mark = self.doc.finished.iter().rev().find(|m| m.id == s.id)?;
        match (s.revive, mark.outcome) {
            (true, Outcome::Dead) => None,
            (true, outcome) => Some(Err(Refusal::NotDead {
                id: s.id.clone(),
                state: outcome.to_string(),
            })),
            (false, _) => standing(),
        }
    }

    pub(super) fn claim(&mut self, token: &str, ttl_ms: u64) -> Answer {
        limits::check_token(token)?;
        limits::check_ttl("TTL", ttl_ms)?;
        let hash = token_hash(token);
        // A retry of a claim that landed: the job this token holds.
        if let Some(ticket) = self.doc.by_token_hash(&hash) {
            if ticket.job.is_none() {
                return Err(Refusal::NotAJob(
                    "this token holds a lock ticket, not a job".into(),
                ));
            }
            let id = ticket.id.clone();
            return Ok((Reply::Ticket(self.view(&id)), None));
        }
        if let Some((id, mark)) = run_ended_with(&self.doc, &hash) {
            return Err(Refusal::RunEnded { id, end: mark.end });
        }
        if let Some(mark) = self.doc.finished.iter().find(|m| m.has_token_hash(&hash)) {
            return Err(Refusal::Ended {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            });
        }
        let now_ms = self.clock.job_now_ms();
        let idx = match self.claimable_head(now_ms) {
            Ok(idx) => idx,
            Err(ready_at_ms) => return Ok((Reply::NoJob { ready_at_ms }, None)),
        };
        let slots = match &self.doc.tickets[idx].slots {
            Some(ask) => match Walk::new(&self.doc).take(&self.doc.slots, ask) {
                Take::Slots(slots) => Some(slots),
                // `claimable_head` found them free: never here.
                Take::Wait | Take::Block => return Ok((Reply::NoJob { ready_at_ms: None }, None)),
            },
            None => None,
        };
        let fence = self.next_fence()?;
        let wall_ms = self.clock.wall_ms();
        let ticket = &mut self.doc.tickets[idx];
        ticket.state = TicketState::Held;
        ticket.claimed = true;
        if let (Some(part), Some(slots)) = (ticket.slots.as_mut(), slots) {
            part.held = slots;
        }
        ticket.fence = fence;
        ticket.token_hash = hash;
        ticket.ttl_ms = ttl_ms;
        ticket.granted_wall_ms = wall_ms;
        if let Some(job) = ticket.job.as_deref_mut() {
            job.runs = job.runs.saturating_add(1);
            job.claimed_at_ms = Some(now_ms);
            job.ready_at_ms = None;
            job.last_run = None;
        }
        let id = ticket.id.clone();
        self.start_phase(idx, ttl_ms);
        self.granted.push((id.clone(), fence));
        Ok((Reply::Ticket(self.view(&id)), None))
    }

    /// The index of the queue's head if a worker may claim it now ([`claimable_head`]).
    fn claimable_head(&self, now_ms: u64) -> Result<usize, Option<u64>> {
        let id = &claimable_head(&self.doc, now_ms, self.clock.wall_ms())?.id;
        self.doc
            .tickets
            .iter()
            .position(|t| &t.id == id)
            .ok_or(None)
    }

    pub(super) fn complete(&mut self, token: &str, id: Option<&str>, result: &JobResult) -> Answer {
        limits::check_token(token)?;
        if let Some(id) = id {
            limits::check_id(id)?;
        }
        if let JobResult::ReleasedBack { delay_ms } = result {
            if *delay_ms > DELAY_MAX_MS {
                return Err(limits::InvalidInput(
                    "the release delay is more than a year; give a shorter one".into(),
                )
                .into());
            }
        }
        let hash = token_hash(token);
        let Some(idx) = self.doc.tickets.iter().position(|t| t.token_hash == hash) else {
            if let JobResult::ReleasedBack { delay_ms } = result {
                if let Some(answer) = self.give_back_lapsed_run(&hash, *delay_ms) {
                    return answer;
                }
            }
            return self.completed_before(&hash);
        };
        if id.is_some_and(|id| id != self.doc.tickets[idx].id) {
            return Err(Refusal::UnknownToken);
        }
        if self.doc.tickets[idx].job.is_none() {
            return Err(Refusal::NotAJob(
                "this token holds a lock ticket, not a job: end it with `baton release`".into(),
            ));
        }
        let id = self.doc.tickets[idx].id.clone();
        let attempt = self.attempt.to_owned();
        match result {
            JobResult::Succeeded => {
                self.finish(idx, Outcome::Succeeded, false, None, Some(attempt));
            }
            JobResult::Failed { error } => {
                self.end_run(idx, RunEnd::Failed, error.clone(), Some(&attempt), 0);
            }
            JobResult::ReleasedBack { delay_ms } => {
                self.end_run(idx, RunEnd::ReleasedBack, None, Some(&attempt), *delay_ms);
            }
            JobResult::Superseded { reason } => {
                if let Some(reason) = reason {
                    limits::check_reason(reason)?;
                }
                if self.doc.tickets[idx].stop_asked.is_none() {
                    return Err(Refusal::BadOutcome {
                        state: self.doc.tickets[idx].state,
                        outcome: Outcome::Superseded,
                    });
                }
                self.finish(
                    idx,
                    Outcome::Superseded,
                    false,
                    reason.clone(),
                    Some(attempt),
                );
            }
        }
        Ok((Reply::Ticket(self.view(&id)), None))
    }

    /// The worker of the run `token` holds says its command succeeded: kept on the job, so that
    /// the run's lease running out ends the job succeeded ([`JobState::succeeded_run`]). A
    /// token that no longer holds is refused as a completion would be: the worker then knows
    /// its success is not recorded, and the job may run again.
    pub(super) fn run_succeeded(&mut self, token: &str) -> Answer {
        limits::check_token(token)?;
        let hash = token_hash(token);
        let Some(idx) = self.doc.tickets.iter().position(|t| t.token_hash == hash) else {
            return self.completed_before(&hash);
        };
        let ticket = &mut self.doc.tickets[idx];
        let Some(job) = ticket.job.as_deref_mut() else {
            return Err(Refusal::NotAJob(
                "this token holds a lock ticket, not a job: end it with `baton release`".into(),
            ));
        };
        job.succeeded_run = Some(job.runs);
        let id = ticket.id.clone();
        Ok((Reply::Ticket(self.view(&id)), None))
    }

    /// A release back of a run whose lease ran out before its worker started the command (the
    /// claim's answer came too late: the worker checks that its lease still stands before it
    /// spawns). The lapse spent an attempt; the release returns it, so a run that never
    /// started costs the job nothing. Only while the job waits again with that run as its last
    /// (`None` otherwise): a job the lapse made dead stays dead, one claimed again is left be.
    fn give_back_lapsed_run(&mut self, hash: &str, delay_ms: u64) -> Option<Answer> {
        let idx = self.doc.tickets.iter().position(|t| {
            t.state == TicketState::Queued
                && t.job
                    .as_deref()
                    .and_then(|job| job.last_run.as_ref())
                    .is_some_and(|mark| {
                        mark.end == RunEnd::LeaseRanOut && mark.has_token_hash(hash)
                    })
        })?;
        let now_ms = self.clock.job_now_ms();
        let run_mark = RunMark::new(RunEnd::ReleasedBack, hash, Some(self.attempt));
        let ticket = &mut self.doc.tickets[idx];
        let job = ticket.job.as_deref_mut()?;
        job.failures = job.failures.saturating_sub(1);
        job.releases = job.releases.saturating_add(1);
        job.ready_at_ms = (delay_ms > 0).then(|| now_ms.saturating_add(delay_ms));
        job.last_run = Some(run_mark);
        let id = ticket.id.clone();
        Some(Ok((Reply::Ticket(self.view(&id)), None)))
    }

    /// A completion whose token holds nothing now: the retry of this very completion is
    /// answered with the job's standing; anything else is refused with what became of the run.
    fn completed_before(&self, hash: &str) -> Answer {
        if let Some((id, mark)) = run_ended_with(&self.doc, hash) {
            if mark.ended_by(self.attempt) {
                return Ok((Reply::Ticket(self.view(&id)), None));
            }
            return Err(Refusal::RunEnded { id, end: mark.end });
        }
        self.ended_by_hash(hash)
            .map(|view: TicketView| (Reply::Ticket(view), None))
    }

    /// Ends the run of the running job `idx`. A failed run (or one that ran out of lease, or
    /// the release back that exceeds [`RELEASES_PER_ATTEMPT`]) spends an attempt: the job is
    /// dead when none is left, else it waits its backoff. A release back waits `delay_ms`. A
    /// job that waits again keeps its place (its arrival), and the run goes to the history.
    pub(super) fn end_run(
        &mut self,
        idx: usize,
        end: RunEnd,
        error: Option<String>,
        attempt: Option<&str>,
        delay_ms: u64,
    ) {
        let Some(job) = self.doc.tickets[idx].job.as_deref() else {
            return;
        };
        let releases = if end == RunEnd::ReleasedBack {
            job.releases.saturating_add(1)
        } else {
            job.releases
        };
        let (failed, error) = spends_an_attempt(end, releases, error);
        let error = error.map(|e| cut_text(&e, ERROR_MAX_BYTES));
        let dead = failed && job.attempt() >= job.max_attempts;
        if let Some(job) = self.doc.tickets[idx].job.as_deref_mut() {
            if failed {
                job.last_error.clone_from(&error);
            }
        }
        if dead {
            let attempt = attempt.map(str::to_owned);
            self.finish(idx, Outcome::Dead, false, error, attempt);
            return;
        }
        let outcome = match (end, failed) {
            (RunEnd::LeaseRanOut, _) => Outcome::Expired,
            (RunEnd::ReleasedBack, false) => Outcome::ReleasedBack,
            _ => Outcome::Failed,
        };
        self.record_requeued_run(idx, outcome, error);
        let wait = if failed {
            Wait::Backoff
        } else {
            Wait::ReleasedBack { releases, delay_ms }
        };
        let run_mark = RunMark::new(end, &self.doc.tickets[idx].token_hash, attempt);
        self.wait_again(idx, run_mark, wait);
    }

    /// The history entry of a run that ended with its job waiting again (`requeued`), and the
    /// hold it ended in the key's summary.
    fn record_requeued_run(&mut self, idx: usize, outcome: Outcome, error: Option<String>) {
        let wall_ms = self.clock.wall_ms();
        let ticket = &self.doc.tickets[idx];
        let mut record = Finished::of(ticket, outcome, false, error, wall_ms);
        if let Some(run) = record.job.as_mut() {
            run.requeued = true;
            // Only the entry that ends the job needs it (for a revive): every entry is stored,
            // and on DynamoDB billed, by size.
            run.params_sha256 = None;
        }
        self.finished.push(record);
        let held = ticket.clone();
        self.record_hold(&held, outcome);
    }

    /// Puts the running job `idx` back in the queue at its place, with the mark of the run that
    /// ended (`run_mark`), ready again after `wait`.
    fn wait_again(&mut self, idx: usize, run_mark: RunMark, wait: Wait) {
        let now_ms = self.clock.job_now_ms();
        let ticket = &mut self.doc.tickets[idx];
        ticket.state = TicketState::Queued;
        ticket.claimed = false;
        ticket.fence = 0;
        ticket.granted_wall_ms = 0;
        ticket.deadline_ms = None;
        ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
        ticket.token_hash = queued_token_hash(&ticket.id);
        if let Some(job) = ticket.job.as_deref_mut() {
            let wait_ms = match wait {
                Wait::Backoff => {
                    job.failures = job.failures.saturating_add(1);
                    job.releases = 0;
                    job.backoff_after_ms(job.failures)
                }
                Wait::ReleasedBack { releases, delay_ms } => {
                    job.releases = releases;
                    delay_ms
                }
            };
            job.ready_at_ms = (wait_ms > 0).then(|| now_ms.saturating_add(wait_ms));
            job.claimed_at_ms = None;
            job.last_run = Some(run_mark);
        }
    }
}

/// How long a job whose run ended waits before it may be claimed again.
enum Wait {
    /// A failed attempt: the backoff after one more failure.
    Backoff,
    /// A release back, the `releases`-th of this attempt: the delay its worker asked for.
    ReleasedBack { releases: u32, delay_ms: u64 },
}

/// Whether a run that ended with `end` (its attempt's `releases`-th release back, for a
/// release) spends an attempt, and the error it is recorded with.
fn spends_an_attempt(end: RunEnd, releases: u32, error: Option<String>) -> (bool, Option<String>) {
    match end {
        RunEnd::Failed => (true, error),
        RunEnd::LeaseRanOut => (
            true,
            error.or_else(|| {
                Some(
                    "the lease ran out: its worker stopped renewing (killed, paused or cut off)"
                        .into(),
                )
            }),
        ),
        RunEnd::ReleasedBack if releases > RELEASES_PER_ATTEMPT => (
            true,
            Some(format!(
                "released back {RELEASES_PER_ATTEMPT} times, then once more: counted as a \
                 failed attempt"
            )),
        ),
        RunEnd::ReleasedBack => (false, None),
    }
}

/// Checks a submit's input at the edge: its id, context and order value, its limit, its spec
/// and its parameters' hash.
fn check_submit(s: &Submit) -> Result<(), Refusal> {
    limits::check_id(&s.id)?;
    limits::check_context(&s.context)?;
    if let Some(order) = &s.order {
        limits::check_order(order)?;
    }
    limits::check_limit(s.limit)?;
    if let Some(pool) = &s.pool {
        super::turns::check_pool(pool, s.limit, Mode::Normal)?;
    }
    s.spec.check()?;
    if let Some(hash) = &s.params_sha256 {
        check_params_sha256(hash)?;
    }
    Ok(())
}

/// The waiting job `s` asks for, with arrival number `arrival`, ready after its delay on
/// `clock`'s job time. A revived job keeps the count of the runs it had.
fn new_job(s: &Submit, arrival: u64, clock: &Clock<'_>) -> Ticket {
    let now_ms = clock.job_now_ms();
    let ready_at_ms = (s.spec.delay_ms > 0).then(|| now_ms.saturating_add(s.spec.delay_ms));
    Ticket {
        ci_run: None,
        slots: s.pool.as_ref().map(crate::pool::PoolAsk::ticket_slots),
        id: s.id.clone(),
        token_hash: queued_token_hash(&s.id),
        mode: Mode::Normal,
        state: TicketState::Queued,
        order: s.order.clone(),
        arrival,
        keep: s.keep,
        context: s.context.clone(),
        ttl_ms: 0,
        waiter_ttl_ms: 0,
        claim_ms: 0,
        heartbeat: 0,
        deadline_ms: None,
        claimed: false,
        fence: 0,
        enqueued_wall_ms: clock.wall_ms(),
        granted_wall_ms: 0,
        job: Some(Box::new(JobState {
            runs: if s.revive { s.runs_before } else { 0 },
            params_sha256: s.params_sha256.clone(),
            ..JobState::new(&s.spec, ready_at_ms)
        })),
        once: None,
        stop_asked: None,
        override_freeze: None,
    }
}

/// The waiting job whose last run had the token with hash `hash`, and how that run ended.
pub(super) fn run_ended_with(doc: &Doc, hash: &str) -> Option<(String, RunMark)> {
    doc.tickets.iter().find_map(|t| {
        let mark = t.job.as_deref()?.last_run.as_ref()?;
        mark.has_token_hash(hash)
            .then(|| (t.id.clone(), mark.clone()))
    })
}

/// After the store's clock changed (or was adopted), job times measured on the old one mean
/// nothing: every waiting job with a time is ready now. No safety property depends on them.
pub(super) fn ready_now_on_a_new_clock(doc: &mut Doc, now_ms: u64) {
    let next_arrival = doc.next_arrival;
    if let Some(backlog) = doc.backlog.as_mut() {
        backlog.ready_now_below = next_arrival;
    }
    for job in doc.tickets.iter_mut().filter_map(|t| t.job.as_deref_mut()) {
        if job.ready_at_ms.is_some() {
            job.ready_at_ms = Some(now_ms);
        }
        if job.claimed_at_ms.is_some() {
            job.claimed_at_ms = Some(now_ms);
        }
    }
}
