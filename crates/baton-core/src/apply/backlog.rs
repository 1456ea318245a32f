//! The backlog's part of `apply` ([`crate::backlog`]): taking tickets into the window, routing a
//! submit or a plain turn to the tail and writing the tail out, and the cancel or withdrawal of
//! a ticket that waits there.

use super::{Answer, Work};
use crate::backlog::{
    Backlog, Dropped, Segment, PENDING_MAX, REFILL_BELOW, SEGMENT_JOBS, WINDOW_JOBS,
};
use crate::doc::{token_hash, Outcome, Ticket, TicketState};
use crate::op::{CancelledTicket, Enqueue, Refusal, Reply, TicketView};

impl Work<'_> {
    /// When the window runs low, takes the backlog's next tickets into it: `segment` if it is
    /// the oldest written one, else (none written) the whole tail, which needs no read. Tickets
    /// an operator cancelled, a cut ended or a waiter withdrew while they were in the backlog
    /// end now, with their history entries. A turn starts its waiter lease now: it had none in
    /// the backlog.
    pub(super) fn take_in(&mut self, segment: Option<&Segment>) {
        if self.doc.window_ahead_of_backlog() >= REFILL_BELOW {
            return;
        }
        let Some(backlog) = self.doc.backlog.as_mut() else {
            return;
        };
        let tickets = if backlog.has_segments() {
            match segment {
                Some(s) if s.generation == backlog.generation && s.number == backlog.first => {
                    backlog.first += 1;
                    backlog.in_segments =
                        backlog.in_segments.saturating_sub(s.tickets.len() as u64);
                    s.tickets.clone()
                }
                _ => return,
            }
        } else {
            // The tail moves to the next number: a copy of it written out by a writer whose
            // document write failed is never counted.
            backlog.next += 1;
            backlog.first = backlog.next;
            std::mem::take(&mut backlog.tail)
        };
        let ready_now_below = backlog.ready_now_below;
        let now_ms = self.clock.job_now_ms();
        let mut taken = Vec::with_capacity(tickets.len());
        let mut ended = Vec::new();
        for mut ticket in tickets {
            if self.doc.by_id(&ticket.id).is_some() {
                continue;
            }
            let backlog = self.doc.backlog.as_mut().expect("present above");
            backlog.taken_through = backlog.taken_through.max(ticket.arrival);
            if let Some(fate) = backlog.fate(&ticket) {
                ended.push((ticket.id.clone(), fate));
            }
            if ticket.arrival < ready_now_below {
                // Queued before the store's clock restarted: its time meant the old clock.
                if let Some(job) = ticket
                    .job
                    .as_deref_mut()
                    .filter(|j| j.ready_at_ms.is_some())
                {
                    job.ready_at_ms = Some(now_ms);
                }
            }
            if ticket.job.is_none() {
                ticket.deadline_ms = self.clock.deadline_ms(ticket.waiter_ttl_ms);
                ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
            }
            taken.push(ticket.id.clone());
            self.doc.tickets.push(ticket);
        }
        for (id, (outcome, reason)) in ended {
            if let Some(idx) = self.doc.tickets.iter().position(|t| t.id == id) {
                self.finish(idx, outcome, false, Some(reason), None);
            }
        }
        let backlog = self.doc.backlog.as_mut().expect("present above");
        backlog.forget_settled(&taken);
        if backlog.is_empty() {
            self.doc.backlog = None;
        }
    }

    /// Whether a new plain job goes to the backlog: one is there already, or the window is
    /// full. Jobs with an order value sort before every plain one, so they stay in the window.
    pub(super) fn goes_to_backlog(&self, order: Option<&str>) -> bool {
        order.is_none() && (self.doc.backlog.is_some() || self.doc.window_waiting() >= WINDOW_JOBS)
    }

    /// Whether a new turn goes to the backlog: its client can wait there, it is plain (what an
    /// order value, a run-once spec, a pool, `--supersede`, `--cancel-running` or a freeze
    /// override do is decided in the window), and the window is full or a backlog is there.
    pub(super) fn turn_goes_to_backlog(&self, e: &Enqueue) -> bool {
        let plain = e.order.is_none()
            && e.once.is_none()
            && e.pool.is_none()
            && !e.supersede
            && !e.cancel_running
            && e.override_freeze.is_none();
        e.may_wait_in_backlog && plain && self.goes_to_backlog(None)
    }

    /// Queues the plain turn `e` in the backlog's tail ([`Self::turn_goes_to_backlog`]): the
    /// key's limit must be the one it expects, and the live tickets, the backlog's counted,
    /// fewer than its bound. The retry of an enqueue that may have landed in a tail written out
    /// since is refused as uncertain: the caller looks in the segments.
    pub(super) fn enqueue_in_backlog(&mut self, e: &Enqueue, hash: String) -> Answer {
        let segments = self.doc.backlog.as_ref().is_some_and(|b| b.has_segments());
        if segments && self.finishes_seen.is_some() {
            return Err(Refusal::Uncertain);
        }
        self.fits_key(e.limit, &[])?;
        let in_backlog = self.doc.backlog.as_ref().map_or(0, Backlog::len);
        let live = (self.doc.tickets.len() as u64).saturating_add(in_backlog);
        super::admit::check_bound(e.max_live, live)?;
        let ticket = super::turns::new_ticket(e, hash, self.doc.next_arrival, self.clock);
        self.doc.next_arrival += 1;
        self.push_to_backlog(ticket)?;
        Ok((Reply::Ticket(self.view(&e.id)), None))
    }

    /// Checks that a ticket joining the backlog expects the key's limit and pool `slots`.
    pub(super) fn fits_key(&self, limit: u32, slots: &[String]) -> Result<(), Refusal> {
        if self.doc.slots != slots {
            return Err(Refusal::SlotsMismatch {
                asked: slots.join(","),
                current: self.doc.slots.join(","),
            });
        }
        if self.doc.limit != limit {
            return Err(Refusal::LimitMismatch {
                asked: limit,
                current: self.doc.limit,
            });
        }
        Ok(())
    }

    /// The id of the turn waiting in the backlog's tail with `token`, if one does; refused if a
    /// cancel, a cut or its waiter ended it there.
    pub(super) fn turn_in_tail(&self, token: &str) -> Result<Option<String>, Refusal> {
        crate::limits::check_token(token)?;
        let hash = token_hash(token);
        let Some(backlog) = self.doc.backlog.as_ref() else {
            return Ok(None);
        };
        let Some(ticket) = backlog.tail.iter().find(|t| t.token_hash == hash) else {
            return Ok(None);
        };
        match self.backlog_fate_view(&ticket.id) {
            Some(TicketView::Finished {
                id,
                outcome,
                forced,
            }) => Err(Refusal::Ended {
                id,
                outcome,
                forced,
            }),
            _ => Ok(Some(ticket.id.clone())),
        }
    }

    /// Appends `ticket` (a new waiting job) to the backlog's tail, first writing a full tail
    /// out as a segment: the caller writes its record before the document.
    pub(super) fn push_to_backlog(&mut self, ticket: Ticket) -> Result<(), Refusal> {
        let arrival = ticket.arrival;
        let backlog = self
            .doc
            .backlog
            .get_or_insert_with(|| Backlog::new(arrival));
        if backlog.len() >= crate::backlog::BACKLOG_MAX {
            return Err(Refusal::BacklogFull {
                max: crate::backlog::BACKLOG_MAX,
            });
        }
        backlog.waiters |= ticket.job.is_none();
        if backlog.tail.len() >= SEGMENT_JOBS {
            let segment = Segment {
                generation: backlog.generation,
                number: backlog.next,
                tickets: std::mem::take(&mut backlog.tail),
            };
            backlog.in_segments += segment.tickets.len() as u64;
            backlog.next += 1;
            self.segment_out = Some(segment);
        }
        backlog.tail.push(ticket);
        Ok(())
    }

    /// The cancel of a job that waits in the backlog, if `id` is one: it joins the backlog's
    /// cancelled ids. A job already cancelled there answers as cancelled (a retry), one a cut
    /// ended answers as that ended it.
    pub(super) fn cancel_in_backlog(
        &mut self,
        id: &str,
        in_segment: Option<(u64, u64)>,
        by: &str,
        withdrawn: Option<Outcome>,
    ) -> Option<Answer> {
        let backlog = self.doc.backlog.as_mut()?;
        let cancelled = || {
            let ended = CancelledTicket::new(id.to_owned(), false);
            Ok((Reply::Cancelled(vec![ended]), None))
        };
        if backlog.dropped.iter().any(|d| d.id == id) {
            return Some(cancelled());
        }
        let in_tail = backlog.tail.iter().find(|t| t.id == id);
        if let Some((outcome, _)) = in_tail.and_then(|t| backlog.fate(t)) {
            return Some(Err(Refusal::Ended {
                id: id.to_owned(),
                outcome,
                forced: false,
            }));
        }
        let in_written = in_segment.is_some_and(|(generation, number)| {
            generation == backlog.generation && (backlog.first..backlog.next).contains(&number)
        });
        if in_tail.is_none() && !in_written {
            return None;
        }
        if backlog.dropped.len() >= PENDING_MAX {
            return Some(Err(Refusal::BacklogBusy));
        }
        backlog.dropped.push(Dropped {
            id: id.to_owned(),
            by: by.to_owned(),
            withdrawn,
        });
        Some(cancelled())
    }

    /// A waiter withdraws its own turn from the backlog's tail (`release` with a token found
    /// there): it ends with `outcome` when taken in. `None` if the token is not in the tail.
    pub(super) fn withdraw_from_tail(&mut self, token: &str, outcome: Outcome) -> Option<Answer> {
        let hash = token_hash(token);
        let id = self
            .doc
            .backlog
            .as_ref()?
            .tail
            .iter()
            .find(|t| t.token_hash == hash)?
            .id
            .clone();
        Some(self.withdraw(&id, None, outcome))
    }

    /// A waiter withdraws its own turn `id`, which it last saw in written segment
    /// `in_segment` of the backlog: it ends with `outcome` when taken in. Taken in since, it
    /// ends now, as a release of a queued ticket would end it.
    pub(super) fn withdraw_from_segment(
        &mut self,
        id: &str,
        in_segment: (u64, u64),
        outcome: Outcome,
    ) -> Answer {
        crate::limits::check_id(id)?;
        self.withdraw(id, Some(in_segment), outcome)
    }

    fn withdraw(&mut self, id: &str, in_segment: Option<(u64, u64)>, outcome: Outcome) -> Answer {
        if !matches!(outcome, Outcome::Cancelled | Outcome::TimedOut) {
            let state = TicketState::Queued;
            return Err(Refusal::BadOutcome { state, outcome });
        }
        let finished = || {
            let (id, forced) = (id.to_owned(), false);
            Ok((
                Reply::Ticket(TicketView::Finished {
                    id,
                    outcome,
                    forced,
                }),
                None,
            ))
        };
        if let Some(idx) = self.doc.tickets.iter().position(|t| t.id == id) {
            let state = self.doc.tickets[idx].state;
            if state != TicketState::Queued || self.doc.tickets[idx].job.is_some() {
                return Err(Refusal::BadOutcome { state, outcome });
            }
            let attempt = Some(self.attempt.to_string());
            self.finish(idx, outcome, false, None, attempt);
            return finished();
        }
        match self.cancel_in_backlog(id, in_segment, "", Some(outcome)) {
            Some(Ok(_)) => finished(),
            Some(Err(refusal)) => Err(refusal),
            None => match self.doc.finished.iter().find(|m| m.id == id) {
                Some(mark) if mark.ended_by(self.attempt) => finished(),
                Some(mark) => Err(Refusal::Ended {
                    id: id.to_owned(),
                    outcome: mark.outcome,
                    forced: mark.forced,
                }),
                None => Err(self.not_found(Refusal::UnknownId { id: id.to_owned() })),
            },
        }
    }

    /// How a backlog job that a cancel or a cut ended looks to its owner: finished.
    pub(super) fn backlog_fate_view(&self, id: &str) -> Option<TicketView> {
        let backlog = self.doc.backlog.as_ref()?;
        let outcome = match backlog.tail_job(id) {
            Some(ticket) => backlog.fate(ticket)?.0,
            None => backlog.dropped.iter().find(|d| d.id == id)?.outcome(),
        };
        Some(TicketView::Finished {
            id: id.to_owned(),
            outcome,
            forced: false,
        })
    }
}
