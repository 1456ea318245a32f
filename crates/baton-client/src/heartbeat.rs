//! Keeping held leases alive, and knowing when one is lost.
//!
//! A background task renews every held lease at a third of its TTL, each renewal on its own
//! (a renewal of one key stuck on a dead connection never holds up another key's claim or
//! renewal), each bounded by its own lease's deadline. Whether a lease still stands is judged
//! on the coordinator's local clock ([`crate::time::LocalClock`]: boot time, which counts a
//! suspend) from the *basis* of the last confirmed write — before it read the store's clock,
//! less how far that reading lagged ([`baton_core::lease::Basis`]) — never from when its answer
//! came back. Once the bound has passed without another confirmation, the lease is lost
//! (before the store can grant it to anyone else) and the lost-lease signal fires.
//!
//! The local clock is looked at every [`CHECK_EVERY`] at least, not only when a timer set on
//! tokio's clock fires: tokio's timers run on the monotonic clock, which stops while the machine
//! is suspended, so a laptop resumed after its lease ended would otherwise notice only at its
//! next renewal. A process resumed from SIGSTOP notices at once, as the deadline check comes
//! before anything else.
//!
//! A lease may arrive unclaimed (a grant the waiter saw but left to the heartbeat to claim,
//! [`Lease::claimed`] false): its first renewal is the claim, sent a third into the time the
//! grant surely stands ([`baton_core::lease::claim_unclaimed_at_local_ms`]), so a turn shorter than that
//! is released unclaimed and costs no claim write; until the claim is confirmed, the lease
//! stands only until the bound the waiter proved for the grant.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::lease::safety_margin_ms;
use baton_core::Refusal;
use baton_store::WatchHandle;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::follow::{follow, Follower};
use crate::hold::{release, release_retrying, renew};
use crate::retry::renewal_retry_in_ms;
use crate::turn::{Lease, Renewed};

/// The longest the heartbeat goes without looking at the local clock: how late after a resume
/// from suspend a lost lease may be noticed (plus the scheduler's delay).
pub const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Why a lease was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The key whose lease was lost.
    pub key: String,
    /// What happened.
    pub reason: String,
    /// How the ticket ended, when the store said so (an operator's forced release, say);
    /// `None` when the lease could not be confirmed in time.
    pub outcome: Option<baton_core::Outcome>,
}

impl Lost {
    fn not_confirmed(key: &str) -> Lost {
        Lost {
            key: key.to_string(),
            reason: "could not renew the lease in time (was this process paused or suspended, \
                     or the store unreachable?)"
                .into(),
            outcome: None,
        }
    }
}

/// A holder asked to stop by a newer ticket ([`baton_core::Enqueue::cancel_running`]), as its
/// renewal answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopAsked {
    /// The key whose holder was asked.
    pub key: String,
    /// Who asked: the newer ticket's id and context.
    pub by: String,
}

struct Tracked {
    lease: Lease,
    /// The key followed while held, so the release is one CAS ([`crate::follow`]); stops when
    /// this is dropped.
    _follower: Option<Follower>,
    /// When to send the next renewal, on the local clock.
    next_try_ms: u64,
    /// A renewal of it is under way.
    renewing: bool,
}

/// The margin by which a lease is given up before it can end for anyone else
/// ([`baton_core::lease::safety_margin_ms`]).
pub fn safety_margin(ttl: Duration) -> Duration {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(safety_margin_ms(ttl_ms))
}

/// Renews held leases in the background.
pub struct Heartbeat {
    coord: Arc<Coordinator>,
    tracked: Arc<Mutex<Vec<Tracked>>>,
    lost_rx: watch::Receiver<Option<Lost>>,
    stop_rx: watch::Receiver<Option<StopAsked>>,
    wake: Arc<tokio::sync::Notify>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat").finish_non_exhaustive()
    }
}

impl Heartbeat {
    /// Starts a heartbeat task (with no leases yet) on the current tokio runtime.
    pub fn start(coord: Arc<Coordinator>) -> Heartbeat {
        let tracked: Arc<Mutex<Vec<Tracked>>> = Arc::new(Mutex::new(Vec::new()));
        let (lost_tx, lost_rx) = watch::channel(None);
        let (stop_tx, stop_rx) = watch::channel(None);
        let wake = Arc::new(tokio::sync::Notify::new());
        let signals = Signals { lost_tx, stop_tx };
        let task = tokio::spawn(run(coord.clone(), tracked.clone(), signals, wake.clone()));
        Heartbeat {
            coord,
            tracked,
            lost_rx,
            stop_rx,
            wake,
            task,
        }
    }

    /// Starts renewing `lease`: at a third of its TTL from the write that set it, or, when it
    /// is unclaimed, a third into the time the grant surely stands (that renewal claims it). It
    /// stands until its `holds_until_ms` unless a renewal is confirmed before.
    pub fn add(&self, lease: &Lease) {
        self.add_following(lease, None);
    }

    /// As [`Heartbeat::add`], following the key with `watch` (the wait's subscription, current
    /// from the grant on) where it can ([`crate::follow`]).
    pub(crate) fn add_following(&self, lease: &Lease, watch: Option<WatchHandle>) {
        let next_try_ms = lease.next_renewal_ms(self.coord.local_ms());
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.push(Tracked {
                lease: lease.clone(),
                _follower: follow(&self.coord, &lease.key, watch),
                next_try_ms,
                renewing: false,
            });
        }
        self.wake.notify_one();
    }

    /// Stops renewing every lease (they are not released).
    pub fn stop_all(&self) {
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.clear();
        }
    }

    /// A receiver that changes to `Some` when a lease is lost.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.lost_rx.clone()
    }

    /// A receiver that changes to `Some` when a renewal answers that a newer ticket asked this
    /// holder to stop (`--cancel-running`). The leases are still renewed meanwhile: they stand
    /// until the holder releases them.
    pub fn stop_asked(&self) -> watch::Receiver<Option<StopAsked>> {
        self.stop_rx.clone()
    }

    /// Until when (on the coordinator's local clock) every lease it renews stands by its last
    /// confirmed write, renewals going on meanwhile; `None` once it renews none. A lease lost
    /// by a refusal keeps the bound it had: the refusal may answer this process's own end of
    /// it, landed unseen (`crate::hold::end_retrying`).
    pub(crate) fn holds_until_ms(&self) -> Option<u64> {
        let tracked = self.tracked.lock().ok()?;
        tracked.iter().map(|t| t.lease.holds_until_ms).min()
    }

    /// Whether every lease still stands right now, by the local clock (not waiting for the
    /// background task to look): the check to make just before acting on them, such as
    /// starting a command.
    pub fn standing(&self) -> Result<(), Lost> {
        if let Some(lost) = self.lost_rx.borrow().clone() {
            return Err(lost);
        }
        let now_ms = self.coord.local_ms();
        let Ok(tracked) = self.tracked.lock() else {
            return Ok(());
        };
        match tracked.iter().find(|t| !t.lease.stands_at(now_ms)) {
            Some(t) => Err(Lost::not_confirmed(&t.lease.key)),
            None => Ok(()),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A renewal's result, for the lease with this ticket id.
type Renewal = (
    String,
    Result<Result<Renewed, ClientError>, tokio::time::error::Elapsed>,
);

/// What the heartbeat tells its owner.
struct Signals {
    lost_tx: watch::Sender<Option<Lost>>,
    stop_tx: watch::Sender<Option<StopAsked>>,
}

async fn run(
    coord: Arc<Coordinator>,
    tracked: Arc<Mutex<Vec<Tracked>>>,
    signals: Signals,
    wake: Arc<tokio::sync::Notify>,
) {
    let lost_tx = &signals.lost_tx;
    // Dropped with this task: renewals under way are abandoned with it.
    let mut renewals: JoinSet<Renewal> = JoinSet::new();
    loop {
        let now_ms = coord.local_ms();
        // Deadlines first: a lease past its bound is lost, whatever a renewal might still say.
        let next_ms = {
            let Ok(mut list) = tracked.lock() else { return };
            if let Some(t) = list.iter().find(|t| !t.lease.stands_at(now_ms)) {
                tell_lost(lost_tx, Lost::not_confirmed(&t.lease.key));
                return;
            }
            for t in list
                .iter_mut()
                .filter(|t| !t.renewing && now_ms >= t.next_try_ms)
            {
                t.renewing = true;
                let bound = Duration::from_millis(t.lease.holds_until_ms - now_ms);
                let (coord, lease) = (coord.clone(), t.lease.clone());
                renewals.spawn(async move {
                    let renewed = renew(&coord, &lease.key, &lease.token, None);
                    (lease.id, tokio::time::timeout(bound, renewed).await)
                });
            }
            list.iter()
                .flat_map(|t| {
                    [
                        Some(t.lease.holds_until_ms),
                        (!t.renewing).then_some(t.next_try_ms),
                    ]
                })
                .flatten()
                .min()
        };
        let sleep = next_ms.map_or(CHECK_EVERY, |next| {
            Duration::from_millis(next.saturating_sub(now_ms)).min(CHECK_EVERY)
        });
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = wake.notified() => {}
            Some(done) = renewals.join_next(), if !renewals.is_empty() => {
                let Ok((id, result)) = done else { continue };
                if let Some(lost) = confirm(&coord, &tracked, &id, result, &signals.stop_tx) {
                    tell_lost(lost_tx, lost);
                    return;
                }
            }
        }
    }
}

/// Fires the lost-lease signal, and says so for `-v`: the one place a lost lease is told.
fn tell_lost(lost_tx: &watch::Sender<Option<Lost>>, lost: Lost) {
    tracing::info!("lease {}: lost: {}", lost.key, lost.reason);
    let _ = lost_tx.send(Some(lost));
}

/// Takes a renewal's result into the lease it was for: a confirmation moves its bound on; a
/// refusal because the ticket ended loses it; any other failure is tried again shortly.
fn confirm(
    coord: &Coordinator,
    tracked: &Mutex<Vec<Tracked>>,
    id: &str,
    result: Result<Result<Renewed, ClientError>, tokio::time::error::Elapsed>,
    stop_tx: &watch::Sender<Option<StopAsked>>,
) -> Option<Lost> {
    let Ok(mut list) = tracked.lock() else {
        return None;
    };
    // Stopped meanwhile (released, or given back): nothing to do.
    let t = list.iter_mut().find(|t| t.lease.id == id)?;
    t.renewing = false;
    match result {
        Ok(Ok(renewed)) => {
            t.lease.renewed(&renewed);
            t.next_try_ms = t.lease.next_renewal_ms(coord.local_ms());
            if let Some(by) = renewed.stop_asked {
                let key = t.lease.key.clone();
                // The first ask is the one told; later renewals repeat it.
                stop_tx.send_if_modified(|asked| {
                    let first = asked.is_none();
                    asked.get_or_insert(StopAsked { key, by });
                    first
                });
            }
            None
        }
        Ok(Err(ClientError::Refused { refusal, .. }))
            if matches!(refusal, Refusal::Ended { .. } | Refusal::UnknownToken) =>
        {
            let outcome = match &refusal {
                Refusal::Ended { outcome, .. } => Some(*outcome),
                _ => None,
            };
            Some(Lost {
                key: t.lease.key.clone(),
                reason: refusal.to_string(),
                outcome,
            })
        }
        Ok(Err(error)) => {
            tracing::warn!(key = %t.lease.key, %error, "renewal failed; retrying");
            t.next_try_ms = coord.local_ms() + renewal_retry_in_ms(t.lease.ttl_ms);
            None
        }
        Err(_) => {
            t.next_try_ms = coord.local_ms() + renewal_retry_in_ms(t.lease.ttl_ms);
            None
        }
    }
}

/// Held leases with their heartbeat: released on [`LeaseGuard::release`], or on drop where a
/// tokio runtime is still there to do it (as `cancelled`).
pub struct LeaseGuard {
    coord: Arc<Coordinator>,
    leases: Vec<Lease>,
    heartbeat: Heartbeat,
    released: bool,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

impl LeaseGuard {
    /// Guards `leases`, renewed by `heartbeat`.
    pub fn new(coord: Arc<Coordinator>, leases: Vec<Lease>, heartbeat: Heartbeat) -> LeaseGuard {
        LeaseGuard {
            coord,
            leases,
            heartbeat,
            released: false,
        }
    }

    /// The held leases.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// A receiver that changes to `Some` when a lease is lost.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.heartbeat.lost()
    }

    /// A receiver that changes to `Some` when a newer ticket asks a holder to stop
    /// ([`Heartbeat::stop_asked`]).
    pub fn stop_asked(&self) -> watch::Receiver<Option<StopAsked>> {
        self.heartbeat.stop_asked()
    }

    /// Whether every lease still stands right now ([`Heartbeat::standing`]): check it just
    /// before acting on the leases.
    pub fn standing(&self) -> Result<(), Lost> {
        self.heartbeat.standing()
    }

    /// Stops renewing and releases every lease with `outcome`. Returns the first error; every
    /// lease is attempted.
    pub async fn release(self, outcome: baton_core::Outcome) -> Result<(), ClientError> {
        self.release_with_reason(outcome, None).await
    }

    /// [`LeaseGuard::release`] with a reason recorded in each key's history.
    pub async fn release_with_reason(
        self,
        outcome: baton_core::Outcome,
        reason: Option<String>,
    ) -> Result<(), ClientError> {
        self.release_each(|_| (outcome, reason.clone())).await
    }

    /// Stops renewing and releases every lease with the outcome and reason `how` gives it
    /// (a holder asked to stop releases that key as superseded, the others as cancelled).
    /// Returns the first error; every lease is attempted.
    pub async fn release_each(
        mut self,
        how: impl Fn(&Lease) -> (baton_core::Outcome, Option<String>),
    ) -> Result<(), ClientError> {
        self.released = true;
        self.heartbeat.stop_all();
        let mut first_error = None;
        for lease in &self.leases {
            let (outcome, reason) = how(lease);
            let released = release_retrying(&self.coord, lease, outcome, reason).await;
            if let Err(e) = released {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.heartbeat.stop_all();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let coord = self.coord.clone();
        let leases = std::mem::take(&mut self.leases);
        handle.spawn(async move {
            for lease in leases {
                let outcome = baton_core::Outcome::Cancelled;
                let _ = release(&coord, &lease.key, &lease.token, outcome).await;
            }
        });
    }
}
