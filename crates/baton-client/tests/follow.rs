//! A holder keeps its key's cached document current while it holds, where the store's
//! wake-ups carry documents, so that its release is one CAS even when others wrote the key
//! meanwhile (issue 19, B4: the release lost a round trip to the conflict, between a release
//! and the next holder's turn). On the in-memory store, whose wake-ups carry the document as
//! PostgreSQL's, Redis's and etcd's do. Real time: the holder follows its key after 100 ms.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire_many, AcquireOptions, Pending};
use baton_client::{Coordinator, Heartbeat, LeaseGuard};
use baton_core::{decode, Outcome, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::{arrival, Probe};

mod common;

/// A guarded turn at `key`, as `baton run` takes one, through `probe`.
async fn hold(probe: &Arc<Probe>, key: &str) -> LeaseGuard {
    hold_with(Arc::new(Coordinator::new(probe.clone())), key).await
}

/// A guarded turn at `key` taken by `coord`.
async fn hold_with(coord: Arc<Coordinator>, key: &str) -> LeaseGuard {
    let heartbeat = Heartbeat::start(coord.clone());
    let options = AcquireOptions::default();
    let leases = acquire_many(&coord, &[Pending::new(key)], &options, &heartbeat)
        .await
        .unwrap();
    LeaseGuard::new(coord, leases, heartbeat)
}

/// Until `key`'s document holds `count` live tickets.
async fn until_tickets(shared: &MemoryStore, key: &str, count: usize) {
    while decode(&shared.load(key).await.unwrap().unwrap().bytes)
        .unwrap()
        .tickets
        .len()
        != count
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A turn at `k` that came after a wait behind another's, through its probe and coordinator.
async fn turn_after_a_wait(
    shared: &Arc<MemoryStore>,
) -> (Arc<Probe>, Arc<Coordinator>, LeaseGuard) {
    let first = hold(&Probe::new(shared.clone(), true), "k").await;
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let waited = tokio::spawn(hold_with(coord.clone(), "k"));
    until_tickets(shared, "k", 2).await;
    first.release(Outcome::Succeeded).await.unwrap();
    (probe, coord, waited.await.unwrap())
}

#[tokio::test]
async fn a_release_after_others_wrote_meanwhile_is_one_cas() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Probe::new(shared.clone(), true);
    let guard = hold(&holder, "k").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Two waiters queue behind the holder, from other processes.
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let probe = Probe::new(shared.clone(), true);
        waiters.push(tokio::spawn(async move { hold(&probe, "k").await }));
    }
    until_tickets(&shared, "k", 3).await;
    // Let the pushes of their enqueues reach the holder.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let cases = holder.cases();
    guard.release(Outcome::Succeeded).await.unwrap();
    assert_eq!(
        holder.cases() - cases,
        1,
        "the release is one CAS: the holder's cached document was current"
    );
    let next = waiters.remove(0).await.unwrap();
    let doc = decode(&shared.load("k").await.unwrap().unwrap().bytes).unwrap();
    let mine = doc.by_id(&next.leases()[0].id).unwrap();
    assert_eq!(mine.state, TicketState::Held);
    next.release(Outcome::Succeeded).await.unwrap();
    waiters
        .remove(0)
        .await
        .unwrap()
        .release(Outcome::Succeeded)
        .await
        .unwrap();
}

/// A turn that came after a wait follows its key from the grant on, through the wait's own
/// subscription: however short the turn, its release is one CAS when another queued during it,
/// and the turn neither reads nor subscribes again (the follower of a turn granted at once
/// does both, after a delay a short turn never reaches).
#[tokio::test]
async fn a_waited_turn_follows_its_key_from_the_grant_with_the_waits_subscription() {
    let shared = Arc::new(MemoryStore::new());
    let (probe, coord, turn) = turn_after_a_wait(&shared).await;
    let (loads, watches) = (probe.loads(), probe.watches());

    // Another queues during the turn; its enqueue's push reaches the holder's cache.
    let other = Arc::new(Coordinator::new(Probe::new(shared.clone(), true)));
    let third = tokio::spawn(hold_with(other, "k"));
    until_tickets(&shared, "k", 2).await;
    let latest = shared.load("k").await.unwrap().unwrap().version;
    for _ in 0..1000 {
        if coord.cached_version("k") == Some(latest.clone()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        coord.cached_version("k"),
        Some(latest),
        "the holder's cache took the enqueue's push"
    );
    assert_eq!(probe.loads(), loads, "no read during the turn");
    assert_eq!(probe.watches(), watches, "no new subscription");

    let cases = probe.cases();
    turn.release(Outcome::Succeeded).await.unwrap();
    assert_eq!(probe.cases() - cases, 1, "the release is one CAS");
    third
        .await
        .unwrap()
        .release(Outcome::Succeeded)
        .await
        .unwrap();
}

/// A holder that follows its key takes the arrivals pushed with its document (turns that
/// enqueued beside it, as `by_arrival` does on a key seen held) into its cache: its release
/// takes them in, in the order they came, and is one CAS, where without them it lost one to
/// them. Taking the push's version without its arrivals would remove them unqueued.
#[tokio::test]
async fn a_release_takes_in_the_arrivals_pushed_during_the_turn_in_one_cas() {
    let shared = Arc::new(MemoryStore::new());
    let (probe, coord, turn) = turn_after_a_wait(&shared).await;

    for id in ["second", "third"] {
        shared.append_arrival("k", &arrival(id, 0)).await.unwrap();
    }
    let latest = shared.load("k").await.unwrap().unwrap();
    assert_eq!(latest.arrivals.len(), 2);
    for _ in 0..1000 {
        if coord.cached_version("k") == Some(latest.version.clone()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        coord.cached_version("k"),
        Some(latest.version),
        "the holder's cache took the push naming both arrivals"
    );

    let cases = probe.cases();
    turn.release(Outcome::Succeeded).await.unwrap();
    assert_eq!(probe.cases() - cases, 1, "the release is one CAS");
    let now = shared.load("k").await.unwrap().unwrap();
    assert!(now.arrivals.is_empty(), "taken in by the release");
    let doc = decode(&now.bytes).unwrap();
    let (second, third) = (doc.by_id("second").unwrap(), doc.by_id("third").unwrap());
    assert_eq!(
        second.state,
        TicketState::Held,
        "granted, in the order they came"
    );
    assert_eq!(third.state, TicketState::Queued);
}

/// A turn shorter than the follow delay reads nothing more than the turn itself: its release
/// is one CAS, and nothing is read after it.
#[tokio::test]
async fn a_short_turn_follows_nothing() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Probe::new(shared.clone(), true);
    let guard = hold(&holder, "k").await;
    let (cases, loads) = (holder.cases(), holder.loads());
    guard.release(Outcome::Succeeded).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(holder.cases() - cases, 1, "the release");
    assert_eq!(holder.loads(), loads, "no read after the turn");
}

/// A long turn's follower reads the key once, when it starts following.
#[tokio::test]
async fn a_long_turn_reads_its_key_once_to_follow_it() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Probe::new(shared.clone(), true);
    let guard = hold(&holder, "k").await;
    let loads = holder.loads();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(holder.loads() - loads, 1);
    guard.release(Outcome::Succeeded).await.unwrap();
}
