//! Named pools under random histories: callers arriving for any slot, for two at once or for
//! one slot by name (some with an `order` value), holders releasing, waiters withdrawing,
//! waiters refreshing while time passes (unrenewed leases run out). After every operation:
//!
//! - no slot is held twice, each holder holds as many slots as it asked (its named one, if it
//!   named one), and none but the pool's (the core's invariants, checked again here);
//! - nothing is left idle that the rules would give: walking the queue in its order, a caller
//!   for any slot finds fewer free slots than it asks, and a caller waiting by name finds its
//!   slot held;
//! - a caller for any slot is never granted while an earlier one of its kind still waits (no
//!   barging), and a caller waiting by name is never passed for its slot by a later one;
//! - every slot is used over a history that gives each a chance (checked on one fixed run).

use std::collections::{BTreeMap, BTreeSet};

use baton_core::pool::PoolAsk;
use baton_core::{Doc, Enqueue, Op, Outcome, Ticket, TicketState};
use proptest::prelude::*;

mod common;
use common::*;

const SLOTS: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Step {
    /// A caller arrives for `count` of any slot, or for the slot named (index into SLOTS),
    /// with or without an order value.
    Arrive {
        only: Option<usize>,
        count: u32,
        order: Option<u8>,
    },
    /// A holder (by index among the holders) releases.
    Release(usize),
    /// A waiter (by index among the queued) withdraws.
    Withdraw(usize),
    /// Every waiter, and every holder but the first, refreshes (the first holder's lease is
    /// left to run out).
    Refresh,
    /// Time passes, and someone looks.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop::option::weighted(0.4, 0usize..3), 1u32..3, prop::option::weighted(0.2, 0u8..4))
            .prop_map(|(only, count, order)| Step::Arrive {
                count: if only.is_some() { 1 } else { count },
                only,
                order,
            }),
        4 => (0usize..3).prop_map(Step::Release),
        1 => (0usize..4).prop_map(Step::Withdraw),
        3 => Just(Step::Refresh),
        1 => prop_oneof![Just(2_000u64), Just(11_000)].prop_map(Step::Wait),
    ]
}

fn pool(only: Option<usize>, count: u32) -> PoolAsk {
    PoolAsk {
        slots: SLOTS.iter().map(|s| s.to_string()).collect(),
        only: only.map(|i| SLOTS[i].to_owned()),
        count,
    }
}

fn number(id: &str) -> u32 {
    id[1..].parse().expect("ids are t<n>")
}

fn held(ticket: &Ticket) -> &[String] {
    ticket.slots.as_ref().map_or(&[], |part| &part.held)
}

fn only(ticket: &Ticket) -> Option<&str> {
    ticket.slots.as_ref().and_then(|part| part.only.as_deref())
}

/// The pool's rules hold of `doc` as it is now.
fn check_now(doc: &Doc) -> Result<(), TestCaseError> {
    prop_assert_eq!(baton_core::invariants::check(doc), Ok(()));
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for holder in doc.holders() {
        for slot in held(holder) {
            prop_assert!(taken.insert(slot), "{} held twice: {:?}", slot, doc.tickets);
        }
    }
    for ticket in doc.queued() {
        let part = ticket.slots.as_ref().expect("a pool's ticket has its part");
        if let Some(name) = &part.only {
            prop_assert!(
                taken.contains(name.as_str()),
                "{} waits for {} which is free: {:?}",
                ticket.id,
                name,
                doc.tickets
            );
            continue;
        }
        let free = SLOTS.iter().filter(|s| !taken.contains(*s)).count();
        prop_assert!(
            free < part.count as usize,
            "{} waits for {} slots with {} free: {:?}",
            ticket.id,
            part.count,
            free,
            doc.tickets
        );
        // Everyone behind it waits too: the walk stops here.
        break;
    }
    Ok(())
}

/// Grants this operation made break no order: a caller for any slot granted while an earlier
/// one for any slot still waits, or a caller granted a slot an earlier caller waits for by
/// name.
fn check_grants(before: &BTreeSet<String>, doc: &Doc) -> Result<(), TestCaseError> {
    let queue = doc.in_queue_order();
    for (at, ticket) in queue.iter().enumerate() {
        if ticket.state != TicketState::Held || before.contains(&ticket.id) {
            continue;
        }
        for earlier in &queue[..at] {
            if earlier.state != TicketState::Queued {
                continue;
            }
            match only(earlier) {
                None => prop_assert!(
                    false,
                    "{} was granted while {}, earlier, waits for any slot: {:?}",
                    ticket.id,
                    earlier.id,
                    doc.tickets
                ),
                Some(name) => prop_assert!(
                    !held(ticket).iter().any(|s| s == name),
                    "{} took {} which {}, earlier, waits for",
                    ticket.id,
                    name,
                    earlier.id
                ),
            }
        }
    }
    Ok(())
}

fn run_checked(w: &mut World, op: Op) -> Result<(), TestCaseError> {
    let before: BTreeSet<String> = w
        .doc
        .as_ref()
        .map(|d| d.holders().map(|t| t.id.clone()).collect())
        .unwrap_or_default();
    let _ = w.run(op);
    let doc = w.doc.clone().unwrap_or_default();
    check_now(&doc)?;
    check_grants(&before, &doc)
}

fn ids(w: &World, state: TicketState) -> Vec<String> {
    w.doc
        .as_ref()
        .map(|d| {
            d.in_queue_order()
                .into_iter()
                .filter(|t| t.state == state)
                .map(|t| t.id.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn arrival(n: u32, only: Option<usize>, count: u32, order: Option<u8>) -> Op {
    Op::Enqueue(Enqueue {
        pool: Some(pool(only, count)),
        limit: SLOTS.len() as u32,
        order: order.map(|o| o.to_string()),
        ..enqueue(n)
    })
}

fn play(w: &mut World, next: &mut u32, step: Step) -> Result<(), TestCaseError> {
    match step {
        Step::Arrive { only, count, order } => {
            *next += 1;
            run_checked(w, arrival(*next, only, count, order))?;
        }
        Step::Release(i) => {
            if let Some(id) = ids(w, TicketState::Held).get(i) {
                let token = token(number(id));
                let op = Op::Release {
                    token,
                    outcome: Outcome::Succeeded,
                    reason: None,
                };
                run_checked(w, op)?;
            }
        }
        Step::Withdraw(i) => {
            if let Some(id) = ids(w, TicketState::Queued).get(i) {
                let token = token(number(id));
                let op = Op::Release {
                    token,
                    outcome: Outcome::Cancelled,
                    reason: None,
                };
                run_checked(w, op)?;
            }
        }
        Step::Refresh => {
            let queued = ids(w, TicketState::Queued);
            let held = ids(w, TicketState::Held);
            for id in queued.iter().chain(held.iter().skip(1)) {
                run_checked(
                    w,
                    Op::Refresh {
                        token: token(number(id)),
                    },
                )?;
            }
        }
        Step::Wait(ms) => {
            w.now_ms += ms;
            run_checked(w, Op::Tick)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_pool_gives_each_slot_to_one_holder_in_the_keys_order(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let mut w = World::new();
        let mut next = 0u32;
        for step in steps {
            play(&mut w, &mut next, step)?;
        }
    }
}

/// Six callers for any slot on a pool of three, then each released in turn: three hold at
/// once, each slot is used, and every caller gets one.
#[test]
fn six_callers_share_three_slots_and_use_each() {
    let mut w = World::new();
    let mut used: BTreeMap<String, u32> = BTreeMap::new();
    for n in 1..=6 {
        w.run(arrival(n, None, 1, None)).expect("queued");
    }
    for _ in 0..6 {
        let doc = w.doc.clone().expect("a document");
        assert!(doc.holders().count() <= 3);
        let first = doc
            .in_queue_order()
            .into_iter()
            .find(|t| t.state == TicketState::Held)
            .expect("a holder")
            .clone();
        *used.entry(held(&first)[0].clone()).or_default() += 1;
        let release = Op::Release {
            token: token(number(&first.id)),
            outcome: Outcome::Succeeded,
            reason: None,
        };
        w.run(release).expect("released");
    }
    assert_eq!(used.len(), 3, "every slot used: {used:?}");
    assert_eq!(used.values().sum::<u32>(), 6);
}
