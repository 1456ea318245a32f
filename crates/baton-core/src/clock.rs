//! The two clocks of the design.
//!
//! Clients' clocks do not agree, so expiry is never judged by a client's wall clock:
//! - [`Clock::Store`]: the store has a clock every participant shares (PostgreSQL, Redis; on
//!   SQLite the host's boot-time clock and boot id). Deadlines are stored on it.
//! - [`Clock::Observed`]: the store has none (etcd, DynamoDB). An observer judges a lease ended
//!   only after it has seen the same (ticket, heartbeat) unchanged for the lease's whole
//!   duration on its own monotonic clock, so skew between clients does not matter.
//!
//! Both carry the caller's wall time, used for display and for the hybrid fence only.

use std::collections::HashMap;

use crate::doc::{Doc, Ticket};
use crate::lease;

/// The time an [`apply`](crate::apply()) runs at, as read by the coordinator.
#[derive(Clone, Copy, Debug)]
pub enum Clock<'a> {
    /// The store's shared clock.
    Store {
        /// Now, in ms on the store's clock, as the caller estimates it: never ahead of the
        /// store's time, and at most `uncertain_ms` behind it.
        now_ms: u64,
        /// How far behind `now_ms` may be (an S3 server's `Date` has whole seconds: 1000).
        /// Deadlines are set from such estimates, so one may be up to this early; a phase
        /// therefore ends only once `now_ms` is this far past its deadline, which can never
        /// be before the phase's full duration has passed on the store's clock.
        uncertain_ms: u64,
        /// The clock's identity; deadlines made on another epoch are void.
        epoch: &'a str,
        /// The caller's wall clock, ms since the Unix epoch.
        wall_ms: u64,
    },
    /// Observation of heartbeats.
    Observed {
        /// What this caller has seen of the key so far.
        observer: &'a Observer,
        /// Now, on the caller's monotonic clock.
        mono_ms: u64,
        /// The caller's wall clock, ms since the Unix epoch.
        wall_ms: u64,
    },
}

impl Clock<'_> {
    /// The caller's wall clock.
    pub fn wall_ms(&self) -> u64 {
        match *self {
            Clock::Store { wall_ms, .. } | Clock::Observed { wall_ms, .. } => wall_ms,
        }
    }

    /// Job time now ([`crate::job`]): the store's clock where it has one, else the caller's
    /// wall clock. It decides only when a job is ready, never who holds.
    pub fn job_now_ms(&self) -> u64 {
        match *self {
            Clock::Store { now_ms, .. } => now_ms,
            Clock::Observed { wall_ms, .. } => wall_ms,
        }
    }

    /// Whether `ticket`'s current phase (waiter lease, claim window or lease) has ended. A job
    /// waiting for a worker has no phase: nobody refreshes it, and it waits as long as it must.
    pub fn has_expired(&self, ticket: &Ticket) -> bool {
        if ticket.is_waiting_job() {
            return false;
        }
        match *self {
            Clock::Store {
                now_ms,
                uncertain_ms,
                ..
            } => ticket
                .deadline_ms
                .is_some_and(|d| lease::phase_ended_on_store_clock(now_ms, d, uncertain_ms)),
            Clock::Observed {
                observer, mono_ms, ..
            } => observer.has_expired(ticket, mono_ms),
        }
    }

    /// The deadline to store for a phase of `phase_ms` starting now (`None` when observed).
    pub fn deadline_ms(&self, phase_ms: u64) -> Option<u64> {
        match *self {
            Clock::Store { now_ms, .. } => Some(now_ms.saturating_add(phase_ms)),
            Clock::Observed { .. } => None,
        }
    }
}

/// What one client has seen of one key: for each live ticket, the heartbeat it last saw and
/// when (on the client's monotonic clock) it first saw that heartbeat.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    seen: HashMap<String, (u64, u64)>,
}

impl Observer {
    /// Records a reading of the key's document taken at `mono_ms`.
    pub fn observe(&mut self, doc: &Doc, mono_ms: u64) {
        self.seen
            .retain(|id, _| doc.tickets.iter().any(|t| &t.id == id));
        for ticket in &doc.tickets {
            let entry = self
                .seen
                .entry(ticket.id.clone())
                .or_insert((ticket.heartbeat, mono_ms));
            if entry.0 != ticket.heartbeat {
                *entry = (ticket.heartbeat, mono_ms);
            }
        }
    }

    /// Whether this observer has seen `ticket` at its current heartbeat, unchanged, for the
    /// whole of its current phase.
    pub fn has_expired(&self, ticket: &Ticket, mono_ms: u64) -> bool {
        match self.seen.get(&ticket.id) {
            Some(&(heartbeat, since_ms)) if heartbeat == ticket.heartbeat => {
                lease::phase_ended_by_observation(since_ms, mono_ms, ticket.phase_ms())
            }
            _ => false,
        }
    }

    /// When, on the observer's monotonic clock, `ticket`'s phase will have been seen unchanged
    /// for its whole duration (if it has been seen at its current heartbeat).
    pub fn expires_at_mono_ms(&self, ticket: &Ticket) -> Option<u64> {
        match self.seen.get(&ticket.id) {
            Some(&(heartbeat, since_ms)) if heartbeat == ticket.heartbeat => Some(
                lease::observed_phase_ends_local_ms(since_ms, ticket.phase_ms()),
            ),
            _ => None,
        }
    }
}
