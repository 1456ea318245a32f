//! `baton submit`, `complete`, `wait` and `retry`: jobs by `KEY JOB_ID`, no lookup needed
//! (`retry KEY` alone: a dead run-once key).

use std::io::{IsTerminal, Read};
use std::time::Duration;

use baton_client::ids;
use baton_client::jobs::{self, JobEnd, JobStanding, SubmitOptions};
use baton_core::job::{JobResult, JobSpec};
use baton_core::op::TicketView;
use baton_core::{Op, Outcome, Request, TicketState};
use clap::{Args, ValueEnum};

use crate::args::duration::{check_not_before, parse_interval, parse_lease};
use crate::args::key::{check_job_id, check_key};
use crate::args::slots::SlotArgs;
use crate::exit::{self, Failure};
use crate::render;
use crate::Opened;

pub const SUBMIT_HELP: &str = "\
Prints the job's id on stdout. The job waits in KEY's queue, in submit order beside the turns
of `baton run` (--order first), until a `baton worker` for the key runs it. A failed attempt is
retried after its backoff (10s, doubling, at most 10m) and keeps its place; when its attempts are
spent it is dead (`baton retry KEY JOB_ID` queues it again).

Examples:
  baton submit deploy/staging --params '{\"commit\":\"abc123\"}'
  baton submit deploy/prod --params @request.json --id deploy-abc123 --wait
  baton submit reports/nightly --not-before 2026-12-01T02:00:00Z --max-run 1h";

/// `baton submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The key (the resource the job is for: an environment, a server, a tenant)
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's parameters: JSON, or @FILE to read it from FILE (@- for stdin); at most 256 KiB.
    /// The worker's command gets them on stdin and in BATON_PARAMS [default: null]
    #[arg(long, value_name = "JSON|@FILE")]
    pub params: Option<String>,
    /// The job's id (letters, digits, `-`, `_`): a second submit with the same id queues
    /// nothing, prints it again and says how that job stands (`--json`: `"already": true`).
    /// An id is remembered while the job is live and, after it ended, as long as the key's
    /// history keeps its end (the store's retention: 10,000 entries per key by default, 90
    /// days on S3 and DynamoDB); past that, such a submit is refused (exit 1), never run again
    /// [default: a new j-…]
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// How many of the key's jobs and turns may run at once. Every live ticket must agree
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub limit: u32,
    #[command(flatten)]
    pub pool: SlotArgs,
    /// Sort value: jobs and tickets with one go first, then by arrival. Two numbers (digits
    /// only) compare as integers (100 after 99; 099 ties with 99), other values as strings. A
    /// key's live jobs and tickets all use numbers or all text: the other kind is refused
    /// (exit 2)
    #[arg(long, value_name = "VALUE")]
    pub order: Option<String>,
    /// Cancel every queued job or ticket of the key that sorts before this one (as
    /// superseded), unless it was queued with --keep
    #[arg(long)]
    pub supersede: bool,
    /// Never be superseded, and never asked to stop by --cancel-running
    #[arg(long)]
    pub keep: bool,
    /// Ask the key's holders to stop when this job is queued: a `baton run` stops its command
    /// and exits 76, a job a worker runs is stopped; both are recorded superseded (see `baton
    /// run --help`)
    #[arg(long)]
    pub cancel_running: bool,
    /// Attempts before the job is dead (1..=1000)
    #[arg(long, default_value_t = baton_core::job::ATTEMPTS_DEFAULT, value_name = "N")]
    pub max_attempts: u32,
    /// Wait after the first failed attempt; it doubles after each further one, up to 10m
    #[arg(long, value_parser = parse_lease, default_value = "10s", value_name = "DUR")]
    pub backoff: Duration,
    /// Not before this time (RFC 3339, as 2026-12-01T02:00:00Z) or this long from now (DUR,
    /// at most 366d)
    #[arg(long, value_parser = check_not_before, value_name = "TIME|DUR")]
    pub not_before: Option<String>,
    /// Stop a run after DUR (SIGTERM, then SIGKILL), counted as a failed attempt
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub max_run: Option<Duration>,
    /// Who submits it and why, shown to others [default: from the CI's variables, else
    /// user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
    /// Then wait until the job has ended, as `baton wait` does (and exit as it does)
    #[arg(long)]
    pub wait: bool,
    /// Print a JSON object (key, id, state) instead of the id alone
    #[arg(long)]
    pub json: bool,
}

/// How an asynchronous run ended, as `baton complete` reports it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompleteOutcome {
    /// The job is done.
    Succeeded,
    /// A failed attempt: retried after its backoff, or dead.
    Failed,
}

/// `baton complete`.
#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// The run's token (BATON_JOB_TOKEN in the worker's command, read from there by default)
    #[arg(
        long = "job-token",
        env = "BATON_JOB_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: String,
    /// How the run went
    #[arg(long, value_enum, default_value = "succeeded")]
    pub outcome: CompleteOutcome,
    /// Why it failed, kept with the job (`baton jobs`, `baton why`)
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
}

/// `baton wait`.
#[derive(Debug, Args)]
pub struct WaitJobArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id (`baton submit` printed it)
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// How often to look on stores that cannot push (S3, DynamoDB)
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
    /// Print nothing while waiting
    #[arg(short, long)]
    pub quiet: bool,
}

/// `baton retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The dead job's id; without it, KEY's dead run-once record gets its attempts back
    #[arg(value_name = "JOB_ID")]
    pub id: Option<String>,
}

/// A command naming one job: `KEY JOB_ID`.
#[derive(Debug, Args)]
pub struct JobRefArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
}

/// The failure of a command given a job id the key does not know (`wait`, `why`, `jobs show`).
pub fn no_such_job(key: &str, id: &str) -> Failure {
    Failure::new(
        exit::ERROR,
        format!(
            "{key}: no job {id} (not queued, running, nor in the key's history); `baton jobs \
             {key} -s all` lists its jobs"
        ),
    )
}

/// Runs the `submit` subcommand.
pub async fn submit(opened: &Opened, args: SubmitArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let params = read_params(args.params.as_deref())?;
    jobs::check_params(&params).map_err(Failure::usage)?;
    let spec = JobSpec {
        max_attempts: args.max_attempts,
        backoff_ms: millis(args.backoff),
        delay_ms: args
            .not_before
            .as_deref()
            .map(delay_until)
            .transpose()?
            .unwrap_or(0),
        max_run_ms: args.max_run.map(millis),
    };
    spec.check().map_err(|e| Failure::usage(e.to_string()))?;
    let pool = args.pool.pool(args.limit)?;
    let options = SubmitOptions {
        id: args.id.clone(),
        limit: pool.as_ref().map_or(args.limit, |p| p.slots.len() as u32),
        pool,
        order: args.order.clone(),
        supersede: args.supersede,
        keep: args.keep,
        spec,
        context: args
            .context
            .clone()
            .unwrap_or_else(crate::context::default_context),
        max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
        cancel_running: args.cancel_running,
    };
    let submitted = jobs::submit(&opened.coord, &args.key, &params, &options).await?;
    let id = submitted.id;
    let state = match &submitted.view {
        TicketView::Live(status) => job_state_name(status.state).to_owned(),
        TicketView::Finished { outcome, .. } => outcome.to_string(),
    };
    if args.json {
        let line = serde_json::json!({
            "key": args.key, "id": id, "state": state, "already": submitted.already,
        });
        crate::out::unless_reader_gone(outln!("{line}"), args.wait)?;
    } else {
        if submitted.already {
            eprintln!(
                "baton: job {id} was submitted to {} before ({state}): nothing queued, its first \
                 parameters stand",
                args.key
            );
        }
        crate::out::unless_reader_gone(outln!("{id}"), args.wait)?;
    }
    if !args.wait {
        return Ok(exit::OK);
    }
    let wait = WaitJobArgs {
        key: args.key,
        id,
        poll: Duration::from_secs(1),
        quiet: false,
    };
    wait_for(opened, &wait).await
}

/// The parameters: the JSON given, or read from `@FILE` (`@-`: stdin); `null` when none.
fn read_params(given: Option<&str>) -> Result<Vec<u8>, Failure> {
    let Some(given) = given else {
        return Ok(b"null".to_vec());
    };
    let Some(path) = given.strip_prefix('@') else {
        return Ok(given.as_bytes().to_vec());
    };
    let limit = baton_core::job::PARAMS_MAX_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    let read = if path == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| Failure::usage(format!("cannot read the parameters from {path}: {e}")))?;
    Ok(bytes)
}

/// `--not-before`: a duration from now, or an RFC 3339 time (its distance from this machine's
/// clock; a time past is now).
fn delay_until(text: &str) -> Result<u64, Failure> {
    if crate::args::duration::is_duration(text) {
        let delay = crate::args::duration::parse_delay(text)
            .map_err(|e| Failure::usage(format!("--not-before: {e}")))?;
        return Ok(millis(delay));
    }
    let at = humantime::parse_rfc3339_weak(text.trim()).map_err(|_| {
        Failure::usage(format!(
            "--not-before `{text}` is neither a time (2026-12-01T02:00:00Z) nor a duration (10m)"
        ))
    })?;
    let now = std::time::SystemTime::now();
    Ok(at.duration_since(now).map(millis).unwrap_or(0))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A live job's state by its ticket's: `queued` or `running`.
pub fn job_state_name(state: TicketState) -> &'static str {
    match state {
        TicketState::Queued => "queued",
        TicketState::Held => "running",
    }
}

/// Runs the `complete` subcommand.
pub async fn complete(opened: &Opened, args: CompleteArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let result = match args.outcome {
        CompleteOutcome::Succeeded => JobResult::Succeeded,
        CompleteOutcome::Failed => JobResult::Failed { error: args.error },
    };
    let view = jobs::complete_job(&opened.coord, &args.key, &args.id, &args.token, result)
        .await
        .map_err(|e| Failure::new(exit::ERROR, Failure::from(e).message))?;
    eprintln!(
        "baton: {}",
        render::one_line(&describe(&args.key, &args.id, &view))
    );
    Ok(exit::OK)
}

fn describe(key: &str, id: &str, view: &TicketView) -> String {
    match view {
        TicketView::Live(status) => {
            let attempt = status.job.as_ref().map_or(1, |j| j.attempt());
            format!("{key} {id}: queued again for attempt {attempt}")
        }
        TicketView::Finished { outcome, .. } => format!("{key} {id}: {outcome}"),
    }
}

/// Runs the `wait` subcommand.
pub async fn wait(opened: &Opened, args: WaitJobArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    check_job_id(&args.id)?;
    wait_for(opened, &args).await
}

async fn wait_for(opened: &Opened, args: &WaitJobArgs) -> Result<i32, Failure> {
    let quiet = args.quiet;
    let key = args.key.clone();
    let id = args.id.clone();
    let tell = move |standing: &JobStanding| {
        if quiet {
            return;
        }
        if let JobStanding::Live {
            state,
            position,
            attempt,
        } = standing
        {
            let place = match state {
                TicketState::Held => "running".to_owned(),
                TicketState::Queued if *position == 0 => "queued, next".to_owned(),
                TicketState::Queued => format!("queued, {position} ahead"),
            };
            eprintln!("baton: {key} {id}: {place} (attempt {attempt})");
        }
    };
    let end = jobs::wait(&opened.coord, &args.key, &args.id, args.poll, &tell)
        .await
        .map_err(|error| match error {
            baton_client::ClientError::Refused {
                refusal: baton_core::Refusal::UnknownId { .. },
                ..
            } => no_such_job(&args.key, &args.id),
            error => error.into(),
        })?;
    // The job's outcome is the exit code: a reader gone does not change it.
    crate::out::unless_reader_gone(print_last_output(opened, &args.key, &args.id).await, true)?;
    if !args.quiet {
        let ended = render::one_line(&ended(&end));
        eprintln!("baton: {} {}: {ended}", args.key, args.id);
    }
    Ok(exit_code(&end))
}

fn ended(end: &JobEnd) -> String {
    match (&end.reason, end.forced) {
        (_, true) => format!("{} (forced by an operator)", end.outcome),
        (Some(reason), _) => format!("{} ({reason})", end.outcome),
        (None, _) => end.outcome.to_string(),
    }
}

/// `wait`'s exit code: 0 succeeded, 1 dead, 77 cancelled, 76 superseded.
fn exit_code(end: &JobEnd) -> i32 {
    match end.outcome {
        Outcome::Succeeded => exit::OK,
        Outcome::Cancelled => exit::CANCELLED,
        Outcome::Superseded => exit::SUPERSEDED,
        _ => exit::ERROR,
    }
}

/// Prints the output tail of the job's last run (stdout's to stdout, stderr's to stderr).
async fn print_last_output(opened: &Opened, key: &str, id: &str) -> Result<(), Failure> {
    let Ok(Some(report)) = jobs::last_report(&opened.coord, key, id).await else {
        return Ok(());
    };
    if !report.stdout_tail.is_empty() {
        crate::out::text(&report.stdout_tail)?;
    }
    if !report.stderr_tail.is_empty() {
        eprint!("{}", report.stderr_tail);
    }
    if std::io::stdout().is_terminal() && !report.stdout_tail.ends_with('\n') {
        outln!()?;
    }
    Ok(())
}

/// Runs the `retry` subcommand.
pub async fn retry(opened: &Opened, args: RetryArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let Some(id) = args.id else {
        return retry_once(opened, &args.key).await;
    };
    let args = JobRefArgs { key: args.key, id };
    let view = jobs::revive(&opened.coord, &args.key, &args.id)
        .await
        .map_err(|e| Failure::new(exit::ERROR, Failure::from(e).message))?;
    eprintln!(
        "baton: {}",
        render::one_line(&describe(&args.key, &args.id, &view))
    );
    Ok(exit::OK)
}

/// `baton retry KEY`: a dead run-once key gets its attempts back.
async fn retry_once(opened: &Opened, key: &str) -> Result<i32, Failure> {
    let mut request = Request::new(ids::new_attempt_id(), Op::RetryOnce);
    opened
        .coord
        .execute(key, &mut request)
        .await
        .map_err(|e| Failure::new(exit::ERROR, Failure::from(e).message))?;
    eprintln!("baton: {key}: its attempts are back; the next `baton once {key}` runs its command");
    Ok(exit::OK)
}
