//! `baton jobs [PREFIX]` and `baton jobs show KEY JOB_ID`: what waits, runs and ended.

use baton_client::jobs::{self, JobRow, JobStanding, RunReport};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::args::key::{check_job_id, check_key};
use crate::cmd::acquire::rfc3339;
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Table};
use crate::Opened;

pub const JOBS_HELP: &str = "\
One row per job: queued ones in the order they will run (READY says when a job waits for its
--not-before or its backoff), running ones with their fence, ended ones (with -s) newest first
per key with how they ended. --json prints one object per line with key, id, state, attempt,
position, ready_at, last_error, context, submitted_at, ended_at and fence.

  baton jobs deploy/                 what waits and runs under deploy/
  baton jobs -s dead,succeeded -l 20 what ended lately
  baton jobs show deploy/prod j-1f…  parameters, and every run with its exit and output";

/// `baton jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// `show KEY JOB_ID`: one job in full.
    #[command(subcommand)]
    pub show: Option<JobsCommand>,
    /// Only keys starting with PREFIX [default: every key]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Words after PREFIX: none are taken; kept so that `jobs shwo KEY ID` can be answered as
    /// the mistyped subcommand it is rather than as a prefix with stray words.
    #[arg(value_name = "WORDS", hide = true)]
    pub stray: Vec<String>,
    /// Only jobs in these states: a comma list of queued, running, succeeded, dead,
    /// cancelled, superseded, or all
    #[arg(short, long, value_name = "STATES", default_value = "queued,running")]
    pub state: String,
    /// Show at most N rows (1..=100000)
    #[arg(
        short = 'n',
        long,
        short_alias = 'l',
        alias = "limit-rows",
        value_name = "N",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub max_rows: u32,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

/// `baton jobs show`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// One job in full: state, parameters, and every run with its exit, time and output tail
    Show(JobShowArgs),
}

/// `baton jobs show KEY JOB_ID`.
#[derive(Debug, Args)]
pub struct JobShowArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job's id
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// One JSON object
    #[arg(long)]
    pub json: bool,
}

/// Every state a job can be listed in.
const STATES: [&str; 6] = [
    "queued",
    "running",
    "succeeded",
    "dead",
    "cancelled",
    "superseded",
];

/// Runs the `jobs` subcommand.
pub async fn jobs(opened: &Opened, args: JobsArgs) -> Result<i32, Failure> {
    if let Some(JobsCommand::Show(show_args)) = args.show {
        return show(opened, show_args).await;
    }
    check_stray_words(&args)?;
    let states = parse_states(&args.state)?;
    let ended_wanted = states.iter().any(|s| !matches!(*s, "queued" | "running"));
    let limit = args.max_rows as usize;
    let ended = if ended_wanted { limit } else { 0 };
    let (rows, unread) = jobs::list(&opened.coord, &args.prefix, ended, limit).await?;
    let mut rows: Vec<JobRow> = rows
        .into_iter()
        .filter(|row| states.contains(&row.state.as_str()))
        .collect();
    let unread = if states.contains(&"queued") {
        unread
    } else {
        0
    };
    let left_out = (rows.len().saturating_sub(limit) as u64).saturating_add(unread);
    rows.truncate(limit);
    if args.json {
        for row in &rows {
            outln!("{}", row_json(row))?;
        }
        return Ok(exit::OK);
    }
    print_table(&rows)?;
    if left_out > 0 {
        eprintln!("baton: {left_out} more not shown (-n N shows more)");
    }
    Ok(exit::OK)
}

/// `jobs PREFIX` takes one word: more are a mistyped subcommand (`jobs shwo KEY ID`), or a
/// forgotten `show`; clap alone would call the second word a subcommand that cannot follow
/// PREFIX.
fn check_stray_words(args: &JobsArgs) -> Result<(), Failure> {
    if args.stray.is_empty() {
        return Ok(());
    }
    let word = args.prefix.as_str();
    let rest = args.stray.join(" ");
    if strsim::damerau_levenshtein(word, "show") <= 2 {
        return Err(Failure::usage(format!(
            "unknown subcommand {word}; did you mean `baton jobs show {rest}`?"
        )));
    }
    Err(Failure::usage(format!(
        "`baton jobs` takes one PREFIX, not `{word} {rest}`; `baton jobs show KEY JOB_ID` shows \
         one job"
    )))
}

fn parse_states(text: &str) -> Result<Vec<&'static str>, Failure> {
    if text == "all" {
        return Ok(STATES.to_vec());
    }
    text.split(',')
        .map(|s| {
            STATES
                .iter()
                .copied()
                .find(|state| *state == s.trim())
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "`{s}` is not a job state; use a comma list of {} or all",
                        STATES.join(", ")
                    ))
                })
        })
        .collect()
}

/// A queued job's place as `baton status` shows places: 1 is next in line (the row counts the
/// tickets ahead).
fn shown_position(row: &JobRow) -> Option<usize> {
    row.position.map(|ahead| ahead.saturating_add(1))
}

fn row_json(row: &JobRow) -> Value {
    json!({
        "key": row.key,
        "id": row.id,
        "state": row.state,
        "attempt": row.attempt,
        "position": shown_position(row),
        "ready_at": row.ready_at_wall_ms.map(rfc3339),
        "last_error": row.last_error,
        "context": row.context,
        "submitted_at": rfc3339(row.submitted_wall_ms),
        "ended_at": row.ended_wall_ms.map(rfc3339),
        "fence": row.fence,
    })
}

fn print_table(rows: &[JobRow]) -> Result<(), Failure> {
    let colour = render::colour_wanted();
    let headers = [
        "KEY",
        "ID",
        "STATE",
        "ATTEMPT",
        "POS",
        "READY",
        "LAST_ERROR",
        "CONTEXT",
    ];
    let mut table = Table::new(headers.iter().map(|h| (*h).to_owned()).collect()).flexible(Some(7));
    for row in rows {
        table.push(vec![
            Cell::plain(&row.key),
            Cell::plain(&row.id),
            Cell::painted(&row.state, render::outcome_paint(&row.state)),
            Cell::plain(row.attempt.to_string()),
            Cell::plain(shown_position(row).map_or_else(String::new, |p| p.to_string())),
            Cell::plain(
                row.ready_at_wall_ms
                    .map_or_else(String::new, render::rfc3339_seconds),
            ),
            Cell::plain(render::cut(row.last_error.as_deref().unwrap_or(""), 60)),
            Cell::plain(&row.context),
        ]);
    }
    let width = render::terminal_size().map(|(w, _)| w);
    crate::out::text(&table.render(width, colour))
}

/// `baton jobs show KEY JOB_ID`.
async fn show(opened: &Opened, args: JobShowArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    check_job_id(&args.id)?;
    let coord = &opened.coord;
    let standing = jobs::standing(coord, &args.key, &args.id).await?;
    if standing == JobStanding::Unknown {
        return Err(crate::cmd::job::no_such_job(&args.key, &args.id));
    }
    let params = jobs::params(coord, &args.key, &args.id).await?;
    let runs = jobs::runs(coord, &args.key, &args.id).await?;
    let reports = jobs::reports(coord, &args.key, &args.id, runs).await?;
    let state = match &standing {
        JobStanding::Live { state, .. } => crate::cmd::job::job_state_name(*state).to_owned(),
        JobStanding::Ended(end) => end.outcome.to_string(),
        JobStanding::Unknown => "unknown".to_owned(),
    };
    let params_text = params
        .as_deref()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    if args.json {
        let params_json: Value = params
            .as_deref()
            .and_then(|p| serde_json::from_slice(p).ok())
            .unwrap_or(Value::Null);
        let line = json!({
            "key": args.key,
            "id": args.id,
            "state": state,
            "params": params_json,
            "runs": reports,
        });
        outln!("{line}")?;
        return Ok(exit::OK);
    }
    // Reasons, parameters, errors, the worker's name and output tails are stored text.
    let shown = render::one_line;
    outln!("{} {}: {state}", args.key, args.id)?;
    if let JobStanding::Ended(end) = &standing {
        if let Some(reason) = &end.reason {
            outln!("  why: {}", shown(reason))?;
        }
    }
    outln!(
        "  params: {}",
        shown(params_text.as_deref().unwrap_or("(none kept)"))
    )?;
    for report in &reports {
        print_run(report)?;
    }
    if runs > 0 && reports.is_empty() {
        outln!("  ({runs} runs; no worker kept a report)")?;
    }
    Ok(exit::OK)
}

/// One run of `jobs show`: when, how it ended and by whom, then its error, note and output
/// tails (stored text, each line made one line).
fn print_run(report: &RunReport) -> Result<(), Failure> {
    let shown = render::one_line;
    let took = report.ended_wall_ms.saturating_sub(report.started_wall_ms);
    let exit = report
        .exit_code
        .map_or_else(String::new, |c| format!(", exit {c}"));
    outln!(
        "  run {} (attempt {}) {}: {}{exit} after {}, fence {}, by {}",
        report.run,
        report.attempt,
        rfc3339(report.started_wall_ms),
        report.result,
        render::duration_ms(took),
        report.fence,
        shown(&report.worker),
    )?;
    if let Some(error) = &report.error {
        outln!("    error: {}", shown(error))?;
    }
    if let Some(note) = &report.note {
        outln!("    note: {}", shown(note))?;
    }
    if report.awaiting_complete {
        outln!("    (--async: exit 0; the job ends at `baton complete`)")?;
    }
    for (name, tail) in [
        ("stdout", &report.stdout_tail),
        ("stderr", &report.stderr_tail),
    ] {
        if !tail.is_empty() {
            outln!("    {name}:")?;
            for line in tail.lines() {
                outln!("      {}", shown(line))?;
            }
        }
    }
    Ok(())
}
