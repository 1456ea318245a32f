//! What a key's document keeps of its events ([`Outbox`]), and how a deliverer reads the events
//! after a cursor back from it and the key's history ([`events_after`]).

use serde::{Deserialize, Serialize};

use super::{is_zero_u64, Cursor, Event, KeyNote, LiveNote, Note};
use crate::doc::Doc;
use crate::history::Finished;

/// How far behind the key's newest event a rule's cursor may be; further back, events are
/// skipped and counted.
pub const OUTBOX_MAX: usize = 100;

/// Key notes an outbox keeps undelivered; older ones are dropped and counted.
pub const KEY_NOTES_MAX: usize = 16;

/// What a key's document keeps of its events: their count, and a cursor per rule that has
/// events to deliver. The events themselves are in the key's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    /// The number of the last event recorded (0: none yet).
    pub last_seq: u64,
    /// History entries this key's writes appended since it has had an outbox: events and
    /// finished tickets alike. Positions in [`Cursor::from`] count these.
    pub appended: u64,
    /// Rules with events to deliver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cursors: Vec<Cursor>,
    /// Events skipped undelivered: a cursor more than [`OUTBOX_MAX`] behind, or a rule that
    /// failed for [`super::GIVE_UP_MS`].
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub dropped: u64,
    /// Tickets whose `waited` event is raised (so it is raised once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waited: Vec<String>,
    /// Events about tickets still in the document that some rule has yet to get: a grant, a
    /// wait. They move into the ticket's finished entry when it ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<LiveNote>,
    /// Where some recent events are in the history: (seq, position), one every
    /// [`MARK_EVERY`] events, the last [`MARKS_KEPT`]. A cursor the bound moves on takes its
    /// position hint from them, so a deliverer never reads the history back to where a
    /// receiver went down.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<(u64, u64)>,
    /// Events about the key itself some rule has yet to get: a freeze began or ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_notes: Vec<KeyNote>,
}

/// Events between two position marks.
pub const MARK_EVERY: u64 = 16;
/// Position marks kept (they span more than [`OUTBOX_MAX`] events).
pub const MARKS_KEPT: usize = 8;

impl Outbox {
    /// Whether a delivery now would post anything: a rule has events after its cursor and is
    /// not backing off.
    pub fn deliverable(&self, wall_ms: u64) -> bool {
        self.cursors
            .iter()
            .any(|c| c.through < self.last_seq && c.next_wall_ms <= wall_ms)
    }

    /// Events not yet delivered to some rule (at most, counting those of other rules between).
    pub fn undelivered(&self) -> u64 {
        self.cursors
            .iter()
            .map(|c| self.last_seq - c.through.min(self.last_seq))
            .max()
            .unwrap_or(0)
    }

    /// How many of the key's newest history entries a deliverer reads to find every event
    /// after the cursors (a hint: it reads further back if one is missing).
    pub fn tail_to_read(&self) -> u64 {
        let from = self.cursors.iter().map(|c| c.from).min();
        from.map_or(0, |from| self.appended.saturating_sub(from))
    }
}

/// Drops the notes every rule has got (or skipped), from the outbox and from the finished
/// entries about to be written: in the usual case, where a delivery follows each write, a
/// note lives in the document from one write to the next, and no finished entry carries one.
pub(super) fn forget_delivered(outbox: &mut Outbox, finished: &mut [Finished]) {
    let through = outbox.cursors.iter().map(|c| c.through).min();
    let delivered = |note: &Note| through.is_none_or(|through| note.seq <= through);
    outbox.live.retain(|live| !delivered(&live.note));
    outbox.key_notes.retain(|key| !delivered(&key.note));
    for entry in finished {
        entry.events.retain(|note| !delivered(note));
    }
}

/// Whether the outbox's live notes hold every event after `after`: then a deliverer needs no
/// history at all (the usual case: a grant delivered right after the write that made it).
pub fn live_holds_all_after(outbox: &Outbox, after: u64) -> bool {
    (after + 1..=outbox.last_seq).all(|seq| {
        outbox.live.iter().any(|l| l.note.seq == seq)
            || outbox.key_notes.iter().any(|k| k.note.seq == seq)
    })
}

/// The key's events after `after`, oldest first, each with a position at or before the
/// history entry that holds it: those of the live notes of `doc`, and those in `tail`, the
/// finished entries of the history's tail with their positions.
pub fn events_after(doc: &Doc, tail: &[(u64, Finished)], after: u64) -> Vec<(u64, Event)> {
    let Some(outbox) = &doc.outbox else {
        return Vec::new();
    };
    let mut events: Vec<(u64, Event)> = Vec::new();
    for (position, finished) in tail {
        for note in finished.events.iter().filter(|n| n.seq > after) {
            events.push((*position, Event::of_finished(finished, note)));
        }
    }
    for live in outbox.live.iter().filter(|l| l.note.seq > after) {
        if let Some(ticket) = doc.tickets.iter().find(|t| t.id == live.ticket) {
            events.push((outbox.appended, Event::of_ticket(ticket, &live.note)));
        }
    }
    for key in outbox.key_notes.iter().filter(|k| k.note.seq > after) {
        events.push((outbox.appended, Event::of_freeze(&key.paused, &key.note)));
    }
    events.sort_by_key(|(_, event)| event.seq);
    events.dedup_by_key(|(_, event)| event.seq);
    events
}
