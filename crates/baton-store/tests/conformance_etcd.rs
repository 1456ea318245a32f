//! The conformance suite against a real etcd, one test per behaviour, and what only etcd shows:
//! unreachable endpoints, authentication, TLS against a plain server, the key layout, large
//! batches of history, and watches that survive a server restart.
//!
//! The server comes from `BATON_TEST_ETCD_URL` (`bash scripts/test.sh` starts one; so does
//! `source scripts/servers/etcd.sh; start_etcd` in a shell that defines the helpers of
//! scripts/test.sh). Every test writes under its own `conformance::unique_prefix`, so runs never
//! collide on the shared server. The authentication and restart tests start etcd servers of
//! their own, on free loopback ports in temporary directories, and kill them at the end.
#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_store::etcd::EtcdStore;
use baton_store::{arrivals_seen, conformance, CasOutcome, Store, StoreError, Version};

mod common;
use common::{free_port, until_pushed, with_parameter, written};

/// The shared test server's URL (panics, saying how to start it, when it is not set).
fn server_url() -> String {
    common::server_url("ETCD")
}

fn prefix(name: &str) -> String {
    common::prefix("etcd", name)
}

async fn store() -> EtcdStore {
    EtcdStore::open(&server_url()).await.unwrap()
}

/// A store that keeps `keep` history entries per key.
async fn keeping(keep: u64) -> EtcdStore {
    EtcdStore::open(&with_parameter(
        &server_url(),
        &format!("history_keep={keep}"),
    ))
    .await
    .unwrap()
}

baton_store::conformance_tests!(store(), prefix, keep: keeping);

/// Racing stores with a connection each, as separate processes have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_connections() {
    conformance::increments_through_separate_stores(store, &prefix("separate"), 25).await;
}

/// The URL's path is the prefix of every etcd key: documents under `P/d/`, history under
/// `P/h/`, and a store with another prefix sees none of them.
#[tokio::test]
async fn keys_live_under_the_url_prefix() {
    let endpoint = endpoint_of(&server_url());
    let unique = prefix("layout").trim_end_matches('/').to_owned();
    let store_a = EtcdStore::open(&format!("etcd://{endpoint}/{unique}/a/"))
        .await
        .unwrap();
    let store_b = EtcdStore::open(&format!("etcd://{endpoint}/{unique}/b"))
        .await
        .unwrap();
    assert!(
        store_a.describe().ends_with(&format!("/{unique}/a")),
        "{}",
        store_a.describe()
    );

    let CasOutcome::Written { version } = store_a
        .cas("deploy/prod", None, b"doc", &[b"entry".to_vec()])
        .await
        .unwrap()
    else {
        panic!("create must write");
    };
    assert_eq!(store_b.load("deploy/prod").await.unwrap(), None);
    assert!(store_b.list("").await.unwrap().is_empty());
    assert_eq!(store_a.list("").await.unwrap(), ["deploy/prod"]);

    // What etcdctl sees: the count of appending writes at P/a/K (an empty value), the
    // document at P/d/K, the entry at P/h/K\0SEQ, both raw bytes.
    let dump = etcdctl(&endpoint, &["get", "--prefix", &format!("/{unique}/a/")]);
    let expected = format!(
        "/{unique}/a/a/deploy/prod\n\n/{unique}/a/d/deploy/prod\ndoc\n\
         /{unique}/a/h/deploy/prod\u{0}00000000000000000001\nentry\n"
    );
    assert_eq!(dump, expected);
    // The version is the document's mod revision.
    let revision = etcdctl(
        &endpoint,
        &["get", "-w", "fields", &format!("/{unique}/a/d/deploy/prod")],
    );
    assert!(
        revision.contains(&format!("\"ModRevision\" : {version}\n")),
        "{version} not in {revision}"
    );
}

/// History seqs come from the revision a CAS names: strictly increasing, and more entries than
/// etcd allows operations in one transaction level still go in one CAS.
#[tokio::test]
async fn large_history_batches_fit_in_one_cas() {
    let store = store().await;
    let key = format!("{}batch", prefix("batch"));
    let first: Vec<Vec<u8>> = (0..5).map(|i| format!("first {i}").into_bytes()).collect();
    let CasOutcome::Written { version } = store.cas(&key, None, b"1", &first).await.unwrap() else {
        panic!("create must write");
    };
    // 1,000 entries: more than etcd's 128 operations, so in nested transactions.
    let many: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("entry {i:04}").into_bytes())
        .collect();
    let outcome = store.cas(&key, Some(&version), b"2", &many).await.unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");

    let log = store.history(&key, 0, 2000).await.unwrap();
    assert_eq!(log.len(), 1005);
    let entries: Vec<Vec<u8>> = log.iter().map(|record| record.bytes.clone()).collect();
    assert_eq!(entries, [first.clone(), many].concat());
    assert_eq!(
        log[..5].iter().map(|record| record.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5],
        "a create's seqs start at 1"
    );
    let created_at: u64 = version.0.parse().unwrap();
    assert_eq!(log[5].seq, created_at * 65_536 + 1);
    assert!(log.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let tail = store.history_tail(&key, 3).await.unwrap();
    assert_eq!(
        tail.iter().map(|record| record.seq).collect::<Vec<_>>(),
        [log[1004].seq, log[1003].seq, log[1002].seq]
    );
    // Paging from the middle of a CAS's batch.
    let page = store.history(&key, log[500].seq, 10).await.unwrap();
    assert_eq!(page, log[501..511].to_vec());
}

/// From a `history_keep` of 1,000 up, a long-used key's excess is cut 64 entries at a time,
/// not one after every write: it holds the newest `keep` entries at least, never 64 more, and
/// what it holds is always the newest.
#[tokio::test]
async fn a_large_keep_is_trimmed_in_batches() {
    let keep = 1_000;
    let store = keeping(keep as u64).await;
    let key = format!("{}batches", prefix("trim"));
    let filled: Vec<Vec<u8>> = (0..keep)
        .map(|n| format!("entry {n:05}").into_bytes())
        .collect();
    let mut version = written(store.cas(&key, None, b"0", &filled).await.unwrap());
    let mut lengths = Vec::new();
    for n in keep..keep + 130 {
        let entry = format!("entry {n:05}").into_bytes();
        version = written(
            store
                .cas(&key, Some(&version), b"n", &[entry])
                .await
                .unwrap(),
        );
        let log = store.history(&key, 0, 2_000).await.unwrap();
        let newest = String::from_utf8(log[log.len() - 1].bytes.clone()).unwrap();
        let oldest = String::from_utf8(log[0].bytes.clone()).unwrap();
        assert_eq!(newest, format!("entry {n:05}"));
        assert_eq!(oldest, format!("entry {:05}", n + 1 - log.len()));
        lengths.push(log.len());
    }
    assert!(
        lengths.iter().all(|len| (keep..keep + 64).contains(len)),
        "{lengths:?}"
    );
    let cuts = lengths.windows(2).filter(|pair| pair[1] < pair[0]).count();
    assert_eq!(cuts, 2, "two cuts of 64 in 130 writes: {lengths:?}");
}

/// The batched cut's turn comes with writes, not entries: writes of many entries each grow the
/// history past the keep until the 64th appending write since the last cut, which cuts all the
/// excess at once, oldest first.
#[tokio::test]
async fn a_batched_cut_comes_every_64_writes_and_cuts_all_the_excess() {
    let keep = 1_000;
    let store = keeping(keep as u64).await;
    let key = format!("{}wide", prefix("trim"));
    let entries = |from: usize, n: usize| -> Vec<Vec<u8>> {
        (from..from + n)
            .map(|n| format!("entry {n:05}").into_bytes())
            .collect()
    };
    // The first appending write, then 62 of 30 entries each: no cut yet.
    let mut version = written(
        store
            .cas(&key, None, b"0", &entries(0, keep))
            .await
            .unwrap(),
    );
    let mut next = keep;
    for _ in 0..62 {
        let batch = entries(next, 30);
        version = written(store.cas(&key, Some(&version), b"n", &batch).await.unwrap());
        next += 30;
    }
    let log = store.history(&key, 0, 5_000).await.unwrap();
    assert_eq!(log.len(), keep + 62 * 30, "cut before its turn");
    // The 64th: its turn.
    let batch = entries(next, 30);
    written(store.cas(&key, Some(&version), b"n", &batch).await.unwrap());
    next += 30;
    let log = store.history(&key, 0, 5_000).await.unwrap();
    let kept: Vec<String> = log
        .iter()
        .map(|record| String::from_utf8(record.bytes.clone()).unwrap())
        .collect();
    let newest: Vec<String> = (next - keep..next)
        .map(|n| format!("entry {n:05}"))
        .collect();
    assert_eq!(kept, newest, "the newest {keep} entries, and only they");
}

/// The most entries one CAS writes with every operation its transaction needs besides them
/// (a store that trims in batches, as by default, taking arrivals): 3,782 fit, one more is
/// refused whole.
#[tokio::test]
async fn the_most_entries_one_cas_can_append() {
    let store = store().await;
    let key = format!("{}most", prefix("batch"));
    let entries =
        |n: usize| -> Vec<Vec<u8>> { (0..n).map(|i| format!("{i}").into_bytes()).collect() };
    let version = written(store.cas(&key, None, b"0", &entries(3_782)).await.unwrap());
    assert_eq!(store.history(&key, 0, 5_000).await.unwrap().len(), 3_782);
    let refused = store.cas(&key, Some(&version), b"1", &entries(3_783)).await;
    let Err(error) = refused else {
        panic!("3,783 entries must be refused, got {refused:?}");
    };
    assert!(error.to_string().contains("at most 3782"), "{error}");
    assert_eq!(store.history(&key, 0, 10_000).await.unwrap().len(), 3_782);
}

/// A CAS takes the arrivals its version read by the names its store's read found: from a
/// version read by another connection (no such memory), it takes them all, so it writes only
/// while none is newer than those read; from its own read, only those, even past many history
/// entries (then all, as from another's).
#[tokio::test]
async fn arrivals_read_elsewhere_are_taken_only_when_no_later_one_came() {
    let (mine, other, fresh) = (store().await, store().await, store().await);
    let key = format!("{}k", prefix("taken_elsewhere"));
    written(mine.cas(&key, None, b"d1", &[]).await.unwrap());
    let read = other.append_arrival(&key, b"a1").await.unwrap().unwrap();
    fresh.append_arrival(&key, b"a2").await.unwrap();
    let outcome = mine
        .cas(&key, Some(&read.version), b"lost", &[])
        .await
        .unwrap();
    let CasOutcome::Conflict {
        current: Some(current),
    } = outcome
    else {
        panic!("a2 came after the other's read, which this store never saw: {outcome:?}");
    };
    assert_eq!(current.arrivals, [b"a1".to_vec(), b"a2".to_vec()]);
    let both = fresh.load(&key).await.unwrap().unwrap();
    written(
        mine.cas(&key, Some(&both.version), b"d2", &[])
            .await
            .unwrap(),
    );
    let now = fresh.load(&key).await.unwrap().unwrap();
    assert_eq!(
        (now.bytes, now.arrivals.len()),
        (b"d2".to_vec(), 0),
        "all read: all taken"
    );

    let read = mine.append_arrival(&key, b"a3").await.unwrap().unwrap();
    other.append_arrival(&key, b"a4").await.unwrap();
    let history: Vec<Vec<u8>> = (0..100).map(|i| i.to_string().into_bytes()).collect();
    let outcome = mine
        .cas(&key, Some(&read.version), b"lost", &history)
        .await
        .unwrap();
    assert!(
        matches!(outcome, CasOutcome::Conflict { .. }),
        "too much history beside the names: taken as all, and a4 came since: {outcome:?}"
    );
    written(
        mine.cas(&key, Some(&read.version), b"d3", &history[..3])
            .await
            .unwrap(),
    );
    let now = fresh.load(&key).await.unwrap().unwrap();
    assert_eq!(
        (now.bytes, now.arrivals),
        (b"d3".to_vec(), vec![b"a4".to_vec()])
    );
}

/// The URL of a store under a prefix of this test's own, a plain etcd client that reads
/// and writes its arrival keys directly, and where those are (`P/q/`).
async fn with_raw_client(name: &str) -> (String, etcd_client::Client, String) {
    let endpoint = endpoint_of(&server_url());
    let unique = prefix(name).trim_end_matches('/').to_owned();
    let raw = etcd_client::Client::connect([endpoint.clone()], None)
        .await
        .unwrap();
    (
        format!("etcd://{endpoint}/{unique}"),
        raw,
        format!("/{unique}/q/"),
    )
}

/// The names of `key`'s arrival keys pending now, after `P/q/K\0`.
async fn arrival_names(raw: &mut etcd_client::Client, arrivals: &str, key: &str) -> Vec<String> {
    let start = format!("{arrivals}{key}\0");
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_keys_only();
    let found = raw.get(start.clone(), Some(options)).await.unwrap();
    let names = found
        .kvs()
        .iter()
        .map(|kv| kv.key()[start.len()..].to_vec());
    names.map(|name| String::from_utf8(name).unwrap()).collect()
}

/// etcd's index keeps a deleted key until it compacts, and a read of the arrivals visits every
/// one kept: turn after turn, a key's appends come back to a few names (slots) instead of one
/// new name each, so its arrivals range stays as small as its queue.
#[tokio::test]
async fn a_keys_arrivals_come_back_to_a_few_names() {
    let (url, mut raw, arrivals) = with_raw_client("slots").await;
    let (store, taker) = (EtcdStore::open(&url).await, EtcdStore::open(&url).await);
    let (store, taker) = (store.unwrap(), taker.unwrap());
    let key = "k";
    written(store.cas(key, None, b"d0", &[]).await.unwrap());
    let mut used = std::collections::BTreeSet::new();
    for turn in 0..60 {
        let pending = store.append_arrival(key, b"a").await.unwrap().unwrap();
        assert_eq!(pending.arrivals, [b"a"], "turn {turn}");
        used.extend(arrival_names(&mut raw, &arrivals, key).await);
        let read = taker.load(key).await.unwrap().unwrap();
        written(
            taker
                .cas(key, Some(&read.version), b"d", &[])
                .await
                .unwrap(),
        );
    }
    assert!(
        used.len() <= 17 && used.iter().all(|name| name.starts_with('s')),
        "60 turns, one pending at a time, used {} names: {used:?}",
        used.len()
    );
}

/// An append whose slot another arrival holds puts nothing over it: it learns the key's
/// arrivals from the same answer and lands in a free slot, last of them all.
#[tokio::test]
async fn an_append_never_overwrites_a_pending_arrival() {
    let (url, mut raw, arrivals) = with_raw_client("slots_taken").await;
    let store = EtcdStore::open(&url).await.unwrap();
    let key = "k";
    written(store.cas(key, None, b"d0", &[]).await.unwrap());
    // Every slot a store that knows of no arrival offers (the lowest 16), taken behind its back.
    for n in 0..16 {
        let name = format!("{arrivals}{key}\0s{n}");
        raw.put(name, format!("held {n}"), None).await.unwrap();
    }
    let read = store.append_arrival(key, b"mine").await.unwrap().unwrap();
    let mut expected: Vec<Vec<u8>> = (0..16).map(|n| format!("held {n}").into_bytes()).collect();
    expected.push(b"mine".to_vec());
    assert_eq!(read.arrivals, expected, "all kept, the append last");
    let names = arrival_names(&mut raw, &arrivals, key).await;
    assert_eq!(names.len(), 17, "{names:?}");
    assert!(
        names.iter().any(|name| name
            .strip_prefix('s')
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= 16)),
        "the append took a slot past those held: {names:?}"
    );
    written(
        store
            .cas(key, Some(&read.version), b"d1", &[])
            .await
            .unwrap(),
    );
    let taken = store.load(key).await.unwrap().unwrap();
    assert!(
        taken.arrivals.is_empty(),
        "all 17 taken by the CAS that read them"
    );
}

/// A name comes back only after a write of the document took its arrival: a CAS naming a read
/// from before that write conflicts, and never deletes the arrival that came back under it.
#[tokio::test]
async fn a_name_that_came_back_is_never_taken_by_a_read_from_before() {
    let (url, mut raw, arrivals) = with_raw_client("slot_again").await;
    let (mine, taker) = (EtcdStore::open(&url).await, EtcdStore::open(&url).await);
    let (mine, taker) = (mine.unwrap(), taker.unwrap());
    let (key, slot) = ("k", format!("{arrivals}k\0s0"));
    written(mine.cas(key, None, b"d0", &[]).await.unwrap());
    raw.put(slot.clone(), "first", None).await.unwrap();
    let stale = mine.load(key).await.unwrap().unwrap();
    assert_eq!(stale.arrivals, [b"first"]);
    let read = taker.load(key).await.unwrap().unwrap();
    written(
        taker
            .cas(key, Some(&read.version), b"d1", &[])
            .await
            .unwrap(),
    );
    raw.put(slot, "again", None).await.unwrap();
    let outcome = mine.cas(key, Some(&stale.version), b"lost", &[]).await;
    let CasOutcome::Conflict {
        current: Some(current),
    } = outcome.unwrap()
    else {
        panic!("a read from before d1 must not write");
    };
    assert_eq!(
        (current.bytes, current.arrivals),
        (b"d1".to_vec(), vec![b"again".to_vec()])
    );
}

/// On a key without a document the answer of an append whose slot was taken still tells which
/// are: its next try takes a free one, not a name of its own.
#[tokio::test]
async fn an_append_on_a_key_without_a_document_learns_the_slots_taken() {
    let (url, mut raw, arrivals) = with_raw_client("slots_no_doc").await;
    let store = EtcdStore::open(&url).await.unwrap();
    let key = "k";
    for n in 0..16 {
        raw.put(format!("{arrivals}{key}\0s{n}"), "held", None)
            .await
            .unwrap();
    }
    assert_eq!(store.append_arrival(key, b"mine").await.unwrap(), None);
    let names = arrival_names(&mut raw, &arrivals, key).await;
    assert_eq!(names.len(), 17, "{names:?}");
    assert!(names.iter().all(|name| name.starts_with('s')), "{names:?}");
}

/// An append whose try landed, sent again after an error that said it was not, finds its own
/// arrival in the slot it chose: landed once, not put again in another slot.
#[tokio::test]
async fn an_append_that_finds_itself_in_its_slot_has_landed() {
    let (url, mut raw, arrivals) = with_raw_client("slot_mine").await;
    let store = EtcdStore::open(&url).await.unwrap();
    let key = "k";
    written(store.cas(key, None, b"d0", &[]).await.unwrap());
    // Every slot the store may choose holds the very arrival it appends.
    for n in 0..16 {
        raw.put(format!("{arrivals}{key}\0s{n}"), "mine", None)
            .await
            .unwrap();
    }
    let read = store.append_arrival(key, b"mine").await.unwrap().unwrap();
    assert_eq!(read.arrivals.len(), 16);
    let names = arrival_names(&mut raw, &arrivals, key).await;
    assert_eq!(names.len(), 16, "put again in another slot: {names:?}");
}

/// A version this store never handed out (zero, negative, not a number) conflicts and carries
/// the current document; it is never taken for "absent".
#[tokio::test]
async fn foreign_versions_conflict() {
    let store = store().await;
    let key = format!("{}k", prefix("foreign"));
    let absent = format!("{}absent", prefix("foreign"));
    for version in ["0", "-1", "", "12abc"] {
        let outcome = store
            .cas(&absent, Some(&Version(version.to_owned())), b"x", &[])
            .await
            .unwrap();
        assert_eq!(
            outcome,
            CasOutcome::Conflict { current: None },
            "{version:?}"
        );
    }
    assert_eq!(store.load(&absent).await.unwrap(), None);
    store.cas(&key, None, b"doc", &[]).await.unwrap();
    let outcome = store
        .cas(&key, Some(&Version("0".to_owned())), b"x", &[])
        .await
        .unwrap();
    let CasOutcome::Conflict {
        current: Some(current),
    } = outcome
    else {
        panic!("expected a conflict with the document, got {outcome:?}");
    };
    assert_eq!(current.bytes, b"doc");
}

/// A server that speaks TLS only: `?tls=true&cacert=CA` works; without the CA, or without
/// `tls=true`, the error says what to check.
#[tokio::test]
async fn tls_with_the_servers_ca() {
    let server = Server::start_tls();
    let endpoint = &server.endpoint;
    let ca = server.ca_path();
    let store = EtcdStore::open(&format!(
        "etcd://{endpoint}/tls?tls=true&cacert={}",
        ca.display()
    ))
    .await
    .unwrap();
    conformance::run_all(&store, "suite/").await;

    let untrusted = EtcdStore::open(&format!("etcd://{endpoint}/tls?tls=true"))
        .await
        .unwrap();
    let error = untrusted.load("k").await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(message.contains("cacert="), "{message}");

    let plain = EtcdStore::open(&format!("etcd://{endpoint}/tls"))
        .await
        .unwrap();
    let started = Instant::now();
    let error = plain.load("k").await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(message.contains("tls=true"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// A closed port: `Unavailable` within the connect timeout, naming the endpoint, never a hang.
#[tokio::test]
async fn an_unreachable_server_is_unavailable_quickly() {
    let port = free_port();
    let started = Instant::now();
    // Without credentials, opening does no I/O: the first operation finds out.
    let store = EtcdStore::open(&format!("etcd://127.0.0.1:{port}/p"))
        .await
        .unwrap();
    for (what, result) in [
        ("load", store.load("k").await.map(|_| ())),
        ("list", store.list("").await.map(|_| ())),
        ("cas", store.cas("k", None, b"x", &[]).await.map(|_| ())),
    ] {
        let error = result.expect_err(what);
        let message = error.to_string();
        assert!(
            matches!(error, StoreError::Unavailable { .. }),
            "{what}: expected Unavailable, got {error:?}"
        );
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(message.contains("check that etcd runs"), "{message}");
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    // Two endpoints, both closed.
    let other = free_port();
    let store = EtcdStore::open(&format!("etcd://127.0.0.1:{port},127.0.0.1:{other}/p"))
        .await
        .unwrap();
    let started = Instant::now();
    let error = store.load("k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// With one endpoint down and one up, operations go to the one that answers.
#[tokio::test]
async fn a_dead_endpoint_beside_a_live_one_is_skipped() {
    let url = server_url();
    let live = endpoint_of(&url);
    let dead = format!("127.0.0.1:{}", free_port());
    let unique = prefix("endpoints");
    let store = EtcdStore::open(&format!(
        "etcd://{dead},{live}/{}",
        unique.trim_end_matches('/')
    ))
    .await
    .unwrap();
    for round in 0..10 {
        let key = format!("k{round}");
        let outcome = store.cas(&key, None, b"x", &[]).await;
        assert!(
            matches!(outcome, Ok(CasOutcome::Written { .. })),
            "round {round}: {outcome:?}"
        );
        assert!(store.load(&key).await.unwrap().is_some());
    }
}

/// `?tls=true` against a server without TLS: a clear error that names TLS, quickly.
#[tokio::test]
async fn tls_against_a_plain_server_says_so() {
    let endpoint = endpoint_of(&server_url());
    let store = EtcdStore::open(&format!("etcd://{endpoint}/p?tls=true"))
        .await
        .unwrap();
    assert!(
        store.describe().ends_with("?tls=true"),
        "{}",
        store.describe()
    );
    let started = Instant::now();
    let error = store.load("k").await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(message.contains("TLS"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10));

    let missing = EtcdStore::open(&format!("etcd://{endpoint}/p?cacert=/nonexistent/ca.pem"))
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/ca.pem"),
        "{missing}"
    );
}

#[tokio::test]
async fn describe_hides_the_password() {
    let store = EtcdStore::open(&format!(
        "etcd://root:s3cret-pw@127.0.0.1:{}/p",
        free_port()
    ))
    .await;
    // Authenticating against a closed port fails; the error must not show the password either.
    let error = store.unwrap_err();
    let message = error.to_string();
    assert!(!message.contains("s3cret-pw"), "{message}");
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");

    let bad = EtcdStore::open("etcd://root:s3cret-pw@127.0.0.1:notaport/p")
        .await
        .unwrap_err();
    assert!(!bad.to_string().contains("s3cret-pw"), "{bad}");

    // Opened through the store URL parser, the store describes itself by its URL.
    let opened = baton_store::url::open(&server_url()).await.unwrap();
    assert_eq!(opened.describe(), server_url().trim_end_matches('/'));
}

/// An etcd with authentication on: no credentials, or wrong ones, give an error that names
/// authentication; the right ones work (CAS, watch, history), and the password is never shown.
#[tokio::test]
async fn authentication() {
    let server = Server::start();
    let endpoint = server.endpoint.clone();
    etcdctl(&endpoint, &["user", "add", "root:pa55-word"]);
    etcdctl(&endpoint, &["auth", "enable"]);

    let url = format!("etcd://{endpoint}/auth");
    let anonymous = EtcdStore::open(&url).await.unwrap();
    let error = anonymous.load("k").await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(message.contains("authentication"), "{message}");
    let error = anonymous.cas("k", None, b"x", &[]).await.unwrap_err();
    assert!(error.to_string().contains("authentication"), "{error}");

    let wrong = EtcdStore::open(&format!("etcd://root:wrong@{endpoint}/auth"))
        .await
        .unwrap_err();
    let message = wrong.to_string();
    assert!(matches!(wrong, StoreError::Unusable { .. }), "{wrong:?}");
    assert!(message.contains("authentication"), "{message}");
    assert!(!message.contains("wrong@"), "{message}");

    let store = EtcdStore::open(&format!("etcd://root:pa55-word@{endpoint}/auth"))
        .await
        .unwrap();
    assert_eq!(store.describe(), format!("etcd://root@{endpoint}/auth"));
    let mut watch = store.watch("k").await.unwrap().expect("etcd watches");
    let outcome = store.cas("k", None, b"x", &[b"h".to_vec()]).await.unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
    tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("woken by the write")
        .unwrap();
    assert_eq!(store.history("k", 0, 10).await.unwrap().len(), 1);
    assert_eq!(store.list("").await.unwrap(), ["k"]);
    conformance::run_all(&store, "suite/").await;
}

/// A watch survives its server going away: after a restart on the same port, the handle is
/// woken once the watch is back (changes in the gap were not pushed), and then at each change.
#[tokio::test]
async fn watches_come_back_after_a_restart() {
    let mut server = Server::start();
    let store = EtcdStore::open(&format!("etcd://{}/restart", server.endpoint))
        .await
        .unwrap();
    let mut watch = store.watch("k").await.unwrap().expect("etcd watches");
    let CasOutcome::Written { version } = store.cas("k", None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("woken by the create")
        .unwrap();

    server.stop();
    let error = store.load("k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    server.restart();

    // Woken by the re-created watch (the write below may come first; either wakes it).
    let outcome = store.cas("k", Some(&version), b"2", &[]).await.unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
    tokio::time::timeout(Duration::from_secs(15), watch.changed())
        .await
        .expect("woken after the restart")
        .unwrap();
    // And pushes work again: drain any pending wake-up, then write once more.
    let current = store.load("k").await.unwrap().unwrap();
    let _ = tokio::time::timeout(Duration::from_millis(500), watch.changed()).await;
    store
        .cas("k", Some(&current.version), b"3", &[])
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("woken by a write after the restart")
        .unwrap();
}

/// A key's watches (its document's and its arrivals') outlive their last handle for a while: a
/// process that waits on the same key again soon gets its handle without new etcd watches (and
/// without waiting for them to be confirmed), and they are cancelled at the first event after
/// the key has gone unwatched for two seconds; watched again after that, it has its two
/// watches again. Counted on a server of its own by its
/// `etcd_debugging_mvcc_watcher_total`.
#[tokio::test]
async fn a_watch_outlives_its_last_handle_for_a_while() {
    let server = Server::start();
    let store = EtcdStore::open(&format!("etcd://{}/linger", server.endpoint))
        .await
        .unwrap();
    let watchers = || watcher_total(&server.endpoint);
    let watch = store.watch("k").await.unwrap().expect("etcd watches");
    // The arrivals' watch follows its seed's read.
    until_watchers(&server.endpoint, 2).await;
    drop(watch);
    let mut version = written(store.cas("k", None, b"1", &[]).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        watchers(),
        2,
        "cancelled at the first event after its last handle"
    );

    let mut again = store.watch("k").await.unwrap().expect("etcd watches");
    version = written(store.cas("k", Some(&version), b"2", &[]).await.unwrap());
    tokio::time::timeout(Duration::from_secs(2), again.changed())
        .await
        .expect("the kept watch wakes its new handle")
        .unwrap();
    assert_eq!(watchers(), 2, "no second watch for the same key");
    drop(again);

    tokio::time::sleep(Duration::from_millis(2_200)).await;
    written(store.cas("k", Some(&version), b"3", &[]).await.unwrap());
    until_watchers(&server.endpoint, 0).await;

    // Watched again: two watches again, and its pushes carry its arrivals.
    let mut last = store.watch("k").await.unwrap().expect("etcd watches");
    until_watchers(&server.endpoint, 2).await;
    store.append_arrival("k", b"a1").await.unwrap();
    until_pushed(&mut last, "a1", |pushed| pushed.arrivals == [b"a1"]).await;
    assert_eq!(watchers(), 2);
}

/// Until the etcd at `endpoint` has `n` watchers (at most 5 s).
async fn until_watchers(endpoint: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while watcher_total(endpoint) != n {
        let now = watcher_total(endpoint);
        assert!(Instant::now() < deadline, "{now} watchers, not {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A pushed document carries the arrivals pending at it, with a version naming them as a
/// load's does, so that a holder following its key takes them in with its release instead of
/// losing its CAS to them: an append under the same document pushes it again with the new
/// arrival; a CAS naming a push's version takes the arrivals it carried and leaves one
/// appended after it pending (even when it carried none), which the push of the new document
/// carries.
#[tokio::test]
async fn a_push_carries_the_arrivals_pending_at_its_document() {
    let store = store().await;
    let key = format!("{}k", prefix("pushed_arrivals"));
    let first = written(store.cas(&key, None, b"d1", &[]).await.unwrap());
    let mut watch = store.watch(&key).await.unwrap().expect("etcd watches");
    store.append_arrival(&key, b"a1").await.unwrap();
    let one = until_pushed(&mut watch, "a1", |p| p.arrivals == [b"a1"]).await;
    assert_eq!(one.bytes, b"d1");
    assert_ne!(one.version, first, "its version names the arrival");

    store.append_arrival(&key, b"a2").await.unwrap();
    let two = until_pushed(&mut watch, "a1 and a2", |p| p.arrivals.len() == 2).await;
    assert_eq!(
        two.arrivals,
        [b"a1".to_vec(), b"a2".to_vec()],
        "oldest first"
    );
    store.append_arrival(&key, b"a3").await.unwrap();
    written(
        store
            .cas(&key, Some(&two.version), b"d2", &[])
            .await
            .unwrap(),
    );
    let left = store.load(&key).await.unwrap().unwrap();
    assert_eq!(left.arrivals, [b"a3"], "a3, appended after the push, stays");

    let pushed = until_pushed(&mut watch, "d2 with a3", |p| {
        p.bytes == b"d2" && p.arrivals == [b"a3"]
    })
    .await;
    written(
        store
            .cas(&key, Some(&pushed.version), b"d3", &[])
            .await
            .unwrap(),
    );
    let last = store.load(&key).await.unwrap().unwrap();
    assert!(last.arrivals.is_empty(), "taken by the CAS naming the push");

    // A push that knew none pending: a CAS naming it leaves an arrival appended since pending,
    // where a version that read none loses to it.
    let none = until_pushed(&mut watch, "d3, knowing none", |p| {
        p.bytes == b"d3" && p.version != last.version
    })
    .await;
    assert!(none.arrivals.is_empty());
    store.append_arrival(&key, b"a4").await.unwrap();
    let stale = store
        .cas(&key, Some(&last.version), b"lost", &[])
        .await
        .unwrap();
    assert!(matches!(stale, CasOutcome::Conflict { .. }), "{stale:?}");
    written(
        store
            .cas(&key, Some(&none.version), b"d4", &[])
            .await
            .unwrap(),
    );
    let end = store.load(&key).await.unwrap().unwrap();
    assert_eq!(
        (end.bytes, end.arrivals),
        (b"d4".to_vec(), vec![b"a4".to_vec()])
    );
}

/// A write that takes no arrival, from a push that knew none pending, is pushed knowing the
/// arrivals as of it at once, not when the next one is appended: its holder's release, written
/// after an append, leaves that arrival pending rather than losing to it. The stamp the write
/// puts is in no read of the arrivals.
#[tokio::test]
async fn a_write_that_takes_none_is_pushed_knowing_none_at_once() {
    let store = store().await;
    let key = format!("{}k", prefix("stamped"));
    written(store.cas(&key, None, b"d1", &[]).await.unwrap());
    let mut watch = store.watch(&key).await.unwrap().expect("etcd watches");
    store.append_arrival(&key, b"a1").await.unwrap();
    let one = until_pushed(&mut watch, "a1", |p| p.arrivals == [b"a1"]).await;
    let knows = |p: &baton_store::Versioned| arrivals_seen::split(&p.version).1 > 0;
    written(
        store
            .cas(&key, Some(&one.version), b"d2", &[])
            .await
            .unwrap(),
    );
    let two = until_pushed(&mut watch, "d2, knowing none", |p| {
        p.bytes == b"d2" && knows(p)
    })
    .await;
    assert!(two.arrivals.is_empty(), "a1 was taken: {two:?}");
    // Takes none: only its stamp tells the arrivals' watch of it.
    written(
        store
            .cas(&key, Some(&two.version), b"d3", &[])
            .await
            .unwrap(),
    );
    let three = until_pushed(&mut watch, "d3, knowing none", |p| {
        p.bytes == b"d3" && knows(p)
    })
    .await;
    assert!(three.arrivals.is_empty(), "{three:?}");
    store.append_arrival(&key, b"a2").await.unwrap();
    written(
        store
            .cas(&key, Some(&three.version), b"d4", &[])
            .await
            .unwrap(),
    );
    let end = store.load(&key).await.unwrap().unwrap();
    assert_eq!(
        (end.bytes, end.arrivals),
        (b"d4".to_vec(), vec![b"a2".to_vec()]),
        "a2, appended after the push, stays pending"
    );
}

/// etcd stops answering (SIGSTOP) with a CAS in flight: the CAS is `Ambiguous` after the
/// request timeout, never a hang, and a read is `Unavailable`. Once etcd resumes, the write it
/// had already received may commit: the outcome really was unknown.
#[tokio::test]
async fn a_cas_without_an_answer_is_ambiguous() {
    let server = Server::start();
    let store = EtcdStore::open(&format!("etcd://{}/ambiguous", server.endpoint))
        .await
        .unwrap();
    let CasOutcome::Written { version } = store.cas("k", None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    server.signal(libc::SIGSTOP);
    // kill(2) returns before etcd stops: a thread still running could take the CAS below.
    let pid = server.child.as_ref().expect("the server runs").id() as i32;
    assert!(
        baton_testkit::stopped::all_threads_stopped(pid, Duration::from_secs(10)),
        "etcd did not stop"
    );
    let started = Instant::now();
    let error = store
        .cas("k", Some(&version), b"2", &[b"h".to_vec()])
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(error, StoreError::Ambiguous { .. }), "{error:?}");
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    let error = store.load("k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    server.signal(libc::SIGCONT);

    // Whichever happened, the document and its history agree.
    let current = loop {
        match store.load("k").await {
            Ok(current) => break current.unwrap(),
            Err(_) if started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(error) => panic!("etcd did not come back: {error}"),
        }
    };
    // A write the paused server had accepted may still commit now: read the history, then the
    // document again, until both come from the same state.
    let mut current = current;
    let history = loop {
        let history = store.history("k", 0, 10).await.unwrap();
        let again = store.load("k").await.unwrap().unwrap();
        if again == current {
            break history;
        }
        current = again;
    };
    match current.bytes.as_slice() {
        b"1" => assert!(history.is_empty(), "{history:?}"),
        b"2" => assert_eq!(history.len(), 1, "{history:?}"),
        other => panic!("unexpected document {other:?}"),
    }
}

// ----- helpers -----------------------------------------------------------------------------

/// The server's count of watchers, from its `/metrics` (plain HTTP on the client port).
fn watcher_total(endpoint: &str) -> u64 {
    use std::io::{Read, Write};
    let mut connection = std::net::TcpStream::connect(endpoint).unwrap();
    write!(
        connection,
        "GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    connection.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .unwrap_or_else(|| panic!("no watcher count in {text}"))
}

fn endpoint_of(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    rest.split(['/', '?']).next().unwrap().to_owned()
}

/// Runs etcdctl (v3 API) against `endpoint`, failing the test if it fails; returns its stdout.
fn etcdctl(endpoint: &str, args: &[&str]) -> String {
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "--dial-timeout", "3s"])
        .args(args)
        .output()
        .unwrap_or_else(|error| {
            panic!("etcdctl is not installed ({error}): scripts/servers/etcd.sh installs it")
        });
    assert!(
        output.status.success(),
        "etcdctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An etcd of a test's own: free loopback ports, data in a temporary directory, killed on drop.
struct Server {
    dir: tempfile::TempDir,
    endpoint: String,
    client_port: u16,
    peer_port: u16,
    /// Serves clients over TLS with a certificate for 127.0.0.1 signed by `dir/ca.pem`.
    tls: bool,
    child: Option<Child>,
}

impl Server {
    fn start() -> Server {
        Self::start_with(false)
    }

    /// A server whose client port speaks TLS only.
    fn start_tls() -> Server {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let client_port = free_port();
        let mut peer_port = free_port();
        while peer_port == client_port {
            peer_port = free_port();
        }
        let mut server = Server {
            dir,
            endpoint: format!("127.0.0.1:{client_port}"),
            client_port,
            peer_port,
            tls,
            child: None,
        };
        if tls {
            make_certificates(server.dir.path());
        }
        server.restart();
        server
    }

    fn ca_path(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Starts (again) on the same ports and data, and waits until it answers.
    fn restart(&mut self) {
        let (client, peer) = (self.client_port, self.peer_port);
        let scheme = if self.tls { "https" } else { "http" };
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let mut command = Command::new("etcd");
        if self.tls {
            command
                .arg("--cert-file")
                .arg(self.dir.path().join("server.pem"))
                .arg("--key-file")
                .arg(self.dir.path().join("server.key"));
        }
        let child = command
            .args(["--name", "n", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &format!("{scheme}://127.0.0.1:{client}"),
                "--advertise-client-urls",
                &format!("{scheme}://127.0.0.1:{client}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("n=http://127.0.0.1:{peer}"),
                "--initial-cluster-state",
                "new",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("etcd is not installed ({error}): scripts/servers/etcd.sh installs it")
            });
        self.child = Some(child);
        let started = Instant::now();
        let ca = self.tls.then(|| self.ca_path());
        while !healthy(&self.endpoint, ca.as_deref()) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "etcd did not start; its log:\n{}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `signal` to the server process.
    fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("the server runs");
        // SAFETY: a plain signal send to our own child.
        let rc = unsafe { libc::kill(child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill({signal}) failed");
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether etcd answers on `endpoint` (over TLS when given the CA).
fn healthy(endpoint: &str, ca: Option<&std::path::Path>) -> bool {
    let mut command = Command::new("etcdctl");
    if let Some(ca) = ca {
        command.arg("--cacert").arg(ca);
    }
    command
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            endpoint,
            "--dial-timeout",
            "1s",
            "endpoint",
            "health",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 it signed (`server.pem`,
/// `server.key`), made with openssl in `dir`.
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &str| {
        let output = Command::new("openssl")
            .current_dir(dir)
            .args(args.split_whitespace())
            .output()
            .unwrap_or_else(|error| panic!("openssl is not installed ({error})"));
        assert!(
            output.status.success(),
            "openssl {args}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(
        dir.join("server.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    openssl(&format!(
        "req -x509 {key} -days 2 -subj /CN=baton-test-ca -keyout ca.key -out ca.pem"
    ));
    openssl(&format!(
        "req {key} -subj /CN=127.0.0.1 -keyout server.key -out server.csr"
    ));
    openssl(
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
         -extfile server.cnf -out server.pem",
    );
}

/// etcd keeps history by count only: `history_max_age` is refused, saying so.
#[tokio::test]
async fn history_max_age_is_refused() {
    let error = EtcdStore::open(&with_parameter(&server_url(), "history_max_age=30d"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, StoreError::BadUrl { reason, .. } if reason.contains("by count only")),
        "{error:?}"
    );
}

/// A closed port may heal; refused credentials will not (opening authenticates when the URL
/// has them, so the failure comes from the open).
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{closed_port, failure_classified, Classified};
    use baton_store::url::OpenMode;
    let closed = format!("etcd://127.0.0.1:{}/p", closed_port());
    failure_classified(
        &closed,
        OpenMode::Existing,
        Classified::Heals,
        "check that etcd runs",
    )
    .await;
    let server = Server::start();
    let endpoint = server.endpoint.clone();
    etcdctl(&endpoint, &["user", "add", "root:pa55-word"]);
    etcdctl(&endpoint, &["auth", "enable"]);
    for url in [
        format!("etcd://root:wrong@{endpoint}/auth"),
        format!("etcd://{endpoint}/auth"),
    ] {
        failure_classified(
            &url,
            OpenMode::Create,
            Classified::Permanent,
            "authentication",
        )
        .await;
    }
}
