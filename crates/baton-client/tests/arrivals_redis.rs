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

/// B, granted by A's release, holds from the version that release's wake-up carried (which
/// knew no arrival pending) without claiming it; A then arrives behind it. B's release lands past A's arrival
/// (taking none) and leaves the key with no holder: it must wake A's turn, which takes itself
/// in, where a write naming only B's ended ticket would leave it to its next look, a minute on.
#[tokio::test]
async fn a_release_that_leaves_the_key_free_past_an_arrival_wakes_its_turn() {
    let store = redis().await;
    let key = format!(
        "baton-client-test/{}/free-past-an-arrival",
        std::process::id()
    );
    let a = Arc::new(Coordinator::new(store.clone()));
    let b = Arc::new(Coordinator::new(redis().await));
    // B's grant's claim window (from its longest poll: 35 s) is when a turn that sees it
    // unclaimed would look again by itself: past the test's wait.
    let by_write = AcquireOptions {
        by_arrival: Some(false),
        poll: baton_client::poll::PollBounds {
            min: Duration::from_millis(250),
            max: Duration::from_secs(15),
        },
        ..woken_only()
    };
    let held_a = acquire(&a, &Pending::new(&key), &by_write).await.unwrap();
    // B holds through a heartbeat, as a library holder does: its grant stays unclaimed (no
    // write) while it is short, so its copy is the wake-up's.
    let b_turn = {
        let (b, key, options) = (b.clone(), key.clone(), by_write.clone());
        tokio::spawn(async move {
            let heartbeat = Heartbeat::start(b.clone());
            let leases = acquire_many(&b, &[Pending::new(&key)], &options, &heartbeat)
                .await
                .unwrap();
            LeaseGuard::new(b, leases, heartbeat)
        })
    };
    until_queued(&a, &key, 2).await;
    // B subscribes after its enqueue's answer: released before that, B would learn of its
    // grant by a read, not the wake-up this test is about (and then the test shows nothing).
    tokio::time::sleep(Duration::from_millis(300)).await;
    release(&a, &key, &held_a.token, Outcome::Succeeded)
        .await
        .unwrap();
    let held_b = b_turn.await.unwrap();
    let b_fence = held_b.leases()[0].fence;

    let a_turn = spawn_acquire(
        &a,
        &key,
        AcquireOptions {
            by_arrival: Some(true),
            ..woken_only()
        },
    );
    until_pending(store.as_ref(), &key, 1).await;
    held_b.release(Outcome::Succeeded).await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(20), a_turn)
        .await
        .expect("the release that left the key free woke the turn by arrival")
        .unwrap()
        .unwrap();
    assert!(lease.fence > b_fence);
    assert!(store.load(&key).await.unwrap().unwrap().arrivals.is_empty());
    release(&a, &key, &lease.token, Outcome::Succeeded)
        .await
        .unwrap();
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
