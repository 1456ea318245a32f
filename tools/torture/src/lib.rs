//! The torture harness: what baton's clients protect, and the checker that proves
//! from its records alone that they were protected.
//!
//! - [`resource`]: the protected resource every client "writes" to with its fence. For a mutex
//!   key it accepts a write only with a fence at least the highest it has accepted, so a holder
//!   that lost its lease while paused is fenced off; it records every accepted interval.
//! - [`checker`]: reads the records, the key's history and what is still live, and lists every
//!   violation: two holds overlapping on a mutex, more than the limit on a semaphore, shared
//!   beside normal, a slot of a pool held twice, a fence lower than an earlier one, a ticket lost or ended twice, a grant
//!   that jumped the queue. It trusts nothing the
//!   resource decided: a resource that accepted a stale fence is caught too.
//! - [`proxy`]: a TCP fault proxy between clients and a store: latency, cut connections, a
//!   black hole for a while, lost replies to writes, a hook before a reply to a write.
//! - [`procfs`]: which client process owns a connection (the TCP tables and `/proc/PID/fd`),
//!   its children, whether it is stopped.
//!
//! - [`faults`]: the faults and the seeded schedule that picks them.
//! - [`work`]: the holder's side of the resource: write with the fence until the hold is over.
//!
//! The binary (`src/main.rs`, `src/harness/`, `src/library.rs`, `src/matrix.rs`) runs real clients, the CLI's
//! `baton run` and the library, under those faults and feeds the checker.

pub mod checker;
pub mod faults;
pub mod procfs;
pub mod proxy;
pub mod resource;
pub mod work;
pub mod work_checker;

/// The resource of one slot of a pool key: each slot is a resource of its own that takes one
/// writer at a time and refuses a fence below the highest it has accepted, as a test device or
/// a staging environment remembers who last deployed to it.
pub fn slot_resource(key: &str, slot: &str) -> String {
    format!("{key}@{slot}")
}

/// The pool key a hold of `resource` (a key, or a slot's resource) counts against.
pub fn pool_of(resource: &str) -> &str {
    resource.split_once('@').map_or(resource, |(key, _)| key)
}

/// How a ticket holds its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Exclusive among normal holders, up to the key's limit.
    Normal,
    /// Beside other shared holders, never beside a normal one.
    Shared,
}

/// One accepted hold of a key by a ticket, from its first accepted write to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The key.
    pub key: String,
    /// The ticket that held it.
    pub ticket: String,
    /// The client process that held it (`cC-rR`: client C's round R).
    pub who: String,
    /// Its fence.
    pub fence: u64,
    /// How it held.
    pub mode: Mode,
    /// When the resource accepted its first write (ns, one clock for the whole run).
    pub start_ns: u64,
    /// When it said it was done (ns): the interval is `[start_ns, end_ns)`.
    pub end_ns: u64,
}
