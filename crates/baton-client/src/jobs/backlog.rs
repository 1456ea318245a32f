//! How a job that waits in the written segments of a key's backlog ([`baton_core::backlog`])
//! stands, and how a job ended by its final history entry.

use baton_core::backlog::SEGMENT_JOBS;
use baton_core::{Doc, JobState, TicketState};

use super::standing::{ended_in_backlog, JobEnd, JobStanding};
use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::segments::InBacklog;

impl InBacklog {
    /// Where it stands in `doc`, if it still waits in that segment (`None`: taken in since).
    pub(super) fn standing(&self, doc: &Doc) -> Option<JobStanding> {
        let backlog = doc.backlog.as_ref().filter(|b| {
            b.generation == self.generation && (b.first..b.next).contains(&self.number)
        })?;
        if let Some((outcome, reason)) = backlog.fate(&self.ticket) {
            return Some(ended_in_backlog(outcome, reason));
        }
        // Every written segment is a full tail.
        let segments_ahead = usize::try_from(self.number - backlog.first).unwrap_or(usize::MAX);
        let ahead = segments_ahead
            .saturating_mul(SEGMENT_JOBS)
            .saturating_add(self.index);
        Some(JobStanding::Live {
            state: TicketState::Queued,
            position: doc.backlog_position(ahead),
            attempt: self.ticket.job.as_deref().map_or(1, JobState::attempt),
        })
    }
}

/// How job `id` ended, by the history entry that ended it ([`final_finished`]).
pub(super) async fn final_entry(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<JobEnd>, ClientError> {
    Ok(final_finished(coord, key, id)
        .await?
        .map(|finished| JobEnd {
            outcome: finished.outcome,
            forced: finished.forced,
            reason: finished.reason,
            run: finished.job.map_or(0, |j| j.run),
        }))
}

/// What the history entry that ended job `id` says of its last run (its number, and the hash
/// that bound its record), if there is one.
pub(super) async fn final_run(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<baton_core::history::JobRun>, ClientError> {
    Ok(final_finished(coord, key, id).await?.and_then(|f| f.job))
}

/// The history entry that ended job `id`, newest first, looking back through the whole log
/// (in pages) only as far as needed.
async fn final_finished(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<baton_core::Finished>, ClientError> {
    let mut limit = 256;
    loop {
        let entries = coord.store().history_tail(key, limit).await?;
        for entry in &entries {
            let Ok(finished) = baton_core::Finished::decode(&entry.bytes) else {
                continue;
            };
            let requeued = finished.job.as_ref().is_some_and(|j| j.requeued);
            if finished.id == id && !requeued {
                return Ok(Some(finished));
            }
        }
        if entries.len() < limit || limit >= 1 << 20 {
            return Ok(None);
        }
        limit *= 4;
    }
}
