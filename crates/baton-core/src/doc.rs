//! The hot document of a key: its live tickets, its fence counter and a fixed-size summary.
//!
//! It stays small on purpose: history, job parameters and anything else that grows live outside
//! it, so the cost of an operation does not grow with the key's past. It is encoded as JSON with
//! a format number; a document in a newer format, or one that fails its checks, is refused with a
//! clear error and never panics the reader.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::backlog::Backlog;
use crate::invariants;
use crate::job::JobState;
use crate::limits::{DOC_MAX_BYTES, FINISHED_REMEMBERED, HOLD_SAMPLES};
use crate::once::{OnceRecord, OnceSpec};

mod finished_mark;
pub use finished_mark::{attempt_tag, FinishedMark, TAG_HEX};

/// The newest document format this code writes and understands.
///
/// Format 3 has jobs ([`Ticket::job`]), run-once records ([`Doc::once`]), notification
/// outboxes and freezes ([`Doc::paused`], [`Ticket::override_freeze`]); a document without any
/// is still written in format 2, so an older baton keeps working on every key that has none.
/// An older baton refuses a paused key rather than grant it through the freeze it cannot see.
/// Format 4 has waiting turns in the backlog ([`crate::backlog::Backlog::waiters`]), written
/// only for a key whose queue outgrew the window. Format 5 remembers turns whose arrival may
/// still land late ([`Doc::unsettled`]), written only while it remembers one: an older baton
/// would drop them and queue such a turn twice. Format 2 stores finished-ticket marks as short
/// strings ([`FinishedMark`]); a format 1 document is still read.
pub const FORMAT: u32 = 5;

/// The format of a document with waiting turns in the backlog, and no unsettled turns.
pub const FORMAT_BACKLOG_TURNS: u32 = 4;

/// The format of a document with jobs, run-once records, outboxes or freezes, but no waiting
/// turns in the backlog.
pub const FORMAT_JOBS: u32 = 3;

/// The format of a document without jobs.
pub const FORMAT_LOCKS: u32 = 2;

/// The first baton release that reads each format, for the error an older one gives.
fn release_reading(format: u64) -> &'static str {
    match format {
        0..=2 => "0.1",
        3 => "0.2",
        4 => "0.3",
        5 => "0.4",
        _ => "a newer one",
    }
}

/// How a ticket holds a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Takes one of the key's `limit` permits.
    Normal,
    /// Holds together with any number of other shared tickets, never beside a normal one.
    Shared,
}

impl Mode {
    /// Whether a ticket of this mode fits beside `normal` and `shared` holders of a key of
    /// `limit` permits: the one rule of a lock's and a semaphore's grants.
    pub fn fits(self, (normal, shared): (u32, u32), limit: u32) -> bool {
        match self {
            Mode::Normal => shared == 0 && normal < limit,
            Mode::Shared => normal == 0,
        }
    }
}

/// Where a live ticket stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TicketState {
    /// Waiting in the queue.
    Queued,
    /// Holding the key (granted; claimed or within its claim window).
    Held,
}

impl TicketState {
    /// The state's name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketState::Queued => "queued",
            TicketState::Held => "held",
        }
    }
}

impl std::fmt::Display for TicketState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one final outcome of a ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Released by its owner after the work succeeded.
    Succeeded,
    /// Released by its owner after the work failed.
    Failed,
    /// Cancelled by its owner or an operator (a forced release is marked as such).
    Cancelled,
    /// Its lease ran out, or its grant was not claimed in time.
    Expired,
    /// A waiter that stopped refreshing its waiter lease.
    Abandoned,
    /// Squashed while queued by a newer ticket enqueued with `supersede`.
    Superseded,
    /// Its waiter gave up.
    TimedOut,
    /// A job whose retries were exhausted.
    Dead,
    /// A job's run given back by its worker (exit 75). In history entries of runs only
    /// ([`crate::history::JobRun::requeued`]), never the final outcome of a ticket.
    ReleasedBack,
    /// A run-once ticket that ran nothing: a success of its step was already recorded
    /// ([`crate::once`]).
    Skipped,
    /// A run-once ticket of a step whose predecessor has not completed ([`crate::once`]).
    OutOfOrder,
}

impl Outcome {
    /// The name used in output, history and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Expired => "expired",
            Outcome::Abandoned => "abandoned",
            Outcome::Superseded => "superseded",
            Outcome::TimedOut => "timed_out",
            Outcome::Dead => "dead",
            Outcome::ReleasedBack => "released_back",
            Outcome::Skipped => "skipped",
            Outcome::OutOfOrder => "out_of_order",
        }
    }

    /// The outcome's letter in a [`FinishedMark`].
    pub fn code(self) -> char {
        match self {
            Outcome::Succeeded => 's',
            Outcome::Failed => 'f',
            Outcome::Cancelled => 'c',
            Outcome::Expired => 'e',
            Outcome::Abandoned => 'a',
            Outcome::Superseded => 'u',
            Outcome::TimedOut => 't',
            Outcome::Dead => 'd',
            Outcome::ReleasedBack => 'b',
            Outcome::Skipped => 'k',
            Outcome::OutOfOrder => 'g',
        }
    }

    /// The outcome with this [`Outcome::code`].
    pub fn from_code(code: char) -> Option<Outcome> {
        Some(match code {
            's' => Outcome::Succeeded,
            'f' => Outcome::Failed,
            'c' => Outcome::Cancelled,
            'e' => Outcome::Expired,
            'a' => Outcome::Abandoned,
            'u' => Outcome::Superseded,
            't' => Outcome::TimedOut,
            'd' => Outcome::Dead,
            'b' => Outcome::ReleasedBack,
            'k' => Outcome::Skipped,
            'g' => Outcome::OutOfOrder,
            _ => return None,
        })
    }

    /// Whether this outcome counts as a failure of the work (for the summary's streak).
    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::Failed | Outcome::Expired | Outcome::Dead)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One live entry of a key's queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// Public id: shown in status, used by operators to cancel. Made by the client before its
    /// first attempt, so a retried enqueue is recognised.
    pub id: String,
    /// Hash of the secret token ([`token_hash`]); the token itself is never stored.
    pub token_hash: String,
    /// Normal or shared.
    pub mode: Mode,
    /// Queued or held.
    pub state: TicketState,
    /// Sort value: tickets with one go first, compared as strings, then by arrival.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Arrival number within the key, strictly increasing.
    pub arrival: u64,
    /// Immune to `supersede`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub keep: bool,
    /// Who is waiting or holding, and why (shown to others).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    /// Lease duration while held and claimed.
    pub ttl_ms: u64,
    /// Waiter-lease duration while queued.
    pub waiter_ttl_ms: u64,
    /// How long a grant may stay unclaimed.
    pub claim_ms: u64,
    /// Bumped at every refresh, renewal, claim and grant: what observers watch on stores
    /// without a clock.
    pub heartbeat: u64,
    /// End of the current phase (waiter lease, claim window or lease) on the store's clock;
    /// `None` on stores judged by observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// A held ticket whose owner has seen its grant.
    #[serde(default, skip_serializing_if = "is_false")]
    pub claimed: bool,
    /// The fence handed out at grant (0 while queued).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fence: u64,
    /// Wall-clock time of the enqueue, by the enqueuing client's clock. For display only.
    pub enqueued_wall_ms: u64,
    /// Wall-clock time of the grant, by the granting client's clock (0 while queued). For
    /// display only: expiry never uses wall clocks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub granted_wall_ms: u64,
    /// Set for a job ([`crate::job`]): a ticket with no waiting process, claimed by a worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<JobState>>,
    /// Set for a run-once ticket ([`crate::once`]): granted only if its verdict is to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<OnceSpec>,
    /// A holder asked to stop by a newer ticket (`--cancel-running`): who asked, for the
    /// holder's message and the history. Only such a holder may release as `superseded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_asked: Option<String>,
    /// Granted through a freeze (`baton run --override-freeze REASON`): the queue up to and
    /// including this ticket is granted in order as if the key were not paused. The reason is
    /// kept in its history entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_freeze: Option<String>,
    /// The CI run that enqueued it ([`crate::ci_run`]), for `baton reap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_run: Option<crate::ci_run::CiRun>,
    /// On a pool: the slots it asked for and, once granted, holds ([`crate::pool`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<crate::pool::TicketSlots>,
}

impl Ticket {
    /// A job waiting for a worker: no process refreshes it, and it never lapses.
    pub fn is_waiting_job(&self) -> bool {
        self.job.is_some() && self.state == TicketState::Queued
    }

    /// A waiting turn that may wait in the backlog ([`crate::backlog`]): queued, with nothing
    /// decided in the window (an order value, a run-once spec, a pool, a freeze override, a
    /// stop request).
    pub fn is_plain_waiting_turn(&self) -> bool {
        self.job.is_none()
            && self.state == TicketState::Queued
            && self.fence == 0
            && self.order.is_none()
            && self.once.is_none()
            && self.slots.is_none()
            && self.override_freeze.is_none()
            && self.stop_asked.is_none()
    }

    /// Whether this ticket may wait in the backlog: a waiting job, or a plain waiting turn.
    pub fn fits_backlog(&self) -> bool {
        self.is_waiting_job() || self.is_plain_waiting_turn()
    }

    /// Duration of the phase the ticket is in: waiter lease, claim window or lease (endless for
    /// a waiting job).
    pub fn phase_ms(&self) -> u64 {
        if self.is_waiting_job() {
            // Nobody refreshes a waiting job, and it never lapses.
            return u64::MAX;
        }
        match (self.state, self.claimed) {
            (TicketState::Queued, _) => self.waiter_ttl_ms,
            (TicketState::Held, false) => self.claim_ms,
            (TicketState::Held, true) => self.ttl_ms,
        }
    }

    /// The key in which grants are made: tickets with an `order` first (numbers as integers,
    /// else as strings: [`crate::order::compare`]), then by arrival.
    pub fn queue_key(&self) -> crate::order::QueueKey<'_> {
        crate::order::queue_key(self.order.as_deref(), self.arrival)
    }
}

/// A fixed-size summary of the key's recent past.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The most recent hold times (grant to finish, wall clock), oldest first, at most
    /// [`HOLD_SAMPLES`].
    #[serde(default)]
    pub recent_hold_ms: Vec<u64>,
    /// The last outcome of a ticket that held the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<Outcome>,
    /// When that was (wall clock of the client that recorded it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_finished_wall_ms: u64,
    /// Failures (failed, expired, dead) in a row among holders.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_failures: u32,
}

impl Summary {
    /// The mean of the recent hold times, if there are any.
    pub fn mean_hold_ms(&self) -> Option<u64> {
        let n = self.recent_hold_ms.len() as u64;
        (n > 0).then(|| self.recent_hold_ms.iter().sum::<u64>() / n)
    }
}

/// The hot document of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doc {
    /// The format number ([`FORMAT`]).
    #[serde(rename = "format")]
    pub format: u32,
    /// The last fence handed out (0: none yet). Never decreases; an idle key keeps it.
    pub fence: u64,
    /// The key's limit, set by the first live ticket.
    pub limit: u32,
    /// A pool's slots, in the order they are given out, set by the first live ticket
    /// ([`crate::pool`]); empty: the key is no pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
    /// The clock deadlines refer to (the SQLite host's boot id, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// The next arrival number.
    pub next_arrival: u64,
    /// Live tickets, in arrival order.
    #[serde(default)]
    pub tickets: Vec<Ticket>,
    /// Recently finished tickets, oldest first, at most [`FINISHED_REMEMBERED`].
    #[serde(default)]
    pub finished: Vec<FinishedMark>,
    /// How many tickets of this key have ever finished (each pushed a mark). A retry compares
    /// it with the count it saw before its uncertain attempt: more finishes in between than
    /// marks remembered, and a ticket not found may have been forgotten.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub finishes: u64,
    /// Turns whose owners queued them by a write of their own while their arrival's append was
    /// unanswered ([`crate::arrival::Unsettled`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<crate::arrival::Unsettled>,
    /// The key's recent past, for the wait estimate and status.
    #[serde(default)]
    pub summary: Summary,
    /// Jobs queued behind the window, kept outside the document ([`crate::backlog`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
    /// What the key remembers of its run-once runs ([`crate::once`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<OnceRecord>,
    /// Events recorded for notification rules and not yet delivered ([`crate::notify`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<crate::notify::Outbox>,
    /// The freeze in force at the last write ([`crate::freeze`]): while it holds no ticket is
    /// granted (and no job claimed) but those up to an override ([`Doc::frozen_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::freeze::Paused>,
}

impl Default for Doc {
    fn default() -> Self {
        Doc {
            format: FORMAT,
            fence: 0,
            limit: 1,
            slots: Vec::new(),
            epoch: None,
            next_arrival: 1,
            tickets: Vec::new(),
            finished: Vec::new(),
            finishes: 0,
            unsettled: None,
            summary: Summary::default(),
            backlog: None,
            once: None,
            outbox: None,
            paused: None,
        }
    }
}

impl Doc {
    /// Live tickets in queue order (the order grants are made in).
    pub fn in_queue_order(&self) -> Vec<&Ticket> {
        let mut tickets: Vec<&Ticket> = self.tickets.iter().collect();
        tickets.sort_by(|a, b| a.queue_key().cmp(&b.queue_key()));
        tickets
    }

    /// The tickets holding the key.
    pub fn holders(&self) -> impl Iterator<Item = &Ticket> {
        self.tickets.iter().filter(|t| t.state == TicketState::Held)
    }

    /// How many tickets hold the key: `(normal, shared)`.
    pub fn holding(&self) -> (u32, u32) {
        self.holders()
            .fold((0, 0), |(normal, shared), t| match t.mode {
                Mode::Normal => (normal + 1, shared),
                Mode::Shared => (normal, shared + 1),
            })
    }

    /// Whether a plain turn of `mode` enqueued now would wait: it does not fit beside the
    /// holders, or something is queued (it would stand behind it, or that stands held back).
    /// What a turn by arrival waits for another's write to change. Judged the safe way round
    /// for it (a turn that would wait only for a freeze writes, and finds it so); but a turn
    /// whose `order` would pass a queued job or run-once head is judged to wait, and arrives.
    pub fn turn_would_wait(&self, mode: Mode) -> bool {
        !mode.fits(self.holding(), self.limit)
            || self.tickets.iter().any(|t| t.state == TicketState::Queued)
    }

    /// Queued tickets in queue order; index 0 is granted next.
    pub fn queued(&self) -> Vec<&Ticket> {
        self.in_queue_order()
            .into_iter()
            .filter(|t| t.state == TicketState::Queued)
            .collect()
    }

    /// How many turns were ever recorded as unsettled ([`crate::arrival::Unsettled::recorded`]),
    /// 0 while none was: what an arrival appended now has seen
    /// ([`crate::arrival::Arrival::unsettled_seen`]).
    pub fn unsettled_recorded(&self) -> u64 {
        self.unsettled.as_ref().map_or(0, |u| u.recorded)
    }

    /// The live ticket with this token hash.
    pub fn by_token_hash(&self, hash: &str) -> Option<&Ticket> {
        self.tickets.iter().find(|t| t.token_hash == hash)
    }

    /// The live ticket with this id.
    pub fn by_id(&self, id: &str) -> Option<&Ticket> {
        self.tickets.iter().find(|t| t.id == id)
    }

    /// Whether the freeze the document records holds `ticket` (queued) back at `wall_ms`: it
    /// is in force, and no ticket at or behind it in the queue overrides it
    /// ([`Ticket::override_freeze`]).
    pub fn frozen_for(&self, ticket: &Ticket, wall_ms: u64) -> bool {
        self.paused.as_ref().is_some_and(|p| p.holds_at(wall_ms)) && self.held_back(ticket)
    }

    /// Whether the freeze the document records, while it holds, holds `ticket` back: no ticket
    /// at or behind it in the queue overrides it.
    pub fn held_back(&self, ticket: &Ticket) -> bool {
        if self.paused.is_none() {
            return false;
        }
        let place = ticket.queue_key();
        !self.tickets.iter().any(|t| {
            t.state == TicketState::Queued && t.override_freeze.is_some() && t.queue_key() >= place
        })
    }

    /// The earliest store-clock deadline among live tickets: when something may next expire.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.tickets.iter().filter_map(|t| t.deadline_ms).min()
    }
}

/// Why bytes could not be read as a document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Written by a newer baton.
    #[error(
        "the document is in format {found}, newer than this baton understands ({FORMAT}); \
         upgrade baton on this machine to {} or later",
        release_reading(*.found)
    )]
    NewerFormat {
        /// The format found.
        found: u64,
    },
    /// Not a document, or one that breaks the invariants (ARCHITECTURE.md, *Invariants*).
    #[error("the document is corrupt ({0}); `baton cancel` cannot repair it: inspect the store")]
    Corrupt(String),
}

/// Reads a document, checking its format and its invariants.
pub fn decode(bytes: &[u8]) -> Result<Doc, DecodeError> {
    // Straight into the document: through a `serde_json::Value` first, a decode cost five
    // times an encode (BENCHMARKS.md, `codec/*`). Only a document that does not fit the shape
    // is read again, for its format alone: a newer baton's is refused as newer, not corrupt.
    let mut doc: Doc = match serde_json::from_slice(bytes) {
        Ok(doc) => doc,
        Err(error) => return Err(undecodable(bytes, &error)),
    };
    let format = u64::from(doc.format);
    if format > u64::from(FORMAT) {
        return Err(DecodeError::NewerFormat { found: format });
    }
    if format < 2 {
        // Format 1 remembered more marks and did not count finishes: keep the newest marks, and
        // count those as the finishes so far (a retry compares differences of the count).
        let excess = doc.finished.len().saturating_sub(FINISHED_REMEMBERED);
        doc.finished.drain(..excess);
        doc.finishes = doc.finished.len() as u64;
    }
    // An older format was read into the current shape; `encode` writes the format its content
    // needs.
    doc.format = FORMAT;
    if doc.finished.len() > FINISHED_REMEMBERED || doc.summary.recent_hold_ms.len() > HOLD_SAMPLES {
        return Err(DecodeError::Corrupt("summary longer than its bound".into()));
    }
    invariants::check(&doc).map_err(DecodeError::Corrupt)?;
    Ok(doc)
}

/// Why `bytes` are no document: written by a newer baton (its format number says so), not
/// JSON, or JSON of another shape.
fn undecodable(bytes: &[u8], error: &serde_json::Error) -> DecodeError {
    #[derive(Deserialize)]
    struct FormatOnly {
        format: Option<u64>,
    }
    match serde_json::from_slice::<FormatOnly>(bytes) {
        Ok(FormatOnly {
            format: Some(found),
        }) if found > u64::from(FORMAT) => DecodeError::NewerFormat { found },
        Ok(FormatOnly { format: Some(_) }) => DecodeError::Corrupt(error.to_string()),
        Ok(FormatOnly { format: None }) => DecodeError::Corrupt("no format number".into()),
        Err(e) if e.is_syntax() || e.is_eof() => DecodeError::Corrupt(format!("not JSON: {e}")),
        // JSON, but no object with a format number.
        Err(_) => DecodeError::Corrupt("no format number".into()),
    }
}

/// The encoded document is larger than [`DOC_MAX_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the key's document would be {bytes} bytes, over the {DOC_MAX_BYTES}-byte limit; \
     shorten contexts or let the queue drain"
)]
pub struct TooLarge {
    /// The size it would have had.
    pub bytes: usize,
}

/// Writes a document, refusing one over [`DOC_MAX_BYTES`].
///
/// A document is written in the oldest format that holds what it has ([`FORMAT_LOCKS`],
/// [`FORMAT_JOBS`], [`FORMAT_BACKLOG_TURNS`], [`FORMAT`]), so an older baton keeps working on every key it can.
pub fn encode(doc: &Doc) -> Result<Vec<u8>, TooLarge> {
    debug_assert_eq!(invariants::check(doc), Ok(()));
    let format = if doc.unsettled.as_ref().is_some_and(|u| !u.recent.is_empty()) {
        FORMAT
    } else if doc.backlog.as_ref().is_some_and(|b| b.waiters) {
        FORMAT_BACKLOG_TURNS
    } else if doc.backlog.is_some()
        || doc.once.is_some()
        || doc.outbox.is_some()
        || doc.paused.is_some()
        || doc
            .tickets
            .iter()
            .any(|t| t.job.is_some() || t.once.is_some() || t.override_freeze.is_some())
    {
        FORMAT_JOBS
    } else {
        FORMAT_LOCKS
    };
    let bytes = with_format_number(doc, format);
    if bytes.len() > DOC_MAX_BYTES {
        return Err(TooLarge { bytes: bytes.len() });
    }
    Ok(bytes)
}

/// `doc` as JSON, with `format` as its format number.
///
/// A document read is held in the newest format's shape, so its `format` field rarely says
/// what it is written in; cloning it to change one number cost as much as the encode itself
/// (`codec/encode` of BENCHMARKS.md). The field is declared first, so it opens the bytes
/// (`{"format":4,…`) and is written over there; should it ever not open them, the clone is the
/// way.
fn with_format_number(doc: &Doc, format: u32) -> Vec<u8> {
    // Serialising plain structs with string keys cannot fail.
    let mut bytes = serde_json::to_vec(doc).unwrap_or_default();
    if doc.format == format {
        return bytes;
    }
    let held = format!("{{\"format\":{},", doc.format);
    if !bytes.starts_with(held.as_bytes()) {
        return serde_json::to_vec(&Doc {
            format,
            ..doc.clone()
        })
        .unwrap_or_default();
    }
    let written = format!("{{\"format\":{format},");
    bytes.splice(..held.len(), written.into_bytes());
    bytes
}

/// The stored form of a token: the first 128 bits of its SHA-256, in hex. Reading the store
/// reveals no token.
pub fn token_hash(token: &str) -> String {
    hex::encode(&Sha256::digest(token.as_bytes())[..16])
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let doc = Doc::default();
        let bytes = encode(&doc).expect("small");
        assert_eq!(decode(&bytes), Ok(doc));
    }

    fn format_of(doc: &Doc) -> Option<u64> {
        let bytes = encode(doc).expect("encode");
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        value["format"].as_u64()
    }

    #[test]
    fn a_paused_document_is_written_in_the_format_older_batons_refuse() {
        let mut doc = Doc::default();
        assert_eq!(format_of(&doc), Some(u64::from(FORMAT_LOCKS)));
        doc.paused = Some(crate::freeze::Paused {
            target: "deploy/".into(),
            reason: "audit".into(),
            by: "ops".into(),
            since_ms: 1,
            until_ms: None,
        });
        assert_eq!(format_of(&doc), Some(u64::from(FORMAT_JOBS)));
        let back = decode(&encode(&doc).expect("encode")).expect("decode");
        assert_eq!(back.paused, doc.paused);
    }

    #[test]
    fn unsettled_turns_are_written_in_format_5_only_while_remembered() {
        let mut doc = Doc::default();
        let mut unsettled = crate::arrival::Unsettled::default();
        unsettled.record("t-1", &token_hash("secret"));
        doc.unsettled = Some(unsettled.clone());
        assert_eq!(format_of(&doc), Some(u64::from(FORMAT)));
        let back = decode(&encode(&doc).expect("encode")).expect("decode");
        assert_eq!(back.unsettled, doc.unsettled);
        assert!(unsettled.settle("t-1", &token_hash("secret")));
        doc.unsettled = Some(unsettled);
        assert_eq!(
            format_of(&doc),
            Some(u64::from(FORMAT_LOCKS)),
            "the count alone"
        );
        let back = decode(&encode(&doc).expect("encode")).expect("decode");
        assert_eq!(back.unsettled.map(|u| u.recorded), Some(1));
    }

    #[test]
    fn newer_and_corrupt_documents_are_refused() {
        let check = |bytes: &[u8], expect: &str| {
            let err = decode(bytes).expect_err("must be refused").to_string();
            assert!(err.contains(expect), "{err} does not mention {expect}");
        };
        check(b"{\"format\": 6, \"anything\": true}", "newer");
        check(b"", "not JSON");
        check(b"\xff\xfe", "not JSON");
        check(b"[]", "no format");
        check(b"{\"format\": 1}", "corrupt");
        check(
            b"{\"format\":1,\"fence\":-1,\"limit\":1,\"next_arrival\":1}",
            "corrupt",
        );
    }

    fn doc_with(finished: &str) -> Vec<u8> {
        format!(
            "{{\"format\":2,\"fence\":3,\"limit\":1,\"next_arrival\":4,\"finishes\":1,\"finished\":[{finished}]}}"
        )
        .into_bytes()
    }

    #[test]
    fn marks_are_short_strings_that_round_trip() {
        let hash = token_hash("0123456789abcdef0123456789abcdef");
        let mut doc = Doc::default();
        for (i, (outcome, forced, attempt)) in [
            (Outcome::Succeeded, false, Some("6842b38c55562642")),
            (Outcome::Cancelled, true, Some("a")),
            (Outcome::Expired, false, None),
            (Outcome::Superseded, false, None),
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("t-{i:016x}");
            doc.finished
                .push(FinishedMark::new(&id, &hash, outcome, forced, attempt));
            doc.finishes += 1;
        }
        let bytes = encode(&doc).expect("small");
        let text = String::from_utf8(bytes.clone()).expect("JSON is UTF-8");
        let expected_first = format!(
            "\"s:t-0000000000000000:{}:{}\"",
            &hash[..TAG_HEX],
            attempt_tag("6842b38c55562642")
        );
        assert!(text.contains(&expected_first), "{text}");
        assert!(text.contains(":t-0000000000000001:"), "{text}");
        assert!(
            text.contains("\"C:t-0000000000000001:"),
            "forced is upper case: {text}"
        );
        assert_eq!(decode(&bytes), Ok(doc.clone()));
        let mark = &doc.finished[0];
        assert!(mark.has_token_hash(&hash));
        assert!(!mark.has_token_hash(&token_hash("another")));
        assert!(mark.ended_by("6842b38c55562642"));
        assert!(!mark.ended_by("6842b38c55562643"));
        assert!(!doc.finished[2].ended_by("6842b38c55562642"));
        // One mark is at most 3 + 64 + 12 + 12 bytes; a usual one is under 50.
        assert!(expected_first.len() < 50, "{expected_first}");
    }

    #[test]
    fn format_one_marks_are_read_and_shortened() {
        let hash = token_hash("tok");
        let old = format!(
            "{{\"format\":1,\"fence\":3,\"limit\":1,\"next_arrival\":4,\"finished\":[\
             {{\"id\":\"t-1\",\"token_hash\":\"{hash}\",\"outcome\":\"expired\"}},\
             {{\"id\":\"t-2\",\"token_hash\":\"{hash}\",\"outcome\":\"cancelled\",\
               \"forced\":true,\"attempt\":\"att\"}}]}}"
        );
        let doc = decode(old.as_bytes()).expect("format 1 is read");
        assert_eq!(
            doc.finished,
            [
                FinishedMark::new("t-1", &hash, Outcome::Expired, false, None),
                FinishedMark::new("t-2", &hash, Outcome::Cancelled, true, Some("att")),
            ]
        );
        assert!(doc.finished[1].ended_by("att"));
        let again = encode(&doc).expect("small");
        assert!(String::from_utf8_lossy(&again).contains("\"format\":2"));
        assert_eq!(doc.format, FORMAT, "read into the current shape");
    }

    #[test]
    fn malformed_marks_are_corrupt_not_panics() {
        for mark in [
            "\"\"",
            "\"s\"",
            "\"s:\"",
            "\"q:t-1:abc\"",
            "\"ss:t-1:abc\"",
            "\"s::abc\"",
            "\"s:t-1:abc:def:ghi\"",
            "\"é:t-1:abc\"",
            "7",
            "{\"id\":\"t-1\"}",
        ] {
            let err = decode(&doc_with(mark)).expect_err(mark).to_string();
            assert!(err.contains("corrupt"), "{mark}: {err}");
        }
        assert!(decode(&doc_with("\"s:t-1:abc\"")).is_ok());
    }

    #[test]
    fn hashes_and_tags_keep_their_stored_spelling() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad:
        // stored hashes and tags are its first bytes in lower-case hex, in every release.
        assert_eq!(token_hash("abc"), "ba7816bf8f01cfea414140de5dae2223");
        assert_eq!(attempt_tag("abc"), "ba7816bf8f01");
        let mark = FinishedMark::new(
            "t-1",
            &token_hash("abc"),
            Outcome::Failed,
            true,
            Some("abc"),
        );
        assert_eq!(
            serde_json::to_string(&mark).expect("a string"),
            "\"F:t-1:ba7816bf8f01:ba7816bf8f01\""
        );
    }

    #[test]
    fn a_document_read_in_the_newest_shape_is_written_in_its_own_format_without_a_clone() {
        let hash = token_hash("tok");
        let mut doc = Doc::default();
        doc.finished.push(FinishedMark::new(
            "t-1",
            &hash,
            Outcome::Expired,
            false,
            None,
        ));
        doc.finishes = 1;
        doc.format = FORMAT;
        let held = serde_json::to_vec(&doc).expect("JSON");
        assert!(
            held.starts_with(format!("{{\"format\":{FORMAT},").as_bytes()),
            "the format number no longer opens the bytes, so every encode clones: {}",
            String::from_utf8_lossy(&held)
        );
        let cloned = serde_json::to_vec(&Doc {
            format: FORMAT_LOCKS,
            ..doc.clone()
        })
        .expect("JSON");
        assert_eq!(encode(&doc), Ok(cloned));
        assert_eq!(with_format_number(&doc, FORMAT), held);
    }

    #[test]
    fn token_hash_is_stable_and_hides_the_token() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(token_hash(token), token_hash(token));
        assert_eq!(token_hash(token).len(), 32);
        assert_ne!(
            token_hash(token),
            token_hash("0123456789abcdef0123456789abcdee")
        );
        assert!(!token_hash(token).contains(token));
    }
}
