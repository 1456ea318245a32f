//! `baton run KEY... -- CMD`: wait, run CMD while holding, release by its exit status.

use std::time::{Duration, Instant};

use baton_client::acquire::Lease;
use baton_client::{Heartbeat, LeaseGuard, Lost, StopAsked};
use baton_core::Outcome;
use clap::Args;

use crate::args::duration::{instant_after, parse_duration};
use crate::args::wait::WaitArgs;
use crate::cmd::child::{self, Running};
use crate::cmd::supervised::{supervise, Ended, Forwarded, Graces, Stopped, Watch};
use crate::exit::{self, Failure};
use crate::{wait, Opened};

pub const RUN_HELP: &str = "\
CMD gets BATON_KEY, BATON_TICKET (the token) and BATON_FENCE in its environment. With several keys
(taken one at a time in sorted order, so two callers can never deadlock), BATON_KEYS=N and
BATON_KEY_i, BATON_TICKET_i, BATON_FENCE_i for i = 1..N in sorted key order; BATON_KEY,
BATON_TICKET and BATON_FENCE then name the first.

While CMD runs baton renews the lease every TTL/3. If it cannot renew in time (the store is
unreachable, or baton itself was paused), it kills CMD's process group before the lease can end
and exits 78. CMD runs in its own process group, led by a supervisor (CMD's parent) that kills the
whole group with SIGKILL the moment baton dies, kill -9 included; SIGINT and SIGTERM are forwarded
to the group. A process that leaves the group (setsid) is not covered, nor is a paused baton: then
only fences protect the resource: check BATON_FENCE where you can. The turn is released as `succeeded` if CMD exits 0, else `failed`, and
baton exits with CMD's exit code.";

/// `baton run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How to wait and hold.
    #[command(flatten)]
    pub wait: WaitArgs,

    /// Stop CMD (its process group: SIGTERM, then SIGKILL 5s later) once it has held the
    /// keys this long; the turn is recorded as failed, and baton exits 79
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub max_hold: Option<Duration>,

    /// The keys to hold while CMD runs, then `--`, then CMD and its arguments
    #[arg(required = true, num_args = 1.., value_name = "KEY")]
    pub keys: Vec<String>,

    /// The command to run while holding the keys.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs the `run` subcommand.
pub async fn run(opened: &Opened, args: RunArgs) -> Result<i32, Failure> {
    let line = (!args.wait.waiting.quiet).then(wait::WaitLine::new);
    let options = wait::options(&args.wait, Duration::from_secs(30), line.clone())?;
    let pendings = wait::pendings(&args.keys)?;
    let coord = opened.coord.clone();
    let started = Instant::now();
    let heartbeat = Heartbeat::start(coord.clone());
    let interrupted = "interrupted while waiting; the tickets were withdrawn";
    let leases = wait::acquire_unless_interrupted(
        &coord,
        &pendings,
        &options,
        &heartbeat,
        &line,
        interrupted,
    )
    .await??;
    if !args.wait.waiting.quiet {
        let fences: Vec<String> = leases
            .iter()
            .map(|l| format!("{} (fence {})", l.key, l.fence))
            .collect();
        eprintln!(
            "baton: holding {} after {:.1}s",
            fences.join(", "),
            started.elapsed().as_secs_f64()
        );
    }
    let guard = LeaseGuard::new(coord.clone(), leases.clone(), heartbeat);
    let env = command_env(&leases, &opened.url);
    let end = hold_and_run(guard, &args.command, &env, args.max_hold).await?;
    Ok(end.exit_code())
}

/// How CMD ended, and whether its release (which records how) was written.
pub struct CommandEnd {
    /// CMD's exit code (128+N if it died of signal N).
    pub code: i32,
    /// The release by CMD's status: `succeeded` for 0, else `failed`.
    pub release: Result<(), baton_client::ClientError>,
}

impl CommandEnd {
    /// baton's exit code: CMD's, unless the release failed after CMD succeeded (a script must
    /// not believe all went well). Says what went wrong with the release.
    pub fn exit_code(&self) -> i32 {
        match &self.release {
            Ok(()) => self.code,
            Err(error) => {
                eprintln!("baton: the command finished but the release failed: {error}");
                if self.code == 0 {
                    exit::LOST
                } else {
                    self.code
                }
            }
        }
    }
}

/// Runs CMD while `guard`'s leases are held: renewed by their heartbeat, CMD killed the moment
/// one is lost (exit 78, or 77 when an operator force-released it), stopped after `max_hold`
/// (exit 79) or when a newer ticket asks (exit 76), signals forwarded; then releases by CMD's
/// exit status.
pub async fn hold_and_run(
    guard: LeaseGuard,
    command: &[String],
    env: &[(String, String)],
    max_hold: Option<Duration>,
) -> Result<CommandEnd, Failure> {
    let leases = guard.leases().to_vec();
    let mut running = match start(&guard, command, env) {
        Ok(running) => running,
        Err((outcome, failure)) => {
            let _ = guard.release(outcome).await;
            return Err(failure);
        }
    };
    let Ok(forwarded) = Forwarded::install() else {
        running.signal_group(libc::SIGKILL);
        let _ = guard.release(Outcome::Failed).await;
        return Err(Failure::new(exit::ERROR, "cannot install signal handlers"));
    };
    let watch = Watch {
        lost: guard.lost(),
        stop_asked: guard.stop_asked(),
        deadline: max_hold.map(instant_after),
        forwarded: Some(forwarded),
    };
    let say = |stopped: &Stopped| say_stopping(stopped, &leases, max_hold);
    match supervise(&mut running, watch, GRACES, std::future::pending(), say).await {
        Ended::LeaseLost(lost) => Err(lease_lost(guard, &lost)),
        Ended::Exited { status, stopped } => {
            release_after(guard, status, stopped, &leases, max_hold).await
        }
    }
}

/// Spawns CMD, unless a lease ran out meanwhile (this process was stopped or suspended after
/// acquiring). When nothing runs: how to release the turn, and what to say.
fn start(
    guard: &LeaseGuard,
    command: &[String],
    env: &[(String, String)],
) -> Result<Running, (Outcome, Failure)> {
    // Last look before the command starts: a lease that ran out meanwhile is never started.
    if let Err(lost) = guard.standing() {
        let failure = Failure::new(
            exit::LOST,
            format!(
                "lease lost before the command started: {}: {}",
                lost.key, lost.reason
            ),
        );
        return Err((Outcome::Cancelled, failure));
    }
    // Spawned here, on the main thread (see main.rs).
    child::spawn(command, env).map_err(|error| {
        let code = if error.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        let failure = Failure::new(code, format!("cannot run {}: {error}", command.join(" ")));
        (Outcome::Failed, failure)
    })
}

/// Says why CMD is being stopped, as the stop begins.
fn say_stopping(stopped: &Stopped, leases: &[Lease], max_hold: Option<Duration>) {
    match stopped {
        Stopped::Asked(by) => eprintln!(
            "baton: {}: asked to stop by {} (--cancel-running): stopping the command \
             (SIGTERM, then SIGKILL after {}s)",
            by.key,
            crate::render::one_line(&by.by),
            GRACES.asked.as_secs()
        ),
        Stopped::OverRan => eprintln!(
            "baton: held {} for --max-hold {}: stopping the command (SIGTERM, then \
             SIGKILL after {}s)",
            keys_of(leases),
            crate::render::duration(max_hold.unwrap_or_default()),
            GRACES.over_ran.as_secs()
        ),
        // `baton run` never gives its turn back.
        Stopped::GivenBack => {}
    }
}

/// After the lease was lost and CMD killed: an operator's cancel (exit 77) is told apart from a
/// lost lease (exit 78), since a script may retry after one but not the other.
fn lease_lost(guard: LeaseGuard, lost: &Lost) -> Failure {
    drop(guard);
    let (code, what) = match lost.outcome {
        Some(Outcome::Cancelled) => (exit::CANCELLED, "force-released"),
        _ => (exit::LOST, "lease lost"),
    };
    Failure::new(
        code,
        format!("{what}, command killed: {}: {}", lost.key, lost.reason),
    )
}

/// Releases the turn by how CMD ended: superseded when a newer ticket asked it to stop (exit
/// 76), failed when it held past `max_hold` (exit 79), else by its exit status (passed on).
async fn release_after(
    guard: LeaseGuard,
    status: std::io::Result<std::process::ExitStatus>,
    stopped: Option<Stopped>,
    leases: &[Lease],
    max_hold: Option<Duration>,
) -> Result<CommandEnd, Failure> {
    let code = match status {
        Ok(status) => child::exit_code(status),
        Err(error) => {
            let _ = guard.release(Outcome::Failed).await;
            return Err(Failure::new(
                exit::ERROR,
                format!("lost track of the command: {error}"),
            ));
        }
    };
    match (stopped, max_hold) {
        (Some(Stopped::Asked(by)), _) => Err(stopped_for(guard, &by).await),
        (Some(Stopped::OverRan), Some(max_hold)) => Err(overran(guard, leases, max_hold).await),
        _ => {
            let outcome = if code == 0 {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            };
            let release = guard.release(outcome).await;
            Ok(CommandEnd { code, release })
        }
    }
}

/// After CMD was stopped for holding longer than `max_hold`: released as failed with the
/// reason; exit 79.
async fn overran(guard: LeaseGuard, leases: &[Lease], max_hold: Duration) -> Failure {
    let reason = format!(
        "held longer than --max-hold {}; the command was stopped",
        crate::render::duration(max_hold)
    );
    if let Err(error) = guard
        .release_with_reason(Outcome::Failed, Some(reason))
        .await
    {
        eprintln!("baton: the release failed: {error}");
    }
    Failure::new(
        exit::MAX_HOLD,
        format!(
            "the command held {} longer than --max-hold and was stopped",
            keys_of(leases)
        ),
    )
}

/// Between SIGTERM and SIGKILL: 5s for a command stopped for `--max-hold`; 10s for one asked to
/// stop by `--cancel-running`, long enough for a deploy to leave a consistent state, short
/// enough that the newer one does not wait long.
const GRACES: Graces = Graces {
    over_ran: Duration::from_secs(5),
    asked: Duration::from_secs(10),
    given_back: Duration::from_secs(5),
};

/// After a command stopped because a newer ticket asked (`--cancel-running`): the key it was
/// asked about is released as superseded, any other key held with it as cancelled, both with
/// the reason; exit 76.
async fn stopped_for(guard: LeaseGuard, by: &StopAsked) -> Failure {
    let reason = format!("asked to stop by {} (--cancel-running)", by.by);
    let released = guard
        .release_each(|lease| {
            let outcome = if lease.key == by.key {
                Outcome::Superseded
            } else {
                Outcome::Cancelled
            };
            (outcome, Some(reason.clone()))
        })
        .await;
    if let Err(error) = released {
        eprintln!("baton: the release failed: {error}");
    }
    Failure::new(
        exit::SUPERSEDED,
        format!(
            "superseded at {}: the command was stopped, {reason}",
            by.key
        ),
    )
}

fn keys_of(leases: &[Lease]) -> String {
    let keys: Vec<&str> = leases.iter().map(|l| l.key.as_str()).collect();
    keys.join(", ")
}

/// The environment of CMD: the documented form for one key and for several.
pub fn command_env(leases: &[Lease], store_url: &str) -> Vec<(String, String)> {
    let mut env = vec![("BATON_STORE".to_string(), store_url.to_string())];
    if let Some(first) = leases.first() {
        env.push(("BATON_KEY".into(), first.key.clone()));
        env.push(("BATON_TICKET".into(), first.token.clone()));
        env.push(("BATON_FENCE".into(), first.fence.to_string()));
        if !first.slots.is_empty() {
            env.push(("BATON_SLOT".into(), first.slots.join(",")));
        }
    }
    if leases.len() > 1 {
        env.push(("BATON_KEYS".into(), leases.len().to_string()));
        for (i, lease) in leases.iter().enumerate() {
            let n = i + 1;
            env.push((format!("BATON_KEY_{n}"), lease.key.clone()));
            env.push((format!("BATON_TICKET_{n}"), lease.token.clone()));
            env.push((format!("BATON_FENCE_{n}"), lease.fence.to_string()));
            if !lease.slots.is_empty() {
                env.push((format!("BATON_SLOT_{n}"), lease.slots.join(",")));
            }
        }
    }
    env
}
