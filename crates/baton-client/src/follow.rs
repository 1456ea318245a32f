//! Holders keeping their key's cached document current, so that their release is one CAS.
//!
//! A holder's coordinator caches the document of its last write (the enqueue or the grant it
//! saw). Whatever others write meanwhile — a waiter's enqueue, above all — makes that version
//! stale, and the release then loses a CAS to the conflict and sends another: one more round
//! trip between a release and the next holder's turn (B4 of BENCHMARKS.md measures it). On a store
//! whose wake-ups carry the document, a holder whose turn outlasts [`FOLLOW_AFTER`] subscribes
//! to its key, reads it once (what was written before the subscription) and takes every pushed
//! document into the cache from then on. Shorter turns are left alone: they rarely meet
//! another write, and following costs a subscription and a read.
//!
//! The cache is only ever a starting point ([`Coordinator::take_read`]): a document pushed
//! late, after a newer one, costs at most a conflict, never a wrong write.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::coordinator::Coordinator;

/// How long a turn lasts before its holder follows the key.
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
pub(crate) fn follow(coord: &Arc<Coordinator>, key: &str) -> Option<Follower> {
    if !coord.store().capabilities().watch_documents {
        return None;
    }
    let (coord, key) = (coord.clone(), key.to_string());
    Some(Follower(tokio::spawn(async move {
        tokio::time::sleep(FOLLOW_AFTER).await;
        // Any failure only leaves the cache as it was: the release finds out by its CAS.
        let Ok(Some(mut handle)) = coord.store().watch(&key).await else {
            return;
        };
        if coord.read(&key).await.is_err() {
            return;
        }
        // A wake-up without a document (too large, or a reconnection) is left to the CAS.
        while let Ok(woken) = handle.changed().await {
            if let Some(pushed) = woken {
                let _ = coord.take_read(&key, pushed);
            }
        }
    })))
}
