//! Waiting for a turn.
//!
//! A waiter enqueues once, then reads (polls only read) and sleeps: on a store that pushes, until
//! it is woken (with the new document, where the store delivers it: then it does not read); on
//! one that cannot, for an interval that depends on its place in the queue
//! ([`crate::poll`]). Either way it also wakes when the earliest lease, claim window or waiter
//! lease of the key is due to end, so taking over from a crashed holder costs about its TTL and
//! no more.
//! It refreshes its own waiter lease rarely (every third of it), and claims its grant at the
//! first read that shows it — or, when a heartbeat takes the lease at once ([`acquire_many`]) and
//! the grant is provably fresh, returns right away and lets the heartbeat's first renewal claim
//! it (see [`baton_core::lease::fresh_grant_until_local_ms`]). The wait itself is the private
//! `waiter` module. Every lease returned carries the local-clock instant until which its holder
//! may act on it ([`Lease::holds_until_ms`]), counted from before the write that set it. Several keys are taken one at a time in sorted order, with the
//! earlier ones renewed while it waits for the later ones, and all given back on failure: two
//! callers can never deadlock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::op::TicketView;
use baton_core::{Mode, Op, Outcome, Reply, Request};

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::heartbeat::Heartbeat;
use crate::ids;
use crate::poll::PollBounds;
use crate::time::wall_ms;
use crate::waiter::wait_for_turn;

/// A callback told where a wait stands.
pub type ProgressFn = Arc<dyn Fn(&WaitProgress) + Send + Sync>;

/// How a caller wants to wait and hold.
#[derive(Clone)]
pub struct AcquireOptions {
    /// Normal (takes a permit) or shared.
    pub mode: Mode,
    /// The key's limit (1: a mutex).
    pub limit: u32,
    /// Lease duration once held; renewals extend it.
    pub ttl: Duration,
    /// Waiter-lease duration while queued.
    pub waiter_ttl: Duration,
    /// How long to wait for the turn: `None` waits as long as it takes, zero tries once.
    pub timeout: Option<Duration>,
    /// The shortest and longest interval between two reads while waiting.
    pub poll: PollBounds,
    /// Who is asking, and why (shown to others).
    pub context: String,
    /// Sort value: tickets with one go first, compared as strings.
    pub order: Option<String>,
    /// Cancel every queued ticket that sorts before this one, unless enqueued with `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Bound on the key's live tickets.
    pub max_live: u32,
    /// Called when the wait starts and after every look at the store while waiting.
    pub on_progress: Option<ProgressFn>,
    /// How long a wait rides out a store that fails with a transient error
    /// ([`ClientError::is_transient`]: a restart, a failover, a network cut) before giving up
    /// with that error: retried with a growing pause meanwhile, the trouble told through
    /// `on_progress`. Zero fails at the first error. The ticket outlives an outage shorter
    /// than its waiter lease; after a longer one the wait ends as lost (abandoned).
    pub store_retry: Duration,
    /// A run-once turn ([`crate::once`]): granted only when the key's verdict is to run.
    pub once: Option<baton_core::OnceSpec>,
    /// Ask the key's holders that were not queued with `keep` to stop when this ticket is
    /// queued ([`baton_core::Enqueue::cancel_running`]).
    pub cancel_running: bool,
    /// Be granted through a freeze of the key, with this reason
    /// ([`baton_core::Enqueue::override_freeze`]).
    pub override_freeze: Option<String>,
}

impl std::fmt::Debug for AcquireOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireOptions")
            .field("mode", &self.mode)
            .field("limit", &self.limit)
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            mode: Mode::Normal,
            limit: 1,
            ttl: Duration::from_secs(30),
            waiter_ttl: Duration::from_secs(60),
            timeout: None,
            poll: PollBounds::default(),
            context: String::new(),
            order: None,
            supersede: false,
            keep: false,
            max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
            on_progress: None,
            store_retry: Duration::from_secs(60),
            once: None,
            cancel_running: false,
            override_freeze: None,
        }
    }
}

impl AcquireOptions {
    /// The claim window ([`baton_core::lease::claim_window_ms`] of the longest poll).
    pub fn claim(&self) -> Duration {
        let poll_max_ms = u64::try_from(self.poll.max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(baton_core::lease::claim_window_ms(poll_max_ms))
    }
}

/// A ticket about to be enqueued: its id and token are made before the first attempt.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The key.
    pub key: String,
    /// The ticket's public id.
    pub id: String,
    /// The ticket's secret token.
    pub token: String,
}

impl Pending {
    /// A new ticket for `key`.
    pub fn new(key: &str) -> Pending {
        Pending {
            key: key.to_string(),
            id: ids::new_ticket_id(),
            token: ids::new_token(),
        }
    }
}

/// A held turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The key.
    pub key: String,
    /// The ticket's public id.
    pub id: String,
    /// The secret token that renews and releases it.
    pub token: String,
    /// The fence of this grant.
    pub fence: u64,
    /// When it was granted (wall clock of the granting client).
    pub acquired_wall_ms: u64,
    /// When the lease ends unless renewed, on this machine's wall clock: the last moment at
    /// which the store surely still counts it held (for display; `holds_until_ms` decides).
    pub lease_until_wall_ms: u64,
    /// The lease duration.
    pub ttl_ms: u64,
    /// Until when this process may act on the lease, on its coordinator's local clock
    /// ([`Coordinator::local_ms`]): counted from before the write that set it (never from when
    /// its answer arrived), less how far that write's clock reading may have lagged the store,
    /// less the safety margin. Past it, the store may have given the key to another.
    pub holds_until_ms: u64,
    /// Whether the grant is claimed. An unclaimed one (a fresh grant `acquire_many` hands to a
    /// heartbeat) is claimed by the heartbeat's first renewal, sent at once.
    pub claimed: bool,
}

/// One holder, as a waiter sees it.
#[derive(Clone, Debug)]
pub struct HolderView {
    /// Its ticket id.
    pub id: String,
    /// Its context.
    pub context: String,
    /// How long it has held, by this machine's wall clock.
    pub held_ms: u64,
}

/// Where a wait stands.
#[derive(Clone, Debug)]
pub struct WaitProgress {
    /// The key.
    pub key: String,
    /// The waiting ticket.
    pub id: String,
    /// Queued tickets ahead (0: next).
    pub position: usize,
    /// Who holds the key.
    pub holders: Vec<HolderView>,
    /// How long this wait has lasted.
    pub waited: Duration,
    /// Estimated time until the grant, from the key's recent hold times.
    pub estimate: Option<Duration>,
    /// The store failed on the last look and the wait is retrying: the error.
    pub store_trouble: Option<String>,
    /// The key is paused ([`baton_core::freeze`]): why, by whom, until when.
    pub paused: Option<baton_core::freeze::Paused>,
}

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
    let lease = wait_for_turn(coord, pending, options, deadline, false).await?;
    still_standing(coord, lease).await
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
            Ok(lease) => still_standing(coord, lease).await,
            Err(error) => Err(error),
        };
        match taken {
            Ok(lease) => {
                heartbeat.add(&lease);
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
    if now_ms < lease.holds_until_ms {
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

/// A release, as a request its retries reuse (so the core recognises them).
pub(crate) fn release_request(token: &str, outcome: Outcome, reason: Option<String>) -> Request {
    Request::new(
        ids::new_attempt_id(),
        Op::Release {
            token: token.to_string(),
            outcome,
            reason,
        },
    )
}

/// A renewal confirmed by the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The lease's duration from now on.
    pub ttl_ms: u64,
    /// Until when this process may act on it, on the coordinator's local clock (as
    /// [`Lease::holds_until_ms`]).
    pub holds_until_ms: u64,
    /// When it ends unless renewed again, on this machine's wall clock (for display).
    pub lease_until_wall_ms: u64,
    /// A newer ticket asked this holder to stop (`--cancel-running`): who.
    pub stop_asked: Option<String>,
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
    match (&executed.reply, executed.basis) {
        (Reply::Ticket(TicketView::Live(status)), Some(basis)) => Ok(Renewed {
            ttl_ms: status.phase_ms,
            holds_until_ms: basis.holds_until_local_ms(status.phase_ms),
            lease_until_wall_ms: wall_at(coord, basis.phase_stands_until_local_ms(status.phase_ms)),
            stop_asked: status.stop_asked.clone(),
        }),
        // A renewal always writes (it moves the heartbeat): an answer without a write is not
        // a confirmation.
        _ => Err(ClientError::Unconfirmed {
            key: key.to_string(),
        }),
    }
}

/// This machine's wall clock at the local-clock instant `local_ms` (for display only).
pub(crate) fn wall_at(coord: &Coordinator, local_ms: u64) -> u64 {
    let now_local = coord.local_ms();
    let now_wall = wall_ms();
    if local_ms >= now_local {
        now_wall.saturating_add(local_ms - now_local)
    } else {
        now_wall.saturating_sub(now_local - local_ms)
    }
}

/// The pause before trying a failing store again, `failing_for` into the outage: a quarter of
/// it, 100 ms to 2 s — quick after a blip, sparing after a long one.
pub fn retry_pause(failing_for: Duration) -> Duration {
    (failing_for / 4).clamp(Duration::from_millis(100), Duration::from_secs(2))
}
