//! The history log: order, paging, newest-first reads, and trimming to `history_keep`.

use std::collections::HashMap;

use super::support::{entries, ok, seqs, written};
use crate::{CasOutcome, HistoryRecord, Store};

/// History appended with CASes reads back in order, `seq` from 1 and strictly increasing, both
/// oldest-first (`history`, with paging) and newest-first (`history_tail`); a failed CAS appends
/// nothing; one key's log never shows in another's.
pub async fn history_in_order(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}history_in_order/k");
    let neighbour = format!("{key}x");
    let appended = append_around_a_refused_cas(store, &key).await;
    written(
        store
            .cas(&neighbour, None, b"n", &[b"neighbour".to_vec()])
            .await,
        "create the neighbouring key",
    );

    let all = ok("history", store.history(&key, 0, 100).await);
    assert_eq!(
        entries(&all),
        appended,
        "history must hold exactly the entries of successful CASes, oldest first"
    );
    assert_eq!(all[0].seq, 1, "the first seq of a log is 1");
    assert!(
        all.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "seq must strictly increase: {:?}",
        seqs(&all)
    );
    check_pages_oldest_first(store, &key, &all).await;
    check_newest_first(store, &key, &all).await;

    assert_eq!(
        entries(&ok(
            "neighbour history",
            store.history(&neighbour, 0, 100).await
        )),
        vec![b"neighbour".to_vec()],
        "a key's log must not show another key's entries"
    );
}

/// Writes `key` with two entries, then none, then a stale CAS that must conflict, then one
/// entry; returns the entries the successful CASes appended, in order.
async fn append_around_a_refused_cas(store: &dyn Store, key: &str) -> Vec<Vec<u8>> {
    // Binary entries, including bytes that are not UTF-8.
    let (entry_1, entry_2, entry_3) = (b"one".to_vec(), vec![0u8, 255, 10, 13], b"three".to_vec());

    let v1 = written(
        store
            .cas(key, None, b"d1", &[entry_1.clone(), entry_2.clone()])
            .await,
        "create with two entries",
    );
    let v2 = written(
        store.cas(key, Some(&v1), b"d2", &[]).await,
        "update without history",
    );
    let refused = ok(
        "stale cas",
        store
            .cas(key, Some(&v1), b"lost", &[b"lost".to_vec()])
            .await,
    );
    assert!(
        matches!(refused, CasOutcome::Conflict { .. }),
        "stale CAS must conflict"
    );
    written(
        store
            .cas(key, Some(&v2), b"d3", std::slice::from_ref(&entry_3))
            .await,
        "update with one entry",
    );
    vec![entry_1, entry_2, entry_3]
}

/// `history`'s limit and `after_seq` page through `all` (the key's whole log) oldest first.
async fn check_pages_oldest_first(store: &dyn Store, key: &str, all: &[HistoryRecord]) {
    assert_eq!(
        ok("history page", store.history(key, 0, 2).await),
        all[..2].to_vec(),
        "limit takes the oldest entries first"
    );
    assert_eq!(
        ok("history after", store.history(key, all[0].seq, 100).await),
        all[1..].to_vec(),
        "after_seq excludes entries up to and including it"
    );
    assert!(ok(
        "history past end",
        store.history(key, all[2].seq, 100).await
    )
    .is_empty());
    assert!(ok("history limit 0", store.history(key, 0, 0).await).is_empty());
    assert!(ok("history far", store.history(key, u64::MAX, 10).await).is_empty());
}

/// `history_tail` reads `all` (the key's whole log) newest first, its limit taking the newest.
async fn check_newest_first(store: &dyn Store, key: &str, all: &[HistoryRecord]) {
    let reversed: Vec<HistoryRecord> = all.iter().rev().cloned().collect();
    assert_eq!(
        ok("history_tail", store.history_tail(key, 100).await),
        reversed,
        "history_tail returns newest first"
    );
    assert_eq!(
        ok("history_tail 2", store.history_tail(key, 2).await),
        reversed[..2].to_vec(),
        "history_tail's limit takes the newest entries"
    );
    assert!(ok("history_tail 0", store.history_tail(key, 0).await).is_empty());
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
        check_tail_kept(store, &key, n_appended, keep, &mut seq_of).await;
    }
    check_reads_from_the_oldest_kept(store, &key, keep).await;
}

/// After `n_appended` entries, `history_tail` holds the newest `keep`, newest first, each with
/// the seq it had when first seen (`seq_of`, which this fills).
async fn check_tail_kept(
    store: &dyn Store,
    key: &str,
    n_appended: usize,
    keep: usize,
    seq_of: &mut HashMap<Vec<u8>, u64>,
) {
    let tail = store.history_tail(key, 1_000).await.expect("history_tail");
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

/// `history` of a trimmed key starts at the oldest entry kept, whether read from the start,
/// after a kept seq, or with a limit.
async fn check_reads_from_the_oldest_kept(store: &dyn Store, key: &str, keep: usize) {
    let tail = store.history_tail(key, 1_000).await.expect("history_tail");
    let mut oldest_first = tail.clone();
    oldest_first.reverse();
    assert_eq!(
        store.history(key, 0, 1_000).await.expect("history"),
        oldest_first,
        "{}: history from the start begins at the oldest entry kept",
        store.describe()
    );
    let middle = oldest_first[keep / 2].seq;
    assert_eq!(
        store.history(key, middle, 1_000).await.expect("history"),
        oldest_first[keep / 2 + 1..].to_vec(),
        "{}: history after a kept seq",
        store.describe()
    );
    assert_eq!(
        store.history(key, 0, 2).await.expect("history"),
        oldest_first[..2].to_vec(),
        "{}: a limit counts from the oldest kept",
        store.describe()
    );
}
