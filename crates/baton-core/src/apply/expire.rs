//! The first step of every operation: end what the clock says has ended. A store clock that
//! restarted ends everything; held leases and unclaimed grants expire; silent waiters are
//! abandoned; a running job whose worker stopped renewing ends its run.

use super::{jobs, Work};
use crate::clock::Clock;
use crate::doc::{Outcome, TicketState};
use crate::job::RunEnd;

impl Work<'_> {
    /// Ends what the clock says has ended (step 1 of every operation), after adopting the
    /// store's clock on a document written without one.
    pub(super) fn expire(&mut self) {
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
                // again at `idx` (examined once more: it no longer lapses) or is dead. Unless
                // the worker had said its command succeeded: then the job has succeeded.
                self.end_lapsed_run(idx, None);
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
                (TicketState::Held, true) => self.end_lapsed_run(idx, Some(reason)),
                (TicketState::Held, false) => {
                    self.finish(idx, Outcome::Expired, false, Some(reason.into()), None);
                }
                (TicketState::Queued, false) => {
                    self.finish(idx, Outcome::Abandoned, false, Some(reason.into()), None);
                }
            }
        }
    }

    /// Ends the run of the running job `idx` whose lease lapsed (`why`: other than running
    /// out): as succeeded if its worker had said its command succeeded
    /// ([`crate::job::JobState::succeeded_run`]), else as a failed attempt.
    fn end_lapsed_run(&mut self, idx: usize, why: Option<&str>) {
        let said_succeeded = self.doc.tickets[idx]
            .job
            .as_deref()
            .is_some_and(|job| job.succeeded_run.is_some_and(|run| run == job.runs));
        if said_succeeded {
            let reason = "its worker stopped after saying its command succeeded";
            self.finish(idx, Outcome::Succeeded, false, Some(reason.into()), None);
        } else {
            let error = why.map(str::to_owned);
            self.end_run(idx, RunEnd::LeaseRanOut, error, None, 0);
        }
    }
}
