//! A store whose locked update costs round trips (PostgreSQL's row lock:
//! `Capabilities::update_when_contended`), on the in-memory store: a write goes by CAS, once more
//! from the document a lost one returned, then under the lock; the coordinator's next writes to
//! a key that lost one take the lock at once for a while; other keys keep writing by CAS; and
//! writers mixing both paths never hold a key together.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::jobs::{self, ClaimOptions, SubmitOptions};
use baton_client::{ClientError, Coordinator};
use baton_core::job::JobResult;
use baton_core::Outcome;
use baton_store::memory::MemoryStore;

mod common;
use common::Probe;

/// What a view of the store was asked: CASes, CASes that lost, locked updates.
fn counts(view: &Probe) -> (u64, u64, u64) {
    (
        view.cases(),
        view.conflicts.load(Ordering::SeqCst),
        view.updates.load(Ordering::SeqCst),
    )
}

fn options(timeout: Option<Duration>) -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(30),
        timeout,
        ..AcquireOptions::default()
    }
}

#[tokio::test]
async fn a_write_that_lost_a_cas_tries_once_more_then_the_next_to_its_key_take_the_lock() {
    let (memory, lock) = (Arc::new(MemoryStore::new()), Arc::default());
    let a = Probe::row_locked(memory.clone(), &lock);
    let b = Probe::row_locked(memory.clone(), &lock);
    let (coord_a, coord_b) = (Coordinator::new(a.clone()), Coordinator::new(b.clone()));

    let held = acquire(&coord_a, &Pending::new("k"), &options(None))
        .await
        .unwrap();
    assert_eq!(counts(&a), (1, 0, 0), "an uncontended acquire is one CAS");
    // Another process enqueues and gives up: a's cached document is stale now.
    let tried = acquire(&coord_b, &Pending::new("k"), &options(Some(Duration::ZERO))).await;
    assert!(
        matches!(tried, Err(ClientError::TimedOut { .. })),
        "{tried:?}"
    );

    release(&coord_a, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        counts(&a),
        (3, 1, 0),
        "the release lost one CAS, then was written by CAS from the document it returned"
    );

    let again = acquire(&coord_a, &Pending::new("k"), &options(None))
        .await
        .unwrap();
    release(&coord_a, "k", &again.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        counts(&a),
        (3, 1, 2),
        "the key is hot: its next writes take the lock at once"
    );

    let other = acquire(&coord_a, &Pending::new("j"), &options(None))
        .await
        .unwrap();
    assert_eq!(counts(&a), (4, 1, 2), "another key is written by CAS");
    release(&coord_a, "j", &other.token, Outcome::Succeeded)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_write_that_lost_its_cas_twice_is_written_under_the_lock() {
    let (memory, lock) = (Arc::new(MemoryStore::new()), Arc::default());
    let a = Probe::row_locked(memory, &lock);
    let coord = Coordinator::new(a.clone());
    let held = acquire(&coord, &Pending::new("k"), &options(None))
        .await
        .unwrap();
    a.lose_next_cases.store(2, Ordering::SeqCst);
    release(&coord, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        counts(&a),
        (3, 2, 1),
        "two CASes lost (the second from the document the first returned), then the lock"
    );
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert_eq!(doc.holders().count(), 0, "released: {doc:?}");
}

/// Job workers: a claim that lost its CAS to another worker's claim of the same job finds, in
/// the document the conflict returned, nothing left to claim and writes nothing. That says the
/// job was taken, not that writers queue on the key: the worker's next write to the key (its
/// claim of the key's next job) goes by CAS, not under the lock.
#[tokio::test]
async fn a_claim_that_lost_its_job_to_another_worker_leaves_the_key_cold() {
    let (memory, lock) = (Arc::new(MemoryStore::new()), Arc::default());
    let a = Probe::row_locked(memory.clone(), &lock);
    let b = Probe::row_locked(memory.clone(), &lock);
    let (coord_a, coord_b) = (
        Arc::new(Coordinator::new(a.clone())),
        Arc::new(Coordinator::new(b.clone())),
    );
    let claim = ClaimOptions {
        ttl: Duration::from_secs(30),
    };
    for _ in 0..2 {
        jobs::submit(&coord_b, "q", b"{}", &SubmitOptions::default())
            .await
            .unwrap();
    }
    coord_a.read("q").await.unwrap();
    let first = jobs::claim(&coord_b, "q", &claim).await.unwrap().unwrap();
    let before = counts(&a);

    let lost = jobs::claim(&coord_a, "q", &claim).await.unwrap();
    assert!(lost.is_none(), "the head job is b's: nothing to claim");
    let after_loss = counts(&a);
    assert_eq!(
        (
            after_loss.0 - before.0,
            after_loss.1 - before.1,
            after_loss.2
        ),
        (1, 1, 0),
        "one CAS, lost; the document it returned answered the claim"
    );

    first.complete(JobResult::Succeeded).await.unwrap();
    // As a worker's look at the due index brings the key's document along.
    coord_a.read("q").await.unwrap();
    let after_loss = counts(&a);
    let second = jobs::claim(&coord_a, "q", &claim).await.unwrap().unwrap();
    let (cases, _, updates) = counts(&a);
    assert_eq!(
        (cases - after_loss.0, updates),
        (1, 0),
        "the next job is claimed by one CAS: the key is not hot"
    );
    second.complete(JobResult::Succeeded).await.unwrap();
}

/// Holders counted at the protected resource: never more than one, whichever path each
/// write took.
#[derive(Default)]
struct Resource {
    holders: AtomicU32,
    turns: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_mixing_cas_and_the_lock_never_hold_a_key_together() {
    const WRITERS: usize = 8;
    const TURNS: u64 = 15;
    let (memory, lock) = (Arc::new(MemoryStore::new()), Arc::default());
    let resource = Arc::new(Resource::default());
    let views: Vec<Arc<Probe>> = (0..WRITERS)
        .map(|_| Probe::row_locked(memory.clone(), &lock))
        .collect();
    let mut writers = tokio::task::JoinSet::new();
    for view in &views {
        let (coord, resource) = (Coordinator::new(view.clone()), resource.clone());
        writers.spawn(async move {
            for _ in 0..TURNS {
                let lease = acquire(&coord, &Pending::new("hot"), &options(None))
                    .await
                    .unwrap();
                let holders = resource.holders.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(holders, 1, "two holders at once");
                tokio::task::yield_now().await;
                resource.holders.fetch_sub(1, Ordering::SeqCst);
                resource.turns.fetch_add(1, Ordering::SeqCst);
                release(&coord, "hot", &lease.token, Outcome::Succeeded)
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(joined) = writers.join_next().await {
        if let Err(error) = joined {
            std::panic::resume_unwind(error.into_panic());
        }
    }
    assert_eq!(
        resource.turns.load(Ordering::SeqCst),
        WRITERS as u64 * TURNS
    );
    let updates: u64 = views.iter().map(|v| counts(v).2).sum();
    assert!(
        updates > 0,
        "no write took the lock: the race never happened"
    );
}
