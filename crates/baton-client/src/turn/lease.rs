//! A turn's lease, and the rules that build it from a store's answer: every lease the client
//! holds is made here, from a write's answer ([`Lease::set_by_write`]), from a grant seen
//! unclaimed ([`Lease::seen_unclaimed`]), or moved on by a renewal ([`Lease::renewed`]).
//!
//! The safety rules themselves are the core's ([`baton_core::lease`]): a lease counts from the
//! basis of the write that set it, never from when its answer was handled.

use baton_core::lease::{self, Basis, Reading, SeenGrant};
use baton_core::op::{TicketStatus, TicketView};
use baton_core::{Op, Outcome, Reply, Request, Ticket, TicketState};

use super::ids;

/// A ticket about to be enqueued: its id and token are made before the first attempt.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The key.
    pub key: String,
    /// The ticket's public id.
    pub id: String,
    /// The ticket's secret token.
    pub token: String,
}

impl Pending {
    /// A new ticket for `key`.
    pub fn new(key: &str) -> Pending {
        Pending {
            key: key.to_string(),
            id: ids::new_ticket_id(),
            token: ids::new_token(),
        }
    }
}

/// A held turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The key.
    pub key: String,
    /// The ticket's public id.
    pub id: String,
    /// The secret token that renews and releases it.
    pub token: String,
    /// The fence of this grant.
    pub fence: u64,
    /// When it was granted (wall clock of the granting client).
    pub acquired_wall_ms: u64,
    /// When the lease ends unless renewed, on this machine's wall clock: the last moment at
    /// which the store surely still counts it held (for display; `holds_until_ms` decides).
    pub lease_until_wall_ms: u64,
    /// The lease duration.
    pub ttl_ms: u64,
    /// Until when this process may act on the lease, on its coordinator's local clock
    /// (`Coordinator::local_ms`): counted from before the write that set it (never from when
    /// its answer arrived), less how far that write's clock reading may have lagged the store,
    /// less the safety margin. Past it, the store may have given the key to another.
    pub holds_until_ms: u64,
    /// Whether the grant is claimed. An unclaimed one (a fresh grant `acquire_many` hands to a
    /// heartbeat) is claimed by the heartbeat's first renewal, sent a third into the time it
    /// surely stands ([`lease::claim_unclaimed_at_local_ms`]).
    pub claimed: bool,
    /// On a pool: the slots this turn was given, in the pool's order (`BATON_SLOT`).
    pub slots: Vec<String>,
}

/// A renewal confirmed by the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The lease's duration from now on.
    pub ttl_ms: u64,
    /// Until when this process may act on it, on the coordinator's local clock (as
    /// [`Lease::holds_until_ms`]).
    pub holds_until_ms: u64,
    /// When it ends unless renewed again, on this machine's wall clock (for display).
    pub lease_until_wall_ms: u64,
    /// A newer ticket asked this holder to stop (`--cancel-running`): who.
    pub stop_asked: Option<String>,
}

/// The two clocks of this process at one moment: the local clock safety deadlines are kept on,
/// and the wall clock a lease's end is shown on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The local clock (`Coordinator::local_ms`).
    pub local_ms: u64,
    /// The wall clock, ms since the Unix epoch.
    pub wall_ms: u64,
}

impl Now {
    /// The wall clock at the local-clock instant `local_ms` (for display only).
    pub fn wall_at(&self, local_ms: u64) -> u64 {
        if local_ms >= self.local_ms {
            self.wall_ms.saturating_add(local_ms - self.local_ms)
        } else {
            self.wall_ms.saturating_sub(self.local_ms - local_ms)
        }
    }
}

/// What a write answered, as far as a turn cares: the operation sent, the core's reply, the
/// grants the write made and its basis (`None`: no deadline may be derived from it).
#[derive(Clone, Copy, Debug)]
pub struct WriteAnswer<'a> {
    /// The operation, as sent.
    pub op: &'a Op,
    /// What it did.
    pub reply: &'a Reply,
    /// The grants it made: (ticket id, fence).
    pub granted: &'a [(String, u64)],
    /// When the document it wrote was computed ([`Basis`]).
    pub basis: Option<Basis>,
}

impl WriteAnswer<'_> {
    /// The live ticket the reply shows, and the write's basis, if there is one.
    fn live(&self) -> Option<(&TicketStatus, Basis)> {
        match (self.reply, self.basis) {
            (Reply::Ticket(TicketView::Live(status)), Some(basis)) => Some((status, basis)),
            _ => None,
        }
    }

    /// How the ticket ended, when the reply says it has.
    pub fn ended(&self) -> Option<(Outcome, bool)> {
        match self.reply {
            Reply::Ticket(TicketView::Finished {
                outcome, forced, ..
            }) => Some((*outcome, *forced)),
            _ => None,
        }
    }
}

impl Lease {
    /// The lease this write set on ticket `id` (`key`, `token`: the holder's), if its answer
    /// shows the ticket held and claimed and the write itself set that lease
    /// ([`lease::write_set_the_lease`]): counted from the write's basis. `None` otherwise:
    /// still queued, ended, or held by a write this request did not make (a retried enqueue or
    /// claim finds its ticket granted by an earlier write, at a time it cannot know), which the
    /// holder claims or renews first.
    pub fn set_by_write(
        key: &str,
        token: &str,
        answer: &WriteAnswer<'_>,
        now: Now,
    ) -> Option<Lease> {
        let (status, basis) = answer.live()?;
        let held = status.state == TicketState::Held && status.claimed;
        if !held || !lease::write_set_the_lease(answer.op, answer.granted, &status.id) {
            return None;
        }
        let ttl_ms = status.phase_ms;
        Some(Lease {
            key: key.to_owned(),
            id: status.id.clone(),
            token: token.to_owned(),
            fence: status.fence,
            acquired_wall_ms: status.granted_wall_ms,
            lease_until_wall_ms: now.wall_at(basis.phase_stands_until_local_ms(ttl_ms)),
            ttl_ms,
            holds_until_ms: basis.holds_until_local_ms(ttl_ms),
            claimed: true,
            slots: status.slots.clone(),
        })
    }

    /// A grant to `pending` seen unclaimed in a read, as a lease to start at once, unclaimed,
    /// if it surely stands long enough for a heartbeat to claim it
    /// ([`lease::seen_grant_until_local_ms`]): `queued_at_local_ms` is when the last request
    /// was sent whose answer showed the ticket queued; `reading`, the store's clock read with
    /// the document (`None`: a store without one).
    pub fn seen_unclaimed(
        pending: &Pending,
        mine: &Ticket,
        queued_at_local_ms: u64,
        reading: Option<(Reading, bool)>,
        now: Now,
    ) -> Option<Lease> {
        let grant = SeenGrant {
            claim_ms: mine.claim_ms,
            ttl_ms: mine.ttl_ms,
            deadline_store_ms: mine.deadline_ms,
            same_epoch: reading.is_some_and(|(_, same_epoch)| same_epoch),
        };
        let reading = reading.map(|(reading, _)| reading);
        let until_ms =
            lease::seen_grant_until_local_ms(queued_at_local_ms, grant, reading, now.local_ms)?;
        Some(Lease {
            key: pending.key.clone(),
            id: pending.id.clone(),
            token: pending.token.clone(),
            fence: mine.fence,
            acquired_wall_ms: mine.granted_wall_ms,
            lease_until_wall_ms: now.wall_at(until_ms),
            ttl_ms: mine.ttl_ms,
            holds_until_ms: until_ms,
            claimed: false,
            slots: mine
                .slots
                .as_ref()
                .map(|part| part.held.clone())
                .unwrap_or_default(),
        })
    }

    /// The lease of the held ticket `status` shows, as `renewed` confirmed it: counted from
    /// the renewal, for an answer that tells of a lease set by an earlier write at a time this
    /// holder cannot know (a retried claim whose first attempt landed unseen).
    pub fn confirmed_by_renewal(
        key: &str,
        token: &str,
        status: &TicketStatus,
        renewed: &Renewed,
    ) -> Lease {
        Lease {
            key: key.to_owned(),
            id: status.id.clone(),
            token: token.to_owned(),
            fence: status.fence,
            acquired_wall_ms: status.granted_wall_ms,
            lease_until_wall_ms: renewed.lease_until_wall_ms,
            ttl_ms: renewed.ttl_ms,
            holds_until_ms: renewed.holds_until_ms,
            claimed: true,
            slots: status.slots.clone(),
        }
    }

    /// Whether the holder may still act on the lease at `now_local_ms` ([`lease::stands_at`]).
    pub fn stands_at(&self, now_local_ms: u64) -> bool {
        lease::stands_at(self.holds_until_ms, now_local_ms)
    }

    /// The lease as a confirmed renewal leaves it: claimed, standing until the renewal's bound.
    pub fn renewed(&mut self, renewed: &Renewed) {
        self.holds_until_ms = renewed.holds_until_ms;
        self.lease_until_wall_ms = renewed.lease_until_wall_ms;
        self.ttl_ms = renewed.ttl_ms;
        self.claimed = true;
    }

    /// When (local clock) to send its next renewal: a claimed lease a third of its TTL after
    /// the write that set it ([`renew_at_ms`]); an unclaimed one a third into the time the
    /// grant surely stands from `now_local_ms` (that renewal claims it).
    pub fn next_renewal_ms(&self, now_local_ms: u64) -> u64 {
        if self.claimed {
            renew_at_ms(self.holds_until_ms, self.ttl_ms)
        } else {
            lease::claim_unclaimed_at_local_ms(now_local_ms, self.holds_until_ms)
        }
    }
}

impl Renewed {
    /// A renewal's answer as a confirmation: the write set the ticket's lease afresh, counted
    /// from its basis. `None` when the answer is no confirmation (a renewal always writes: an
    /// answer without a write, or without the live ticket, confirms nothing).
    pub fn from_answer(answer: &WriteAnswer<'_>, now: Now) -> Option<Renewed> {
        let (status, basis) = answer.live()?;
        Some(Renewed {
            ttl_ms: status.phase_ms,
            holds_until_ms: basis.holds_until_local_ms(status.phase_ms),
            lease_until_wall_ms: now.wall_at(basis.phase_stands_until_local_ms(status.phase_ms)),
            stop_asked: status.stop_asked.clone(),
        })
    }
}

/// When a lease that stands until `holds_until_ms` is next renewed: a third of its TTL after
/// the write that set it ([`lease::renewal_due_after_ms`]; the bound is that write's basis
/// plus the TTL, less the lag and the margin), so two more tries fit before it is lost.
pub fn renew_at_ms(holds_until_ms: u64, ttl_ms: u64) -> u64 {
    let left_after_renewal_due =
        ttl_ms - lease::renewal_due_after_ms(ttl_ms) - lease::safety_margin_ms(ttl_ms);
    holds_until_ms.saturating_sub(left_after_renewal_due)
}

/// When a waiter refreshes its waiter lease of `waiter_ttl`: every
/// [`lease::renewal_due_after_ms`] of it.
pub fn refresh_every(waiter_ttl: std::time::Duration) -> std::time::Duration {
    let ms = u64::try_from(waiter_ttl.as_millis()).unwrap_or(u64::MAX);
    std::time::Duration::from_millis(lease::renewal_due_after_ms(ms))
}

/// A release, as a request its retries reuse (so the core recognises them).
pub fn release_request(token: &str, outcome: Outcome, reason: Option<String>) -> Request {
    Request::new(
        ids::new_attempt_id(),
        Op::Release {
            token: token.to_string(),
            outcome,
            reason,
        },
    )
}
