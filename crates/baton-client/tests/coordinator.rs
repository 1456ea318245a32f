//! The coordinator and the waiting, on the in-memory store (unit tests of the client: every
//! store is tested for real by the conformance suite and the CLI tests).
//!
//! A wrapper store injects the faults a network gives: a CAS whose reply is lost after it was
//! written, and one lost before it was written. The core must recognise the retried attempt, so
//! no ticket is made twice and no release is refused as a double release.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use baton_client::acquire::{acquire, acquire_many, release, renew, AcquireOptions, Pending};
use baton_client::{ClientError, Coordinator, Heartbeat};
use baton_core::{Outcome, Refusal};
use baton_store::memory::MemoryStore;
use baton_store::{
    Capabilities, CasOutcome, HistoryRecord, Store, StoreClock, StoreError, Version, Versioned,
    WatchHandle,
};

/// Faults to inject into the next CASes.
#[derive(Debug, Default)]
struct Faults {
    /// Write, then report an ambiguous outcome.
    lose_reply: AtomicU32,
    /// Do not write, and report an ambiguous outcome.
    lose_request: AtomicU32,
    cas_calls: AtomicU32,
}

#[derive(Debug)]
struct Faulty {
    inner: MemoryStore,
    faults: Arc<Faults>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn ambiguous() -> StoreError {
    StoreError::Ambiguous {
        store: "faulty".into(),
        reason: "injected".into(),
    }
}

#[async_trait]
impl Store for Faulty {
    fn describe(&self) -> String {
        "faulty memory".into()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn load(&self, key: &str) -> baton_store::Result<Option<Versioned>> {
        self.inner.load(key).await
    }
    async fn append_arrival(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> baton_store::Result<Option<Versioned>> {
        self.inner.append_arrival(key, bytes).await
    }
    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> baton_store::Result<CasOutcome> {
        self.faults.cas_calls.fetch_add(1, Ordering::SeqCst);
        if take(&self.faults.lose_request) {
            return Err(ambiguous());
        }
        let outcome = self
            .inner
            .cas_due(key, expected, bytes, history, due_ms)
            .await?;
        if matches!(outcome, CasOutcome::Written { .. }) && take(&self.faults.lose_reply) {
            return Err(ambiguous());
        }
        Ok(outcome)
    }
    async fn history(
        &self,
        key: &str,
        after_seq: u64,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        self.inner.history(key, after_seq, limit).await
    }
    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> baton_store::Result<Vec<HistoryRecord>> {
        self.inner.history_tail(key, limit).await
    }
    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: baton_store::WithDocs,
    ) -> baton_store::Result<Option<Vec<baton_store::DueKey>>> {
        self.inner.due_keys(prefix, limit, docs).await
    }
    async fn list(&self, prefix: &str) -> baton_store::Result<Vec<String>> {
        self.inner.list(prefix).await
    }
    async fn watch(&self, key: &str) -> baton_store::Result<Option<WatchHandle>> {
        self.inner.watch(key).await
    }
    async fn clock(&self) -> baton_store::Result<StoreClock> {
        self.inner.clock().await
    }
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> baton_store::Result<()> {
        self.inner.put_record(key, name, bytes).await
    }
    async fn get_record(&self, key: &str, name: &str) -> baton_store::Result<Option<Vec<u8>>> {
        self.inner.get_record(key, name).await
    }
}

fn faulty() -> (Arc<Coordinator>, Arc<Faults>, Arc<dyn Store>) {
    let faults = Arc::new(Faults::default());
    let store: Arc<dyn Store> = Arc::new(Faulty {
        inner: MemoryStore::new(),
        faults: faults.clone(),
    });
    (Arc::new(Coordinator::new(store.clone())), faults, store)
}

fn quick() -> AcquireOptions {
    AcquireOptions {
        ttl: Duration::from_secs(1),
        poll: baton_client::poll::PollBounds::up_to(Duration::from_millis(50)),
        ..AcquireOptions::default()
    }
}

async fn history_outcomes(store: &dyn Store, key: &str) -> Vec<(String, Outcome)> {
    store
        .history(key, 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let f = baton_core::Finished::decode(&r.bytes).unwrap();
            (f.id, f.outcome)
        })
        .collect()
}

#[tokio::test]
async fn a_lost_reply_is_recognised_not_repeated() {
    let (coord, faults, store) = faulty();
    let pending = Pending::new("k");
    faults.lose_reply.store(1, Ordering::SeqCst);
    let lease = acquire(&coord, &pending, &quick()).await.unwrap();
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert_eq!(
        doc.tickets.len(),
        1,
        "no ghost ticket from the retried enqueue"
    );
    assert_eq!(
        faults.cas_calls.load(Ordering::SeqCst),
        1,
        "the re-read showed the enqueue had landed: no second write"
    );

    faults.lose_reply.store(1, Ordering::SeqCst);
    release(&coord, "k", &lease.token, Outcome::Succeeded)
        .await
        .expect("the retried release is recognised as the same attempt");
    assert_eq!(
        history_outcomes(store.as_ref(), "k").await,
        vec![(pending.id.clone(), Outcome::Succeeded)],
        "ended exactly once"
    );
    // A new release of the released ticket is refused.
    let error = release(&coord, "k", &lease.token, Outcome::Succeeded)
        .await
        .unwrap_err();
    assert!(
        matches!(error.refusal(), Some(Refusal::Ended { .. })),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_lost_request_is_retried() {
    let (coord, faults, _store) = faulty();
    faults.lose_request.store(2, Ordering::SeqCst);
    let pending = Pending::new("k");
    let lease = acquire(&coord, &pending, &quick()).await.unwrap();
    assert!(lease.fence > 0);
    assert_eq!(faults.cas_calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_stale_cache_costs_a_conflict_not_a_wrong_answer() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = Coordinator::new(store.clone());
    let b = Coordinator::new(store.clone());
    let first = acquire(&a, &Pending::new("k"), &quick()).await.unwrap();
    // b has never seen k; a's cache is current. b's release of a's token must work, and a's
    // later renew (from a stale cache) must see that the ticket ended.
    release(&b, "k", &first.token, Outcome::Succeeded)
        .await
        .unwrap();
    let error = renew(&a, "k", &first.token, None).await.unwrap_err();
    assert!(
        matches!(
            error.refusal(),
            Some(Refusal::Ended {
                outcome: Outcome::Succeeded,
                ..
            })
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_waiter_takes_over_when_the_holders_lease_ends_not_later() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let holder = Coordinator::new(store.clone());
    let waiter = Coordinator::new(store.clone());
    // The holder never renews (as if killed).
    acquire(&holder, &Pending::new("k"), &quick())
        .await
        .unwrap();
    let started = Instant::now();
    let options = AcquireOptions {
        poll: baton_client::poll::PollBounds::up_to(Duration::from_secs(30)),
        ..quick()
    };
    let lease = acquire(&waiter, &Pending::new("k"), &options)
        .await
        .unwrap();
    let waited = started.elapsed();
    // With a 30 s poll bound, only the wake-up at the holder's deadline explains a grant
    // within about the 1 s TTL.
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(lease.fence > 0);
}

#[tokio::test]
async fn a_timeout_withdraws_the_ticket() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let coord = Coordinator::new(store.clone());
    let held = acquire(&coord, &Pending::new("k"), &quick()).await.unwrap();
    let options = AcquireOptions {
        timeout: Some(Duration::ZERO),
        ttl: Duration::from_secs(30),
        ..quick()
    };
    let pending = Pending::new("k");
    let error = acquire(&coord, &pending, &options).await.unwrap_err();
    assert!(matches!(error, ClientError::TimedOut { .. }), "{error:?}");
    let doc = coord.read("k").await.unwrap().doc.unwrap();
    assert!(doc.by_id(&pending.id).is_none(), "withdrawn");
    assert!(doc.by_id(&held.id).is_some());
    assert_eq!(
        history_outcomes(store.as_ref(), "k").await,
        vec![(pending.id, Outcome::TimedOut)]
    );
}

#[tokio::test]
async fn many_keys_are_given_back_when_a_later_one_times_out() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let other = Arc::new(Coordinator::new(store.clone()));
    let coord = Arc::new(Coordinator::new(store.clone()));
    acquire(&other, &Pending::new("b"), &quick()).await.unwrap();
    let heartbeat = Heartbeat::start(coord.clone());
    let options = AcquireOptions {
        timeout: Some(Duration::from_millis(300)),
        ttl: Duration::from_secs(30),
        ..quick()
    };
    let pendings = [Pending::new("b"), Pending::new("a")];
    let error = acquire_many(&coord, &pendings, &options, &heartbeat)
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::TimedOut { .. }), "{error:?}");
    // "a" (sorted first) was taken, then given back.
    let doc = coord.read("a").await.unwrap().doc.unwrap();
    assert!(doc.tickets.is_empty(), "{doc:?}");
    assert_eq!(doc.summary.last_outcome, Some(Outcome::Cancelled));
}

#[tokio::test]
async fn the_heartbeat_keeps_a_lease_and_signals_its_loss() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let coord = Arc::new(Coordinator::new(store.clone()));
    let lease = acquire(&coord, &Pending::new("k"), &quick()).await.unwrap();
    let heartbeat = Heartbeat::start(coord.clone());
    heartbeat.add(&lease);
    // Three TTLs later the lease still stands: another caller cannot take it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let options = AcquireOptions {
        timeout: Some(Duration::ZERO),
        ..quick()
    };
    let error = acquire(&coord, &Pending::new("k"), &options)
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::TimedOut { .. }), "{error:?}");
    assert!(heartbeat.lost().borrow().is_none());
    // An operator force-releases it: the next renewal is refused and the loss is signalled.
    let mut lost = heartbeat.lost();
    let mut request = baton_core::Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: "op".into(),
        op: baton_core::Op::Cancel {
            reason: None,
            id: lease.id.clone(),
            by: String::new(),
        },
    };
    coord.execute("k", &mut request).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), lost.changed())
        .await
        .expect("signalled within a renewal interval")
        .unwrap();
    let signalled = lost.borrow().clone().unwrap();
    assert_eq!(signalled.key, "k");
    assert!(
        signalled.reason.contains("force-released"),
        "{}",
        signalled.reason
    );
}
