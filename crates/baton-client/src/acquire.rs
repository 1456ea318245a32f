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
//! it (see [`fresh_grant_until`]). Several keys are taken one at a time in sorted order, with the
//! earlier ones renewed while it waits for the later ones, and all given back on failure: two
//! callers can never deadlock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::op::{Enqueue, TicketView};
use baton_core::{apply, Doc, Mode, Op, Outcome, Refusal, Reply, Request, TicketState};
use baton_store::StoreClock;

use crate::coordinator::{Coordinator, KeySnapshot};
use crate::error::ClientError;
use crate::heartbeat::Heartbeat;
use crate::ids;
use crate::poll::PollBounds;
use crate::time::wall_ms;

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
        }
    }
}

impl AcquireOptions {
    /// The claim window: twice the longest poll interval plus two seconds of slack, so a live
    /// waiter always claims in time (its longest jittered interval is 1.2 times the bound).
    pub fn claim(&self) -> Duration {
        self.poll.max * 2 + Duration::from_secs(2)
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
    /// When the lease ends unless renewed (this machine's wall clock, approximate).
    pub lease_until_wall_ms: u64,
    /// The lease duration.
    pub ttl_ms: u64,
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
}

/// Waits for a turn at `pending.key`.
pub async fn acquire(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
) -> Result<Lease, ClientError> {
    let deadline = options.timeout.map(|t| Instant::now() + t);
    // Nothing renews the lease this returns: it is claimed before it is returned.
    let turn = acquire_until(coord, pending, options, deadline, false).await?;
    Ok(turn.lease)
}

/// Takes every key, one at a time in sorted order, renewing those already held while waiting
/// for the next. On any failure every ticket is given back (held ones as `cancelled`, the
/// waiting one as `timed_out` or `cancelled`) and the error is returned.
pub async fn acquire_many(
    coord: &Arc<Coordinator>,
    pendings: &[Pending],
    options: &AcquireOptions,
    heartbeat: &Heartbeat,
) -> Result<Vec<Lease>, ClientError> {
    let deadline = options.timeout.map(|t| Instant::now() + t);
    let mut sorted: Vec<&Pending> = pendings.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut leases = Vec::new();
    for pending in sorted {
        match acquire_until(coord, pending, options, deadline, true).await {
            Ok(Turn {
                lease,
                unclaimed_until,
            }) => {
                match unclaimed_until {
                    Some(until) => heartbeat.add_unclaimed(&lease, until),
                    None => heartbeat.add(&lease),
                }
                leases.push(lease);
            }
            Err(error) => {
                heartbeat.stop_all();
                for lease in &leases {
                    let _ = release(coord, &lease.key, &lease.token, Outcome::Cancelled).await;
                }
                return Err(error);
            }
        }
    }
    Ok(leases)
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
    let request = Request {
        finishes_seen: None,
        attempt: ids::new_attempt_id(),
        op: Op::Release {
            token: token.to_string(),
            outcome,
            reason,
        },
    };
    coord.execute(key, &request).await.map(|_| ())
}

/// Renews a held ticket by its token; returns when the lease now ends (this machine's wall
/// clock, approximate).
pub async fn renew(
    coord: &Coordinator,
    key: &str,
    token: &str,
    ttl: Option<Duration>,
) -> Result<u64, ClientError> {
    let request = Request {
        finishes_seen: None,
        attempt: ids::new_attempt_id(),
        op: Op::Renew {
            token: token.to_string(),
            ttl_ms: ttl.map(|t| t.as_millis() as u64),
        },
    };
    let executed = coord.execute(key, &request).await?;
    match executed.reply {
        Reply::Ticket(TicketView::Live(status)) => Ok(wall_ms() + status.phase_ms),
        _ => Ok(wall_ms()),
    }
}

/// A turn taken: the lease, and, when the grant was seen but not yet claimed (left to the
/// caller's heartbeat), the instant on this process's monotonic clock until which the grant
/// surely stands unclaimed.
struct Turn {
    lease: Lease,
    unclaimed_until: Option<Instant>,
}

impl From<Lease> for Turn {
    fn from(lease: Lease) -> Turn {
        Turn {
            lease,
            unclaimed_until: None,
        }
    }
}

/// Waits for the turn. With `heartbeat_claims`, the caller hands the lease to a heartbeat at
/// once, so a fresh grant may be returned unclaimed ([`fresh_grant_until`]).
async fn acquire_until(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
    deadline: Option<Instant>,
    heartbeat_claims: bool,
) -> Result<Turn, ClientError> {
    let key = pending.key.as_str();
    let started = Instant::now();
    let enqueue = Request {
        finishes_seen: None,
        attempt: ids::new_attempt_id(),
        op: Op::Enqueue(Enqueue {
            id: pending.id.clone(),
            token: pending.token.clone(),
            mode: options.mode,
            limit: options.limit,
            context: options.context.clone(),
            order: options.order.clone(),
            supersede: options.supersede,
            keep: options.keep,
            ttl_ms: options.ttl.as_millis() as u64,
            waiter_ttl_ms: options.waiter_ttl.as_millis() as u64,
            claim_ms: options.claim().as_millis() as u64,
            max_live: options.max_live,
        }),
    };
    // When the last request was sent whose answer showed this ticket still queued: any grant
    // to it happened later (every store's reads and writes are linearizable).
    let mut queued_at = Instant::now();
    // The enqueue is retried as the wait is (the core recognises a retried enqueue by its
    // ticket id, so one that landed unseen makes no second ticket).
    let mut failing_since: Option<Instant> = None;
    let executed = loop {
        match coord.execute(key, &enqueue).await {
            Ok(executed) => break executed,
            Err(error) if error.is_transient() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= options.store_retry {
                    return Err(error);
                }
                tracing::warn!(key, %error, "the store failed; retrying the enqueue");
                let pause = retry_pause(since.elapsed());
                tokio::time::sleep(pause).await;
                queued_at = Instant::now();
            }
            Err(error) => return Err(error),
        }
    };
    if let Some(lease) = held_lease(key, pending, &executed.reply, options)? {
        return Ok(lease.into());
    }
    let mut watch = coord.store().watch(key).await?;
    let pushed = watch.is_some();
    // A change between the enqueue and the subscription woke nobody: read once right away.
    let mut read_now = pushed;
    let mut last_refresh = Instant::now();
    let refresh_every = options.waiter_ttl / 3;
    let mut doc = executed.doc;
    let mut clock_reading = (coord.store().clock().await?, Instant::now());
    // While the store fails with transient errors: since when, and the last error.
    let mut trouble: Option<(Instant, String)> = None;
    // The pause before the next try after such an error.
    let mut retry_in: Option<Duration> = None;
    // The value of a store call, or, on a transient error, a pause and the loop again (which
    // reads afresh) until the store has failed for `store_retry`.
    macro_rules! or_retry {
        ($result:expr) => {
            match $result {
                Ok(value) => value,
                Err(error) if error.is_transient() => {
                    let since = trouble.as_ref().map_or_else(Instant::now, |t| t.0);
                    if since.elapsed() >= options.store_retry {
                        return Err(error);
                    }
                    // Told through the progress (the waiting line); logged for `-v`.
                    tracing::info!(key, %error, "the store failed while waiting; retrying");
                    retry_in = Some(retry_pause(since.elapsed()));
                    trouble = Some((since, error.to_string()));
                    continue;
                }
                Err(error) => return Err(error),
            }
        };
    }
    loop {
        let position = doc
            .queued()
            .iter()
            .position(|t| t.id == pending.id)
            .unwrap_or(0);
        // Told after every read: the caller decides what is worth printing.
        if let Some(progress) = &options.on_progress {
            let mut told = progress_of(key, &pending.id, &doc, position, started.elapsed());
            told.store_trouble = trouble.as_ref().map(|t| t.1.clone());
            progress(&told);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return give_up(coord, pending, options, &doc, position)
                .await
                .map(Turn::from);
        }
        // Sleep until the first of: the next poll, this waiter's refresh, the earliest deadline
        // among the key's tickets; on a store that cannot push, never less than the poll floor
        // (every read is a request someone pays for); and never past the timeout.
        let retrying = retry_in.is_some();
        let mut sleep = if let Some(pause) = retry_in.take() {
            pause
        } else if read_now {
            Duration::ZERO
        } else {
            PollBounds::jittered(
                options.poll.interval(position, pushed),
                rand::random::<f64>(),
            )
        };
        sleep = sleep.min((last_refresh + refresh_every).saturating_duration_since(now));
        if let Some(until) = next_expiry(coord, key, &doc, &pending.id, &clock_reading) {
            sleep = sleep.min(until + Duration::from_millis(2));
        }
        if !pushed {
            sleep = sleep.max(options.poll.floor());
        }
        if let Some(d) = deadline {
            sleep = sleep.min(d.saturating_duration_since(now));
        }
        read_now = false;
        let woke = match watch.as_mut() {
            Some(w) if !retrying => {
                tokio::select! {
                    _ = tokio::time::sleep(sleep) => Ok(None),
                    changed = w.changed() => changed,
                }
            }
            _ => {
                tokio::time::sleep(sleep).await;
                Ok(None)
            }
        };
        // A watch fails only when its store is gone (closed): final.
        let pushed_doc = woke?;
        // Every clock reading of the snapshot below is taken after this instant.
        let read_from = Instant::now();
        let snapshot = match pushed_doc {
            Some(pushed) => {
                let snapshot = or_retry!(coord.adopt(key, pushed).await);
                let mine = snapshot.doc.as_ref().and_then(|d| d.by_id(&pending.id));
                if mine.is_some() {
                    snapshot
                } else {
                    // A pushed document may predate this ticket (a wake-up sent before the
                    // enqueue, delivered after it): only a read can say the ticket is gone.
                    or_retry!(read_noting_queued(coord, key, &pending.id, &mut queued_at).await)
                }
            }
            None => {
                or_retry!(read_noting_queued(coord, key, &pending.id, &mut queued_at).await)
            }
        };
        if trouble.take().is_some() {
            tracing::info!(key, "the store answers again");
        }

        clock_reading = (snapshot.clock.clone(), Instant::now());
        let Some(new_doc) = snapshot.doc else {
            return Err(lost(key, &doc, &pending.id));
        };
        doc = new_doc;
        let Some(mine) = doc.by_id(&pending.id) else {
            return Err(lost(key, &doc, &pending.id));
        };
        let something_expired = {
            let observer = coord.observer(key);
            let uncertain_ms = coord.store().capabilities().clock_uncertain_ms;
            let clock = crate::coordinator::core_clock(
                &snapshot.clock,
                uncertain_ms,
                &observer,
                coord.mono_ms(),
                wall_ms(),
            );
            let tick = Request {
                finishes_seen: None,
                attempt: String::new(),
                op: Op::Tick,
            };
            apply(Some(&doc), &tick, &clock).is_ok_and(|a| a.changed)
        };
        if heartbeat_claims && mine.state == TicketState::Held && !mine.claimed {
            let claim = Duration::from_millis(mine.claim_ms);
            let on_store_clock = store_deadline_bound(
                &snapshot.clock,
                read_from,
                mine.deadline_ms,
                doc.epoch.as_deref(),
            );
            if let Some(until) = fresh_grant_until(queued_at, claim, on_store_clock, Instant::now())
            {
                let left = until.saturating_duration_since(Instant::now());
                return Ok(Turn {
                    lease: Lease {
                        key: key.to_string(),
                        id: pending.id.clone(),
                        token: pending.token.clone(),
                        fence: mine.fence,
                        acquired_wall_ms: mine.granted_wall_ms,
                        lease_until_wall_ms: wall_ms() + left.as_millis() as u64,
                        ttl_ms: options.ttl.as_millis() as u64,
                    },
                    unclaimed_until: Some(until),
                });
            }
        }
        let refresh_due = last_refresh.elapsed() >= refresh_every;
        if mine.state == TicketState::Held || something_expired || refresh_due {
            let refresh = Request {
                finishes_seen: None,
                attempt: ids::new_attempt_id(),
                op: Op::Refresh {
                    token: pending.token.clone(),
                },
            };
            let sent = Instant::now();
            let refreshed = coord.execute(key, &refresh).await;
            let executed = or_retry!(refreshed.map_err(|e| ended_is_lost(key, e)));
            last_refresh = Instant::now();
            if let Some(lease) = held_lease(key, pending, &executed.reply, options)? {
                return Ok(lease.into());
            }
            if is_queued(&executed.doc, &pending.id) {
                queued_at = sent;
            }
            doc = executed.doc;
        }
    }
}

/// Until when a grant seen unclaimed surely stands, if long enough to hand it to a heartbeat
/// instead of claiming it first. Two bounds, the earlier wins, less the heartbeat's safety
/// margin:
///
/// - `queued_at` is when the last request was sent whose answer showed the ticket queued, so
///   the grant was written after it, and no participant that judges by observation (etcd,
///   DynamoDB) ends it before it has seen it unchanged for the claim window, which it cannot
///   have begun before the grant was written.
/// - `on_store_clock` ([`store_deadline_bound`]): on a store with a clock the grant ends at the
///   deadline its granter wrote, which the granter computed from *its* reading of the store's
///   clock. That reading may be much older than `queued_at`: a write held up in the network
///   (seconds, in a black hole) lands after the waiter's queued read, its deadline already
///   close or past. Found by the torture harness (Redis, a semaphore granted to three after a
///   3 s black hole); `queued_at` alone assumed the deadline was set at the write.
///
/// Worth it only if at least half the window is left: the heartbeat's claim is one CAS, and a
/// grant claimed first never needs this bound. How long ago the pushed document was sent, or
/// how long this process was paused since, does not matter: both bounds are from this
/// process's own requests.
pub fn fresh_grant_until(
    queued_at: Instant,
    claim: Duration,
    on_store_clock: Option<Instant>,
    now: Instant,
) -> Option<Instant> {
    let mut stands_until = queued_at + claim;
    if let Some(bound) = on_store_clock {
        stands_until = stands_until.min(bound);
    }
    let until = stands_until.checked_sub(crate::heartbeat::safety_margin(claim))?;
    (until.saturating_duration_since(now) >= claim / 2).then_some(until)
}

/// On a store with a clock, until when (on this process's monotonic clock) no participant can
/// judge a phase with deadline `deadline_ms` ended: `clock` was read after `read_from`, and the
/// store's time is at most `behind_ms` plus the store's `clock_uncertain_ms` ahead of the
/// reading. So the store's time at `t` is at most `now_ms + behind_ms + uncertain + (t -
/// read_from)`, and a phase ends once the store's time is `uncertain` past its deadline (every
/// participant waits the uncertainty out, so it cancels): not before `read_from + deadline_ms -
/// now_ms - behind_ms`. `None` on a store without a clock; `read_from` itself (nothing to count on)
/// when the deadline is missing or from another epoch of the clock.
pub fn store_deadline_bound(
    clock: &StoreClock,
    read_from: Instant,
    deadline_ms: Option<u64>,
    doc_epoch: Option<&str>,
) -> Option<Instant> {
    let StoreClock::Time {
        now_ms,
        behind_ms,
        epoch,
    } = clock
    else {
        return None;
    };
    let left_ms = match deadline_ms {
        Some(deadline_ms) if doc_epoch == Some(epoch.as_str()) => deadline_ms
            .saturating_sub(*now_ms)
            .saturating_sub(*behind_ms),
        _ => 0,
    };
    Some(read_from + Duration::from_millis(left_ms))
}

/// The pause before trying a failing store again, `failing_for` into the outage: a quarter of
/// it, 100 ms to 2 s — quick after a blip, sparing after a long one.
pub fn retry_pause(failing_for: Duration) -> Duration {
    (failing_for / 4).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// A refresh refused because the ticket has ended (abandoned after an outage longer than its
/// waiter lease, expired unclaimed, cancelled): the turn is over, as when a read shows it gone,
/// not a refused operation.
fn ended_is_lost(key: &str, error: ClientError) -> ClientError {
    match error {
        ClientError::Refused {
            refusal: Refusal::Ended {
                outcome, forced, ..
            },
            ..
        } => ClientError::Ended {
            key: key.to_string(),
            outcome,
            forced,
        },
        other => other,
    }
}

/// Reads `key`; when the answer shows ticket `id` queued, the read's send time becomes
/// `queued_at`.
async fn read_noting_queued(
    coord: &Coordinator,
    key: &str,
    id: &str,
    queued_at: &mut Instant,
) -> Result<KeySnapshot, ClientError> {
    let sent = Instant::now();
    let snapshot = coord.read(key).await?;
    if snapshot.doc.as_ref().is_some_and(|doc| is_queued(doc, id)) {
        *queued_at = sent;
    }
    Ok(snapshot)
}

fn is_queued(doc: &Doc, id: &str) -> bool {
    doc.by_id(id)
        .is_some_and(|ticket| ticket.state == TicketState::Queued)
}

/// How long until the earliest phase of another ticket of the key ends, if known.
fn next_expiry(
    coord: &Coordinator,
    key: &str,
    doc: &Doc,
    me: &str,
    (clock, read_at): &(StoreClock, Instant),
) -> Option<Duration> {
    let others = doc.tickets.iter().filter(|t| t.id != me);
    match clock {
        StoreClock::Time { now_ms, .. } => {
            // A phase ends only once the clock is its uncertainty past the deadline.
            let uncertain_ms = coord.store().capabilities().clock_uncertain_ms;
            let earliest = others.filter_map(|t| t.deadline_ms).min()?;
            let ends = earliest.saturating_add(uncertain_ms);
            let left = Duration::from_millis(ends.saturating_sub(*now_ms));
            Some(left.saturating_sub(read_at.elapsed()))
        }
        StoreClock::None => {
            let observer = coord.observer(key);
            let earliest = others
                .filter_map(|t| observer.expires_at_mono_ms(t))
                .min()?;
            Some(Duration::from_millis(
                earliest.saturating_sub(coord.mono_ms()),
            ))
        }
    }
}

/// The waiting ticket is gone from the document: say how it ended.
fn lost(key: &str, doc: &Doc, id: &str) -> ClientError {
    match doc.finished.iter().rev().find(|m| m.id == id) {
        Some(mark) => ClientError::Ended {
            key: key.to_string(),
            outcome: mark.outcome,
            forced: mark.forced,
        },
        None => ClientError::Ended {
            key: key.to_string(),
            outcome: Outcome::Abandoned,
            forced: false,
        },
    }
}

/// The lease, if the reply says the ticket holds the key (claimed); the error, if it ended.
fn held_lease(
    key: &str,
    pending: &Pending,
    reply: &Reply,
    options: &AcquireOptions,
) -> Result<Option<Lease>, ClientError> {
    match reply {
        Reply::Ticket(TicketView::Live(status)) if status.state == TicketState::Held => {
            let ttl_ms = options.ttl.as_millis() as u64;
            Ok(Some(Lease {
                key: key.to_string(),
                id: pending.id.clone(),
                token: pending.token.clone(),
                fence: status.fence,
                acquired_wall_ms: status.granted_wall_ms,
                lease_until_wall_ms: wall_ms() + ttl_ms,
                ttl_ms,
            }))
        }
        Reply::Ticket(TicketView::Live(_)) => Ok(None),
        Reply::Ticket(TicketView::Finished {
            outcome, forced, ..
        }) => Err(ClientError::Ended {
            key: key.to_string(),
            outcome: *outcome,
            forced: *forced,
        }),
        _ => Ok(None),
    }
}

/// The wait ran out: withdraw the ticket as `timed_out`, unless it was granted meanwhile, in
/// which case the turn is taken after all.
async fn give_up(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
    doc: &Doc,
    position: usize,
) -> Result<Lease, ClientError> {
    let key = pending.key.as_str();
    match release(coord, key, &pending.token, Outcome::TimedOut).await {
        Ok(()) => Err(ClientError::TimedOut {
            key: key.to_string(),
            detail: describe_wait(doc, position),
        }),
        Err(ClientError::Refused {
            refusal:
                Refusal::BadOutcome {
                    state: TicketState::Held,
                    ..
                },
            ..
        }) => {
            let refresh = Request {
                finishes_seen: None,
                attempt: ids::new_attempt_id(),
                op: Op::Refresh {
                    token: pending.token.clone(),
                },
            };
            let executed = coord.execute(key, &refresh).await?;
            match held_lease(key, pending, &executed.reply, options)? {
                Some(lease) => Ok(lease),
                None => Err(ClientError::TimedOut {
                    key: key.to_string(),
                    detail: describe_wait(doc, position),
                }),
            }
        }
        Err(ClientError::Refused {
            refusal: Refusal::Ended {
                outcome, forced, ..
            },
            ..
        }) => Err(ClientError::Ended {
            key: key.to_string(),
            outcome,
            forced,
        }),
        Err(e) => Err(e),
    }
}

fn describe_wait(doc: &Doc, position: usize) -> String {
    let holders: Vec<String> = doc
        .holders()
        .map(|t| {
            if t.context.is_empty() {
                t.id.clone()
            } else {
                format!("{} ({})", t.id, t.context)
            }
        })
        .collect();
    if holders.is_empty() {
        format!("{position} ahead in the queue")
    } else {
        format!(
            "{position} ahead in the queue; held by {}",
            holders.join(", ")
        )
    }
}

fn progress_of(key: &str, id: &str, doc: &Doc, position: usize, waited: Duration) -> WaitProgress {
    let now = wall_ms();
    WaitProgress {
        key: key.to_string(),
        id: id.to_string(),
        position,
        holders: doc
            .holders()
            .map(|t| HolderView {
                id: t.id.clone(),
                context: t.context.clone(),
                held_ms: now.saturating_sub(t.granted_wall_ms),
            })
            .collect(),
        waited,
        estimate: baton_core::estimate::estimate_wait_ms(doc, id, now).map(Duration::from_millis),
        store_trouble: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_refused_as_ended_is_a_lost_turn_and_nothing_else_changes() {
        let refused = ClientError::Refused {
            key: "k".into(),
            refusal: Refusal::Ended {
                id: "t-1".into(),
                outcome: Outcome::Abandoned,
                forced: false,
            },
        };
        assert!(matches!(
            ended_is_lost("k", refused),
            ClientError::Ended {
                outcome: Outcome::Abandoned,
                forced: false,
                ..
            }
        ));
        let other = ClientError::Refused {
            key: "k".into(),
            refusal: Refusal::UnknownToken,
        };
        assert!(matches!(
            ended_is_lost("k", other),
            ClientError::Refused {
                refusal: Refusal::UnknownToken,
                ..
            }
        ));
    }
}
