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
            let seen = self.finishes_seen.replace(arrival.finishes_seen);
            let taken = self.take_in_arrival(arrival);
            self.finishes_seen = seen;
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
        self.enqueue_hashed(&arrival.enqueue, arrival.token_hash.clone())?;
        self.take_in(None);
        self.grant(None)
    }
}
