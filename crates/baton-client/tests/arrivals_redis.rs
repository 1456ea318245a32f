//! Turns by arrival on a real Redis (`BATON_TEST_REDIS_URL`, as `scripts/with-servers.sh --only
//! redis` sets it), where waiters listen by ticket: a write names only the tickets it changed,
//! and a turn by arrival, beside the document, is in none until a write takes it in.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, acquire_many, release, AcquireOptions, Lease, Pending};
use baton_client::{Coordinator, Heartbeat, LeaseGuard};
use baton_core::Outcome;
use baton_store::redis::RedisStore;
use baton_store::Store;

mod common;
use common::until_pending;

async fn redis() -> Arc<RedisStore> {
    let url = std::env::var("BATON_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "BATON_TEST_REDIS_URL is not set: this test needs a Redis server. Run it with \
             `scripts/with-servers.sh --only redis cargo test -p baton-client --test \
             arrivals_redis`"
        )
    });
    Arc::new(RedisStore::open(&url).await.unwrap())
}

/// Looks by timer only after a minute, and refreshes its waiter lease no sooner: within the
/// test, a turn moves only when a write wakes it.
fn woken_only() -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(30),
        waiter_ttl: Duration::from_secs(300),
        timeout: Some(Duration::from_secs(120)),
        poll: baton_client::poll::PollBounds {
            min: Duration::from_secs(60),
            max: Duration::from_secs(60),
        },
        ..AcquireOptions::default()
    }
}

/// Turns that enqueue by writing, looking within 15 s at most: a grant's claim window (from
/// its longest poll: 35 s) is when a turn that sees it unclaimed would look again by itself,
/// past each test's wait.
fn by_write(limit: u32) -> AcquireOptions {
    AcquireOptions {
        limit,
        by_arrival: Some(false),
        poll: baton_client::poll::PollBounds {
            min: Duration::from_millis(250),
            max: Duration::from_secs(15),
        },
        ..woken_only()
    }
}

/// A turn by arrival on a key of `limit` permits, moved only by wake-ups.
fn arriving(limit: u32) -> AcquireOptions {
    AcquireOptions {
        limit,
        by_arrival: Some(true),
        ..woken_only()
    }
}

/// A key of `limit` permits: A's turns through `a` hold all but one (`others`), and B, through
/// `b`, the last, granted by the release of another of A's turns. B holds through a heartbeat,
/// as a library holder does, its grant unclaimed (no write) while it is short, so its copy of
/// the key is that release's wake-up, which knew no arrival pending: B's release lands past
/// any arrival appended since. B learns of its grant by a read where it subscribes only after
/// the release (a loaded machine), and then B's release would take the arrivals in and the
/// test show nothing: tried again on a new key, waiting longer for the subscription.
struct HeldFromAWakeUp {
    key: String,
    a: Arc<Coordinator>,
    b: Arc<Coordinator>,
    others: Vec<Lease>,
    held_b: LeaseGuard,
}

async fn held_from_a_wake_up(name: &str, limit: u32) -> HeldFromAWakeUp {
    for (attempt, settle_ms) in [300, 1_000, 3_000].into_iter().enumerate() {
        let key = format!("baton-client-test/{}/{name}-{attempt}", std::process::id());
        let a = Arc::new(Coordinator::new(redis().await));
        let b = Arc::new(Coordinator::new(redis().await));
        let mut others = Vec::new();
        for _ in 1..limit {
            others.push(
                acquire(&a, &Pending::new(&key), &by_write(limit))
                    .await
                    .unwrap(),
            );
        }
        let first = acquire(&a, &Pending::new(&key), &by_write(limit))
            .await
            .unwrap();
        let b_turn = {
            let (b, key, options) = (b.clone(), key.clone(), by_write(limit));
            tokio::spawn(async move {
                let heartbeat = Heartbeat::start(b.clone());
                let leases = acquire_many(&b, &[Pending::new(&key)], &options, &heartbeat)
                    .await
                    .unwrap();
                LeaseGuard::new(b, leases, heartbeat)
            })
        };
        until_queued(&a, &key, limit as usize + 1).await;
        // B subscribes after its enqueue's answer.
        tokio::time::sleep(Duration::from_millis(settle_ms)).await;
        release(&a, &key, &first.token, Outcome::Succeeded)
            .await
            .unwrap();
        let held_b = b_turn.await.unwrap();
        let from_a_wake_up = b.cached_version(&key).is_some_and(|v| v.0.ends_with(".0"));
        if from_a_wake_up {
            return HeldFromAWakeUp {
                key,
                a,
                b,
                others,
                held_b,
            };
        }
        held_b.release(Outcome::Succeeded).await.unwrap();
        for lease in others {
            release(&a, &key, &lease.token, Outcome::Succeeded)
                .await
                .unwrap();
        }
    }
    panic!("B never learnt of its grant from a wake-up: its subscription came too late");
}

/// Releases B's hold from a copy that knew no arrival pending, so that the release lands past
/// the arrival that came since, and takes none in: else the test shows nothing.
async fn release_past_the_arrival(b: &Coordinator, key: &str, held: LeaseGuard) {
    let version = b.cached_version(key).unwrap();
    assert!(
        version.0.ends_with(".0"),
        "B's copy knew no arrival pending: {version:?}"
    );
    held.release(Outcome::Succeeded).await.unwrap();
}

/// A lock: B, granted by A's release, holds from the version that release's wake-up carried;
/// C (a process new to the key, which reads it first) then arrives behind it. B's release
/// lands past C's arrival (taking none) and leaves the key with no holder: it must wake C's
/// turn, which takes itself in, where a write naming only B's ended ticket would leave it to
/// its next look, a minute on.
#[tokio::test]
async fn a_release_that_leaves_the_key_free_past_an_arrival_wakes_its_turn() {
    let store = redis().await;
    let held = held_from_a_wake_up("free-past-an-arrival", 1).await;
    let key = &held.key;
    let b_fence = held.held_b.leases()[0].fence;
    let c = Arc::new(Coordinator::new(redis().await));

    let c_turn = spawn_acquire(&c, key, arriving(1));
    until_pending(store.as_ref(), key, 1).await;
    release_past_the_arrival(&held.b, key, held.held_b).await;
    let lease = tokio::time::timeout(Duration::from_secs(20), c_turn)
        .await
        .expect("the release that left the key free woke the turn by arrival")
        .unwrap()
        .unwrap();
    assert!(lease.fence > b_fence);
    assert!(store.load(key).await.unwrap().unwrap().arrivals.is_empty());
    release(&c, key, &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
}

/// A semaphore of two, held by one of A's turns and by B (granted as above); C (new to the
/// key) arrives behind them. B's release lands past C's arrival and leaves a permit free beside A's: it must wake
/// C's turn, which writes its enqueue and is granted, though the key is still held.
#[tokio::test]
async fn a_release_that_frees_a_permit_past_an_arrival_wakes_its_turn() {
    let store = redis().await;
    let held = held_from_a_wake_up("permit-past-an-arrival", 2).await;
    let (key, a) = (&held.key, &held.a);
    let b_fence = held.held_b.leases()[0].fence;
    let c = Arc::new(Coordinator::new(redis().await));

    let c_turn = spawn_acquire(&c, key, arriving(2));
    until_pending(store.as_ref(), key, 1).await;
    release_past_the_arrival(&held.b, key, held.held_b).await;
    let lease = tokio::time::timeout(Duration::from_secs(20), c_turn)
        .await
        .expect("the release that freed a permit woke the turn by arrival")
        .unwrap()
        .unwrap();
    assert!(lease.fence > b_fence);
    let doc = a.read(key).await.unwrap().doc.unwrap();
    assert_eq!(doc.holders().count(), 2, "C beside A's: {doc:?}");
    assert!(store.load(key).await.unwrap().unwrap().arrivals.is_empty());
    release(&c, key, &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
    for lease in &held.others {
        release(a, key, &lease.token, Outcome::Succeeded)
            .await
            .unwrap();
    }
}

fn spawn_acquire(
    coord: &Arc<Coordinator>,
    key: &str,
    options: AcquireOptions,
) -> tokio::task::JoinHandle<Result<Lease, baton_client::ClientError>> {
    let (coord, key) = (coord.clone(), key.to_owned());
    tokio::spawn(async move { acquire(&coord, &Pending::new(&key), &options).await })
}

/// Waits until `key`'s document, read through `coord`, has `n` tickets.
async fn until_queued(coord: &Coordinator, key: &str, n: usize) {
    for _ in 0..2_000 {
        let doc = coord.read(key).await.unwrap().doc;
        if doc.is_some_and(|doc| doc.tickets.len() >= n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} tickets never came");
}
