//! The conformance suite against the in-process memory store, one test per behaviour.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use baton_store::conformance;
use baton_store::memory::MemoryStore;

/// A fresh store per test: the memory store keeps nothing between runs, so any prefix is new.
const PREFIX: &str = "memory-conformance/";

#[tokio::test]
async fn load_absent() {
    conformance::load_absent(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn create_if_absent() {
    conformance::create_if_absent(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn stale_version_refused() {
    conformance::stale_version_refused(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn history_in_order() {
    conformance::history_in_order(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn concurrent_increments() {
    conformance::concurrent_increments(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn list_by_prefix() {
    conformance::list_by_prefix(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn keys_round_trip() {
    conformance::keys_round_trip(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn largest_document() {
    conformance::largest_document(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn watch_wakes() {
    conformance::watch_wakes(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn clock_readings() {
    conformance::clock_readings(&MemoryStore::new(), PREFIX).await;
}

/// Every behaviour on one store: the behaviours' keys must not collide.
#[tokio::test]
async fn run_all() {
    conformance::run_all(&MemoryStore::new(), PREFIX).await;
}

#[tokio::test]
async fn opened_by_url() {
    let store = baton_store::url::open("memory:").await.unwrap();
    assert_eq!(store.describe(), "memory: (in-process, for tests)");
    conformance::create_if_absent(store.as_ref(), PREFIX).await;
}
