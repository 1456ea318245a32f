//! What a wait does before its enqueue: a first read where the turn may arrive, and the watch
//! of a key seen taken.

use baton_store::WatchHandle;

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::turn::Pending;

/// The watch a wait starts before its enqueue, if any.
///
/// A process that knows nothing of its key yet (a fresh `baton run`) reads it first where its turn
/// may arrive (`may_arrive`): the read its enqueue would have made anyway, from which the enqueue
/// then writes; but on a key seen held with no room for the turn (and room in its window) the turn
/// arrives beside the document, where a CAS would lose to the holder's release and be applied again
/// to every write after it. A read that fails leaves the turn to enqueue as before (its write
/// retries the store's errors).
///
/// On a key that others held or waited for when last seen, the watch starts before the
/// enqueue: every write after the enqueue is then told, and the wait needs no first read. On a
/// key seen free the enqueue likely grants, and a watch would be paid for nothing.
pub(super) async fn look(
    coord: &Coordinator,
    pending: &Pending,
    may_arrive: bool,
) -> Result<Option<WatchHandle>, ClientError> {
    let key = pending.key.as_str();
    if may_arrive && !coord.knows(key) {
        if let Err(error) = coord.read_into_cache(key).await {
            tracing::debug!(key, %error, "the first read failed; enqueueing");
        }
    }
    let seen_taken = coord
        .cached_doc(key)
        .is_some_and(|doc| !doc.tickets.is_empty());
    if !seen_taken {
        return Ok(None);
    }
    Ok(coord.store().watch_tagged(key, &pending.id).await?)
}
