//! baton's client library: take fair, fenced turns at keys through any store.
//!
//! # Layout
//!
//! - [`coordinator`]: load → `core::apply` → CAS, with a cached document, retry on conflict with
//!   jitter, and ambiguous outcomes recognised by re-reading.
//! - [`acquire`](mod@acquire): waiting for a turn (one key, or several in sorted order), with
//!   timeout, wake-ups at the holder's deadline, and reads at [`poll`]'s intervals.
//! - [`poll`]: how often a waiter reads: by place in the queue on stores that cannot push,
//!   with jitter and a documented bound on requests per minute.
//! - [`heartbeat`]: renewing held leases in the background, and the lost-lease signal.
//! - [`ids`]: ticket ids, tokens and attempt ids, made before the first attempt.
//! - [`error`]: what can go wrong, in words a CLI can print.
#![deny(missing_docs)]

pub mod acquire;
pub mod coordinator;
pub mod error;
pub mod heartbeat;
pub mod ids;
pub mod poll;
mod time;

pub use acquire::{AcquireOptions, Lease, WaitProgress};
pub use coordinator::{Coordinator, Executed, KeySnapshot};
pub use error::ClientError;
pub use heartbeat::{Heartbeat, LeaseGuard, Lost};
pub use time::wall_ms;
