//! The timing rules that decide safety: when a phase ends, and how long a client may believe
//! it holds.
//!
//! Two kinds of time meet here, and every function says which it takes:
//! - **the store's clock** (`*_store_ms`): deadlines stored in the document, readings of the
//!   store's time. A reading is never ahead of the store, and may be behind it by `behind_ms`
//!   (the round trip of the reply that carried it) — and, on a coarse clock such as S3's
//!   whole-second `Date`, a deadline set from it may be `uncertain_ms` early.
//! - **the client's local clock** (`*_local_ms`): a clock that never steps and keeps counting
//!   while the machine is suspended (the client uses `CLOCK_BOOTTIME`), on which a client keeps
//!   its own deadlines.
//!
//! The rule behind every bound: a phase of `phase_ms` that a write set stands, for every
//! participant, until `phase_ms` after the *earliest* moment its deadline could have been fixed,
//! less how far the store may have been ahead of the reading used — never from when the reply
//! arrived or was handled. A client stopped between its write landing and reading the reply, or
//! whose write sat in a network, has used up that time already.
//!
//! The core's `apply`, the client library, `baton status` and the model check all call these:
//! no rule here is written twice.

use crate::op::Op;

/// The margin by which a holder gives up a phase before it can end for anyone else: a tenth of
/// the phase, at least 300 ms, at most half of it. It covers the store's and the process's rate
/// differences and the time between a local check and acting on it.
pub fn safety_margin_ms(phase_ms: u64) -> u64 {
    (phase_ms / 10).max(300).min(phase_ms / 2)
}

/// The claim window a waiter asks for, from the longest interval between two of its reads
/// (`poll_max_ms`): twice that (its longest jittered interval is 1.2 times the bound) plus five
/// seconds for the read that shows the grant and the write that claims it. Two seconds were
/// not enough: on a loaded 2-core runner a store's two round trips took longer, and live
/// waiters lost turns they had been granted. The window only costs when the granted waiter
/// died, which also cost its waiter lease, a minute by default.
pub fn claim_window_ms(poll_max_ms: u64) -> u64 {
    poll_max_ms.saturating_mul(2).saturating_add(5_000)
}

/// On the store's clock, the first reading at which a phase with deadline `deadline_store_ms`
/// has ended: the deadline plus the clock's uncertainty (a deadline set from a coarse reading
/// may be that early, so every participant waits it out and no phase is cut short).
pub fn phase_ends_store_ms(deadline_store_ms: u64, uncertain_ms: u64) -> u64 {
    deadline_store_ms.saturating_add(uncertain_ms)
}

/// Whether a phase with deadline `deadline_store_ms` has ended at the store-clock reading
/// `now_store_ms` ([`phase_ends_store_ms`]).
pub fn phase_ended_on_store_clock(
    now_store_ms: u64,
    deadline_store_ms: u64,
    uncertain_ms: u64,
) -> bool {
    now_store_ms >= phase_ends_store_ms(deadline_store_ms, uncertain_ms)
}

/// When an observer that first saw a ticket's current heartbeat at `seen_since_local_ms`
/// judges its phase of `phase_ms` ended, on its own monotonic clock (stores without a clock: it
/// must have seen the heartbeat unchanged for the whole phase).
pub fn observed_phase_ends_local_ms(seen_since_local_ms: u64, phase_ms: u64) -> u64 {
    seen_since_local_ms.saturating_add(phase_ms)
}

/// Whether such an observer judges the phase ended at `now_local_ms`
/// ([`observed_phase_ends_local_ms`]).
pub fn phase_ended_by_observation(
    seen_since_local_ms: u64,
    now_local_ms: u64,
    phase_ms: u64,
) -> bool {
    now_local_ms >= observed_phase_ends_local_ms(seen_since_local_ms, phase_ms)
}

/// What a client knows of a write it made: the local instant `basis_local_ms` taken *before*
/// it read the store's clock for the write (or, on a store without a clock, before it sent the
/// write), and how far that reading may have been behind the store (`behind_ms`; 0 by
/// observation, whose watchers cannot see the write before it lands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Basis {
    /// Local clock, ms, before the reading (or the send).
    pub basis_local_ms: u64,
    /// How far the store's time may have been ahead of the reading.
    pub behind_ms: u64,
}

impl Basis {
    /// Until when, on the local clock, a phase of `phase_ms` this write set surely stands for
    /// every participant. The store's time at the basis was at most `reading + behind_ms`, and
    /// the deadline is `reading + phase_ms`; so no participant (whose readings are never ahead
    /// of the store) ends it before `basis + phase_ms - behind_ms`.
    pub fn phase_stands_until_local_ms(&self, phase_ms: u64) -> u64 {
        self.basis_local_ms
            .saturating_add(phase_ms)
            .saturating_sub(self.behind_ms)
    }

    /// Until when the holder itself may act on a lease of `ttl_ms` this write set: the bound
    /// less the [`safety_margin_ms`]. A holder past it is lost, whatever a later reply says.
    pub fn holds_until_local_ms(&self, ttl_ms: u64) -> u64 {
        self.phase_stands_until_local_ms(ttl_ms)
            .saturating_sub(safety_margin_ms(ttl_ms))
    }
}

/// On a store with a clock, until when (local clock) no participant can judge a phase with
/// deadline `deadline_store_ms` ended, given a reading `reading_store_ms` taken after
/// `read_from_local_ms` that is at most `behind_ms` behind the store. The store's time at a
/// local `t` is at most `reading + behind + (t - read_from)`, and a phase ends once the store's
/// time is `uncertain_ms` past its deadline, which every participant waits out (it cancels);
/// so the phase stands until `read_from + deadline - reading - behind`. `read_from` itself
/// (nothing to count on) when the deadline is missing or from another epoch of the clock
/// (`same_epoch` false).
pub fn deadline_stands_until_local_ms(
    read_from_local_ms: u64,
    reading_store_ms: u64,
    behind_ms: u64,
    deadline_store_ms: Option<u64>,
    same_epoch: bool,
) -> u64 {
    let left_ms = match deadline_store_ms {
        Some(deadline) if same_epoch => deadline
            .saturating_sub(reading_store_ms)
            .saturating_sub(behind_ms),
        _ => 0,
    };
    read_from_local_ms.saturating_add(left_ms)
}

/// Until when (local clock) a grant seen unclaimed surely stands, if long enough to start at it
/// and let a heartbeat claim it, instead of claiming it first. Three bounds, the earliest wins,
/// less the claim window's [`safety_margin_ms`]:
///
/// - `queued_at_local_ms` is when the last request was sent whose answer showed the ticket
///   still queued, so the grant was written after it, and no participant that judges by
///   observation (etcd, DynamoDB) ends it before having seen it unchanged for the claim window,
///   which it cannot have begun before the grant was written.
/// - `on_store_clock_local_ms` ([`deadline_stands_until_local_ms`] of the grant's claim
///   deadline): on a store with a clock the grant ends at the deadline its granter wrote,
///   computed from *its* reading of the store's clock. That reading may be much older than
///   `queued_at`: a write held up in a network lands after the waiter's queued read with its
///   deadline already close or past (the torture harness found a semaphore of 2 held by 3 on
///   Redis after a 3 s black hole while only the first bound existed).
/// - on a store without a clock, `now_local_ms + ttl_ms`: the heartbeat's claim, sent after
///   now, starts a phase of the TTL, which observers may end before the claim window would
///   have (a TTL shorter than the window), and if its answer is lost the holder still counts
///   on this bound. (On a store with a clock the claim never moves the deadline earlier:
///   [`extended_deadline_store_ms`].)
///
/// Worth it only if at least half the window is left at `now_local_ms`.
pub fn fresh_grant_until_local_ms(
    queued_at_local_ms: u64,
    claim_ms: u64,
    ttl_ms: u64,
    on_store_clock_local_ms: Option<u64>,
    now_local_ms: u64,
) -> Option<u64> {
    let window_ends = queued_at_local_ms.saturating_add(claim_ms);
    let stands_until = match on_store_clock_local_ms {
        Some(bound) => window_ends.min(bound),
        None => window_ends.min(now_local_ms.saturating_add(ttl_ms)),
    };
    let until = stands_until.checked_sub(safety_margin_ms(claim_ms))?;
    (until.saturating_sub(now_local_ms) >= claim_ms / 2 && until > now_local_ms).then_some(until)
}

/// When (local clock) a heartbeat sends the claim of a grant started unclaimed, standing until
/// `holds_until_local_ms` ([`fresh_grant_until_local_ms`]), given it was started at
/// `started_local_ms`: after a third of the time it surely stands, so two more tries fit
/// before it runs out (as a renewal is sent a third into its TTL). Not at once: a holder that
/// is done sooner releases an unclaimed grant and never writes a claim, so a short turn on a
/// contended key costs two writes (enqueue, release), not three. The claim is a liveness
/// matter only: until it is confirmed the holder acts on `holds_until_local_ms` alone, which
/// [`fresh_grant_until_local_ms`] proved whenever the claim lands or is lost.
pub fn claim_unclaimed_at_local_ms(started_local_ms: u64, holds_until_local_ms: u64) -> u64 {
    let stands_ms = holds_until_local_ms.saturating_sub(started_local_ms);
    started_local_ms.saturating_add(renewal_due_after_ms(stands_ms))
}

/// How far into a phase of `phase_ms` its owner writes to extend it: a third, so two more
/// tries fit before it ends. A held lease is renewed a third into its TTL, a waiter lease
/// refreshed a third into its own, an unclaimed grant claimed a third into the time it stands.
pub fn renewal_due_after_ms(phase_ms: u64) -> u64 {
    phase_ms / 3
}

/// Whether a holder may still act, at `now_local_ms`, on a lease it may act on until
/// `holds_until_local_ms` ([`Basis::holds_until_local_ms`]): strictly before it. A reply
/// handled at or after the bound gives the lease up.
pub fn stands_at(holds_until_local_ms: u64, now_local_ms: u64) -> bool {
    now_local_ms < holds_until_local_ms
}

/// A reading of the store's clock a client took for a read: after `read_from_local_ms` on its
/// local clock, `store_ms` on the store's, at most `behind_ms` behind the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Local clock, ms, before the read began.
    pub read_from_local_ms: u64,
    /// The store's time as read.
    pub store_ms: u64,
    /// How far the store's time may have been ahead of the reading.
    pub behind_ms: u64,
}

/// A grant a waiter saw unclaimed, as the document it read shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeenGrant {
    /// The ticket's claim window.
    pub claim_ms: u64,
    /// The ticket's lease duration.
    pub ttl_ms: u64,
    /// The grant's claim deadline, on the store's clock (`None`: judged by observation).
    pub deadline_store_ms: Option<u64>,
    /// Whether the document was written on the epoch of the clock the reading came from.
    pub same_epoch: bool,
}

/// Until when (local clock) a grant seen unclaimed may be started at once, its claim left to
/// a heartbeat; `None`: claim it first. [`fresh_grant_until_local_ms`] from when the ticket was
/// last known queued (`queued_at_local_ms`), bounded on a store with a clock (`reading`) by the
/// grant's own claim deadline as read ([`deadline_stands_until_local_ms`]). The client's
/// waiter and the model check both decide by this.
pub fn seen_grant_until_local_ms(
    queued_at_local_ms: u64,
    grant: SeenGrant,
    reading: Option<Reading>,
    now_local_ms: u64,
) -> Option<u64> {
    let on_store_clock = reading.map(|reading| {
        deadline_stands_until_local_ms(
            reading.read_from_local_ms,
            reading.store_ms,
            reading.behind_ms,
            grant.deadline_store_ms,
            grant.same_epoch,
        )
    });
    fresh_grant_until_local_ms(
        queued_at_local_ms,
        grant.claim_ms,
        grant.ttl_ms,
        on_store_clock,
        now_local_ms,
    )
}

/// The deadline a beat of a live ticket leaves (a refresh, a claim, a renewal): the later of
/// the current one and `new_store_ms` (the store's time as read, plus the phase). Never
/// earlier: a reading may lag the last one (its reply was slower), a renewal may ask for a
/// shorter TTL, a claim may set a TTL shorter than the claim window — and the holder whose
/// answer to that write was lost still counts on the deadline it last saw set. A new phase
/// (a grant) starts afresh instead. `None` (a clock without time: by observation) stays `None`.
pub fn extended_deadline_store_ms(
    current_store_ms: Option<u64>,
    new_store_ms: Option<u64>,
) -> Option<u64> {
    match (current_store_ms, new_store_ms) {
        (Some(current), Some(new)) => Some(current.max(new)),
        (_, new) => new,
    }
}

/// Whether a write's answer that shows ticket `id` held and claimed is a lease that write set,
/// to be counted from the write's basis. `granted`: the grants the write made. A refresh or a
/// renewal beats the ticket itself; an enqueue (or a worker's claim of a job) set the lease only
/// if its own write granted the ticket. A retried enqueue that finds its ticket already held merely reports what an
/// earlier write set, at a time it cannot know (that write's reply was lost), however fresh its
/// own write: the client claims first, and counts from the claim.
pub fn write_set_the_lease(op: &Op, granted: &[(String, u64)], id: &str) -> bool {
    match op {
        Op::Enqueue(_) | Op::Claim { .. } => granted.iter().any(|(granted, _)| granted == id),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_tenth_at_least_300_ms_at_most_half() {
        for (phase, margin) in [
            (30_000, 3_000),
            (2_000, 300),
            (400, 200),
            (0, 0),
            (3_000, 300),
        ] {
            assert_eq!(safety_margin_ms(phase), margin, "phase {phase}");
        }
    }

    #[test]
    fn the_claim_window_is_two_longest_polls_and_five_seconds() {
        assert_eq!(claim_window_ms(1_000), 7_000);
        assert_eq!(claim_window_ms(0), 5_000);
        assert_eq!(claim_window_ms(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_phase_ends_once_the_clock_is_its_uncertainty_past_the_deadline() {
        assert!(!phase_ended_on_store_clock(10_999, 10_000, 1_000));
        assert!(phase_ended_on_store_clock(11_000, 10_000, 1_000));
        assert!(phase_ended_on_store_clock(10_000, 10_000, 0));
        assert!(!phase_ended_on_store_clock(u64::MAX - 1, u64::MAX, 5));
        assert!(!phase_ended_by_observation(1_000, 2_999, 2_000));
        assert!(phase_ended_by_observation(1_000, 3_000, 2_000));
        // A reading taken before the first sight is not past it.
        assert!(!phase_ended_by_observation(5_000, 1_000, 1));
    }

    #[test]
    fn a_written_phase_counts_from_before_the_reading_less_how_far_it_lagged() {
        let basis = Basis {
            basis_local_ms: 1_000,
            behind_ms: 250,
        };
        // The deadline is reading + 3000; the store was at most 250 ms ahead of the reading.
        assert_eq!(basis.phase_stands_until_local_ms(3_000), 3_750);
        assert_eq!(basis.holds_until_local_ms(3_000), 3_450);
        // A reading that lagged more than the phase: nothing to count on.
        let lagging = Basis {
            basis_local_ms: 1_000,
            behind_ms: 5_000,
        };
        assert_eq!(lagging.phase_stands_until_local_ms(3_000), 0);
        assert_eq!(lagging.holds_until_local_ms(3_000), 0);
    }

    #[test]
    fn an_unclaimed_grant_is_claimed_a_third_into_the_time_it_stands() {
        // Fresh grants stand at least half a claim window (3 s of 6 s): the claim goes 1 s in,
        // leaving 2 s for it and its retries; a longer standing waits longer.
        assert_eq!(claim_unclaimed_at_local_ms(10_000, 13_000), 11_000);
        assert_eq!(claim_unclaimed_at_local_ms(10_000, 15_400), 11_800);
        // Never before it started, whatever the bound says.
        assert_eq!(claim_unclaimed_at_local_ms(10_000, 9_000), 10_000);
    }

    #[test]
    fn a_deadline_read_from_the_store_is_bounded_by_the_reading_and_its_lag() {
        // 4 s to the deadline as read, the reading at most 300 ms behind: 3.7 s.
        assert_eq!(
            deadline_stands_until_local_ms(100, 10_000, 300, Some(14_000), true),
            3_800
        );
        // Past, missing, or on another clock: nothing to count on.
        for (deadline, same_epoch) in [(Some(9_000), true), (None, true), (Some(14_000), false)] {
            assert_eq!(
                deadline_stands_until_local_ms(100, 10_000, 0, deadline, same_epoch),
                100
            );
        }
    }

    #[test]
    fn a_grant_is_fresh_while_half_its_window_is_left() {
        const TTL: u64 = 60_000;
        let claim = 4_000;
        let margin = safety_margin_ms(claim);
        let queued_at = 10_000;
        // Right after the answer: the whole window less the margin.
        assert_eq!(
            fresh_grant_until_local_ms(queued_at, claim, TTL, None, queued_at),
            Some(queued_at + claim - margin)
        );
        // Exactly half left: still fresh; a millisecond later: claim first.
        let half_left = queued_at + claim - margin - claim / 2;
        assert!(fresh_grant_until_local_ms(queued_at, claim, TTL, None, half_left).is_some());
        assert!(fresh_grant_until_local_ms(queued_at, claim, TTL, None, half_left + 1).is_none());
        // An answer older than the window (a paused waiter) never starts unclaimed.
        assert!(
            fresh_grant_until_local_ms(queued_at, claim, TTL, None, queued_at + 2 * claim)
                .is_none()
        );
        // The grant's own deadline bounds it when earlier.
        let deadline = queued_at + claim - 1_000;
        assert_eq!(
            fresh_grant_until_local_ms(queued_at, claim, TTL, Some(deadline), queued_at),
            Some(deadline - margin)
        );
        assert_eq!(
            fresh_grant_until_local_ms(
                queued_at,
                claim,
                TTL,
                Some(queued_at + 2 * claim),
                queued_at
            ),
            Some(queued_at + claim - margin)
        );
        assert!(
            fresh_grant_until_local_ms(queued_at, claim, TTL, Some(queued_at), queued_at).is_none()
        );
        // A TTL shorter than the window: the claim the heartbeat sends may end the grant sooner.
        assert_eq!(
            fresh_grant_until_local_ms(queued_at, claim, 3_000, None, queued_at + 500),
            Some(queued_at + 500 + 3_000 - margin)
        );
        assert!(fresh_grant_until_local_ms(queued_at, claim, 1_000, None, queued_at).is_none());
        // On a store with a clock the claim keeps the window's deadline: the TTL does not bound.
        let far = Some(queued_at + 2 * claim);
        assert_eq!(
            fresh_grant_until_local_ms(queued_at, claim, 1_000, far, queued_at),
            Some(queued_at + claim - margin)
        );
        // Near zero on the local clock: no underflow.
        assert!(fresh_grant_until_local_ms(0, claim, TTL, Some(0), 0).is_none());
    }

    #[test]
    fn an_enqueue_set_a_lease_only_if_it_granted_its_own_ticket() {
        let enqueue = Op::Enqueue(crate::op::Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: "mine".into(),
            token: "secret".into(),
            mode: crate::Mode::Normal,
            limit: 2,
            context: String::new(),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 3_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 4_000,
            max_live: 100,
            once: None,
            cancel_running: false,
            override_freeze: None,
        });
        let granted = |ids: &[&str]| -> Vec<(String, u64)> {
            ids.iter().map(|id| (id.to_string(), 7)).collect()
        };
        assert!(write_set_the_lease(
            &enqueue,
            &granted(&["other", "mine"]),
            "mine"
        ));
        // A retry that expired another holder and granted a third finds "mine" held already.
        assert!(!write_set_the_lease(&enqueue, &granted(&["third"]), "mine"));
        assert!(!write_set_the_lease(&enqueue, &[], "mine"));
        let refresh = Op::Refresh {
            token: "secret".into(),
        };
        assert!(write_set_the_lease(&refresh, &[], "mine"));
    }
}
