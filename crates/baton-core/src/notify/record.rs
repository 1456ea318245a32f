//! Recording events: the write that changes a key notes the events its change is, for the
//! rules that want them, in the same write ([`record`]).

use super::cursor::{bound, follow_new};
use super::outbox::forget_delivered;
use super::{Event, EventKind, KeyNote, LiveNote, Note, Outbox, Rule, KEY_NOTES_MAX};
use crate::apply::Applied;
use crate::doc::{Doc, Outcome, Ticket, TicketState};
use crate::freeze::Paused;
use crate::history::Finished;

/// Records the events of the change from `before` to `applied` that `rules` (those watching
/// the key) want, at `wall_ms`, and the `waited` events of tickets that have now waited longer
/// than a rule's `after`: the notes of a ticket that ends go into its finished entry (with
/// those noted while it lived), those of a ticket that stays into the outbox. Returns the new
/// events, and moves `applied.doc`'s outbox on. Does nothing without rules (no outbox on a key
/// nobody watches).
pub fn record(
    before: Option<&Doc>,
    applied: &mut Applied,
    rules: &[&Rule],
    wall_ms: u64,
) -> Vec<Event> {
    if rules.is_empty() && applied.doc.outbox.is_none() {
        return Vec::new();
    }
    let mut outbox = applied.doc.outbox.take().unwrap_or_default();
    // Positions: this write appends its finished tickets at `base`, `base + 1`, ...; a ticket
    // that stays ends in a later write, at `after` or further on.
    let base = outbox.appended;
    let after = base + applied.finished.len() as u64;
    let mut events: Vec<(u64, Event)> = Vec::new();
    let failures = before.map_or(0, |d| d.summary.consecutive_failures);
    let ends = &mut applied.finished;
    note_ends(
        &mut outbox,
        &mut events,
        ends,
        rules,
        failures,
        (wall_ms, base),
    );
    note_grants(&mut outbox, &mut events, applied, rules, (wall_ms, after));
    raise_waited(
        &mut outbox,
        &mut events,
        &applied.doc,
        rules,
        wall_ms,
        after,
    );
    note_freeze(
        &mut outbox,
        &mut events,
        before.and_then(|d| d.paused.as_ref()),
        applied.doc.paused.as_ref(),
        rules,
        (wall_ms, after),
    );
    follow_new(&mut outbox, &events);
    outbox.appended = after;
    bound(&mut outbox);
    forget_delivered(&mut outbox, &mut applied.finished);
    forget_gone(&mut outbox, &applied.doc.tickets);
    // New events must be written even by an operation that changed nothing else (a tick that
    // raises `waited`).
    applied.changed |= !events.is_empty();
    applied.doc.outbox = Some(outbox);
    events.into_iter().map(|(_, event)| event).collect()
}

/// Records the events of the tickets that ended in this write, appended to the history from
/// position `base` on: the notes each carried while it lived move into its finished entry,
/// then come its end's events (`failures`: the key's failures in a row before them, for
/// `recovered`).
fn note_ends(
    outbox: &mut Outbox,
    events: &mut Vec<(u64, Event)>,
    ends: &mut [Finished],
    rules: &[&Rule],
    mut failures: u32,
    (wall_ms, base): (u64, u64),
) {
    for (i, finished) in ends.iter_mut().enumerate() {
        let (its, others): (Vec<LiveNote>, Vec<LiveNote>) = std::mem::take(&mut outbox.live)
            .into_iter()
            .partition(|live| live.ticket == finished.id);
        outbox.live = others;
        finished
            .events
            .extend(its.into_iter().map(|live| live.note));
        for kind in end_kinds(finished, &mut failures) {
            let at = finished.finished_wall_ms.max(wall_ms);
            if let Some(note) = note(outbox, kind, rules, at) {
                events.push((base + i as u64, Event::of_finished(finished, &note)));
                finished.events.push(note);
            }
        }
    }
}

/// Records a `granted` event for each grant of this write, kept in the outbox while its
/// ticket lives (which ends at history position `after` or further on).
fn note_grants(
    outbox: &mut Outbox,
    events: &mut Vec<(u64, Event)>,
    applied: &Applied,
    rules: &[&Rule],
    (wall_ms, after): (u64, u64),
) {
    for (id, _fence) in &applied.granted {
        if let Some(ticket) = applied.doc.tickets.iter().find(|t| t.id == *id) {
            if let Some(note) = note(outbox, EventKind::Granted, rules, wall_ms) {
                events.push((after, Event::of_ticket(ticket, &note)));
                outbox.live.push(LiveNote {
                    ticket: id.clone(),
                    note,
                });
            }
        }
    }
}

/// Forgets what the outbox kept of tickets no longer in the document (`tickets`).
fn forget_gone(outbox: &mut Outbox, tickets: &[Ticket]) {
    // Notes of a ticket that left the document without a finished entry (none does) could
    // never be delivered: counted as dropped rather than kept for ever.
    let orphans = outbox.live.len();
    outbox
        .live
        .retain(|live| tickets.iter().any(|t| t.id == live.ticket));
    outbox.dropped += (orphans - outbox.live.len()) as u64;
    // Tickets that ended need no `waited` memory.
    outbox
        .waited
        .retain(|id| tickets.iter().any(|t| t.id == *id));
}

/// Notes `resumed` and `paused` when the freeze the document records changed from `was` to
/// `now` (another freeze, or another stretch of a weekly one, is a resume and a pause). `at`:
/// the wall time and the history position of the events.
fn note_freeze(
    outbox: &mut Outbox,
    events: &mut Vec<(u64, Event)>,
    was: Option<&Paused>,
    now: Option<&Paused>,
    rules: &[&Rule],
    (wall_ms, position): (u64, u64),
) {
    let stretch = |p: &Paused| (p.target.clone(), p.since_ms);
    if was.map(stretch) == now.map(stretch) {
        return;
    }
    let changes = [(EventKind::Resumed, was), (EventKind::Paused, now)];
    for (kind, paused) in changes {
        let Some(paused) = paused else { continue };
        let Some(note) = note(outbox, kind, rules, wall_ms) else {
            continue;
        };
        events.push((position, Event::of_freeze(paused, &note)));
        outbox.key_notes.push(KeyNote {
            paused: paused.clone(),
            note,
        });
    }
    let excess = outbox.key_notes.len().saturating_sub(KEY_NOTES_MAX);
    outbox.key_notes.drain(..excess);
    outbox.dropped += excess as u64;
}

/// Numbers an event of `kind` for the rules that want it; `None` when none does.
fn note(outbox: &mut Outbox, kind: EventKind, rules: &[&Rule], at: u64) -> Option<Note> {
    let wanting: Vec<String> = rules
        .iter()
        .filter(|rule| rule.wants(kind))
        .map(|rule| rule.name.clone())
        .collect();
    if wanting.is_empty() {
        return None;
    }
    outbox.last_seq += 1;
    Some(Note {
        seq: outbox.last_seq,
        kind,
        rules: wanting,
        at,
    })
}

/// Raises `waited` once for each queued ticket that has now waited longer than a rule's
/// `after`, kept in the outbox while the ticket lives.
fn raise_waited(
    outbox: &mut Outbox,
    events: &mut Vec<(u64, Event)>,
    doc: &Doc,
    rules: &[&Rule],
    wall_ms: u64,
    position: u64,
) {
    let waiting_rules: Vec<&Rule> = rules
        .iter()
        .copied()
        .filter(|r| r.wants(EventKind::Waited))
        .collect();
    if waiting_rules.is_empty() {
        return;
    }
    for ticket in doc
        .tickets
        .iter()
        .filter(|t| t.state == TicketState::Queued)
    {
        if outbox.waited.contains(&ticket.id) {
            continue;
        }
        let waited_ms = wall_ms.saturating_sub(ticket.enqueued_wall_ms);
        let due: Vec<&Rule> = waiting_rules
            .iter()
            .copied()
            .filter(|r| r.after_ms.is_some_and(|after| waited_ms >= after))
            .collect();
        let Some(note) = note(outbox, EventKind::Waited, &due, wall_ms) else {
            continue;
        };
        outbox.waited.push(ticket.id.clone());
        events.push((position, Event::of_ticket(ticket, &note)));
        outbox.live.push(LiveNote {
            ticket: ticket.id.clone(),
            note,
        });
    }
}

/// The kinds of event a ticket's end is, in order; counts the key's failures in a row (for
/// `recovered`).
fn end_kinds(finished: &Finished, failures: &mut u32) -> Vec<EventKind> {
    let held = finished.granted_wall_ms.is_some();
    let mut kinds = Vec::new();
    match finished.outcome {
        Outcome::Succeeded if held => {
            kinds.push(EventKind::Released);
            if *failures > 0 {
                kinds.push(EventKind::Recovered);
            }
            *failures = 0;
        }
        Outcome::Failed => {
            if held {
                kinds.push(EventKind::Released);
            }
            kinds.push(EventKind::Failed);
            *failures += 1;
        }
        Outcome::Expired if held => {
            kinds.push(EventKind::Expired);
            *failures += 1;
        }
        Outcome::Cancelled if held && !finished.forced => kinds.push(EventKind::Released),
        Outcome::Cancelled => kinds.push(EventKind::Cancelled),
        Outcome::Superseded => kinds.push(EventKind::Superseded),
        Outcome::Dead => {
            kinds.push(EventKind::Dead);
            *failures += 1;
        }
        _ => {}
    }
    if finished.once.as_ref().is_some_and(|o| o.dead) {
        kinds.push(EventKind::Dead);
    }
    kinds
}
