//! `baton why KEY [JOB_ID]`: why a job is not running yet, in a few lines — its time, its place,
//! who holds the key and for how long, and whether any worker serves the key.

use baton_client::jobs::{self, JobStanding};
use baton_client::{wall_ms, KeySnapshot};
use baton_core::{Doc, JobState, Ticket, TicketState};
use baton_store::StoreClock;
use clap::Args;

use crate::args::key::{check_job_id, check_key};
use crate::cmd::acquire::rfc3339;
use crate::exit::{self, Failure};
use crate::render;
use crate::Opened;

/// `baton why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The job [default: the key's next job]
    #[arg(value_name = "JOB_ID")]
    pub id: Option<String>,
}

/// A worker not seen for longer than this does not count as serving the key.
const WORKER_SILENT_MS: u64 = 60_000;

/// Runs the `why` subcommand.
pub async fn why(opened: &Opened, args: WhyArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    if let Some(id) = &args.id {
        check_job_id(id)?;
    }
    let coord = &opened.coord;
    let snapshot = coord.read(&args.key).await?;
    let doc = snapshot.doc.clone().unwrap_or_default();
    let job_id = match &args.id {
        Some(id) => id.clone(),
        None => match doc.queued().into_iter().find(|t| t.job.is_some()) {
            Some(next) => next.id.clone(),
            None => {
                outln!("{}: no job is queued", args.key)?;
                return Ok(exit::OK);
            }
        },
    };
    let Some(ticket) = doc.by_id(&job_id).filter(|t| t.job.is_some()) else {
        return ended(opened, &args.key, &job_id).await;
    };
    let mut lines = Vec::new();
    if ticket.state == TicketState::Held {
        lines.push(format!(
            "{} {job_id}: running{} (attempt {}, fence {}) for {}",
            args.key,
            on_slots(ticket),
            ticket.job.as_deref().map_or(1, |j| j.attempt()),
            ticket.fence,
            render::duration_ms(wall_ms().saturating_sub(ticket.granted_wall_ms))
        ));
        print_lines(&lines)?;
        return Ok(exit::OK);
    }
    let status = baton_core::apply::status_of(&doc, &job_id);
    let position = status.map_or(0, |s| s.position);
    let job = ticket.job.as_deref();
    lines.push(format!(
        "{} {job_id}: queued (attempt {})",
        args.key,
        job.map_or(1, |j| j.attempt())
    ));
    lines.extend(ready_line(job, &snapshot));
    lines.extend(paused_line(&doc, snapshot.wall_ms));
    if position > 0 {
        lines.push(format!(
            "  {position} ahead of it on the key (jobs and `baton run` turns run in order)"
        ));
    }
    lines.extend(slot_line(&doc, ticket));
    lines.extend(holders_lines(&doc, ticket, snapshot.wall_ms));
    lines.push(worker_line(opened, &args.key).await?);
    print_lines(&lines)?;
    Ok(exit::OK)
}

/// When a job waiting for a time (its backoff after a failure, a release back, its
/// `--not-before`) is ready, by the store's clock where it has one; `None` if it is ready now.
fn ready_line(job: Option<&JobState>, snapshot: &KeySnapshot) -> Option<String> {
    let job_now_ms = match snapshot.clock {
        StoreClock::Time { now_ms, .. } => now_ms,
        StoreClock::None => snapshot.wall_ms,
    };
    let at = job
        .and_then(|j| j.ready_at_ms)
        .filter(|&at| at > job_now_ms)?;
    let at_wall = snapshot.wall_ms.saturating_add(at - job_now_ms);
    let what = match job.and_then(|j| j.last_error.as_deref()) {
        Some(error) if job.is_some_and(|j| j.failures > 0) => {
            format!("backing off after a failed attempt ({error})")
        }
        _ if job.is_some_and(|j| j.releases > 0) => "released back by its worker".to_owned(),
        _ => "not before its --not-before".to_owned(),
    };
    Some(format!(
        "  {what}: ready at {} (in {})",
        rfc3339(at_wall),
        render::duration_ms(at_wall.saturating_sub(wall_ms()))
    ))
}

/// The freeze that keeps the key from granting at `now_wall_ms`, if one holds then.
fn paused_line(doc: &Doc, now_wall_ms: u64) -> Option<String> {
    let paused = doc.paused.as_ref().filter(|p| p.holds_at(now_wall_ms))?;
    let until = match paused.until_ms {
        Some(until) => format!("until {}", rfc3339(until)),
        None => format!("until `baton resume {}`", render::one_line(&paused.target)),
    };
    Some(format!(
        "  the key is paused {until}, by {}: {} (no job is claimed meanwhile)",
        render::one_line(&paused.by),
        render::one_line(&paused.reason)
    ))
}

/// Who holds the key, for how long, and the estimate for `ticket`.
fn holders_lines(doc: &Doc, ticket: &Ticket, now_wall_ms: u64) -> Vec<String> {
    let holders: Vec<&Ticket> = doc.holders().collect();
    if holders.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![if doc.slots.is_empty() {
        format!("  the key is full: {} of {} held", holders.len(), doc.limit)
    } else {
        let held: usize = holders.iter().map(|t| held_slots(t).len()).sum();
        format!("  {held} of the pool's {} slots held", doc.slots.len())
    }];
    for holder in holders {
        let what = if holder.job.is_some() { "job" } else { "turn" };
        lines.push(format!(
            "    {what} {}{} by {} for {}",
            holder.id,
            on_slots(holder),
            if holder.context.is_empty() {
                "?"
            } else {
                &holder.context
            },
            render::duration_ms(now_wall_ms.saturating_sub(holder.granted_wall_ms))
        ));
    }
    if let Some(wait_ms) = baton_core::estimate::estimate_wait_ms(doc, &ticket.id, now_wall_ms) {
        lines.push(format!(
            "  estimated start in about {} (from recent run times)",
            render::duration_ms(wait_ms)
        ));
    }
    lines
}

/// On a pool: the slot the waiting job needs (`--slot`) and who holds it, or how many it needs
/// and which are free.
fn slot_line(doc: &Doc, ticket: &Ticket) -> Option<String> {
    let ask = ticket.slots.as_ref()?;
    let holder_of = |slot: &str| {
        doc.holders()
            .find(|t| held_slots(t).iter().any(|s| s == slot))
    };
    if let Some(only) = &ask.only {
        return Some(match holder_of(only) {
            Some(holder) => format!(
                "  it needs the slot {only}, held by {} {}",
                if holder.job.is_some() { "job" } else { "turn" },
                holder.id
            ),
            None => format!("  it needs the slot {only}, which is free: it goes after those ahead"),
        });
    }
    let free: Vec<&str> = doc
        .slots
        .iter()
        .filter(|s| holder_of(s).is_none())
        .map(String::as_str)
        .collect();
    let needs = match ask.count {
        1 => "any one slot".to_owned(),
        n => format!("{n} slots at once"),
    };
    let free = match free.as_slice() {
        [] => "none is free".to_owned(),
        some => format!("free: {}", some.join(",")),
    };
    Some(format!(
        "  it needs {needs} of the pool {}; {free}",
        doc.slots.join(",")
    ))
}

/// The slots a ticket holds (empty off a pool or while queued).
fn held_slots(ticket: &Ticket) -> &[String] {
    ticket.slots.as_ref().map_or(&[], |p| p.held.as_slice())
}

/// ` on slot a` (or ` on slots a,b`) for a holder of a pool; empty otherwise.
fn on_slots(ticket: &Ticket) -> String {
    match held_slots(ticket) {
        [] => String::new(),
        [one] => format!(" on slot {one}"),
        many => format!(" on slots {}", many.join(",")),
    }
}

/// Whether a worker serves the key, by the latest that said so.
async fn worker_line(opened: &Opened, key: &str) -> Result<String, Failure> {
    let seen = jobs::last_worker_seen(&opened.coord, key).await?;
    let now = wall_ms();
    Ok(match seen {
        Some(seen) if now.saturating_sub(seen.seen_wall_ms) <= WORKER_SILENT_MS => format!(
            "  served by worker {} (seen {} ago)",
            seen.worker,
            render::duration_ms(now.saturating_sub(seen.seen_wall_ms))
        ),
        Some(seen) => format!(
            "  no worker seen for this key in the last minute (the last, {}, {} ago): start \
             `baton worker {key} -- CMD`",
            seen.worker,
            render::duration_ms(now.saturating_sub(seen.seen_wall_ms))
        ),
        None => format!("  no worker has ever served this key: start `baton worker {key} -- CMD`"),
    })
}

/// A job that is not live: how it ended, or that it is unknown.
async fn ended(opened: &Opened, key: &str, id: &str) -> Result<i32, Failure> {
    match jobs::standing(&opened.coord, key, id).await? {
        JobStanding::Ended(end) => {
            let why = end
                .reason
                .map_or_else(String::new, |r| format!(" ({})", render::one_line(&r)));
            outln!(
                "{key} {id}: not running: it has ended, {}{why}",
                end.outcome
            )?;
            Ok(exit::OK)
        }
        _ => Err(crate::cmd::job::no_such_job(key, id)),
    }
}

fn print_lines(lines: &[String]) -> Result<(), Failure> {
    for line in lines {
        // Contexts, errors and the worker's name are stored text.
        outln!("{}", render::one_line(line))?;
    }
    Ok(())
}
