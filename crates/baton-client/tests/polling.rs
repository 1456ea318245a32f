//! How often waiters read a store that cannot push (S3, DynamoDB): by their place in the queue,
//! never more than the documented bound ([`PollBounds::reads_per_minute_at_most`]).
//!
//! On the in-memory store with its wake-ups hidden, in tokio's paused time: a minute of waiting
//! takes no time, and the counts do not depend on the machine's load.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::poll::PollBounds;
use baton_client::Coordinator;
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

fn options() -> AcquireOptions {
    AcquireOptions {
        // Nothing expires within the minute: only the polling explains the reads.
        ttl: Duration::from_secs(600),
        waiter_ttl: Duration::from_secs(600),
        ..AcquireOptions::default()
    }
}

/// A holder and three waiters queued behind it in order; each waits a minute of paused time.
/// Returns each waiter's reads during that minute, next in line first.
async fn reads_in_a_minute(push: bool) -> Vec<u64> {
    let shared = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(Probe::new(shared.clone(), push));
    acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    let mut waiters = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..3 {
        let store = Probe::new(shared.clone(), push);
        let coord = Coordinator::new(store.clone());
        stores.push(store);
        // Enqueued one after another, so their places are 0, 1, 2.
        let pending = Pending::new("k");
        let wait = tokio::spawn(async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                acquire(&coord, &pending, &options()),
            )
            .await
        });
        // Let this waiter enqueue before the next one starts.
        while shared.load("k").await.unwrap().is_some_and(|v| {
            let doc = baton_core::decode(&v.bytes).unwrap();
            doc.tickets.len() < waiters.len() + 2
        }) {
            tokio::task::yield_now().await;
        }
        waiters.push(wait);
    }
    for wait in waiters {
        let waited = wait.await.unwrap();
        assert!(waited.is_err(), "nobody is granted while the holder holds");
    }
    stores.iter().map(|s| s.loads()).collect()
}

#[tokio::test(start_paused = true)]
async fn without_push_waiters_read_by_their_place_within_the_documented_bound() {
    let bounds = PollBounds::default();
    let reads = reads_in_a_minute(false).await;
    for (place, &n) in reads.iter().enumerate() {
        let bound = bounds.reads_per_minute_at_most(place);
        // One read more than the bound at most: the first one, right after enqueueing.
        assert!(n <= bound + 1, "place {place}: {n} reads, bound {bound}");
        // And not far below: every interval is at most 1.2 times its nominal length.
        let nominal = bounds.interval(place, false).as_secs_f64() * 1.2;
        let fewest = (60.0 / nominal).floor() as u64;
        assert!(
            n >= fewest - 1,
            "place {place}: {n} reads, expected ≥ {fewest}"
        );
    }
    assert!(
        reads[0] > reads[2] * 3,
        "the waiter next in line reads far more often than one two places back: {reads:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_push_waiters_read_by_timer_only_at_the_longest_interval() {
    let bounds = PollBounds::default();
    let reads = reads_in_a_minute(true).await;
    let most = (60.0 / (bounds.max.as_secs_f64() * 0.8)).ceil() as u64;
    for (place, &n) in reads.iter().enumerate() {
        // One immediate read after subscribing, then one per longest interval, and the
        // wake-ups of the later waiters' enqueues.
        assert!(
            n <= most + 4,
            "place {place}: {n} reads, at most {most} expected"
        );
    }
}

/// Where wake-ups carry the document (the memory store's do, like PostgreSQL's, Redis's and
/// etcd's), a waiter woken by the release reads nothing: it takes the pushed document, sees its
/// grant and claims it with one CAS. Counted, not timed.
#[tokio::test(start_paused = true)]
async fn a_waiter_woken_with_the_document_does_not_read() {
    let shared = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(shared.clone());
    let lease = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    let store = Probe::new(shared.clone(), true);
    let coord = Coordinator::new(store.clone());
    let wait = tokio::spawn(async move {
        let lease = acquire(&coord, &Pending::new("k"), &options()).await;
        (lease, coord)
    });
    // The waiter enqueues (a load, then its CAS), subscribes and reads once, then sleeps until
    // woken; paused time only moves on once it is asleep.
    while store.loads() < 2 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loads_before = store.loads();
    baton_client::acquire::release(&holder, "k", &lease.token, baton_core::Outcome::Succeeded)
        .await
        .unwrap();
    let (granted, _coord) = wait.await.unwrap();
    let granted = granted.unwrap();
    assert!(granted.fence > lease.fence, "{granted:?} after {lease:?}");
    assert_eq!(
        store.loads(),
        loads_before,
        "the waiter read the store after its wake-up, which carried the document"
    );
}

/// Drains a queue: a holder takes `k` on `shared`, `waiters` enqueue behind it in order, each
/// releasing at once when granted, and the holder releases. Checks that the grants came in
/// queue order and that no waiter fell back on its timer (paused time: the drain takes none
/// unless a timer fires). Returns how much `count` grew during the drain.
async fn drain(
    shared: &Arc<MemoryStore>,
    waiters: Vec<(Coordinator, AcquireOptions)>,
    count: impl Fn() -> u64,
) -> u64 {
    let holder = Coordinator::new(shared.clone());
    let lease = acquire(&holder, &Pending::new("k"), &options())
        .await
        .unwrap();
    let mut waits = Vec::new();
    for (n, (coord, options)) in waiters.into_iter().enumerate() {
        waits.push(tokio::spawn(async move {
            let lease = acquire(&coord, &Pending::new("k"), &options).await.unwrap();
            // Each await below may let another task run: the writes do not all come in pairs.
            tokio::task::yield_now().await;
            release(&coord, "k", &lease.token, baton_core::Outcome::Succeeded)
                .await
                .unwrap();
            lease.fence
        }));
        // Enqueued in order: this one before the next starts.
        while shared
            .load("k")
            .await
            .unwrap()
            .is_some_and(|v| baton_core::decode(&v.bytes).unwrap().tickets.len() < n + 2)
        {
            tokio::task::yield_now().await;
        }
    }
    // Every waiter asleep on its watch.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let before = count();
    let started = tokio::time::Instant::now();
    release(&holder, "k", &lease.token, baton_core::Outcome::Succeeded)
        .await
        .unwrap();
    let mut fences = Vec::new();
    for wait in waits {
        fences.push(wait.await.unwrap());
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "granted out of queue order: fences {fences:?}"
    );
    assert!(
        started.elapsed() < PollBounds::default().max,
        "a waiter waited for its timer: {:?}",
        started.elapsed()
    );
    count() - before
}

/// A queue of waiters whose wake-ups are bare (SQLite's file watcher only says that the file
/// changed): a waiter looks at a bare wake-up only when it could bring its turn
/// ([`baton_client::poll::wakes_before_look`]), so the queue drains with far fewer reads than
/// one per waiter and write, in queue order, and no waiter falls back on its timer.
#[tokio::test(start_paused = true)]
async fn with_bare_wake_ups_waiters_far_back_do_not_read_at_every_write() {
    const WAITERS: usize = 12;
    let shared = Arc::new(MemoryStore::new());
    let stores: Vec<_> = (0..WAITERS).map(|_| Probe::bare(shared.clone())).collect();
    let waiters = stores
        .iter()
        .map(|store| (Coordinator::new(store.clone()), options()))
        .collect();
    let loads = drain(&shared, waiters, || stores.iter().map(|s| s.loads()).sum()).await;
    // Looking at every wake-up costs a read per waiter still queued at each of the ~2 writes
    // per turn (the release that grants, the claim): 2 * (12 + 11 + ... + 1) = 156 here.
    let every_wake_up = 2 * (WAITERS * (WAITERS + 1) / 2) as u64;
    assert!(
        loads * 2 <= every_wake_up,
        "{loads} reads to drain {WAITERS} waiters; looking at every wake-up costs {every_wake_up}"
    );
}

/// The same drain where each wake-up carries the document (PostgreSQL, Redis, SQLite): taking a
/// pushed document costs no read but still a decode and a look, for every waiter at every
/// write — with 16 waiters on one key, most of a hot key's CPU. A waiter far back takes only the
/// document of the wake-up that may bring its turn (the latest: older ones are never needed),
/// so the queue drains with far fewer looks than one per waiter and write, still in order and
/// without a timer.
#[tokio::test(start_paused = true)]
async fn with_pushed_documents_waiters_far_back_do_not_look_at_every_write() {
    const WAITERS: usize = 12;
    let shared = Arc::new(MemoryStore::new());
    let looks = Arc::new(AtomicU64::new(0));
    let waiters = (0..WAITERS)
        .map(|_| {
            let counted = looks.clone();
            let options = AcquireOptions {
                on_progress: Some(Arc::new(move |_: &_| {
                    counted.fetch_add(1, Ordering::Relaxed);
                })),
                ..options()
            };
            (Coordinator::new(Probe::new(shared.clone(), true)), options)
        })
        .collect();
    let looks = drain(&shared, waiters, || looks.load(Ordering::Relaxed)).await;
    let every_wake_up = 2 * (WAITERS * (WAITERS + 1) / 2) as u64;
    assert!(
        looks * 2 <= every_wake_up,
        "{looks} looks to drain {WAITERS} waiters; looking at every wake-up costs {every_wake_up}"
    );
}

/// Clients cycling on one key, each back at the end of the queue right after its release, some
/// taking their wake-ups late (a busy process; a watch keeps only the latest): one wake-up then
/// stands for the writes of several grants. A waiter counts the writes
/// its wake-ups tell of, not the wake-ups, so none sleeps on its timer through its own turn
/// while the whole queue waits for it.
#[tokio::test(start_paused = true)]
async fn waiters_count_the_writes_a_late_wake_up_stands_for() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 4;
    // A timer wait would take at least half of this.
    let timer = Duration::from_secs(60);
    let shared = Arc::new(MemoryStore::new());
    let started = tokio::time::Instant::now();
    let mut clients = Vec::new();
    for n in 0..CLIENTS {
        // Some take their wake-ups far later than others: several grants go by meanwhile.
        let late = Duration::from_millis(if n % 2 == 0 { 1 } else { 15 });
        let store = Probe::slow_wakes(shared.clone(), late);
        let coord = Coordinator::new(store);
        let options = AcquireOptions {
            poll: PollBounds::up_to(timer),
            ..options()
        };
        clients.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for _ in 0..ROUNDS {
                let lease = acquire(&coord, &Pending::new("k"), &options).await.unwrap();
                fences.push(lease.fence);
                tokio::task::yield_now().await;
                release(&coord, "k", &lease.token, baton_core::Outcome::Succeeded)
                    .await
                    .unwrap();
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for client in clients {
        fences.extend(client.await.unwrap());
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        CLIENTS * ROUNDS,
        "every grant has a fence of its own"
    );
    assert!(
        started.elapsed() < timer / 4,
        "{} grants took {:?}: a waiter slept on its timer through its turn",
        CLIENTS * ROUNDS,
        started.elapsed()
    );
}
