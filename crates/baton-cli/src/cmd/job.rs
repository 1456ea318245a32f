//! `baton submit`, `complete`, `wait` and `retry`: jobs by `KEY JOB_ID`, no lookup needed
//! (`retry KEY` alone: a dead run-once key).

use std::io::{IsTerminal, Read};
use std::time::Duration;

use baton_client::ids;
use baton_client::jobs::{self, JobEnd, JobStanding, SubmitOptions};
use baton_core::job::{JobResult, JobSpec};
use baton_core::op::TicketView;
use baton_core::{Op, Outcome, Request, TicketState};

use crate::cli::{CompleteArgs, CompleteOutcome, JobRefArgs, RetryArgs, SubmitArgs, WaitJobArgs};
use crate::exit::{self, Failure};
use crate::render;
use crate::Opened;

fn check_key(key: &str) -> Result<(), Failure> {
    baton_core::limits::check_key(key).map_err(|e| Failure::bad("key", key, e))
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
    let options = SubmitOptions {
        id: args.id.clone(),
        limit: args.limit,
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
    if crate::cli::is_duration(text) {
        let delay = crate::cli::parse_delay(text)
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
    baton_core::limits::check_id(&args.id).map_err(|e| Failure::usage(e.to_string()))?;
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
