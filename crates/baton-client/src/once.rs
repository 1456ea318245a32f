//! Run once, and in sequence: [`once`] runs a piece of work unless a run of it already
//! succeeded on the key, through the key's queue (the rules are the core's:
//! [`baton_core::once`]).
//!
//! The steps, which `baton once` also takes one by one (it runs a command and handles signals
//! between them):
//! 1. [`judge`]: one read. A key whose success is remembered, whose step was done, that is
//!    dead, or whose previous step is missing is answered there, without a write.
//! 2. The wait: an ordinary enqueue carrying the [`OnceSpec`] ([`AcquireOptions::once`]). The
//!    core grants it only if its verdict, judged again when it reaches the head, is to run; a
//!    duplicate queued behind a run that succeeds ends `skipped` in the write that records the
//!    success.
//! 3. [`settle`]: a wait that ended without a turn is asked why: the verdict from a fresh read
//!    (the ticket's own mark may already be forgotten when many duplicates ended at once).
//! 4. The run, under the heartbeat; its release records the success, or spends an attempt
//!    ([`after_run`] says which, and whether the key is now dead).

use std::future::Future;
use std::sync::Arc;

use baton_core::once::{verdict, OnceRecord, OnceSpec, Verdict};
use baton_core::Outcome;

use crate::acquire::acquire_many;
use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::heartbeat::{Heartbeat, LeaseGuard};
use crate::time::wall_ms;
use crate::turn::{AcquireOptions, Lease, Pending};

/// How to wait, and what the run asks of the key.
#[derive(Clone, Debug, Default)]
pub struct OnceOptions {
    /// How to wait for the turn and hold it (its `once` is set from `spec`).
    pub wait: AcquireOptions,
    /// Sequence step, attempts, retention.
    pub spec: OnceSpec,
}

impl OnceOptions {
    /// The wait's options, carrying the spec.
    pub fn acquire_options(&self) -> AcquireOptions {
        AcquireOptions {
            once: Some(self.spec),
            ..self.wait.clone()
        }
    }
}

/// Why the work did not run: the verdict, and the key's record as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotRun {
    /// The key.
    pub key: String,
    /// Done, replay, gap or dead.
    pub verdict: Verdict,
    /// The key's record, as read (`None`: it never had one).
    pub record: Option<OnceRecord>,
}

impl NotRun {
    /// Whether a caller counts this as done (a success was recorded: exit 0), rather than
    /// refused (dead, or a gap).
    pub fn is_done(&self) -> bool {
        matches!(self.verdict, Verdict::Done { .. } | Verdict::Replay { .. })
    }
}

/// What [`once`] did.
#[derive(Debug)]
pub enum OnceOutcome<T, E> {
    /// The work ran and succeeded; its success is recorded.
    Ran(T),
    /// The work ran and failed: an attempt is spent.
    Failed {
        /// The work's error.
        error: E,
        /// How the key stands after it (dead when the attempts are spent).
        after: AfterRun,
    },
    /// The work did not run.
    NotRun(NotRun),
}

/// A run in progress: what the work may want to know.
#[derive(Clone, Debug)]
pub struct OnceRun {
    /// The held turn (its fence guards the resource the work touches).
    pub lease: Lease,
    /// The attempt (1 for the first since the last success or retry).
    pub attempt: u32,
}

/// How the key stands after a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterRun {
    /// Failed attempts since the last success or retry.
    pub failures: u32,
    /// The attempts are spent: `baton retry KEY` allows more.
    pub dead: bool,
}

/// Step 1: the verdict from one read of `key`; `Ok(None)` when the caller should wait for a
/// turn and run.
pub async fn judge(
    coord: &Coordinator,
    key: &str,
    spec: &OnceSpec,
) -> Result<Option<NotRun>, ClientError> {
    let snapshot = coord.read(key).await?;
    let record = snapshot.doc.and_then(|doc| doc.once);
    let verdict = verdict(record.as_ref(), spec, wall_ms());
    Ok(match verdict {
        Verdict::Run { .. } => None,
        verdict => Some(NotRun {
            key: key.to_owned(),
            verdict,
            record,
        }),
    })
}

/// Step 3: a wait that ended with `error` is a verdict not to run, when a read now says so;
/// else `error` stands (the turn was lost, say).
pub async fn settle(
    coord: &Coordinator,
    key: &str,
    spec: &OnceSpec,
    error: ClientError,
) -> Result<NotRun, ClientError> {
    if !matches!(
        error,
        ClientError::Ended { .. } | ClientError::LeaseLost { .. }
    ) {
        return Err(error);
    }
    match judge(coord, key, spec).await? {
        Some(not_run) => Ok(not_run),
        None => Err(error),
    }
}

/// The attempt a run that holds `key` is: from the record this process last saw (nothing
/// changes it while the key is held).
pub fn attempt_of(coord: &Coordinator, key: &str) -> u32 {
    let record = coord.cached_doc(key).and_then(|doc| doc.once);
    record.map_or(0, |r| r.failures).saturating_add(1)
}

/// Step 4's end: how the key stands after this process's run of it ended, from the document
/// its release wrote (read again if this process has none).
pub async fn after_run(coord: &Coordinator, key: &str) -> Result<AfterRun, ClientError> {
    let doc = match coord.cached_doc(key) {
        Some(doc) => Some(doc),
        None => coord.read(key).await?.doc,
    };
    let record = doc.and_then(|doc| doc.once).unwrap_or_default();
    Ok(AfterRun {
        failures: record.failures,
        dead: record.dead,
    })
}

/// Runs `work` unless a run of it already succeeded on `key` (or, with a sequence step, unless
/// the step is done or its predecessor is not). Concurrent callers wait for the running one,
/// then skip if it succeeded or try in turn if it failed. `work` gets the turn's lease and
/// attempt; `Ok` records a success, `Err` spends an attempt. If the lease is lost while `work`
/// runs (this process was paused or cut off past its TTL), `work` is dropped at once and
/// [`ClientError::LeaseLost`] returned: the run is recorded as `expired`, and the next caller
/// may run it.
pub async fn once<T, E, F, Fut>(
    coord: &Arc<Coordinator>,
    key: &str,
    options: &OnceOptions,
    work: F,
) -> Result<OnceOutcome<T, E>, ClientError>
where
    F: FnOnce(OnceRun) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    if let Some(not_run) = judge(coord, key, &options.spec).await? {
        return Ok(OnceOutcome::NotRun(not_run));
    }
    let heartbeat = Heartbeat::start(coord.clone());
    let pending = Pending::new(key);
    let wait = options.acquire_options();
    let leases = match acquire_many(coord, &[pending], &wait, &heartbeat).await {
        Ok(leases) => leases,
        Err(error) => {
            let not_run = settle(coord, key, &options.spec, error).await?;
            return Ok(OnceOutcome::NotRun(not_run));
        }
    };
    let run = OnceRun {
        lease: leases[0].clone(),
        attempt: attempt_of(coord, key),
    };
    let guard = LeaseGuard::new(coord.clone(), leases, heartbeat);
    if let Err(lost) = guard.standing() {
        let _ = guard.release(Outcome::Cancelled).await;
        return Err(ClientError::LeaseLost {
            key: lost.key,
            reason: lost.reason,
        });
    }
    let mut lost = guard.lost();
    let result = tokio::select! {
        result = work(run) => result,
        lost = lost.wait_for(Option::is_some) => {
            let reason = lost
                .ok()
                .and_then(|l| l.clone())
                .map_or_else(|| "the heartbeat stopped".to_owned(), |l| l.reason);
            drop(guard);
            return Err(ClientError::LeaseLost { key: key.to_owned(), reason });
        }
    };
    match result {
        Ok(value) => {
            guard.release(Outcome::Succeeded).await?;
            Ok(OnceOutcome::Ran(value))
        }
        Err(error) => {
            guard.release(Outcome::Failed).await?;
            let after = after_run(coord, key).await?;
            Ok(OnceOutcome::Failed { error, after })
        }
    }
}
