//! Joining a key's queue, for a ticket (`enqueue`) and a job (`submit`) alike: room under the
//! key's limit and bound, an order value of the live kind, and what joining does to those
//! already there (`--supersede`, `--cancel-running`).

use super::Work;
use crate::backlog::Cut;
use crate::doc::{Outcome, TicketState};
use crate::limits::{self, LIVE_TICKETS_MAX};
use crate::op::Refusal;
use crate::order;

/// Longest "who asked" a holder asked to stop is told ([`crate::Ticket::stop_asked`]).
pub const STOP_ASKED_MAX_BYTES: usize = 160;

impl Work<'_> {
    /// `--cancel-running`: marks every holder (a `baton run`, or a job a worker runs) not
    /// queued with `keep` as asked to stop by the ticket (or job) `id` just queued. Nothing
    /// ends here: each holder stops its command and releases (as superseded), or its lease runs
    /// out, and only then is the next ticket granted.
    pub(super) fn ask_holders_to_stop(&mut self, id: &str, context: &str) {
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
    pub(super) fn admit(
        &mut self,
        order: Option<&str>,
        limit: u32,
        slots: &[String],
        max_live: u32,
    ) -> Result<(), Refusal> {
        self.make_room(limit, slots, max_live)?;
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

    /// Checks that a new ticket expecting `limit` (and the pool `slots`, empty for none) may
    /// join (the key's limit and slots, the bound on live tickets `max_live`), and sets the
    /// key's limit and slots when it is idle.
    fn make_room(&mut self, limit: u32, slots: &[String], max_live: u32) -> Result<(), Refusal> {
        check_bound(max_live, 0)?;
        let busy = !self.doc.tickets.is_empty() || self.doc.backlog.is_some();
        if busy && self.doc.slots != slots {
            return Err(Refusal::SlotsMismatch {
                asked: slots.join(","),
                current: self.doc.slots.join(","),
            });
        }
        if busy && self.doc.limit != limit {
            return Err(Refusal::LimitMismatch {
                asked: limit,
                current: self.doc.limit,
            });
        }
        check_bound(max_live, self.doc.tickets.len() as u64)?;
        if !busy {
            self.doc.limit = limit;
            self.doc.slots = slots.to_vec();
        }
        Ok(())
    }

    /// Cancels as superseded every queued ticket or job without `keep` that sorts before the
    /// ticket or job `id` just queued (in the window or the backlog's tail); backlog jobs
    /// before it end when taken in (a [`Cut`]).
    pub(super) fn supersede_before(&mut self, id: &str) {
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
}

/// Checks the bound on live tickets a joining ticket asks for, `max_live`, and that `live`
/// tickets leave it room.
pub(super) fn check_bound(max_live: u32, live: u64) -> Result<(), Refusal> {
    if !(1..=LIVE_TICKETS_MAX).contains(&max_live) {
        return Err(limits::InvalidInput(format!(
            "the live-ticket bound is {max_live}; it must be between 1 and {LIVE_TICKETS_MAX}"
        ))
        .into());
    }
    if live >= u64::from(max_live) {
        return Err(Refusal::QueueFull { max: max_live });
    }
    Ok(())
}
