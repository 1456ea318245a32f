//! The store's clock: readings share an epoch, never go backwards, and stay within their bound.

use super::support::ok;
use crate::{Store, StoreClock};

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
