//! A command run under a turn, watched until it ends: `baton run` and `baton once` (through
//! [`run::hold_and_run`](crate::cmd::run::hold_and_run)) and each job of `baton worker`.
//!
//! CMD (spawned by `child.rs`, in its own process group) runs until it exits, the lease is
//! lost, or it must stop: it held too long (`--max-hold`, `--max-run`), a newer ticket asked
//! (`--cancel-running`), or a worker gives its job back. A stop is SIGTERM to CMD's group, then
//! SIGKILL after the caller's grace; a lost lease is SIGKILL at once, since the key may be
//! granted to another any moment. What the end means (a release, a job's result, an exit code)
//! is the caller's to say.

use std::future::Future;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use baton_client::{Lost, StopAsked};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::cmd::child::Running;

/// Why CMD was told to stop before it ended by itself.
#[derive(Debug)]
pub enum Stopped {
    /// It held longer than its deadline (`--max-hold`, `--max-run`).
    OverRan,
    /// A newer ticket asked its holder to stop (`--cancel-running`).
    Asked(StopAsked),
    /// The caller gave the work back (a worker stopping).
    GivenBack,
}

/// How a supervised CMD ended.
#[derive(Debug)]
pub enum Ended {
    /// CMD exited: by itself, or after it was told to stop (`stopped` says why).
    Exited {
        /// Its status, as `wait` reported it.
        status: io::Result<ExitStatus>,
        /// Why it was told to stop, if it was.
        stopped: Option<Stopped>,
    },
    /// The lease was lost (or an operator force-released the turn): CMD's group was killed at
    /// once and CMD reaped.
    LeaseLost(Lost),
}

/// How long CMD gets between SIGTERM and SIGKILL, by why it is stopped: each caller keeps its
/// own (`baton run` gives a command asked to stop longer than a worker gives a job).
#[derive(Clone, Copy, Debug)]
pub struct Graces {
    /// After its deadline (`--max-hold`, `--max-run`).
    pub over_ran: Duration,
    /// After a newer ticket asked (`--cancel-running`).
    pub asked: Duration,
    /// After the caller gave the work back.
    pub given_back: Duration,
}

impl Graces {
    /// The same grace whatever the reason.
    pub const fn all(grace: Duration) -> Graces {
        Graces {
            over_ran: grace,
            asked: grace,
            given_back: grace,
        }
    }

    fn of(self, stopped: &Stopped) -> Duration {
        match stopped {
            Stopped::OverRan => self.over_ran,
            Stopped::Asked(_) => self.asked,
            Stopped::GivenBack => self.given_back,
        }
    }
}

/// What CMD is watched for besides its own exit.
pub struct Watch {
    /// Changes to `Some` when the lease is lost ([`baton_client::Heartbeat::lost`]).
    pub lost: watch::Receiver<Option<Lost>>,
    /// Changes to `Some` when a newer ticket asks the holder to stop
    /// ([`baton_client::Heartbeat::stop_asked`]).
    pub stop_asked: watch::Receiver<Option<StopAsked>>,
    /// When CMD has held long enough (`--max-hold`, `--max-run`); `None`: no limit.
    pub deadline: Option<Instant>,
    /// The signals passed on to CMD's group (`baton run`, which stands in for CMD); `None`
    /// when baton handles its own (a worker).
    pub forwarded: Option<Forwarded>,
}

/// Watches `running` until it ends ([`Ended`]): stops it when `watch` or `give_back` says so
/// (saying why with `on_stop` first), kills it when the lease is lost, and takes the terminal
/// back after it.
pub async fn supervise(
    running: &mut Running,
    mut watch: Watch,
    graces: Graces,
    give_back: impl Future<Output = ()>,
    mut on_stop: impl FnMut(&Stopped),
) -> Ended {
    tokio::pin!(give_back);
    // Why CMD was told to stop, and when SIGKILL follows.
    let mut stopping: Option<(Stopped, Instant)> = None;
    let mut killed = false;
    let status = loop {
        let deadline = watch.deadline.filter(|_| stopping.is_none());
        let kill_at = stopping.as_ref().map(|(_, at)| *at).filter(|_| !killed);
        let stopped = tokio::select! {
            status = running.wait() => break status,
            changed = watch.stop_asked.changed(), if stopping.is_none() => {
                let Some(by) = changed.ok().and(watch.stop_asked.borrow().clone()) else {
                    continue;
                };
                Stopped::Asked(by)
            }
            () = sleep_until(deadline) => Stopped::OverRan,
            () = &mut give_back, if stopping.is_none() => Stopped::GivenBack,
            () = sleep_until(kill_at) => {
                killed = true;
                running.signal_group(libc::SIGKILL);
                continue;
            }
            signal = next_forwarded(&mut watch.forwarded) => {
                running.signal_group(signal);
                continue;
            }
            changed = watch.lost.changed() => {
                let Some(lost) = changed.ok().and(watch.lost.borrow().clone()) else {
                    continue;
                };
                // The lease may be granted to another any moment: stop the command now.
                running.signal_group(libc::SIGKILL);
                let _ = running.wait().await;
                running.restore_terminal();
                return Ended::LeaseLost(lost);
            }
        };
        on_stop(&stopped);
        let kill_at = Instant::now() + graces.of(&stopped);
        stopping = Some((stopped, kill_at));
        running.signal_group(libc::SIGTERM);
    };
    running.restore_terminal();
    Ended::Exited {
        status,
        stopped: stopping.map(|(stopped, _)| stopped),
    }
}

/// SIGINT and SIGTERM, passed on to CMD's group while baton stands in for it.
pub struct Forwarded {
    interrupt: Signal,
    terminate: Signal,
}

impl Forwarded {
    /// Installs the handlers (from then on, these signals no longer end baton).
    pub fn install() -> io::Result<Forwarded> {
        Ok(Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }
}

/// The next signal to pass on; never, when none are.
async fn next_forwarded(forwarded: &mut Option<Forwarded>) -> libc::c_int {
    let Some(forwarded) = forwarded else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = forwarded.interrupt.recv() => libc::SIGINT,
        _ = forwarded.terminate.recv() => libc::SIGTERM,
    }
}

/// Sleeps until `at`, or forever when there is no `at`.
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
