//! The design's invariants on a single document, as checks.
//!
//! [`check`] runs on every decoded document and, in debug builds, on every document
//! [`apply`](crate::apply()) returns. The invariants that span several documents (fences of
//! successive grants increase, every ticket ends exactly once, retries are recognised) are
//! checked by the property tests in `tests/properties.rs`, which watch whole histories.

use std::collections::HashSet;

use crate::backlog::{Backlog, SEGMENT_JOBS};
use crate::doc::{Doc, Mode, TicketState};
use crate::job::queued_token_hash;
use crate::limits::{LIMIT_MAX, LIVE_TICKETS_MAX, UNSETTLED_REMEMBERED};

/// Invariants every stored document satisfies.
pub fn check(doc: &Doc) -> Result<(), String> {
    if doc.limit == 0 || doc.limit > LIMIT_MAX {
        return Err(format!("limit {} out of range", doc.limit));
    }
    if (doc.finishes as u128) < doc.finished.len() as u128 {
        return Err(format!(
            "{} finished tickets remembered of {} finishes",
            doc.finished.len(),
            doc.finishes
        ));
    }
    if let Some(unsettled) = &doc.unsettled {
        let remembered = unsettled.recent.len();
        if remembered > UNSETTLED_REMEMBERED || (unsettled.recorded as u128) < remembered as u128 {
            return Err(format!(
                "{remembered} unsettled turns remembered of {} recorded",
                unsettled.recorded
            ));
        }
    }
    if doc.tickets.len() > LIVE_TICKETS_MAX as usize {
        return Err(format!("{} live tickets", doc.tickets.len()));
    }
    // A pool's slots: each held by one ticket at most, as many as it asked.
    crate::pool::check(doc)?;
    let mut ids = HashSet::new();
    let mut hashes = HashSet::new();
    let mut arrivals = HashSet::new();
    let mut fences = HashSet::new();
    let (mut n_normal, mut n_shared) = (0u32, 0u32);
    for t in &doc.tickets {
        if !ids.insert(t.id.as_str()) {
            return Err(format!("ticket id {} twice", t.id));
        }
        if !hashes.insert(t.token_hash.as_str()) {
            return Err(format!("a token shared by two tickets ({})", t.id));
        }
        if !arrivals.insert(t.arrival) || t.arrival >= doc.next_arrival {
            return Err(format!("ticket {} has a bad arrival number", t.id));
        }
        if let Some(job) = t.job.as_deref() {
            let waiting_token = t.token_hash == queued_token_hash(&t.id);
            let bad = match t.state {
                TicketState::Queued => !waiting_token,
                TicketState::Held => waiting_token || !t.claimed || job.runs == 0,
            };
            if bad || t.mode != Mode::Normal || job.max_attempts == 0 {
                return Err(format!("job {} is inconsistent", t.id));
            }
        }
        match t.state {
            TicketState::Queued => {
                if t.fence != 0 || t.claimed {
                    return Err(format!("queued ticket {} has a fence or a claim", t.id));
                }
            }
            TicketState::Held => {
                if t.fence == 0 || t.fence > doc.fence || !fences.insert(t.fence) {
                    return Err(format!("held ticket {} has a bad fence {}", t.id, t.fence));
                }
                match t.mode {
                    Mode::Normal => n_normal += 1,
                    Mode::Shared => n_shared += 1,
                }
            }
        }
    }
    if let Some(backlog) = &doc.backlog {
        check_backlog(doc, backlog, &mut ids)?;
    }
    if n_normal > doc.limit {
        return Err(format!(
            "{n_normal} normal holders over limit {}",
            doc.limit
        ));
    }
    if n_normal > 0 && n_shared > 0 {
        return Err("shared and normal tickets hold together".into());
    }
    Ok(())
}

/// A backlog's tail holds only waiting jobs and plain waiting turns (these only in a backlog
/// marked as holding them) with fresh ids that arrived after every ticket taken in, its
/// counters in order.
fn check_backlog<'a>(
    doc: &'a Doc,
    backlog: &'a Backlog,
    ids: &mut HashSet<&'a str>,
) -> Result<(), String> {
    if backlog.is_empty() || backlog.first > backlog.next || backlog.tail.len() > SEGMENT_JOBS {
        return Err("the backlog's counters are out of order".into());
    }
    if backlog.has_segments() != (backlog.in_segments > 0) {
        return Err("the backlog's segments and their count disagree".into());
    }
    for t in &backlog.tail {
        if !ids.insert(t.id.as_str()) {
            return Err(format!("ticket id {} twice", t.id));
        }
        let fresh = t.arrival > backlog.taken_through && t.arrival < doc.next_arrival;
        if !t.fits_backlog() || !fresh || t.order.is_some() {
            return Err(format!("backlog ticket {} is inconsistent", t.id));
        }
        if t.job.is_none() && !backlog.waiters {
            return Err(format!("backlog turn {} in a backlog of jobs", t.id));
        }
    }
    Ok(())
}

/// After an apply, nothing that could be granted is left waiting: the head of the queue is
/// incompatible with the holders, held back by a freeze, or is a job, which waits for a worker's claim (so a later
/// ticket was never granted past it: no barging).
pub fn check_settled(doc: &Doc) -> Result<(), String> {
    let Some(head) = doc.queued().first().copied() else {
        return Ok(());
    };
    if head.job.is_some() || doc.behind_backlog(head) {
        return Ok(());
    }
    // A freeze holds it back (`apply` records only a freeze in force at its clock).
    if doc.held_back(head) {
        return Ok(());
    }
    if !doc.slots.is_empty() {
        return crate::pool::check_settled(doc);
    }
    let holders: Vec<_> = doc.holders().collect();
    let n_normal = holders.iter().filter(|t| t.mode == Mode::Normal).count() as u64;
    let n_shared = holders.len() as u64 - n_normal;
    let grantable = match head.mode {
        Mode::Normal => n_shared == 0 && n_normal < u64::from(doc.limit),
        Mode::Shared => n_normal == 0,
    };
    if grantable {
        return Err(format!("ticket {} waits although it could hold", head.id));
    }
    Ok(())
}
