//! Ticket ids, tokens and attempt ids.
//!
//! All are made by the client before its first attempt, so a retry after an ambiguous failure
//! names the same ticket and the same attempt, and the core recognises it.

/// A new public ticket id: `t-` and 16 hex digits (64 random bits: unique per key in practice,
/// and a duplicate is refused by the core, never merged).
pub fn new_ticket_id() -> String {
    format!("t-{:016x}", rand::random::<u64>())
}

/// A new job id: `j-` and 16 hex digits (as [`new_ticket_id`]).
pub fn new_job_id() -> String {
    format!("j-{:016x}", rand::random::<u64>())
}

/// A new secret token: 128 random bits as 32 hex digits.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A new attempt id.
pub fn new_attempt_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}
