//! The writes a holder makes on its own ticket, by its token: renew (the first renewal of a
//! grant claims it), release, and an end sent again through a failing store while the lease may
//! still stand. The heartbeat, a guard, a waiter giving up and a worker completing a job all
//! end or extend a turn through these.

use std::time::{Duration, Instant};

use baton_core::{Op, Outcome, Refusal, Request};

use crate::coordinator::{Coordinator, Executed};
use crate::error::ClientError;
use crate::retry::Doubling;
use crate::turn::{ids, release_request, Lease, Pending, Renewed};

/// Ends a ticket by its token. `Outcome::Cancelled` withdraws a waiting ticket or gives back a
/// held one.
pub async fn release(
    coord: &Coordinator,
    key: &str,
    token: &str,
    outcome: Outcome,
) -> Result<(), ClientError> {
    release_with_reason(coord, key, token, outcome, None).await
}

/// Withdraws the waiting turn `pending` as `outcome` (`timed_out` or `cancelled`) wherever it
/// waits: in the window or the backlog's tail, by its token; in a written segment of the
/// backlog, by its id, found there (a segment keeps its token's hash where the document cannot
/// check it). A held turn is given back as a release would.
pub async fn withdraw(
    coord: &Coordinator,
    pending: &Pending,
    outcome: Outcome,
) -> Result<(), ClientError> {
    let (key, id) = (pending.key.as_str(), pending.id.as_str());
    match release(coord, key, &pending.token, outcome).await {
        Err(
            error @ ClientError::Refused {
                refusal: Refusal::UnknownToken | Refusal::Uncertain,
                ..
            },
        ) => match crate::segments::cancel_in_backlog(coord, key, id, "", Some(outcome)).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(error),
            Err(busy) => left_to_lapse(key, busy),
        },
        Err(busy) => left_to_lapse(key, busy),
        ok => ok,
    }
}

/// A withdrawal the backlog has no room to remember (too many withdrawals and cancels wait to
/// be taken in): the turn is left there, where nobody refreshes it, and is dropped one waiter
/// lease after it reaches the window. Any other error stands.
fn left_to_lapse(key: &str, error: ClientError) -> Result<(), ClientError> {
    match error {
        ClientError::Refused {
            refusal: Refusal::BacklogBusy,
            ..
        } => {
            tracing::info!(key, "the backlog is busy: the turn is left there to lapse");
            Ok(())
        }
        other => Err(other),
    }
}

/// [`release`] with a reason recorded in the history.
pub async fn release_with_reason(
    coord: &Coordinator,
    key: &str,
    token: &str,
    outcome: Outcome,
    reason: Option<String>,
) -> Result<(), ClientError> {
    let mut request = release_request(token, outcome, reason);
    coord.execute(key, &mut request).await.map(|_| ())
}

/// Renews a held ticket by its token (the first renewal of a grant claims it), with a new
/// duration or the ticket's own.
pub async fn renew(
    coord: &Coordinator,
    key: &str,
    token: &str,
    ttl: Option<Duration>,
) -> Result<Renewed, ClientError> {
    let mut request = Request::new(
        ids::new_attempt_id(),
        Op::Renew {
            token: token.to_string(),
            ttl_ms: ttl.map(crate::time::millis),
        },
    );
    let executed = coord.execute(key, &mut request).await?;
    // A renewal always writes (it moves the heartbeat): an answer without a write is not a
    // confirmation.
    Renewed::from_answer(&executed.answer(&request.op), coord.now()).ok_or_else(|| {
        ClientError::Unconfirmed {
            key: key.to_string(),
        }
    })
}

/// Releases `lease`, retrying transient store errors while the lease may still stand, at most
/// its TTL from now (renewals have stopped): a release lost to a blip would keep the next in
/// line waiting until the TTL runs out. Past that the key has let go by itself, and the error
/// is returned.
pub(crate) async fn release_retrying(
    coord: &Coordinator,
    lease: &Lease,
    outcome: baton_core::Outcome,
    reason: Option<String>,
) -> Result<(), ClientError> {
    let give_up_at = Instant::now() + Duration::from_millis(lease.ttl_ms);
    let mut request = release_request(&lease.token, outcome, reason);
    let stands = |pause: Duration| Instant::now() + pause < give_up_at;
    let (released, retried) = end_retrying(coord, &lease.key, &mut request, stands).await;
    match released {
        // A try that failed may have landed all the same (the store took the write and
        // the answer was lost) where the core no longer remembers the attempt: the ticket
        // ended as asked is this release's doing. Only this token releases with an outcome
        // of its choosing; expiry and operators end tickets otherwise.
        Err(ClientError::Refused {
            refusal:
                Refusal::Ended {
                    outcome: ended,
                    forced: false,
                    ..
                },
            ..
        }) if retried && ended == outcome => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Sends `request`, an operation that ends a lease (a release, a job's completion), and sends
/// it again after each transient store error ([`ClientError::is_transient`]: a restart, a
/// failover, an answer lost) while `stands(pause)` says the lease may still stand once the
/// pause before the next try is over: an end lost to a blip would leave the lease to run out,
/// and a finished run would count as one whose holder vanished. The client's one retry of an
/// ending write: `baton run`'s release and a worker's completion both use it.
///
/// One request for every try: the core answers the retry of one that landed unseen as the
/// first time, or refuses it as uncertain, never as a second end. Returns the last try's
/// result, and whether an earlier try failed (so a refusal may be that try having landed).
pub(crate) async fn end_retrying(
    coord: &Coordinator,
    key: &str,
    request: &mut Request,
    stands: impl Fn(Duration) -> bool,
) -> (Result<Executed, ClientError>, bool) {
    let mut pause = Doubling::default();
    let mut retried = false;
    loop {
        match coord.execute(key, request).await {
            Err(error) if error.is_transient() && stands(pause.pause()) => {
                tracing::warn!(%key, %error, op = request.op.name(), "failed; retrying");
                pause.sleep().await;
                retried = true;
            }
            other => return (other, retried),
        }
    }
}
