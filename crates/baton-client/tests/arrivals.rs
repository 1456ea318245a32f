//! Arrivals written beside a key's document (on the in-memory store, which keeps them as Redis
//! and etcd do) are taken in by the client's next write of the key, from the document it read
//! with them or, when it wrote from a copy that named none, from the one its lost CAS returned.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::arrival::Arrival;
use baton_core::{Enqueue, Outcome, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;

mod common;
use common::Probe;

fn options() -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(30),
        timeout: Some(Duration::from_secs(20)),
        ..AcquireOptions::default()
    }
}

/// The arrival of ticket `id`, as another process would append it.
fn arrival(id: &str, finishes_seen: u64) -> Vec<u8> {
    let enqueue: Enqueue = serde_json::from_value(serde_json::json!({
        "id": id, "token": format!("token-of-{id}"), "mode": "normal", "limit": 1,
        "context": "arrived", "supersede": false, "keep": false, "ttl_ms": 30_000,
        "waiter_ttl_ms": 60_000, "claim_ms": 5_000, "max_live": 1_000,
    }))
    .unwrap();
    Arrival::of(&enqueue, finishes_seen).encode()
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
