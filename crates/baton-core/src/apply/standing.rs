//! What an operation answers about a ticket: its standing while it lives (in the window, or
//! waiting in the backlog's tail), or what became of it, from the marks a finished ticket leaves
//! (so the retry of an operation is answered as the first attempt was).

use super::{jobs, Work};
use crate::doc::{token_hash, Doc, Outcome, Ticket, TicketState};
use crate::limits::{self, FINISHED_REMEMBERED};
use crate::op::{Refusal, Reply, TicketStatus, TicketView};

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
        slots: held_slots(ticket),
    })
}

/// The slots `ticket` holds on a pool (none while queued).
fn held_slots(ticket: &Ticket) -> Vec<String> {
    ticket
        .slots
        .as_ref()
        .map(|part| part.held.clone())
        .unwrap_or_default()
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
        slots: Vec::new(),
    }
}

impl Work<'_> {
    /// Whether every ticket that ended since the uncertain attempt of a retry still has its
    /// mark (always, for a first attempt), and, for an arrival taken in, every turn recorded
    /// unsettled since its owner's read is still remembered: then a ticket not found was never
    /// there.
    pub(super) fn marks_cover_retry(&self) -> bool {
        let finishes = self.finishes_seen.is_none_or(|seen| {
            self.doc.finishes.saturating_sub(seen) <= FINISHED_REMEMBERED as u64
        });
        let unsettled = self
            .unsettled_seen
            .is_none_or(|seen| crate::arrival::remembers_since(self.doc.unsettled.as_ref(), seen));
        finishes && unsettled
    }

    /// `refusal` for a ticket not found, or [`Refusal::Uncertain`] when it may have been
    /// forgotten since a retry's uncertain attempt.
    pub(super) fn not_found(&self, refusal: Refusal) -> Refusal {
        if self.marks_cover_retry() {
            refusal
        } else {
            Refusal::Uncertain
        }
    }

    /// The live ticket holding `token`, or the refusal that says what became of it.
    pub(super) fn live_by_token(&self, token: &str) -> Result<usize, Refusal> {
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
    pub(super) fn ended_by_hash(&self, hash: &str) -> Result<TicketView, Refusal> {
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

    /// The reply about the live ticket `idx`, naming it as the one whose owner is looking (a
    /// grant to it in this same operation needs no claim).
    pub(super) fn live_reply(&self, idx: usize) -> (Reply, Option<String>) {
        let id = self.doc.tickets[idx].id.clone();
        (Reply::Ticket(self.view(&id)), Some(id))
    }

    /// How ticket `id` stands now: live, ended in the backlog, or finished.
    pub(super) fn view(&self, id: &str) -> TicketView {
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
