//! What every check of the suite uses: unwrapping with a message, and reading logs and counters.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::{CasOutcome, HistoryRecord, Version};

/// The value of a `Result`, or a panic naming the operation and the error.
pub(super) fn ok<T, E: std::fmt::Display>(operation: &str, result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("{operation} failed: {error}"))
}

/// The version a CAS wrote, or a panic saying it conflicted.
pub(super) fn written<E: std::fmt::Display>(result: Result<CasOutcome, E>, what: &str) -> Version {
    match ok(what, result) {
        CasOutcome::Written { version } => version,
        CasOutcome::Conflict { current } => {
            panic!("{what}: the CAS must write, but it conflicted (current: {current:?})")
        }
    }
}

/// The bytes of each entry, in the order given.
pub(super) fn entries(records: &[HistoryRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|record| record.bytes.clone()).collect()
}

/// The seq of each entry, in the order given.
pub(super) fn seqs(records: &[HistoryRecord]) -> Vec<u64> {
    records.iter().map(|record| record.seq).collect()
}

/// The decimal counter the increment checks write, or a panic saying what is there instead.
pub(super) fn parse_counter(bytes: &[u8]) -> usize {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("the counter holds {bytes:?}, not a decimal number"))
}

/// Polls every future in turn until all are done, on the caller's task: the suite takes
/// `&dyn Store`, which spawned tasks could not borrow.
pub(super) async fn join_all<F: Future<Output = ()>>(futures: Vec<F>) {
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
