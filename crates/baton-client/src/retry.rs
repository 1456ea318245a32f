//! The client's one retry policy: which failures are tried again, how often, after what pause,
//! and what a write whose answer was lost means. Every executor and every loop that writes
//! through a failing store uses it; none writes a retry loop's rules of its own.
//!
//! - **Conflicts** ([`Conflicts`]): a compare-and-swap that lost to a concurrent write is
//!   computed again from the document that won, at once the first times, then after a short
//!   random pause (and from a fresh read: the document a conflict returned is stale after a
//!   pause on a busy key), up to a limit per kind of write ([`OPERATION_CONFLICTS`],
//!   [`VALUE_CONFLICTS`], [`SETTINGS_CONFLICTS`]), past which the write is reported as
//!   contention. A write that only puts a ticket in a queue behind a holder ([`queues_only`])
//!   yields instead ([`Conflicts::yield_one`]): nobody waits for it, while the holders' and
//!   waiters' own writes on the same key do, so it backs off from its first few conflicts.
//! - **Lost answers** ([`LostAnswers`]): a write whose answer was lost may have landed. It is
//!   sent again, marked so that the other side recognises its own earlier attempt (a request's
//!   `finishes_seen`, a value write's `seen_version`, the settings' bytes), at most
//!   [`MAX_LOST_ANSWERS`] times in a row through a server.
//! - **A failing store** ([`retry_pause`], [`Doubling`]): a transient error
//!   ([`ClientError::is_transient`]) is ridden out with a growing pause while what is at stake
//!   (a wait, a lease) still stands.

use std::time::Duration;

use baton_core::{Applied, Op, Request};

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

/// The longest pause of a yielding write ([`Conflicts::yield_one`]).
pub const YIELD_MAX: Duration = Duration::from_millis(50);

/// Whether `applied`, computed for `request`, only puts a new ticket in the queue: an enqueue
/// that granted nothing to its own ticket. Such a write yields after a conflict
/// ([`Conflicts::yield_one`]); any other (a release, a renewal, a claim, an enqueue that takes
/// the turn at once) is someone's turn or lease, and is tried again at once.
pub fn queues_only(request: &Request, applied: &Applied) -> bool {
    match &request.op {
        Op::Enqueue(enqueue) => !applied.granted.iter().any(|(id, _)| *id == enqueue.id),
        _ => false,
    }
}

/// How many conflicts in a row a write that only queues yields to; later ones it retries as
/// any write does ([`Conflicts::lost_one`]), so a client that keeps losing does not keep
/// falling behind the others.
pub const YIELDS_MAX: u32 = 4;

impl Conflicts {
    /// Whether the next conflict may still be yielded to ([`YIELDS_MAX`]).
    pub fn may_yield(&self) -> bool {
        self.seen < YIELDS_MAX
    }

    /// Counts a conflict of a write that only queues a ticket ([`queues_only`]) and whose CAS
    /// took `took`: [`ClientError::Contention`] at the limit, else a random pause of up to
    /// `took` × 2^n (n: the conflicts so far), at most [`YIELD_MAX`], after which the write is
    /// computed again from the document the conflict returned.
    ///
    /// On a key that many clients take and give back in turn, each turn costs two writes, the
    /// holder's release and someone's enqueue; an enqueue retried at once meets the next
    /// release, and both lose as often as they win. Enqueues that yield, each for longer the
    /// more it lost, leave the releases a clear run: fewer lost writes per grant, more grants
    /// per second (measured in BENCHMARKS.md, B3). Only the first [`YIELDS_MAX`] conflicts
    /// yield: yielding without a bound lost fewer writes still, but a client that kept losing
    /// kept falling behind the others in grants. The document the conflict returned is used
    /// after the pause rather than a fresh read: if it went stale, the CAS that finds out costs
    /// what the read would have, and returns the current one.
    pub async fn yield_one(&mut self, key: &str, took: Duration) -> Result<(), ClientError> {
        self.seen += 1;
        if self.seen >= self.limit {
            return Err(ClientError::Contention {
                key: key.to_string(),
                attempts: self.seen,
            });
        }
        tokio::time::sleep(yield_pause(self.seen, took, rand::random::<f64>())).await;
        Ok(())
    }
}

/// The pause after the `seen`-th conflict of a yielding write whose CAS took `took`, at the
/// random point `at` (0 to 1) of its range.
fn yield_pause(seen: u32, took: Duration, at: f64) -> Duration {
    let ceiling = took.saturating_mul(1u32 << seen.min(16)).min(YIELD_MAX);
    ceiling.mul_f64(at.clamp(0.0, 1.0))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_yielding_write_pauses_longer_the_more_it_lost_up_to_the_cap() {
        let took = Duration::from_millis(1);
        assert_eq!(yield_pause(1, took, 1.0), Duration::from_millis(2));
        assert_eq!(yield_pause(3, took, 1.0), Duration::from_millis(8));
        assert_eq!(yield_pause(3, took, 0.5), Duration::from_millis(4));
        assert_eq!(yield_pause(3, took, 0.0), Duration::ZERO);
        assert_eq!(yield_pause(6, took, 1.0), YIELD_MAX);
        assert_eq!(yield_pause(u32::MAX, Duration::MAX, 1.0), YIELD_MAX);
        assert_eq!(yield_pause(2, took, 7.0), Duration::from_millis(4));
    }

    /// The enqueue of a new ticket at `k`, as the library sends it, and the ticket's token.
    fn enqueue() -> (Request, String) {
        let pending = crate::turn::Pending::new("k");
        let op = crate::waiter::enqueue_op(&pending, &crate::turn::AcquireOptions::default());
        (Request::new("a", Op::Enqueue(op)), pending.token)
    }

    #[test]
    fn only_an_enqueue_that_queues_its_ticket_yields() {
        let clock = baton_core::Clock::Store {
            now_ms: 1_000,
            uncertain_ms: 0,
            epoch: "e",
            wall_ms: 1_000,
        };
        let (first, token) = enqueue();
        let granted = baton_core::apply(None, &first, &clock).unwrap();
        assert!(
            !queues_only(&first, &granted),
            "the turn at once is not yielded"
        );
        let (second, _) = enqueue();
        let queued = baton_core::apply(Some(&granted.doc), &second, &clock).unwrap();
        assert!(
            queues_only(&second, &queued),
            "behind a holder it only queues"
        );
        let release = Request::new(
            "a-r",
            Op::Release {
                token,
                outcome: baton_core::Outcome::Succeeded,
                reason: None,
            },
        );
        let released = baton_core::apply(Some(&queued.doc), &release, &clock).unwrap();
        assert!(!queues_only(&release, &released), "a release never yields");
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_first_conflicts_are_yielded_to() {
        let mut conflicts = Conflicts::new(OPERATION_CONFLICTS);
        for _ in 0..YIELDS_MAX {
            assert!(conflicts.may_yield());
            conflicts
                .yield_one("k", Duration::from_millis(1))
                .await
                .unwrap();
        }
        assert!(!conflicts.may_yield());
    }

    #[tokio::test(start_paused = true)]
    async fn a_yielding_write_counts_against_the_limit_of_conflicts() {
        let mut conflicts = Conflicts::new(3);
        let took = Duration::from_millis(1);
        conflicts.yield_one("k", took).await.unwrap();
        conflicts.yield_one("k", took).await.unwrap();
        let error = conflicts.yield_one("k", took).await.unwrap_err();
        assert!(
            matches!(error, ClientError::Contention { attempts: 3, .. }),
            "{error:?}"
        );
    }
}
