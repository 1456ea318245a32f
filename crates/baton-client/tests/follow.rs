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
use common::Probe;

mod common;

/// A guarded turn at `key`, as `baton run` takes one, through `probe`.
async fn hold(probe: &Arc<Probe>, key: &str) -> LeaseGuard {
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let heartbeat = Heartbeat::start(coord.clone());
    let options = AcquireOptions::default();
    let leases = acquire_many(&coord, &[Pending::new(key)], &options, &heartbeat)
        .await
        .unwrap();
    LeaseGuard::new(coord, leases, heartbeat)
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
    while decode(&shared.load("k").await.unwrap().unwrap().bytes)
        .unwrap()
        .tickets
        .len()
        < 3
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
