//! Who writes when something in a key ends, or its window wants refilling from the backlog:
//! one waiter, not every waiter that notices. On a slow store every extra write of the same
//! moment is a conflict that delays the writes that matter (a grantee's claim, a holder's
//! release): fifty waiters writing at once made leases run out on the emulated S3.
//!
//! On the in-memory store in real time (its clock is the machine's), each process behind a
//! probe that cannot push, as S3 and DynamoDB: the waiters poll. The checks count writes.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::poll::PollBounds;
use baton_client::Coordinator;
use baton_core::{decode, Doc, Outcome};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

/// Polls from `min_ms` to 400 ms, and a waiter lease refreshed every ten seconds.
fn options(min_ms: u64) -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(600),
        waiter_ttl: Duration::from_secs(30),
        poll: PollBounds {
            min: Duration::from_millis(min_ms),
            max: Duration::from_millis(400),
        },
        ..AcquireOptions::default()
    }
}

async fn doc_of(store: &MemoryStore) -> Doc {
    decode(&store.load("k").await.unwrap().unwrap().bytes).unwrap()
}

/// Waits until the document of `k` satisfies `what`, for at most 20 s.
async fn until(store: &MemoryStore, what: impl Fn(&Doc) -> bool) {
    let began = Instant::now();
    while !what(&doc_of(store).await) {
        assert!(began.elapsed() < Duration::from_secs(20), "never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A waiter of `k` on `shared` behind a probe of its own that cannot push, whose writes take
/// `write_ms` to land: its task (which takes the turn and gives it back at once) and the probe.
async fn waiter(
    shared: &Arc<MemoryStore>,
    options: AcquireOptions,
    write_ms: u64,
) -> (tokio::task::JoinHandle<u64>, Arc<Probe>) {
    let probe = Probe::new(shared.clone(), false);
    probe.slow_keys.lock().unwrap().insert("k".into(), write_ms);
    let coord = Coordinator::new(probe.clone());
    let arrivals = doc_of(shared).await.next_arrival;
    let task = tokio::spawn(async move {
        let pending = Pending::new("k");
        let lease = acquire(&coord, &pending, &options).await.unwrap();
        release(&coord, "k", &lease.token, Outcome::Succeeded)
            .await
            .unwrap();
        lease.fence
    });
    // Enqueued before the next one starts: the order of arrival is the order of the test.
    until(shared, |doc| doc.next_arrival > arrivals).await;
    (task, probe)
}

/// Waits for every waiter's turn and checks they came in arrival order (fences rising).
async fn every_turn_in_order(tasks: Vec<tokio::task::JoinHandle<u64>>) {
    let mut fences = Vec::new();
    for task in tasks {
        fences.push(task.await.unwrap());
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "granted out of arrival order: fences {fences:?}"
    );
}

fn writes(probes: &[Arc<Probe>]) -> u64 {
    probes.iter().map(|p| p.cases()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_in_the_window_is_written_by_one_waiter_not_by_all() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(shared.clone());
    let held = acquire(&holder, &Pending::new("k"), &options(100))
        .await
        .unwrap();
    // First in line, then silent: its waiter lease runs out while eight others wait behind it.
    let short = AcquireOptions {
        waiter_ttl: Duration::from_secs(2),
        ..options(100)
    };
    let (silent, _) = waiter(&shared, short, 0).await;
    let silent_id = doc_of(&shared).await.queued()[0].id.clone();
    silent.abort();
    let mut tasks = Vec::new();
    let mut probes = Vec::new();
    for _ in 0..8 {
        // Writes that take 100 ms: all of them would be under way at once.
        let (task, probe) = waiter(&shared, options(100), 100).await;
        tasks.push(task);
        probes.push(probe);
    }
    let before = writes(&probes);
    until(&shared, |doc| doc.by_id(&silent_id).is_none()).await;
    // Long enough for every waiter to have looked again after the expiry.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let wrote = writes(&probes) - before;
    assert!(
        (1..=2).contains(&wrote),
        "the eight waiters wrote {wrote} times for one expiry"
    );

    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    every_turn_in_order(tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_beyond_the_window_drains_with_two_writes_a_turn() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(shared.clone());
    let held = acquire(&holder, &Pending::new("k"), &options(20))
        .await
        .unwrap();
    // 16 in the window, 32 written out as a segment, 2 in the tail.
    let mut tasks = Vec::new();
    let mut probes = Vec::new();
    for _ in 0..50 {
        let (task, probe) = waiter(&shared, options(20), 10).await;
        tasks.push(task);
        probes.push(probe);
    }
    let doc = doc_of(&shared).await;
    let backlog = doc.backlog.as_ref().expect("a backlog");
    assert_eq!((doc.queued().len(), backlog.in_segments), (16, 32));
    // Held past a refresh of the waiter leases: the window's waiters refresh theirs; those in
    // the backlog have none until they are taken in. The queue then drains in about three
    // seconds, before the next refreshes are due.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let before = writes(&probes);

    release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    every_turn_in_order(tasks).await;
    // Each turn: the refresh that claims its grant, and its release. Whatever else was written
    // (a refill nobody else would make, a conflict) stays a handful.
    let extra = writes(&probes) - before - 2 * 50;
    assert!(extra <= 5, "{extra} writes beyond two a turn");
}
