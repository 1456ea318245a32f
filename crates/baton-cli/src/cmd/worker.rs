//! `baton worker [PATTERN...] -- CMD`: claims ready jobs of matching keys and runs CMD for each,
//! up to `--concurrency` at once.
//!
//! Every job runs as a local task on the main thread (a `LocalSet`), so each CMD is spawned
//! from the thread whose exit its parent-death signal watches (see `child.rs`). The control
//! flow is one loop in [`serve`]: claim while there is room, else wait for a job to end, the
//! poll interval, or a signal.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::jobs::{self, ClaimOptions, Job, KeyPatterns, RunReport};
use baton_client::{wall_ms, Coordinator};
use baton_core::job::JobResult;
use clap::Args;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::args::duration::{
    instant_after, millis, parse_delay, parse_duration, parse_interval, parse_lease,
};
use crate::cmd::child;
use crate::cmd::supervised::{self, sleep_until, supervise, Graces, Stopped, Watch};
use crate::exit::{self, Failure};
use crate::Opened;

pub const WORKER_HELP: &str = "\
Runs the oldest ready job of any matching key whose key has room, up to --concurrency at once;
keys take turns (the one whose head job has waited longest first), so a busy key never delays a
job of a free one. CMD gets the job's parameters on stdin and, in its environment, BATON_KEY,
BATON_JOB_ID, BATON_ATTEMPT (1 for the first attempt), BATON_FENCE, BATON_JOB_TOKEN,
BATON_PARAMS and BATON_STORE (and BATON_SLOT on a pool: submit --slots). Its output passes through; the last 16 KiB of each stream are kept
with the run (`baton jobs show`, `baton wait`).

CMD's exit status decides:
  0      succeeded (with --async: the job stays held until `baton complete`)
  75     released back (EX_TEMPFAIL): it keeps its place, spends no attempt, and is ready again
         after --release-delay; the 21st release back in a row counts as a failed attempt
  other  a failed attempt: retried after the job's backoff, dead when its attempts are spent

The worker renews each job's lease while CMD runs and kills CMD's process group before the
lease can end if it cannot (as `baton run` does); a job whose lease ran out is a failed attempt.
A job's --max-run stops CMD (SIGTERM, then SIGKILL 5s later), a failed attempt.

SIGTERM or SIGINT: stop claiming and let running jobs finish; after --grace, or at a second
signal, their commands are stopped and the jobs given back unspent. Exits 0 then.

Examples:
  baton worker deploy/ -- ./deploy.sh                 every key under deploy/, one job at a time
  baton worker --concurrency 8 -- ./handle-job.sh     every key, eight jobs at once";

/// `baton worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Keys to serve: an exact key, or a prefix ending in `/`; none serves every key
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// Jobs run at once (1..=1000)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub concurrency: u32,
    /// Lease of a run, renewed every TTL/3 while CMD runs; with --async, how long
    /// `baton complete` has after CMD exits 0 (unless `baton renew KEY TOKEN` extends it)
    #[arg(long, value_parser = parse_lease, default_value = "30s", value_name = "DUR")]
    pub ttl: Duration,
    /// When a job released back (exit 75) is ready again
    #[arg(long, value_parser = parse_delay, default_value = "5s", value_name = "DUR")]
    pub release_delay: Duration,
    /// After SIGTERM, how long running jobs may take to finish before they are given back
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DUR")]
    pub grace: Duration,
    /// Do not complete a job when CMD exits 0: it stays held under its lease until
    /// `baton complete KEY JOB_ID --job-token TOKEN` (from any process or machine)
    #[arg(long = "async")]
    pub asynchronous: bool,
    /// How often an idle worker looks for jobs
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
    /// Print no line per job
    #[arg(short, long)]
    pub quiet: bool,
    /// The command that runs each job, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How much of each output stream a run keeps.
const TAIL_BYTES: usize = 16 * 1024;
/// Between SIGTERM and SIGKILL when a run is stopped (`--max-run`, giving back).
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The exit status that gives a job back (EX_TEMPFAIL).
const RELEASE_BACK: i32 = 75;

/// What the running jobs are told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Run to the end.
    No,
    /// Stop the command and give the job back unspent.
    GiveBack,
}

/// What every run shares.
struct Ctx {
    args: WorkerArgs,
    store_url: String,
    worker: String,
}

/// Runs the `worker` subcommand.
pub async fn worker(opened: &Opened, args: WorkerArgs) -> Result<i32, Failure> {
    check(&args)?;
    tokio::task::LocalSet::new()
        .run_until(serve(opened, args))
        .await
}

fn check(args: &WorkerArgs) -> Result<(), Failure> {
    if !(1..=1000).contains(&args.concurrency) {
        return Err(Failure::usage(format!(
            "--concurrency is {}; it must be between 1 and 1000",
            args.concurrency
        )));
    }
    baton_core::limits::check_ttl("TTL (--ttl)", millis(args.ttl))
        .map_err(|e| Failure::usage(e.to_string()))?;
    for pattern in &args.patterns {
        // A pattern is a key, or a prefix ending in `/`.
        let key = pattern.strip_suffix('/').unwrap_or(pattern);
        baton_core::limits::check_key(key).map_err(|e| Failure::bad("pattern", pattern, e))?;
    }
    if args.poll < Duration::from_millis(10) {
        return Err(Failure::usage("--poll must be at least 10ms"));
    }
    Ok(())
}

async fn serve(opened: &Opened, args: WorkerArgs) -> Result<i32, Failure> {
    let coord = opened.coord.clone();
    let patterns = KeyPatterns::new(args.patterns.clone());
    let options = ClaimOptions { ttl: args.ttl };
    let (Ok(mut sigterm), Ok(mut sigint)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Err(Failure::new(exit::ERROR, "cannot install signal handlers"));
    };
    let ctx = Arc::new(Ctx {
        worker: crate::context::default_context(),
        store_url: opened.url.clone(),
        args,
    });
    let (stop_tx, stop_rx) = watch::channel(Stop::No);
    let mut running: JoinSet<()> = JoinSet::new();
    let mut draining_until: Option<Instant> = None;
    let mut look_now = true;
    let mut seen_due = Instant::now();
    // Pushes wake an idle worker at once where the store has them; the poll is the fallback.
    let mut waker = jobs::WorkWaker::new(&coord, &patterns).await?;
    loop {
        if Instant::now() >= seen_due && draining_until.is_none() {
            seen_due = say_alive(&coord, &patterns, &ctx.worker).await;
        }
        let room = running.len() < ctx.args.concurrency as usize;
        let mut idle_for = ctx.args.poll;
        if draining_until.is_none() && room && look_now {
            match jobs::look_for_job(&coord, &patterns, &options).await {
                Ok(jobs::Look::Claimed(job)) => {
                    let job = *job;
                    running.spawn_local(run_job(job, ctx.clone(), stop_rx.clone()));
                    if running.len() >= ctx.args.concurrency as usize {
                        // No room: no wake-up is wanted until a job ends (and on PostgreSQL
                        // a listening connection costs the server at every write).
                        waker.rest();
                    }
                    continue;
                }
                Ok(jobs::Look::Idle { next_due_in }) => {
                    idle_for = next_look_in(next_due_in, ctx.args.poll);
                }
                Err(error) => eprintln!("baton: worker: {error}; looking again"),
            }
        }
        if draining_until.is_some() && running.is_empty() {
            return Ok(exit::OK);
        }
        look_now = false;
        let idle = draining_until.is_none() && room;
        tokio::select! {
            Some(_) = running.join_next() => look_now = true,
            _ = waker.wait(idle_for), if idle => look_now = true,
            _ = tokio::time::sleep_until(seen_due.into()), if draining_until.is_none() => {}
            _ = sleep_until(draining_until) => {
                let _ = stop_tx.send(Stop::GiveBack);
            }
            _ = next_signal(&mut sigterm, &mut sigint) => {
                if draining_until.is_some() {
                    let _ = stop_tx.send(Stop::GiveBack);
                } else {
                    draining_until = Some(start_draining(&ctx.args, running.len()));
                }
            }
        }
    }
}

/// Says this worker is alive and which keys it serves, for `baton why`: a key no worker serves
/// is told apart from one that is busy. Returns when to say it again.
async fn say_alive(coord: &Coordinator, patterns: &KeyPatterns, worker: &str) -> Instant {
    if let Err(error) = jobs::worker_seen(coord, patterns, worker).await {
        eprintln!("baton: worker: could not say it is alive: {error}");
    }
    Instant::now() + jobs::SEEN_EVERY
}

/// At the first SIGTERM or SIGINT: no new claims, and the `n_running` jobs may finish within
/// `--grace`. Returns when that ends (a second signal ends it sooner).
fn start_draining(args: &WorkerArgs, n_running: usize) -> Instant {
    if !args.quiet {
        eprintln!(
            "baton: worker stopping: no new jobs; {n_running} running may finish within {} \
             (signal again to give them back now)",
            crate::render::duration(args.grace)
        );
    }
    instant_after(args.grace)
}

/// How long an idle worker waits before it looks again: its poll, or less when the due index
/// says a served key needs a worker sooner (a backoff or `--not-before` ending), never under
/// [`LOOK_AGAIN_MIN`] (a key due but not claimable yet is looked at again, not spun on).
fn next_look_in(next_due_in: Option<Duration>, poll: Duration) -> Duration {
    next_due_in.map_or(poll, |due_in| due_in.max(LOOK_AGAIN_MIN).min(poll))
}

/// The shortest wait between two looks that found nothing to claim.
const LOOK_AGAIN_MIN: Duration = Duration::from_millis(250);

async fn next_signal(
    sigterm: &mut tokio::signal::unix::Signal,
    sigint: &mut tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = sigint.recv() => {}
    }
}

/// How a run's command ended, as the worker saw it.
enum Ended {
    /// It exited (or died of a signal: 128 + N).
    Exited(i32),
    /// It ran past the job's `--max-run` and was stopped.
    OverRan(Duration),
    /// The lease was lost (or an operator force-cancelled the job): the command was killed.
    LeaseLost(String),
    /// The worker is stopping: the command was stopped and the job goes back unspent.
    GivenBack,
    /// A newer ticket or job asked it to stop (`--cancel-running`): the command was stopped and
    /// the job ends superseded. Who asked.
    Superseded(String),
    /// It could not be started.
    NotStarted(String),
}

/// Runs one claimed job to its end: CMD, then its report, then its completion. A claim whose
/// lease no longer stands (its answer came late, or this worker was paused) is given back
/// unspent and CMD is never started: another worker may already hold the job. A job whose
/// earlier run reported success, its end unrecorded, is recorded as succeeded, not run again.
async fn run_job(job: Job, ctx: Arc<Ctx>, mut stop: watch::Receiver<Stop>) {
    if let Err(lost) = job.heartbeat.standing() {
        give_back_late_claim(job, &lost, &ctx).await;
        return;
    }
    match job.unrecorded_success().await {
        Ok(Some(earlier)) => return record_earlier_success(job, &earlier, &ctx).await,
        Ok(None) => {}
        // Not knowing, the job runs: at least once, as when no report was kept.
        Err(e) if !ctx.args.quiet => eprintln!(
            "baton: {} {}: could not read its earlier runs' reports ({e}); running it",
            job.key(),
            job.id()
        ),
        Err(_) => {}
    }
    let started_wall_ms = wall_ms();
    let started = Instant::now();
    let (ended, stdout_tail, stderr_tail) = run_command(&job, &ctx, &mut stop).await;
    let (result, exit_code, error) = judge(&ended, &ctx);
    let (result, error) = tell_success(&job, result, error, ctx.args.asynchronous).await;
    let report = RunReport {
        attempt: job.attempt,
        run: job.run,
        fence: job.lease.fence,
        worker: ctx.worker.clone(),
        started_wall_ms,
        ended_wall_ms: wall_ms(),
        result: result_name(result.as_ref()).to_owned(),
        exit_code,
        error: error.clone(),
        stdout_tail,
        stderr_tail,
        awaiting_complete: ctx.args.asynchronous && matches!(result, Some(JobResult::Succeeded)),
        note: None,
    };
    if let Err(e) = job.report(&report).await {
        eprintln!(
            "baton: {} {}: could not keep the run's report: {e}",
            job.key(),
            job.id()
        );
    }
    let (key, id, attempt) = (job.key().to_owned(), job.id().to_owned(), job.attempt);
    let took = crate::render::duration(started.elapsed());
    let said = end_job(job, result, error, &ctx, &took).await;
    if !ctx.args.quiet {
        let said = crate::render::one_line(&said);
        eprintln!("baton: {key} {id} attempt {attempt}: {said}");
    }
}

/// A command that succeeded is told to the store before the run's report says so
/// (`Job::succeeded`, fenced like the run): a run that no longer holds the job keeps no success
/// and reports `lease lost`, so that a report kept late (this worker was paused after its
/// command ended) never claims a success while the job runs again elsewhere.
async fn tell_success(
    job: &Job,
    result: Option<JobResult>,
    error: Option<String>,
    asynchronous: bool,
) -> (Option<JobResult>, Option<String>) {
    if asynchronous || !matches!(result, Some(JobResult::Succeeded)) {
        return (result, error);
    }
    match job.succeeded().await {
        Ok(true) => (result, error),
        Ok(false) => (
            None,
            Some("the command succeeded, but the run no longer held the job (its lease ran out first)".into()),
        ),
        Err(e) => (
            None,
            Some(format!(
                "the command succeeded, but the store could not be told while the run held the job: {e}"
            )),
        ),
    }
}

/// How a run's result is named in its report; `lease lost` when there is none to complete.
fn result_name(result: Option<&JobResult>) -> &'static str {
    result.map_or("lease lost", |r| match r {
        JobResult::Succeeded => "succeeded",
        JobResult::Failed { .. } => "failed",
        JobResult::ReleasedBack { .. } => "released_back",
        JobResult::Superseded { .. } => "superseded",
    })
}

/// Completes the job with `result`, or leaves it held (lease lost, or `--async` after exit 0);
/// says what became of it, for the worker's line.
async fn end_job(
    job: Job,
    result: Option<JobResult>,
    error: Option<String>,
    ctx: &Ctx,
    took: &str,
) -> String {
    match result {
        None => {
            job.heartbeat.stop_all();
            format!("lease lost, command killed: {}", error.unwrap_or_default())
        }
        Some(JobResult::Succeeded) if ctx.args.asynchronous => {
            // Left held under its lease for `baton complete` (or `baton renew`).
            job.heartbeat.stop_all();
            let (key, id) = (job.key(), job.id());
            format!(
                "command exited 0 after {took}; held for `baton complete {key} {id} --job-token …` \
                 until its lease ends"
            )
        }
        Some(result) => match job.complete(result).await {
            Ok(view) => describe_after(&view, took),
            Err(e) => format!("could not record how it ended: {e}"),
        },
    }
}

/// Records as succeeded a job whose `earlier` run reported its command's exit 0 and whose
/// worker then stopped before recording the job's end: this run keeps a report saying so, and
/// CMD does not run again.
async fn record_earlier_success(job: Job, earlier: &RunReport, ctx: &Ctx) {
    let now = wall_ms();
    let note = format!(
        "run {} (attempt {}) exited 0 and reported it, but its worker stopped before the job's \
         end was recorded; recorded as succeeded now, not run again",
        earlier.run, earlier.attempt
    );
    let report = RunReport {
        attempt: job.attempt,
        run: job.run,
        fence: job.lease.fence,
        worker: ctx.worker.clone(),
        started_wall_ms: now,
        ended_wall_ms: now,
        result: "not run".to_owned(),
        exit_code: None,
        error: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        awaiting_complete: false,
        note: Some(note.clone()),
    };
    let (key, id) = (job.key().to_owned(), job.id().to_owned());
    if let Err(e) = job.report(&report).await {
        eprintln!("baton: {key} {id}: could not keep the run's report: {e}");
    }
    let said = match job.complete(JobResult::Succeeded).await {
        Ok(_) => note,
        Err(e) => format!("{note}, but could not record it: {e}"),
    };
    if !ctx.args.quiet {
        eprintln!("baton: {key} {id}: {}", crate::render::one_line(&said));
    }
}

/// Gives back a claim whose lease ran out before CMD could start: no attempt spent, ready again
/// at once (if the store has already ended the lease, the job is another worker's anyway).
async fn give_back_late_claim(job: Job, lost: &baton_client::Lost, ctx: &Ctx) {
    let (key, id) = (job.key().to_owned(), job.id().to_owned());
    let said = match job.release_back(Duration::ZERO).await {
        Ok(_) => "given back unspent".to_owned(),
        Err(e) => format!("could not give it back ({e}); the store ends it with its lease"),
    };
    if !ctx.args.quiet {
        eprintln!(
            "baton: {key} {id}: the claim's lease ran out before the command could start \
             ({}); not started, {said}",
            lost.reason
        );
    }
}

/// What the run's end means for the job: the result to complete it with (`None`: the lease is
/// gone, nothing to complete), CMD's exit code, and the error to keep.
fn judge(ended: &Ended, ctx: &Ctx) -> (Option<JobResult>, Option<i32>, Option<String>) {
    match ended {
        Ended::Exited(0) => (Some(JobResult::Succeeded), Some(0), None),
        Ended::Exited(RELEASE_BACK) => (
            Some(JobResult::ReleasedBack {
                delay_ms: millis(ctx.args.release_delay),
            }),
            Some(RELEASE_BACK),
            None,
        ),
        Ended::Exited(code) => {
            let error = Some(format!("exit {code}"));
            (
                Some(JobResult::Failed {
                    error: error.clone(),
                }),
                Some(*code),
                error,
            )
        }
        Ended::OverRan(max_run) => {
            let error = Some(format!(
                "ran longer than --max-run {}; stopped",
                crate::render::duration(*max_run)
            ));
            (
                Some(JobResult::Failed {
                    error: error.clone(),
                }),
                None,
                error,
            )
        }
        Ended::LeaseLost(why) => (None, None, Some(why.clone())),
        Ended::GivenBack => (
            Some(JobResult::ReleasedBack { delay_ms: 0 }),
            None,
            Some("given back: the worker was stopping".into()),
        ),
        Ended::Superseded(by) => {
            let reason = format!("asked to stop by {by} (--cancel-running)");
            (
                Some(JobResult::Superseded {
                    reason: Some(reason.clone()),
                }),
                None,
                Some(reason),
            )
        }
        Ended::NotStarted(why) => {
            let error = Some(why.clone());
            (
                Some(JobResult::Failed {
                    error: error.clone(),
                }),
                None,
                error,
            )
        }
    }
}

fn describe_after(view: &baton_core::op::TicketView, took: &str) -> String {
    match view {
        baton_core::op::TicketView::Finished { outcome, .. } => format!("{outcome} after {took}"),
        baton_core::op::TicketView::Live(status) => {
            let job = status.job.as_deref();
            let attempt = job.map_or(1, |j| j.attempt());
            let again = job
                .and_then(|j| j.last_error.clone())
                .map_or_else(String::new, |e| format!(" ({e})"));
            format!("queued again after {took}, next attempt {attempt}{again}")
        }
    }
}

/// Runs CMD for `job` until it ends, the lease is lost, the run overruns, or the worker gives
/// the job back ([`supervise`]). Returns how it ended and the tails of its stdout and stderr.
async fn run_command(
    job: &Job,
    ctx: &Ctx,
    stop: &mut watch::Receiver<Stop>,
) -> (Ended, String, String) {
    let env = job_env(job, &ctx.store_url);
    // On the main thread: this task is local to it (see the module's doc).
    let mut running = match child::spawn_piped(&ctx.args.command, &env) {
        Ok(running) => running,
        Err(e) => {
            let why = format!("cannot run {}: {e}", ctx.args.command.join(" "));
            return (Ended::NotStarted(why), String::new(), String::new());
        }
    };
    let (stdout, stderr) = feed_and_pump(&mut running, &job.params);
    let watch = Watch {
        lost: job.heartbeat.lost(),
        stop_asked: job.heartbeat.stop_asked(),
        deadline: job.max_run.map(instant_after),
        // The worker handles its own signals: a stop gives jobs back (see `serve`).
        forwarded: None,
    };
    let supervised = supervise(
        &mut running,
        watch,
        Graces::all(STOP_GRACE),
        given_back(stop),
        |_| {},
    )
    .await;
    let ended = match supervised {
        supervised::Ended::Exited { status, stopped } => match stopped {
            None => Ended::Exited(status.map_or(1, child::exit_code)),
            Some(Stopped::OverRan) => Ended::OverRan(job.max_run.unwrap_or_default()),
            Some(Stopped::Asked(by)) => Ended::Superseded(by.by),
            Some(Stopped::GivenBack) => Ended::GivenBack,
        },
        supervised::Ended::LeaseLost(lost) => Ended::LeaseLost(lost.reason),
    };
    let stdout_tail = match stdout {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    let stderr_tail = match stderr {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    (ended, stdout_tail, stderr_tail)
}

/// Resolves when the worker tells its running jobs to give back (or can no longer tell them
/// anything).
async fn given_back(stop: &mut watch::Receiver<Stop>) {
    while stop.changed().await.is_ok() {
        if *stop.borrow() == Stop::GiveBack {
            return;
        }
    }
}

/// The tasks that copy a job's output as it comes; the job's parameters are written to its
/// stdin meanwhile.
type Pumps = (
    Option<tokio::task::JoinHandle<String>>,
    Option<tokio::task::JoinHandle<String>>,
);

/// Writes `params` to CMD's stdin and starts copying its stdout and stderr through ([`pump`]);
/// each pump's task returns the tail it kept.
fn feed_and_pump(running: &mut child::Running, params: &[u8]) -> Pumps {
    if let Some(mut stdin) = running.child.stdin.take() {
        let params = params.to_vec();
        tokio::task::spawn_local(async move {
            // A command that does not read its stdin closes it: not an error.
            let _ = stdin.write_all(&params).await;
        });
    }
    let stdout = running
        .child
        .stdout
        .take()
        .map(|out| tokio::task::spawn_local(pump(out, Box::new(std::io::stdout()))));
    let stderr = running
        .child
        .stderr
        .take()
        .map(|err| tokio::task::spawn_local(pump(err, Box::new(std::io::stderr()))));
    (stdout, stderr)
}

/// Copies `from` to `to` as it comes, and returns its last [`TAIL_BYTES`] (as text; bytes
/// that are not UTF-8 are replaced).
async fn pump(mut from: impl AsyncRead + Unpin, mut to: Box<dyn Write>) -> String {
    let mut tail: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 8192];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = to.write_all(&buffer[..n]);
        let _ = to.flush();
        tail.extend_from_slice(&buffer[..n]);
        if tail.len() > 2 * TAIL_BYTES {
            tail.drain(..tail.len() - TAIL_BYTES);
        }
    }
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
    String::from_utf8_lossy(&tail).into_owned()
}

/// CMD's environment for `job`.
fn job_env(job: &Job, store_url: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("BATON_KEY".into(), job.key().to_owned()),
        ("BATON_JOB_ID".into(), job.id().to_owned()),
        ("BATON_ATTEMPT".into(), job.attempt.to_string()),
        ("BATON_FENCE".into(), job.lease.fence.to_string()),
        ("BATON_JOB_TOKEN".into(), job.lease.token.clone()),
        (
            "BATON_PARAMS".into(),
            String::from_utf8_lossy(&job.params).into_owned(),
        ),
        ("BATON_STORE".into(), store_url.to_owned()),
    ];
    if !job.lease.slots.is_empty() {
        env.push(("BATON_SLOT".into(), job.lease.slots.join(",")));
    }
    env
}
