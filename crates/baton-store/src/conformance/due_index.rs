//! The due index, written in the same write as the document and read earliest first.

use super::support::{ok, written};
use crate::{CasOutcome, Store, Version, WithDocs};

/// The due index moves with the document, in the same write: a key's due time is the one its
/// last successful write set (a refused write changes nothing; `None`, or a plain `cas`, takes
/// the key out), read earliest first, under a prefix, up to a limit. A store without an index
/// says so in its capabilities, and `due_keys` answers `None`.
pub async fn due_index(store: &dyn Store, prefix: &str) {
    let k = |name: &str| format!("{prefix}due_index/{name}");
    let read = |under: String, limit: usize| read_due(store, under, limit);
    let write = |key: String, expected: Option<Version>, due_ms: Option<u64>| {
        write_due(store, key, expected, due_ms)
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

    check_documents_only_where_asked(store, &k("")).await;
}

/// The keys due under `under` (at most `limit`) with their due times, earliest first; `None`
/// from a store without a due index.
async fn read_due(store: &dyn Store, under: String, limit: usize) -> Option<Vec<(String, u64)>> {
    ok(
        "due_keys",
        store.due_keys(&under, limit, WithDocs::NONE).await,
    )
    .map(|due| {
        due.into_iter()
            .map(|d| (d.key, d.due_ms))
            .collect::<Vec<(String, u64)>>()
    })
}

/// Writes `key` by `cas_due` (which must write) with `due_ms`; returns the new version.
async fn write_due(
    store: &dyn Store,
    key: String,
    expected: Option<Version>,
    due_ms: Option<u64>,
) -> Version {
    written(
        store
            .cas_due(&key, expected.as_ref(), b"doc", &[], due_ms)
            .await,
        &format!("cas_due of {key}"),
    )
}

/// Documents come with the index only where asked for, each exactly as a load reads it.
async fn check_documents_only_where_asked(store: &dyn Store, under: &str) {
    let docs = WithDocs {
        first: 1,
        due_by_ms: 50,
    };
    let due = ok("due_keys with docs", store.due_keys(under, 10, docs).await);
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
