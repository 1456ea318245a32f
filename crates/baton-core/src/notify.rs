//! Notifications: which changes of a key are events, the rules that want them, and the outbox
//! that carries them from the write that caused them to their receivers.
//!
//! An event is recorded by the very write that caused it, as a [`Note`] on the ticket it is
//! about: in the document's [`Outbox::live`] while the ticket is there (a grant, a wait), in
//! the ticket's finished history entry once it ends (its end's events, and the notes it
//! carried). So an event is never lost between a change and its delivery, and it costs no
//! write and no history entry of its own: a few bytes of the document or of an entry written
//! anyway. The document also keeps how many events there were, and for each rule with events
//! still to deliver a [`Cursor`] (the last event it has, where in the history to look, its
//! retries). Notes every rule has are forgotten, so in the usual case (a delivery right after
//! each write) a finished entry carries none and the document one grant at most; a receiver
//! that is down for days leaves its events in the history, not in the document.
//!
//! Whoever made the change, or later whoever touches the key or runs `baton notify deliver`,
//! builds the events after the cursor ([`events_after`]), posts them in order, and moves the
//! cursor with [`crate::Op::Notified`]. Delivery is therefore at least once: a deliverer that
//! dies between its POST and its acknowledgement, or two that deliver at once, post an event
//! twice, with the same [`Event::delivery_id`] so a receiver can drop the second. A receiver
//! that fails stops its rule's deliveries until a retry succeeds.
//!
//! Bounds: a rule's cursor is never more than [`OUTBOX_MAX`] events behind; further back they
//! are skipped and counted ([`Outbox::dropped`], shown by `baton status`). A rule that could
//! deliver nothing for [`GIVE_UP_MS`] skips what it has, counted too.
//!
//! Rules live in the store's settings document ([`crate::settings`]), never in a key's; a
//! process caches it for at most one poll interval, so a change of rules takes effect within it.
//!
//! # Layout
//!
//! - `events`: the kinds of event, the events a receiver gets and the notes a key keeps;
//! - `rules`: a rule, which events of which keys go where;
//! - `record`: the events a write records, in that same write;
//! - `outbox`: what a key's document keeps of its events, and reading them back;
//! - `cursor`: where each rule stands, and what a delivery's report does to it.

mod cursor;
mod events;
mod outbox;
mod record;
mod rules;

pub use cursor::{acknowledge, Cursor, Delivered, GIVE_UP_MS, RETRY_FIRST_MS, RETRY_MAX_MS};
pub use events::{Event, EventKind, KeyNote, LiveNote, Note};
pub use outbox::{
    events_after, live_holds_all_after, Outbox, KEY_NOTES_MAX, MARKS_KEPT, MARK_EVERY, OUTBOX_MAX,
};
pub use record::record;
pub use rules::Rule;
// The settings document carries freezes as well as rules, so it is a module of its own;
// re-exported here for the callers that read a store's rules from it.
pub use crate::settings::{Settings, RULES_MAX, SETTINGS_FORMAT};

/// For serde: a zero count is left out of the document.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// For serde: a zero count or time is left out of the document.
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
