//! The pure core of baton: every rule about tickets, leases, fences and queue order.
//!
//! Nothing here does I/O, awaits, or reads a clock. The coordinator loads a key's document from
//! a store, calls [`apply()`] with an operation and a [`Clock`] it read itself, writes the new
//! document back by compare-and-swap, and appends the [`Finished`] tickets to the key's history.
//! Like raft-rs, the caller ticks it; it only computes.
//!
//! # Layout
//!
//! - [`limits`]: every limit, and the checks of input at the edge.
//! - [`duration`]: the one way a duration is written for people (`7d`, `1h30m`, `850ms`).
//! - [`doc`]: the hot document of a key (live tickets, fence counter, summary) and its encoding.
//! - [`op`]: the operations and their replies.
//! - [`order`]: how `--order` values compare (numbers as integers, text as strings).
//! - [`clock`]: the two clocks: the store's time, and observation of heartbeats.
//! - [`lease`]: the timing rules that decide safety: when a phase ends, how long a client may
//!   believe it holds, when a grant seen unclaimed surely stands.
//! - [`apply`](mod@apply): `apply(doc, request, clock)`, the state machine, one file per op
//!   family.
//! - [`backlog`]: jobs queued behind a key's window, kept outside its hot document.
//! - [`arrival`]: enqueues written beside a key's document, taken in by its next writer.
//! - [`job`]: what a job is beside a ticket: readiness, backoff, releases back, run marks.
//! - [`once`]: run-once and sequences: what a key remembers of its runs, and the verdict.
//! - [`kv`]: shared values: one document per name, judged by [`kv::write`] before each CAS.
//! - [`names`]: the store names baton keeps for its own documents (values), apart from keys.
//! - [`notify`]: notification events, the rules that want them, each key's outbox and each
//!   rule's cursor.
//! - [`settings`]: the store's settings document, which carries the notification rules and the
//!   freezes.
//! - [`invariants`]: the per-document invariants (numbered in ARCHITECTURE.md) as checks, run
//!   on every decode and after every apply in debug builds.
//! - [`history`]: the record of a finished ticket, as appended to the history log.
//! - [`estimate`]: the wait estimate from the key's recent hold times.
//! - [`freeze`]: freeze windows (`baton pause`): which freeze holds a key back, and when.
//! - [`wake`]: whom a write must wake: the waiters whose own ticket it changed, or everyone.
//! - [`check`]: fence checks for scripts: does the turn with fence F still hold the key?
//! - [`ci_run`]: which CI run holds a turn, as `baton reap` asks its provider.
#![deny(missing_docs)]

pub mod apply;
pub mod arrival;
pub mod backlog;
pub mod check;
pub mod ci_run;
pub mod clock;
pub mod doc;
pub mod duration;
pub mod estimate;
pub mod freeze;
pub mod history;
pub mod invariants;
pub mod job;
pub mod kv;
pub mod lease;
pub mod limits;
pub mod names;
pub mod notify;
pub mod once;
pub mod op;
pub mod order;
pub mod pool;
pub mod settings;
pub mod wake;

pub use apply::{apply, apply_with, Applied, Inputs};
pub use clock::{Clock, Observer};
pub use doc::{decode, encode, token_hash, DecodeError, Doc, Mode, Outcome, Ticket, TicketState};
pub use history::Finished;
pub use job::{JobResult, JobSpec, JobState};
pub use once::{OnceRecord, OnceSpec, Verdict};
pub use op::{
    CancelledTicket, Enqueue, Op, Refusal, Reply, Request, Submit, TicketStatus, TicketView,
};
