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
///
/// A sighting belongs to one life of a ticket, its id *and its arrival*, never to its id
/// alone: a job's id comes back when a dead job is revived (`baton retry`) or submitted again,
/// and the new ticket's heartbeat starts over. An observer that saw the old ticket at
/// heartbeat 1 and did not read the document between its end and the new one's claim would
/// otherwise take the new run, at heartbeat 1 again, for one it had watched for a whole lease,
/// and end it at once. Arrivals are handed out by the key's document, strictly increasing, so
/// an id that comes back comes back with a new arrival; a job put back in the queue after a
/// run keeps its arrival, and its heartbeat goes on rising.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    /// By ticket id (unique among a document's tickets).
    seen: HashMap<String, Sighting>,
}

#[derive(Clone, Copy, Debug)]
struct Sighting {
    arrival: u64,
    heartbeat: u64,
    since_ms: u64,
}

impl Observer {
    /// Records a reading of the key's document taken at `mono_ms`.
    pub fn observe(&mut self, doc: &Doc, mono_ms: u64) {
        self.seen.retain(|id, _| doc.by_id(id).is_some());
        for ticket in &doc.tickets {
            let now = Sighting {
                arrival: ticket.arrival,
                heartbeat: ticket.heartbeat,
                since_ms: mono_ms,
            };
            let entry = self.seen.entry(ticket.id.clone()).or_insert(now);
            if entry.arrival != now.arrival || entry.heartbeat != now.heartbeat {
                *entry = now;
            }
        }
    }

    /// When, on the observer's monotonic clock, it first saw `ticket` as it is now: this life
    /// of it, at its current heartbeat.
    fn seen_since_ms(&self, ticket: &Ticket) -> Option<u64> {
        self.seen
            .get(&ticket.id)
            .filter(|s| s.arrival == ticket.arrival && s.heartbeat == ticket.heartbeat)
            .map(|s| s.since_ms)
    }

    /// Whether this observer has seen `ticket` at its current heartbeat, unchanged, for the
    /// whole of its current phase.
    pub fn has_expired(&self, ticket: &Ticket, mono_ms: u64) -> bool {
        self.seen_since_ms(ticket).is_some_and(|since_ms| {
            lease::phase_ended_by_observation(since_ms, mono_ms, ticket.phase_ms())
        })
    }

    /// When, on the observer's monotonic clock, `ticket`'s phase will have been seen unchanged
    /// for its whole duration (if it has been seen at its current heartbeat).
    pub fn expires_at_mono_ms(&self, ticket: &Ticket) -> Option<u64> {
        self.seen_since_ms(ticket)
            .map(|since_ms| lease::observed_phase_ends_local_ms(since_ms, ticket.phase_ms()))
    }
}
