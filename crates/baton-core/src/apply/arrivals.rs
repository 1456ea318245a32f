//! Taking in a key's arrivals ([`crate::arrival`]), before the writer's own operation.

use super::turns::check_enqueue;
use super::Work;
use crate::arrival::Arrival;
use crate::backlog::Segment;
use crate::op::Refusal;

/// What an arrival taken in may change, kept to undo it when it is refused.
struct Saved {
    doc: crate::Doc,
    finished: usize,
    granted: usize,
    segment_out: Option<Segment>,
}

impl Work<'_> {
    /// Takes in `arrivals`, in the order they were appended: each exactly as its enqueue
    /// applied by a write of its own at this moment would be (queued, then the queue granted
    /// with nobody looking), and one that would be refused leaves no trace.
    pub(super) fn take_in_arrivals(&mut self, arrivals: &[Arrival]) {
        for arrival in arrivals {
            let saved = Saved {
                doc: self.doc.clone(),
                finished: self.finished.len(),
                granted: self.granted.len(),
                segment_out: self.segment_out.clone(),
            };
            // Judged by the unsettled turns its owner had seen, not by the finishes of the
            // request that takes it in (`crate::arrival`).
            let finishes_seen = self.finishes_seen.take();
            let late = std::mem::take(&mut self.may_arrive_late);
            self.unsettled_seen = Some(arrival.unsettled_seen);
            let taken = self.take_in_arrival(arrival);
            (self.finishes_seen, self.may_arrive_late) = (finishes_seen, late);
            self.unsettled_seen = None;
            if taken.is_err() {
                self.doc = saved.doc;
                self.finished.truncate(saved.finished);
                self.granted.truncate(saved.granted);
                self.segment_out = saved.segment_out;
            }
        }
    }

    fn take_in_arrival(&mut self, arrival: &Arrival) -> Result<(), Refusal> {
        if arrival.token_hash.is_empty() {
            return Err(crate::limits::InvalidInput("an arrival without a token".into()).into());
        }
        check_enqueue(&arrival.enqueue)?;
        let (id, hash) = (&arrival.enqueue.id, &arrival.token_hash);
        if let Some(unsettled) = self.doc.unsettled.as_mut() {
            if unsettled.settle(id, hash) {
                // Its owner queued the turn itself: this copy landed late, and is nothing.
                return Ok(());
            }
        }
        self.enqueue_hashed(&arrival.enqueue, arrival.token_hash.clone())?;
        self.take_in(None);
        self.grant(None)
    }
}
