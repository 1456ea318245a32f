//! Keeping held leases alive, and knowing when one is lost.
//!
//! A background task renews every held lease at a third of its TTL. Whether a lease still
//! stands is judged on this process's monotonic clock from when the last *successful* renewal
//! was *sent*: once `ttl - margin` has passed since then without another success, the lease is
//! treated as lost (before the store can grant it to someone else), and the lost-lease signal
//! fires. A process that was paused (SIGSTOP) past its lease notices at once on resume, since
//! the deadline check runs before any renewal is tried.
//!
//! A lease may arrive unclaimed ([`Heartbeat::add_unclaimed`]: a grant the waiter saw but left
//! to the heartbeat to claim). Its first renewal is sent at once and is the claim; until it
//! succeeds, the lease stands only until the instant the waiter proved for the grant.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_core::Refusal;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::acquire::{release, release_with_reason, renew, Lease};
use crate::coordinator::Coordinator;
use crate::error::ClientError;

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

struct Tracked {
    lease: Lease,
    /// When the last successful renewal (or the grant) was sent.
    confirmed_at: Instant,
    /// When to try next.
    next_try: Instant,
    /// For a grant not yet claimed: until when it surely stands (replaces the TTL's deadline
    /// until the first renewal, the claim, succeeds).
    unclaimed_until: Option<Instant>,
}

/// The margin by which a lease is given up before its TTL runs out locally: a tenth of the
/// TTL, at least 300 ms.
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(300)).min(ttl / 2)
}

/// Renews held leases in the background.
pub struct Heartbeat {
    tracked: Arc<Mutex<Vec<Tracked>>>,
    lost_rx: watch::Receiver<Option<Lost>>,
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
        let wake = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(run(coord, tracked.clone(), lost_tx, wake.clone()));
        Heartbeat {
            tracked,
            lost_rx,
            wake,
            task,
        }
    }

    /// Starts renewing `lease`, granted (or last renewed) just now.
    pub fn add(&self, lease: &Lease) {
        let now = Instant::now();
        let every = Duration::from_millis(lease.ttl_ms / 3);
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.push(Tracked {
                lease: lease.clone(),
                confirmed_at: now,
                next_try: now + every,
                unclaimed_until: None,
            });
        }
        self.wake.notify_one();
    }

    /// Starts renewing `lease`, a grant not yet claimed that surely stands until `until`: its
    /// first renewal, sent at once, claims it; if that does not succeed by `until` (less
    /// nothing: `until` already has the margin), the lease is lost.
    pub fn add_unclaimed(&self, lease: &Lease, until: Instant) {
        let now = Instant::now();
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.push(Tracked {
                lease: lease.clone(),
                confirmed_at: now,
                next_try: now,
                unclaimed_until: Some(until),
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
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    coord: Arc<Coordinator>,
    tracked: Arc<Mutex<Vec<Tracked>>>,
    lost_tx: watch::Sender<Option<Lost>>,
    wake: Arc<tokio::sync::Notify>,
) {
    loop {
        // The earliest moment something must happen: a renewal, or a local deadline.
        let next = {
            let Ok(list) = tracked.lock() else { return };
            list.iter()
                .flat_map(|t| [t.next_try, local_deadline(t)])
                .min()
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = wake.notified() => continue,
                }
            }
            None => {
                wake.notified().await;
                continue;
            }
        }
        // Deadlines first: a lease not confirmed for ttl - margin is lost, whatever a renewal
        // might still say.
        let now = Instant::now();
        let expired = {
            let Ok(list) = tracked.lock() else { return };
            list.iter()
                .find(|t| now >= local_deadline(t))
                .map(|t| t.lease.key.clone())
        };
        if let Some(key) = expired {
            let _ = lost_tx.send(Some(Lost {
                key,
                reason: "could not renew the lease in time (was this process paused, or the \
                         store unreachable?)"
                    .into(),
                outcome: None,
            }));
            return;
        }
        let due: Vec<(Lease, Instant)> = {
            let Ok(list) = tracked.lock() else { return };
            list.iter()
                .filter(|t| now >= t.next_try)
                .map(|t| (t.lease.clone(), local_deadline(t)))
                .collect()
        };
        for (lease, deadline) in due {
            let sent = Instant::now();
            let ttl = Duration::from_millis(lease.ttl_ms);
            let attempt = tokio::time::timeout_at(
                deadline.into(),
                renew(&coord, &lease.key, &lease.token, None),
            )
            .await;
            let retry_in = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
            let update = |confirmed: bool| {
                if let Ok(mut list) = tracked.lock() {
                    if let Some(t) = list.iter_mut().find(|t| t.lease.id == lease.id) {
                        if confirmed {
                            t.confirmed_at = sent;
                            t.next_try = sent + ttl / 3;
                            t.unclaimed_until = None;
                        } else {
                            t.next_try = Instant::now() + retry_in;
                        }
                    }
                }
            };
            match attempt {
                Ok(Ok(_)) => update(true),
                Ok(Err(ClientError::Refused { refusal, .. }))
                    if matches!(refusal, Refusal::Ended { .. } | Refusal::UnknownToken) =>
                {
                    let outcome = match &refusal {
                        Refusal::Ended { outcome, .. } => Some(*outcome),
                        _ => None,
                    };
                    let _ = lost_tx.send(Some(Lost {
                        key: lease.key.clone(),
                        reason: refusal.to_string(),
                        outcome,
                    }));
                    return;
                }
                Ok(Err(error)) => {
                    tracing::warn!(key = %lease.key, %error, "renewal failed; retrying");
                    update(false);
                }
                Err(_) => update(false),
            }
        }
    }
}

fn local_deadline(t: &Tracked) -> Instant {
    if let Some(until) = t.unclaimed_until {
        return until;
    }
    let ttl = Duration::from_millis(t.lease.ttl_ms);
    t.confirmed_at + ttl - safety_margin(ttl)
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

    /// Stops renewing and releases every lease with `outcome`. Returns the first error; every
    /// lease is attempted.
    pub async fn release(self, outcome: baton_core::Outcome) -> Result<(), ClientError> {
        self.release_with_reason(outcome, None).await
    }

    /// [`LeaseGuard::release`] with a reason recorded in each key's history.
    pub async fn release_with_reason(
        mut self,
        outcome: baton_core::Outcome,
        reason: Option<String>,
    ) -> Result<(), ClientError> {
        self.released = true;
        self.heartbeat.stop_all();
        let mut first_error = None;
        for lease in &self.leases {
            let released = release_retrying(&self.coord, lease, outcome, reason.clone()).await;
            if let Err(e) = released {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Releases `lease`, retrying transient store errors ([`ClientError::is_transient`]: a restart,
/// a failover) while the lease may still stand, at most its TTL from now (renewals have
/// stopped): a release lost to a blip would keep the next in line waiting until the TTL runs
/// out. Past that the key has let go by itself, and the error is returned.
async fn release_retrying(
    coord: &Coordinator,
    lease: &Lease,
    outcome: baton_core::Outcome,
    reason: Option<String>,
) -> Result<(), ClientError> {
    let give_up_at = Instant::now() + Duration::from_millis(lease.ttl_ms);
    let mut pause = Duration::from_millis(100);
    let mut retried = false;
    loop {
        let released =
            release_with_reason(coord, &lease.key, &lease.token, outcome, reason.clone()).await;
        match released {
            // A try that failed may have landed all the same (the store took the write and
            // the answer was lost): the ticket ended as asked is this release's doing. Only
            // this token releases with an outcome of its choosing; expiry and operators end
            // tickets otherwise.
            Err(ClientError::Refused {
                refusal:
                    Refusal::Ended {
                        outcome: ended,
                        forced: false,
                        ..
                    },
                ..
            }) if retried && ended == outcome => return Ok(()),
            Err(error) if error.is_transient() && Instant::now() + pause < give_up_at => {
                tracing::warn!(key = %lease.key, %error, "release failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                retried = true;
            }
            other => return other,
        }
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
