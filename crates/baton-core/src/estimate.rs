//! The wait estimate: when will a queued ticket be granted, judging by the key's recent hold
//! times (the document's fixed-size summary).
//!
//! A small simulation: the key has `limit` slots. Each holder frees its slot after the mean
//! recent hold time, less what it has already held (at least a moment); every ticket ahead of
//! ours then takes the earliest free slot and holds it for the mean; ours takes the next. It is
//! an estimate for people, never used for any decision.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::doc::{Doc, TicketState};

/// The least time a holder is assumed still to need, however long it has held already.
const MIN_REMAINING_MS: u64 = 1_000;

/// Estimated milliseconds until ticket `id` is granted, at wall time `wall_ms`; `None` when
/// the key has no recent hold times, or `id` is not queued.
pub fn estimate_wait_ms(doc: &Doc, id: &str, wall_ms: u64) -> Option<u64> {
    let mean_ms = doc.summary.mean_hold_ms()?;
    let queued = doc.queued();
    let position = queued.iter().position(|t| t.id == id)?;
    let n_slots = doc.limit.max(1) as usize;
    // Min-heap of the times (from now) at which each slot frees.
    let mut free_at: BinaryHeap<Reverse<u64>> = doc
        .holders()
        .filter(|t| t.state == TicketState::Held)
        .map(|t| {
            let held_ms = wall_ms.saturating_sub(t.granted_wall_ms);
            Reverse(mean_ms.saturating_sub(held_ms).max(MIN_REMAINING_MS))
        })
        .collect();
    while free_at.len() < n_slots {
        free_at.push(Reverse(0));
    }
    for _ahead in 0..position {
        let Reverse(at) = free_at.pop()?;
        free_at.push(Reverse(at.saturating_add(mean_ms)));
    }
    free_at.pop().map(|Reverse(at)| at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{Mode, Summary, Ticket};

    /// A key with `limit`, holders granted `held_ms` ago, `n_queued` waiters, and a scripted
    /// history of hold times.
    fn key(limit: u32, held_ms: &[u64], n_queued: usize, history_ms: &[u64]) -> Doc {
        let now = 1_000_000;
        let mut tickets = Vec::new();
        let mut fence = 0;
        for (i, held) in held_ms.iter().enumerate() {
            fence += 1;
            tickets.push(ticket(
                &format!("h{i}"),
                TicketState::Held,
                fence,
                now - held,
            ));
        }
        for i in 0..n_queued {
            tickets.push(ticket(&format!("q{i}"), TicketState::Queued, 0, 0));
        }
        for (i, t) in tickets.iter_mut().enumerate() {
            t.arrival = i as u64 + 1;
        }
        Doc {
            limit,
            fence,
            next_arrival: tickets.len() as u64 + 1,
            tickets,
            summary: Summary {
                recent_hold_ms: history_ms.to_vec(),
                ..Summary::default()
            },
            ..Doc::default()
        }
    }

    fn ticket(id: &str, state: TicketState, fence: u64, granted_wall_ms: u64) -> Ticket {
        Ticket {
            ci_run: None,
            slots: None,
            id: id.into(),
            token_hash: format!("hash-{id}"),
            mode: Mode::Normal,
            state,
            order: None,
            arrival: 0,
            keep: false,
            context: String::new(),
            ttl_ms: 30_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 4_000,
            heartbeat: 0,
            deadline_ms: None,
            claimed: state == TicketState::Held,
            fence,
            enqueued_wall_ms: 0,
            granted_wall_ms,
            job: None,
            once: None,
            stop_asked: None,
            override_freeze: None,
        }
    }

    #[test]
    fn estimates_follow_the_scripted_history() {
        let now = 1_000_000;
        // (limit, held for, queued, history, waiter, expected ms)
        type Case<'a> = (u32, &'a [u64], usize, &'a [u64], &'a str, Option<u64>);
        let cases: &[Case] = &[
            // Mutex, deploys take 60 s, the holder is 20 s in: next waits 40 s, the one after 100 s.
            (1, &[20_000], 3, &[60_000, 60_000], "q0", Some(40_000)),
            (1, &[20_000], 3, &[60_000, 60_000], "q1", Some(100_000)),
            (1, &[20_000], 3, &[50_000, 70_000], "q2", Some(160_000)),
            // A holder past the mean is assumed to need a moment more, not negative time.
            (1, &[90_000], 1, &[60_000], "q0", Some(1_000)),
            // Semaphore of 2 with both slots busy (10 s and 50 s in, mean 60 s): the first
            // waiter takes the slot freeing at 10 s, the second the one at 50 s, the third the
            // first slot again at 70 s.
            (2, &[50_000, 10_000], 3, &[60_000], "q0", Some(10_000)),
            (2, &[50_000, 10_000], 3, &[60_000], "q1", Some(50_000)),
            (2, &[50_000, 10_000], 3, &[60_000], "q2", Some(70_000)),
            // No history: no estimate. Not queued: no estimate.
            (1, &[1_000], 1, &[], "q0", None),
            (1, &[1_000], 1, &[60_000], "h0", None),
        ];
        for &(limit, held, n_queued, history, waiter, expected) in cases {
            let doc = key(limit, held, n_queued, history);
            assert_eq!(
                estimate_wait_ms(&doc, waiter, now),
                expected,
                "limit {limit}, held {held:?}, history {history:?}, {waiter}"
            );
        }
    }
}
