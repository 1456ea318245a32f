//! Wake-ups: for a key, for a prefix, and the documents they carry.

use super::support::{ok, written};
use super::{DOCUMENT_MAX_BYTES, WATCH_WAKE_WITHIN};
use crate::{Store, Version, Versioned, WatchHandle};

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
        assert!(
            pushed_as_written(&pushed, &version),
            "the large document's version: {} for {version}",
            pushed.version
        );
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

/// Whether `pushed` is the document a CAS wrote at `written`: its version is that one, or (a
/// store that pushes the arrivals pending after a write, as Redis does) that one naming the
/// arrivals it carries, none included ([`crate::arrivals_seen`]).
pub fn pushed_as_written(pushed: &Versioned, written: &Version) -> bool {
    pushed.version == *written
        || crate::arrivals_seen::split(&pushed.version)
            == (written.0.as_str(), pushed.arrivals.len() as u64)
}

/// Waits (up to [`WATCH_WAKE_WITHIN`]) for the wake-up carrying `version`, skipping wake-ups
/// without a document and ones of earlier changes still on their way, and checks its bytes.
pub(super) async fn expect_pushed(
    handle: &mut WatchHandle,
    version: &Version,
    bytes: &[u8],
    what: &str,
) {
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
            Some(pushed) if pushed_as_written(&pushed, version) => {
                assert_eq!(pushed.bytes, bytes, "{what}: bytes");
                return;
            }
            Some(pushed) => seen.push(pushed.version.0),
            None => seen.push("(read again)".to_owned()),
        }
    }
}

/// A watch by tag ([`Store::watch_tagged`]) misses no write that concerns it: one that names no
/// one (every CAS) or names its tag wakes it, and every write wakes the watchers of the whole
/// key. Where the store passes by the others ([`crate::Capabilities::watch_tagged`]), a write
/// that names only other tags does not wake it (while nobody watches the whole key through the
/// same store object), and one that names it says so ([`WatchHandle::named`]). Where a store
/// cannot push, `watch_tagged` returns `None`.
pub async fn watch_tagged_wakes(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}watch_tagged_wakes/k");
    let Some(mut tagged) = ok("watch_tagged", store.watch_tagged(&key, "t1").await) else {
        assert!(
            !store.capabilities().watch,
            "a store that pushes returns a handle"
        );
        return;
    };
    written(store.cas(&key, None, b"1", &[]).await, "create");
    woken(
        &mut tagged,
        "a CAS, which names no one, wakes a watcher by tag",
    )
    .await;
    let capabilities = store.capabilities();
    if capabilities.locked_update {
        ok("update", store.update(&key, naming(&["t2"], b"2")).await);
        if capabilities.watch_tagged {
            let passed_by = tokio::time::timeout(WATCH_WAKE_WITHIN / 4, tagged.changed()).await;
            assert!(passed_by.is_err(), "a write naming only t2 passed t1 by");
        }
        ok(
            "update",
            store.update(&key, naming(&["t1", "t3"], b"3")).await,
        );
        woken(&mut tagged, "a write naming t1 wakes its watcher").await;
        assert_eq!(
            tagged.named(),
            capabilities.watch_tagged,
            "it says t1 was named"
        );
        let mut whole = ok("watch", store.watch(&key).await).expect("a handle");
        ok("update", store.update(&key, naming(&["t2"], b"4")).await);
        woken(
            &mut whole,
            "a write naming other tags wakes the whole key's watcher",
        )
        .await;
        assert!(!whole.named());
    }
    let current = ok("load", store.load(&key).await).map(|v| v.version);
    written(
        store.cas(&key, current.as_ref(), b"5", &[]).await,
        "update by CAS",
    );
    woken(&mut tagged, "a CAS after them still wakes a watcher by tag").await;
    assert!(!tagged.named(), "a CAS names no one");
}

/// A CAS that names whom it wakes ([`Store::cas_waking`]) passes by the watchers of other
/// tags where the store keeps tags, and tells a named one so; one that names no one wakes all.
pub async fn cas_tagged_wakes(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}cas_tagged_wakes/k");
    let Some(mut tagged) = ok("watch_tagged", store.watch_tagged(&key, "t1").await) else {
        return;
    };
    written(store.cas(&key, None, b"1", &[]).await, "create");
    woken(&mut tagged, "a first CAS wakes a watcher by tag").await;
    let capabilities = store.capabilities();
    cas_naming(store, &key, &["t2"], b"2").await;
    if capabilities.watch_tagged {
        let passed_by = tokio::time::timeout(WATCH_WAKE_WITHIN / 4, tagged.changed()).await;
        assert!(passed_by.is_err(), "a CAS naming only t2 passed t1 by");
    }
    cas_naming(store, &key, &["t1", "t3"], b"3").await;
    woken(&mut tagged, "a CAS naming t1 wakes its watcher").await;
    assert_eq!(
        tagged.named(),
        capabilities.watch_tagged,
        "it says t1 was named"
    );
    let current = ok("load", store.load(&key).await).map(|v| v.version);
    let outcome = store
        .cas_waking(&key, current.as_ref(), b"4", &[], None, None)
        .await;
    written(outcome, "a CAS naming no one");
    woken(&mut tagged, "a CAS naming no one wakes every watcher").await;
    assert!(!tagged.named(), "and names no one");
}

/// A CAS over the key's current version that writes `bytes` and names `tags` to wake.
async fn cas_naming(store: &dyn Store, key: &str, tags: &[&str], bytes: &[u8]) {
    let current = ok("load", store.load(key).await).map(|v| v.version);
    let tags: Vec<String> = tags.iter().map(|t| (*t).to_owned()).collect();
    let outcome = store
        .cas_waking(key, current.as_ref(), bytes, &[], None, Some(&tags))
        .await;
    written(outcome, "a CAS naming tags");
}

/// An update that writes `bytes` and names `tags` to wake.
fn naming(tags: &[&str], bytes: &'static [u8]) -> crate::Compute {
    let wake = Some(tags.iter().map(|t| (*t).to_owned()).collect());
    Box::new(move |_: Option<&crate::Versioned>| {
        crate::Change::Write(crate::Replacement {
            bytes: bytes.to_vec(),
            wake,
            ..crate::Replacement::default()
        })
    })
}

async fn woken(handle: &mut WatchHandle, what: &str) {
    tokio::time::timeout(WATCH_WAKE_WITHIN, handle.changed())
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("the store must stay open");
}
