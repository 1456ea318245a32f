//! A key's backlog: jobs queued behind the document's window, kept outside the hot document.
//!
//! A key may hold far more waiting jobs than a hot document should carry (every write of the
//! key carries the whole document). The first [`WINDOW_JOBS`] waiting jobs live in the
//! document as tickets; later plain jobs (no `--order`: those sort first anyway) go to the
//! backlog's *tail*, a list in the document that is only ever appended to. When the tail is
//! full, the submit that finds it so has the coordinator write it out whole as the *segment*
//! record `backlog/GEN/N` **before** the document write that empties the tail and counts the
//! segment; when the window runs low, the coordinator reads the oldest segment and hands it to
//! [`crate::apply::apply_with`], which takes its jobs into the window.
//!
//! Why a writer that dies halfway is harmless: for a given generation and number, the tail that
//! is written out is always the same — it only grows until it is written out or taken in, and
//! both move to the next number — so a segment written by a writer whose document write then
//! failed is either the very bytes a later writer writes again, or a number the document never
//! counts. A reader takes a segment only when the document says it is the oldest one, and the
//! document write that takes it is a compare-and-swap, so it is taken exactly once.
//!
//! Operators' changes never rewrite a written segment or the tail: a cancel of a backlog job
//! adds its id to `dropped`, a supersede or a cancel of the whole queue adds a [`Cut`]; the
//! jobs they name end (with their history entries) when they are taken in.
//!
//! Order: every job in the backlog arrived after `taken_through`, and a plain ticket or job of
//! the window that arrived after it waits behind the backlog ([`Doc::behind_backlog`]) until
//! the jobs ahead of it have been taken in. Tickets with an order value sort first, as always.
//!
//! Waiting turns of a lock or semaphore go to the backlog too, when their client can wait there
//! ([`crate::op::Enqueue::may_wait_in_backlog`]) and they are plain (no order value, run-once
//! spec, pool, supersede, stop request or freeze override: what those do is decided in the
//! window). Nothing is granted in the backlog: every grant is made in the window, by the same
//! rules. A waiter's lease needs its heartbeats, which a segment cannot take (it is written
//! once), so a turn in the backlog has none: its client writes nothing while it waits there,
//! and its waiter lease starts afresh when it is taken in ([`Backlog::waiters`]). A client that
//! died in the backlog is found out one waiter lease after its turn reaches the window.

use serde::{Deserialize, Serialize};

use crate::doc::{Doc, Outcome, Ticket, TicketState};

/// Waiting tickets (jobs and turns) the document holds before later plain ones go to the
/// backlog.
pub const WINDOW_JOBS: usize = 16;
/// The window is refilled from the backlog when fewer tickets than this wait in it.
pub const REFILL_BELOW: usize = 8;
/// Tickets in a segment (and most in the tail).
pub const SEGMENT_JOBS: usize = 32;
/// Most jobs a key's backlog holds.
pub const BACKLOG_MAX: u64 = 10_000_000;
/// Most pending cancels of backlog jobs and cuts a backlog remembers.
pub const PENDING_MAX: usize = 256;

/// The backlog of a key (see the module's documentation). Present only while it holds jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backlog {
    /// Names this backlog's segments apart from an earlier backlog's: the arrival of its first
    /// job (arrivals never repeat within a key).
    pub generation: u64,
    /// The number of the oldest segment not yet taken in.
    pub first: u64,
    /// The number the tail gets when it is written out: segments `first..next` are written.
    pub next: u64,
    /// Jobs in segments `first..next`.
    pub in_segments: u64,
    /// Every job in the backlog arrived after this one.
    pub taken_through: u64,
    /// Jobs after the segments, in arrival order: only appended to, until written out or taken
    /// in.
    #[serde(default)]
    pub tail: Vec<Ticket>,
    /// Backlog jobs an operator cancelled: they end when taken in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Dropped>,
    /// Backlog jobs that a supersede or a cancel of the queue ended: they end when taken in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<Cut>,
    /// Backlog jobs that arrived before this one were queued before the store's clock
    /// restarted: a job time they carry is ready at once when taken in.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_now_below: u64,
    /// Waiting turns of a lock (not only jobs) went to this backlog: the document is written
    /// in the format that says so, which a baton that would not give them a fresh waiter lease
    /// when taken in refuses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiters: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A backlog ticket an operator cancelled, and who (their context; empty: unknown), or one its
/// own waiter withdrew (`outcome`: timed out, or cancelled).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "DroppedForm")]
pub struct Dropped {
    /// The ticket's id.
    pub id: String,
    /// Who cancelled it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// How its own waiter ended it; `None`: an operator's cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Outcome>,
}

impl Dropped {
    /// How the ticket ends when taken in.
    pub fn outcome(&self) -> Outcome {
        self.withdrawn.unwrap_or(Outcome::Cancelled)
    }

    /// Why the ticket ended, for its history entry.
    pub fn reason(&self) -> String {
        match self.withdrawn {
            Some(Outcome::TimedOut) => "its waiter gave up (--timeout) in the backlog".into(),
            Some(_) => "its waiter withdrew it from the backlog".into(),
            None => crate::op::cancel_reason(false, &self.by),
        }
    }
}

/// How a [`Dropped`] is read: documents written before cancels said who hold the bare id.
#[derive(Deserialize)]
#[serde(untagged)]
enum DroppedForm {
    Id(String),
    Full {
        id: String,
        #[serde(default)]
        by: String,
        #[serde(default)]
        withdrawn: Option<Outcome>,
    },
}

impl From<DroppedForm> for Dropped {
    fn from(form: DroppedForm) -> Dropped {
        match form {
            DroppedForm::Id(id) => Dropped {
                id,
                by: String::new(),
                withdrawn: None,
            },
            DroppedForm::Full { id, by, withdrawn } => Dropped { id, by, withdrawn },
        }
    }
}

/// Backlog jobs that arrived before `below` end with `outcome` when taken in (those with
/// `keep`, if the cut spares them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// Jobs that arrived before this one.
    pub below: u64,
    /// How they end: superseded, or cancelled.
    pub outcome: Outcome,
    /// Whether jobs submitted with `--keep` stay (a supersede spares them; a cancel does not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spares_keep: bool,
    /// Why, for the history.
    pub reason: String,
}

/// How a turn stands in its key's backlog ([`Doc::backlog_standing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BacklogStanding {
    /// It waits there, with about `position` tickets ahead of it (at most that many when in a
    /// segment), in the tail or a written segment.
    Waiting {
        /// Tickets ahead of it.
        position: usize,
        /// In a written segment, which only a read of the segment can show.
        in_segment: bool,
    },
    /// A cancel, a cut or its waiter's withdrawal ended it there: it ends so when taken in.
    Ended(Outcome),
    /// It is not in the backlog (in the window, ended, or never there).
    Absent,
}

/// A written-out tail: the record `backlog/GEN/N` of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The backlog's generation.
    pub generation: u64,
    /// Its number within the generation.
    pub number: u64,
    /// Its jobs, in arrival order.
    pub tickets: Vec<Ticket>,
}

impl Segment {
    /// The record's name.
    pub fn record_name(&self) -> String {
        segment_record(self.generation, self.number)
    }

    /// The record's bytes. The same segment always encodes to the same bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain structs with string keys cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a segment record, checking it is the one asked for.
    pub fn decode(bytes: &[u8], generation: u64, number: u64) -> Result<Segment, String> {
        let segment: Segment = serde_json::from_slice(bytes)
            .map_err(|e| format!("backlog segment {generation}/{number} is corrupt: {e}"))?;
        if segment.generation != generation || segment.number != number {
            return Err(format!(
                "backlog record {generation}/{number} holds segment {}/{}",
                segment.generation, segment.number
            ));
        }
        if segment.tickets.iter().any(|t| !t.fits_backlog()) {
            return Err(format!(
                "backlog segment {generation}/{number} holds something other than waiting \
                 tickets"
            ));
        }
        Ok(segment)
    }
}

/// The name of segment `number` of backlog `generation`.
pub fn segment_record(generation: u64, number: u64) -> String {
    format!("backlog/{generation}/{number}")
}

impl Backlog {
    /// A new backlog whose first job will have arrival `arrival`.
    pub fn new(arrival: u64) -> Backlog {
        Backlog {
            generation: arrival,
            first: 0,
            next: 0,
            in_segments: 0,
            taken_through: arrival.saturating_sub(1),
            tail: Vec::new(),
            dropped: Vec::new(),
            cuts: Vec::new(),
            ready_now_below: 0,
            waiters: false,
        }
    }

    /// Jobs it holds (those already cancelled or cut, too, until taken in).
    pub fn len(&self) -> u64 {
        self.in_segments.saturating_add(self.tail.len() as u64)
    }

    /// Whether it holds no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether written segments wait to be taken in.
    pub fn has_segments(&self) -> bool {
        self.first < self.next
    }

    /// How a backlog job ends when taken in, if an operator's cancel or a cut ended it: its
    /// outcome and why.
    pub fn fate(&self, ticket: &Ticket) -> Option<(Outcome, String)> {
        if let Some(dropped) = self.dropped.iter().find(|d| d.id == ticket.id) {
            return Some((dropped.outcome(), dropped.reason()));
        }
        self.cuts
            .iter()
            .find(|cut| ticket.arrival < cut.below && !(cut.spares_keep && ticket.keep))
            .map(|cut| (cut.outcome, cut.reason.clone()))
    }

    /// Remembers that `cut` ends the backlog's jobs before it. Cuts that end nothing more than
    /// a later one are merged into it.
    pub fn add_cut(&mut self, cut: Cut) {
        self.cuts.retain(|c| {
            !(c.outcome == cut.outcome && c.spares_keep == cut.spares_keep && c.below <= cut.below)
        });
        self.cuts.push(cut);
    }

    /// The tail job with this id.
    pub fn tail_job(&self, id: &str) -> Option<&Ticket> {
        self.tail.iter().find(|t| t.id == id)
    }

    /// Whether the ticket that arrived `arrival`th may wait in this backlog's written segments:
    /// it arrived after every ticket taken in, before the tail's first, and within this
    /// generation. (Whether it does, only the segment can say.)
    pub fn may_hold_in_segments(&self, arrival: u64) -> bool {
        let before_tail = self.tail.first().is_none_or(|t| arrival < t.arrival);
        self.has_segments()
            && arrival >= self.generation
            && arrival > self.taken_through
            && before_tail
    }

    /// Forgets the cancels and cuts that name no job left in it.
    pub fn forget_settled(&mut self, taken: &[String]) {
        self.dropped.retain(|d| !taken.contains(&d.id));
        let through = self.taken_through;
        self.cuts
            .retain(|cut| cut.below > through.saturating_add(1));
    }
}

impl Doc {
    /// Whether `ticket` must wait until the backlog's jobs ahead of it are taken in: a plain
    /// ticket or job that arrived after the backlog's first job.
    pub fn behind_backlog(&self, ticket: &Ticket) -> bool {
        self.backlog
            .as_ref()
            .is_some_and(|b| ticket.order.is_none() && ticket.arrival > b.taken_through)
    }

    /// Waiting tickets in the window (the document's tickets): jobs, and turns still queued.
    pub fn window_waiting(&self) -> usize {
        self.tickets
            .iter()
            .filter(|t| t.state == TicketState::Queued)
            .count()
    }

    /// Waiting tickets in the window ahead of the backlog: those that do not wait behind it
    /// (a turn of a client that cannot wait in the backlog, queued after it, does). The window
    /// is refilled when these run low, however many wait behind.
    pub fn window_ahead_of_backlog(&self) -> usize {
        self.tickets
            .iter()
            .filter(|t| t.state == TicketState::Queued && !self.behind_backlog(t))
            .count()
    }

    /// The segment the coordinator should read and hand to the next apply, if the window runs
    /// low and one is written: `(generation, number)`.
    pub fn segment_wanted(&self) -> Option<(u64, u64)> {
        let backlog = self.backlog.as_ref()?;
        (backlog.has_segments() && self.window_ahead_of_backlog() < REFILL_BELOW)
            .then_some((backlog.generation, backlog.first))
    }

    /// How the turn `id`, that arrived `arrival`th (with `keep`), stands in the backlog, as far
    /// as the document can tell: one in a written segment waits there unless a cut or a
    /// withdrawal ended it, behind at most every ticket of the segments.
    pub fn backlog_standing(&self, id: &str, arrival: u64, keep: bool) -> BacklogStanding {
        let Some(backlog) = self.backlog.as_ref().filter(|_| self.by_id(id).is_none()) else {
            return BacklogStanding::Absent;
        };
        if let Some(ticket) = backlog.tail_job(id) {
            return match backlog.fate(ticket) {
                Some((outcome, _)) => BacklogStanding::Ended(outcome),
                None => BacklogStanding::Waiting {
                    position: self.tail_position(id).unwrap_or_default(),
                    in_segment: false,
                },
            };
        }
        if let Some(dropped) = backlog.dropped.iter().find(|d| d.id == id) {
            return BacklogStanding::Ended(dropped.outcome());
        }
        if !backlog.may_hold_in_segments(arrival) {
            return BacklogStanding::Absent;
        }
        let cut = backlog
            .cuts
            .iter()
            .find(|c| arrival < c.below && !(c.spares_keep && keep));
        match cut {
            Some(cut) => BacklogStanding::Ended(cut.outcome),
            None => BacklogStanding::Waiting {
                position: self.backlog_position(backlog.in_segments as usize),
                in_segment: true,
            },
        }
    }

    /// The arrival number of live ticket `id`, in the window or the backlog's tail.
    pub fn arrival_of(&self, id: &str) -> Option<u64> {
        self.by_id(id)
            .or_else(|| self.backlog.as_ref()?.tail_job(id))
            .map(|t| t.arrival)
    }

    /// Where job `id` stands if it waits in the backlog's tail (not yet ended by a cancel or
    /// a cut): the jobs ahead of it in the key.
    pub fn tail_position(&self, id: &str) -> Option<usize> {
        let backlog = self.backlog.as_ref()?;
        let index = backlog.tail.iter().position(|t| t.id == id)?;
        Some(self.backlog_position(backlog.in_segments as usize + index))
    }

    /// The position in the key's queue of the backlog job that has `ahead_in_backlog` backlog
    /// jobs before it: the window's queued tickets that are not behind the backlog come first.
    pub fn backlog_position(&self, ahead_in_backlog: usize) -> usize {
        let window_ahead = self
            .tickets
            .iter()
            .filter(|t| t.state == TicketState::Queued && !self.behind_backlog(t))
            .count();
        window_ahead.saturating_add(ahead_in_backlog)
    }
}
