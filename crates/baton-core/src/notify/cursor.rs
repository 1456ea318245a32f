//! Where each rule stands in a key's events ([`Cursor`]): a cursor appears with a rule's first
//! undelivered event, moves on with each delivery a deliverer reports ([`Delivered`],
//! [`acknowledge`]), backs off while deliveries fail, and skips what is too far behind.

use serde::{Deserialize, Serialize};

use super::outbox::forget_delivered;
use super::{is_zero, is_zero_u64, Event, Outbox, MARKS_KEPT, MARK_EVERY, OUTBOX_MAX};

/// The first retry of a failed delivery waits this long; each further one twice as long.
pub const RETRY_FIRST_MS: u64 = 1_000;
/// The longest wait between two tries of one event.
pub const RETRY_MAX_MS: u64 = 5 * 60 * 1000;
/// An event no try could deliver for this long (a day) is dropped and counted.
pub const GIVE_UP_MS: u64 = 24 * 3600 * 1000;

/// Where one rule stands in a key's events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The rule.
    pub rule: String,
    /// The last event delivered to it, or skipped (its seq).
    pub through: u64,
    /// A hint for the deliverer: the rule's next event is at this position of the key's
    /// history or later (positions count the entries this key's writes appended,
    /// [`Outbox::appended`]), so it reads the tail from there.
    pub from: u64,
    /// Failed tries of its next event.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tries: u32,
    /// Not to be tried again before this (wall ms).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub next_wall_ms: u64,
    /// Since when its tries fail (wall ms; 0: they do not).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub failing_since_wall_ms: u64,
}

/// What a deliverer did for one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The rule.
    pub rule: String,
    /// The last event it now has (delivered, or not for it), by seq.
    pub through: u64,
    /// Where its next event can be found ([`Cursor::from`]); 0: as before.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub from: u64,
    /// The delivery of the event after `through` failed: try again after a backoff.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// The rule no longer exists: forget its cursor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

/// Applies a deliverer's report: the rule's cursor moves on (and goes once it has every
/// event), a failure backs off (1 s doubling to [`RETRY_MAX_MS`]), and a rule that has failed
/// for [`GIVE_UP_MS`] skips what it has, counted as dropped.
pub fn acknowledge(outbox: &mut Outbox, delivered: &Delivered, wall_ms: u64) {
    move_cursor(outbox, delivered, wall_ms);
    forget_delivered(outbox, &mut []);
}

fn move_cursor(outbox: &mut Outbox, delivered: &Delivered, wall_ms: u64) {
    let last = outbox.last_seq;
    let Some(index) = outbox.cursors.iter().position(|c| c.rule == delivered.rule) else {
        return;
    };
    if delivered.gone {
        outbox.cursors.remove(index);
        return;
    }
    let cursor = &mut outbox.cursors[index];
    cursor.through = cursor.through.max(delivered.through.min(last));
    cursor.from = cursor.from.max(delivered.from);
    if delivered.failed {
        cursor.tries = cursor.tries.saturating_add(1);
        let backoff = RETRY_FIRST_MS
            .saturating_mul(1u64 << cursor.tries.saturating_sub(1).min(20))
            .min(RETRY_MAX_MS);
        cursor.next_wall_ms = wall_ms.saturating_add(backoff);
        if cursor.failing_since_wall_ms == 0 {
            cursor.failing_since_wall_ms = wall_ms;
        }
        if wall_ms >= cursor.failing_since_wall_ms.saturating_add(GIVE_UP_MS) {
            outbox.dropped += last - cursor.through;
            cursor.through = last;
        }
    } else {
        cursor.tries = 0;
        cursor.next_wall_ms = 0;
        cursor.failing_since_wall_ms = 0;
    }
    if outbox.cursors[index].through >= last {
        outbox.cursors.remove(index);
    }
}

/// Gives each rule that had nothing to deliver a cursor at its first new event, and marks
/// where some events are (for cursors the bound moves on).
pub(super) fn follow_new(outbox: &mut Outbox, events: &[(u64, Event)]) {
    for (position, event) in events {
        for rule in &event.rules {
            if !outbox.cursors.iter().any(|c| c.rule == *rule) {
                outbox.cursors.push(Cursor {
                    rule: rule.clone(),
                    through: event.seq - 1,
                    from: *position,
                    tries: 0,
                    next_wall_ms: 0,
                    failing_since_wall_ms: 0,
                });
            }
        }
        let due = outbox
            .marks
            .last()
            .is_none_or(|(seq, _)| event.seq >= seq + MARK_EVERY);
        if due {
            outbox.marks.push((event.seq, *position));
        }
    }
    let excess = outbox.marks.len().saturating_sub(MARKS_KEPT);
    outbox.marks.drain(..excess);
}

/// A cursor too far behind skips the oldest: the bound on what a down receiver costs.
pub(super) fn bound(outbox: &mut Outbox) {
    let floor = outbox.last_seq.saturating_sub(OUTBOX_MAX as u64);
    for cursor in &mut outbox.cursors {
        if cursor.through < floor {
            outbox.dropped += floor - cursor.through;
            cursor.through = floor;
            // Its next event is floor + 1: at or after the last mark not past it.
            let mark = outbox.marks.iter().rev().find(|(seq, _)| *seq <= floor + 1);
            if let Some((_, position)) = mark {
                cursor.from = cursor.from.max(*position);
            }
        }
    }
}
