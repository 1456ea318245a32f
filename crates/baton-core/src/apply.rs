//! `apply(doc, request, clock)`: the state machine of a key.
//!
//! Every operation runs in three steps on a copy of the document:
//! 1. **expire**: end what the clock says has ended (a restarted store clock ends everything;
//!    held leases and unclaimed grants expire; silent waiters are abandoned);
//! 2. **the operation** itself (refusals return here, and the copy is dropped: a refused
//!    operation changes nothing);
//! 3. **grant**: walk the queue in order and grant while the head fits beside the holders,
//!    stopping at the first that does not (no barging), or at a job: no process waits for a
//!    job, so only a worker's claim takes it (`jobs.rs`).

mod backlog;
mod jobs;

use crate::backlog::{Cut, Segment};
use crate::clock::Clock;
use crate::doc::{token_hash, Doc, FinishedMark, Mode, Outcome, Ticket, TicketState};
use crate::freeze::Paused;
use crate::history::{Finished, OnceRun};
use crate::invariants;
use crate::job::RunEnd;
use crate::lease;
use crate::limits::{self, FINISHED_REMEMBERED, HOLD_SAMPLES, LIVE_TICKETS_MAX, TTL_MAX_MS};
use crate::once::{self, OnceSpec};
use crate::op::{CancelledTicket, Enqueue, Op, Refusal, Reply, Request, TicketStatus, TicketView};
use crate::order;

/// The result of an accepted operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The new document.
    pub doc: Doc,
    /// What the operation did, for its caller.
    pub reply: Reply,
    /// Tickets that ended, for the history log (appended in the same CAS).
    pub finished: Vec<Finished>,
    /// Grants made, in grant order: (ticket id, fence).
    pub granted: Vec<(String, u64)>,
    /// Whether the document changed at all (an unchanged one need not be written).
    pub changed: bool,
    /// A backlog segment the caller must write (as its record) *before* it writes the
    /// document ([`crate::backlog`]).
    pub segment_out: Option<Segment>,
}

/// Applies `request` to `doc` (`None`: the key has no document yet) at `clock`.
pub fn apply(doc: Option<&Doc>, request: &Request, clock: &Clock<'_>) -> Result<Applied, Refusal> {
    apply_with(doc, request, clock, Inputs::default())
}

/// What a writer read beside the key's document and hands to [`apply_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// The backlog segment the document asked for ([`Doc::segment_wanted`]): its jobs are
    /// taken into the window first. A segment that is not the one the document waits for is
    /// ignored.
    pub segment: Option<&'a Segment>,
    /// The freeze in force on the key at the clock's wall time ([`crate::freeze::in_force`]),
    /// from the writer's copy of the settings: recorded in the document, and no grant is made
    /// while it holds but up to an override.
    pub paused: Option<&'a Paused>,
}

/// [`apply`], with what the writer read beside the document ([`Inputs`]).
pub fn apply_with(
    doc: Option<&Doc>,
    request: &Request,
    clock: &Clock<'_>,
    inputs: Inputs<'_>,
) -> Result<Applied, Refusal> {
    let original = doc.cloned().unwrap_or_default();
    let mut work = Work {
        doc: original.clone(),
        clock,
        attempt: &request.attempt,
        finishes_seen: request.finishes_seen,
        finished: Vec::new(),
        granted: Vec::new(),
        segment_out: None,
    };
    work.doc.paused = inputs.paused.cloned();
    work.expire();
    work.take_in(inputs.segment);
    let (reply, looking) = work.op(&request.op)?;
    work.take_in(None);
    work.grant(looking.as_deref())?;
    let reply = match reply {
        // The ticket's standing after the grants of this very operation.
        Reply::Ticket(TicketView::Live(status)) => Reply::Ticket(work.view(&status.id)),
        other => other,
    };
    debug_assert_eq!(invariants::check(&work.doc), Ok(()));
    debug_assert_eq!(invariants::check_settled(&work.doc), Ok(()));
    let changed = work.doc != original;
    Ok(Applied {
        doc: work.doc,
        reply,
        finished: work.finished,
        granted: work.granted,
        changed,
        segment_out: work.segment_out,
    })
}

/// Checks a run-once enqueue: its spec's bounds, and that it asks for a mutex.
fn check_once(spec: &OnceSpec, e: &Enqueue) -> Result<(), Refusal> {
    spec.check()?;
    if e.limit != 1 || e.mode != Mode::Normal {
        return Err(limits::InvalidInput(
            "a run-once key is a mutex: one run at a time (no --limit, no --shared)".into(),
        )
        .into());
    }
    Ok(())
}

/// The standing of the live ticket `id` in `doc`, if it is live: in the window, or waiting in
/// the backlog's tail (and not ended there by a cancel or a cut).
pub fn status_of(doc: &Doc, id: &str) -> Option<TicketStatus> {
    let Some(ticket) = doc.by_id(id) else {
        let backlog = doc.backlog.as_ref()?;
        let ticket = backlog.tail_job(id)?;
        if backlog.fate(ticket).is_some() {
            return None;
        }
        return Some(TicketStatus {
            position: doc.tail_position(id)?,
            ..waiting_status(ticket)
        });
    };
    let position = match ticket.state {
        TicketState::Held => 0,
        TicketState::Queued => {
            let in_window = doc
                .queued()
                .iter()
                .position(|t| t.id == id)
                .unwrap_or_default();
            let backlog_ahead = match &doc.backlog {
                Some(backlog) if doc.behind_backlog(ticket) => backlog.len() as usize,
                _ => 0,
            };
            in_window.saturating_add(backlog_ahead)
        }
    };
    Some(TicketStatus {
        id: ticket.id.clone(),
        state: ticket.state,
        position,
        fence: ticket.fence,
        claimed: ticket.claimed,
        deadline_ms: ticket.deadline_ms,
        phase_ms: ticket.phase_ms(),
        granted_wall_ms: ticket.granted_wall_ms,
        job: ticket.job.clone(),
        stop_asked: ticket.stop_asked.clone(),
    })
}

/// The standing of a waiting job kept in the backlog (position 0: the caller knows it).
pub fn waiting_status(ticket: &Ticket) -> TicketStatus {
    TicketStatus {
        id: ticket.id.clone(),
        state: TicketState::Queued,
        position: 0,
        fence: 0,
        claimed: false,
        deadline_ms: None,
        phase_ms: ticket.phase_ms(),
        granted_wall_ms: 0,
        job: ticket.job.clone(),
        stop_asked: None,
    }
}

/// Longest "who asked" a holder asked to stop is told ([`Ticket::stop_asked`]).
pub const STOP_ASKED_MAX_BYTES: usize = 160;

struct Work<'a> {
    doc: Doc,
    clock: &'a Clock<'a>,
    attempt: &'a str,
    finishes_seen: Option<u64>,
    finished: Vec<Finished>,
    granted: Vec<(String, u64)>,
    segment_out: Option<Segment>,
}

impl Work<'_> {
    fn expire(&mut self) {
        let wall_ms = self.clock.wall_ms();
        if let Some(record) = self.doc.once.as_mut() {
            record.forget_due(wall_ms);
        }
        if let Clock::Store { epoch, now_ms, .. } = *self.clock {
            // A document written on observation (before its store had a clock, or by an older
            // baton) has no epoch and no deadlines: its tickets start their phase now, on this
            // clock, rather than being ended as if the clock had restarted. Never shorter than
            // the phase, so never unsafe.
            // Job times were on observers' wall clocks until now: they are ready now.
            let adopted = self.doc.epoch.is_none();
            if adopted {
                self.doc.epoch = Some(epoch.to_string());
            }
            for ticket in &mut self.doc.tickets {
                if ticket.deadline_ms.is_none() && !ticket.is_waiting_job() {
                    ticket.deadline_ms = Some(now_ms.saturating_add(ticket.phase_ms()));
                }
            }
            let restarted = self.doc.epoch.as_deref() != Some(epoch);
            if restarted {
                self.end_all_for_a_new_clock();
                self.doc.epoch = Some(epoch.to_string());
            }
            if adopted || restarted {
                jobs::ready_now_on_a_new_clock(&mut self.doc, now_ms);
            }
        }
        let mut idx = 0;
        while idx < self.doc.tickets.len() {
            let ticket = &self.doc.tickets[idx];
            if !self.clock.has_expired(ticket) {
                idx += 1;
                continue;
            }
            if ticket.job.is_some() {
                // A running job whose worker stopped renewing: a failed attempt. The job waits
                // again at `idx` (examined once more: it no longer lapses) or is dead.
                self.end_run(idx, RunEnd::LeaseRanOut, None, None, 0);
                continue;
            }
            let (outcome, reason) = match (ticket.state, ticket.claimed) {
                (TicketState::Queued, _) => (Outcome::Abandoned, "the waiter stopped refreshing"),
                (TicketState::Held, false) => (
                    Outcome::Expired,
                    "the grant was not claimed within the claim window",
                ),
                (TicketState::Held, true) => (Outcome::Expired, "the lease ran out"),
            };
            self.finish(idx, outcome, false, Some(reason.into()), None);
        }
    }

    /// A changed clock epoch voids every deadline: every ticket ends, every running job's run
    /// ends (a failed attempt); waiting jobs stay, they have no deadline.
    fn end_all_for_a_new_clock(&mut self) {
        let reason = "the store's clock restarted (the host rebooted)";
        let mut idx = 0;
        while idx < self.doc.tickets.len() {
            let ticket = &self.doc.tickets[idx];
            match (ticket.state, ticket.job.is_some()) {
                (TicketState::Queued, true) => idx += 1,
                (TicketState::Held, true) => {
                    let error = Some(reason.to_owned());
                    self.end_run(idx, RunEnd::LeaseRanOut, error, None, 0);
                }
                (TicketState::Held, false) => {
                    self.finish(idx, Outcome::Expired, false, Some(reason.into()), None);
                }
                (TicketState::Queued, false) => {
                    self.finish(idx, Outcome::Abandoned, false, Some(reason.into()), None);
                }
            }
        }
    }

    /// Runs the operation itself. Returns the reply and the ticket whose owner is looking (a
    /// grant to it in this same operation needs no claim).
    fn op(&mut self, op: &Op) -> Result<(Reply, Option<String>), Refusal> {
        match op {
            Op::Enqueue(enqueue) => self.enqueue(enqueue),
            Op::Refresh { token } => {
                let idx = self.live_by_token(token)?;
                let phase_ms = match self.doc.tickets[idx].state {
                    TicketState::Queued => self.doc.tickets[idx].waiter_ttl_ms,
                    TicketState::Held => {
                        self.doc.tickets[idx].claimed = true;
                        self.doc.tickets[idx].ttl_ms
                    }
                };
                self.beat(idx, phase_ms);
                Ok(self.live_reply(idx))
            }
            Op::Renew { token, ttl_ms } => {
                let idx = self.live_by_token(token)?;
                if self.doc.tickets[idx].state == TicketState::Queued {
                    let id = self.doc.tickets[idx].id.clone();
                    let position = status_of(&self.doc, &id).map_or(0, |s| s.position);
                    return Err(Refusal::NotHeld { position });
                }
                if let Some(ttl_ms) = *ttl_ms {
                    limits::check_ttl("TTL", ttl_ms)?;
                    self.doc.tickets[idx].ttl_ms = ttl_ms;
                }
                self.doc.tickets[idx].claimed = true;
                let ttl_ms = self.doc.tickets[idx].ttl_ms;
                self.beat(idx, ttl_ms);
                Ok(self.live_reply(idx))
            }
            Op::Release {
                token,
                outcome,
                reason,
            } => {
                limits::check_token(token)?;
                if let Some(reason) = reason {
                    limits::check_reason(reason)?;
                }
                let hash = token_hash(token);
                let Some(idx) = self.doc.tickets.iter().position(|t| t.token_hash == hash) else {
                    return self
                        .ended_by_hash(&hash)
                        .map(|view| (Reply::Ticket(view), None));
                };
                if self.doc.tickets[idx].job.is_some() {
                    return Err(Refusal::NotAJob(
                        "this token holds a job's run, not a lock: end it with `baton complete \
                         KEY JOB_ID --token TOKEN`"
                            .into(),
                    ));
                }
                let state = self.doc.tickets[idx].state;
                let fits = match state {
                    TicketState::Held => {
                        matches!(
                            outcome,
                            Outcome::Succeeded | Outcome::Failed | Outcome::Cancelled
                        ) || (*outcome == Outcome::Superseded
                            && self.doc.tickets[idx].stop_asked.is_some())
                    }
                    TicketState::Queued => {
                        matches!(outcome, Outcome::Cancelled | Outcome::TimedOut)
                    }
                };
                if !fits {
                    return Err(Refusal::BadOutcome {
                        state,
                        outcome: *outcome,
                    });
                }
                let id = self.doc.tickets[idx].id.clone();
                let attempt = Some(self.attempt.to_string());
                self.finish(idx, *outcome, false, reason.clone(), attempt);
                let view = TicketView::Finished {
                    id,
                    outcome: *outcome,
                    forced: false,
                };
                Ok((Reply::Ticket(view), None))
            }
            Op::Cancel { id, by } => self.cancel(id, None, by),
            Op::CancelInBacklog {
                id,
                generation,
                segment,
                by,
            } => self.cancel(id, Some((*generation, *segment)), by),
            Op::CancelQueued { by } => {
                // A retry whose window the marks no longer cover may have ended more tickets
                // than the marks still show (or none they show): refused, not half-answered.
                if !self.marks_cover_retry() {
                    return Err(Refusal::Uncertain);
                }
                // The retry of a cancel that already ended tickets answers as the first time and
                // ends nothing more (it would otherwise cancel the tickets queued since). Only a
                // cancel that itself ended more tickets than are remembered is answered with the
                // remembered ones.
                let done: Vec<CancelledTicket> = self
                    .doc
                    .finished
                    .iter()
                    .filter(|m| m.ended_by(self.attempt))
                    .map(|m| CancelledTicket::new(m.id.clone(), m.forced))
                    .collect();
                if !done.is_empty() {
                    return Ok((Reply::Cancelled(done), None));
                }
                let next_arrival = self.doc.next_arrival;
                if let Some(backlog) = self.doc.backlog.as_mut() {
                    backlog.add_cut(Cut {
                        below: next_arrival,
                        outcome: Outcome::Cancelled,
                        spares_keep: false,
                        reason: crate::op::cancel_reason(false, by),
                    });
                }
                let mut ids = Vec::new();
                while let Some(idx) = self
                    .doc
                    .tickets
                    .iter()
                    .position(|t| t.state == TicketState::Queued)
                {
                    ids.push(CancelledTicket::new(
                        self.doc.tickets[idx].id.clone(),
                        false,
                    ));
                    let reason = Some(crate::op::cancel_reason(false, by));
                    let attempt = Some(self.attempt.to_string());
                    self.finish(idx, Outcome::Cancelled, false, reason, attempt);
                }
                Ok((Reply::Cancelled(ids), None))
            }
            Op::RetryOnce => {
                let record = self.doc.once.as_mut().ok_or_else(|| Refusal::OnceNotDead {
                    state: "never run".into(),
                })?;
                record
                    .revive()
                    .map_err(|state| Refusal::OnceNotDead { state })?;
                Ok((Reply::Nothing, None))
            }
            Op::Tick => Ok((Reply::Nothing, None)),
            Op::Notified(delivered) => {
                if let Some(outbox) = self.doc.outbox.as_mut() {
                    crate::notify::acknowledge(outbox, delivered, self.clock.wall_ms());
                }
                Ok((Reply::Nothing, None))
            }
            Op::Submit(submit) => self.submit(submit),
            Op::Claim { token, ttl_ms } => self.claim(token, *ttl_ms),
            Op::Complete { token, id, result } => self.complete(token, id.as_deref(), result),
        }
    }

    fn enqueue(&mut self, e: &Enqueue) -> Result<(Reply, Option<String>), Refusal> {
        limits::check_id(&e.id)?;
        limits::check_token(&e.token)?;
        limits::check_context(&e.context)?;
        if let Some(order) = &e.order {
            limits::check_order(order)?;
        }
        limits::check_limit(e.limit)?;
        limits::check_ttl("TTL", e.ttl_ms)?;
        limits::check_ttl("waiter TTL", e.waiter_ttl_ms)?;
        if !(limits::CLAIM_MIN_MS..=TTL_MAX_MS).contains(&e.claim_ms) {
            return Err(limits::InvalidInput(format!(
                "the claim window is {}; it must be between {} and 7d",
                crate::duration::human_ms(e.claim_ms),
                crate::duration::human_ms(limits::CLAIM_MIN_MS)
            ))
            .into());
        }
        if let Some(spec) = &e.once {
            check_once(spec, e)?;
        }
        let hash = token_hash(&e.token);
        // A retry of an enqueue that already landed: answer with the ticket's standing.
        if let Some(idx) = self.doc.tickets.iter().position(|t| t.id == e.id) {
            if self.doc.tickets[idx].token_hash != hash || self.doc.tickets[idx].job.is_some() {
                return Err(Refusal::DuplicateId { id: e.id.clone() });
            }
            return Ok(self.live_reply(idx));
        }
        if let Some(mark) = self.doc.finished.iter().find(|m| m.id == e.id) {
            if !mark.has_token_hash(&hash) {
                return Err(Refusal::DuplicateId { id: e.id.clone() });
            }
            let view = TicketView::Finished {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            };
            return Ok((Reply::Ticket(view), None));
        }
        if !self.marks_cover_retry() {
            return Err(Refusal::Uncertain);
        }
        if self.doc.tickets.iter().any(|t| t.token_hash == hash) {
            return Err(Refusal::DuplicateId { id: e.id.clone() });
        }
        if let Some(spec) = &e.once {
            // Nothing to wait for: no ticket is made, and nothing is written.
            let verdict = once::verdict(self.doc.once.as_ref(), spec, self.clock.wall_ms());
            if let Some(outcome) = verdict.outcome() {
                let view = TicketView::Finished {
                    id: e.id.clone(),
                    outcome,
                    forced: false,
                };
                return Ok((Reply::Ticket(view), None));
            }
        }
        self.admit(e.order.as_deref(), e.limit, e.max_live)?;
        let ticket = Ticket {
            id: e.id.clone(),
            token_hash: hash,
            mode: e.mode,
            state: TicketState::Queued,
            order: e.order.clone(),
            arrival: self.doc.next_arrival,
            keep: e.keep,
            context: e.context.clone(),
            ttl_ms: e.ttl_ms,
            waiter_ttl_ms: e.waiter_ttl_ms,
            claim_ms: e.claim_ms,
            heartbeat: 0,
            deadline_ms: self.clock.deadline_ms(e.waiter_ttl_ms),
            claimed: false,
            fence: 0,
            enqueued_wall_ms: self.clock.wall_ms(),
            granted_wall_ms: 0,
            job: None,
            once: e.once,
            stop_asked: None,
            override_freeze: e.override_freeze.clone(),
        };
        self.doc.next_arrival += 1;
        self.doc.tickets.push(ticket);
        if e.supersede {
            self.supersede_before(&e.id);
        }
        if e.cancel_running {
            self.ask_holders_to_stop(&e.id, &e.context);
        }
        let idx = self.doc.tickets.len() - 1;
        let reply = self.live_reply(idx);
        Ok(reply)
    }

    /// `--cancel-running`: marks every holder (a `baton run`, or a job a worker runs) not
    /// queued with `keep` as asked to stop by the ticket (or job) `id` just queued. Nothing ends here: each holder stops its command and releases
    /// (as superseded), or its lease runs out, and only then is the next ticket granted.
    pub(crate) fn ask_holders_to_stop(&mut self, id: &str, context: &str) {
        let mut by = if context.is_empty() {
            format!("ticket {id}")
        } else {
            format!("ticket {id} ({context})")
        };
        // Short enough that the holder's release can carry it in its reason
        // ([`limits::REASON_MAX_BYTES`]) with words around it.
        if by.len() > STOP_ASKED_MAX_BYTES {
            let mut end = STOP_ASKED_MAX_BYTES - "…".len();
            while !by.is_char_boundary(end) {
                end -= 1;
            }
            by.truncate(end);
            by.push('…');
        }
        for ticket in self
            .doc
            .tickets
            .iter_mut()
            .filter(|t| t.state == TicketState::Held && !t.keep && t.stop_asked.is_none())
        {
            ticket.stop_asked = Some(by.clone());
        }
    }

    /// Checks that a new ticket or job may join the key's live tickets: [`Self::make_room`],
    /// then its `order` value is of the kind theirs are ([`order::mismatch`]).
    fn admit(&mut self, order: Option<&str>, limit: u32, max_live: u32) -> Result<(), Refusal> {
        self.make_room(limit, max_live)?;
        let Some(asked) = order else {
            return Ok(());
        };
        let live = self.doc.tickets.iter().filter_map(|t| t.order.as_deref());
        match order::mismatch(asked, live) {
            Some(live) => Err(Refusal::OrderKindMismatch {
                asked: asked.to_owned(),
                live: live.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Checks that a new ticket expecting `limit` may join (the key's limit, the bound on live
    /// tickets `max_live`), and sets the key's limit when it is idle.
    fn make_room(&mut self, limit: u32, max_live: u32) -> Result<(), Refusal> {
        if !(1..=LIVE_TICKETS_MAX).contains(&max_live) {
            return Err(limits::InvalidInput(format!(
                "the live-ticket bound is {max_live}; it must be between 1 and {LIVE_TICKETS_MAX}"
            ))
            .into());
        }
        let busy = !self.doc.tickets.is_empty() || self.doc.backlog.is_some();
        if busy && self.doc.limit != limit {
            return Err(Refusal::LimitMismatch {
                asked: limit,
                current: self.doc.limit,
            });
        }
        if self.doc.tickets.len() >= max_live as usize {
            return Err(Refusal::QueueFull { max: max_live });
        }
        if !busy {
            self.doc.limit = limit;
        }
        Ok(())
    }

    /// Cancels as superseded every queued ticket or job without `keep` that sorts before the
    /// ticket or job `id` just queued (in the window or the backlog's tail); backlog jobs
    /// before it end when taken in (a [`Cut`]).
    fn supersede_before(&mut self, id: &str) {
        let new = self
            .doc
            .by_id(id)
            .or_else(|| self.doc.backlog.as_ref()?.tail_job(id));
        let Some(new) = new else {
            return;
        };
        let (id, new_order, new_arrival) = (new.id.clone(), new.order.clone(), new.arrival);
        let new_key = order::queue_key(new_order.as_deref(), new_arrival);
        let reason = format!("superseded by {id}");
        if let (Some(backlog), None) = (self.doc.backlog.as_mut(), &new_order) {
            backlog.add_cut(Cut {
                below: new_arrival,
                outcome: Outcome::Superseded,
                spares_keep: true,
                reason: reason.clone(),
            });
        }
        while let Some(idx) = self.doc.tickets.iter().position(|t| {
            t.state == TicketState::Queued && !t.keep && t.id != id && t.queue_key() < new_key
        }) {
            self.finish(idx, Outcome::Superseded, false, Some(reason.clone()), None);
        }
    }

    /// Grants in queue order while the head fits beside the holders.
    fn grant(&mut self, looking: Option<&str>) -> Result<(), Refusal> {
        let holders = self.doc.holders();
        let (mut n_normal, mut n_shared) = (0u32, 0u32);
        for t in holders {
            match t.mode {
                Mode::Normal => n_normal += 1,
                Mode::Shared => n_shared += 1,
            }
        }
        let mut queued: Vec<usize> = (0..self.doc.tickets.len())
            .filter(|&i| self.doc.tickets[i].state == TicketState::Queued)
            .collect();
        queued.sort_by(|&a, &b| {
            self.doc.tickets[a]
                .queue_key()
                .cmp(&self.doc.tickets[b].queue_key())
        });
        // Run-once tickets that must not run end after the walk (indices stay valid meanwhile);
        // nothing the walk does changes their verdict.
        let mut settled = Vec::new();
        for idx in queued {
            if self.doc.tickets[idx].job.is_some()
                || self.doc.behind_backlog(&self.doc.tickets[idx])
            {
                // A job is taken by a worker's claim, never granted to nobody; and nothing
                // behind it may pass it, nor the backlog's jobs that arrived earlier.
                break;
            }
            if let Some(spec) = &self.doc.tickets[idx].once {
                let verdict = once::verdict(self.doc.once.as_ref(), spec, self.clock.wall_ms());
                if let Some(outcome) = verdict.outcome() {
                    settled.push((idx, outcome, verdict.reason()));
                    continue;
                }
            }
            let fits = match self.doc.tickets[idx].mode {
                Mode::Normal => n_shared == 0 && n_normal < self.doc.limit,
                Mode::Shared => n_normal == 0,
            };
            // Paused: waiters keep their places; only the queue up to an override moves.
            if !fits
                || self
                    .doc
                    .frozen_for(&self.doc.tickets[idx], self.clock.wall_ms())
            {
                break;
            }
            let fence = self.next_fence()?;
            let claimed = looking == Some(self.doc.tickets[idx].id.as_str());
            let ticket = &mut self.doc.tickets[idx];
            ticket.state = TicketState::Held;
            ticket.fence = fence;
            ticket.granted_wall_ms = self.clock.wall_ms();
            ticket.claimed = claimed;
            let phase_ms = ticket.phase_ms();
            self.start_phase(idx, phase_ms);
            let ticket = &self.doc.tickets[idx];
            match ticket.mode {
                Mode::Normal => n_normal += 1,
                Mode::Shared => n_shared += 1,
            }
            self.granted.push((ticket.id.clone(), fence));
        }
        settled.sort_by_key(|(idx, ..)| std::cmp::Reverse(*idx));
        for (idx, outcome, reason) in settled {
            self.finish(idx, outcome, false, Some(reason), None);
        }
        Ok(())
    }

    /// Hands out the next fence: strictly above the last one, and at least the granting
    /// client's wall time in µs, so fences keep increasing even if a store loses the counter.
    fn next_fence(&mut self) -> Result<u64, Refusal> {
        let next = self
            .doc
            .fence
            .checked_add(1)
            .ok_or(Refusal::FenceExhausted)?;
        let fence = next.max(self.clock.wall_ms().saturating_mul(1000));
        self.doc.fence = fence;
        Ok(fence)
    }

    /// Starts a new phase of `phase_ms` for ticket `idx` (a grant): a new deadline and a new
    /// heartbeat.
    fn start_phase(&mut self, idx: usize, phase_ms: u64) {
        let deadline_ms = self.clock.deadline_ms(phase_ms);
        let ticket = &mut self.doc.tickets[idx];
        ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
        ticket.deadline_ms = deadline_ms;
    }

    /// Beats ticket `idx` within its phase (a refresh, a claim, a renewal): a new heartbeat,
    /// and a deadline `phase_ms` from now that never moves the current one earlier
    /// ([`lease::extended_deadline_store_ms`]).
    fn beat(&mut self, idx: usize, phase_ms: u64) {
        let new_ms = self.clock.deadline_ms(phase_ms);
        let ticket = &mut self.doc.tickets[idx];
        ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
        ticket.deadline_ms = lease::extended_deadline_store_ms(ticket.deadline_ms, new_ms);
    }

    /// Ends the live ticket `idx`: out of the document, into the history and the summary.
    fn finish(
        &mut self,
        idx: usize,
        outcome: Outcome,
        forced: bool,
        reason: Option<String>,
        attempt: Option<String>,
    ) {
        let ticket = self.doc.tickets.remove(idx);
        let wall_ms = self.clock.wall_ms();
        if ticket.state == TicketState::Held {
            self.record_hold(&ticket, outcome);
        }
        let mut entry = Finished::of(&ticket, outcome, forced, reason, wall_ms);
        if let (Some(spec), TicketState::Held) = (&ticket.once, ticket.state) {
            // A run ended: the key's record learns how (a success, or a spent attempt).
            let record = self.doc.once.get_or_insert_with(Default::default);
            let attempt = record.record_run_end(spec, outcome, wall_ms);
            let dead = record.dead;
            if dead && entry.reason.is_none() {
                entry.reason = Some(format!(
                    "attempt {attempt} of {} failed: the key is dead until `baton retry`",
                    spec.max_attempts
                ));
            }
            entry.once = Some(OnceRun {
                seq: spec.seq,
                attempt,
                dead,
            });
        }
        self.doc.finished.push(FinishedMark::new(
            &ticket.id,
            &ticket.token_hash,
            outcome,
            forced,
            attempt.as_deref(),
        ));
        if self.doc.finished.len() > FINISHED_REMEMBERED {
            self.doc.finished.remove(0);
        }
        self.doc.finishes = self.doc.finishes.saturating_add(1);
        self.finished.push(entry);
    }

    /// Adds the hold that ticket `held` ended with `outcome` to the summary.
    fn record_hold(&mut self, held: &Ticket, outcome: Outcome) {
        let wall_ms = self.clock.wall_ms();
        let summary = &mut self.doc.summary;
        summary
            .recent_hold_ms
            .push(wall_ms.saturating_sub(held.granted_wall_ms));
        if summary.recent_hold_ms.len() > HOLD_SAMPLES {
            summary.recent_hold_ms.remove(0);
        }
        summary.last_outcome = Some(outcome);
        summary.last_finished_wall_ms = wall_ms;
        summary.consecutive_failures = if outcome.is_failure() {
            summary.consecutive_failures.saturating_add(1)
        } else {
            0
        };
    }

    /// Whether every ticket that ended since the uncertain attempt of a retry still has its
    /// mark (always, for a first attempt): then a ticket not found was never there.
    fn marks_cover_retry(&self) -> bool {
        self.finishes_seen
            .is_none_or(|seen| self.doc.finishes.saturating_sub(seen) <= FINISHED_REMEMBERED as u64)
    }

    /// `refusal` for a ticket not found, or [`Refusal::Uncertain`] when it may have been
    /// forgotten since a retry's uncertain attempt.
    fn not_found(&self, refusal: Refusal) -> Refusal {
        if self.marks_cover_retry() {
            refusal
        } else {
            Refusal::Uncertain
        }
    }

    /// The live ticket holding `token`, or the refusal that says what became of it.
    fn live_by_token(&self, token: &str) -> Result<usize, Refusal> {
        limits::check_token(token)?;
        let hash = token_hash(token);
        if let Some(idx) = self.doc.tickets.iter().position(|t| t.token_hash == hash) {
            return Ok(idx);
        }
        if let Some((id, mark)) = jobs::run_ended_with(&self.doc, &hash) {
            return Err(Refusal::RunEnded { id, end: mark.end });
        }
        match self.doc.finished.iter().find(|m| m.has_token_hash(&hash)) {
            Some(mark) => Err(Refusal::Ended {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            }),
            None => Err(self.not_found(Refusal::UnknownToken)),
        }
    }

    /// For a token with no live ticket: the retry of this very attempt is answered as it was
    /// the first time; anything else is refused.
    fn ended_by_hash(&self, hash: &str) -> Result<TicketView, Refusal> {
        match self.doc.finished.iter().find(|m| m.has_token_hash(hash)) {
            Some(mark) if mark.ended_by(self.attempt) => Ok(TicketView::Finished {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            }),
            Some(mark) => Err(Refusal::Ended {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            }),
            None => Err(self.not_found(Refusal::UnknownToken)),
        }
    }

    fn live_reply(&self, idx: usize) -> (Reply, Option<String>) {
        let id = self.doc.tickets[idx].id.clone();
        (Reply::Ticket(self.view(&id)), Some(id))
    }

    fn view(&self, id: &str) -> TicketView {
        if let Some(status) = status_of(&self.doc, id) {
            return TicketView::Live(status);
        }
        if let Some(view) = self.backlog_fate_view(id) {
            return view;
        }
        match self.doc.finished.iter().rev().find(|m| m.id == id) {
            Some(mark) => TicketView::Finished {
                id: mark.id.clone(),
                outcome: mark.outcome,
                forced: mark.forced,
            },
            // Unreachable: a ticket the operation named is live or was just finished.
            None => TicketView::Finished {
                id: id.to_string(),
                outcome: Outcome::Cancelled,
                forced: false,
            },
        }
    }
}
