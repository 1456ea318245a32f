//! Tickets (jobs and turns) that wait in the written segments of a key's backlog
//! ([`baton_core::backlog`]): reading a segment, finding a ticket there, and cancelling or
//! withdrawing one, which a plain cancel or release cannot see.

use baton_core::backlog::{segment_record, Segment};
use baton_core::{Doc, Op, Request, Ticket};

use crate::coordinator::{Coordinator, Executed};
use crate::error::ClientError;
use crate::turn::ids;

/// Where a job or turn waits in a written segment of its key's backlog ([`baton_core::backlog`]).
#[derive(Clone, Debug)]
pub struct InBacklog {
    /// The backlog's generation.
    pub generation: u64,
    /// The segment's number.
    pub number: u64,
    /// Its place in the segment.
    pub index: usize,
    /// The ticket, as queued.
    pub ticket: Ticket,
}

/// Finds job or turn `id` in the written segments of `doc`'s backlog, oldest first: one read per
/// segment, so only for a ticket known to have been submitted and not found in the document.
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

/// Cancels job or turn `id` of `key` if it waits in a written segment of the backlog (where a
/// plain cancel cannot see it); `None` if it is not there. With `withdrawn`, its own waiter
/// withdraws it, and it ends so (timed out, or cancelled).
pub async fn cancel_in_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
    by: &str,
    withdrawn: Option<baton_core::Outcome>,
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
        withdrawn,
    };
    let mut request = Request::new(ids::new_attempt_id(), op);
    coord.execute(key, &mut request).await.map(Some)
}

/// Segment `number` of backlog `generation` of `key`, if it is there and reads.
pub(crate) async fn read_segment(
    coord: &Coordinator,
    key: &str,
    generation: u64,
    number: u64,
) -> Result<Option<Segment>, ClientError> {
    let name = segment_record(generation, number);
    let bytes = coord.store().get_record(key, &name).await?;
    Ok(bytes.and_then(|b| Segment::decode(&b, generation, number).ok()))
}
