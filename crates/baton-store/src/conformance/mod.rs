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
//! must return `None` from `watch`; a store without a clock must return [`crate::StoreClock::None`].
//!
//! One file per capability, as river's `riverdrivertest/`:
//! - `documents`: load, create, CAS against a stale version, the largest document.
//! - `history`: the log's order, paging and newest-first reads; trimming to `history_keep`.
//! - `concurrent_writes`: racing CAS increments, in one process and across stores.
//! - `listing`: `list` by prefix, and keys of every shape through every operation.
//! - `watch`: wake-ups for a key and a prefix, and the documents they carry.
//! - `clock`: the store's clock readings and their bound.
//! - `records`: records beside a key's document.
//! - `due_index`: the due index that moves with the document.
//! - `locked_update`: [`Store::update`], alone and racing.
//! - `arrivals`: arrivals beside a key's document, alone and racing writers.
//! - `errors`: how a failure must be classified.

mod arrivals;
mod clock;
mod concurrent_writes;
mod documents;
mod due_index;
mod errors;
mod history;
mod listing;
mod locked_update;
mod records;
mod support;
mod watch;

use std::time::Duration;

use crate::Store;

pub use arrivals::{arrivals_beside_the_document, concurrent_arrivals};
pub use clock::clock_readings;
pub use concurrent_writes::{concurrent_increments, increment, increments_through_separate_stores};
pub use documents::{create_if_absent, largest_document, load_absent, stale_version_refused};
pub use due_index::due_index;
pub use errors::{closed_port, error_classified, failure_classified, Classified};
pub use history::{history_in_order, history_trimmed_to_keep, HISTORY_KEEP_SMALL};
pub use listing::{keys_round_trip, list_by_prefix};
pub use locked_update::{concurrent_updates, increment_by_update, locked_update};
pub use records::{
    bad_records_refused, record_absent, record_names, record_replaced, record_round_trip,
    records_apart_from_documents, records_of_keys_apart,
};
pub use watch::{
    cas_tagged_wakes, pushed_as_written, watch_delivers_documents, watch_prefix_wakes,
    watch_tagged_wakes, watch_wakes,
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

/// Every behaviour, in turn, on one store and under one prefix: that the checks leave nothing
/// behind that trips the next, checked where it is cheap (the memory and SQLite files) and where
/// a store is opened a way no per-behaviour test opens it (etcd over TLS, with a password).
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
    watch_tagged_wakes(store, prefix).await;
    cas_tagged_wakes(store, prefix).await;
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
    arrivals_beside_the_document(store, prefix).await;
    concurrent_arrivals(store, prefix).await;
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

/// One `#[tokio::test]` per behaviour of the suite, in a store's test file:
/// `conformance_tests!(open(), prefix)` where `open()` is a future of a [`Fixture`] (a fresh or
/// a shared store per test) and `prefix` a function from the behaviour's name to the
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
            watch_tagged_wakes, cas_tagged_wakes, clock_readings, record_round_trip, record_absent, record_replaced,
            records_of_keys_apart, record_names, records_apart_from_documents, bad_records_refused,
            due_index, watch_prefix_wakes, locked_update, arrivals_beside_the_document);

        $crate::conformance_tests!(@threads $open, $prefix; concurrent_increments, concurrent_updates,
            concurrent_arrivals);
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
