//! The rules' read in the background (the settings a write judges freezes by, read again at
//! half their one-second life) goes out once a write has its answer, never beside it: it
//! cannot serve the write it would go out with, and would only slow it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::Outcome;
use baton_store::memory::MemoryStore;
use common::Probe;

/// Past half the life of the rules' copy (one second), short of all of it: a write takes the
/// copy it has, and the copy is read again in the background.
const PAST_HALF_THE_RULES_LIFE: Duration = Duration::from_millis(600);

/// How long the release's CAS takes to reach the store: time for a read sent beside it to land.
const SLOW_CAS_MS: u64 = 100;

#[tokio::test]
async fn a_release_by_cas_sends_the_rules_read_after_its_write_not_beside_it() {
    release_past_half_the_rules_life(Probe::new(Arc::new(MemoryStore::new()), true)).await;
}

#[tokio::test]
async fn a_release_where_writes_may_take_the_row_lock_sends_the_rules_read_after_it_too() {
    let row_lock = Arc::new(tokio::sync::Mutex::new(()));
    release_past_half_the_rules_life(Probe::row_locked(Arc::new(MemoryStore::new()), &row_lock))
        .await;
}

/// Acquires `k`, waits past half the rules' life, and releases by a slow CAS: no load while
/// the CAS is under way, and one after it.
async fn release_past_half_the_rules_life(probe: Arc<Probe>) {
    let coord = Coordinator::new(probe.clone());
    let lease = acquire(&coord, &Pending::new("k"), &AcquireOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(PAST_HALF_THE_RULES_LIFE).await;
    probe
        .slow_keys
        .lock()
        .unwrap()
        .insert("k".into(), SLOW_CAS_MS);
    let loads = probe.loads();
    release(&coord, "k", &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        probe.loads_while_writing.load(Ordering::SeqCst),
        0,
        "no read went out while the release's CAS was under way"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while probe.loads() == loads {
        assert!(
            Instant::now() < deadline,
            "the rules are read again after the write"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
