//! The last step of every operation: walk the queue in order and grant while the head fits
//! beside the holders, stopping at the first that does not (no barging), or at a job (only a
//! worker's claim takes it, `apply/jobs.rs`). On a pool a ticket waiting for a busy slot by
//! name is passed by those that take other slots ([`crate::pool`]). With the fences and phases
//! a grant starts.

use super::Work;
use crate::doc::{Mode, TicketState};
use crate::lease;
use crate::once;
use crate::op::Refusal;
use crate::pool::{Take, Walk};

/// What the grant walk does with a queued ticket.
enum Place {
    /// Grant it (with these slots, on a pool).
    Grant(Option<Vec<String>>),
    /// It waits; the walk goes on to the next (a pool's ticket waiting for its named slot).
    Skip,
    /// It waits, and so does everyone behind it (no barging).
    Stop,
}

impl Work<'_> {
    /// Grants in queue order while the head fits beside the holders.
    pub(super) fn grant(&mut self, looking: Option<&str>) -> Result<(), Refusal> {
        let (mut n_normal, mut n_shared) = self.doc.holding();
        let mut queued: Vec<usize> = (0..self.doc.tickets.len())
            .filter(|&i| self.doc.tickets[i].state == TicketState::Queued)
            .collect();
        queued.sort_by(|&a, &b| {
            self.doc.tickets[a]
                .queue_key()
                .cmp(&self.doc.tickets[b].queue_key())
        });
        let mut pool = Walk::new(&self.doc);
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
            let slots = match self.place(idx, n_normal, n_shared, &mut pool) {
                Place::Grant(slots) => slots,
                Place::Skip => continue,
                Place::Stop => break,
            };
            let fence = self.next_fence()?;
            let claimed = looking == Some(self.doc.tickets[idx].id.as_str());
            let ticket = &mut self.doc.tickets[idx];
            ticket.state = TicketState::Held;
            ticket.fence = fence;
            ticket.granted_wall_ms = self.clock.wall_ms();
            ticket.claimed = claimed;
            if let (Some(part), Some(slots)) = (ticket.slots.as_mut(), slots) {
                part.held = slots;
            }
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

    /// Whether queued ticket `idx` is granted now, beside `n_normal` and `n_shared` holders
    /// and the pool's slots as the walk has them: never while the key is paused (but for the
    /// queue up to an override), as its mode fits for a lock or semaphore, as
    /// [`Walk::take`] says for a pool.
    fn place(&self, idx: usize, n_normal: u32, n_shared: u32, pool: &mut Walk) -> Place {
        let ticket = &self.doc.tickets[idx];
        // Paused: waiters keep their places; only the queue up to an override moves.
        if self.doc.frozen_for(ticket, self.clock.wall_ms()) {
            return Place::Stop;
        }
        if let Some(ask) = &ticket.slots {
            return match pool.take(&self.doc.slots, ask) {
                Take::Slots(slots) => Place::Grant(Some(slots)),
                Take::Wait => Place::Skip,
                Take::Block => Place::Stop,
            };
        }
        match ticket.mode.fits((n_normal, n_shared), self.doc.limit) {
            true => Place::Grant(None),
            false => Place::Stop,
        }
    }

    /// Hands out the next fence: strictly above the last one, and at least the granting
    /// client's wall time in µs, so fences keep increasing even if a store loses the counter.
    pub(super) fn next_fence(&mut self) -> Result<u64, Refusal> {
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
    pub(super) fn start_phase(&mut self, idx: usize, phase_ms: u64) {
        let deadline_ms = self.clock.deadline_ms(phase_ms);
        let ticket = &mut self.doc.tickets[idx];
        ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
        ticket.deadline_ms = deadline_ms;
    }

    /// Beats ticket `idx` within its phase (a refresh, a claim, a renewal): a new heartbeat,
    /// and a deadline `phase_ms` from now that never moves the current one earlier
    /// ([`lease::extended_deadline_store_ms`]).
    pub(super) fn beat(&mut self, idx: usize, phase_ms: u64) {
        let new_ms = self.clock.deadline_ms(phase_ms);
        let ticket = &mut self.doc.tickets[idx];
        ticket.heartbeat = ticket.heartbeat.wrapping_add(1);
        ticket.deadline_ms = lease::extended_deadline_store_ms(ticket.deadline_ms, new_ms);
    }
}
