//! The conformance suite against the in-process memory store, one test per behaviour.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use baton_store::conformance;
use baton_store::history_retention::HistoryRetention;
use baton_store::memory::MemoryStore;

/// A fresh store per test: the memory store keeps nothing between runs, so any prefix is new.
const PREFIX: &str = "memory-conformance/";

baton_store::conformance_tests!(
    async { MemoryStore::new() },
    |_: &str| PREFIX.to_owned(),
    keep: |keep: u64| async move {
        MemoryStore::with_history_retention(HistoryRetention {
            keep,
            max_age: None,
        })
    },
);

#[tokio::test]
async fn opened_by_url() {
    let store = baton_store::url::open("memory:").await.unwrap();
    assert_eq!(store.describe(), "memory: (in-process, for tests)");
    conformance::create_if_absent(store.as_ref(), PREFIX).await;
}

/// The memory store has nothing that can fail to open but its URL, which never heals.
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{failure_classified, Classified};
    use baton_store::url::OpenMode;
    for mode in [OpenMode::Create, OpenMode::Existing] {
        failure_classified("memory:x", mode, Classified::Permanent, "takes no path").await;
    }
}

/// The whole suite in turn on one store under one prefix: the checks compose.
#[tokio::test]
async fn run_all() {
    let store = MemoryStore::new();
    conformance::run_all(conformance::Fixture::store(&store), PREFIX).await;
}
