//! A grant handed to the heartbeat unclaimed: `acquire_many` (whose leases a heartbeat takes at
//! once, as `baton run`'s do) returns as soon as it sees a fresh grant, and the heartbeat's
//! first renewal claims it, a third into the time the grant stands (a shorter turn is released
//! unclaimed); a claim that is refused or does not land in time is a lost lease.
//!
//! On the in-memory store, whose wake-ups carry the document as PostgreSQL's, Redis's and
//! etcd's do. Counted and ordered; real time (the heartbeat keeps `std::time::Instant`s), with
//! bounds far from any scheduling delay.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire, acquire_many, AcquireOptions, Pending};
use baton_client::{Coordinator, Heartbeat, Lease};
use baton_core::{decode, Doc, Op, Outcome, Request, TicketState};
use baton_store::memory::MemoryStore;
use baton_store::Store;
use common::Probe;

mod common;

/// A one-second lease, so a few seconds show it renewed several times.
fn short_ttl() -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(1),
        ..AcquireOptions::default()
    }
}

async fn doc_of(store: &MemoryStore, key: &str) -> Doc {
    decode(&store.load(key).await.unwrap().unwrap().bytes).unwrap()
}

/// What the waiter's task saw the moment `acquire_many` returned, before anything else ran.
struct Returned {
    leases: Vec<Lease>,
    heartbeat: Heartbeat,
    /// The key's document then.
    doc: Doc,
    /// The waiter's CASes then.
    cases: u64,
}

/// A holder on `shared`, and a waiter (through `acquire_many` with a heartbeat, on `waiter`)
/// queued behind it and asleep until woken. Returns the holder's coordinator and lease, and the
/// waiter's task.
async fn holder_and_waiter(
    shared: &Arc<MemoryStore>,
    waiter: &Arc<Probe>,
) -> (Coordinator, Lease, tokio::task::JoinHandle<Returned>) {
    holder_on_and_waiter(shared, shared.clone(), waiter).await
}

/// [`holder_and_waiter`], the holder working through `holder_store`.
async fn holder_on_and_waiter(
    shared: &Arc<MemoryStore>,
    holder_store: Arc<dyn Store>,
    waiter: &Arc<Probe>,
) -> (Coordinator, Lease, tokio::task::JoinHandle<Returned>) {
    let holder = Coordinator::new(holder_store);
    let held = acquire(&holder, &Pending::new("k"), &AcquireOptions::default())
        .await
        .unwrap();
    let coord = Arc::new(Coordinator::new(waiter.clone()));
    let (store, counted) = (shared.clone(), waiter.clone());
    let wait = tokio::spawn(async move {
        let heartbeat = Heartbeat::start(coord.clone());
        let leases = acquire_many(&coord, &[Pending::new("k")], &short_ttl(), &heartbeat)
            .await
            .unwrap();
        // The memory store never suspends, so nothing else runs before these are taken.
        let doc = doc_of(&store, "k").await;
        let cases = counted.cases();
        Returned {
            leases,
            heartbeat,
            doc,
            cases,
        }
    });
    while doc_of(shared, "k").await.tickets.len() < 2 {
        tokio::task::yield_now().await;
    }
    // Let it subscribe, read once and fall asleep.
    tokio::time::sleep(Duration::from_millis(50)).await;
    (holder, held, wait)
}

/// The holder releases; the waiter's task returns what it saw at its turn.
async fn handed_over(
    holder: &Coordinator,
    held: &Lease,
    wait: tokio::task::JoinHandle<Returned>,
) -> Returned {
    baton_client::acquire::release(holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    wait.await.unwrap()
}

#[tokio::test]
async fn a_fresh_grant_is_returned_at_once_and_claimed_by_the_heartbeat() {
    let shared = Arc::new(MemoryStore::new());
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_and_waiter(&shared, &waiter).await;
    let writes_while_waiting = waiter.cases();

    let Returned {
        leases,
        heartbeat,
        doc,
        cases,
    } = handed_over(&holder, &held, wait).await;
    // Returned before writing anything: the grant is still unclaimed in the store...
    assert_eq!(cases, writes_while_waiting);
    let mine = doc.by_id(&leases[0].id).unwrap();
    assert_eq!(mine.state, TicketState::Held);
    assert!(!mine.claimed, "{mine:?}");
    assert_eq!(mine.fence, leases[0].fence);
    assert!(leases[0].fence > held.fence);

    // ...and the heartbeat claims it with its first renewal, a third into the time the grant
    // stands (so a shorter turn never writes a claim), well before that time is up.
    let returned = Instant::now();
    let stands = Duration::from_millis(
        leases[0]
            .lease_until_wall_ms
            .saturating_sub(baton_client::wall_ms()),
    );
    while !doc_of(&shared, "k")
        .await
        .by_id(&leases[0].id)
        .unwrap()
        .claimed
    {
        assert!(
            returned.elapsed() < stands,
            "the heartbeat did not claim the grant while it stood ({stands:?})"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let claimed_after = returned.elapsed();
    assert!(
        claimed_after >= stands / 3 - Duration::from_millis(50),
        "claimed {claimed_after:?} after the grant, which stands {stands:?}: a third in is due"
    );
    assert!(
        claimed_after <= stands / 2,
        "claimed {claimed_after:?} after the grant, which stands {stands:?}: too late for retries"
    );
    assert!(heartbeat.lost().borrow().is_none());

    // It then holds like any lease: renewed past its TTL, never lost.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(heartbeat.lost().borrow().is_none());
    let doc = doc_of(&shared, "k").await;
    assert_eq!(doc.holders().count(), 1, "{doc:?}");
}

/// A turn shorter than a third of the time its grant stands is given back unclaimed: the
/// waiter writes its enqueue and its release, nothing else (issue 19: a contended grant cost a
/// claim write more than it needs).
#[tokio::test]
async fn a_short_turn_is_released_without_a_claim_write() {
    let shared = Arc::new(MemoryStore::new());
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_and_waiter(&shared, &waiter).await;
    let writes_while_waiting = waiter.cases();
    assert_eq!(writes_while_waiting, 1, "the enqueue alone");
    let Returned {
        leases,
        heartbeat,
        cases,
        ..
    } = handed_over(&holder, &held, wait).await;
    assert_eq!(cases, writes_while_waiting);
    let coord = Coordinator::new(waiter.clone());
    let guard = baton_client::LeaseGuard::new(Arc::new(coord), leases.clone(), heartbeat);
    guard.release(Outcome::Succeeded).await.unwrap();
    assert_eq!(waiter.cases(), 2, "enqueue and release, no claim");
    let doc = doc_of(&shared, "k").await;
    assert!(doc.by_id(&leases[0].id).is_none(), "{doc:?}");
    assert_eq!(doc.holders().count(), 0);
}

#[tokio::test]
async fn a_claim_that_is_refused_is_a_lost_lease() {
    let shared = Arc::new(MemoryStore::new());
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_and_waiter(&shared, &waiter).await;
    // The waiter's writes fail for a while, so its heartbeat's claim is retried...
    waiter.down.store(true, Ordering::SeqCst);
    baton_client::acquire::release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    let Returned {
        leases, heartbeat, ..
    } = wait.await.unwrap();
    let mut lost = heartbeat.lost();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(lost.borrow_and_update().is_none());
    // ...and meanwhile an operator cancels the grant: the next try is refused.
    let mut cancel = Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "operator".into(),
        op: Op::Cancel {
            reason: None,
            id: leases[0].id.clone(),
            by: String::new(),
        },
    };
    holder.execute("k", &mut cancel).await.unwrap();
    waiter.down.store(false, Ordering::SeqCst);
    // The claim is first tried a third into the window (`Lease::next_renewal_ms`), and tried
    // again soon after each failure: the refusal is heard well within the window.
    tokio::time::timeout(short_ttl().claim(), lost.changed())
        .await
        .expect("the refused claim is signalled at its next try")
        .unwrap();
    let signalled = lost.borrow().clone().unwrap();
    assert_eq!(signalled.outcome, Some(Outcome::Cancelled));
}

#[tokio::test]
async fn a_claim_that_cannot_land_is_lost_before_the_grant_could_expire() {
    let shared = Arc::new(MemoryStore::new());
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_and_waiter(&shared, &waiter).await;
    // The waiter's last read was its first one, at most 50 ms ago: the grant below is fresh.
    let released_at = Instant::now();
    baton_client::acquire::release(&holder, "k", &held.token, Outcome::Succeeded)
        .await
        .unwrap();
    waiter.down.store(true, Ordering::SeqCst);
    let Returned { heartbeat, .. } = wait.await.unwrap();
    let mut lost = heartbeat.lost();
    let claim = AcquireOptions::default().claim();
    tokio::time::timeout(claim, lost.changed())
        .await
        .expect("the loss is signalled within the claim window")
        .unwrap();
    let lost_after = released_at.elapsed();
    assert!(
        lost_after <= claim - baton_client::heartbeat::safety_margin(claim),
        "lost {lost_after:?} after the grant; its claim window is {claim:?}"
    );
    assert!(lost.borrow().clone().unwrap().outcome.is_none());
}

/// Regression (torture harness, Redis seed 1004: a semaphore of 2 held by 3 after a 3 s black
/// hole). The releasing holder computes its grant with a reading of the store's clock taken
/// long before its write lands (the write was held in the network), so the grant's claim
/// deadline is that much earlier than the waiter's queued read suggests. The waiter must bound
/// the grant by its deadline on the store's clock, not by its own queued read alone.
#[tokio::test]
async fn a_grant_written_late_with_an_old_clock_reading_is_bounded_by_its_deadline() {
    let claim = short_ttl().claim();
    let margin = baton_client::heartbeat::safety_margin(claim);

    // Written with a reading 1 s old: still fresh enough to start unclaimed, but its bound is
    // the deadline's, a second shorter than the queued read's.
    let shared = Arc::new(MemoryStore::new());
    // The clock starts at 0: a lagging reading needs time behind it.
    shared.advance(60_000);
    let late = Probe::new(shared.clone(), true);
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_on_and_waiter(&shared, late.clone(), &waiter).await;
    let lag = Duration::from_secs(1);
    late.clock_lag_ms
        .store(lag.as_millis() as u64, Ordering::SeqCst);
    let Returned {
        leases, heartbeat, ..
    } = handed_over(&holder, &held, wait).await;
    let returned_wall_ms = baton_client::wall_ms();
    let trusted = Duration::from_millis(leases[0].lease_until_wall_ms - returned_wall_ms);
    assert!(
        trusted <= claim - lag - margin + Duration::from_millis(5),
        "trusted the grant for {trusted:?}; its deadline leaves at most {:?}",
        claim - lag - margin
    );
    heartbeat.stop_all();

    // Written with a reading older than half the window: too little is left to start
    // unclaimed, so the waiter claims it first.
    let shared = Arc::new(MemoryStore::new());
    // The clock starts at 0: a lagging reading needs time behind it.
    shared.advance(60_000);
    let late = Probe::new(shared.clone(), true);
    let waiter = Probe::new(shared.clone(), true);
    let (holder, held, wait) = holder_on_and_waiter(&shared, late.clone(), &waiter).await;
    let writes_while_waiting = waiter.cases();
    late.clock_lag_ms
        .store((claim / 2).as_millis() as u64 + 1_000, Ordering::SeqCst);
    let Returned {
        leases, doc, cases, ..
    } = handed_over(&holder, &held, wait).await;
    assert!(cases > writes_while_waiting, "returned without claiming");
    assert!(doc.by_id(&leases[0].id).unwrap().claimed);
}
