//! Where a job stands — live, in the backlog, or ended — as the document says it.

use baton_core::{Doc, Outcome, TicketState};
/// How a job ended, as [`wait`](super::wait()) found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    /// Its final outcome: `succeeded`, `dead`, `cancelled` or `superseded`.
    pub outcome: Outcome,
    /// By an operator's forced cancel.
    pub forced: bool,
    /// Why, when the history says (a dead job's last error, say).
    pub reason: Option<String>,
    /// Its last run (0: it never ran), when the history says.
    pub run: u32,
}

/// Where a job stands, for [`wait`](super::wait())'s progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStanding {
    /// Live: queued (with its place) or running.
    Live {
        /// Queued or held.
        state: TicketState,
        /// Queued tickets and jobs ahead of it.
        position: usize,
        /// The attempt.
        attempt: u32,
    },
    /// Ended.
    Ended(JobEnd),
    /// Neither live nor found in the key's history.
    Unknown,
}

pub(super) fn live_or_marked(doc: &Doc, id: &str) -> Option<JobStanding> {
    if let Some(status) = baton_core::apply::status_of(doc, id) {
        return Some(JobStanding::Live {
            state: status.state,
            position: status.position,
            attempt: status.job.map_or(1, |j| j.attempt()),
        });
    }
    if let Some(backlog) = &doc.backlog {
        // Ended in the backlog by a cancel or a cut: its history entry comes when it is
        // taken in.
        let fate = match backlog.tail_job(id) {
            Some(ticket) => backlog.fate(ticket),
            None => backlog
                .dropped
                .iter()
                .find(|d| d.id == id)
                .map(|d| (Outcome::Cancelled, d.reason())),
        };
        if let Some((outcome, reason)) = fate {
            return Some(ended_in_backlog(outcome, reason));
        }
    }
    let mark = doc.finished.iter().rev().find(|m| m.id == id)?;
    Some(JobStanding::Ended(JobEnd {
        outcome: mark.outcome,
        forced: mark.forced,
        reason: None,
        run: 0,
    }))
}

pub(super) fn ended_in_backlog(outcome: Outcome, reason: String) -> JobStanding {
    JobStanding::Ended(JobEnd {
        outcome,
        forced: false,
        reason: Some(reason),
        run: 0,
    })
}
