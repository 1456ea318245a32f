//! Writers racing load → increment → CAS on one counter, in one process and through separate
//! stores: no increment is lost, and the log holds each once, in commit order.

use std::future::Future;

use super::locked_update::increment_by_update;
use super::support::{entries, join_all, ok, parse_counter};
use crate::{CasOutcome, Store};

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
pub(super) async fn check_counter(store: &dyn Store, key: &str, expected: usize, what: &str) {
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
        let capabilities = store.capabilities();
        let by_update =
            n % 2 == 1 && (capabilities.locked_update || capabilities.update_when_contended);
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
