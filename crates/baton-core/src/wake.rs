//! Whom a write must wake: the waiters whose own ticket it changed, or everyone.
//!
//! A waiter acts on a change only when it concerns its own ticket: granted (start, or claim),
//! ended (by expiry, a supersede, an operator's cancel), or given new slots. What else it reads
//! in the document (its place in the queue, the other tickets' deadlines, the wait estimate)
//! only times its next look, and it looks by timer as well, so a waiter that is not told of
//! such a change looks a little later, never wrongly: every look starts from a document read
//! or pushed after the change. On a hot key every write used to wake every waiter, who mostly
//! found nothing for them (BENCHMARKS.md); a store that can spare the others
//! (`Store::watch_tagged`) wakes only those named here.
//!
//! The rule is conservative: a change of anything a waiter judges by beside its own ticket (the
//! limit, the pool's slots, the clock's epoch, a freeze, the backlog, run-once records, the
//! notification outbox) wakes everyone, as does a key's first document, and a write that
//! leaves the key with no holder where it had one, or with room for a turn where it had none
//! (a permit freed beside a holder): a turn by arrival, beside the document and so in no
//! write's names until one takes it in, waits for exactly that to take itself in.

use std::collections::HashMap;

use crate::doc::{Doc, Mode, Ticket};

/// Whom a write wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wakes {
    /// Every watcher of the key.
    Every,
    /// The watchers of these tickets (ids), and those that watch the whole key.
    Only {
        /// Tickets the write changed or took in: still live.
        changed: Vec<String>,
        /// Tickets the write ended: told once more, and never again.
        ended: Vec<String>,
    },
}

/// Whom the write that turns `before` (`None`: the key had no document) into `after` must
/// wake. `own` is the ticket the write itself enqueued, if any: its writer knows.
pub fn to_wake(before: Option<&Doc>, after: &Doc, own: Option<&str>) -> Wakes {
    let Some(before) = before else {
        return Wakes::Every;
    };
    if !same_key_settings(before, after) {
        return Wakes::Every;
    }
    let freed = before.holders().next().is_some() && after.holders().next().is_none();
    if freed || makes_room(before, after) {
        return Wakes::Every;
    }
    let was: HashMap<&str, &Ticket> = before.tickets.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut changed: Vec<String> = Vec::new();
    for ticket in &after.tickets {
        let differs = match was.get(ticket.id.as_str()) {
            Some(earlier) => *earlier != ticket,
            // Taken in from the backlog, or enqueued by this write.
            None => own != Some(ticket.id.as_str()),
        };
        if differs {
            changed.push(ticket.id.clone());
        }
    }
    let ended = before
        .tickets
        .iter()
        .filter(|t| after.by_id(&t.id).is_none())
        .map(|t| t.id.clone())
        .collect();
    Wakes::Only { changed, ended }
}

impl Wakes {
    /// Whether the write wakes the watchers of `ticket`.
    pub fn wakes(&self, ticket: &str) -> bool {
        match self {
            Wakes::Every => true,
            Wakes::Only { changed, ended } => {
                changed.iter().chain(ended).any(|id| id.as_str() == ticket)
            }
        }
    }
}

/// Whether the write leaves room for a turn of some mode that would have waited before it.
fn makes_room(before: &Doc, after: &Doc) -> bool {
    [Mode::Normal, Mode::Shared]
        .into_iter()
        .any(|mode| before.turn_would_wait(mode) && !after.turn_would_wait(mode))
}

/// Whether everything in the two documents beside their tickets that a waiter judges by is the
/// same. Destructured whole, so a field added to [`Doc`] must be placed here on one side or the
/// other.
fn same_key_settings(before: &Doc, after: &Doc) -> bool {
    let Doc {
        format,
        limit,
        slots,
        epoch,
        backlog,
        once,
        outbox,
        paused,
        // Counters and the recent past: a waiter reads them for display and retries only.
        fence: _,
        next_arrival: _,
        tickets: _,
        finished: _,
        finishes: _,
        unsettled: _,
        summary: _,
    } = after;
    *format == before.format
        && *limit == before.limit
        && *slots == before.slots
        && *epoch == before.epoch
        && *backlog == before.backlog
        && *once == before.once
        && *outbox == before.outbox
        && *paused == before.paused
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::doc::{Mode, TicketState};

    fn ticket(id: &str, arrival: u64, state: TicketState) -> Ticket {
        Ticket {
            id: id.to_owned(),
            token_hash: String::new(),
            mode: Mode::Normal,
            state,
            order: None,
            arrival,
            keep: false,
            context: String::new(),
            ttl_ms: 10_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 3_000,
            heartbeat: 1,
            deadline_ms: Some(1_000),
            claimed: state == TicketState::Held,
            fence: 0,
            enqueued_wall_ms: 0,
            granted_wall_ms: 0,
            job: None,
            once: None,
            stop_asked: None,
            override_freeze: None,
            ci_run: None,
            slots: None,
        }
    }

    fn only(changed: &[&str], ended: &[&str]) -> Wakes {
        let owned = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect();
        Wakes::Only {
            changed: owned(changed),
            ended: owned(ended),
        }
    }

    fn doc(tickets: Vec<Ticket>) -> Doc {
        Doc {
            tickets,
            ..Doc::default()
        }
    }

    #[test]
    fn an_enqueue_at_the_back_wakes_nobody() {
        let before = doc(vec![
            ticket("a", 1, TicketState::Held),
            ticket("b", 2, TicketState::Queued),
        ]);
        let mut after = before.clone();
        after.tickets.push(ticket("c", 3, TicketState::Queued));
        after.next_arrival = 4;
        assert_eq!(to_wake(Some(&before), &after, Some("c")), only(&[], &[]));
    }

    #[test]
    fn a_write_that_leaves_the_key_with_no_holder_wakes_every_watcher() {
        let before = doc(vec![ticket("a", 1, TicketState::Held)]);
        let after = doc(Vec::new());
        assert_eq!(to_wake(Some(&before), &after, None), Wakes::Every);
        let free = doc(vec![ticket("b", 2, TicketState::Queued)]);
        let mut still_free = free.clone();
        still_free.tickets.push(ticket("c", 3, TicketState::Queued));
        assert_eq!(
            to_wake(Some(&free), &still_free, Some("c")),
            only(&[], &[]),
            "a key that had no holder"
        );
    }

    #[test]
    fn a_write_that_frees_a_permit_beside_a_holder_wakes_every_watcher() {
        let semaphore = |tickets| Doc {
            limit: 2,
            ..doc(tickets)
        };
        let full = semaphore(vec![
            ticket("a", 1, TicketState::Held),
            ticket("b", 2, TicketState::Held),
        ]);
        let freed = semaphore(vec![ticket("a", 1, TicketState::Held)]);
        assert_eq!(to_wake(Some(&full), &freed, None), Wakes::Every);
        // Handed on to the next in line: no room left, only the two tickets named.
        let mut queue = full.clone();
        queue.tickets.push(ticket("c", 3, TicketState::Queued));
        let mut granted = ticket("c", 3, TicketState::Held);
        granted.fence = 7;
        let handed = semaphore(vec![ticket("a", 1, TicketState::Held), granted]);
        assert_eq!(to_wake(Some(&queue), &handed, None), only(&["c"], &["b"]));
        // Room before and after: an enqueue granted beside the holder wakes nobody.
        let mut beside = freed.clone();
        beside.tickets.push(ticket("d", 4, TicketState::Held));
        assert_eq!(to_wake(Some(&freed), &beside, Some("d")), only(&[], &[]));
    }

    #[test]
    fn a_writer_leaving_the_line_behind_readers_wakes_every_watcher() {
        let reader = |id, arrival| Ticket {
            mode: Mode::Shared,
            ..ticket(id, arrival, TicketState::Held)
        };
        let before = doc(vec![
            reader("r1", 1),
            reader("r2", 2),
            ticket("w", 3, TicketState::Queued),
        ]);
        // A reader leaves: the writer still waits for the other, and a reader behind it.
        let mut one_left = before.clone();
        one_left.tickets.remove(0);
        assert_eq!(to_wake(Some(&before), &one_left, None), only(&[], &["r1"]));
        // The writer gives up: a reader's turn now fits beside the readers.
        let mut gone = before.clone();
        gone.tickets.pop();
        assert_eq!(to_wake(Some(&before), &gone, None), Wakes::Every);
    }

    #[test]
    fn a_release_wakes_the_ticket_it_granted_and_the_one_it_ended() {
        let before = doc(vec![
            ticket("a", 1, TicketState::Held),
            ticket("b", 2, TicketState::Queued),
            ticket("c", 3, TicketState::Queued),
        ]);
        let mut granted = ticket("b", 2, TicketState::Held);
        granted.fence = 7;
        let after = doc(vec![granted, ticket("c", 3, TicketState::Queued)]);
        assert_eq!(to_wake(Some(&before), &after, None), only(&["b"], &["a"]));
    }

    #[test]
    fn a_ticket_that_appears_without_being_enqueued_here_is_woken() {
        // Taken in from the backlog: its waiter must learn it has a waiter lease to refresh.
        let before = doc(vec![ticket("a", 1, TicketState::Held)]);
        let mut after = before.clone();
        after.tickets.push(ticket("b", 2, TicketState::Queued));
        assert_eq!(to_wake(Some(&before), &after, Some("z")), only(&["b"], &[]));
    }

    #[test]
    fn a_change_of_what_every_waiter_judges_by_wakes_every_watcher() {
        let before = doc(vec![ticket("a", 1, TicketState::Held)]);
        assert_eq!(to_wake(None, &before, Some("a")), Wakes::Every);
        let mut limit = before.clone();
        limit.limit = 2;
        assert_eq!(to_wake(Some(&before), &limit, None), Wakes::Every);
        let mut epoch = before.clone();
        epoch.epoch = Some("boot-2".into());
        assert_eq!(to_wake(Some(&before), &epoch, None), Wakes::Every);
        let mut slots = before.clone();
        slots.slots = vec!["x".into()];
        assert_eq!(to_wake(Some(&before), &slots, None), Wakes::Every);
    }

    #[test]
    fn counters_and_the_summary_wake_nobody() {
        let before = doc(vec![ticket("a", 1, TicketState::Held)]);
        let mut after = before.clone();
        after.fence = 99;
        after.finishes = 3;
        after.next_arrival = 40;
        assert_eq!(to_wake(Some(&before), &after, None), only(&[], &[]));
    }
}
