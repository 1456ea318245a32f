//! The vocabulary of a turn: the types a turn is made of and the pure rules that build them.
//!
//! - [`options`](AcquireOptions): how a caller wants to wait and hold, and where a wait stands
//!   ([`WaitProgress`]).
//! - `lease`: a ticket about to be enqueued ([`Pending`]), a held turn ([`Lease`]) and a
//!   renewal's confirmation ([`Renewed`]), each built here and only here from a store's answer
//!   ([`WriteAnswer`]), with when to renew ([`renew_at_ms`], [`refresh_every`]).
//! - [`ids`]: ticket ids, tokens and attempt ids, made before the first attempt.
//! - [`poll`]: how often a waiter reads.
//!
//! **Imports nothing else of the client**: everything that waits (`waiter`), keeps a lease
//! alive (`heartbeat`), claims jobs (`jobs`) or runs once (`once`) speaks this vocabulary, so
//! none of them has to import another to name a lease. The safety rules the builders apply are
//! the core's ([`baton_core::lease`]).

pub mod ids;
mod lease;
mod options;
pub mod poll;

pub use lease::{
    refresh_every, release_request, renew_at_ms, Lease, Now, Pending, Renewed, WriteAnswer,
};
pub use options::{AcquireOptions, HolderView, ProgressFn, WaitProgress};
