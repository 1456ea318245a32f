//! Jobs that wait in the written segments of a key's backlog ([`baton_core::backlog`]):
//! finding one, cancelling one, and how one ended by its final history entry.

use baton_core::backlog::{segment_record, Segment, SEGMENT_JOBS};
use baton_core::{Doc, JobState, Op, Request, Ticket, TicketState};

use super::standing::{ended_in_backlog, JobEnd, JobStanding};
use crate::coordinator::{Coordinator, Executed};
use crate::error::ClientError;
use crate::turn::ids;
/// Where a job waits in a written segment of its key's backlog ([`baton_core::backlog`]).
#[derive(Clone, Debug)]
pub struct InBacklog {
    /// The backlog's generation.
    pub generation: u64,
    /// The segment's number.
    pub number: u64,
    /// Its place in the segment.
    pub index: usize,
    /// The job, as submitted.
    pub ticket: Ticket,
}

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

/// Finds job `id` in the written segments of `doc`'s backlog, oldest first: one read per
/// segment, so only for a job known to have been submitted and not found in the document.
pub async fn find_in_backlog(
    coord: &Coordinator,
    key: &str,
    doc: &Doc,
    id: &str,
) -> Result<Option<InBacklog>, ClientError> {
    let Some(backlog) = &doc.backlog else {
        return Ok(None);
    };
    for number in backlog.first..backlog.next {
        let Some(segment) = read_segment(coord, key, backlog.generation, number).await? else {
            continue;
        };
        if let Some(index) = segment.tickets.iter().position(|t| t.id == id) {
            return Ok(Some(InBacklog {
                generation: backlog.generation,
                number,
                index,
                ticket: segment.tickets[index].clone(),
            }));
        }
    }
    Ok(None)
}

/// Cancels job `id` of `key` if it waits in a written segment of the backlog (where a plain
/// cancel cannot see it); `None` if it is not there.
pub async fn cancel_in_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
    by: &str,
) -> Result<Option<Executed>, ClientError> {
    let snapshot = coord.read(key).await?;
    let Some(doc) = &snapshot.doc else {
        return Ok(None);
    };
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Ok(None);
    };
    let op = Op::CancelInBacklog {
        id: id.to_owned(),
        generation: found.generation,
        segment: found.number,
        by: by.to_owned(),
        withdrawn: None,
    };
    let mut request = Request::new(ids::new_attempt_id(), op);
    coord.execute(key, &mut request).await.map(Some)
}

/// Segment `number` of backlog `generation` of `key`, if it is there and reads.
pub(super) async fn read_segment(
    coord: &Coordinator,
    key: &str,
    generation: u64,
    number: u64,
) -> Result<Option<Segment>, ClientError> {
    let name = segment_record(generation, number);
    let bytes = coord.store().get_record(key, &name).await?;
    Ok(bytes.and_then(|b| Segment::decode(&b, generation, number).ok()))
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
