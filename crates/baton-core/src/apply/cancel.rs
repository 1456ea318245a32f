//! The cancels of an operator: one ticket or job by id (`baton cancel`), or every queued
//! ticket of a key (`baton cancel --queued`).

use super::{Answer, Work};
use crate::backlog::Cut;
use crate::doc::{Outcome, TicketState};
use crate::op::{CancelledTicket, Refusal, Reply};

impl Work<'_> {
    /// An operator cancels ticket or job `id`: queued, it ends; held, it is force-released. A
    /// job in the backlog's tail, or in written segment `in_segment` (`(generation, number)`,
    /// found there by the caller), ends when it is taken in.
    pub(super) fn cancel(
        &mut self,
        id: &str,
        in_segment: Option<(u64, u64)>,
        by: &str,
        why: Option<&str>,
    ) -> Answer {
        crate::limits::check_id(id)?;
        crate::limits::check_context(by)?;
        if let Some(why) = why {
            crate::limits::check_reason(why)?;
        }
        if let Some(idx) = self.doc.tickets.iter().position(|t| t.id == id) {
            let forced = self.doc.tickets[idx].state == TicketState::Held;
            let reason = Some(match why {
                Some(why) => why.to_owned(),
                None => crate::op::cancel_reason(forced, by),
            });
            let attempt = Some(self.attempt.to_string());
            self.finish(idx, Outcome::Cancelled, forced, reason, attempt);
            let ended = CancelledTicket::new(id.to_owned(), forced);
            return Ok((Reply::Cancelled(vec![ended]), None));
        }
        if let Some(answer) = self.cancel_in_backlog(id, in_segment, by, None) {
            return answer;
        }
        match self.doc.finished.iter().find(|m| m.id == id) {
            Some(mark) if mark.ended_by(self.attempt) => {
                let ended = CancelledTicket::new(id.to_owned(), mark.forced);
                Ok((Reply::Cancelled(vec![ended]), None))
            }
            Some(mark) => Err(Refusal::Ended {
                id: id.to_owned(),
                outcome: mark.outcome,
                forced: mark.forced,
            }),
            None => Err(self.not_found(Refusal::UnknownId { id: id.to_owned() })),
        }
    }

    /// Cancels every queued ticket of the key, and (by a cut) every job waiting in its backlog.
    pub(super) fn cancel_queued(&mut self, by: &str) -> Answer {
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
}
