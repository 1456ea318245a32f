//! A key's document: loading one never written, creating, refusing a stale version, and the
//! largest document the design allows.

use super::support::{entries, ok, written};
use super::DOCUMENT_MAX_BYTES;
use crate::{CasOutcome, Store, Version, Versioned};

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
            bytes: b"first".to_vec(),
            arrivals: Vec::new(),
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
                    bytes: b"v2".to_vec(),
                    arrivals: Vec::new(),
                }),
                "conflict_returns_current: the conflict must carry the current document"
            );
        }
    }
    assert_eq!(
        ok("load", store.load(&key).await),
        Some(Versioned {
            version: second.clone(),
            bytes: b"v2".to_vec(),
            arrivals: Vec::new(),
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
