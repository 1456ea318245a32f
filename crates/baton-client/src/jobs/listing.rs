//! Listing jobs for `baton jobs`: live ones (window and backlog) and recently ended ones, with
//! their parameters and their runs' reports.

use baton_core::{Doc, JobState, Ticket, TicketState};

use super::backlog::final_entry;
use super::claim::RunReport;
use super::records::{read_job_record, run_record};
use super::standing::JobStanding;
use super::wait::standing;
use crate::coordinator::{Coordinator, KeySnapshot};
use crate::error::ClientError;
use crate::segments::read_segment;
/// One job, as `baton jobs` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    /// The key.
    pub key: String,
    /// The job's id.
    pub id: String,
    /// `queued`, `running`, or how it ended: `succeeded`, `dead`, `cancelled`, `superseded`.
    pub state: String,
    /// The attempt running or next, or the last one.
    pub attempt: u32,
    /// Its place among the key's queued tickets and jobs (queued jobs only).
    pub position: Option<usize>,
    /// When a queued job is ready (this machine's wall clock), if it waits for a time.
    pub ready_at_wall_ms: Option<u64>,
    /// The error of its last failed attempt.
    pub last_error: Option<String>,
    /// Who submitted it, and why.
    pub context: String,
    /// When it was submitted (the submitter's wall clock).
    pub submitted_wall_ms: u64,
    /// When it ended, for an ended job.
    pub ended_wall_ms: Option<u64>,
    /// The fence of its current run, for a running job.
    pub fence: Option<u64>,
}

/// The jobs of every key starting with `prefix`: the live ones (queued, running; of a key's
/// backlog, as many as make `live_limit` rows for the key), and when `ended` is more than 0,
/// up to that many of each key's most recently ended ones. Also returns how many backlog jobs
/// were left unread.
pub async fn list(
    coord: &Coordinator,
    prefix: &str,
    ended: usize,
    live_limit: usize,
) -> Result<(Vec<JobRow>, u64), ClientError> {
    let mut rows = Vec::new();
    let mut unread = 0u64;
    for key in coord.keys(prefix).await? {
        let snapshot = coord.read(&key).await?;
        let mut listed = std::collections::HashSet::new();
        if let Some(doc) = &snapshot.doc {
            let (live, left) = live_rows(coord, &key, &snapshot, doc, live_limit).await?;
            listed.extend(live.iter().map(|row| row.id.clone()));
            rows.extend(live);
            unread += left;
        }
        if ended > 0 {
            // A job retried after it died has ended before: it is listed once, as it stands
            // now (queued or running again, or its newest end).
            rows.extend(ended_jobs(coord, &key, ended, &mut listed).await?);
        }
    }
    Ok((rows, unread))
}

/// The live jobs of `key` in queue order: the window's, then the backlog's (its segments read
/// while fewer than `limit` rows are made), then the window's that wait behind the backlog.
/// Also returns how many backlog jobs were left unread.
async fn live_rows(
    coord: &Coordinator,
    key: &str,
    snapshot: &KeySnapshot,
    doc: &Doc,
    limit: usize,
) -> Result<(Vec<JobRow>, u64), ClientError> {
    let row = |ticket: &Ticket, position: Option<usize>| live_row(key, snapshot, ticket, position);
    let (mut rows, mut behind) = (Vec::new(), Vec::new());
    for ticket in doc.in_queue_order().into_iter().filter(|t| t.job.is_some()) {
        let running = ticket.state == TicketState::Held;
        let status = baton_core::apply::status_of(doc, &ticket.id);
        let position = status.filter(|_| !running).map(|s| s.position);
        if doc.behind_backlog(ticket) {
            behind.push(row(ticket, position));
        } else {
            rows.push(row(ticket, position));
        }
    }
    let mut unread = 0;
    if let Some(backlog) = &doc.backlog {
        let mut ahead = 0usize;
        for number in backlog.first..backlog.next {
            if rows.len() >= limit {
                break;
            }
            let segment = read_segment(coord, key, backlog.generation, number).await?;
            for ticket in segment.map(|s| s.tickets).unwrap_or_default() {
                if backlog.fate(&ticket).is_none() {
                    rows.push(row(&ticket, Some(doc.backlog_position(ahead))));
                }
                ahead += 1;
            }
        }
        unread = backlog.in_segments.saturating_sub(ahead as u64);
        for ticket in &backlog.tail {
            if backlog.fate(ticket).is_none() {
                rows.push(row(ticket, doc.tail_position(&ticket.id)));
            }
        }
    }
    rows.extend(behind);
    Ok((rows, unread))
}

/// The row of a live job of `key`: running, or queued at `position`.
fn live_row(key: &str, snapshot: &KeySnapshot, ticket: &Ticket, position: Option<usize>) -> JobRow {
    let job_now_ms = match snapshot.clock {
        baton_store::StoreClock::Time { now_ms, .. } => now_ms,
        baton_store::StoreClock::None => snapshot.wall_ms,
    };
    let running = ticket.state == TicketState::Held;
    let job = ticket.job.as_deref();
    JobRow {
        key: key.to_owned(),
        id: ticket.id.clone(),
        state: if running { "running" } else { "queued" }.into(),
        attempt: job.map_or(1, JobState::attempt),
        position,
        ready_at_wall_ms: job
            .and_then(|j| j.ready_at_ms)
            .filter(|&at| at > job_now_ms)
            .map(|at| snapshot.wall_ms.saturating_add(at - job_now_ms)),
        last_error: job.and_then(|j| j.last_error.clone()),
        context: ticket.context.clone(),
        submitted_wall_ms: ticket.enqueued_wall_ms,
        ended_wall_ms: None,
        fence: running.then_some(ticket.fence),
    }
}

/// Up to `limit` of `key`'s most recently ended jobs, newest first, from its history: each job
/// once (its newest end), and none already in `listed` (a job retried after it died).
async fn ended_jobs(
    coord: &Coordinator,
    key: &str,
    limit: usize,
    listed: &mut std::collections::HashSet<String>,
) -> Result<Vec<JobRow>, ClientError> {
    let mut rows = Vec::new();
    // Runs queued again have entries too: read more than `limit` entries.
    let entries = coord
        .store()
        .history_tail(key, limit.saturating_mul(4))
        .await?;
    for entry in entries {
        let Ok(finished) = baton_core::Finished::decode(&entry.bytes) else {
            continue;
        };
        let Some(run) = finished.job.as_ref().filter(|run| !run.requeued) else {
            continue;
        };
        if !listed.insert(finished.id.clone()) {
            continue;
        }
        rows.push(JobRow {
            key: key.to_owned(),
            id: finished.id.clone(),
            state: finished.outcome.to_string(),
            attempt: run.attempt,
            position: None,
            ready_at_wall_ms: None,
            last_error: finished.reason.clone(),
            context: finished.context.clone(),
            submitted_wall_ms: finished.enqueued_wall_ms,
            ended_wall_ms: Some(finished.finished_wall_ms),
            fence: None,
        });
        if rows.len() >= limit {
            break;
        }
    }
    Ok(rows)
}

/// Job `id`'s submission: its parameters exactly as submitted, if its record is there.
pub async fn params(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<Vec<u8>>, ClientError> {
    Ok(read_job_record(coord, key, id)
        .await?
        .map(|(_, params)| params))
}

/// The reports of job `id`'s runs `1..=runs` that its workers wrote, in order.
pub async fn reports(
    coord: &Coordinator,
    key: &str,
    id: &str,
    runs: u32,
) -> Result<Vec<RunReport>, ClientError> {
    let mut reports = Vec::new();
    for run in 1..=runs {
        if let Some(bytes) = coord.store().get_record(key, &run_record(id, run)).await? {
            if let Ok(report) = serde_json::from_slice(&bytes) {
                reports.push(report);
            }
        }
    }
    Ok(reports)
}

/// How many runs job `id` has had: its live state's count, or its final history entry's.
pub async fn runs(coord: &Coordinator, key: &str, id: &str) -> Result<u32, ClientError> {
    let snapshot = coord.read(key).await?;
    let live = snapshot
        .doc
        .as_ref()
        .and_then(|doc| doc.by_id(id))
        .and_then(|t| t.job.as_deref())
        .map(|job| job.runs);
    match live {
        Some(runs) => Ok(runs),
        None => Ok(final_entry(coord, key, id).await?.map_or(0, |end| end.run)),
    }
}

/// The report of job `id`'s last run, if it ran and its worker wrote one.
pub async fn last_report(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<RunReport>, ClientError> {
    let run = match standing(coord, key, id).await? {
        JobStanding::Ended(end) => end.run,
        _ => return Ok(None),
    };
    if run == 0 {
        return Ok(None);
    }
    let bytes = coord.store().get_record(key, &run_record(id, run)).await?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}
