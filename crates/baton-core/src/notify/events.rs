//! The events a receiver gets ([`Event`]) and the notes a key keeps of them ([`Note`]): what
//! kinds there are, and how an event is built from a note and the ticket (or freeze) it is
//! about.

use serde::{Deserialize, Serialize};

use crate::doc::{Outcome, Ticket};
use crate::freeze::Paused;
use crate::history::Finished;
use crate::limits::InvalidInput;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A ticket was granted the key.
    Granted,
    /// A holder released the key (the event carries its outcome).
    Released,
    /// A holder (or a job's run) failed.
    Failed,
    /// A holder succeeded after one or more failures in a row on the key.
    Recovered,
    /// A holder's lease ran out: the key went on without it.
    Expired,
    /// A queued ticket was squashed by a newer one (`--supersede`).
    Superseded,
    /// A ticket was cancelled, or a holder force-released, by an operator.
    Cancelled,
    /// A job spent its attempts, or a run-once key its attempts.
    Dead,
    /// A ticket has waited longer than the rule's `after`.
    Waited,
    /// A freeze began to hold the key back (`baton pause`, or a scheduled window opening).
    Paused,
    /// The freeze ended (`baton resume`, or its window closing).
    Resumed,
}

impl EventKind {
    /// Every kind, in the order help texts list them.
    pub const ALL: [EventKind; 11] = [
        EventKind::Granted,
        EventKind::Released,
        EventKind::Failed,
        EventKind::Recovered,
        EventKind::Expired,
        EventKind::Superseded,
        EventKind::Cancelled,
        EventKind::Dead,
        EventKind::Waited,
        EventKind::Paused,
        EventKind::Resumed,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Granted => "granted",
            EventKind::Released => "released",
            EventKind::Failed => "failed",
            EventKind::Recovered => "recovered",
            EventKind::Expired => "expired",
            EventKind::Superseded => "superseded",
            EventKind::Cancelled => "cancelled",
            EventKind::Dead => "dead",
            EventKind::Waited => "waited",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<EventKind, InvalidInput> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                InvalidInput(format!(
                    "unknown event {name:?}; events are {}, or all",
                    names.join(", ")
                ))
            })
    }
}

/// One event as a receiver gets it: what happened to which ticket. Built from a [`Note`] and
/// the ticket it is about ([`Event::of_ticket`], [`Event::of_finished`]); never stored as such.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its number among the key's events (from 1).
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// The rules it is for.
    pub rules: Vec<String>,
    /// The ticket (or job) id.
    pub id: String,
    /// Whether it is a job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub job: bool,
    /// How the ticket ended, for events of an end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Forced by an operator.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    /// Why, in words (who cancelled, what expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The ticket's context.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    /// The fence it held under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// When it was enqueued (wall ms).
    pub enqueued_wall_ms: u64,
    /// When it was granted (wall ms), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_wall_ms: Option<u64>,
    /// When the event happened (wall ms of the client that recorded it).
    pub at_wall_ms: u64,
    /// For `paused`: when the freeze ends by itself (none: at a resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_wall_ms: Option<u64>,
}

/// An event as the key keeps it: a note on the ticket it is about. While the ticket is in the
/// document the note is in the outbox ([`super::Outbox::live`]); when the ticket ends, its notes move
/// into its finished entry in the history ([`Finished::events`]), where its end's events are
/// written too. So an event costs a few bytes of a write that happens anyway, never a write or
/// a history entry of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Its number among the key's events (from 1).
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// The rules it is for.
    pub rules: Vec<String>,
    /// When (wall ms of the client that recorded it).
    pub at: u64,
}

/// A note about the key itself (a freeze beginning or ending), kept in the outbox until every
/// rule has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyNote {
    /// The freeze it is about.
    pub paused: Paused,
    /// The note.
    pub note: Note,
}

/// A note about a ticket still in the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveNote {
    /// The ticket's id.
    pub ticket: String,
    /// The note.
    pub note: Note,
}

impl Event {
    /// The id every delivery of this event carries (the same for each retry and each
    /// deliverer), so a receiver can drop duplicates.
    pub fn delivery_id(&self, key: &str, rule: &str) -> String {
        // The key's events are numbered from its first; the enqueue time of the ticket tells a
        // key that was recreated apart.
        format!("{key}#{}.{}.{rule}", self.seq, self.enqueued_wall_ms)
    }

    /// The event `note` says of `ticket`, which is in the document (granted, or waiting).
    pub fn of_ticket(ticket: &Ticket, note: &Note) -> Event {
        let granted = note.kind == EventKind::Granted && ticket.fence > 0;
        Event {
            seq: note.seq,
            kind: note.kind,
            rules: note.rules.clone(),
            id: ticket.id.clone(),
            job: ticket.job.is_some(),
            outcome: None,
            forced: false,
            reason: waited_reason(note, ticket.enqueued_wall_ms),
            context: ticket.context.clone(),
            fence: granted.then_some(ticket.fence),
            enqueued_wall_ms: ticket.enqueued_wall_ms,
            granted_wall_ms: granted.then_some(ticket.granted_wall_ms),
            at_wall_ms: note.at,
            until_wall_ms: None,
        }
    }

    /// The event `note` says of the key's freeze `paused` (it began, or it ended): its target
    /// in place of a ticket, who paused it as the context, since when as the enqueue time.
    pub fn of_freeze(paused: &Paused, note: &Note) -> Event {
        Event {
            seq: note.seq,
            kind: note.kind,
            rules: note.rules.clone(),
            id: paused.target.clone(),
            job: false,
            outcome: None,
            forced: false,
            reason: Some(paused.reason.clone()),
            context: paused.by.clone(),
            fence: None,
            enqueued_wall_ms: paused.since_ms,
            granted_wall_ms: None,
            at_wall_ms: note.at,
            until_wall_ms: paused.until_ms.filter(|_| note.kind == EventKind::Paused),
        }
    }

    /// The event `note` says of the finished ticket `finished`: one of its end, or one noted
    /// while it lived.
    pub fn of_finished(finished: &Finished, note: &Note) -> Event {
        let end = !matches!(note.kind, EventKind::Granted | EventKind::Waited);
        let held = note.kind != EventKind::Waited;
        Event {
            seq: note.seq,
            kind: note.kind,
            rules: note.rules.clone(),
            id: finished.id.clone(),
            job: finished.job.is_some(),
            outcome: end.then_some(finished.outcome),
            forced: end && finished.forced,
            reason: if end {
                finished.reason.clone()
            } else {
                waited_reason(note, finished.enqueued_wall_ms)
            },
            context: finished.context.clone(),
            fence: finished.fence.filter(|_| held),
            enqueued_wall_ms: finished.enqueued_wall_ms,
            granted_wall_ms: finished.granted_wall_ms.filter(|_| held),
            at_wall_ms: note.at,
            until_wall_ms: None,
        }
    }
}

fn waited_reason(note: &Note, enqueued_wall_ms: u64) -> Option<String> {
    (note.kind == EventKind::Waited).then(|| {
        let waited_s = note.at.saturating_sub(enqueued_wall_ms) / 1000;
        format!("waiting for {waited_s} s")
    })
}
