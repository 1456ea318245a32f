//! Arrivals written beside a key's document (on the in-memory store, which keeps them beside the
//! document as Redis and etcd do, and pushes every append; `arrivals_redis.rs` has Redis's
//! wake-ups by ticket) are taken in by the client's next write of the key, from the document it
//! read with them or, when it wrote from a copy that named none, from the one its lost CAS
//! returned;
//! and a turn on a key seen held enqueues by arrival, granted by the release that takes it in,
//! or writing its enqueue itself when nobody else will.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::{Outcome, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;

mod common;
use common::{arrival, until_pending, Probe};

fn options() -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(30),
        timeout: Some(Duration::from_secs(20)),
        ..AcquireOptions::default()
    }
}

/// Takes `key` through `coord`, then has the turns `ids` arrive behind it, in that order.
async fn held_with_arrivals(
    coord: &Coordinator,
    memory: &MemoryStore,
    ids: &[&str],
) -> baton_client::acquire::Lease {
    let held = acquire(coord, &Pending::new("k"), &options())
        .await
        .unwrap();
    for id in ids {
        let after = memory.append_arrival("k", &arrival(id, 0)).await.unwrap();
        assert!(after.is_some_and(|key| key.arrivals.last() == Some(&arrival(id, 0))));
    }
    held
}

#[tokio::test]
async fn a_release_takes_in_the_arrivals_and_grants_the_first_in_the_order_appended() {
    let memory = Arc::new(MemoryStore::new());
    let probe = Probe::new(memory.clone(), true);
    let coord = Coordinator::new(probe.clone());
    let held = held_with_arrivals(&coord, &memory, &["first", "second"]).await;
    let cases_before = probe.cases();
    // The holder's copy is its own write's, which named no arrival: its CAS loses once, and
    // the document it returned carries them.
    release(&coord, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        probe.cases() - cases_before,
        2,
        "one lost CAS, then the write"
    );
    let now = memory.load("k").await.unwrap().unwrap();
    assert!(now.arrivals.is_empty(), "taken in by the release");
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    let first = doc.by_id("first").unwrap();
    let second = doc.by_id("second").unwrap();
    assert_eq!(
        first.state,
        TicketState::Held,
        "granted, for its owner to claim"
    );
    assert!(!first.claimed);
    assert_eq!(second.state, TicketState::Queued);
    assert!(first.arrival < second.arrival, "in the order appended");
}

#[tokio::test]
async fn a_write_from_a_read_that_saw_the_arrivals_takes_them_in_at_once() {
    let memory = Arc::new(MemoryStore::new());
    let probe = Probe::new(memory.clone(), true);
    let coord = Coordinator::new(probe.clone());
    let held = held_with_arrivals(&coord, &memory, &["arrived"]).await;
    // A copy that is no arrival is left out, and removed with the others.
    memory.append_arrival("k", b"not an arrival").await.unwrap();
    coord.read("k").await.unwrap();
    let cases_before = probe.cases();
    release(&coord, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(probe.cases() - cases_before, 1, "one CAS, from the read");
    let now = memory.load("k").await.unwrap().unwrap();
    assert!(now.arrivals.is_empty(), "both removed");
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.by_id("arrived").unwrap().state, TicketState::Held);
    assert_eq!(doc.tickets.len(), 1);
}

#[tokio::test]
async fn a_late_copy_of_an_arrival_whose_ticket_ended_queues_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let coord = Coordinator::new(Probe::new(memory.clone(), true));
    let held = held_with_arrivals(&coord, &memory, &["once"]).await;
    release(&coord, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    // Its owner never came: an operator ends it; then a copy of its append lands late.
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert!(doc.by_id("once").is_some());
    let cancel = baton_core::Op::Cancel {
        id: "once".into(),
        by: "operator".into(),
        reason: None,
    };
    coord
        .execute("k", &mut baton_core::Request::new("cancel", cancel))
        .await
        .unwrap();
    let lease = held_with_arrivals(&coord, &memory, &["once"]).await;
    release(&coord, "k", &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert!(doc.by_id("once").is_none(), "not queued again: {doc:?}");
    assert!(memory.load("k").await.unwrap().unwrap().arrivals.is_empty());
}

/// Options of a turn that enqueues by arrival on a key seen held.
fn arriving() -> AcquireOptions {
    AcquireOptions {
        by_arrival: Some(true),
        ..options()
    }
}

/// One store, a holder's coordinator and a waiter's, whose store is probed.
fn holder_and_waiter() -> (Arc<MemoryStore>, Coordinator, Arc<Probe>, Arc<Coordinator>) {
    let memory = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(Probe::new(memory.clone(), true));
    let probe = Probe::new(memory.clone(), true);
    let waiter = Arc::new(Coordinator::new(probe.clone()));
    (memory, holder, probe, waiter)
}

#[tokio::test]
async fn a_turn_on_a_held_key_arrives_and_the_holders_release_grants_it() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let held = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    waiter.read("k").await.unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &arriving()).await })
    };
    until_pending(memory.as_ref(), "k", 1).await;
    assert_eq!(probe.cases(), 0, "the turn wrote nothing into the document");
    let doc = holder.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.tickets.len(), 1, "only the holder's ticket: {doc:?}");
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let lease = waiting.await.unwrap().unwrap();
    assert!(lease.fence > held.fence);
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
    let now = memory.load("k").await.unwrap().unwrap();
    assert!(now.arrivals.is_empty(), "taken in by the release");
    release(&waiter, "k", &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
}

/// A process that knows nothing of its key (a fresh `baton run`) reads it first where its
/// turn may arrive: behind a holder the turn arrives, writing nothing into the document.
#[tokio::test]
async fn a_fresh_turn_on_a_held_key_reads_it_first_and_arrives() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let held = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &arriving()).await })
    };
    until_pending(memory.as_ref(), "k", 1).await;
    assert_eq!(probe.cases(), 0, "the turn wrote nothing into the document");
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let lease = waiting.await.unwrap().unwrap();
    assert!(lease.fence > held.fence);
    release(&waiter, "k", &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
}

/// On a free key the read a fresh turn makes first is the one its enqueue would have made:
/// as many reads, writes and watches as a fresh turn that does not arrive, and granted; on a
/// key never used and on one used and freed before.
#[tokio::test]
async fn a_fresh_turn_on_a_free_key_costs_what_one_that_does_not_arrive_does() {
    for used_before in [false, true] {
        let mut costs = Vec::new();
        for by_arrival in [true, false] {
            let (_memory, holder, probe, waiter) = holder_and_waiter();
            if used_before {
                let held = acquire(&holder, &Pending::new("k"), &options())
                    .await
                    .unwrap();
                release(&holder, "k", &held.token, Outcome::Succeeded)
                    .await
                    .unwrap();
            }
            let turn = AcquireOptions {
                by_arrival: Some(by_arrival),
                ..options()
            };
            let lease = acquire(&waiter, &Pending::new("k"), &turn).await.unwrap();
            let appends = probe.appends.load(std::sync::atomic::Ordering::SeqCst);
            costs.push((probe.loads(), probe.cases(), appends, probe.watches()));
            release(&waiter, "k", &lease.token, Outcome::Succeeded)
                .await
                .unwrap();
        }
        let case = format!("used before: {used_before}; (reads, writes, appends, watches)");
        assert_eq!(costs[0], costs[1], "{case}: by arrival, and not");
        assert_eq!(costs[0].1, 1, "{case}: one write, the grant");
    }
}

/// A window that arrivals would fill: the turn writes its enqueue, which takes them in, in
/// order, and waits in the backlog behind them, where an arrival taken in would overfill the
/// window. With one place left, the turn arrives.
#[tokio::test]
async fn a_turn_arrives_only_while_the_window_has_room() {
    for ahead in [15, 16] {
        let (memory, holder, probe, waiter) = holder_and_waiter();
        let ids: Vec<String> = (0..ahead).map(|i| format!("a{i:02}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let held = held_with_arrivals(&holder, &memory, &ids).await;
        waiter.read("k").await.unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &arriving()).await })
        };
        if ahead == 15 {
            until_pending(memory.as_ref(), "k", 16).await;
            assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
            assert_eq!(probe.cases(), 0, "the last place: the turn arrived");
        } else {
            for _ in 0..2_000 {
                if memory.load("k").await.unwrap().unwrap().arrivals.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let doc = holder.read("k").await.unwrap().doc.unwrap();
            let queued: Vec<&str> = doc.queued().iter().map(|t| t.id.as_str()).collect();
            assert_eq!(queued, ids, "taken in by the turn's write, in order");
            assert!(doc.backlog.is_some(), "the turn waits behind them: {doc:?}");
            assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 0);
        }
        waiting.abort();
        release(&holder, "k", &held.token, Outcome::Succeeded)
            .await
            .unwrap();
    }
}

/// Whether a turn on a key seen held arrives is the store's choice unless the turn says:
/// `(the store's, the turn's, arrives)`.
#[tokio::test]
async fn a_turn_that_does_not_say_arrives_where_the_store_does_by_default() {
    let cases = [
        (true, None, true),
        (false, None, false),
        (true, Some(false), false),
        (false, Some(true), true),
    ];
    for (by_default, asked, arrives) in cases {
        let (memory, holder, probe, waiter) = holder_and_waiter();
        probe
            .arrivals_by_default
            .store(by_default, std::sync::atomic::Ordering::SeqCst);
        let held = acquire(&holder, &Pending::new("k"), &options())
            .await
            .unwrap();
        waiter.read("k").await.unwrap();
        let turn = AcquireOptions {
            by_arrival: asked,
            ..options()
        };
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &turn).await })
        };
        // Queued either way: beside the document, or in it.
        let mut queued = false;
        for _ in 0..2_000 {
            let now = memory.load("k").await.unwrap().unwrap();
            let tickets = baton_core::doc::decode(&now.bytes).unwrap().tickets.len();
            if !now.arrivals.is_empty() || tickets == 2 {
                queued = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(queued, "the turn never queued");
        let case = format!("store {by_default}, turn {asked:?}");
        let appends = probe.appends.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(appends, u64::from(arrives), "{case}");
        assert_eq!(
            probe.cases() == 0,
            arrives,
            "{case}: a turn that arrived wrote nothing"
        );
        release(&holder, "k", &held.token, Outcome::Succeeded)
            .await
            .unwrap();
        let lease = waiting.await.unwrap().unwrap();
        assert!(lease.fence > held.fence, "{case}");
    }
}

#[tokio::test]
async fn an_arrival_on_a_key_freed_meanwhile_is_written_by_its_own_turn() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let held = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    waiter.read("k").await.unwrap();
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    // Last seen held: it arrives, finds the key free, and writes its enqueue as the
    // arrival's retry, which takes the arrival in and finds its own ticket there.
    let lease = acquire(&waiter, &Pending::new("k"), &arriving())
        .await
        .unwrap();
    assert!(lease.fence > held.fence);
    let now = memory.load("k").await.unwrap().unwrap();
    assert!(now.arrivals.is_empty());
    let doc = waiter.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.tickets.len(), 1, "one ticket for the turn: {doc:?}");
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_holder_gone_with_an_arrival_pending_leaves_the_turn_to_take_itself_in() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let short = AcquireOptions {
        ttl: Duration::from_secs(1),
        ..options()
    };
    // The holder never releases, as after kill -9: nobody writes the key again.
    let held = acquire(&holder, &Pending::new("k"), &short).await.unwrap();
    waiter.read("k").await.unwrap();
    // No deadline of its own (whose withdrawal would take the arrival in): the turn must
    // come from the waiter's own look at the expired holder.
    let forever = AcquireOptions {
        timeout: None,
        ..arriving()
    };
    let turn = Pending::new("k");
    let waiting = acquire(&waiter, &turn, &forever);
    let lease = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the turn came after the holder's lease ran out")
        .unwrap();
    assert!(lease.fence > held.fence);
    let doc = waiter.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.holders().count(), 1);
    assert!(memory.load("k").await.unwrap().unwrap().arrivals.is_empty());
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_arrival_refused_when_taken_in_is_answered_by_its_own_write() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let held = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    // Another turn queues behind, so the key stays in use with limit 1.
    let queued = Pending::new("k");
    let behind = {
        let holder_store = Coordinator::new(Probe::new(memory.clone(), true));
        let queued = queued.clone();
        tokio::spawn(async move { acquire(&holder_store, &queued, &options()).await })
    };
    for _ in 0..2_000 {
        if holder.read("k").await.unwrap().doc.unwrap().tickets.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    waiter.read("k").await.unwrap();
    let two = AcquireOptions {
        limit: 2,
        ..arriving()
    };
    let refused = {
        let waiter = waiter.clone();
        tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &two).await })
    };
    until_pending(memory.as_ref(), "k", 1).await;
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let error = refused.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("limit"), "{error}");
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
    let next = behind.await.unwrap().unwrap();
    assert!(next.fence > held.fence, "the queued turn came next");
}

#[tokio::test]
async fn a_turn_by_arrival_rides_out_a_store_that_fails_its_own_write() {
    let (_, holder, probe, waiter) = holder_and_waiter();
    let short = AcquireOptions {
        ttl: Duration::from_secs(1),
        ..options()
    };
    acquire(&holder, &Pending::new("k"), &short).await.unwrap();
    waiter.read("k").await.unwrap();
    // Its appends land; its writes fail until the holder's lease has run out and past.
    probe.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let waiting = {
        let waiter = waiter.clone();
        let forever = AcquireOptions {
            timeout: None,
            ..arriving()
        };
        tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &forever).await })
    };
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    probe.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let lease = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the turn came once the store took writes again")
        .unwrap()
        .expect("a store error while arriving is ridden out, not a lost turn");
    assert!(lease.fence > 0);
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_turn_arriving_from_a_copy_many_finishes_old_is_still_queued() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let two = AcquireOptions {
        limit: 2,
        ..options()
    };
    let held = acquire(&holder, &Pending::new("k"), &two).await.unwrap();
    let second = acquire(&holder, &Pending::new("k"), &two).await.unwrap();
    waiter.read("k").await.unwrap();
    release(&holder, "k", &second.token, Outcome::Succeeded)
        .await
        .unwrap();
    // More turns end on the other permit than a document remembers, the last still holding
    // it, while the waiter's copy (showing both permits held) stays the one it arrives from.
    let other = Coordinator::new(Probe::new(memory.clone(), true));
    for _ in 0..2 * baton_core::limits::FINISHED_REMEMBERED {
        let lease = acquire(&other, &Pending::new("k"), &two).await.unwrap();
        release(&other, "k", &lease.token, Outcome::Succeeded)
            .await
            .unwrap();
    }
    let last = acquire(&other, &Pending::new("k"), &two).await.unwrap();
    let waiting = {
        let waiter = waiter.clone();
        let arriving_two = AcquireOptions {
            limit: 2,
            ..arriving()
        };
        tokio::spawn(async move { acquire(&waiter, &Pending::new("k"), &arriving_two).await })
    };
    until_pending(memory.as_ref(), "k", 1).await;
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let lease = waiting
        .await
        .unwrap()
        .expect("an arrival is one copy: the finishes since its owner's read do not matter");
    assert!(lease.fence > last.fence);
    assert_eq!(probe.appends.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A semaphore with a permit free beside its holder: the turn's own write grants it, so it
/// writes its enqueue instead of arriving to wait for a release nobody owes it. With every
/// permit held, the next turn arrives, and a release takes it in.
#[tokio::test]
async fn a_turn_beside_a_holder_with_a_permit_free_writes_and_is_granted() {
    let (memory, holder, probe, waiter) = holder_and_waiter();
    let two = AcquireOptions {
        limit: 2,
        ..options()
    };
    let held = acquire(&holder, &Pending::new("k"), &two).await.unwrap();
    // New to the key, each turn reads it first, and judges by that read.
    let turn = AcquireOptions {
        by_arrival: Some(true),
        ..two.clone()
    };
    let beside = acquire(&waiter, &Pending::new("k"), &turn).await.unwrap();
    let appends = || probe.appends.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(appends(), 0, "a permit was free: the turn did not arrive");
    assert_eq!(probe.cases(), 1, "one write, its grant");
    let doc = waiter.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.holders().count(), 2);

    let third = Probe::new(memory.clone(), true);
    let waiting = {
        let (third, turn) = (Coordinator::new(third.clone()), turn.clone());
        tokio::spawn(async move { acquire(&third, &Pending::new("k"), &turn).await })
    };
    until_pending(memory.as_ref(), "k", 1).await;
    let third_appends = third.appends.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(third_appends, 1, "both permits held: the turn arrived");
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let lease = waiting.await.unwrap().unwrap();
    assert!(lease.fence > beside.fence);
    assert!(memory.load("k").await.unwrap().unwrap().arrivals.is_empty());
}
