//! Lease timing under lost and late replies, slow renewals and lagging clock readings: the
//! findings of the outside review, each as a test that failed before its fix.
//!
//! The safety property every test checks is the one that matters to a user: no moment at which
//! two processes both believe they hold a mutex. A process "believes" from when the library
//! hands it a lease until its heartbeat signals the lease lost; the other's belief starts when
//! its `acquire` returns. Both are instants of this one test process, so the check is an
//! ordering, not a timing assertion.
//!
//! On the in-memory store (its clock runs in real time) behind probes that lose, delay or slow
//! down what one process sends.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire, acquire_many, release, AcquireOptions, Pending};
use baton_client::{BootClock, Coordinator, Heartbeat, Lease, LocalClock};
use baton_core::{decode, Doc, Finished, Outcome, Request, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

fn ttl(ttl: Duration) -> AcquireOptions {
    AcquireOptions {
        ttl,
        poll: baton_client::poll::PollBounds {
            min: Duration::from_millis(20),
            max: Duration::from_millis(100),
        },
        ..AcquireOptions::default()
    }
}

async fn doc_of(store: &MemoryStore, key: &str) -> Doc {
    decode(&store.load(key).await.unwrap().unwrap().bytes).unwrap()
}

/// Waits until `what` holds, for at most 10 s.
async fn until(what: impl Fn() -> bool) {
    let began = Instant::now();
    while !what() {
        assert!(began.elapsed() < Duration::from_secs(10), "never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The enqueue of `pending` as the library sends it: a mutex, TTL 3 s, claim window 4 s.
fn enqueue_request(attempt: &str, pending: &Pending) -> Request {
    Request::new(
        attempt,
        baton_core::Op::Enqueue(baton_core::Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: pending.id.clone(),
            token: pending.token.clone(),
            mode: baton_core::Mode::Normal,
            limit: 1,
            context: String::new(),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 3_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 4_000,
            max_live: 100,
            once: None,
            cancel_running: false,
            override_freeze: None,
        }),
    )
}

/// A holder of `key` on `shared`, with its coordinator.
async fn holder(shared: &Arc<MemoryStore>, key: &str) -> (Coordinator, Lease) {
    let coord = Coordinator::new(shared.clone());
    let lease = acquire(&coord, &Pending::new(key), &AcquireOptions::default())
        .await
        .unwrap();
    (coord, lease)
}

/// Finding 1: an enqueue whose reply was lost, retried after a release granted its ticket,
/// finds the grant unclaimed. `acquire` promises a claimed lease; it used to return the
/// unclaimed grant as one.
#[tokio::test]
async fn a_retried_enqueue_that_finds_its_grant_unclaimed_claims_it_before_returning() {
    for with_heartbeat in [false, true] {
        let shared = Arc::new(MemoryStore::new());
        let (first, held) = holder(&shared, "k").await;
        let probe = Probe::new(shared.clone(), true);
        probe.vanish_after_cas.store(true, Ordering::SeqCst);
        let coord = Arc::new(Coordinator::new(probe.clone()));
        let pending = Pending::new("k");
        let id = pending.id.clone();
        let wait = {
            let coord = coord.clone();
            tokio::spawn(async move {
                let options = AcquireOptions::default();
                if with_heartbeat {
                    let heartbeat = Heartbeat::start(coord.clone());
                    let leases = acquire_many(&coord, &[pending], &options, &heartbeat).await;
                    (leases.map(|mut l| l.remove(0)), Some(heartbeat))
                } else {
                    (acquire(&coord, &pending, &options).await, None)
                }
            })
        };
        // The enqueue landed and its answer was lost; the store is out of reach for a while.
        until(|| probe.unreachable.load(Ordering::SeqCst)).await;
        release(&first, "k", &held.token, Outcome::Succeeded)
            .await
            .unwrap();
        probe.unreachable.store(false, Ordering::SeqCst);
        let (lease, heartbeat) = wait.await.unwrap();
        let lease = lease.unwrap();
        assert_eq!(lease.id, id);
        // Claimed before it was returned, or (handed to a heartbeat) claimed a third into the
        // time the grant stands, which is at most its claim window.
        let began = Instant::now();
        let claim_within = AcquireOptions::default().claim() / 2;
        while !doc_of(&shared, "k").await.by_id(&id).unwrap().claimed {
            assert!(
                with_heartbeat && began.elapsed() < claim_within,
                "the grant was returned unclaimed (heartbeat: {with_heartbeat})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(heartbeat) = heartbeat {
            assert!(heartbeat.lost().borrow().is_none());
        }
    }
}

/// Finding 2: a lease is counted from before the write that set it, not from when its reply
/// was handled. The claim lands, the answer comes back after the lease has run out on the
/// store and another process took the key: the late process must not start.
#[tokio::test]
async fn a_grant_whose_reply_comes_back_after_its_lease_ran_out_is_never_started() {
    for with_heartbeat in [false, true] {
        let shared = Arc::new(MemoryStore::new());
        let probe = Probe::new(shared.clone(), true);
        probe.reply_delay_ms.store(1_500, Ordering::SeqCst);
        let coord = Arc::new(Coordinator::new(probe.clone()));
        let options = ttl(Duration::from_secs(1));
        let late = {
            let coord = coord.clone();
            let options = options.clone();
            tokio::spawn(async move {
                let pending = Pending::new("k");
                let result = if with_heartbeat {
                    let heartbeat = Heartbeat::start(coord.clone());
                    let leases = acquire_many(&coord, &[pending], &options, &heartbeat).await;
                    let lost = heartbeat.lost().borrow().is_some();
                    leases.map(|_| lost)
                } else {
                    acquire(&coord, &pending, &options).await.map(|_| false)
                };
                (result, Instant::now())
            })
        };
        // The grant (made and claimed by the enqueue itself) is in the store; its reply is
        // on its way for 1.5 s. Another process takes the key once the lease has run out.
        until(|| probe.cases() > 0).await;
        let other = Coordinator::new(shared.clone());
        let other_lease = acquire(&other, &Pending::new("k"), &options).await.unwrap();
        let other_began = Instant::now();
        let (late_result, returned_at) = late.await.unwrap();
        assert!(returned_at > other_began, "the reply was not late enough");
        match late_result {
            Err(_) | Ok(true) => {}
            Ok(false) => panic!(
                "started a lease that had run out {:?} earlier, while {} held the key \
                 (heartbeat: {with_heartbeat})",
                returned_at - other_began,
                other_lease.id
            ),
        }
    }
}

/// Finding 1, when the retry writes: an enqueue granted and claimed at once, whose answer is
/// lost, is retried after another holder's lease ran out; the retry expires that holder (so it
/// writes) and finds its own ticket held and claimed — by the first attempt, whose deadline
/// counts from long before this write. The lease must not be counted from the retry.
#[tokio::test]
async fn a_retried_enqueue_that_writes_does_not_count_an_earlier_grant_from_its_own_write() {
    let shared = Arc::new(MemoryStore::new());
    let two = |ttl_ms: u64| AcquireOptions {
        limit: 2,
        ..ttl(Duration::from_millis(ttl_ms))
    };
    let first = Coordinator::new(shared.clone());
    acquire(&first, &Pending::new("k"), &two(1_000))
        .await
        .unwrap();
    // The second slot is granted and claimed by the enqueue itself; its answer is held for
    // 1.5 s and lost, and the retry then expires the first holder.
    let probe = Probe::new(shared.clone(), true);
    probe.lose_reply_after_ms.store(1_500, Ordering::SeqCst);
    let coord = Coordinator::new(probe.clone());
    let lease = acquire(&coord, &Pending::new("k"), &two(3_000))
        .await
        .unwrap();
    // Two more processes take both slots, the second once the store has ended what it holds.
    let others: Vec<Lease> = {
        let mut others = Vec::new();
        for _ in 0..2 {
            let other = Coordinator::new(shared.clone());
            others.push(
                acquire(&other, &Pending::new("k"), &two(3_000))
                    .await
                    .unwrap(),
            );
        }
        others
    };
    let now_ms = coord.local_ms();
    assert!(
        lease.holds_until_ms <= now_ms,
        "believed it held a slot of two for {} ms after {} and {} took both",
        lease.holds_until_ms - now_ms,
        others[0].id,
        others[1].id
    );
}

/// Finding 1, across calls: a request that an earlier call already sent (its answer lost,
/// so it carries what that attempt saw) may find its ticket granted and claimed by that
/// earlier write — landed late, at a time this call cannot know — even when an attempt of this
/// call computed the same grant and its answer was lost too. No lease may be counted from
/// this call's attempts.
#[tokio::test]
async fn a_retry_carried_over_from_an_earlier_call_counts_no_lease_from_its_own_attempts() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Coordinator::new(probe.clone());
    // This process has the key as empty in its cache.
    coord.read("k").await.unwrap();
    let pending = Pending::new("k");
    let mut request = enqueue_request("attempt", &pending);
    request.finishes_seen = Some(0);
    // The earlier call's write lands late; this call's own write, computed from the cache,
    // conflicts with it, and its answer is lost.
    let landed_late = Coordinator::new(shared.clone());
    landed_late
        .execute("k", &mut request.clone())
        .await
        .unwrap();
    probe.lose_reply_after_ms.store(1, Ordering::SeqCst);
    let executed = coord.execute("k", &mut request).await.unwrap();
    let held = doc_of(&shared, "k").await;
    assert!(held.by_id(&pending.id).unwrap().claimed);
    assert!(
        executed.basis.is_none() && executed.granted.is_empty(),
        "counted the lease an earlier call set from this call's attempt: {:?}, grants {:?}",
        executed.basis,
        executed.granted
    );
}

/// Finding 2, renewals: a renewal's deadline is set from the writer's reading of the store's
/// clock, which may lag the store by `behind_ms`; the holder must count that lag off.
#[tokio::test]
async fn a_renewal_with_a_lagging_clock_reading_is_given_up_before_anyone_else_holds() {
    let shared = Arc::new(MemoryStore::new());
    // The clock starts at 0: a lagging reading needs time behind it.
    shared.advance(60_000);
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let options = ttl(Duration::from_secs(2));
    let heartbeat = Heartbeat::start(coord.clone());
    acquire_many(&coord, &[Pending::new("k")], &options, &heartbeat)
        .await
        .unwrap();
    // Its readings now lag the store by 1 s (its requests are slow to come back); the first
    // renewal (at a third of the TTL) sets a deadline a second early, then the store is gone.
    probe.clock_lag_ms.store(1_000, Ordering::SeqCst);
    let renewed = probe.cases();
    until(|| probe.cases() > renewed).await;
    probe.down.store(true, Ordering::SeqCst);
    let mut lost = heartbeat.lost();
    let watcher = tokio::spawn(async move {
        lost.changed().await.unwrap();
        Instant::now()
    });
    let other = Coordinator::new(shared.clone());
    acquire(&other, &Pending::new("k"), &options).await.unwrap();
    let other_began = Instant::now();
    let lost_at = watcher.await.unwrap();
    assert!(
        lost_at < other_began,
        "believed it held {:?} after another process took the key",
        lost_at - other_began
    );
}

/// Finding 4: a slow renewal of one key must not hold up the claim of another. The claim of
/// an unclaimed grant has to land before its bound; a heartbeat that renews one lease at a
/// time sends it only after the slow renewal is done, when the bound has passed.
#[tokio::test]
async fn a_slow_renewal_of_one_key_does_not_hold_up_the_claim_of_another() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let options = ttl(Duration::from_secs(3));
    let a = acquire(&coord, &Pending::new("a"), &options).await.unwrap();
    // An unclaimed grant of "b": queued behind a holder that then releases.
    let (first, held_b) = holder(&shared, "b").await;
    let b_pending = Pending::new("b");
    let mut enqueue = enqueue_request("enqueue-b", &b_pending);
    coord.execute("b", &mut enqueue).await.unwrap();
    // Renewals of "a" now take 1.2 s to reach the store (then land, in A's time).
    probe.slow_keys.lock().unwrap().insert("a".into(), 1_200);
    let heartbeat = Heartbeat::start(coord.clone());
    heartbeat.add(&a);
    // A's first renewal is under way from 1 s on.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    release(&first, "b", &held_b.token, Outcome::Succeeded)
        .await
        .unwrap();
    let granted = doc_of(&shared, "b").await;
    let b_ticket = granted.by_id(&b_pending.id).unwrap().clone();
    assert_eq!(b_ticket.state, TicketState::Held);
    assert!(!b_ticket.claimed);
    // The grant surely stands 800 ms from now (its claim window is 4 s).
    let b = Lease {
        key: "b".into(),
        id: b_pending.id.clone(),
        token: b_pending.token.clone(),
        fence: b_ticket.fence,
        acquired_wall_ms: b_ticket.granted_wall_ms,
        lease_until_wall_ms: baton_client::wall_ms() + 800,
        ttl_ms: 3_000,
        holds_until_ms: coord.local_ms() + 800,
        claimed: false,
        slots: Vec::new(),
    };
    heartbeat.add(&b);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        doc_of(&shared, "b").await.by_id(&b.id).unwrap().claimed,
        "the claim of b waited behind the slow renewal of a"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        heartbeat.lost().borrow().is_none(),
        "{:?}",
        heartbeat.lost().borrow()
    );
}

/// Finding 5: an enqueue whose reply was lost and whose re-read failed is retried by the wait
/// after the outage. If more tickets ended meanwhile than the document remembers, the retry
/// cannot tell whether its ticket existed: it must be refused as uncertain, not make a second
/// ticket with the same id (which would end twice).
#[tokio::test]
async fn a_retried_enqueue_after_a_long_outage_never_makes_a_second_ticket() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), true);
    probe.vanish_after_cas.store(true, Ordering::SeqCst);
    let coord = Coordinator::new(probe.clone());
    let pending = Pending::new("k");
    let id = pending.id.clone();
    let (first, held) = holder(&shared, "k").await;
    let options = AcquireOptions {
        waiter_ttl: Duration::from_secs(2),
        ..AcquireOptions::default()
    };
    let wait = tokio::spawn(async move {
        let acquired = acquire(&coord, &pending, &options).await;
        if let Ok(lease) = &acquired {
            release(&coord, "k", &lease.token, Outcome::Succeeded)
                .await
                .unwrap();
        }
        acquired
    });
    until(|| probe.unreachable.load(Ordering::SeqCst)).await;
    // During the outage: the waiter's ticket is abandoned, and nine more tickets end.
    shared.advance(5_000);
    release(&first, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    for _ in 0..9 {
        let (coord, lease) = holder(&shared, "k").await;
        release(&coord, "k", &lease.token, Outcome::Succeeded)
            .await
            .unwrap();
    }
    probe.unreachable.store(false, Ordering::SeqCst);
    let acquired = wait.await.unwrap();
    let history = shared.history("k", 0, 1_000).await.unwrap();
    let ended: Vec<Finished> = history
        .iter()
        .map(|r| Finished::decode(&r.bytes).unwrap())
        .filter(|f| f.id == id)
        .collect();
    assert!(
        ended.len() <= 1,
        "ticket {id} ended {} times: {ended:?}",
        ended.len()
    );
    assert!(acquired.is_err(), "{acquired:?}");
}

/// A local clock that can jump forward as the boot-time clock does across a suspend, while
/// the monotonic clock (and with it tokio's timers) stands still.
#[derive(Debug, Default)]
struct Suspendable {
    suspended_ms: AtomicU64,
}

impl LocalClock for Suspendable {
    fn now_ms(&self) -> u64 {
        BootClock.now_ms() + self.suspended_ms.load(Ordering::SeqCst)
    }
}

/// Finding 3: after a suspend the store's clock has moved on and the lease has ended; the
/// holder must notice at once, not at its next renewal (a third of the TTL, on a timer that did
/// not count the suspend).
#[tokio::test]
async fn a_lease_is_lost_at_once_when_the_machine_resumes_from_a_suspend() {
    let shared = Arc::new(MemoryStore::new());
    let local = Arc::new(Suspendable::default());
    let coord = Arc::new(Coordinator::with_local_clock(shared.clone(), local.clone()));
    let options = ttl(Duration::from_secs(30));
    let heartbeat = Heartbeat::start(coord.clone());
    acquire_many(&coord, &[Pending::new("k")], &options, &heartbeat)
        .await
        .unwrap();
    let mut lost = heartbeat.lost();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(lost.borrow_and_update().is_none());
    // A minute suspended: the store's clock and the boot-time clock moved on.
    shared.advance(60_000);
    local.suspended_ms.store(60_000, Ordering::SeqCst);
    let resumed = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), lost.changed())
        .await
        .expect("the lost lease is noticed long before the next renewal (10 s)")
        .unwrap();
    let noticed_after = resumed.elapsed();
    assert!(
        noticed_after < Duration::from_secs(2),
        "noticed {noticed_after:?} after the resume; the heartbeat looks every {:?}",
        baton_client::heartbeat::CHECK_EVERY
    );
    assert!(heartbeat.standing().is_err());
}
