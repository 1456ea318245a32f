//! The waits the server keeps for its clients.
//!
//! A turn asked for with `POST /v1/turns/{key}` waits in a task of its own, running the client
//! library's `acquire` as the CLI would: it enqueues, refreshes its waiter lease, follows the
//! key, and claims its grant. The request only attaches to it:
//!
//! - while a client is attached, the wait goes on; a client that goes away (its request
//!   dropped before it was answered) withdraws it, and a grant that came meanwhile is given
//!   back;
//! - a request that has waited `--turn-wait` is answered 202 with the ticket (a proxy would cut
//!   a request open much longer); the client asks again with the ticket's token (`resume`)
//!   within [`REATTACH`], or the wait is withdrawn;
//! - `wait=false` answers 202 as soon as the ticket is queued.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_client::acquire::{acquire, withdraw};
use baton_client::turn::{Lease, Pending};
use baton_client::{AcquireOptions, Coordinator};
use baton_core::Outcome;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::error::ApiError;

/// How long a wait answered with 202 is kept for its client to ask again.
pub const REATTACH: Duration = Duration::from_secs(30);

/// The waits under way, by ticket token.
#[derive(Debug, Default)]
pub struct Waits {
    by_token: Mutex<HashMap<String, Arc<Wait>>>,
}

/// One wait: its ticket, where it stands, and how it ended.
#[derive(Debug)]
pub struct Wait {
    /// The key.
    pub key: String,
    /// The ticket's public id.
    pub id: String,
    /// The ticket's secret token.
    pub token: String,
    position: watch::Receiver<Option<usize>>,
    result: watch::Receiver<Option<Result<Lease, ApiError>>>,
    task: AbortHandle,
    /// Bumped by every attach: a withdrawal timed for a detached wait that was taken up again
    /// does nothing.
    generation: AtomicU64,
    coord: Arc<Coordinator>,
}

/// What an attached request comes back with.
#[derive(Debug)]
pub enum Attached {
    /// The wait ended: granted, or not.
    Done(Result<Lease, ApiError>),
    /// Still waiting, this many tickets ahead (`None`: not queued yet).
    Waiting(Option<usize>),
}

/// How long an attached request stays.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Until the wait ends, or this long.
    Ended(Duration),
    /// Until the ticket is queued (or the wait ends): `wait=false`.
    Queued,
}

impl Waits {
    /// Starts waiting for the turn of `pending`, in a task of its own; `to_error` says how an
    /// error of the wait is answered. A wait this server keeps for the same ticket already is
    /// that wait (the client asked again).
    pub fn start(
        &self,
        coord: &Arc<Coordinator>,
        pending: Pending,
        mut options: AcquireOptions,
        to_error: fn(baton_client::ClientError) -> ApiError,
    ) -> Arc<Wait> {
        if let Some(wait) = self.find(&pending.key, &pending.token) {
            return wait;
        }
        let (position_tx, position) = watch::channel(None);
        options.on_progress = Some(Arc::new(move |p: &baton_client::WaitProgress| {
            position_tx.send_replace(Some(p.position));
        }));
        let (result_tx, result) = watch::channel(None);
        let task_coord = coord.clone();
        let task_pending = pending.clone();
        let task = tokio::spawn(async move {
            let got = acquire(&task_coord, &task_pending, &options).await;
            result_tx.send_replace(Some(got.map_err(to_error)));
        });
        let wait = Arc::new(Wait {
            key: pending.key,
            id: pending.id,
            token: pending.token,
            position,
            result,
            task: task.abort_handle(),
            generation: AtomicU64::new(0),
            coord: coord.clone(),
        });
        self.lock().insert(wait.token.clone(), wait.clone());
        wait
    }

    /// The wait of the ticket with `token` at `key`, if this server keeps it.
    pub fn find(&self, key: &str, token: &str) -> Option<Arc<Wait>> {
        self.lock().get(token).filter(|w| w.key == key).cloned()
    }

    /// Attaches a request to `wait` until it ends or `until` says. A request dropped while
    /// attached (its client went away) withdraws the wait; one answered `Waiting` leaves it
    /// for [`REATTACH`].
    pub async fn attach(self: &Arc<Self>, wait: &Arc<Wait>, until: Until) -> Attached {
        let generation = wait.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut guard = Withdraw {
            waits: self.clone(),
            wait: wait.clone(),
            armed: true,
        };
        let attached = wait.until(until).await;
        guard.armed = false;
        match &attached {
            Attached::Done(_) => {
                self.forget(wait);
            }
            Attached::Waiting(_) => {
                let (waits, wait) = (self.clone(), wait.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(REATTACH).await;
                    if wait.generation.load(Ordering::SeqCst) == generation {
                        waits.withdraw(&wait);
                    }
                });
            }
        }
        attached
    }

    /// Ends the wait of `wait`: the task stops, and the ticket is given back (withdrawn if
    /// queued, released if granted meanwhile).
    pub fn withdraw(&self, wait: &Arc<Wait>) {
        if !self.forget(wait) {
            return;
        }
        wait.task.abort();
        let wait = wait.clone();
        tokio::spawn(async move {
            let pending = Pending {
                key: wait.key.clone(),
                id: wait.id.clone(),
                token: wait.token.clone(),
            };
            let _ = withdraw(&wait.coord, &pending, Outcome::Cancelled).await;
        });
    }

    /// Drops `wait` from the list; whether it was there.
    fn forget(&self, wait: &Wait) -> bool {
        self.lock().remove(&wait.token).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Wait>>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wait {
    /// Whether the ticket queued (a grant by its enqueue never did).
    pub fn queued(&self) -> bool {
        self.position.borrow().is_some()
    }

    /// Waits for the end, or as `until` says.
    async fn until(&self, until: Until) -> Attached {
        let mut result = self.result.clone();
        let ended = async {
            match result.wait_for(Option::is_some).await {
                Ok(done) => done.clone(),
                // The task is gone without a result: it was withdrawn.
                Err(_) => None,
            }
        };
        let limit = match until {
            Until::Ended(limit) => limit,
            Until::Queued => Duration::MAX,
        };
        let mut position = self.position.clone();
        let queued = async {
            match until {
                Until::Queued => {
                    let _ = position.wait_for(Option::is_some).await;
                }
                Until::Ended(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            done = ended => match done {
                Some(done) => Attached::Done(done),
                None => Attached::Done(Err(super::withdrawn(&self.key))),
            },
            _ = queued => Attached::Waiting(*self.position.borrow()),
            _ = sleep_up_to(limit) => Attached::Waiting(*self.position.borrow()),
        }
    }
}

/// Sleeps for `limit`, or forever when it is too long to count.
async fn sleep_up_to(limit: Duration) {
    match tokio::time::Instant::now().checked_add(limit) {
        Some(at) if limit < Duration::from_secs(86_400 * 365) => tokio::time::sleep_until(at).await,
        _ => std::future::pending::<()>().await,
    }
}

/// Withdraws a wait when the request attached to it is dropped unanswered.
struct Withdraw {
    waits: Arc<Waits>,
    wait: Arc<Wait>,
    armed: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if self.armed {
            tracing::info!(
                "turn {}: the client went away while waiting; withdrawing ticket {}",
                self.wait.key,
                self.wait.id
            );
            self.waits.withdraw(&self.wait);
        }
    }
}
