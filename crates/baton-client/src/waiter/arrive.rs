//! Enqueues by arrival ([`baton_core::arrival`]): on a key last seen held, a waiter appends its
//! enqueue beside the document instead of writing it in, so that it never loses a write to the
//! holder's release or to another waiter's enqueue; the next writer of the document (the
//! holder's release, most often) takes it in, and grants it when its turn has come.
//!
//! Until a document shows its ticket the waiter knows the turn only as an arrival
//! ([`Arriving`]). It then writes only when nobody else will take it in for it: the key is
//! free (or its holder's lease ran out), or has room for the turn (a permit freed beside a
//! holder, which its own write grants), with the arrival still pending, or the arrival is gone
//! and no ticket stands for it (it was refused when taken in, which leaves no trace, or its
//! ticket ended already). The write is the enqueue itself, marked as a retry of the arrival:
//! it takes in what is pending, this arrival too, then the core finds the ticket, or its mark,
//! or answers why it refuses; it never queues the turn twice. After an append that went
//! unanswered the write also says that the append may land late
//! ([`baton_core::Request::may_arrive_late`]), so that its copy then queues nothing.

use baton_core::arrival::Arrival;
use baton_core::backlog::WINDOW_JOBS;
use baton_core::op::Enqueue;
use baton_core::{Doc, Mode, Op, Request};

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::turn::{ids, AcquireOptions, Pending};

/// A turn enqueued by arrival whose ticket no document has shown yet.
pub(super) struct Arriving {
    /// The enqueue as appended.
    enqueue: Enqueue,
    /// The finishes of the last document read with the arrival still pending (the append's
    /// own answer, first): any ticket of the turn ended after it.
    finishes_seen: u64,
    /// Turns ahead when it was appended: the document's queue and the arrivals before it.
    pub(super) ahead: usize,
}

/// How recently the key must have been seen held (with no room for the turn) for a turn to
/// arrive (its release then takes the arrival in).
const SEEN_WITHIN_MS: u64 = 250;

/// An append that may have landed, when the enqueue is written after all: the finishes of a
/// document read before any ticket of the turn could have ended, when it was sent (any grant
/// to the turn was written after), and whether it went unanswered (it may still land, late).
#[derive(Clone, Copy, Debug)]
pub(super) struct Appended {
    pub(super) finishes_seen: u64,
    pub(super) sent_ms: u64,
    pub(super) unanswered: bool,
}

/// An arrival appended to a key seen held with no room for it: the key as the append found it, and
/// when it was sent (any grant to the turn was written after).
pub(super) struct Arrived {
    pub(super) doc: Doc,
    pub(super) sent_ms: u64,
}

/// Whether the turn of `options` enqueues by arrival: it may ([`may_arrive`]), the key was
/// seen moments ago held with no room for it ([`waits_for_holder`]; else the enqueue's own
/// write likely grants at once), and its window had room ([`has_room`]).
pub(super) fn arrives(coord: &Coordinator, key: &str, options: &AcquireOptions) -> bool {
    may_arrive(coord, options)
        && coord.recent_doc(key, SEEN_WITHIN_MS).is_some_and(|doc| {
            waits_for_holder(&doc, options.mode) && has_room(&doc, coord.cached_arrivals(key).len())
        })
}

/// Whether a turn of `mode` beside `doc` is left to the next write to take in: the key is
/// held, so its holder's release (if nothing sooner) writes, and the turn could not be granted
/// now. Else the turn writes its enqueue itself: on a free key nobody may write again, and
/// with a permit free beside a holder its own write grants it, where waiting for the holder
/// could take the whole hold.
pub(super) fn waits_for_holder(doc: &Doc, mode: Mode) -> bool {
    doc.holders().next().is_some() && doc.turn_would_wait(mode)
}

/// Whether an arrival would find room in `doc`'s window when taken in, behind `arriving` more:
/// no backlog, and fewer waiting in the window and arriving than it holds. An arrival cannot
/// wait in the backlog (its taker writes no segment for it): taken in behind a full window, or
/// beside a backlog, it is admitted into the window, which then overfills and carries every
/// waiter, what the backlog is there to spare every write. Judged on a copy up to
/// [`SEEN_WITHIN_MS`] old: arrivals appended at once may overfill the window by a few.
fn has_room(doc: &Doc, arriving: usize) -> bool {
    doc.backlog.is_none() && doc.window_waiting() + arriving < WINDOW_JOBS
}

/// Whether the turn of `options` may enqueue by arrival, on a key seen held with no room for
/// it: asked to (or left
/// to a store that does by default), on a store that keeps arrivals, a plain turn (not a try,
/// which wants its answer from the write, nor a run-once, superseding, cancelling or pool turn,
/// whose enqueue decides more than a place).
pub(super) fn may_arrive(coord: &Coordinator, options: &AcquireOptions) -> bool {
    let tries = options.timeout == Some(std::time::Duration::ZERO);
    let plain = options.once.is_none()
        && !options.supersede
        && !options.cancel_running
        && options.pool.is_none();
    let capabilities = coord.store().capabilities();
    options
        .by_arrival
        .unwrap_or(capabilities.arrivals_by_default)
        && plain
        && !tries
        && capabilities.arrivals
}

/// Appends the arrival of `enqueue` to `pending`'s key. The key as the append found it, and
/// the turn as an arrival; or the append, when the enqueue must be written after all as its
/// retry: the key had no document, or no holder left to take the arrival in, or room for it
/// ([`waits_for_holder`]), or the append failed (it may have landed).
pub(super) async fn append(
    coord: &Coordinator,
    pending: &Pending,
    enqueue: Enqueue,
) -> Result<Result<(Arrived, Arriving), Appended>, ClientError> {
    let key = pending.key.as_str();
    let seen = coord.recent_doc(key, SEEN_WITHIN_MS);
    let finishes_seen = seen.as_ref().map_or(0, |doc| doc.finishes);
    let unsettled_seen = seen.as_ref().map_or(0, Doc::unsettled_recorded);
    // Taken in by another's write, never into the backlog: the taker writes no segment for
    // it ([`has_room`]); the turn's own write, when it comes to that, waits there if it may.
    let enqueue = Enqueue {
        may_wait_in_backlog: false,
        ..enqueue
    };
    let bytes = Arrival::of(&enqueue, unsettled_seen).encode();
    let sent_ms = coord.local_ms();
    let appended = match coord.store().append_arrival(key, &bytes).await {
        Ok(Some(appended)) => appended,
        // No document: the arrival waits for the first write, and no ticket ended yet.
        Ok(None) => {
            return Ok(Err(Appended {
                finishes_seen: 0,
                sent_ms,
                unanswered: false,
            }))
        }
        Err(error) => {
            tracing::debug!(key, %error, "the arrival's append failed; writing the enqueue");
            return Ok(Err(Appended {
                finishes_seen,
                sent_ms,
                unanswered: true,
            }));
        }
    };
    let version = appended.version.clone();
    coord.take_read(key, appended)?;
    // The document the append answered with, its arrival pending.
    let landed = Appended {
        finishes_seen: coord
            .finishes_with_arrival(key, &pending.id)
            .unwrap_or(finishes_seen),
        sent_ms,
        unanswered: false,
    };
    let Some(doc) = coord.cached_doc(key) else {
        return Ok(Err(landed));
    };
    if !waits_for_holder(&doc, enqueue.mode) {
        return Ok(Err(landed));
    }
    let arrivals = coord.cached_arrivals(key);
    let before = arrivals
        .iter()
        .take_while(|arrival| arrival.enqueue.id != pending.id)
        .count();
    tracing::info!(key, version = %version.0, "wait: arrived beside the document, {before} arrivals before it");
    let arriving = Arriving {
        ahead: doc.queued().len() + before,
        enqueue,
        finishes_seen: landed.finishes_seen,
    };
    Ok(Ok((Arrived { doc, sent_ms }, arriving)))
}

impl Arriving {
    /// The enqueue as appended.
    pub(super) fn enqueue(&self) -> &Enqueue {
        &self.enqueue
    }

    /// Whether the key's arrivals as last read hold this turn's; if so, the document read with
    /// them bounds the finishes its write carries.
    pub(super) fn still_pending(&mut self, coord: &Coordinator, key: &str) -> bool {
        match coord.finishes_with_arrival(key, &self.enqueue.id) {
            Some(finishes) => {
                self.finishes_seen = finishes;
                true
            }
            None => false,
        }
    }

    /// The enqueue written in place of the arrival, marked as its retry: it takes in any
    /// arrival still pending (this one too, found by its id), and answers for the ticket.
    pub(super) fn write_request(&self, coord: &Coordinator) -> Request {
        let enqueue = Enqueue {
            may_wait_in_backlog: coord.may_wait_in_backlog(),
            ..self.enqueue.clone()
        };
        let mut request = Request::new(ids::new_attempt_id(), Op::Enqueue(enqueue));
        request.finishes_seen = Some(self.finishes_seen);
        request
    }
}

/// Whether `doc` shows that a write took the arrival in: its ticket is there.
pub(super) fn taken_in(doc: &Doc, id: &str) -> bool {
    doc.by_id(id).is_some()
}
