//! How a live ticket ends: out of the document, into the history entry and the key's summary,
//! leaving a mark that answers the retry of the operation that ended it.

use super::Work;
use crate::doc::{FinishedMark, Outcome, Ticket, TicketState};
use crate::history::{Finished, OnceRun};
use crate::limits::{FINISHED_REMEMBERED, HOLD_SAMPLES};

impl Work<'_> {
    /// Ends the live ticket `idx`: out of the document, into the history and the summary.
    pub(super) fn finish(
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
    pub(super) fn record_hold(&mut self, held: &Ticket, outcome: Outcome) {
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
}
