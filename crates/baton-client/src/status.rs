//! A key's standing as people read it: holders, the queue, how turns have ended. One
//! [`KeyStatus`] per key is the source of `baton status` (its table, its JSON, its watch) and
//! of the server's dashboard.

use std::time::{Duration, UNIX_EPOCH};

use baton_core::doc::FinishedMark;
use baton_core::freeze::{Freeze, Paused};
use baton_core::{Doc, Mode, Outcome, Ticket, TicketState};
use baton_store::StoreClock;
use serde_json::{json, Value};

use crate::coordinator::Coordinator;
use crate::error::ClientError;

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(wall_ms: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(wall_ms);
    humantime::format_rfc3339_millis(time.max(UNIX_EPOCH)).to_string()
}

/// A ticket's mode as a word.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Normal => "normal",
        Mode::Shared => "shared",
    }
}

/// One key as read: the source of every form of output.
#[derive(Clone, Debug)]
pub struct KeyStatus {
    /// The key.
    pub key: String,
    /// Its limit (1: a mutex).
    pub limit: u32,
    /// A pool's slots, in the order they are given out; empty: no pool.
    pub slots: Vec<String>,
    /// The last fence granted.
    pub fence: u64,
    /// Holders, in queue order.
    pub holders: Vec<TicketStatus>,
    /// The queue, in grant order (the window's tickets: the backlog's are counted only).
    pub queue: Vec<TicketStatus>,
    /// Jobs and turns waiting in the key's backlog, outside its document (jobs are listed by
    /// `baton jobs`).
    pub backlog: u64,
    /// Turns of a lock went to the backlog (not only jobs, which `baton jobs` lists).
    pub backlog_turns: bool,
    /// Whether the key had live tickets (before any filtering): a key without shows a `free` row.
    pub busy: bool,
    /// How the last turn ended.
    pub last_outcome: Option<Outcome>,
    /// When it ended (wall clock ms; 0: never).
    pub last_finished_wall_ms: u64,
    /// Failed turns in a row.
    pub consecutive_failures: u32,
    /// The mean of the recent hold times.
    pub mean_hold_ms: Option<u64>,
    /// The reader's wall clock at the read.
    pub wall_ms: u64,
    /// The document's recently finished tickets: how a ticket that left ended.
    pub finished: Vec<FinishedMark>,
    /// What the key remembers of its run-once runs.
    pub once: Option<baton_core::OnceRecord>,
    /// Notification events not yet delivered, and those dropped undelivered.
    pub outbox: (u64, u64),
    /// The freeze in force (`baton pause`): no new grant but through an override.
    pub paused: Option<Paused>,
}

/// One live ticket as read.
#[derive(Clone, Debug)]
pub struct TicketStatus {
    /// Its public id.
    pub id: String,
    /// Whether it holds the key.
    pub held: bool,
    /// Normal or shared.
    pub mode: Mode,
    /// Who and why.
    pub context: String,
    /// Its sort value.
    pub order: Option<String>,
    /// Immune to supersede.
    pub keep: bool,
    /// A holder that has claimed its grant.
    pub claimed: bool,
    /// Its fence (holders).
    pub fence: u64,
    /// 1.. in the queue; 0 for holders.
    pub position: usize,
    /// When it was granted (holders) or enqueued (queued).
    pub since_wall_ms: u64,
    /// How long it has held or waited.
    pub for_ms: u64,
    /// Lease left on the store's clock; `None` when the store has none.
    pub lease_left_ms: Option<u64>,
    /// A job (submitted with `baton submit`), not a turn someone waits for.
    pub job: bool,
    /// For a queued ticket: the estimated wait until it is granted
    /// ([`baton_core::estimate`]), when the key has recent hold times.
    pub estimate_ms: Option<u64>,
    /// A holder asked to stop by a newer ticket (`--cancel-running`): who asked.
    pub stop_asked: Option<String>,
    /// The CI run that took it, for `baton reap` ([`baton_core::ci_run`]).
    pub ci_run: Option<baton_core::ci_run::CiRun>,
    /// On a pool: the slots it holds (holders).
    pub slots: Vec<String>,
    /// On a pool: the one slot it asked for (`--slot`).
    pub wants_slot: Option<String>,
}

impl TicketStatus {
    /// A holder, with the lease left until the store's clock, as read, ends it (the core's
    /// rule; `uncertain_ms`: the store's `clock_uncertain_ms`).
    fn holder(t: &Ticket, clock: &StoreClock, uncertain_ms: u64, wall_ms: u64) -> TicketStatus {
        TicketStatus {
            id: t.id.clone(),
            held: true,
            mode: t.mode,
            context: t.context.clone(),
            order: t.order.clone(),
            keep: t.keep,
            claimed: t.claimed,
            fence: t.fence,
            position: 0,
            since_wall_ms: t.granted_wall_ms,
            for_ms: wall_ms.saturating_sub(t.granted_wall_ms),
            lease_left_ms: match (clock, t.deadline_ms) {
                (StoreClock::Time { now_ms, .. }, Some(deadline)) => {
                    let ends = baton_core::lease::phase_ends_store_ms(deadline, uncertain_ms);
                    Some(ends.saturating_sub(*now_ms))
                }
                _ => None,
            },
            job: t.job.is_some(),
            estimate_ms: None,
            stop_asked: t.stop_asked.clone(),
            ci_run: t.ci_run.clone(),
            slots: t.slots.as_ref().map(|p| p.held.clone()).unwrap_or_default(),
            wants_slot: t.slots.as_ref().and_then(|p| p.only.clone()),
        }
    }

    /// A queued ticket at `position` (1: next), without an estimate.
    fn queued(t: &Ticket, position: usize, wall_ms: u64) -> TicketStatus {
        TicketStatus {
            id: t.id.clone(),
            held: false,
            mode: t.mode,
            context: t.context.clone(),
            order: t.order.clone(),
            keep: t.keep,
            claimed: false,
            fence: 0,
            position,
            since_wall_ms: t.enqueued_wall_ms,
            for_ms: wall_ms.saturating_sub(t.enqueued_wall_ms),
            lease_left_ms: None,
            job: t.job.is_some(),
            estimate_ms: None,
            stop_asked: None,
            ci_run: t.ci_run.clone(),
            slots: Vec::new(),
            wants_slot: t.slots.as_ref().and_then(|p| p.only.clone()),
        }
    }
}

impl KeyStatus {
    /// `uncertain_ms`: the store's `clock_uncertain_ms`.
    pub fn of(
        key: &str,
        doc: &Doc,
        clock: &StoreClock,
        uncertain_ms: u64,
        wall_ms: u64,
    ) -> KeyStatus {
        let holders = doc
            .in_queue_order()
            .into_iter()
            .filter(|t| t.state == TicketState::Held)
            .map(|t| TicketStatus::holder(t, clock, uncertain_ms, wall_ms))
            .collect::<Vec<_>>();
        let backlog = doc.backlog.as_ref().map_or(0, |b| b.len());
        let paused = doc.paused.clone().filter(|p| p.holds_at(wall_ms));
        let queue = doc
            .queued()
            .into_iter()
            .enumerate()
            .map(|(index, t)| {
                // Behind the backlog's jobs, if it arrived after them.
                let behind = if doc.behind_backlog(t) {
                    usize::try_from(backlog).unwrap_or(usize::MAX)
                } else {
                    0
                };
                let mut status = TicketStatus::queued(t, index + 1 + behind, wall_ms);
                // No estimate while paused: nobody is granted until the freeze ends.
                status.estimate_ms = baton_core::estimate::estimate_wait_ms(doc, &t.id, wall_ms)
                    .filter(|_| paused.is_none());
                status
            })
            .collect::<Vec<_>>();
        KeyStatus {
            key: key.to_string(),
            limit: doc.limit,
            slots: doc.slots.clone(),
            fence: doc.fence,
            busy: !holders.is_empty() || !queue.is_empty() || backlog > 0,
            holders,
            queue,
            backlog,
            backlog_turns: doc.backlog.as_ref().is_some_and(|b| b.waiters),
            last_outcome: doc.summary.last_outcome,
            last_finished_wall_ms: doc.summary.last_finished_wall_ms,
            consecutive_failures: doc.summary.consecutive_failures,
            mean_hold_ms: doc.summary.mean_hold_ms(),
            wall_ms,
            finished: doc.finished.clone(),
            once: doc.once.clone(),
            outbox: doc
                .outbox
                .as_ref()
                .map_or((0, 0), |o| (o.undelivered(), o.dropped)),
            paused,
        }
    }

    /// The freeze in force by the store's settings rather than the document's last write (a
    /// scheduled window may have opened or closed since).
    pub fn with_freezes(mut self, freezes: &[Freeze]) -> KeyStatus {
        self.paused = baton_core::freeze::in_force(freezes, &self.key, self.wall_ms);
        if self.paused.is_some() {
            for ticket in &mut self.queue {
                ticket.estimate_ms = None;
            }
        }
        self
    }

    /// As `baton status --json` shows it.
    pub fn json(&self) -> Value {
        let holders: Vec<Value> = self
            .holders
            .iter()
            .map(|t| {
                let mut holder = json!({
                    "id": t.id,
                    "mode": mode_name(t.mode),
                    "context": t.context,
                    "fence": t.fence,
                    "acquired_at": rfc3339(t.since_wall_ms),
                    "held_ms": t.for_ms,
                    "lease_left_ms": t.lease_left_ms,
                    "claimed": t.claimed,
                    "job": t.job,
                    "stop_asked": t.stop_asked,
                    "ci_run": t.ci_run,
                });
                if !t.slots.is_empty() {
                    holder["slot"] = json!(t.slots.join(","));
                    holder["slots"] = json!(t.slots);
                }
                holder
            })
            .collect();
        let queue: Vec<Value> = self
            .queue
            .iter()
            .map(|t| {
                let mut queued = json!({
                    "id": t.id,
                    "position": t.position,
                    "mode": mode_name(t.mode),
                    "context": t.context,
                    "order": t.order,
                    "keep": t.keep,
                    "enqueued_at": rfc3339(t.since_wall_ms),
                    "waiting_ms": t.for_ms,
                    "job": t.job,
                    "wait_estimate_ms": t.estimate_ms,
                });
                if let Some(slot) = &t.wants_slot {
                    queued["wants_slot"] = json!(slot);
                }
                queued
            })
            .collect();
        let mut key = self.key_json(holders, queue);
        if !self.slots.is_empty() {
            key["slots"] = json!(self.pool_json());
        }
        key
    }

    /// The pool's slots, each with its holder's id or null: `[{"slot", "holder"}]`.
    fn pool_json(&self) -> Vec<Value> {
        self.slots
            .iter()
            .map(|slot| {
                let holder = self.holders.iter().find(|t| t.slots.contains(slot));
                json!({ "slot": slot, "holder": holder.map(|t| &t.id) })
            })
            .collect()
    }

    /// The key's object, with its `holders` and `queue`.
    fn key_json(&self, holders: Vec<Value>, queue: Vec<Value>) -> Value {
        json!({
            "key": self.key,
            "limit": self.limit,
            "fence": self.fence,
            "holders": holders,
            "queue": queue,
            "backlog": self.backlog,
            "last_outcome": self.last_outcome.map(Outcome::as_str),
            "last_finished_at": (self.last_finished_wall_ms > 0)
                .then(|| rfc3339(self.last_finished_wall_ms)),
            "consecutive_failures": self.consecutive_failures,
            "mean_hold_ms": self.mean_hold_ms,
            "once": self.once.as_ref().map(|r| self.once_json(r)),
            "notifications": json!({
                "undelivered": self.outbox.0,
                "dropped": self.outbox.1,
            }),
            "paused": self.paused.as_ref().map(|p| json!({
                "target": p.target,
                "reason": p.reason,
                "by": p.by,
                "since": rfc3339(p.since_ms),
                "until": p.until_ms.map(rfc3339),
            })),
        })
    }

    fn once_json(&self, r: &baton_core::OnceRecord) -> Value {
        let at = |ms: u64| (ms > 0).then(|| rfc3339(ms));
        let done_seq = r.done_seq_at(self.wall_ms);
        json!({
            "state": if r.dead { "dead" } else if done_seq > 0 { "done" } else { "not_done" },
            "done_seq": done_seq,
            "done_at": at(r.done_wall_ms).filter(|_| done_seq > 0),
            "forget_at": at(r.forget_wall_ms).filter(|_| done_seq > 0),
            "failures": r.failures,
            "dead": r.dead,
            "last_outcome": r.last.map(Outcome::as_str),
            "last_at": at(r.last_wall_ms),
            "runs": r.runs,
        })
    }
}

/// Reads every key under `prefix` that has a document.
pub async fn read_all(coord: &Coordinator, prefix: &str) -> Result<Vec<KeyStatus>, ClientError> {
    let keys = coord.keys(prefix).await?;
    let uncertain_ms = coord.store().capabilities().clock_uncertain_ms;
    // Through a server, those the caller may read; if they cannot be read, the documents'
    // word stands.
    let freezes = crate::freeze::list(coord)
        .await
        .ok()
        .map(|list| list.freezes);
    let mut statuses = Vec::with_capacity(keys.len());
    for key in &keys {
        let snapshot = coord.read(key).await?;
        let Some(doc) = snapshot.doc else { continue };
        let (clock, wall_ms) = (&snapshot.clock, snapshot.wall_ms);
        let status = KeyStatus::of(key, &doc, clock, uncertain_ms, wall_ms);
        statuses.push(match &freezes {
            Some(freezes) => status.with_freezes(freezes),
            None => status,
        });
    }
    Ok(statuses)
}
