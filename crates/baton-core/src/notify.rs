//! Notifications: which changes of a key are events, the rules that want them, and the outbox
//! that carries them from the write that caused them to their receivers.
//!
//! An event is recorded in the key's document by the very write that caused it (the outbox,
//! [`Outbox`]), so it is never lost between a change and its delivery: whoever made the change,
//! or later whoever touches the key or runs `baton notify deliver`, posts it and then
//! acknowledges it with [`crate::Op::Notified`], which removes it. Delivery is therefore at
//! least once: a deliverer that dies between its POST and its acknowledgement, or two that
//! deliver at once, post an event twice, with the same [`Event::delivery_id`] so a receiver can
//! drop the second. Events are delivered in order per key and rule: a receiver that fails stops
//! its rule's deliveries until a retry succeeds ([`Outbox::due`]).
//!
//! The outbox is bounded ([`OUTBOX_MAX`]): beyond it the oldest event is dropped and counted
//! ([`Outbox::dropped`], shown by `baton status`), so a receiver that is down for days cannot
//! grow a key's document without bound. An event nobody could deliver for [`GIVE_UP_MS`] is
//! dropped and counted too.
//!
//! Rules live in a settings document of their own ([`Settings`]), never in a key's; a process
//! caches it for at most one poll interval, so a change of rules takes effect within it.

use serde::{Deserialize, Serialize};

use crate::apply::Applied;
use crate::doc::{Doc, Outcome, TicketState};
use crate::limits::InvalidInput;

/// Undelivered events a key keeps; beyond it the oldest is dropped and counted.
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
}

impl EventKind {
    /// Every kind, in the order help texts list them.
    pub const ALL: [EventKind; 9] = [
        EventKind::Granted,
        EventKind::Released,
        EventKind::Failed,
        EventKind::Recovered,
        EventKind::Expired,
        EventKind::Superseded,
        EventKind::Cancelled,
        EventKind::Dead,
        EventKind::Waited,
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
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
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

/// The settings document: every rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// [`SETTINGS_FORMAT`].
    pub format: u64,
    /// The rules, by name.
    pub rules: Vec<Rule>,
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
        let settings: Settings = serde_json::from_slice(bytes)
            .map_err(|e| InvalidInput(format!("the notification settings are corrupt: {e}")))?;
        if settings.format > SETTINGS_FORMAT {
            return Err(InvalidInput(
                "the notification settings were written by a newer baton; upgrade baton".into(),
            ));
        }
        Ok(settings)
    }
}

/// One event, as the outbox keeps it until every rule it is for has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its number within the key's events (from 1).
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
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
    /// The rules that have not had it yet.
    pub pending: Vec<String>,
    /// Failed tries so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tries: u32,
    /// Not to be tried again before this (wall ms; 0: now).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub next_wall_ms: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Event {
    /// The id every delivery of this event carries (the same for each retry and each
    /// deliverer), so a receiver can drop duplicates.
    pub fn delivery_id(&self, key: &str, rule: &str) -> String {
        // The key's events are numbered from its first; the enqueue time of the ticket tells a
        // key that was recreated apart.
        format!("{key}#{}.{}.{rule}", self.seq, self.enqueued_wall_ms)
    }
}

/// A key's undelivered events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    /// The number the next event gets.
    pub next_seq: u64,
    /// Undelivered events, oldest first.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Events dropped undelivered: over [`OUTBOX_MAX`], or undeliverable for [`GIVE_UP_MS`].
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub dropped: u64,
    /// Tickets whose `waited` event is raised (so it is raised once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waited: Vec<String>,
}

impl Outbox {
    /// The events to try now for `rule`, in order: from its oldest pending event, as long as
    /// each is due (a failed event holds back the later ones: order per key and rule).
    pub fn due<'a>(&'a self, rule: &'a str, wall_ms: u64) -> impl Iterator<Item = &'a Event> + 'a {
        self.events
            .iter()
            .filter(move |e| e.pending.iter().any(|r| r == rule))
            .take_while(move |e| e.next_wall_ms <= wall_ms)
    }

    /// Whether a delivery now would post anything: some rule's oldest pending event is due
    /// (a rule held back by a failed event waits for its backoff, whatever came after it).
    pub fn deliverable(&self, wall_ms: u64) -> bool {
        let mut heads: Vec<&str> = Vec::new();
        for event in &self.events {
            for rule in &event.pending {
                if !heads.contains(&rule.as_str()) {
                    if event.next_wall_ms <= wall_ms {
                        return true;
                    }
                    heads.push(rule);
                }
            }
        }
        false
    }

    /// When the next event is due (wall ms), if any waits.
    pub fn next_due_wall_ms(&self) -> Option<u64> {
        self.events.iter().map(|e| e.next_wall_ms).min()
    }

    fn push(&mut self, mut event: Event) {
        self.next_seq = self.next_seq.max(1);
        event.seq = self.next_seq;
        self.next_seq += 1;
        self.events.push(event);
        let excess = self.events.len().saturating_sub(OUTBOX_MAX);
        if excess > 0 {
            self.events.drain(..excess);
            self.dropped += excess as u64;
        }
    }
}

/// What a deliverer did for one rule: delivered these events, and failed at that one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The rule.
    pub rule: String,
    /// Events delivered (their seqs).
    pub seqs: Vec<u64>,
    /// The event whose delivery failed (its seq), after which the rule's later ones wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
}

/// Applies a deliverer's report to the outbox: delivered events lose the rule (and leave when
/// no rule waits for them); a failed one is tried again after its backoff, or dropped and
/// counted once it has failed for [`GIVE_UP_MS`].
pub fn acknowledge(outbox: &mut Outbox, delivered: &Delivered, wall_ms: u64) {
    for event in &mut outbox.events {
        if delivered.seqs.contains(&event.seq) {
            event.pending.retain(|r| *r != delivered.rule);
        }
        if delivered.failed == Some(event.seq) && event.pending.contains(&delivered.rule) {
            event.tries = event.tries.saturating_add(1);
            let backoff = RETRY_FIRST_MS
                .saturating_mul(1u64 << event.tries.saturating_sub(1).min(20))
                .min(RETRY_MAX_MS);
            event.next_wall_ms = wall_ms.saturating_add(backoff);
        }
    }
    outbox.events.retain(|e| !e.pending.is_empty());
    let before = outbox.events.len();
    outbox
        .events
        .retain(|e| e.tries == 0 || wall_ms < e.at_wall_ms.saturating_add(GIVE_UP_MS));
    outbox.dropped += (before - outbox.events.len()) as u64;
}

/// A change's events, before the rules decide who gets them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Draft {
    kind: EventKind,
    event: Event,
}

/// Records in `applied.doc`'s outbox the events of the change from `before` to `applied` that
/// `rules` (those watching the key) want, at `wall_ms`, and the `waited` events of tickets that
/// have now waited longer than a rule's `after`. Does nothing without rules (no outbox grows on
/// a key nobody watches).
pub fn record(before: Option<&Doc>, applied: &mut Applied, rules: &[&Rule], wall_ms: u64) {
    if rules.is_empty() && applied.doc.outbox.is_none() {
        return;
    }
    let drafts = events_of(before, applied, wall_ms);
    let mut outbox = applied.doc.outbox.take().unwrap_or_default();
    for draft in drafts {
        push_for(&mut outbox, draft, rules);
    }
    raise_waited(&mut outbox, &applied.doc, rules, wall_ms);
    // Tickets that ended need no `waited` memory.
    outbox
        .waited
        .retain(|id| applied.doc.tickets.iter().any(|t| t.id == *id));
    let empty = outbox.events.is_empty() && outbox.dropped == 0 && outbox.waited.is_empty();
    applied.doc.outbox = (!empty || outbox.next_seq > 0).then_some(outbox);
    if !applied.changed && applied.doc.outbox.as_ref() != before.and_then(|d| d.outbox.as_ref()) {
        applied.changed = true;
    }
}

fn push_for(outbox: &mut Outbox, draft: Draft, rules: &[&Rule]) {
    let pending: Vec<String> = rules
        .iter()
        .filter(|rule| rule.wants(draft.kind))
        .map(|rule| rule.name.clone())
        .collect();
    if pending.is_empty() {
        return;
    }
    outbox.push(Event {
        pending,
        ..draft.event
    });
}

fn raise_waited(outbox: &mut Outbox, doc: &Doc, rules: &[&Rule], wall_ms: u64) {
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
        let pending: Vec<String> = waiting_rules
            .iter()
            .filter(|r| r.after_ms.is_some_and(|after| waited_ms >= after))
            .map(|r| r.name.clone())
            .collect();
        if pending.is_empty() {
            continue;
        }
        outbox.waited.push(ticket.id.clone());
        outbox.push(Event {
            seq: 0,
            kind: EventKind::Waited,
            id: ticket.id.clone(),
            job: ticket.job.is_some(),
            outcome: None,
            forced: false,
            reason: Some(format!("waiting for {} s", waited_ms / 1000)),
            context: ticket.context.clone(),
            fence: None,
            enqueued_wall_ms: ticket.enqueued_wall_ms,
            granted_wall_ms: None,
            at_wall_ms: wall_ms,
            pending,
            tries: 0,
            next_wall_ms: 0,
        });
    }
}

/// The events of one change: its grants, and the ends of its finished tickets.
fn events_of(before: Option<&Doc>, applied: &Applied, wall_ms: u64) -> Vec<Draft> {
    let mut drafts = Vec::new();
    let failures_before = before.map_or(0, |d| d.summary.consecutive_failures);
    let mut failures = failures_before;
    for finished in &applied.finished {
        let event = Event {
            seq: 0,
            kind: EventKind::Released,
            id: finished.id.clone(),
            job: finished.job.is_some(),
            outcome: Some(finished.outcome),
            forced: finished.forced,
            reason: finished.reason.clone(),
            context: finished.context.clone(),
            fence: finished.fence,
            enqueued_wall_ms: finished.enqueued_wall_ms,
            granted_wall_ms: finished.granted_wall_ms,
            at_wall_ms: finished.finished_wall_ms.max(wall_ms),
            pending: Vec::new(),
            tries: 0,
            next_wall_ms: 0,
        };
        let held = finished.granted_wall_ms.is_some();
        let mut kinds = Vec::new();
        match finished.outcome {
            Outcome::Succeeded if held => {
                kinds.push(EventKind::Released);
                if failures > 0 {
                    kinds.push(EventKind::Recovered);
                }
                failures = 0;
            }
            Outcome::Failed => {
                if held {
                    kinds.push(EventKind::Released);
                }
                kinds.push(EventKind::Failed);
                failures += 1;
            }
            Outcome::Expired if held => {
                kinds.push(EventKind::Expired);
                failures += 1;
            }
            Outcome::Cancelled if held && !finished.forced => kinds.push(EventKind::Released),
            Outcome::Cancelled => kinds.push(EventKind::Cancelled),
            Outcome::Superseded => kinds.push(EventKind::Superseded),
            Outcome::Dead => {
                kinds.push(EventKind::Dead);
                failures += 1;
            }
            _ => {}
        }
        if finished.once.as_ref().is_some_and(|o| o.dead) {
            kinds.push(EventKind::Dead);
        }
        for kind in kinds {
            drafts.push(Draft {
                kind,
                event: Event {
                    kind,
                    ..event.clone()
                },
            });
        }
    }
    for (id, fence) in &applied.granted {
        let Some(ticket) = applied.doc.tickets.iter().find(|t| t.id == *id) else {
            continue;
        };
        drafts.push(Draft {
            kind: EventKind::Granted,
            event: Event {
                seq: 0,
                kind: EventKind::Granted,
                id: id.clone(),
                job: ticket.job.is_some(),
                outcome: None,
                forced: false,
                reason: None,
                context: ticket.context.clone(),
                fence: Some(*fence),
                enqueued_wall_ms: ticket.enqueued_wall_ms,
                granted_wall_ms: Some(wall_ms),
                at_wall_ms: wall_ms,
                pending: Vec::new(),
                tries: 0,
                next_wall_ms: 0,
            },
        });
    }
    drafts
}
