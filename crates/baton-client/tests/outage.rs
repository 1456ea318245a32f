//! A store that stops answering for a while (a restart, a failover, a network cut): a wait
//! rides it out for `store_retry`, telling the trouble through its progress, and a release
//! retries while the lease may stand; past the bound, the store's error is returned.
//!
//! On the in-memory store behind a probe that can be made unreachable (every load, CAS and
//! clock reading fails as `Unavailable`), in real time with bounds far from scheduling delays.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::{Coordinator, Heartbeat, LeaseGuard, WaitProgress};
use baton_core::{decode, Outcome};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

/// Options that poll often (the probe hides wake-ups) and record every progress report.
fn recorded(store_retry: Duration) -> (AcquireOptions, Arc<Mutex<Vec<WaitProgress>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let options = AcquireOptions {
        poll: baton_client::poll::PollBounds {
            min: Duration::from_millis(50),
            max: Duration::from_millis(100),
        },
        store_retry,
        on_progress: Some(Arc::new(move |p: &WaitProgress| {
            record.lock().unwrap().push(p.clone())
        })),
        ..AcquireOptions::default()
    };
    (options, seen)
}

#[tokio::test]
async fn a_wait_rides_out_an_outage_shorter_than_store_retry() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(shared.clone());
    let held = acquire(&holder, &Pending::new("k"), &AcquireOptions::default())
        .await
        .unwrap();
    let probe = Probe::new(shared.clone(), false);
    let coord = Coordinator::new(probe.clone());
    let (options, seen) = recorded(Duration::from_secs(30));
    let wait = tokio::spawn(async move { acquire(&coord, &Pending::new("k"), &options).await });
    tokio::time::sleep(Duration::from_millis(300)).await;

    probe.unreachable.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!wait.is_finished(), "the wait gave up during the outage");
    probe.unreachable.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("granted after the outage")
        .unwrap()
        .unwrap();
    assert!(lease.fence > held.fence);

    let seen = seen.lock().unwrap();
    let troubled = seen.iter().position(|p| p.store_trouble.is_some());
    let troubled = troubled.expect("the outage was told through the progress");
    assert!(
        seen[troubled]
            .store_trouble
            .as_deref()
            .unwrap()
            .contains("unreachable"),
        "{:?}",
        seen[troubled].store_trouble
    );
    assert!(
        seen[troubled..].iter().any(|p| p.store_trouble.is_none()),
        "the end of the outage was told too"
    );
}

#[tokio::test]
async fn a_wait_fails_with_the_stores_error_once_store_retry_has_passed() {
    for store_retry in [Duration::ZERO, Duration::from_millis(700)] {
        let shared = Arc::new(MemoryStore::new());
        let holder = Coordinator::new(shared.clone());
        acquire(&holder, &Pending::new("k"), &AcquireOptions::default())
            .await
            .unwrap();
        let probe = Probe::new(shared.clone(), false);
        let coord = Coordinator::new(probe.clone());
        let (options, _) = recorded(store_retry);
        let wait = tokio::spawn(async move { acquire(&coord, &Pending::new("k"), &options).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        probe.unreachable.store(true, Ordering::SeqCst);
        let cut = Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("the wait ends")
            .unwrap()
            .unwrap_err();
        let after = cut.elapsed();
        assert!(error.is_transient(), "{error}");
        assert!(error.to_string().contains("unreachable"), "{error}");
        // Not before the bound; and after it, within one pause (at most 2 s) and a poll.
        assert!(
            after >= store_retry,
            "{store_retry:?}: gave up after {after:?}"
        );
        assert!(
            after < store_retry + Duration::from_secs(3),
            "{store_retry:?}: gave up after {after:?}"
        );
    }
}

/// A held lease on `k`, released through a [`LeaseGuard`] after `break_store` has made the
/// store fail; it is reachable again `restored_after` later. Returns the key's document then.
async fn release_through_outage(
    break_store: impl FnOnce(&Probe),
    restored_after: Duration,
) -> baton_core::Doc {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let lease = acquire(&coord, &Pending::new("k"), &AcquireOptions::default())
        .await
        .unwrap();
    let guard = LeaseGuard::new(coord.clone(), vec![lease], Heartbeat::start(coord.clone()));
    break_store(&probe);
    let restore = {
        let probe = probe.clone();
        tokio::spawn(async move {
            tokio::time::sleep(restored_after).await;
            probe.unreachable.store(false, Ordering::SeqCst);
        })
    };
    guard.release(Outcome::Succeeded).await.unwrap();
    restore.await.unwrap();
    decode(&shared.load("k").await.unwrap().unwrap().bytes).unwrap()
}

#[tokio::test]
async fn a_release_retries_while_the_lease_may_stand() {
    let doc = release_through_outage(
        |probe| probe.unreachable.store(true, Ordering::SeqCst),
        Duration::from_millis(800),
    )
    .await;
    assert!(doc.tickets.is_empty(), "{doc:?}");
}

/// The release lands, the store goes away before answering, and the coordinator's re-read
/// fails too: the retried release finds its ticket ended as it asked, and that is success.
#[tokio::test]
async fn a_release_that_landed_unseen_is_not_reported_as_failed() {
    let doc = release_through_outage(
        |probe| probe.vanish_after_cas.store(true, Ordering::SeqCst),
        Duration::from_millis(500),
    )
    .await;
    assert!(doc.tickets.is_empty(), "{doc:?}");
    assert_eq!(doc.finished.last().unwrap().outcome, Outcome::Succeeded);
}
