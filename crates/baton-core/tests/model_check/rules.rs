//! The client library's rules, as the model's clients follow them.
//!
//! Every belief a client holds is computed here, and only through `baton_core::lease`: the
//! model must judge the rules the library runs, so no bound is written a second time. Rule 4
//! (one heartbeat renews every lease, each on its own bound) is the model's shape: a client
//! keeps a phase, and a bound, per key, and acts on each key independently.

pub use baton_core::lease::Reading;
use baton_core::lease::{self, Basis, SeenGrant};
use baton_core::Request;

use crate::world::{CLAIM, TTL};

/// Rule 1: until when (local clock) the holder may act on the lease a write set, counted from
/// the write's basis (when it read the store's clock for it, less how far that reading lagged)
/// — never from when the reply was handled. `None` when that bound has already passed at
/// `now`: a reply handled too late gives the lease up.
pub fn lease_until(basis: Basis, now: u64) -> Option<u64> {
    let until = basis.holds_until_local_ms(TTL);
    lease::stands_at(until, now).then_some(until)
}

/// When the ticket was last known queued, from a write whose reply showed it queued: the
/// write's basis (the grant came after the write was computed, however late its reply).
pub fn queued_at(basis: Basis) -> u64 {
    basis.basis_local_ms
}

// Rule 2, whether a reply that shows the ticket held is a lease that write set, is the core's
// `lease::write_set_the_lease`, called where the model handles a reply.

/// Rule 3: the retry of `first` after an ambiguous failure carries the document's finish
/// count as the first attempt read it, so the core refuses it as uncertain rather than
/// recreating a ticket that ended and was forgotten meanwhile.
pub fn retry(first: Request, finishes_seen: u64) -> Request {
    Request {
        finishes_seen: Some(finishes_seen),
        ..first
    }
}

/// Rule 5: until when a grant seen unclaimed may be started at once, leaving the claim to the
/// heartbeat (`None`: claim first): the waiter's own rule, `lease::seen_grant_until_local_ms`,
/// with the model's claim window and TTL (`same_epoch`: the deadline is on the clock the
/// reading came from).
pub fn fresh_grant_until(
    queued_at: u64,
    read: Option<Reading>,
    deadline_ms: Option<u64>,
    same_epoch: bool,
    now: u64,
) -> Option<u64> {
    let grant = SeenGrant {
        claim_ms: CLAIM,
        ttl_ms: TTL,
        deadline_store_ms: deadline_ms,
        same_epoch,
    };
    lease::seen_grant_until_local_ms(queued_at, grant, read, now)
}
