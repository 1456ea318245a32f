//! The conformance suite: one `pub async fn` per behaviour of the [`Store`] contract.
//!
//! Every store's tests call every function here, one `#[tokio::test]` each (or all at once with
//! [`run_all`]), so that the coordinator can rely on the contract whichever store runs below it.
//! A function panics with a message naming the broken rule; it is test support code.
//!
//! Each function takes the store and a key prefix, and writes only keys under
//! `<prefix><behaviour>/`. Stores keep data across runs and the contract has no delete, so a
//! persistent store (a shared database, a bucket) must be given a prefix no earlier run used:
//! [`unique_prefix`] makes one. The prefix should stay short (under ~100 bytes): keys are at most
//! 256 bytes.
//!
//! Behaviours that depend on a capability check the capability first: a store without push
//! must return `None` from `watch`; a store without a clock must return [`StoreClock::None`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::url::OpenMode;
use crate::{
    CasOutcome, Change, HistoryRecord, Replacement, Store, StoreClock, StoreError, Updated,
    Version, Versioned, WatchHandle, WithDocs, RECORD_MAX_BYTES, RECORD_NAME_MAX_BYTES,
};

/// The largest hot document the design allows (256 KiB); every store must hold one.
pub const DOCUMENT_MAX_BYTES: usize = 256 * 1024;

/// The longest key the design allows, in bytes.
pub const KEY_MAX_BYTES: usize = 256;

/// How long a watcher may take to wake after a change.
pub const WATCH_WAKE_WITHIN: Duration = Duration::from_secs(2);

/// A prefix no other run has used: `<name>-<pid>-<nanoseconds>/`.
pub fn unique_prefix(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    format!("{name}-{}-{nanos}/", std::process::id())
}

/// Every behaviour, in turn, on one store.
pub async fn run_all(store: &dyn Store, prefix: &str) {
    load_absent(store, prefix).await;
    create_if_absent(store, prefix).await;
    stale_version_refused(store, prefix).await;
    history_in_order(store, prefix).await;
    concurrent_increments(store, prefix).await;
    list_by_prefix(store, prefix).await;
    keys_round_trip(store, prefix).await;
    largest_document(store, prefix).await;
    watch_wakes(store, prefix).await;
    watch_delivers_documents(store, prefix).await;
    clock_readings(store, prefix).await;
    record_round_trip(store, prefix).await;
    record_absent(store, prefix).await;
    record_replaced(store, prefix).await;
    records_of_keys_apart(store, prefix).await;
    record_names(store, prefix).await;
    records_apart_from_documents(store, prefix).await;
    bad_records_refused(store, prefix).await;
    due_index(store, prefix).await;
    watch_prefix_wakes(store, prefix).await;
    locked_update(store, prefix).await;
    concurrent_updates(store, prefix).await;
}

/// How a store must classify a failure: whether trying again may help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classified {
    /// It may heal by itself (a closed port, a server restarting): [`StoreError::heals`].
    Heals,
    /// Someone must fix something first (a file that is not a database, refused
    /// credentials): retrying would only delay the message.
    Permanent,
    /// No store is there ([`StoreError::Missing`]), opened with [`OpenMode::Existing`].
    Missing,
}

/// Opens `url` in `mode` through the table of stores, as the CLI does, and checks that it fails
/// classified as `expected`, with a message that contains `mentions`; returns the error. A store
/// whose open sends nothing (etcd without credentials, S3, DynamoDB) fails at its first read,
/// which this makes.
///
/// Every store's conformance file calls this with the failures it can bring about for real (a
/// closed port, a wrong password, a file that is not a database, a missing table), so that the
/// classification that decides what `--store-retry` waits for is tested where it is made.
pub async fn failure_classified(
    url: &str,
    mode: OpenMode,
    expected: Classified,
    mentions: &str,
) -> StoreError {
    let error = match crate::url::open_in(url, mode).await {
        Err(error) => error,
        Ok(store) => match store.load("conformance/classified").await {
            Err(error) => error,
            Ok(found) => panic!("{url}: expected a failure ({expected:?}), read {found:?}"),
        },
    };
    error_classified(&error, expected, mentions, &format!("{url} ({mode:?})"));
    error
}

/// Checks that `error` (from a store opened some other way: an endpoint from the environment,
/// a server stopped midway) is classified as `expected`, with a message that contains
/// `mentions`; `what` names the case in the panic.
pub fn error_classified(error: &StoreError, expected: Classified, mentions: &str, what: &str) {
    let classified = match error {
        StoreError::Missing { .. } => Classified::Missing,
        error if error.heals() => Classified::Heals,
        _ => Classified::Permanent,
    };
    assert_eq!(classified, expected, "{what}: {error:?}");
    let message = error.to_string();
    assert!(
        message.contains(mentions),
        "{what}: the message should mention `{mentions}`: {message}"
    );
}

/// A port on loopback that nothing listens on (bound, then closed), for [`Classified::Heals`].
pub fn closed_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|error| panic!("cannot bind a port on loopback: {error}"));
    socket
        .local_addr()
        .unwrap_or_else(|error| panic!("no local address: {error}"))
        .port()
}

/// A key never written loads as `None`, has no history, and is not listed.
pub async fn load_absent(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}load_absent/never-written");
    assert_eq!(
        ok("load", store.load(&key).await),
        None,
        "{key} was never written"
    );
    assert!(ok("history", store.history(&key, 0, 10).await).is_empty());
    assert!(ok("history_tail", store.history_tail(&key, 10).await).is_empty());
    assert!(ok("list", store.list(&key).await).is_empty());
}

/// `cas` with `expected = None` writes a key that has no document, and only such a key.
pub async fn create_if_absent(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}create_if_absent/k");
    let version = written(store.cas(&key, None, b"first", &[]).await, "create");
    assert_eq!(
        ok("load", store.load(&key).await),
        Some(Versioned {
            version: version.clone(),
            bytes: b"first".to_vec()
        }),
        "load must return what the CAS wrote, with the version it returned"
    );

    let outcome = ok("second create", store.cas(&key, None, b"second", &[]).await);
    let CasOutcome::Conflict { current } = outcome else {
        panic!("a second create of {key} must conflict, got {outcome:?}");
    };
    if store.capabilities().conflict_returns_current {
        assert_eq!(
            current.map(|current| (current.version, current.bytes)),
            Some((version.clone(), b"first".to_vec())),
            "conflict_returns_current: the conflict must carry the current document"
        );
    }
    assert_eq!(
        ok("load", store.load(&key).await).map(|current| current.bytes),
        Some(b"first".to_vec()),
        "a refused create must write nothing"
    );
}

/// A CAS naming a stale (or unknown) version is refused, writes nothing and appends nothing; the
/// conflict carries the current document where the store says it can.
pub async fn stale_version_refused(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}stale_version_refused/k");
    let first = written(
        store.cas(&key, None, b"v1", &[b"h1".to_vec()]).await,
        "create",
    );
    let second = written(
        store
            .cas(&key, Some(&first), b"v2", &[b"h2".to_vec()])
            .await,
        "update with the current version",
    );
    assert_ne!(first, second, "each write must give a new version");

    for stale in [first.clone(), Version("not-a-version".to_owned())] {
        let outcome = ok(
            "stale cas",
            store
                .cas(&key, Some(&stale), b"lost", &[b"lost".to_vec()])
                .await,
        );
        let CasOutcome::Conflict { current } = outcome else {
            panic!(
                "a CAS naming version {stale} (current {second}) must conflict, got {outcome:?}"
            );
        };
        if store.capabilities().conflict_returns_current {
            assert_eq!(
                current,
                Some(Versioned {
                    version: second.clone(),
                    bytes: b"v2".to_vec()
                }),
                "conflict_returns_current: the conflict must carry the current document"
            );
        }
    }
    assert_eq!(
        ok("load", store.load(&key).await),
        Some(Versioned {
            version: second.clone(),
            bytes: b"v2".to_vec()
        }),
        "a refused CAS must write nothing"
    );
    assert_eq!(
        entries(&ok("history", store.history(&key, 0, 10).await)),
        vec![b"h1".to_vec(), b"h2".to_vec()],
        "a refused CAS must append nothing"
    );

    // A key with no document: naming any version conflicts, with nothing current.
    let absent = format!("{prefix}stale_version_refused/absent");
    let outcome = ok(
        "cas on absent key",
        store.cas(&absent, Some(&second), b"x", &[]).await,
    );
    assert_eq!(
        outcome,
        CasOutcome::Conflict { current: None },
        "a CAS naming a version on a key with no document must conflict with no current document"
    );
    assert_eq!(ok("load", store.load(&absent).await), None);
    assert!(ok("list", store.list(&absent).await).is_empty());
}

/// History appended with CASes reads back in order, `seq` from 1 and strictly increasing, both
/// oldest-first (`history`, with paging) and newest-first (`history_tail`); a failed CAS appends
/// nothing; one key's log never shows in another's.
pub async fn history_in_order(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}history_in_order/k");
    let neighbour = format!("{key}x");
    // Binary entries, including bytes that are not UTF-8.
    let (entry_1, entry_2, entry_3) = (b"one".to_vec(), vec![0u8, 255, 10, 13], b"three".to_vec());

    let v1 = written(
        store
            .cas(&key, None, b"d1", &[entry_1.clone(), entry_2.clone()])
            .await,
        "create with two entries",
    );
    let v2 = written(
        store.cas(&key, Some(&v1), b"d2", &[]).await,
        "update without history",
    );
    let refused = ok(
        "stale cas",
        store
            .cas(&key, Some(&v1), b"lost", &[b"lost".to_vec()])
            .await,
    );
    assert!(
        matches!(refused, CasOutcome::Conflict { .. }),
        "stale CAS must conflict"
    );
    written(
        store
            .cas(&key, Some(&v2), b"d3", std::slice::from_ref(&entry_3))
            .await,
        "update with one entry",
    );
    written(
        store
            .cas(&neighbour, None, b"n", &[b"neighbour".to_vec()])
            .await,
        "create the neighbouring key",
    );

    let all = ok("history", store.history(&key, 0, 100).await);
    assert_eq!(
        entries(&all),
        vec![entry_1.clone(), entry_2.clone(), entry_3.clone()],
        "history must hold exactly the entries of successful CASes, oldest first"
    );
    assert_eq!(all[0].seq, 1, "the first seq of a log is 1");
    assert!(
        all.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "seq must strictly increase: {:?}",
        seqs(&all)
    );

    assert_eq!(
        ok("history page", store.history(&key, 0, 2).await),
        all[..2].to_vec(),
        "limit takes the oldest entries first"
    );
    assert_eq!(
        ok("history after", store.history(&key, all[0].seq, 100).await),
        all[1..].to_vec(),
        "after_seq excludes entries up to and including it"
    );
    assert!(ok(
        "history past end",
        store.history(&key, all[2].seq, 100).await
    )
    .is_empty());
    assert!(ok("history limit 0", store.history(&key, 0, 0).await).is_empty());
    assert!(ok("history far", store.history(&key, u64::MAX, 10).await).is_empty());

    let reversed: Vec<HistoryRecord> = all.iter().rev().cloned().collect();
    assert_eq!(
        ok("history_tail", store.history_tail(&key, 100).await),
        reversed,
        "history_tail returns newest first"
    );
    assert_eq!(
        ok("history_tail 2", store.history_tail(&key, 2).await),
        reversed[..2].to_vec(),
        "history_tail's limit takes the newest entries"
    );
    assert!(ok("history_tail 0", store.history_tail(&key, 0).await).is_empty());

    assert_eq!(
        entries(&ok(
            "neighbour history",
            store.history(&neighbour, 0, 100).await
        )),
        vec![b"neighbour".to_vec()],
        "a key's log must not show another key's entries"
    );
}

/// Tasks racing load → increment → CAS (retrying on conflict) end with the exact count, and the
/// log holds one entry per increment in commit order.
pub async fn concurrent_increments(store: &dyn Store, prefix: &str) {
    const N_TASKS: usize = 16;
    const INCREMENTS_PER_TASK: usize = 25;
    let key = format!("{prefix}concurrent_increments/counter");
    let tasks: Vec<_> = (0..N_TASKS)
        .map(|_| increment(store, &key, INCREMENTS_PER_TASK))
        .collect();
    join_all(tasks).await;

    let what = format!("{N_TASKS} tasks × {INCREMENTS_PER_TASK} increments");
    check_counter(store, &key, N_TASKS * INCREMENTS_PER_TASK, &what).await;
}

/// The counter at `key` stands at `expected`, and its log holds each increment once, in the
/// order the CASes took effect, numbered from 1 upwards.
async fn check_counter(store: &dyn Store, key: &str, expected: usize, what: &str) {
    let current = ok("load", store.load(key).await).expect("the counter was written");
    assert_eq!(parse_counter(&current.bytes), expected, "{what}");
    let log = ok("history", store.history(key, 0, expected + 10).await);
    let expected_log: Vec<Vec<u8>> = (1..=expected).map(|n| n.to_string().into_bytes()).collect();
    assert_eq!(
        entries(&log),
        expected_log,
        "the log must hold each increment once, in the order the CASes took effect"
    );
    let seqs: Vec<u64> = log.iter().map(|record| record.seq).collect();
    assert!(
        seqs.first() == Some(&1) && seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "sequence numbers start at 1 and strictly increase: {seqs:?}"
    );
}

/// Four stores from `open`, as four processes would have them (connections and caches of their
/// own), race `per_store` increments each on one counter (half of them by [`Store::update`]
/// where the store has it): it ends at four times that, and its log holds each increment once,
/// in commit order, numbered from 1 upwards.
pub async fn increments_through_separate_stores<S, F, Fut>(open: F, prefix: &str, per_store: usize)
where
    S: Store + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    const N_STORES: usize = 4;
    let key = format!("{prefix}separate_stores/counter");
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..N_STORES {
        let store = open().await;
        let key = key.clone();
        // Where the store has locked updates, half the writers use them: a CAS and an update
        // racing on one key must not lose each other's writes.
        let by_update = n % 2 == 1 && store.capabilities().locked_update;
        tasks.spawn(async move {
            if by_update {
                increment_by_update(&store, &key, per_store).await;
            } else {
                increment(&store, &key, per_store).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(error) = joined {
            std::panic::resume_unwind(error.into_panic());
        }
    }
    let store = open().await;
    let what = format!("{N_STORES} stores × {per_store} increments");
    check_counter(&store, &key, N_STORES * per_store, &what).await;
}

/// What a store test's fixture holds: the store, and whatever must live as long as it (a
/// temporary directory).
pub trait Fixture {
    /// The store under test.
    fn store(&self) -> &dyn Store;
}

impl<S: Store> Fixture for S {
    fn store(&self) -> &dyn Store {
        self
    }
}

impl<K, S: Store> Fixture for (K, S) {
    fn store(&self) -> &dyn Store {
        &self.1
    }
}

/// One `#[tokio::test]` per behaviour of the suite, and one running them all, in a store's test
/// file: `conformance_tests!(open(), prefix)` where `open()` is a future of a [`Fixture`] (a
/// fresh or a shared store per test) and `prefix` a function from the behaviour's name to the
/// test's key prefix (see [`unique_prefix`]).
#[macro_export]
macro_rules! conformance_tests {
    // With `keep: open_keeping`, a function from a `history_keep` to a future of a fixture
    // opened with it (through the store's URL where it has one), also the trimming test.
    ($open:expr, $prefix:expr, keep: $open_keeping:expr $(,)?) => {
        $crate::conformance_tests!($open, $prefix);

        #[tokio::test]
        async fn history_trimmed_to_keep() {
            let keep = $crate::conformance::HISTORY_KEEP_SMALL;
            let fixture = ($open_keeping)(keep).await;
            let prefix = ($prefix)("history_trimmed_to_keep");
            $crate::conformance::history_trimmed_to_keep(
                $crate::conformance::Fixture::store(&fixture),
                &prefix,
                keep,
            )
            .await;
        }
    };
    ($open:expr, $prefix:expr $(,)?) => {
        $crate::conformance_tests!(@each $open, $prefix;
            load_absent, create_if_absent, stale_version_refused, history_in_order,
            list_by_prefix, keys_round_trip, largest_document, watch_wakes, watch_delivers_documents,
            clock_readings, record_round_trip, record_absent, record_replaced,
            records_of_keys_apart, record_names, records_apart_from_documents, bad_records_refused,
            due_index, watch_prefix_wakes, locked_update, run_all);

        $crate::conformance_tests!(@threads $open, $prefix; concurrent_increments, concurrent_updates);
    };
    (@threads $open:expr, $prefix:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let fixture = $open.await;
                let prefix = ($prefix)(stringify!($name));
                $crate::conformance::$name($crate::conformance::Fixture::store(&fixture), &prefix)
                    .await;
            }
        )*
    };
    (@each $open:expr, $prefix:expr; $($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let fixture = $open.await;
                let prefix = ($prefix)(stringify!($name));
                $crate::conformance::$name($crate::conformance::Fixture::store(&fixture), &prefix)
                    .await;
            }
        )*
    };
}

/// The `history_keep` the trimming test opens a store with: small, so that a few CASes pass it.
pub const HISTORY_KEEP_SMALL: u64 = 5;

/// A store opened with `history_keep = keep` keeps exactly the newest `keep` entries of a key
/// after every CAS that appends (also one that alone appends more than `keep`), with the seqs
/// they were written with: `history_tail` and `history(key, after_seq)` answer with those
/// entries only, and an `after_seq` below the oldest kept starts at the oldest kept.
pub async fn history_trimmed_to_keep(store: &dyn Store, prefix: &str, keep: u64) {
    let keep = usize::try_from(keep).expect("a small keep");
    let key = format!("{prefix}trimmed");
    // Every entry's bytes name its place in the append order; its seq is learnt right after it
    // is appended (etcd's seqs are not 1, 2, 3...), so that the end can check seqs are kept.
    let mut seq_of: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut n_appended = 0usize;
    let mut version = None;
    let batches: Vec<usize> = std::iter::repeat_n(3, 8).chain([keep + 2, 1]).collect();
    for batch in batches {
        let entries: Vec<Vec<u8>> = (n_appended + 1..=n_appended + batch)
            .map(|n| format!("entry {n:04}").into_bytes())
            .collect();
        n_appended += batch;
        let outcome = store
            .cas(
                &key,
                version.as_ref(),
                format!("doc {n_appended}").as_bytes(),
                &entries,
            )
            .await
            .expect("cas");
        let CasOutcome::Written { version: written } = outcome else {
            panic!(
                "{}: an uncontended CAS must write: {outcome:?}",
                store.describe()
            );
        };
        version = Some(written);

        let tail = store.history_tail(&key, 1_000).await.expect("history_tail");
        let expected: Vec<Vec<u8>> = (n_appended.saturating_sub(keep) + 1..=n_appended)
            .rev()
            .map(|n| format!("entry {n:04}").into_bytes())
            .collect();
        let bytes: Vec<Vec<u8>> = tail.iter().map(|record| record.bytes.clone()).collect();
        assert_eq!(
            bytes
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>(),
            expected
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>(),
            "{}: after {n_appended} entries, history_tail must be the newest {keep}",
            store.describe()
        );
        for record in &tail {
            let first_seen = *seq_of.entry(record.bytes.clone()).or_insert(record.seq);
            assert_eq!(
                first_seen,
                record.seq,
                "{}: trimming changed the seq of {:?}",
                store.describe(),
                String::from_utf8_lossy(&record.bytes)
            );
        }
        assert!(
            tail.windows(2).all(|pair| pair[0].seq > pair[1].seq),
            "{}: history_tail is newest first",
            store.describe()
        );
    }

    let tail = store.history_tail(&key, 1_000).await.expect("history_tail");
    let mut oldest_first = tail.clone();
    oldest_first.reverse();
    assert_eq!(
        store.history(&key, 0, 1_000).await.expect("history"),
        oldest_first,
        "{}: history from the start begins at the oldest entry kept",
        store.describe()
    );
    let middle = oldest_first[keep / 2].seq;
    assert_eq!(
        store.history(&key, middle, 1_000).await.expect("history"),
        oldest_first[keep / 2 + 1..].to_vec(),
        "{}: history after a kept seq",
        store.describe()
    );
    assert_eq!(
        store.history(&key, 0, 2).await.expect("history"),
        oldest_first[..2].to_vec(),
        "{}: a limit counts from the oldest kept",
        store.describe()
    );
}

/// Does `n_increments` CAS increments of the decimal counter at `key`, retrying on conflict.
/// Each increment appends the new value to the log. Public so that tests of several processes
/// sharing a store can use the same loop.
pub async fn increment(store: &dyn Store, key: &str, n_increments: usize) {
    const ATTEMPTS_MAX: usize = 100_000;
    for _ in 0..n_increments {
        let mut n_attempts = 0;
        loop {
            n_attempts += 1;
            assert!(
                n_attempts <= ATTEMPTS_MAX,
                "{key}: no CAS won in {ATTEMPTS_MAX} attempts"
            );
            let current = ok("load", store.load(key).await);
            let (expected, count) = match &current {
                None => (None, 0),
                Some(current) => (Some(&current.version), parse_counter(&current.bytes)),
            };
            // Let the other tasks run between the read and the write, even on a store whose
            // operations never suspend (the memory store), so that the race is real.
            tokio::task::yield_now().await;
            let next = (count + 1).to_string().into_bytes();
            match ok(
                "cas",
                store
                    .cas(key, expected, &next, std::slice::from_ref(&next))
                    .await,
            ) {
                CasOutcome::Written { .. } => break,
                CasOutcome::Conflict { .. } => continue,
            }
        }
    }
}

/// `list` returns exactly the keys with a document that start with the prefix, byte-wise and
/// sorted, whatever characters the keys hold; `%`, `_` and `*` are not wildcards.
pub async fn list_by_prefix(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}list_by_prefix/");
    let names = [
        "a",
        "ab",
        "abc",
        "a/b",
        "a b",
        "quote'\"",
        "100%",
        "100%/x",
        "1000",
        "under_score",
        "underXscore",
        "star*",
        "starry",
        "déploiement/生产",
        "déploiement/生产/2",
        "déploiement/staging",
        "edge\u{D7FF}x",
        "edge\u{E000}",
        "max\u{10FFFF}",
        "maxy",
    ];
    for name in names {
        let key = format!("{base}{name}");
        written(store.cas(&key, None, name.as_bytes(), &[]).await, &key);
    }
    // A key watched or refused but never written has no document and must not be listed.
    let never_written = format!("{base}a-never-written");
    let _ = ok("watch", store.watch(&never_written).await);
    let _ = ok(
        "refused cas",
        store
            .cas(&never_written, Some(&Version("1".to_owned())), b"x", &[])
            .await,
    );

    let check = |listed: Vec<String>, sub_prefix: &str| {
        let wanted = format!("{base}{sub_prefix}");
        let mut expected: Vec<String> = names
            .iter()
            .map(|name| format!("{base}{name}"))
            .filter(|key| key.starts_with(&wanted))
            .collect();
        expected.sort();
        assert_eq!(listed, expected, "list({wanted:?})");
    };
    for sub_prefix in [
        "",
        "a",
        "ab",
        "a/",
        "a ",
        "quote'",
        "quote'\"",
        "100%",
        "100",
        "under_",
        "under",
        "star*",
        "star",
        "déploiement/",
        "déploiement/生产",
        "déploiement/生",
        "edge\u{D7FF}",
        "max\u{10FFFF}",
        "nothing-here",
    ] {
        check(
            ok("list", store.list(&format!("{base}{sub_prefix}")).await),
            sub_prefix,
        );
    }
}

/// Keys with unusual characters, and one of the longest allowed length, round-trip exactly
/// through `cas`, `load`, `list` and `history`.
pub async fn keys_round_trip(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}keys_round_trip/");
    let mut keys: Vec<String> = [
        "plain",
        "with/slashes/",
        "//double//",
        "with space",
        " leading and trailing ",
        "quotes'\"`",
        "sql'); DROP TABLE baton_docs; --",
        "100%_*?[]{}\\",
        "déploiement/生产",
        "emoji 🦀",
        "dots/../..",
        "colon:semi;comma,",
        "+plus=equals&amp#hash",
    ]
    .iter()
    .map(|name| format!("{base}{name}"))
    .collect();
    // The longest allowed key, in multi-byte characters where they fit.
    let mut longest = base.clone();
    while longest.len() + 'é'.len_utf8() <= KEY_MAX_BYTES {
        longest.push('é');
    }
    while longest.len() < KEY_MAX_BYTES {
        longest.push('e');
    }
    keys.push(longest);

    for key in &keys {
        let entry = format!("entry of {key}").into_bytes();
        written(
            store
                .cas(key, None, key.as_bytes(), std::slice::from_ref(&entry))
                .await,
            key,
        );
        let loaded = ok("load", store.load(key).await);
        assert_eq!(
            loaded.map(|loaded| loaded.bytes),
            Some(key.as_bytes().to_vec()),
            "{key:?} must load what was written to it"
        );
        assert_eq!(
            entries(&ok("history", store.history(key, 0, 10).await)),
            vec![entry],
            "{key:?} must keep its own history"
        );
        assert!(
            ok("list", store.list(key).await).contains(key),
            "{key:?} must be listed under itself"
        );
    }
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(
        ok("list", store.list(&base).await),
        expected,
        "every key must be listed exactly as written"
    );
}

/// The largest allowed document, holding every byte value, round-trips exactly, and can be
/// replaced by CAS.
pub async fn largest_document(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}largest_document/k");
    let document: Vec<u8> = (0..DOCUMENT_MAX_BYTES)
        .map(|i| (i % 251) as u8) // a prime period, so no run of bytes repeats a page
        .collect();
    let version = written(store.cas(&key, None, &document, &[]).await, "write 256 KiB");
    let loaded = ok("load", store.load(&key).await).expect("the document was written");
    assert_eq!(loaded.version, version);
    assert!(
        loaded.bytes == document,
        "a {DOCUMENT_MAX_BYTES}-byte document must round-trip exactly (got {} bytes)",
        loaded.bytes.len()
    );

    let reversed: Vec<u8> = document.iter().rev().copied().collect();
    written(
        store.cas(&key, Some(&version), &reversed, &[]).await,
        "replace 256 KiB",
    );
    let loaded = ok("load", store.load(&key).await).expect("the document was written");
    assert!(
        loaded.bytes == reversed,
        "the replaced document must round-trip exactly"
    );
}

/// Where the store can push, a watcher (subscribed even before the key exists) wakes within
/// [`WATCH_WAKE_WITHIN`] of each change; where it cannot, `watch` returns `None`.
pub async fn watch_wakes(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}watch_wakes/k");
    let handle = ok("watch", store.watch(&key).await);
    if !store.capabilities().watch {
        assert!(
            handle.is_none(),
            "a store without the watch capability must return None"
        );
        return;
    }
    let mut handle = handle.expect("a store with the watch capability must return a handle");

    let version = written(store.cas(&key, None, b"1", &[]).await, "create");
    tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
        .await
        .expect("the watcher must wake after the key was created")
        .expect("the store must stay open");

    written(store.cas(&key, Some(&version), b"2", &[]).await, "update");
    tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
        .await
        .expect("the watcher must wake after the key was updated")
        .expect("the store must stay open");
}

/// Where a store pushes changes under a prefix (`watch_prefix` gives a handle), every write to
/// a key under it wakes the watcher within [`WATCH_WAKE_WITHIN`], keys created after the
/// subscription included.
pub async fn watch_prefix_wakes(store: &dyn Store, prefix: &str) {
    let under = format!("{prefix}watch_prefix_wakes/");
    let Some(mut handle) = ok("watch_prefix", store.watch_prefix(&under).await) else {
        return;
    };
    for name in ["a", "b/c", "a"] {
        let key = format!("{under}{name}");
        let current = ok("load", store.load(&key).await).map(|v| v.version);
        written(
            store.cas(&key, current.as_ref(), b"x", &[]).await,
            "write under the prefix",
        );
        tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
            .await
            .unwrap_or_else(|_| panic!("a write to {key} must wake the prefix's watcher"))
            .expect("the store must stay open");
    }
}

/// Where wake-ups carry documents (`watch_documents`), each write's wake-up delivers exactly
/// what a load would have returned right after it (version and bytes, any byte values), so a
/// waiter can skip its read; a document too large for the store's channel still wakes (with or
/// without itself), and the next small one is delivered again. A wake-up without a document
/// (a reconnection, say) is allowed at any time, so the check waits for the document.
pub async fn watch_delivers_documents(store: &dyn Store, prefix: &str) {
    let capabilities = store.capabilities();
    if !capabilities.watch_documents {
        return;
    }
    assert!(
        capabilities.watch,
        "a store whose wake-ups carry documents must push wake-ups"
    );
    let key = format!("{prefix}watch_delivers_documents/k");
    let mut handle = ok("watch", store.watch(&key).await).expect("a store that pushes");

    // A store may hand out the handle before its subscription is confirmed, and then wake it
    // without a document once it is (Redis): the first change may come as "read again".
    let first = b"first".to_vec();
    let version = written(store.cas(&key, None, &first, &[]).await, "create");
    tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
        .await
        .expect("the watcher must wake after the key was created")
        .expect("the store must stay open");

    let binary: Vec<u8> = b"{\"a\":\n1}\x00\xff".to_vec();
    let version = written(
        store.cas(&key, Some(&version), &binary, &[]).await,
        "binary",
    );
    expect_pushed(&mut handle, &version, &binary, "a document with any bytes").await;

    let second = b"second".to_vec();
    let version = written(
        store.cas(&key, Some(&version), &second, &[]).await,
        "update",
    );
    expect_pushed(&mut handle, &version, &second, "the updated document").await;

    let large: Vec<u8> = (0..DOCUMENT_MAX_BYTES).map(|i| (i % 251) as u8).collect();
    let version = written(store.cas(&key, Some(&version), &large, &[]).await, "large");
    let woken = tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
        .await
        .expect("a large document must still wake the watcher")
        .expect("the store must stay open");
    if let Some(pushed) = woken {
        assert_eq!(pushed.version, version, "the large document's version");
        assert!(
            pushed.bytes == large,
            "a pushed large document must be exact"
        );
    }

    let small = b"small again".to_vec();
    let version = written(store.cas(&key, Some(&version), &small, &[]).await, "small");
    expect_pushed(
        &mut handle,
        &version,
        &small,
        "a small document after a large one",
    )
    .await;
}

/// Waits (up to [`WATCH_WAKE_WITHIN`]) for the wake-up carrying `version`, skipping wake-ups
/// without a document and ones of earlier changes still on their way, and checks its bytes.
async fn expect_pushed(handle: &mut WatchHandle, version: &Version, bytes: &[u8], what: &str) {
    let deadline = tokio::time::Instant::now() + WATCH_WAKE_WITHIN;
    let mut seen = Vec::new();
    loop {
        let woken = tokio::time::timeout_at(deadline, handle.changed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no wake-up delivered {what} (version {version}) within \
                     {WATCH_WAKE_WITHIN:?}; versions delivered meanwhile: {seen:?}"
                )
            })
            .expect("the store must stay open");
        match woken {
            Some(pushed) if &pushed.version == version => {
                assert_eq!(pushed.bytes, bytes, "{what}: bytes");
                return;
            }
            Some(pushed) => seen.push(pushed.version.0),
            None => seen.push("(read again)".to_owned()),
        }
    }
}

/// Where the store has a clock, two readings share an epoch and do not go backwards; where it
/// has none, `clock` says so.
pub async fn clock_readings(store: &dyn Store, prefix: &str) {
    let first = ok("clock", store.clock().await);
    let second = ok("clock", store.clock().await);
    if !store.capabilities().clock {
        assert_eq!(
            first,
            StoreClock::None,
            "a store without a clock must return None"
        );
        return;
    }
    match (first, second) {
        (
            StoreClock::Time {
                now_ms: first_ms,
                epoch: first_epoch,
                ..
            },
            StoreClock::Time {
                now_ms: second_ms,
                epoch: second_epoch,
                ..
            },
        ) => {
            assert_eq!(
                first_epoch, second_epoch,
                "two readings moments apart share an epoch"
            );
            assert!(
                second_ms >= first_ms,
                "the store's clock went backwards: {first_ms} then {second_ms}"
            );
        }
        other => panic!("a store with the clock capability must return Time, got {other:?}"),
    }
    // `behind_ms` bounds the store's time from above: a reading made after a fresh round trip
    // (a load carries the server's time where it has one) is never past an earlier reading plus
    // its `behind_ms`, the store's uncertainty and the local time between them.
    let uncertain_ms = store.capabilities().clock_uncertain_ms;
    let taken = std::time::Instant::now();
    let StoreClock::Time {
        now_ms: early_ms,
        behind_ms,
        ..
    } = ok("clock", store.clock().await)
    else {
        panic!("a store with the clock capability must return Time");
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    ok("load", store.load(&format!("{prefix}/clock")).await);
    let StoreClock::Time {
        now_ms: late_ms, ..
    } = ok("clock", store.clock().await)
    else {
        panic!("a store with the clock capability must return Time");
    };
    let between_ms = u64::try_from(taken.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
    assert!(
        late_ms <= early_ms + behind_ms + uncertain_ms + between_ms,
        "a reading of {late_ms} ms is past the bound of an earlier one: {early_ms} + behind \
         {behind_ms} + uncertain {uncertain_ms} + {between_ms} ms between them"
    );
}

/// A record reads back exactly as written: every byte value, an empty one, and one of exactly
/// [`RECORD_MAX_BYTES`].
pub async fn record_round_trip(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_round_trip/k");
    let every_byte: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let largest: Vec<u8> = (0..RECORD_MAX_BYTES)
        .map(|i| (i % 251) as u8) // a prime period, so no run of bytes repeats a page
        .collect();
    for (name, bytes) in [
        ("every-byte", every_byte),
        ("empty", Vec::new()),
        ("largest", largest),
        (
            "json",
            br#"{"argv":["make","-j8"],"env":{"A":"\u00e9"}}"#.to_vec(),
        ),
    ] {
        ok("put_record", store.put_record(&key, name, &bytes).await);
        let read = ok("get_record", store.get_record(&key, name).await);
        assert!(
            read.as_deref() == Some(bytes.as_slice()),
            "record {name:?} of {} bytes must read back exactly (got {:?} bytes)",
            bytes.len(),
            read.map(|read| read.len())
        );
    }
}

/// A record never written reads as `None`: on a key never written, on a key with a document,
/// and beside a record of another name.
pub async fn record_absent(store: &dyn Store, prefix: &str) {
    let never_written = format!("{prefix}record_absent/never-written");
    assert_eq!(
        ok(
            "get_record",
            store.get_record(&never_written, "params/j-1").await
        ),
        None,
        "a record of a key never written"
    );

    let with_document = format!("{prefix}record_absent/with-document");
    written(
        store
            .cas(&with_document, None, b"doc", &[b"h".to_vec()])
            .await,
        "create",
    );
    assert_eq!(
        ok(
            "get_record",
            store.get_record(&with_document, "params/j-1").await
        ),
        None,
        "a key's document is not one of its records"
    );

    let with_records = format!("{prefix}record_absent/with-records");
    ok(
        "put_record",
        store.put_record(&with_records, "params/j-1", b"p").await,
    );
    for other in [
        "params/j-2",
        "params",
        "params/j-1/x",
        "params/j-",
        "run/j-1",
    ] {
        assert_eq!(
            ok("get_record", store.get_record(&with_records, other).await),
            None,
            "{other:?} was never written beside params/j-1"
        );
    }
}

/// A second write of a record replaces it, whether longer or shorter, and writing the same
/// bytes again (a retry) leaves them as they are.
pub async fn record_replaced(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_replaced/k");
    let name = "run/j-0123abcd/3";
    for bytes in [
        b"first".to_vec(),
        vec![7; 4096],
        b"short".to_vec(),
        b"short".to_vec(),
        Vec::new(),
        b"last".to_vec(),
    ] {
        ok("put_record", store.put_record(&key, name, &bytes).await);
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(bytes.clone()),
            "the last write of a record must be what reads back ({} bytes)",
            bytes.len()
        );
    }
}

/// Records of different keys are apart, even under the same name, and even where one key
/// continues another (`a`, `a/b`, `a b`) or where a key and a name could be read as another key
/// and name (`a` + `b/c`, `a/b` + `c`).
pub async fn records_of_keys_apart(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}records_of_keys_apart/");
    let pairs = [
        ("a", "params/j-1"),
        ("a/b", "params/j-1"),
        ("a b", "params/j-1"),
        ("ab", "params/j-1"),
        ("ä/%*", "params/j-1"),
        ("quote'\"`", "params/j-1"),
        ("a", "b/c"),
        ("a/b", "c"),
        ("a/b/c", "params/j-1"),
    ];
    let value = |key: &str, name: &str| format!("{name} of {key}").into_bytes();
    for (key, name) in pairs {
        let key = format!("{base}{key}");
        ok(
            "put_record",
            store.put_record(&key, name, &value(&key, name)).await,
        );
    }
    for (key, name) in pairs {
        let key = format!("{base}{key}");
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(value(&key, name)),
            "record {name:?} of {key:?} must be its own"
        );
    }
    for (key, name) in [("a/b", "b/c"), ("a", "c"), ("a/b/c", "c"), ("a/", "b/c")] {
        let key = format!("{base}{key}");
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            None,
            "{key:?} has no record {name:?}: another key's must not show through"
        );
    }
}

/// Names with `/`, `.`, `-` and `_`, and the longest name, work, also on the longest key.
pub async fn record_names(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_names/k");
    let longest_name: String = "abcdefghij/.-_"
        .chars()
        .cycle()
        .take(RECORD_NAME_MAX_BYTES - 1)
        .chain(std::iter::once('z'))
        .collect();
    let names = [
        "params/j-0123abcd",
        "run/j-0123abcd/3",
        "run/j-0123abcd/30",
        "a.b",
        ".x",
        "x.",
        "...",
        "..x/x..",
        "a/b/c/d/e/f",
        "UPPER_lower-09",
        "-",
        "_",
        longest_name.as_str(),
    ];
    for name in names {
        ok(
            "put_record",
            store.put_record(&key, name, name.as_bytes()).await,
        );
    }
    for name in names {
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(name.as_bytes().to_vec()),
            "record {name:?} must read back"
        );
    }

    // The longest key, in multi-byte characters, with the longest name.
    let mut longest_key = format!("{prefix}record_names/");
    while longest_key.len() + 'é'.len_utf8() <= KEY_MAX_BYTES {
        longest_key.push('é');
    }
    while longest_key.len() < KEY_MAX_BYTES {
        longest_key.push('e');
    }
    for name in ["n", longest_name.as_str()] {
        let bytes = format!("{name} of the longest key").into_bytes();
        ok(
            "put_record",
            store.put_record(&longest_key, name, &bytes).await,
        );
        assert_eq!(
            ok("get_record", store.get_record(&longest_key, name).await),
            Some(bytes),
            "record {name:?} of a {KEY_MAX_BYTES}-byte key must read back"
        );
    }
}

/// Records stay beside a key's document: a key with records only has no document, no history
/// and is not listed; a key's document keeps its bytes and version (a CAS naming it still
/// writes), its history and its place in `list`, however its records change.
pub async fn records_apart_from_documents(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}records_apart_from_documents/");
    let records_only = format!("{base}records-only");
    ok(
        "put_record",
        store.put_record(&records_only, "params/j-1", b"p").await,
    );
    ok(
        "put_record",
        store.put_record(&records_only, "run/j-1/1", b"r").await,
    );
    assert_eq!(
        ok("load", store.load(&records_only).await),
        None,
        "a key with records only has no document"
    );
    assert!(ok("history", store.history(&records_only, 0, 10).await).is_empty());
    assert!(ok("history_tail", store.history_tail(&records_only, 10).await).is_empty());

    let with_document = format!("{base}with-document");
    let version = written(
        store
            .cas(&with_document, None, b"doc", &[b"h1".to_vec()])
            .await,
        "create",
    );
    ok(
        "put_record",
        store.put_record(&with_document, "params/j-1", b"p").await,
    );
    ok(
        "put_record",
        store.put_record(&with_document, "params/j-1", b"p2").await,
    );
    assert_eq!(
        ok("load", store.load(&with_document).await),
        Some(Versioned {
            version: version.clone(),
            bytes: b"doc".to_vec()
        }),
        "writing a record must not change the key's document or its version"
    );
    written(
        store
            .cas(&with_document, Some(&version), b"doc2", &[b"h2".to_vec()])
            .await,
        "a CAS naming the version from before the records were written",
    );
    assert_eq!(
        entries(&ok("history", store.history(&with_document, 0, 10).await)),
        vec![b"h1".to_vec(), b"h2".to_vec()],
        "records must not show in the key's history"
    );
    assert_eq!(
        ok(
            "get_record",
            store.get_record(&with_document, "params/j-1").await
        ),
        Some(b"p2".to_vec()),
        "a CAS must not change the key's records"
    );

    for list_prefix in [
        base.clone(),
        records_only.clone(),
        format!("{base}r"),
        format!("{base}w"),
    ] {
        let listed = ok("list", store.list(&list_prefix).await);
        assert!(
            !listed.contains(&records_only),
            "list({list_prefix:?}) must not show a key with records only"
        );
        assert_eq!(
            listed.iter().filter(|key| **key == with_document).count(),
            usize::from(with_document.starts_with(&list_prefix)),
            "list({list_prefix:?}) must show a key with a document once, records or not"
        );
    }
    assert_eq!(
        ok("list", store.list(&base).await),
        vec![with_document],
        "list must show documents only"
    );
}

/// A bad record name or an oversize record is refused with an error (never a panic), and
/// nothing is written.
pub async fn bad_records_refused(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}bad_records_refused/k");
    let too_long = "n".repeat(RECORD_NAME_MAX_BYTES + 1);
    for bad in [
        "",
        too_long.as_str(),
        "with space",
        "é",
        "a\nb",
        "a:b",
        "%2F",
        "/leading",
        "trailing/",
        "double//slash",
        ".",
        "..",
        "a/../b",
    ] {
        assert!(
            store.put_record(&key, bad, b"x").await.is_err(),
            "put_record must refuse the name {bad:?}"
        );
        assert!(
            store.get_record(&key, bad).await.is_err(),
            "get_record must refuse the name {bad:?}"
        );
    }

    let oversize = vec![0u8; RECORD_MAX_BYTES + 1];
    assert!(
        store.put_record(&key, "oversize", &oversize).await.is_err(),
        "put_record must refuse {} bytes (at most {RECORD_MAX_BYTES})",
        oversize.len()
    );
    assert_eq!(
        ok("get_record", store.get_record(&key, "oversize").await),
        None,
        "a refused record must not be written"
    );
    ok(
        "put_record",
        store.put_record(&key, "oversize", b"small").await,
    );
    assert!(
        store.put_record(&key, "oversize", &oversize).await.is_err(),
        "put_record must refuse an oversize replacement"
    );
    assert_eq!(
        ok("get_record", store.get_record(&key, "oversize").await),
        Some(b"small".to_vec()),
        "a refused replacement must leave the record as it was"
    );
}

/// The due index moves with the document, in the same write: a key's due time is the one its
/// last successful write set (a refused write changes nothing; `None`, or a plain `cas`, takes
/// the key out), read earliest first, under a prefix, up to a limit. A store without an index
/// says so in its capabilities, and `due_keys` answers `None`.
pub async fn due_index(store: &dyn Store, prefix: &str) {
    let k = |name: &str| format!("{prefix}due_index/{name}");
    let read = |under: String, limit: usize| async move {
        ok(
            "due_keys",
            store.due_keys(&under, limit, WithDocs::NONE).await,
        )
        .map(|due| {
            due.into_iter()
                .map(|d| (d.key, d.due_ms))
                .collect::<Vec<(String, u64)>>()
        })
    };
    let write = |key: String, expected: Option<Version>, due_ms: Option<u64>| async move {
        written(
            store
                .cas_due(&key, expected.as_ref(), b"doc", &[], due_ms)
                .await,
            &format!("cas_due of {key}"),
        )
    };
    let a = write(k("a"), None, Some(500)).await;
    if !store.capabilities().due_index {
        assert_eq!(
            read(k(""), 10).await,
            None,
            "no due index: due_keys says so"
        );
        return;
    }
    let b = write(k("b"), None, Some(100)).await;
    write(k("c"), None, None).await;
    // Wall-clock milliseconds are far above 2^32: they must come back exact.
    let late = 1_800_000_000_123;
    write(k("sub/d"), None, Some(late)).await;
    write(format!("{prefix}due_index_beside"), None, Some(1)).await;
    assert_eq!(
        read(k(""), 10).await,
        Some(vec![(k("b"), 100), (k("a"), 500), (k("sub/d"), late)]),
        "earliest first, only the prefix's keys, none without a due time"
    );
    assert_eq!(
        read(k(""), 2).await,
        Some(vec![(k("b"), 100), (k("a"), 500)])
    );
    assert_eq!(read(k("sub/"), 10).await, Some(vec![(k("sub/d"), late)]));

    let refused = ok(
        "stale cas_due",
        store.cas_due(&k("a"), None, b"x", &[], Some(1)).await,
    );
    assert!(matches!(refused, CasOutcome::Conflict { .. }));
    assert_eq!(
        read(k(""), 1).await,
        Some(vec![(k("b"), 100)]),
        "a refused write must not move the index"
    );

    write(k("a"), Some(a), Some(50)).await;
    written(
        store.cas(&k("b"), Some(&b), b"doc", &[]).await,
        "plain cas of b",
    );
    assert_eq!(
        read(k(""), 10).await,
        Some(vec![(k("a"), 50), (k("sub/d"), late)]),
        "a write moves its key; a plain cas takes it out"
    );

    // A prefix whose keys come after more due keys of other prefixes than one page holds.
    for i in 0..300 {
        write(k(&format!("early/{i:03}")), None, Some(1)).await;
    }
    assert_eq!(
        read(k("sub/"), 10).await,
        Some(vec![(k("sub/d"), late)]),
        "a prefix's keys are found behind many due keys of other prefixes"
    );

    // Documents come with the index only where asked for, each exactly as a load reads it.
    let docs = WithDocs {
        first: 1,
        due_by_ms: 50,
    };
    let due = ok("due_keys with docs", store.due_keys(&k(""), 10, docs).await);
    for (n, key) in due.unwrap_or_default().into_iter().enumerate() {
        let Some(doc) = key.doc else { continue };
        assert!(
            docs.wants(n, key.due_ms),
            "{} came with its document, which was not asked for",
            key.key
        );
        assert_eq!(Some(doc), ok("load", store.load(&key.key).await));
    }
}

/// A store with [`crate::Capabilities::locked_update`] shows an update's computation the
/// key's current document and writes what it returns in the same transaction: the document
/// under a new version a CAS can name, its history, its due time and its records; `Keep` and a
/// refused write leave everything as it was; watchers wake as after a CAS. A store without the
/// capability never runs the computation and answers `None`.
pub async fn locked_update(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}locked_update/key");
    let ran = Arc::new(AtomicBool::new(false));
    let first = {
        let ran = ran.clone();
        Box::new(move |current: Option<&Versioned>| {
            ran.store(true, Ordering::SeqCst);
            assert_eq!(current, None, "a key never written shows no document");
            Change::Write(Replacement {
                bytes: b"one".to_vec(),
                history: vec![b"h1".to_vec()],
                due_ms: Some(700),
                records: vec![("r/first".to_owned(), b"record".to_vec())],
            })
        })
    };
    let outcome = ok("update", store.update(&key, first).await);
    if !store.capabilities().locked_update {
        assert_eq!(outcome, None, "no locked_update: update says so");
        assert!(!ran.load(Ordering::SeqCst), "and runs nothing");
        assert_eq!(
            ok("load", store.load(&key).await),
            None,
            "and writes nothing"
        );
        return;
    }
    let Some(Updated::Written { version: v1 }) = outcome else {
        panic!("the update must write, got {outcome:?}");
    };
    let loaded = ok("load", store.load(&key).await);
    assert_eq!(
        loaded,
        Some(Versioned {
            version: v1.clone(),
            bytes: b"one".to_vec()
        })
    );
    assert_eq!(
        entries(&ok("history", store.history(&key, 0, 10).await)),
        vec![b"h1".to_vec()]
    );
    assert_eq!(
        ok("get_record", store.get_record(&key, "r/first").await),
        Some(b"record".to_vec())
    );
    if store.capabilities().due_index {
        let due = ok("due_keys", store.due_keys(&key, 10, WithDocs::NONE).await);
        let due: Vec<(String, u64)> = due
            .unwrap_or_default()
            .into_iter()
            .map(|d| (d.key, d.due_ms))
            .collect();
        assert_eq!(
            due,
            vec![(key.clone(), 700)],
            "an update moves the due index"
        );
    }

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
        ok("update", store.update(&key, keep).await),
        Some(Updated::Kept)
    );
    assert_eq!(
        *seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        loaded,
        "an update sees the current document"
    );
    assert_eq!(
        ok("load", store.load(&key).await),
        loaded,
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
        store.update(&key, bad).await.is_err(),
        "a bad record refuses the update"
    );
    assert_eq!(
        ok("load", store.load(&key).await),
        loaded,
        "a refused update writes nothing"
    );

    let mut handle = if store.capabilities().watch {
        ok("watch", store.watch(&key).await)
    } else {
        None
    };
    let second = Box::new(|_: Option<&Versioned>| {
        Change::Write(Replacement {
            bytes: b"two".to_vec(),
            ..Replacement::default()
        })
    });
    let Some(Updated::Written { version: v2 }) = ok("update", store.update(&key, second).await)
    else {
        panic!("the second update must write");
    };
    assert_ne!(v1, v2);
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
        entries(&ok("history", store.history(&key, 0, 10).await)),
        vec![b"h1".to_vec()],
        "an update with no history appends none"
    );
    written(
        store.cas(&key, Some(&v2), b"three", &[]).await,
        "a CAS naming the version an update wrote",
    );
}

/// Tasks racing updates that increment a counter lose none of them, and the log holds one
/// entry per increment in commit order (a store without the capability is not asked).
pub async fn concurrent_updates(store: &dyn Store, prefix: &str) {
    const N_TASKS: usize = 16;
    const INCREMENTS_PER_TASK: usize = 25;
    if !store.capabilities().locked_update {
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
/// appending the new value to the log. Public so that tests of several processes sharing a
/// store can use the same loop.
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
        let updated = ok("update", store.update(key, add_one).await);
        assert!(
            matches!(updated, Some(Updated::Written { .. })),
            "{key}: an increment must write, got {updated:?}"
        );
    }
}

/// The value of a `Result`, or a panic naming the operation and the error.
fn ok<T, E: std::fmt::Display>(operation: &str, result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("{operation} failed: {error}"))
}

/// The version a CAS wrote, or a panic saying it conflicted.
fn written<E: std::fmt::Display>(result: Result<CasOutcome, E>, what: &str) -> Version {
    match ok(what, result) {
        CasOutcome::Written { version } => version,
        CasOutcome::Conflict { current } => {
            panic!("{what}: the CAS must write, but it conflicted (current: {current:?})")
        }
    }
}

fn entries(records: &[HistoryRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|record| record.bytes.clone()).collect()
}

fn seqs(records: &[HistoryRecord]) -> Vec<u64> {
    records.iter().map(|record| record.seq).collect()
}

fn parse_counter(bytes: &[u8]) -> usize {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("the counter holds {bytes:?}, not a decimal number"))
}

/// Polls every future in turn until all are done, on the caller's task: the suite takes
/// `&dyn Store`, which spawned tasks could not borrow.
async fn join_all<F: Future<Output = ()>>(futures: Vec<F>) {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|context| {
        pending.retain_mut(|future| future.as_mut().poll(context).is_pending());
        if pending.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
