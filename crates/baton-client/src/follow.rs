//! Holders keeping their key's cached document current, so that their release is one CAS.
//!
//! A holder's coordinator caches the document of its last write (the enqueue or the grant it
//! saw). Whatever others write meanwhile — a waiter's enqueue, above all — makes that version
//! stale, and the release then loses a CAS to the conflict and sends another: one more round
//! trip between a release and the next holder's turn (B4 of BENCHMARKS.md measures it). On a
//! store whose wake-ups carry the document, a holder takes every pushed document into the
//! cache while it holds.
//!
//! A turn that came after a wait follows from its grant on, with the wait's own subscription:
//! it saw the key up to the grant, and every write since is told on that subscription, so
//! following costs nothing more, and a short turn on a busy key — where others enqueue during
//! it, and a release that loses its CAS delays every turn after it — releases in one CAS. A
//! turn granted at once had no subscription: it subscribes only once it outlasts
//! [`FOLLOW_AFTER`], then reads the key once (what was written before the subscription). Most
//! such turns are short and meet no other write, and would pay a subscription and a read for
//! nothing. Where a store's subscription for a waiter passes by writes that concern other
//! tickets ([`baton_store::Capabilities::watch_tagged`]), it would not tell a holder of their
//! enqueues, and the turn follows as one granted at once.
//!
//! A pushed document surely older than the cached one is left out: a wait that subscribed
//! before its enqueue, and was granted by it, may hold wake-ups from before the enqueue, whose
//! documents do not have the holder's ticket. The cache is only ever a starting point
//! ([`Coordinator::take_pushed`]): a document pushed late that cannot be told apart from a
//! newer one costs at most a conflict, never a wrong write.

use std::sync::Arc;
use std::time::Duration;

use baton_store::WatchHandle;
use tokio::task::JoinHandle;

use crate::coordinator::Coordinator;

/// How long a turn granted at once lasts before its holder follows the key.
pub const FOLLOW_AFTER: Duration = Duration::from_millis(100);

/// A key followed in the background, until dropped.
#[derive(Debug)]
pub(crate) struct Follower(JoinHandle<()>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows `key` for a holder, where the store's wake-ups carry documents; else `None`.
/// `waited` is the subscription of the wait that brought the turn, if any.
pub(crate) fn follow(
    coord: &Arc<Coordinator>,
    key: &str,
    waited: Option<WatchHandle>,
) -> Option<Follower> {
    let capabilities = coord.store().capabilities();
    if !capabilities.watch_documents {
        return None;
    }
    let waited = waited.filter(|_| !capabilities.watch_tagged);
    let (coord, key) = (coord.clone(), key.to_string());
    Some(Follower(tokio::spawn(async move {
        let Some(mut handle) = subscribed(&coord, &key, waited).await else {
            return;
        };
        // A wake-up without a document (too large, or a reconnection) is left to the CAS.
        while let Ok(woken) = handle.changed().await {
            if let Some(pushed) = woken {
                let _ = coord.take_pushed(&key, pushed);
            }
        }
    })))
}

/// A subscription to `key` from which the cache is current: the wait's, or, after
/// [`FOLLOW_AFTER`], a new one and a read. Any failure only leaves the cache as it was: the
/// release finds out by its CAS.
async fn subscribed(
    coord: &Coordinator,
    key: &str,
    waited: Option<WatchHandle>,
) -> Option<WatchHandle> {
    if waited.is_some() {
        return waited;
    }
    tokio::time::sleep(FOLLOW_AFTER).await;
    let handle = coord.store().watch(key).await.ok()??;
    coord.read(key).await.ok()?;
    Some(handle)
}
