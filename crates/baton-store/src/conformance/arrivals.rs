//! Arrivals beside a key's document ([`crate::Capabilities::arrivals`]): appended without a
//! compare, read with the document, and taken by the next CAS that read them, which takes
//! exactly those and leaves later ones pending; a CAS that read none writes only while none is
//! pending. A store without the capability refuses an append and changes nothing.

use std::collections::BTreeMap;

use super::support::{join_all, ok, written};
use crate::{CasOutcome, Store, Versioned};

/// An append returns the key with every pending arrival; a CAS naming a version that read
/// none while one is pending conflicts (and, where conflicts return the document, returns them
/// all); one naming the current version writes and removes them; a first write leaves those
/// appended before it pending.
pub async fn arrivals_beside_the_document(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}arrivals/key");
    if !store.capabilities().arrivals {
        let appended = store.append_arrival(&key, b"a1").await;
        assert!(appended.is_err(), "a store without arrivals refuses one");
        assert_eq!(
            ok("load", store.load(&key).await),
            None,
            "and keeps nothing"
        );
        return;
    }
    let before = store.append_arrival(&key, b"a0").await;
    assert_eq!(ok("append", before), None, "no document yet");
    let first = written(store.cas(&key, None, b"d1", &[]).await, "the first write");
    let loaded = ok("load", store.load(&key).await).expect("written");
    assert_eq!(loaded.bytes, b"d1");
    assert_eq!(
        loaded.arrivals,
        [b"a0"],
        "a first write leaves arrivals pending"
    );
    assert_ne!(
        loaded.version, first,
        "its version names the arrival it read"
    );
    let stale = store.cas(&key, Some(&first), b"lost", &[]).await;
    assert_conflict(store, stale, &["a0"], "a version that read no arrival");
    let taken = written(
        store.cas(&key, Some(&loaded.version), b"d2", &[]).await,
        "taking a0",
    );
    let now = ok("load", store.load(&key).await).expect("written");
    assert_eq!(
        (now.bytes.as_slice(), now.version.clone()),
        (&b"d2"[..], taken.clone())
    );
    assert!(
        now.arrivals.is_empty(),
        "a CAS removes the arrivals it read"
    );

    arrivals_appended_after_a_write(store, &key, taken).await;
}

/// After a write at `taken` that left none pending: two appends, a CAS from a version that
/// read none of them conflicts, one from the first append's version takes its arrival and
/// leaves the second pending, the next one takes that.
async fn arrivals_appended_after_a_write(store: &dyn Store, key: &str, taken: crate::Version) {
    let key = key.to_owned();
    let one = ok("append", store.append_arrival(&key, b"a1").await).expect("a document");
    assert_eq!(
        (one.bytes.as_slice(), one.arrivals.clone()),
        (&b"d2"[..], bytes(&["a1"]))
    );
    let two = ok("append", store.append_arrival(&key, b"a2").await).expect("a document");
    assert_eq!(two.arrivals, bytes(&["a1", "a2"]), "oldest first");
    let stale = store.cas(&key, Some(&taken), b"lost", &[]).await;
    assert_conflict(
        store,
        stale,
        &["a1", "a2"],
        "a version that read none of them",
    );
    let loaded = ok("load", store.load(&key).await).expect("written");
    assert_eq!(
        (loaded.bytes, loaded.arrivals),
        (two.bytes, two.arrivals),
        "a load reads what the last append returned"
    );
    let first_taken = written(
        store.cas(&key, Some(&one.version), b"d3", &[]).await,
        "taking a1, read before a2 came",
    );
    let left = ok("load", store.load(&key).await).expect("written");
    assert_eq!(
        (left.bytes.as_slice(), left.arrivals.clone()),
        (&b"d3"[..], bytes(&["a2"])),
        "a CAS takes the arrivals it read and leaves a later one pending"
    );
    let stale = store.cas(&key, Some(&first_taken), b"lost", &[]).await;
    assert_conflict(
        store,
        stale,
        &["a2"],
        "the writer's own version, which read none",
    );
    let three = ok("append", store.append_arrival(&key, b"a3").await).expect("a document");
    let last = written(
        store.cas(&key, Some(&left.version), b"d4", &[]).await,
        "taking a2",
    );
    let now = ok("load", store.load(&key).await).expect("written");
    assert_eq!(
        (now.bytes.as_slice(), now.arrivals.clone()),
        (&b"d4"[..], bytes(&["a3"])),
        "a3, appended after the read that took a2, stays"
    );
    assert_eq!(three.arrivals, bytes(&["a2", "a3"]));
    let stale = store.cas(&key, Some(&last), b"lost", &[]).await;
    assert_conflict(
        store,
        stale,
        &["a3"],
        "a version that read none, one pending",
    );
    let after = written(
        store.cas(&key, Some(&now.version), b"d5", &[]).await,
        "taking a3",
    );
    let end = ok("load", store.load(&key).await).expect("written");
    assert_eq!((end.version, end.arrivals.len()), (after, 0));
}

/// Tasks appending and tasks writing race on one key: every arrival is taken by exactly one
/// CAS that wrote (or is pending at the end), none twice, each appender's in the order it
/// appended them.
pub async fn concurrent_arrivals(store: &dyn Store, prefix: &str) {
    const APPENDERS: usize = 4;
    const PER_APPENDER: usize = 20;
    const WRITERS: usize = 3;
    if !store.capabilities().arrivals {
        return;
    }
    let key = format!("{prefix}concurrent_arrivals/key");
    written(store.cas(&key, None, b"0", &[]).await, "the first write");
    let taken = std::sync::Mutex::new(Vec::<Vec<u8>>::new());
    let done = std::sync::atomic::AtomicUsize::new(0);
    let appenders = (0..APPENDERS).map(|a| {
        let (key, done) = (&key, &done);
        Box::pin(async move {
            for n in 0..PER_APPENDER {
                let arrival = format!("{a}-{n}").into_bytes();
                ok("append", store.append_arrival(key, &arrival).await);
                tokio::task::yield_now().await;
            }
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>
    });
    let writers = (0..WRITERS).map(|_| {
        let (key, done, taken) = (&key, &done, &taken);
        Box::pin(async move {
            while done.load(std::sync::atomic::Ordering::SeqCst) < APPENDERS {
                take_once(store, key, taken).await;
                // An in-process store answers at once: let the appenders run.
                tokio::task::yield_now().await;
            }
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>
    });
    join_all(appenders.chain(writers).collect()).await;
    take_once(store, &key, &taken).await;
    let left = ok("load", store.load(&key).await)
        .expect("written")
        .arrivals;
    let mut counts = BTreeMap::<Vec<u8>, usize>::new();
    for arrival in taken
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .chain(left)
    {
        *counts.entry(arrival).or_default() += 1;
    }
    assert_eq!(
        counts.len(),
        APPENDERS * PER_APPENDER,
        "every arrival taken or pending"
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "arrivals taken twice: {twice:?}");
}

/// Each appender's arrivals in `read` come in the order it appended them (`A-N`: N rising).
fn assert_in_append_order(read: &[Vec<u8>]) {
    let mut last = BTreeMap::<String, usize>::new();
    for arrival in read {
        let text = String::from_utf8_lossy(arrival);
        let Some((appender, n)) = text.split_once('-') else {
            panic!("not an arrival of this test: {text}");
        };
        let n: usize = n.parse().expect("a count");
        if let Some(before) = last.insert(appender.to_owned(), n) {
            assert!(
                before < n,
                "arrivals out of order: {text} after {appender}-{before}"
            );
        }
    }
}

/// One load → CAS; the arrivals it read go to `taken` if it wrote.
async fn take_once(store: &dyn Store, key: &str, taken: &std::sync::Mutex<Vec<Vec<u8>>>) {
    let current = ok("load", store.load(key).await).expect("written");
    assert_in_append_order(&current.arrivals);
    let next = current.arrivals.len().to_string();
    let outcome = ok(
        "cas",
        store
            .cas(key, Some(&current.version), next.as_bytes(), &[])
            .await,
    );
    if let CasOutcome::Written { .. } = outcome {
        let mut taken = taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        taken.extend(current.arrivals);
    }
}

fn bytes(arrivals: &[&str]) -> Vec<Vec<u8>> {
    arrivals.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// `outcome` is a conflict, whose document (where the store returns it) carries `pending`.
fn assert_conflict<E: std::fmt::Display>(
    store: &dyn Store,
    outcome: Result<CasOutcome, E>,
    pending: &[&str],
    what: &str,
) {
    match ok("cas", outcome) {
        CasOutcome::Written { .. } => panic!("{what}: the CAS must conflict, but it wrote"),
        CasOutcome::Conflict { current } => {
            if store.capabilities().conflict_returns_current {
                let current: Versioned = current.expect("the conflict returns the document");
                assert_eq!(
                    current.arrivals,
                    bytes(pending),
                    "{what}: the conflict's arrivals"
                );
            }
        }
    }
}
