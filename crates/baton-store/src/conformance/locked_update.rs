//! [`Store::update`]: the computation sees the current document and its answer is written in the
//! same transaction, alone and with racing writers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::concurrent_writes::{check_counter, increment};
use super::support::{entries, join_all, ok, parse_counter, written};
use super::watch::expect_pushed;
use super::WATCH_WAKE_WITHIN;
use crate::{Change, Replacement, Store, Updated, Version, Versioned, WithDocs};

/// A store with [`crate::Capabilities::locked_update`] shows an update's computation the
/// key's current document and writes what it returns in the same transaction: the document
/// under a new version a CAS can name, its history, its due time and its records; `Keep` and a
/// refused write leave everything as it was; watchers wake as after a CAS. A store with
/// [`crate::Capabilities::update_when_contended`] does the same for a key that has a document,
/// and for one that has none runs nothing and answers `None`, as does a store with neither.
pub async fn locked_update(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}locked_update/key");
    let capabilities = store.capabilities();
    let (ran, first) = first_update(None);
    let outcome = ok("update", store.update(&key, first).await);
    if !capabilities.locked_update {
        assert_eq!(
            outcome, None,
            "no document to lock, or no update: update says so"
        );
        assert!(!ran.load(Ordering::SeqCst), "and runs nothing");
        assert_eq!(
            ok("load", store.load(&key).await),
            None,
            "and writes nothing"
        );
        if !capabilities.update_when_contended {
            return;
        }
        let zero = written(
            store.cas(&key, None, b"zero", &[]).await,
            "a CAS creating the key",
        );
        let (ran, first) = first_update(Some(Versioned {
            version: zero,
            bytes: b"zero".to_vec(),
            arrivals: Vec::new(),
        }));
        let outcome = ok("update", store.update(&key, first).await);
        assert!(
            ran.load(Ordering::SeqCst),
            "an update of a key with a document runs"
        );
        return check_updates(store, &key, outcome).await;
    }
    check_updates(store, &key, outcome).await;
}

/// The first update of the test: it checks that it is shown `expected` and writes "one" with
/// an entry, a due time and a record; the flag says whether it ran.
fn first_update(expected: Option<Versioned>) -> (Arc<AtomicBool>, crate::Compute) {
    let ran = Arc::new(AtomicBool::new(false));
    let compute = {
        let ran = ran.clone();
        Box::new(move |current: Option<&Versioned>| {
            ran.store(true, Ordering::SeqCst);
            assert_eq!(
                current,
                expected.as_ref(),
                "an update sees the current document"
            );
            Change::Write(Replacement {
                bytes: b"one".to_vec(),
                history: vec![b"h1".to_vec()],
                due_ms: Some(700),
                records: vec![("r/first".to_owned(), b"record".to_vec())],
                wake: None,
                ended_tags: Vec::new(),
            })
        })
    };
    (ran, compute)
}

/// After the first update answered `outcome`: what it wrote, `Keep`, a refused update and a
/// second update.
async fn check_updates(store: &dyn Store, key: &str, outcome: Option<Updated>) {
    let Some(Updated::Written { version: v1 }) = outcome else {
        panic!("the update must write, got {outcome:?}");
    };
    let loaded = check_first_update_written(store, key, &v1).await;
    check_keep_and_refusals_write_nothing(store, key, &loaded).await;
    check_second_update(store, key, &v1).await;
}

/// The first update of `key` wrote version `v1` with its history, record and due time;
/// returns the document as loaded.
async fn check_first_update_written(
    store: &dyn Store,
    key: &str,
    v1: &Version,
) -> Option<Versioned> {
    let loaded = ok("load", store.load(key).await);
    assert_eq!(
        loaded,
        Some(Versioned {
            version: v1.clone(),
            bytes: b"one".to_vec(),
            arrivals: Vec::new(),
        })
    );
    assert_eq!(
        entries(&ok("history", store.history(key, 0, 10).await)),
        vec![b"h1".to_vec()]
    );
    assert_eq!(
        ok("get_record", store.get_record(key, "r/first").await),
        Some(b"record".to_vec())
    );
    if store.capabilities().due_index {
        let due = ok("due_keys", store.due_keys(key, 10, WithDocs::NONE).await);
        let due: Vec<(String, u64)> = due
            .unwrap_or_default()
            .into_iter()
            .map(|d| (d.key, d.due_ms))
            .collect();
        assert_eq!(
            due,
            vec![(key.to_owned(), 700)],
            "an update moves the due index"
        );
    }
    loaded
}

/// `Keep` sees the current document (`loaded`) and writes nothing; nor does an update refused
/// for a bad record.
async fn check_keep_and_refusals_write_nothing(
    store: &dyn Store,
    key: &str,
    loaded: &Option<Versioned>,
) {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let keep = {
        let seen = seen.clone();
        Box::new(move |current: Option<&Versioned>| {
            *seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = current.cloned();
            Change::Keep
        })
    };
    assert_eq!(
        ok("update", store.update(key, keep).await),
        Some(Updated::Kept)
    );
    assert_eq!(
        *seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        *loaded,
        "an update sees the current document"
    );
    assert_eq!(
        ok("load", store.load(key).await),
        *loaded,
        "Keep writes nothing"
    );

    let bad = Box::new(|_: Option<&Versioned>| {
        Change::Write(Replacement {
            bytes: b"bad".to_vec(),
            records: vec![("../bad".to_owned(), Vec::new())],
            ..Replacement::default()
        })
    });
    assert!(
        store.update(key, bad).await.is_err(),
        "a bad record refuses the update"
    );
    assert_eq!(
        ok("load", store.load(key).await),
        *loaded,
        "a refused update writes nothing"
    );
}

/// A second update (after `v1`) writes a new version that wakes the key's watchers, appends
/// no history when given none, and can be named by a CAS.
async fn check_second_update(store: &dyn Store, key: &str, v1: &Version) {
    let mut handle = if store.capabilities().watch {
        ok("watch", store.watch(key).await)
    } else {
        None
    };
    let second = Box::new(|_: Option<&Versioned>| {
        Change::Write(Replacement {
            bytes: b"two".to_vec(),
            ..Replacement::default()
        })
    });
    let Some(Updated::Written { version: v2 }) = ok("update", store.update(key, second).await)
    else {
        panic!("the second update must write");
    };
    assert_ne!(*v1, v2);
    if let Some(handle) = handle.as_mut() {
        if store.capabilities().watch_documents {
            expect_pushed(handle, &v2, b"two", "an update").await;
        } else {
            let woken = tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed()).await;
            assert!(
                matches!(woken, Ok(Ok(_))),
                "an update wakes the key's watchers"
            );
        }
    }
    assert_eq!(
        entries(&ok("history", store.history(key, 0, 10).await)),
        vec![b"h1".to_vec()],
        "an update with no history appends none"
    );
    written(
        store.cas(key, Some(&v2), b"three", &[]).await,
        "a CAS naming the version an update wrote",
    );
}

/// Tasks racing updates that increment a counter lose none of them, and the log holds one
/// entry per increment in commit order (a store without the capability is not asked).
pub async fn concurrent_updates(store: &dyn Store, prefix: &str) {
    const N_TASKS: usize = 16;
    const INCREMENTS_PER_TASK: usize = 25;
    let capabilities = store.capabilities();
    if !capabilities.locked_update && !capabilities.update_when_contended {
        return;
    }
    let key = format!("{prefix}concurrent_updates/counter");
    let tasks: Vec<_> = (0..N_TASKS)
        .map(|_| increment_by_update(store, &key, INCREMENTS_PER_TASK))
        .collect();
    join_all(tasks).await;
    let what = format!("{N_TASKS} tasks × {INCREMENTS_PER_TASK} updates");
    check_counter(store, &key, N_TASKS * INCREMENTS_PER_TASK, &what).await;
}

/// Does `n_increments` increments of the decimal counter at `key` by [`Store::update`], each
/// appending the new value to the log (by CAS while the key has no document to lock, on a
/// store that locks only those). Public so that tests of several processes sharing a store can
/// use the same loop.
pub async fn increment_by_update(store: &dyn Store, key: &str, n_increments: usize) {
    for _ in 0..n_increments {
        let add_one = Box::new(|current: Option<&Versioned>| {
            let count = current.map_or(0, |current| parse_counter(&current.bytes));
            let next = (count + 1).to_string().into_bytes();
            Change::Write(Replacement {
                bytes: next.clone(),
                history: vec![next],
                ..Replacement::default()
            })
        });
        match ok("update", store.update(key, add_one).await) {
            Some(Updated::Written { .. }) => {}
            None if store.capabilities().update_when_contended => increment(store, key, 1).await,
            updated => panic!("{key}: an increment must write, got {updated:?}"),
        }
    }
}
