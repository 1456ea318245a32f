//! The client's one retry policy: which failures are tried again, how often, after what pause,
//! and what a write whose answer was lost means. Every executor and every loop that writes
//! through a failing store uses it; none writes a retry loop's rules of its own.
//!
//! - **Conflicts** ([`Conflicts`]): a compare-and-swap that lost to a concurrent write is
//!   computed again from the document that won, at once the first times, then after a short
//!   random pause (and from a fresh read: the document a conflict returned is stale after a
//!   pause on a busy key), up to a limit per kind of write ([`OPERATION_CONFLICTS`],
//!   [`VALUE_CONFLICTS`], [`SETTINGS_CONFLICTS`]), past which the write is reported as
//!   contention.
//! - **Lost answers** ([`LostAnswers`]): a write whose answer was lost may have landed. It is
//!   sent again, marked so that the other side recognises its own earlier attempt (a request's
//!   `finishes_seen`, a value write's `seen_version`, the settings' bytes), at most
//!   [`MAX_LOST_ANSWERS`] times in a row through a server.
//! - **A failing store** ([`retry_pause`], [`Doubling`]): a transient error
//!   ([`ClientError::is_transient`]) is ridden out with a growing pause while what is at stake
//!   (a wait, a lease) still stands.

use std::time::Duration;

use crate::error::ClientError;

/// How many conflicting writes in a row an operation on a key tolerates before giving up.
pub const OPERATION_CONFLICTS: u32 = 200;
/// How many conflicting writes in a row a shared value's write tolerates.
pub const VALUE_CONFLICTS: u32 = 64;
/// How many conflicting writes in a row a change of the settings document tolerates.
pub const SETTINGS_CONFLICTS: u32 = 64;

/// How many answers in a row to one write sent through a server may be lost before the loss
/// is reported (each is retried at once: a server that cannot be reached at all is reported
/// as unavailable without a retry, since nothing was sent).
pub const MAX_LOST_ANSWERS: u32 = 5;

/// Conflicting writes of one call, against its limit.
#[derive(Debug)]
pub struct Conflicts {
    seen: u32,
    limit: u32,
}

/// What to do after a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterConflict {
    /// Compute again at once, from the document the conflict returned.
    Again,
    /// A pause was taken: compute again from a fresh read.
    ReadAgain,
}

impl Conflicts {
    /// No conflict yet; at most `limit` in a row.
    pub fn new(limit: u32) -> Conflicts {
        Conflicts { seen: 0, limit }
    }

    /// Counts a conflict on `key`: [`ClientError::Contention`] once the limit is reached; else
    /// what to do, after the pause this conflict calls for (none the first two times, then a
    /// random one of up to 2^n ms, at most 50 ms, spreading writers that keep colliding).
    pub async fn lost_one(&mut self, key: &str) -> Result<AfterConflict, ClientError> {
        self.seen += 1;
        if self.seen >= self.limit {
            return Err(ClientError::Contention {
                key: key.to_string(),
                attempts: self.seen,
            });
        }
        if self.seen <= 2 {
            return Ok(AfterConflict::Again);
        }
        let cap_ms = (1u64 << self.seen.min(6)).min(50);
        let ms = rand::random_range(0..=cap_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        // The document the conflict returned is stale after the pause on a busy key: retrying
        // with it loses again, nearly always, and the client starves (measured in
        // BENCHMARKS.md). Read afresh instead.
        Ok(AfterConflict::ReadAgain)
    }
}

/// Answers lost in a row to one write sent through a server.
#[derive(Debug, Default)]
pub struct LostAnswers(u32);

impl LostAnswers {
    /// Counts a lost answer: `error` once [`MAX_LOST_ANSWERS`] were lost, else `Ok` (send the
    /// write again, marked as a retry).
    pub fn lost_one<E>(&mut self, error: E) -> Result<(), E> {
        self.0 += 1;
        if self.0 >= MAX_LOST_ANSWERS {
            return Err(error);
        }
        Ok(())
    }
}

/// The pause before trying a failing store again, `failing_for` into the outage: a quarter of
/// it, 100 ms to 2 s — quick after a blip, sparing after a long one.
pub fn retry_pause(failing_for: Duration) -> Duration {
    (failing_for / 4).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// A pause that doubles after each try, from 100 ms up to 1 s: for a write sent again while a
/// lease stands (an end, a run's report), where each try must leave time for the next.
#[derive(Clone, Copy, Debug)]
pub struct Doubling(Duration);

impl Default for Doubling {
    fn default() -> Self {
        Doubling(Duration::from_millis(100))
    }
}

impl Doubling {
    /// The pause before the next try.
    pub fn pause(&self) -> Duration {
        self.0
    }

    /// Sleeps the pause, and doubles it for the next time.
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(1));
    }
}

/// The pause before a renewal of a lease of `ttl_ms` is tried again after it failed: a tenth of
/// the TTL, 100 ms to 1 s.
pub fn renewal_retry_in_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 10).clamp(100, 1_000)
}
