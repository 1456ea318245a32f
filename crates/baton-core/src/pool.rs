//! Named pools (`--slots a,b,c`): a key whose places have names, and a turn that is given one
//! (or `count`) of them, or waits for one by name (`--slot b`).
//!
//! The rules, all here and in the grant walk that calls [`Walk::take`]:
//! - A ticket that takes any slot takes the first free ones in the pool's order, granted in
//!   the key's order: one that cannot be granted yet holds back every ticket behind it (no
//!   barging), as with `--limit`.
//! - A ticket that asks for one slot by name and finds it busy holds back only the later
//!   tickets that would take that slot: the other slots keep being used, and it gets its slot
//!   before anyone who arrived after it.
//! - A slot is never held by two tickets at once ([`crate::invariants`] checks it after every
//!   apply).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::doc::{Doc, TicketState};
use crate::limits::InvalidInput;

/// The most slots a pool has.
pub const SLOTS_MAX: usize = 64;
/// The longest slot name, in bytes.
pub const SLOT_NAME_MAX_BYTES: usize = 64;

/// What a ticket (or job) of a pool asks for: the pool it expects, and which slots it wants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolAsk {
    /// The pool's slots, in the order they are given out (every live ticket must agree).
    pub slots: Vec<String>,
    /// Only this slot (`--slot NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    /// How many slots at once (`--count N`), granted all together or not at all.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// A ticket's part in a pool: what it asked for and, once granted, what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketSlots {
    /// Only this slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    /// How many slots.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
    /// The slots it holds (empty while queued), in the pool's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

impl PoolAsk {
    /// Checks the ask at the edge: 1 to [`SLOTS_MAX`] distinct names of 1 to
    /// [`SLOT_NAME_MAX_BYTES`] bytes, without commas (the CLI's separator), spaces at either
    /// end or control characters; `only` one of them; `count` 1 to the pool's size, and 1 with
    /// `only`.
    pub fn check(&self) -> Result<(), InvalidInput> {
        let invalid = |why: String| Err(InvalidInput(why));
        if self.slots.is_empty() || self.slots.len() > SLOTS_MAX {
            return invalid(format!(
                "a pool has 1 to {SLOTS_MAX} slots; this one has {}",
                self.slots.len()
            ));
        }
        let mut seen = BTreeSet::new();
        for name in &self.slots {
            check_name(name)?;
            if !seen.insert(name.as_str()) {
                return invalid(format!("the slot {name:?} is named twice"));
            }
        }
        if let Some(only) = &self.only {
            if !seen.contains(only.as_str()) {
                return invalid(format!(
                    "--slot {only:?} is not one of the pool's slots ({})",
                    self.slots.join(",")
                ));
            }
            if self.count != 1 {
                return invalid("--slot takes one slot: it cannot be given with --count".into());
            }
        }
        if self.count == 0 || self.count as usize > self.slots.len() {
            return invalid(format!(
                "--count is {}; it must be between 1 and the pool's {} slots",
                self.count,
                self.slots.len()
            ));
        }
        Ok(())
    }

    /// The ticket's part, before any grant.
    pub fn ticket_slots(&self) -> TicketSlots {
        TicketSlots {
            only: self.only.clone(),
            count: self.count,
            held: Vec::new(),
        }
    }
}

/// Checks one slot's name.
fn check_name(name: &str) -> Result<(), InvalidInput> {
    let bad = name.is_empty()
        || name.len() > SLOT_NAME_MAX_BYTES
        || name.contains(',')
        || name.trim() != name
        || name.chars().any(char::is_control);
    if bad {
        return Err(InvalidInput(format!(
            "the slot name {name:?} must be 1 to {SLOT_NAME_MAX_BYTES} bytes, without commas, \
             control characters or spaces at either end"
        )));
    }
    Ok(())
}

/// What the grant walk does with a queued ticket of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    /// Grant it these slots.
    Slots(Vec<String>),
    /// Its slot is taken: it waits, and the walk goes on.
    Wait,
    /// Not enough free slots: it waits, and so does everyone behind it.
    Block,
}

/// The slots taken during one grant walk: those held, and those it gives.
///
/// A ticket waiting for a slot by name needs nothing more: it waits only while its slot is
/// taken, so no later ticket in the walk can take that slot either, and once the slot is
/// freed the walk reaches it before any ticket that arrived after it.
#[derive(Debug)]
pub struct Walk {
    taken: BTreeSet<String>,
}

impl Walk {
    /// The walk's start: the slots the holders hold.
    pub fn new(doc: &Doc) -> Walk {
        let taken = doc
            .tickets
            .iter()
            .filter(|t| t.state == TicketState::Held)
            .filter_map(|t| t.slots.as_ref())
            .flat_map(|s| s.held.iter().cloned())
            .collect();
        Walk { taken }
    }

    /// What to do with the next queued ticket, which asks for `ask`, on a pool of `slots`;
    /// slots it is given are taken for the rest of the walk.
    pub fn take(&mut self, slots: &[String], ask: &TicketSlots) -> Take {
        if let Some(only) = &ask.only {
            if self.taken.contains(only) {
                return Take::Wait;
            }
            self.taken.insert(only.clone());
            return Take::Slots(vec![only.clone()]);
        }
        let free: Vec<String> = slots
            .iter()
            .filter(|s| !self.taken.contains(*s))
            .take(ask.count as usize)
            .cloned()
            .collect();
        if free.len() < ask.count as usize {
            return Take::Block;
        }
        self.taken.extend(free.iter().cloned());
        Take::Slots(free)
    }
}

/// Checks the pool rules of `doc` (see [`crate::invariants`]): a key with slots has its limit
/// as their number and no shared ticket; every ticket of it has its part, and none of any other
/// key has one; a held ticket holds `count` of the pool's slots (its `only` one, if it asked
/// for one), a queued one none; and no slot is held twice.
pub fn check(doc: &Doc) -> Result<(), String> {
    if doc.slots.is_empty() {
        return match doc.tickets.iter().find(|t| t.slots.is_some()) {
            Some(t) => Err(format!("ticket {} has slots on a key without a pool", t.id)),
            None => Ok(()),
        };
    }
    if doc.limit as usize != doc.slots.len() {
        return Err(format!(
            "the pool has {} slots and the limit is {}",
            doc.slots.len(),
            doc.limit
        ));
    }
    let mut held = BTreeSet::new();
    for ticket in &doc.tickets {
        let Some(part) = &ticket.slots else {
            return Err(format!("ticket {} of a pool has no slots part", ticket.id));
        };
        if ticket.mode != crate::doc::Mode::Normal {
            return Err(format!("ticket {} of a pool is shared", ticket.id));
        }
        check_part(doc, ticket.state, part)
            .map_err(|why| format!("ticket {}: {why}", ticket.id))?;
        for slot in &part.held {
            if !held.insert(slot.as_str()) {
                return Err(format!("the slot {slot:?} is held twice"));
            }
        }
    }
    Ok(())
}

/// Nothing on a pool waits that the grant walk would give (see
/// [`crate::invariants::check_settled`]): walking the queue in order up to a job, the backlog
/// or a freeze, a ticket for any slot finds fewer free slots than it asks, and a ticket
/// waiting by name finds its slot held.
pub fn check_settled(doc: &Doc) -> Result<(), String> {
    let mut walk = Walk::new(doc);
    for ticket in doc.queued() {
        if ticket.job.is_some() || doc.behind_backlog(ticket) || doc.held_back(ticket) {
            return Ok(());
        }
        let Some(ask) = &ticket.slots else {
            return Err(format!("ticket {} of a pool has no slots part", ticket.id));
        };
        match walk.take(&doc.slots, ask) {
            Take::Slots(slots) => {
                return Err(format!(
                    "ticket {} waits although {slots:?} are free for it",
                    ticket.id
                ))
            }
            Take::Wait => {}
            Take::Block => return Ok(()),
        }
    }
    Ok(())
}

/// Checks one ticket's part against its state and the pool.
fn check_part(doc: &Doc, state: TicketState, part: &TicketSlots) -> Result<(), String> {
    match state {
        TicketState::Queued if !part.held.is_empty() => {
            Err(format!("queued, it holds {:?}", part.held))
        }
        TicketState::Queued => Ok(()),
        TicketState::Held => {
            if part.held.len() != part.count as usize {
                return Err(format!("it holds {:?}, not {}", part.held, part.count));
            }
            if let Some(stray) = part.held.iter().find(|s| !doc.slots.contains(s)) {
                return Err(format!("it holds {stray:?}, not a slot of the pool"));
            }
            match &part.only {
                Some(only) if part.held != [only.clone()] => {
                    Err(format!("it asked for {only:?} and holds {:?}", part.held))
                }
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(slots: &[&str], only: Option<&str>, count: u32) -> PoolAsk {
        PoolAsk {
            slots: slots.iter().map(|s| s.to_string()).collect(),
            only: only.map(str::to_owned),
            count,
        }
    }

    #[test]
    fn an_ask_is_checked_at_the_edge() {
        assert!(ask(&["a", "b"], None, 1).check().is_ok());
        assert!(ask(&["a", "b"], Some("b"), 1).check().is_ok());
        assert!(ask(&["a", "b"], None, 2).check().is_ok());
        for bad in [
            ask(&[], None, 1),
            ask(&["a", "a"], None, 1),
            ask(&["a,b"], None, 1),
            ask(&[" a"], None, 1),
            ask(&[""], None, 1),
            ask(&["a", "b"], Some("c"), 1),
            ask(&["a", "b"], Some("a"), 2),
            ask(&["a", "b"], None, 3),
            ask(&["a", "b"], None, 0),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn any_slot_is_the_first_free_and_a_named_wait_passes_no_one_its_slot() {
        let pool: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let any = |count| TicketSlots {
            only: None,
            count,
            held: Vec::new(),
        };
        let only = |name: &str| TicketSlots {
            only: Some(name.to_owned()),
            count: 1,
            held: Vec::new(),
        };
        let mut walk = Walk {
            taken: ["a".to_owned()].into(),
        };
        // a is busy: its waiter waits, and later tickets take b and c.
        assert_eq!(walk.take(&pool, &only("a")), Take::Wait);
        assert_eq!(walk.take(&pool, &any(1)), Take::Slots(vec!["b".into()]));
        assert_eq!(walk.take(&pool, &only("a")), Take::Wait);
        assert_eq!(walk.take(&pool, &only("b")), Take::Wait);
        assert_eq!(walk.take(&pool, &any(2)), Take::Block, "c alone is free");
        assert_eq!(walk.take(&pool, &any(1)), Take::Slots(vec!["c".into()]));
    }
}
