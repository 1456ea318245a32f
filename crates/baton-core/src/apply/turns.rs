//! The operations of a turn on a lock or semaphore: enqueue a ticket, refresh it while it waits
//! or holds, renew a held lease, release it.

use super::{Answer, Work};
use crate::clock::Clock;
use crate::doc::{token_hash, Outcome, Ticket, TicketState};
use crate::limits::{self, TTL_MAX_MS};
use crate::once;
use crate::op::{Enqueue, Refusal, Reply, TicketView};

impl Work<'_> {
    /// Queues a new ticket, or answers the retry of an enqueue that already landed. A turn
    /// queued here whose arrival may still land is remembered until it does
    /// ([`crate::Request::may_arrive_late`]).
    pub(super) fn enqueue(&mut self, e: &Enqueue) -> Answer {
        limits::check_token(&e.token)?;
        check_enqueue(e)?;
        let hash = token_hash(&e.token);
        let queued_before = self.doc.next_arrival;
        let answer = self.enqueue_hashed(e, hash.clone())?;
        if self.may_arrive_late && self.doc.next_arrival != queued_before {
            let unsettled = self.doc.unsettled.get_or_insert_with(Default::default);
            unsettled.record(&e.id, &hash);
        }
        Ok(answer)
    }

    /// [`Self::enqueue`], of a ticket whose token's hash is `hash` (an arrival carries only
    /// the hash: `apply/arrivals.rs`), its input checked already.
    pub(super) fn enqueue_hashed(&mut self, e: &Enqueue, hash: String) -> Answer {
        if let Some(answer) = self.enqueued_before(e, &hash) {
            return answer;
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
        if self.turn_goes_to_backlog(e) {
            return self.enqueue_in_backlog(e, hash);
        }
        let slots = e.pool.as_ref().map_or(&[][..], |pool| &pool.slots[..]);
        self.admit(e.order.as_deref(), e.limit, slots, e.max_live)?;
        let ticket = new_ticket(e, hash, self.doc.next_arrival, self.clock);
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

    /// A retry of an enqueue that already landed (the same id with the same token): answered
    /// with the ticket's standing, live or finished. The same id with another token is refused.
    fn enqueued_before(&self, e: &Enqueue, hash: &str) -> Option<Answer> {
        if let Some(idx) = self.doc.tickets.iter().position(|t| t.id == e.id) {
            if self.doc.tickets[idx].token_hash != hash || self.doc.tickets[idx].job.is_some() {
                return Some(Err(Refusal::DuplicateId { id: e.id.clone() }));
            }
            return Some(Ok(self.live_reply(idx)));
        }
        if let Some(ticket) = self.doc.backlog.as_ref().and_then(|b| b.tail_job(&e.id)) {
            if ticket.token_hash != hash || ticket.job.is_some() {
                return Some(Err(Refusal::DuplicateId { id: e.id.clone() }));
            }
            return Some(Ok((Reply::Ticket(self.view(&e.id)), None)));
        }
        let mark = self.doc.finished.iter().find(|m| m.id == e.id)?;
        if !mark.has_token_hash(hash) {
            return Some(Err(Refusal::DuplicateId { id: e.id.clone() }));
        }
        let view = TicketView::Finished {
            id: mark.id.clone(),
            outcome: mark.outcome,
            forced: mark.forced,
        };
        Some(Ok((Reply::Ticket(view), None)))
    }

    /// A beat of the ticket holding `token`: a waiter's keeps its place, a holder's claims its
    /// grant and extends its lease by its TTL.
    pub(super) fn refresh(&mut self, token: &str) -> Answer {
        if let Some(id) = self.turn_in_tail(token)? {
            // No waiter lease in the backlog: nothing to extend.
            return Ok((Reply::Ticket(self.view(&id)), None));
        }
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

    /// Renews the lease held with `token` (with a new TTL if one is given); a ticket still
    /// queued is refused with its position.
    pub(super) fn renew(&mut self, token: &str, ttl_ms: Option<u64>) -> Answer {
        if let Some(id) = self.turn_in_tail(token)? {
            let position = super::status_of(&self.doc, &id).map_or(0, |s| s.position);
            return Err(Refusal::NotHeld { position });
        }
        let idx = self.live_by_token(token)?;
        if self.doc.tickets[idx].state == TicketState::Queued {
            let id = self.doc.tickets[idx].id.clone();
            let position = super::status_of(&self.doc, &id).map_or(0, |s| s.position);
            return Err(Refusal::NotHeld { position });
        }
        if let Some(ttl_ms) = ttl_ms {
            limits::check_ttl("TTL", ttl_ms)?;
            self.doc.tickets[idx].ttl_ms = ttl_ms;
        }
        self.doc.tickets[idx].claimed = true;
        let ttl_ms = self.doc.tickets[idx].ttl_ms;
        self.beat(idx, ttl_ms);
        Ok(self.live_reply(idx))
    }

    /// Ends the ticket holding `token` with `outcome`, if that outcome fits its state; the
    /// retry of a release that landed is answered as the first time.
    pub(super) fn release(
        &mut self,
        token: &str,
        outcome: Outcome,
        reason: Option<&str>,
    ) -> Answer {
        limits::check_token(token)?;
        if let Some(reason) = reason {
            limits::check_reason(reason)?;
        }
        let hash = token_hash(token);
        let Some(idx) = self.doc.tickets.iter().position(|t| t.token_hash == hash) else {
            if let Some(answer) = self.withdraw_from_tail(token, outcome) {
                return answer;
            }
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
                ) || (outcome == Outcome::Superseded && self.doc.tickets[idx].stop_asked.is_some())
            }
            TicketState::Queued => matches!(outcome, Outcome::Cancelled | Outcome::TimedOut),
        };
        if !fits {
            return Err(Refusal::BadOutcome { state, outcome });
        }
        let id = self.doc.tickets[idx].id.clone();
        let attempt = Some(self.attempt.to_string());
        self.finish(idx, outcome, false, reason.map(str::to_owned), attempt);
        let view = TicketView::Finished {
            id,
            outcome,
            forced: false,
        };
        Ok((Reply::Ticket(view), None))
    }
}

/// Checks an enqueue's input at the edge but its token (which an arrival does not carry): its
/// id, context and order value, its limit, TTLs and claim window, and a run-once spec.
pub(super) fn check_enqueue(e: &Enqueue) -> Result<(), Refusal> {
    limits::check_id(&e.id)?;
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
        super::once::check_once(spec, e)?;
    }
    if let Some(run) = &e.ci_run {
        run.check()?;
    }
    if let Some(pool) = &e.pool {
        check_pool(pool, e.limit, e.mode)?;
    }
    Ok(())
}

/// Checks a pool's ask ([`crate::pool::PoolAsk::check`]) and that it agrees with the rest of
/// the ticket: the limit is the number of slots, and a pool's turns are not shared.
pub(super) fn check_pool(
    pool: &crate::pool::PoolAsk,
    limit: u32,
    mode: crate::doc::Mode,
) -> Result<(), Refusal> {
    pool.check()?;
    if limit as usize != pool.slots.len() {
        return Err(limits::InvalidInput(format!(
            "the limit of a pool is its number of slots, {}; this asks for {limit}",
            pool.slots.len()
        ))
        .into());
    }
    if mode != crate::doc::Mode::Normal {
        return Err(
            limits::InvalidInput("a pool's turns cannot be shared (--shared)".into()).into(),
        );
    }
    Ok(())
}

/// The ticket `e` asks for, queued with arrival number `arrival`, its waiter's phase started
/// on `clock`.
pub(super) fn new_ticket(
    e: &Enqueue,
    token_hash: String,
    arrival: u64,
    clock: &Clock<'_>,
) -> Ticket {
    Ticket {
        id: e.id.clone(),
        token_hash,
        mode: e.mode,
        state: TicketState::Queued,
        order: e.order.clone(),
        arrival,
        keep: e.keep,
        context: e.context.clone(),
        ttl_ms: e.ttl_ms,
        waiter_ttl_ms: e.waiter_ttl_ms,
        claim_ms: e.claim_ms,
        heartbeat: 0,
        deadline_ms: clock.deadline_ms(e.waiter_ttl_ms),
        claimed: false,
        fence: 0,
        enqueued_wall_ms: clock.wall_ms(),
        granted_wall_ms: 0,
        job: None,
        once: e.once,
        stop_asked: None,
        override_freeze: e.override_freeze.clone(),
        ci_run: e.ci_run.clone(),
        slots: e.pool.as_ref().map(crate::pool::PoolAsk::ticket_slots),
    }
}
