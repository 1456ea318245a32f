//! `baton-torture lib-client`: one turn through the library, as an application embedding baton
//! takes it: `acquire_many` with a heartbeat (the path `baton run` takes, which may start at a
//! fresh grant before its claim has landed), the protected work while the heartbeat holds the
//! lease, stopping at once when it reports the lease lost, then the release.
//!
//! Exit status: 0 the work ran its course and was released; 3 the resource refused a write (the
//! fence did its job: the lease had ended while the process was paused); 4 the turn or the lease
//! was lost (the heartbeat lost the lease and the work stopped, or the wait's ticket ended, or
//! the lease it got had run out before it could act on it: `baton run`'s 78); 2 anything else
//! (the message says what).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire_many, AcquireOptions, Pending};
use baton_client::poll::PollBounds;
use baton_client::{ClientError, Coordinator, Heartbeat, LeaseGuard};
use baton_core::pool::PoolAsk;
use baton_core::{Mode, Outcome};

use baton_torture::work::{HoldEnd, Session};

/// What one library turn does.
pub struct Turn {
    /// The store URL.
    pub store: String,
    /// The key.
    pub key: String,
    /// The key's limit.
    pub limit: u32,
    /// A pool's slots (empty: no pool); the turn takes any one of them.
    pub slots: Vec<String>,
    /// Hold as a shared holder.
    pub shared: bool,
    /// `cC-rR`: the ticket's context and the name the resource knows it by.
    pub who: String,
    /// The resource's address.
    pub resource: String,
    /// How long to hold.
    pub hold: Duration,
    /// The lease's TTL.
    pub ttl: Duration,
    /// The waiter lease's TTL.
    pub waiter_ttl: Duration,
    /// The poll bounds.
    pub poll: PollBounds,
    /// Read the key first, and enqueue by arrival if it was held (`AcquireOptions::by_arrival`),
    /// as a process that takes turns on a hot key one after another does.
    pub by_arrival: bool,
}

/// Takes one turn; see the module's doc for the exit status.
pub fn run(turn: Turn) -> Result<ExitCode, String> {
    if turn.by_arrival {
        // Which turns arrived beside the document, in the run's log (the client says so).
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "baton_client::waiter::arrive=info",
            ))
            .without_time()
            .with_ansi(false)
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(take(turn))
}

async fn take(turn: Turn) -> Result<ExitCode, String> {
    let mut session = Session::connect(&turn.resource, &turn.who)?;
    let token = std::env::var("BATON_TOKEN").ok();
    let coord = Coordinator::open(&turn.store, token)
        .await
        .map_err(|e| format!("cannot open the store {}: {e}", turn.store))?;
    let coord = Arc::new(coord);
    let heartbeat = Heartbeat::start(coord.clone());
    if turn.by_arrival {
        // What the turn decides by: a key seen held is enqueued on by arrival. A failed read
        // leaves it to enqueue by a write, which meets the same store.
        if let Err(e) = coord.read(&turn.key).await {
            eprintln!(
                "baton-torture lib-client ({}): no first read: {e}",
                turn.who
            );
        }
    }
    let options = AcquireOptions {
        mode: if turn.shared {
            Mode::Shared
        } else {
            Mode::Normal
        },
        // A pool's limit is its number of slots.
        limit: if turn.slots.is_empty() {
            turn.limit
        } else {
            u32::try_from(turn.slots.len()).unwrap_or(u32::MAX)
        },
        pool: (!turn.slots.is_empty()).then(|| PoolAsk {
            slots: turn.slots.clone(),
            only: None,
            count: 1,
        }),
        ttl: turn.ttl,
        waiter_ttl: turn.waiter_ttl,
        poll: turn.poll,
        context: turn.who.clone(),
        by_arrival: Some(turn.by_arrival),
        ..AcquireOptions::default()
    };
    let leases = match acquire_many(&coord, &[Pending::new(&turn.key)], &options, &heartbeat).await
    {
        Ok(leases) => leases,
        Err(e) if is_lost_turn(&e) => {
            eprintln!("baton-torture lib-client ({}): {e}", turn.who);
            return Ok(ExitCode::from(4));
        }
        Err(e) => return Err(format!("cannot acquire {}: {e}", turn.key)),
    };
    let lease = leases
        .first()
        .cloned()
        .ok_or("acquire_many returned no lease")?;
    let guard = LeaseGuard::new(coord, leases, heartbeat);

    // The work runs on a thread of its own; the heartbeat's verdict reaches it through a flag
    // it reads before every write.
    let stop = Arc::new(AtomicBool::new(false));
    let mut lost = guard.lost();
    let watcher = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while lost.changed().await.is_ok() {
                if lost.borrow().is_some() {
                    stop.store(true, Ordering::SeqCst);
                    return;
                }
            }
        })
    };
    // On a pool, the slot it was given is the resource.
    let key = match lease.slots.as_slice() {
        [slot] => baton_torture::slot_resource(&turn.key, slot),
        _ => turn.key.clone(),
    };
    let (shared, hold) = (turn.shared, turn.hold);
    let flag = stop.clone();
    let end = tokio::task::spawn_blocking(move || {
        session.hold(&key, &lease.id, lease.fence, shared, hold, || {
            flag.load(Ordering::SeqCst)
        })
    })
    .await
    .map_err(|e| format!("the work's thread failed: {e}"))??;
    watcher.abort();
    let (outcome, code) = match end {
        HoldEnd::Done => (Outcome::Succeeded, 0),
        HoldEnd::FencedOff(_) => (Outcome::Failed, 3),
        HoldEnd::Stopped => (Outcome::Failed, 4),
    };
    match guard.release(outcome).await {
        Ok(()) => Ok(ExitCode::from(code)),
        // A lost lease may already have ended in the store: that is the lease lost, not an error.
        Err(_) if code != 0 => Ok(ExitCode::from(code)),
        Err(e) => Err(format!("cannot release {}: {e}", turn.key)),
    }
}

/// Whether an acquire failed because the turn was lost, as `baton run` exits 78 for: the
/// ticket ended while waiting (its waiter lease or its grant's claim window ran out: the
/// process was paused, or the store's answers held up), or the lease it got had already run
/// out by the time it could act on it. The same cases as the CLI's exit 78.
fn is_lost_turn(error: &ClientError) -> bool {
    match error {
        ClientError::Ended { outcome, .. } => {
            !matches!(outcome, Outcome::Superseded | Outcome::Cancelled)
        }
        ClientError::LeaseLost { .. } => true,
        _ => false,
    }
}
