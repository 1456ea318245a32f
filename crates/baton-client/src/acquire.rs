//! Waiting for a turn.
//!
//! A waiter enqueues once, then reads (polls only read) and sleeps: on a store that pushes,
//! until it is woken (with the new document, where the store delivers it: then it does not
//! read); on one that cannot, for an interval that depends on its place in the queue
//! ([`crate::turn::poll`]). Either way it also wakes when the earliest lease, claim window or
//! waiter lease of the key is due to end, so taking over from a crashed holder costs about its
//! TTL and no more.
//! It refreshes its own waiter lease rarely (every third of it, [`crate::turn::refresh_every`]),
//! and claims its grant at the first read that shows it — or, when a heartbeat takes the lease
//! at once ([`acquire_many`]) and the grant is provably fresh, returns right away and lets the
//! heartbeat's first renewal claim it (see [`baton_core::lease::seen_grant_until_local_ms`]).
//! The wait itself is the private `waiter` module. Every lease returned carries the local-clock
//! instant until which its holder may act on it ([`Lease::holds_until_ms`]), counted from
//! before the write that set it.
//!
//! The types a turn is made of are [`crate::turn`]'s (re-exported here, where callers have
//! always found them); renewing and releasing are `crate::hold`'s.
//!
//! Several keys are taken one at a time in sorted order, with the earlier ones renewed while it
//! waits for the later ones, and all given back on failure: two callers can never deadlock.

use std::sync::Arc;
use std::time::Instant;

use baton_core::Outcome;

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::heartbeat::Heartbeat;
pub use crate::hold::{release, release_with_reason, renew, withdraw};
pub use crate::retry::retry_pause;
pub use crate::turn::{
    AcquireOptions, HolderView, Lease, Pending, ProgressFn, Renewed, WaitProgress,
};
use crate::waiter::wait_for_turn;

/// Waits for a turn at `pending.key`. The lease returned is claimed, and stands until its
/// `holds_until_ms` unless renewed; one that had already run out when its answer came back
/// (this process was paused, the answer was held up) is given back and reported as lost.
pub async fn acquire(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
) -> Result<Lease, ClientError> {
    // A timeout too long for the clock to count is no deadline at all.
    let deadline = options.timeout.and_then(|t| Instant::now().checked_add(t));
    // Nothing renews the lease this returns: it is claimed before it is returned.
    let granted = wait_for_turn(coord, pending, options, deadline, false).await?;
    still_standing(coord, granted.lease).await
}

/// Takes every key, one at a time in sorted order, renewing those already held while waiting
/// for the next. On any failure every ticket is given back (held ones as `cancelled`, the
/// waiting one as `timed_out` or `cancelled`) and the error is returned. The leases may come
/// back unclaimed (a fresh grant, left to the heartbeat's first renewal); the heartbeat has
/// them all, and every one stood when this returned.
pub async fn acquire_many(
    coord: &Arc<Coordinator>,
    pendings: &[Pending],
    options: &AcquireOptions,
    heartbeat: &Heartbeat,
) -> Result<Vec<Lease>, ClientError> {
    // A timeout too long for the clock to count is no deadline at all.
    let deadline = options.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut sorted: Vec<&Pending> = pendings.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut leases = Vec::new();
    for pending in sorted {
        let taken = match wait_for_turn(coord, pending, options, deadline, true).await {
            Ok(granted) => still_standing(coord, granted.lease)
                .await
                .map(|lease| (lease, granted.watch)),
            Err(error) => Err(error),
        };
        match taken {
            Ok((lease, watch)) => {
                heartbeat.add_following(&lease, watch);
                leases.push(lease);
            }
            Err(error) => return Err(give_back(coord, heartbeat, &leases, error).await),
        }
    }
    // A key taken early may have been lost while waiting for a later one.
    if let Err(lost) = heartbeat.standing() {
        let error = ClientError::LeaseLost {
            key: lost.key,
            reason: lost.reason,
        };
        return Err(give_back(coord, heartbeat, &leases, error).await);
    }
    Ok(leases)
}

/// Stops renewing and gives back every lease held (as `cancelled`); returns `error`.
async fn give_back(
    coord: &Coordinator,
    heartbeat: &Heartbeat,
    leases: &[Lease],
    error: ClientError,
) -> ClientError {
    heartbeat.stop_all();
    for lease in leases {
        let _ = release(coord, &lease.key, &lease.token, Outcome::Cancelled).await;
    }
    error
}

/// `lease` if it still stands on the local clock; else it is given back (it may still be live
/// in the store, claimed, keeping the next in line waiting) and reported lost: a lease is never
/// started after its bound.
async fn still_standing(coord: &Coordinator, lease: Lease) -> Result<Lease, ClientError> {
    let now_ms = coord.local_ms();
    if lease.stands_at(now_ms) {
        return Ok(lease);
    }
    let late_ms = now_ms - lease.holds_until_ms;
    let _ = release(coord, &lease.key, &lease.token, Outcome::Cancelled).await;
    Err(ClientError::LeaseLost {
        key: lease.key,
        reason: format!(
            "the turn came, but its lease had already run out {late_ms} ms before this \
             process could act on it (was it paused, or the store's answer held up?)"
        ),
    })
}
