//! `baton once KEY [--seq N] -- CMD`: run CMD unless a run of it already succeeded on KEY.
//!
//! The steps are the library's ([`baton_client::once`]): judge from one read, wait for a turn
//! the core grants only when the verdict is to run, settle a wait that ended without one, run
//! CMD as `baton run` does ([`run::hold_and_run`]); the release records how it ended.

use std::time::Duration;
use std::time::Instant;

use baton_client::acquire::Pending;
use baton_client::once::{after_run, attempt_of, judge, settle, NotRun};
use baton_client::{Heartbeat, LeaseGuard};
use baton_core::once::{OnceSpec, Verdict};
use clap::Args;

use crate::args::duration::{parse_duration, parse_lease, parse_retention};
use crate::args::key::check_key;
use crate::args::slots::SlotArgs;
use crate::args::wait::WaitArgs;
use crate::args::wait::WaitingArgs;
use crate::cmd::run;
use crate::exit::{self, Failure};
use crate::{render, wait, Opened};

pub const ONCE_HELP: &str = "\
For work that must not run twice (charge a card, send an email, migrate a database) when the
thing that starts it may deliver twice: a task queue, a re-run CI job, a retried webhook.

  runs      nobody has succeeded on KEY (within --retain): CMD runs while baton holds KEY;
            its exit status is recorded, and baton exits with it
  skipped   a run already succeeded: exit 0 at once, saying so, and CMD does not run.
            Callers that arrive while a run is going wait for it, then skip if it succeeded,
            or try in turn if it failed
  dead      --max-attempts runs failed: exit 1 until `baton retry KEY` gives the attempts back

The guarantee: CMD runs again only if the previous run's success was never recorded: baton
crashed between CMD's exit and the record, or the run lost its lease while it ran (its process
was killed, paused or cut off past --ttl). Such a run is recorded as `expired` (see `baton log
KEY`), spends an attempt, and the next caller runs CMD once the lease has run out.

Sequences: with --seq N, CMD runs only if KEY's last completed step is N-1 (a key with none has
completed 0, so --seq 1 runs first). A replay (step N or an earlier one already completed) is
skipped with exit 0; a gap (step N-1 not completed, or still running) is refused with exit 80,
naming the last completed step. A failed step may be tried again with the same N.

CMD gets BATON_KEY, BATON_TICKET, BATON_FENCE and BATON_ATTEMPT (1 for the first attempt since
the last success or retry), and BATON_SEQ with --seq.

Examples:
  baton once charge/order-1234 -- ./charge.sh 1234
  baton once --max-attempts 5 --retain 30d email/welcome/u42 -- ./send-welcome.sh u42
  baton once --seq \"$STEP\" --retain 365d migrate/billing -- ./migrate.sh \"$STEP\"";

/// `baton once`.
#[derive(Debug, Args)]
pub struct OnceArgs {
    /// Run only as step N of KEY's sequence: right after step N-1 completed (exit 80 if it
    /// has not; exit 0 without running if step N is already done)
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,

    /// Failed runs after which KEY is dead (every caller exits 1 until `baton retry KEY`)
    #[arg(long, default_value_t = baton_core::once::MAX_ATTEMPTS_DEFAULT, value_name = "N")]
    pub max_attempts: u32,

    /// How long a success is remembered: after it, CMD runs again
    #[arg(long, value_parser = parse_retention, default_value = "7d", value_name = "DUR")]
    pub retain: Duration,

    /// Lease while CMD runs, renewed every TTL/3: a run whose baton dies is taken over this
    /// long after its last renewal
    #[arg(long, value_parser = parse_lease, default_value = "30s", value_name = "DUR")]
    pub ttl: Duration,

    /// Stop CMD (SIGTERM, then SIGKILL 5s later) once it has run this long: a failed attempt,
    /// exit 79
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub max_hold: Option<Duration>,

    /// How to wait for a run already going.
    #[command(flatten)]
    pub waiting: WaitingArgs,

    /// The key that remembers the run
    #[arg(value_name = "KEY")]
    pub key: String,

    /// The command, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs the `once` subcommand.
pub async fn once(opened: &Opened, args: OnceArgs) -> Result<i32, Failure> {
    let key = args.key.as_str();
    check_key(key)?;
    let spec = OnceSpec {
        seq: args.seq,
        max_attempts: args.max_attempts,
        retain_ms: u64::try_from(args.retain.as_millis()).unwrap_or(u64::MAX),
    };
    spec.check().map_err(|e| Failure::usage(e.to_string()))?;
    let line = (!args.waiting.quiet).then(wait::WaitLine::new);
    let mut options = wait::options(&wait_args(&args), args.ttl, line.clone())?;
    options.once = Some(spec);
    let coord = opened.coord.clone();
    if let Some(not_run) = judge(&coord, key, &spec).await? {
        return report(&not_run);
    }
    let started = Instant::now();
    let pendings = vec![Pending::new(key)];
    let heartbeat = Heartbeat::start(coord.clone());
    let interrupted = "interrupted while waiting; nothing ran";
    let acquired = wait::acquire_unless_interrupted(
        &coord,
        &pendings,
        &options,
        &heartbeat,
        &line,
        interrupted,
    )
    .await?;
    let leases = match acquired {
        Ok(leases) => leases,
        Err(error) => return report(&settle(&coord, key, &spec, error).await?),
    };
    let attempt = attempt_of(&coord, key);
    if !args.waiting.quiet {
        eprintln!(
            "baton: running {key} (attempt {attempt} of {}{}, fence {}) after {:.1}s",
            spec.max_attempts,
            spec.seq.map(|n| format!(", step {n}")).unwrap_or_default(),
            leases[0].fence,
            started.elapsed().as_secs_f64()
        );
    }
    let mut env = run::command_env(&leases, &opened.url);
    env.push(("BATON_ATTEMPT".into(), attempt.to_string()));
    if let Some(seq) = spec.seq {
        env.push(("BATON_SEQ".into(), seq.to_string()));
    }
    let guard = LeaseGuard::new(coord.clone(), leases, heartbeat);
    let end = run::hold_and_run(guard, &args.command, &env, args.max_hold).await?;
    if end.release.is_ok() {
        if end.code == 0 {
            if !args.waiting.quiet {
                eprintln!(
                    "baton: {key}: succeeded and recorded; later callers skip it for {}",
                    crate::render::duration(args.retain)
                );
            }
        } else {
            let after = after_run(&coord, key).await?;
            eprintln!(
                "baton: {}",
                failed_run(key, attempt, &spec, end.code, after.dead)
            );
        }
    }
    Ok(end.exit_code())
}

/// The wait's flags: a run-once key is a mutex, and nothing jumps its queue.
fn wait_args(args: &OnceArgs) -> WaitArgs {
    WaitArgs {
        limit: 1,
        shared: false,
        pool: SlotArgs {
            slots: Vec::new(),
            slot: None,
            count: None,
        },
        ttl: Some(args.ttl),
        order: None,
        supersede: false,
        keep: false,
        cancel_running: false,
        override_freeze: None,
        waiting: args.waiting.clone(),
    }
}

/// The line after a run that failed: what the next caller will meet.
fn failed_run(key: &str, attempt: u32, spec: &OnceSpec, code: i32, dead: bool) -> String {
    let max = spec.max_attempts;
    if dead {
        format!(
            "{key}: attempt {attempt} of {max} failed (exit {code}); the key is now dead: every \
             caller exits 1 until `baton retry {key}`"
        )
    } else {
        format!(
            "{key}: attempt {attempt} of {max} failed (exit {code}); the next caller tries again"
        )
    }
}

/// Says why CMD did not run, and exits as a script expects: 0 for a success already recorded,
/// 80 for a gap, 1 for a dead key.
fn report(not_run: &NotRun) -> Result<i32, Failure> {
    let key = &not_run.key;
    let now = baton_client::wall_ms();
    let ago = |wall_ms: u64| render::duration_ms(now.saturating_sub(wall_ms));
    match not_run.verdict {
        Verdict::Done { done_wall_ms } => {
            eprintln!(
                "baton: {key}: a run already succeeded {} ago; skipped, not run",
                ago(done_wall_ms)
            );
            Ok(exit::OK)
        }
        Verdict::Replay { seq, done_seq } => {
            eprintln!(
                "baton: {key}: step {seq} already completed (the last completed step is \
                 {done_seq}); skipped, not run"
            );
            Ok(exit::OK)
        }
        Verdict::Gap { seq, done_seq } => Err(Failure::new(
            exit::OUT_OF_ORDER,
            format!(
                "{key}: step {seq} cannot run yet: the last completed step is {done_seq}, and \
                 step {} has not completed (or is still running); nothing ran",
                seq - 1
            ),
        )),
        Verdict::Dead { failures } => {
            let last = not_run
                .record
                .as_ref()
                .and_then(|r| {
                    r.last
                        .map(|o| format!(" (the last {o} {} ago)", ago(r.last_wall_ms)))
                })
                .unwrap_or_default();
            Err(Failure::new(
                exit::ERROR,
                format!(
                    "{key} is dead: {failures} runs failed{last}; nothing ran. `baton retry \
                     {key}` gives it its attempts back"
                ),
            ))
        }
        Verdict::Run { .. } => Err(Failure::new(
            exit::ERROR,
            format!("{key}: the turn was lost before CMD could start; nothing ran"),
        )),
    }
}
