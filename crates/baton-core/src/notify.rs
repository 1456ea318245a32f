//! Notifications: which changes of a key are events, the rules that want them, and the outbox
//! that carries them from the write that caused them to their receivers.
//!
//! An event is recorded by the very write that caused it, as a [`Note`] on the ticket it is
//! about: in the document's [`Outbox::live`] while the ticket is there (a grant, a wait), in
//! the ticket's finished history entry once it ends (its end's events, and the notes it
//! carried). So an event is never lost between a change and its delivery, and it costs no
//! write and no history entry of its own: a few bytes of the document or of an entry written
//! anyway. The document also keeps how many events there were, and for each rule with events
//! still to deliver a [`Cursor`] (the last event it has, where in the history to look, its
//! retries). Notes every rule has are forgotten, so in the usual case (a delivery right after
//! each write) a finished entry carries none and the document one grant at most; a receiver
//! that is down for days leaves its events in the history, not in the document.
//!
//! Whoever made the change, or later whoever touches the key or runs `baton notify deliver`,
//! builds the events after the cursor ([`events_after`]), posts them in order, and moves the
//! cursor with [`crate::Op::Notified`]. Delivery is therefore at least once: a deliverer that
//! dies between its POST and its acknowledgement, or two that deliver at once, post an event
//! twice, with the same [`Event::delivery_id`] so a receiver can drop the second. A receiver
//! that fails stops its rule's deliveries until a retry succeeds.
//!
//! Bounds: a rule's cursor is never more than [`OUTBOX_MAX`] events behind; further back they
//! are skipped and counted ([`Outbox::dropped`], shown by `baton status`). A rule that could
//! deliver nothing for [`GIVE_UP_MS`] skips what it has, counted too.
//!
//! Rules live in a settings document of their own ([`Settings`]), never in a key's; a process
//! caches it for at most one poll interval, so a change of rules takes effect within it.

use serde::{Deserialize, Serialize};

use crate::apply::Applied;
use crate::doc::{Doc, Outcome, Ticket, TicketState};
use crate::freeze::{Freeze, Paused, Resumed};
use crate::history::Finished;
use crate::limits::InvalidInput;

/// How far behind the key's newest event a rule's cursor may be; further back, events are
/// skipped and counted.
pub const OUTBOX_MAX: usize = 100;
/// Rules a store keeps.
pub const RULES_MAX: usize = 100;
/// The first retry of a failed delivery waits this long; each further one twice as long.
pub const RETRY_FIRST_MS: u64 = 1_000;
/// The longest wait between two tries of one event.
pub const RETRY_MAX_MS: u64 = 5 * 60 * 1000;
/// An event no try could deliver for this long (a day) is dropped and counted.
pub const GIVE_UP_MS: u64 = 24 * 3600 * 1000;
/// The format of the settings document.
pub const SETTINGS_FORMAT: u64 = 1;

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

/// One rule: post these events of keys under this prefix to this URL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Its name (unique).
    pub name: String,
    /// Keys it watches: those starting with it (empty: every key).
    pub prefix: String,
    /// Where events are posted.
    pub url: String,
    /// Which events.
    pub events: Vec<EventKind>,
    /// For `waited`: how long a ticket waits before the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

impl Rule {
    /// Whether the rule watches `key`.
    pub fn watches(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
    }

    /// Whether the rule wants `kind` events.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.events.contains(&kind)
    }

    /// Whether the URL is a Slack incoming webhook (which gets a Slack-shaped body).
    pub fn is_slack(&self) -> bool {
        self.url.starts_with("https://hooks.slack.com/") || self.url.contains("slack=1")
    }

    /// Checks a rule's input.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if !crate::limits::is_plain_name(&self.name) {
            return Err(InvalidInput(format!(
                "the rule name {:?} must be 1..=64 characters of letters, digits, -, _ and .",
                self.name
            )));
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://"))
            || self.url.len() > 2048
            || self.url.chars().any(|c| c.is_control() || c == ' ')
        {
            return Err(InvalidInput(format!(
                "--url {:?} must be an http:// or https:// URL (at most 2048 bytes)",
                self.url
            )));
        }
        if self.events.is_empty() {
            return Err(InvalidInput("--on names no event".into()));
        }
        if self.wants(EventKind::Waited) != self.after_ms.is_some() {
            return Err(InvalidInput(
                "the `waited` event needs --after DUR (how long a ticket waits before it), \
                 and --after is only for `waited`"
                    .into(),
            ));
        }
        crate::limits::check_context(&self.prefix)
            .map_err(|_| InvalidInput("the prefix is over 1 KiB".into()))
    }
}

/// The store's settings document: every notification rule and every freeze
/// ([`crate::freeze`]), read together by each writer from one cached copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// [`SETTINGS_FORMAT`].
    pub format: u64,
    /// The rules, by name.
    pub rules: Vec<Rule>,
    /// The freezes (`baton pause`), in the order they were set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freezes: Vec<Freeze>,
    /// Freezes that ended by `baton resume`, newest last, at most
    /// [`crate::freeze::FREEZES_REMEMBERED`]: `baton log` shows who paused and who resumed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Resumed>,
}

impl Settings {
    /// The rules that watch `key`.
    pub fn watching<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |rule| rule.watches(key))
    }

    /// Adds `rule`, or replaces the rule of the same name.
    pub fn add(&mut self, rule: Rule) -> Result<(), InvalidInput> {
        rule.check()?;
        self.format = SETTINGS_FORMAT;
        let full = self.rules.len() >= RULES_MAX;
        match self.rules.iter_mut().find(|r| r.name == rule.name) {
            Some(existing) => *existing = rule,
            None if full => {
                return Err(InvalidInput(format!(
                    "a store keeps at most {RULES_MAX} notification rules"
                )))
            }
            None => self.rules.push(rule),
        }
        self.rules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Adds `freeze` (one with the same target and window replaces it); forgets freezes that
    /// can never be in force again after `wall_ms`.
    pub fn pause(&mut self, freeze: Freeze, wall_ms: u64) -> Result<(), InvalidInput> {
        freeze.check()?;
        self.format = SETTINGS_FORMAT;
        self.freezes.retain(|f| !f.is_over(wall_ms));
        let same = |f: &Freeze| {
            f.target == freeze.target
                && f.from_ms == freeze.from_ms
                && f.until_ms == freeze.until_ms
                && f.weekly == freeze.weekly
        };
        self.freezes.retain(|f| !same(f));
        if self.freezes.len() >= crate::freeze::FREEZES_MAX {
            return Err(InvalidInput(format!(
                "a store keeps at most {} freezes; resume some first",
                crate::freeze::FREEZES_MAX
            )));
        }
        self.freezes.push(freeze);
        Ok(())
    }

    /// Removes every freeze whose target is `target`, remembering them as resumed `by` at
    /// `wall_ms`; returns them.
    pub fn resume(&mut self, target: &str, by: &str, wall_ms: u64) -> Vec<Freeze> {
        let (ended, kept): (Vec<Freeze>, Vec<Freeze>) = std::mem::take(&mut self.freezes)
            .into_iter()
            .partition(|f| f.target == target);
        self.freezes = kept;
        self.freezes.retain(|f| !f.is_over(wall_ms));
        for freeze in &ended {
            self.resumed.push(Resumed {
                freeze: freeze.clone(),
                by: by.to_owned(),
                at_ms: wall_ms,
            });
        }
        let excess = self
            .resumed
            .len()
            .saturating_sub(crate::freeze::FREEZES_REMEMBERED);
        self.resumed.drain(..excess);
        ended
    }

    /// Removes the rule `name`; whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.rules.len();
        self.rules.retain(|rule| rule.name != name);
        self.rules.len() != before
    }

    /// Encodes the document.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes the document.
    pub fn decode(bytes: &[u8]) -> Result<Settings, InvalidInput> {
        let settings: Settings = serde_json::from_slice(bytes).map_err(|e| {
            InvalidInput(format!(
                "the store's settings (notification rules, freezes) are corrupt: {e}"
            ))
        })?;
        if settings.format > SETTINGS_FORMAT {
            return Err(InvalidInput(
                "the store's settings were written by a newer baton; upgrade baton".into(),
            ));
        }
        Ok(settings)
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
/// document the note is in the outbox ([`Outbox::live`]); when the ticket ends, its notes move
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

/// Key notes an outbox keeps undelivered; older ones are dropped and counted.
pub const KEY_NOTES_MAX: usize = 16;

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

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Where one rule stands in a key's events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The rule.
    pub rule: String,
    /// The last event delivered to it, or skipped (its seq).
    pub through: u64,
    /// A hint for the deliverer: the rule's next event is at this position of the key's
    /// history or later (positions count the entries this key's writes appended,
    /// [`Outbox::appended`]), so it reads the tail from there.
    pub from: u64,
    /// Failed tries of its next event.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tries: u32,
    /// Not to be tried again before this (wall ms).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub next_wall_ms: u64,
    /// Since when its tries fail (wall ms; 0: they do not).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub failing_since_wall_ms: u64,
}

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
    /// failed for [`GIVE_UP_MS`].
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

/// What a deliverer did for one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The rule.
    pub rule: String,
    /// The last event it now has (delivered, or not for it), by seq.
    pub through: u64,
    /// Where its next event can be found ([`Cursor::from`]); 0: as before.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub from: u64,
    /// The delivery of the event after `through` failed: try again after a backoff.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// The rule no longer exists: forget its cursor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

/// Applies a deliverer's report: the rule's cursor moves on (and goes once it has every
/// event), a failure backs off (1 s doubling to [`RETRY_MAX_MS`]), and a rule that has failed
/// for [`GIVE_UP_MS`] skips what it has, counted as dropped.
pub fn acknowledge(outbox: &mut Outbox, delivered: &Delivered, wall_ms: u64) {
    move_cursor(outbox, delivered, wall_ms);
    forget_delivered(outbox, &mut []);
}

fn move_cursor(outbox: &mut Outbox, delivered: &Delivered, wall_ms: u64) {
    let last = outbox.last_seq;
    let Some(index) = outbox.cursors.iter().position(|c| c.rule == delivered.rule) else {
        return;
    };
    if delivered.gone {
        outbox.cursors.remove(index);
        return;
    }
    let cursor = &mut outbox.cursors[index];
    cursor.through = cursor.through.max(delivered.through.min(last));
    cursor.from = cursor.from.max(delivered.from);
    if delivered.failed {
        cursor.tries = cursor.tries.saturating_add(1);
        let backoff = RETRY_FIRST_MS
            .saturating_mul(1u64 << cursor.tries.saturating_sub(1).min(20))
            .min(RETRY_MAX_MS);
        cursor.next_wall_ms = wall_ms.saturating_add(backoff);
        if cursor.failing_since_wall_ms == 0 {
            cursor.failing_since_wall_ms = wall_ms;
        }
        if wall_ms >= cursor.failing_since_wall_ms.saturating_add(GIVE_UP_MS) {
            outbox.dropped += last - cursor.through;
            cursor.through = last;
        }
    } else {
        cursor.tries = 0;
        cursor.next_wall_ms = 0;
        cursor.failing_since_wall_ms = 0;
    }
    if outbox.cursors[index].through >= last {
        outbox.cursors.remove(index);
    }
}

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
    let mut failures = before.map_or(0, |d| d.summary.consecutive_failures);
    for (i, finished) in applied.finished.iter_mut().enumerate() {
        let (its, others): (Vec<LiveNote>, Vec<LiveNote>) = std::mem::take(&mut outbox.live)
            .into_iter()
            .partition(|live| live.ticket == finished.id);
        outbox.live = others;
        finished
            .events
            .extend(its.into_iter().map(|live| live.note));
        for kind in end_kinds(finished, &mut failures) {
            let at = finished.finished_wall_ms.max(wall_ms);
            if let Some(note) = note(&mut outbox, kind, rules, at) {
                events.push((base + i as u64, Event::of_finished(finished, &note)));
                finished.events.push(note);
            }
        }
    }
    for (id, _fence) in &applied.granted {
        if let Some(ticket) = applied.doc.tickets.iter().find(|t| t.id == *id) {
            if let Some(note) = note(&mut outbox, EventKind::Granted, rules, wall_ms) {
                events.push((after, Event::of_ticket(ticket, &note)));
                outbox.live.push(LiveNote {
                    ticket: id.clone(),
                    note,
                });
            }
        }
    }
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
    // Notes of a ticket that left the document without a finished entry (none does) could
    // never be delivered: counted as dropped rather than kept for ever.
    let tickets = &applied.doc.tickets;
    let orphans = outbox.live.len();
    outbox
        .live
        .retain(|live| tickets.iter().any(|t| t.id == live.ticket));
    outbox.dropped += (orphans - outbox.live.len()) as u64;
    // Tickets that ended need no `waited` memory.
    outbox
        .waited
        .retain(|id| tickets.iter().any(|t| t.id == *id));
    // New events must be written even by an operation that changed nothing else (a tick that
    // raises `waited`).
    applied.changed |= !events.is_empty();
    applied.doc.outbox = Some(outbox);
    events.into_iter().map(|(_, event)| event).collect()
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

/// Gives each rule that had nothing to deliver a cursor at its first new event, and marks
/// where some events are (for cursors the bound moves on).
fn follow_new(outbox: &mut Outbox, events: &[(u64, Event)]) {
    for (position, event) in events {
        for rule in &event.rules {
            if !outbox.cursors.iter().any(|c| c.rule == *rule) {
                outbox.cursors.push(Cursor {
                    rule: rule.clone(),
                    through: event.seq - 1,
                    from: *position,
                    tries: 0,
                    next_wall_ms: 0,
                    failing_since_wall_ms: 0,
                });
            }
        }
        let due = outbox
            .marks
            .last()
            .is_none_or(|(seq, _)| event.seq >= seq + MARK_EVERY);
        if due {
            outbox.marks.push((event.seq, *position));
        }
    }
    let excess = outbox.marks.len().saturating_sub(MARKS_KEPT);
    outbox.marks.drain(..excess);
}

/// A cursor too far behind skips the oldest: the bound on what a down receiver costs.
fn bound(outbox: &mut Outbox) {
    let floor = outbox.last_seq.saturating_sub(OUTBOX_MAX as u64);
    for cursor in &mut outbox.cursors {
        if cursor.through < floor {
            outbox.dropped += floor - cursor.through;
            cursor.through = floor;
            // Its next event is floor + 1: at or after the last mark not past it.
            let mark = outbox.marks.iter().rev().find(|(seq, _)| *seq <= floor + 1);
            if let Some((_, position)) = mark {
                cursor.from = cursor.from.max(*position);
            }
        }
    }
}

/// Drops the notes every rule has got (or skipped), from the outbox and from the finished
/// entries about to be written: in the usual case, where a delivery follows each write, a
/// note lives in the document from one write to the next, and no finished entry carries one.
fn forget_delivered(outbox: &mut Outbox, finished: &mut [Finished]) {
    let through = outbox.cursors.iter().map(|c| c.through).min();
    let delivered = |note: &Note| through.is_none_or(|through| note.seq <= through);
    outbox.live.retain(|live| !delivered(&live.note));
    outbox.key_notes.retain(|key| !delivered(&key.note));
    for entry in finished {
        entry.events.retain(|note| !delivered(note));
    }
}

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
