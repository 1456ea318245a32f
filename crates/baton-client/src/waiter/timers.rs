//! When a waiter looks whatever the store says, and when it writes for what others left
//! undone: another ticket's expiry, a freeze's end, a window to refill from the backlog. One
//! waiter writes for each, not every one that noticed ([`Waiter::stagger`],
//! [`Waiter::quiet_enough`]).

use std::time::{Duration, Instant};

use baton_core::backlog::WINDOW_JOBS;
use baton_core::lease;
use baton_core::TicketState;
use baton_store::StoreClock;

use super::Waiter;
use crate::time::wall_ms;

impl Waiter<'_> {
    /// How long until this ticket has waited past the shortest `waited` rule, while its event
    /// is still to be raised by a write of this waiter (zero: now).
    pub(super) fn waited_due_in(&self) -> Option<Duration> {
        let after_ms = self.waited_after_ms.filter(|_| !self.waited_written)?;
        let mine = self.doc.by_id(&self.pending.id)?;
        let raised = self
            .doc
            .outbox
            .as_ref()
            .is_some_and(|outbox| outbox.waited.contains(&mine.id));
        if mine.state != TicketState::Queued || raised {
            return None;
        }
        let due_wall_ms = mine.enqueued_wall_ms.saturating_add(after_ms);
        Some(Duration::from_millis(due_wall_ms.saturating_sub(wall_ms())))
    }

    /// How long until this waiter must look whatever the store says: its refresh, the end of
    /// another ticket's phase, of a freeze, of a `waited` rule's wait.
    pub(super) fn next_timer(&self, now: Instant) -> Duration {
        let in_backlog = self.waits_in_backlog();
        let mut sleep = if in_backlog {
            // No waiter lease to refresh there; but one starts when the turn is taken in, so
            // look at least as often as a waiter lease is refreshed.
            self.refresh_every()
        } else {
            let refresh_at = self.last_refresh + self.refresh_every();
            refresh_at.saturating_duration_since(now)
        };
        // A turn in the backlog is not woken by each expiry: the window's own waiters write
        // for those, and it looks at its next poll. One in the window looks when its turn to
        // write for an expiry or the end of a freeze comes ([`Waiter::stagger`]).
        let stagger = self.stagger();
        let ends = [
            self.expiry_in_ms().filter(|_| !in_backlog),
            self.freeze_ends_in_ms(),
        ];
        let ends = ends.into_iter().flatten().map(|ms| after_ms(ms, stagger));
        for until in ends.chain(self.waited_due_in()) {
            sleep = sleep.min(until + Duration::from_millis(2));
        }
        sleep
    }

    /// How long after another ticket's phase ends (or a freeze) this waiter in the window
    /// writes for it, unless someone has: the next in line at once, each one behind it a
    /// [`Waiter::step`] later. Every waiter that saw the end writing at once was a burst of
    /// conflicting writes on a busy key, which on a slow store held up the grantee's claim
    /// and the holder's release past their windows.
    pub(super) fn stagger(&self) -> Duration {
        let position = u32::try_from(self.position()).unwrap_or(u32::MAX);
        self.step().saturating_mul(position)
    }

    /// The pause between two waiters' turns to write for the same event: twice this
    /// waiter's longest latest round trip (one write lands before the next waiter looks),
    /// at least the shortest poll.
    pub(super) fn step(&self) -> Duration {
        let round_trip = self.read_took.max(self.write_took);
        round_trip.saturating_mul(2).max(self.options.poll.min)
    }

    /// Whether this waiter's turn has come to write for the ends its look found: the
    /// earliest of them ended a [`Waiter::stagger`] ago or more.
    pub(super) fn tends_now(&self) -> bool {
        let ended_ms = [self.expiry_in_ms(), self.freeze_ends_in_ms()]
            .into_iter()
            .flatten()
            .map(|ms| ms.saturating_neg())
            .max()
            .unwrap_or(0);
        Duration::from_millis(u64::try_from(ended_ms).unwrap_or(0)) >= self.stagger()
    }

    /// Milliseconds until the freeze the document records ends by itself, if it does
    /// (negative: it ended that long ago): the write that follows grants the next in line
    /// (nobody else may write the key then).
    pub(super) fn freeze_ends_in_ms(&self) -> Option<i64> {
        let until = self.doc.paused.as_ref()?.until_ms?;
        Some(signed_ms(until) - signed_ms(wall_ms()))
    }

    /// Whether the document records a freeze that has ended since it was written.
    pub(super) fn freeze_ended(&self) -> bool {
        self.doc
            .paused
            .as_ref()
            .is_some_and(|paused| !paused.holds_at(wall_ms()))
    }

    /// Milliseconds until the earliest phase of another ticket of the key ends, if known
    /// (negative: it ended that long ago).
    pub(super) fn expiry_in_ms(&self) -> Option<i64> {
        let (clock, read_at) = &self.clock_reading;
        let others = self.doc.tickets.iter().filter(|t| t.id != self.pending.id);
        match clock {
            StoreClock::Time { now_ms, .. } => {
                let uncertain_ms = self.coord.store().capabilities().clock_uncertain_ms;
                let earliest = others.filter_map(|t| t.deadline_ms).min()?;
                let ends = lease::phase_ends_store_ms(earliest, uncertain_ms);
                let since_read = u64::try_from(read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
                Some(signed_ms(ends) - signed_ms(now_ms.saturating_add(since_read)))
            }
            StoreClock::None => {
                let observer = self.coord.observer(self.key());
                let earliest = others
                    .filter_map(|t| observer.expires_at_mono_ms(t))
                    .min()?;
                Some(signed_ms(earliest) - signed_ms(self.coord.mono_ms()))
            }
        }
    }

    /// Whether the key has gone unwritten long enough for this backlog waiter to write for
    /// the window: a waiter lease's refresh interval (every live waiter of the window writes
    /// within it), then a [`Waiter::step`] per turn that arrived before it in the backlog (at
    /// most [`WINDOW_JOBS`]), so that the first of them writes and the others find it done.
    /// (Its arrival tells that apart where its position cannot: every turn in a segment
    /// counts the whole segment ahead of it.)
    pub(super) fn quiet_enough(&self) -> bool {
        let ahead = self.doc.backlog.as_ref().map_or(0, |backlog| {
            self.arrival
                .saturating_sub(backlog.taken_through.saturating_add(1))
        });
        let ahead = u32::try_from(ahead.min(WINDOW_JOBS as u64)).unwrap_or(u32::MAX);
        let wait = self.refresh_every() + self.step().saturating_mul(ahead);
        self.unchanged_since.elapsed() >= wait
    }
}

/// `ms` as a signed count (saturating).
fn signed_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// How long from now until `stagger` after a moment `ms` away (negative: past), at least zero.
fn after_ms(ms: i64, stagger: Duration) -> Duration {
    let stagger_ms = i64::try_from(stagger.as_millis()).unwrap_or(i64::MAX);
    Duration::from_millis(u64::try_from(ms.saturating_add(stagger_ms)).unwrap_or(0))
}
