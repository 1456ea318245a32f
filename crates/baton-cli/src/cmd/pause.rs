//! `baton pause`, `baton resume` and `baton pause --list`: freeze windows
//! ([`baton_client::freeze`]).

use std::io::Write;

use baton_client::freeze::{self, Touched};
use baton_client::status::rfc3339;
use baton_client::wall_ms;
use baton_core::freeze::{Freeze, Weekly};
use clap::Args;
use serde_json::{json, Value};

use crate::args::duration::parse_time;
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Table};
use crate::Opened;

/// `baton pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// A key, a prefix ending in `/` (every key under it), or `*` (every key)
    #[arg(value_name = "KEY|PREFIX/", required_unless_present = "list")]
    pub target: Option<String>,
    /// Why: shown on every waiting line, in `baton status`, `baton log` and notifications
    #[arg(long, value_name = "TEXT", required_unless_present = "list")]
    pub reason: Option<String>,
    /// Start later: a time (`2026-12-24T16:00:00Z`, `2026-12-24 16:00` in UTC) or a
    /// duration from now (`2h`) [default: now]
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub from: Option<u64>,
    /// End by itself at a time or after a duration, as --from [default: at `baton resume`]
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub until: Option<u64>,
    /// Only inside this window of every week: "fri 16:00..mon 08:00", in UTC unless
    /// followed by an offset ("fri 16:00..mon 08:00 +01:00"; no time-zone names)
    #[arg(long, value_name = "WINDOW")]
    pub weekly: Option<String>,
    /// Who pauses, for the log [default: user@host, or the CI job]
    #[arg(long, value_name = "TEXT")]
    pub by: Option<String>,
    /// List the store's freezes instead (with --json: one JSON object per line)
    #[arg(long, conflicts_with_all = ["target", "reason", "from", "until", "weekly", "by"])]
    pub list: bool,
    /// Write JSON to stdout: what was paused, or with --list the freezes
    #[arg(long)]
    pub json: bool,
}

pub const PAUSE_HELP: &str = "\
While a key is paused no new turn is granted and no job is claimed on it: holders finish,
waiters keep their places, and their waiting line says why and until when.

  baton pause deploy/ --reason \"audit, ask #ops\"            every key under deploy/, until resumed
  baton pause deploy/prod --reason \"release freeze\" --until 2026-12-28T08:00:00Z
  baton pause db/ --reason \"maintenance\" --from 2026-12-24T22:00:00Z --until 2026-12-25T02:00:00Z
  baton pause deploy/ --reason \"no Friday deploys\" --weekly \"fri 16:00..mon 08:00 +01:00\"
  baton resume deploy/                                     ends the freezes set on deploy/
  baton pause --list                                       every freeze, and when it holds

An emergency: `baton run --override-freeze \"hotfix INC-42\" deploy/prod -- ./deploy.sh` is
granted through the freeze in its turn (those queued before it go first), recorded with the
reason. When `baton pause` returns, every baton process has seen the freeze (a process reads
freezes at most 1 s old), and the keys under it show it. Times are UTC; a weekly window takes a
fixed offset, so a zone with summer time needs it moved twice a year. Needs admin on every
key through `baton serve`.";

/// `baton resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The target given to `baton pause`: a key, a prefix ending in `/`, or `*`
    #[arg(value_name = "KEY|PREFIX/")]
    pub target: String,
    /// Who resumes, for the log [default: user@host, or the CI job]
    #[arg(long, value_name = "TEXT")]
    pub by: Option<String>,
    /// Write one JSON object to stdout: the freezes ended and the keys written
    #[arg(long)]
    pub json: bool,
}

/// Runs `baton pause`.
pub async fn pause(opened: &Opened, args: PauseArgs) -> Result<i32, Failure> {
    if args.list {
        return list(opened, args.json).await;
    }
    let (Some(target), Some(reason)) = (args.target, args.reason) else {
        return Err(Failure::usage(
            "baton pause needs KEY|PREFIX/ and --reason TEXT (or --list)",
        ));
    };
    let weekly = match &args.weekly {
        Some(text) => Some(Weekly::parse(text).map_err(|e| Failure::usage(e.to_string()))?),
        None => None,
    };
    let now = wall_ms();
    if args.until.is_some_and(|until| until <= now) {
        return Err(Failure::usage(
            "--until is in the past: give a later time, or a duration such as 2h",
        ));
    }
    let freeze = Freeze {
        target,
        reason,
        by: args.by.unwrap_or_else(crate::context::default_context),
        set_wall_ms: now,
        from_ms: args.from.filter(|from| *from > now),
        until_ms: args.until,
        weekly,
    };
    freeze.check().map_err(|e| Failure::usage(e.to_string()))?;
    let touched = freeze::pause(&opened.coord, freeze.clone()).await?;
    let now = wall_ms();
    if args.json {
        print_json(&json!({
            "paused": freeze_json(&freeze, now),
            "keys": touched.keys,
            "held": touched.held,
            "waiting": touched.waiting,
        }))?;
    }
    eprintln!(
        "baton: {} {}: {}{}",
        render::one_line(&freeze.target),
        when(&freeze, now),
        render::one_line(&freeze.reason),
        effect(&touched, freeze.stretch_at(now).is_some()),
    );
    Ok(exit::OK)
}

/// Runs `baton resume`.
pub async fn resume(opened: &Opened, args: ResumeArgs) -> Result<i32, Failure> {
    let by = args.by.unwrap_or_else(crate::context::default_context);
    let (ended, touched) = freeze::resume(&opened.coord, &args.target, &by).await?;
    if ended.is_empty() {
        let covering = freeze::covering(&opened.coord, &args.target).await?;
        let message = if covering.is_empty() {
            format!(
                "nothing is paused at {}: `baton pause --list` shows the freezes",
                render::one_line(&args.target)
            )
        } else {
            let named: Vec<String> = covering
                .iter()
                .map(|f| format!("{} ({})", f.target, render::one_line(&f.reason)))
                .collect();
            format!(
                "no freeze is set on {} itself; it is paused by {}: resume that target",
                render::one_line(&args.target),
                named.join(", ")
            )
        };
        return Err(Failure::new(exit::MISSING, message));
    }
    if args.json {
        let now = wall_ms();
        let ended: Vec<Value> = ended.iter().map(|f| freeze_json(f, now)).collect();
        print_json(&json!({
            "resumed": ended,
            "keys": touched.keys,
            "waiting": touched.waiting,
        }))?;
    }
    let n = ended.len();
    eprintln!(
        "baton: resumed {} ({n} freeze{}); {} key{} written{}",
        render::one_line(&args.target),
        if n == 1 { "" } else { "s" },
        touched.keys.len(),
        if touched.keys.len() == 1 { "" } else { "s" },
        if touched.waiting > 0 {
            format!(
                ", {} waiting ticket(s) go on in their order",
                touched.waiting
            )
        } else {
            String::new()
        }
    );
    Ok(exit::OK)
}

/// `baton pause --list`: every freeze that may still hold, as a table or JSON lines.
async fn list(opened: &Opened, as_json: bool) -> Result<i32, Failure> {
    let settings = freeze::list(&opened.coord).await?;
    let now = wall_ms();
    let mut out = std::io::stdout().lock();
    let written = if as_json {
        settings
            .freezes
            .iter()
            .try_for_each(|f| writeln!(out, "{}", freeze_json(f, now)))
    } else if settings.freezes.is_empty() {
        drop(out);
        eprintln!("baton: nothing is paused");
        return Ok(exit::OK);
    } else {
        let mut table = Table::new(
            ["TARGET", "NOW", "WHEN", "REASON", "BY"]
                .iter()
                .map(|h| h.to_string())
                .collect(),
        )
        .flexible(Some(3));
        for f in &settings.freezes {
            let state = if f.stretch_at(now).is_some() {
                Cell::painted("paused", Some(render::Paint::Yellow))
            } else {
                Cell::plain("scheduled")
            };
            table.push(vec![
                Cell::plain(&f.target),
                state,
                Cell::plain(when(f, now)),
                Cell::plain(&f.reason),
                Cell::plain(&f.by),
            ]);
        }
        let width = render::terminal_size().map(|(w, _)| w);
        out.write_all(table.render(width, render::colour_wanted()).as_bytes())
    };
    crate::out::written(written)?;
    Ok(exit::OK)
}

/// When a freeze holds, in words: `paused until resumed`, `paused until 2026-…`,
/// `paused from … until …`, `paused every week fri 16:00..mon 08:00 UTC`.
fn when(f: &Freeze, now: u64) -> String {
    let mut words = vec!["paused".to_owned()];
    if let Some(weekly) = &f.weekly {
        words.push(format!("every week {}", weekly.describe()));
    }
    if let Some(from) = f.from_ms.filter(|from| *from > now) {
        words.push(format!("from {}", rfc3339(from)));
    }
    match (f.until_ms, &f.weekly) {
        (Some(until), _) => words.push(format!("until {}", rfc3339(until))),
        (None, None) => words.push("until resumed".to_owned()),
        (None, Some(_)) => {}
    }
    if let (Some(_), Some((_, Some(closes)))) = (&f.weekly, f.stretch_at(now)) {
        words.push(format!("(now, until {})", rfc3339(closes)));
    }
    words.join(" ")
}

/// What the pause did to the keys it covers, after the reason.
fn effect(touched: &Touched, in_force: bool) -> String {
    if touched.keys.is_empty() {
        return " (no key has a document there yet: new ones wait as soon as they come)".into();
    }
    let keys = touched.keys.len();
    let mut parts = vec![format!(
        "{keys} key{}{}",
        if keys == 1 { "" } else { "s" },
        if in_force { " paused" } else { "" }
    )];
    if in_force && !touched.held.is_empty() {
        parts.push(format!(
            "{} with holders that finish their turns",
            touched.held.len()
        ));
    }
    if touched.waiting > 0 {
        parts.push(format!(
            "{} waiting ticket(s) keep their places",
            touched.waiting
        ));
    }
    format!("; {}", parts.join(", "))
}

fn freeze_json(f: &Freeze, now: u64) -> Value {
    let stretch = f.stretch_at(now);
    json!({
        "target": f.target,
        "reason": f.reason,
        "by": f.by,
        "set_at": rfc3339(f.set_wall_ms),
        "from": f.from_ms.map(rfc3339),
        "until": f.until_ms.map(rfc3339),
        "weekly": f.weekly.as_ref().map(Weekly::describe),
        "in_force": stretch.is_some(),
        "in_force_until": stretch.and_then(|(_, until)| until).map(rfc3339),
        "next_start": f.next_start(now).map(rfc3339),
    })
}

fn print_json(value: &Value) -> Result<(), Failure> {
    outln!("{value}")
}
