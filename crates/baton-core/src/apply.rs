//! `apply(doc, request, clock)`: the state machine of a key.
//!
//! Every operation runs in three steps on a copy of the document:
//! 1. **expire**: end what the clock says has ended (a restarted store clock ends everything;
//!    held leases and unclaimed grants expire; silent waiters are abandoned);
//! 2. **the operation** itself (refusals return here, and the copy is dropped: a refused
//!    operation changes nothing);
//! 3. **grant**: walk the queue in order and grant while the head fits beside the holders,
//!    stopping at the first that does not (no barging), or at a job: no process waits for a
//!    job, so only a worker's claim takes it (`apply/jobs.rs`).
//!
//! This file holds the three steps and the dispatch of an operation to its family; each family
//! has a file of its own:
//!
//! - `turns`: a lock's or semaphore's ticket: enqueue, refresh, renew, release;
//! - `jobs`: submit, claim, complete, and how a job's run ends;
//! - `backlog`: jobs and turns kept outside the window: taking them in, the tail, cancels
//!   and withdrawals there;
//! - `cancel`: an operator's cancels, of one ticket or of every queued one;
//! - `once`: run-once keys: the check of their enqueue, `baton retry`;
//!
//! and the steps and rules they share:
//!
//! - `arrivals`: enqueues written beside the document, taken in before the operation;
//! - `expire`: step 1, ending what the clock says has ended;
//! - `admit`: joining the queue (room, order kind, `--supersede`, `--cancel-running`);
//! - `grant`: step 3, grants in queue order, fences and phases;
//! - `finish`: how a live ticket ends, into the history and the summary;
//! - `standing`: what an operation answers about a ticket, live or finished.

mod admit;
mod arrivals;
mod backlog;
mod cancel;
mod expire;
mod finish;
mod grant;
mod jobs;
mod once;
mod standing;
mod turns;

pub use admit::STOP_ASKED_MAX_BYTES;
pub use standing::{status_of, waiting_status};

use crate::backlog::Segment;
use crate::clock::Clock;
use crate::doc::Doc;
use crate::freeze::Paused;
use crate::history::Finished;
use crate::invariants;
use crate::op::{Op, Refusal, Reply, Request, TicketView};

/// What an operation answers: its reply and the ticket whose owner is looking (a grant to it
/// in this same operation needs no claim), or the refusal that leaves the document unchanged.
type Answer = Result<(Reply, Option<String>), Refusal>;

/// The result of an accepted operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The new document.
    pub doc: Doc,
    /// What the operation did, for its caller.
    pub reply: Reply,
    /// Tickets that ended, for the history log (appended in the same CAS).
    pub finished: Vec<Finished>,
    /// Grants made, in grant order: (ticket id, fence).
    pub granted: Vec<(String, u64)>,
    /// Whether the document changed at all, or arrivals were taken in (an unchanged document
    /// with no arrivals to remove need not be written).
    pub changed: bool,
    /// A backlog segment the caller must write (as its record) *before* it writes the
    /// document ([`crate::backlog`]).
    pub segment_out: Option<Segment>,
}

/// Applies `request` to `doc` (`None`: the key has no document yet) at `clock`.
pub fn apply(doc: Option<&Doc>, request: &Request, clock: &Clock<'_>) -> Result<Applied, Refusal> {
    apply_with(doc, request, clock, Inputs::default())
}

/// What a writer read beside the key's document and hands to [`apply_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// The backlog segment the document asked for ([`Doc::segment_wanted`]): its jobs are
    /// taken into the window first. A segment that is not the one the document waits for is
    /// ignored.
    pub segment: Option<&'a Segment>,
    /// The freeze in force on the key at the clock's wall time ([`crate::freeze::in_force`]),
    /// from the writer's copy of the settings: recorded in the document, and no grant is made
    /// while it holds but up to an override.
    pub paused: Option<&'a Paused>,
    /// The key's arrivals as read with the document, in the order they were appended
    /// ([`crate::arrival`]): taken in after the expiry, before the operation, and all of them
    /// removed by the write (those refused too).
    pub arrivals: &'a [crate::arrival::Arrival],
}

/// [`apply`], with what the writer read beside the document ([`Inputs`]).
pub fn apply_with(
    doc: Option<&Doc>,
    request: &Request,
    clock: &Clock<'_>,
    inputs: Inputs<'_>,
) -> Result<Applied, Refusal> {
    // The document as given, to tell whether the operation changed it: borrowed, not cloned
    // (a clone of a long-used key's document cost as much as its encode).
    let never_used;
    let original = match doc {
        Some(doc) => doc,
        None => {
            never_used = Doc::default();
            &never_used
        }
    };
    let mut work = Work {
        doc: original.clone(),
        clock,
        attempt: &request.attempt,
        finishes_seen: request.finishes_seen,
        may_arrive_late: request.may_arrive_late,
        unsettled_seen: None,
        finished: Vec::new(),
        granted: Vec::new(),
        segment_out: None,
    };
    work.doc.paused = inputs.paused.cloned();
    work.expire();
    work.take_in(inputs.segment);
    work.take_in_arrivals(inputs.arrivals);
    let (reply, looking) = work.op(&request.op)?;
    work.take_in(None);
    work.grant(looking.as_deref())?;
    let reply = match reply {
        // The ticket's standing after the grants of this very operation.
        Reply::Ticket(TicketView::Live(status)) => Reply::Ticket(work.view(&status.id)),
        other => other,
    };
    debug_assert_eq!(invariants::check(&work.doc), Ok(()));
    debug_assert_eq!(invariants::check_settled(&work.doc), Ok(()));
    // Arrivals taken in are removed by the write, even those that changed nothing.
    let changed = work.doc != *original || !inputs.arrivals.is_empty();
    Ok(Applied {
        doc: work.doc,
        reply,
        finished: work.finished,
        granted: work.granted,
        changed,
        segment_out: work.segment_out,
    })
}

/// An operation under way: the copy of the document it changes, and what it has done so far.
struct Work<'a> {
    /// The copy: dropped on a refusal, so a refused operation changes nothing.
    doc: Doc,
    clock: &'a Clock<'a>,
    /// The request's attempt id ([`Request::attempt`]): marks of what it ended answer its retry.
    attempt: &'a str,
    /// [`Request::finishes_seen`].
    finishes_seen: Option<u64>,
    /// [`Request::may_arrive_late`] (not while taking arrivals in).
    may_arrive_late: bool,
    /// While an arrival is taken in, the [`crate::arrival::Arrival::unsettled_seen`] it
    /// carries.
    unsettled_seen: Option<u64>,
    /// [`Applied::finished`], so far.
    finished: Vec<Finished>,
    /// [`Applied::granted`], so far.
    granted: Vec<(String, u64)>,
    /// [`Applied::segment_out`].
    segment_out: Option<Segment>,
}

impl Work<'_> {
    /// Runs the operation itself, in the file of its family. Returns the reply and the ticket
    /// whose owner is looking (a grant to it in this same operation needs no claim).
    fn op(&mut self, op: &Op) -> Answer {
        match op {
            Op::Enqueue(enqueue) => self.enqueue(enqueue),
            Op::Refresh { token } => self.refresh(token),
            Op::Renew { token, ttl_ms } => self.renew(token, *ttl_ms),
            Op::Release {
                token,
                outcome,
                reason,
            } => self.release(token, *outcome, reason.as_deref()),
            Op::Cancel { id, by, reason } => self.cancel(id, None, by, reason.as_deref()),
            Op::CancelInBacklog {
                id,
                generation,
                segment,
                by,
                withdrawn: None,
            } => self.cancel(id, Some((*generation, *segment)), by, None),
            Op::CancelInBacklog {
                id,
                generation,
                segment,
                withdrawn: Some(outcome),
                ..
            } => self.withdraw_from_segment(id, (*generation, *segment), *outcome),
            Op::CancelQueued { by } => self.cancel_queued(by),
            Op::RetryOnce => self.retry_once(),
            Op::Tick => Ok((Reply::Nothing, None)),
            Op::Notified(delivered) => {
                if let Some(outbox) = self.doc.outbox.as_mut() {
                    crate::notify::acknowledge(outbox, delivered, self.clock.wall_ms());
                }
                Ok((Reply::Nothing, None))
            }
            Op::Submit(submit) => self.submit(submit),
            Op::Claim { token, ttl_ms } => self.claim(token, *ttl_ms),
            Op::RunSucceeded { token } => self.run_succeeded(token),
            Op::Complete { token, id, result } => self.complete(token, id.as_deref(), result),
        }
    }
}
