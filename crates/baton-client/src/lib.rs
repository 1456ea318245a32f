//! baton's client library: take fair, fenced turns at keys through any store.
//!
//! # Layout
//!
//! - [`turn`]: the vocabulary of a turn — options, pending tickets, leases, renewals — and the
//!   pure rules that build a lease from a store's answer; imports nothing else of the client.
//! - [`coordinator`]: the one object through which the client reads and writes a store; it
//!   chooses the transport once.
//! - `executor`: one interface, three transports — optimistic CAS (load → `core::apply` →
//!   CAS, with a cached document), SQLite's locked update, and `baton serve` — for running an
//!   operation, writing a value, changing the settings and putting a record.
//! - `retry`: the one retry policy: conflicts with backoff up to a limit, lost answers sent
//!   again marked as retries, pauses through a failing store.
//! - `known`: what a coordinator last saw of each key (document, version, observer).
//! - `settings`: the settings document (rules and freezes): a cache of it, and changes by CAS.
//! - `delivery`: delivering keys' events to the rules' URLs, after the write.
//! - `http`: the HTTP client's settings (deliveries, the transport to `baton serve`).
//! - [`acquire`](mod@acquire): the calls — waiting for a turn (one key, or several in sorted
//!   order), release, renew — and the lease they give.
//! - `hold`: the writes a holder makes by its token: renew, release, an end retried while the
//!   lease stands.
//! - `waiter`: one wait as a small state machine: enqueue, sleep (poll, push, expiry, timeout),
//!   look, claim or start at a fresh grant, give up.
//! - [`jobs`]: submit, claim, complete and wait for jobs: work items queued per key, and how a
//!   worker finds keys that are due.
//! - [`freeze`](mod@freeze): `baton pause` and `resume`: the freezes, and writing the keys they cover.
//! - [`kv`]: shared values: get, set (conditional, fenced, expiring), delete, list.
//! - [`notify`]: notification rules and delivery, as the CLI uses them.
//! - [`once`](mod@once): run-once and sequences: judge, wait, settle, run, and [`once()`].
//! - [`remote`]: `--store http(s)://…`, a store reached through `baton serve`: reads come back
//!   as stored; writes go as operations (a request to run, a value's write, a job's record),
//!   never as bytes.
//! - [`permission`]: what a server's refusal for want of a token or scope says (one formatter
//!   for both sides).
//! - [`poll`] (in [`turn`]): how often a waiter reads: by place in the queue on stores that
//!   cannot push, with jitter and a documented bound on requests per minute.
//! - [`heartbeat`]: renewing held leases in the background, concurrently, on a clock that
//!   counts suspended time, and the lost-lease signal.
//! - `follow`: a holder on a store that pushes documents keeps its key's cached document
//!   current, so its release is one CAS.
//! - [`status`]: a key's standing as people read it (`baton status` and the dashboard).
//! - [`reap`]: frees the turns of CI runs that have ended, asking each CI provider (`baton reap`).
//! - [`time`]: the local clock safety deadlines are kept on ([`LocalClock`]), wall time.
//! - [`ids`] (in [`turn`]): ticket ids, tokens and attempt ids, made before the first attempt.
//! - [`durations`]: durations and times as people write them, bounded where they are parsed
//!   (the CLI's flags and the server's request bodies).
//! - [`error`]: what can go wrong, in words a CLI can print.
//! - `claim_races`: whether a process's workers lost claims lately (their looks then spread).
//! - `traced`: `-vv`, every request made of the store, logged (a wrapper, only when asked for).
//!
//! What `-v` shows is logged at info in one place each: an operation in
//! [`Coordinator::execute`] (`executor::execute`; and a read in [`Coordinator::read`]), a wait's transitions in
//! `waiter`, a lost lease in [`heartbeat`], a notification's delivery in [`notify`].
#![deny(missing_docs)]

pub mod acquire;
mod claim_races;
pub mod coordinator;
mod delivery;
pub mod durations;
pub mod error;
mod executor;
mod follow;
pub mod freeze;
pub mod heartbeat;
mod hold;
pub mod http;
pub mod jobs;
mod known;
pub mod kv;
pub mod notify;
pub mod once;
pub mod permission;
pub mod reap;
pub mod remote;
mod retry;
mod segments;
mod settings;
pub mod status;
pub mod time;
mod traced;
pub mod turn;
mod waiter;

pub use coordinator::{Coordinator, Executed, KeySnapshot};
pub use error::ClientError;
pub use heartbeat::{Heartbeat, LeaseGuard, Lost, StopAsked};
pub use jobs::{
    ClaimOptions, Job, JobEnd, JobStanding, KeyPatterns, ReadyKey, RunReport, SubmitOptions,
};
pub use once::{once, NotRun, OnceOptions, OnceOutcome, OnceRun};
pub use time::{wall_ms, BootClock, LocalClock};
pub use turn::{ids, poll};
pub use turn::{AcquireOptions, Lease, WaitProgress};
