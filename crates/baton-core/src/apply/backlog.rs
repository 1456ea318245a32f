//! The backlog's part of `apply` ([`crate::backlog`]): taking jobs into the window, routing a
//! submit to the tail and writing the tail out, and the cancel of a job that waits there.

use super::{Answer, Work};
use crate::backlog::{Backlog, Dropped, Segment, PENDING_MAX, REFILL_BELOW, SEGMENT_JOBS};
use crate::doc::{Outcome, Ticket};
use crate::op::{CancelledTicket, Refusal, Reply, TicketView};

impl Work<'_> {
    /// When the window runs low, takes the backlog's next jobs into it: `segment` if it is the
    /// oldest written one, else (none written) the whole tail, which needs no read. Jobs an
    /// operator cancelled or a cut ended while they were in the backlog end now, with their
    /// history entries.
    pub(super) fn take_in(&mut self, segment: Option<&Segment>) {
        if self.doc.window_jobs() >= REFILL_BELOW {
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
        order.is_none()
            && (self.doc.backlog.is_some() || self.doc.window_jobs() >= crate::backlog::WINDOW_JOBS)
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
        });
        Some(cancelled())
    }

    /// How a backlog job that a cancel or a cut ended looks to its owner: finished.
    pub(super) fn backlog_fate_view(&self, id: &str) -> Option<TicketView> {
        let backlog = self.doc.backlog.as_ref()?;
        let outcome = match backlog.tail_job(id) {
            Some(ticket) => backlog.fate(ticket)?.0,
            None if backlog.dropped.iter().any(|d| d.id == id) => Outcome::Cancelled,
            None => return None,
        };
        Some(TicketView::Finished {
            id: id.to_owned(),
            outcome,
            forced: false,
        })
    }
}
