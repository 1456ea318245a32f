//! The conformance suite against a DynamoDB-compatible server (moto), one test per behaviour,
//! and what only DynamoDB shows: history that survives a writer dying between moving entries
//! out and writing the hot item, racing writers on one version, `init`, the write units an
//! acquire + release costs, missing permissions (on a moto of the test's own that enforces
//! IAM), and errors for unanswered requests and missing configuration.
//!
//! The server and table come from `BATON_TEST_DYNAMODB_URL` (`dynamodb://TABLE`) with the AWS
//! environment (`AWS_ENDPOINT_URL`, credentials) that `scripts/servers/moto.sh` exports:
//! `scripts/with-servers.sh --only moto cargo test -p baton-store --test conformance_dynamodb`.
//! Each test calls `init` first (idempotent), so the table need not exist, and writes under its
//! own `conformance::unique_prefix`.
#![cfg(feature = "dynamodb")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use baton_store::deferred::Hot;
use baton_store::dynamodb::{layout, DynamoStore};
use baton_store::{conformance, CasOutcome, HistoryRecord, Store, StoreError};

mod common;
use common::written;

/// The shared test server's URL (panics, saying how to start it, when it is not set).
fn server_url() -> String {
    common::server_url("DYNAMODB")
}

fn prefix(name: &str) -> String {
    common::prefix("ddb", name)
}

/// The store, with its table created if need be.
async fn store() -> DynamoStore {
    let store = DynamoStore::open(&server_url()).await.unwrap();
    let said = store.init().await.unwrap();
    assert!(said.contains("active"), "{said}");
    store
}

baton_store::conformance_tests!(store(), prefix);

/// Racing stores with a client each, as separate processes have (no shared cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_clients() {
    conformance::increments_through_separate_stores(store, &prefix("separate"), 25).await;
}

/// `init` is idempotent, and opening names the table in `describe`; a table with another key
/// schema is refused with a message that says what baton needs.
#[tokio::test]
async fn init_is_idempotent_and_checks_the_schema() {
    let store = store().await;
    let again = store.init().await.unwrap();
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(
        store.describe(),
        server_url().trim_end_matches('/').to_owned()
    );

    let other = format!("baton-wrong-{}", std::process::id());
    let client = raw_client().await;
    let created = client
        .create_table()
        .table_name(&other)
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await;
    created.unwrap();
    let wrong = DynamoStore::open(&format!("dynamodb://{other}"))
        .await
        .unwrap();
    let error = wrong.init().await.unwrap_err();
    assert!(
        matches!(error, StoreError::Incompatible { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("`sk` (string, sort key)"),
        "{error}"
    );
    let _ = client.delete_table().table_name(&other).send().await;
}

/// A table that does not exist: every operation says to run `baton init`, and opening does
/// not create it.
#[tokio::test]
async fn a_missing_table_says_to_run_init() {
    let table = format!("baton-missing-{}", std::process::id());
    let store = DynamoStore::open(&format!("dynamodb://{table}"))
        .await
        .unwrap();
    for error in [
        store.load("k").await.unwrap_err(),
        store.cas("k", None, b"x", &[]).await.unwrap_err(),
        store.list("").await.unwrap_err(),
    ] {
        let message = error.to_string();
        assert!(matches!(error, StoreError::Missing { .. }), "{error:?}");
        assert!(
            message.contains(&format!("baton init --store dynamodb://{table}")),
            "{message}"
        );
    }
    let tables = raw_client().await.list_tables().send().await.unwrap();
    assert!(
        !tables.table_names().contains(&table),
        "opening created the table"
    );
}

/// Writers race on one version (and on a create): exactly one wins, and every loser's conflict
/// carries the winner's document.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_on_one_version_have_one_winner() {
    const N_WRITERS: usize = 8;
    let key = format!("{}k", prefix("race"));
    for round in 0..5 {
        let expected = store().await.load(&key).await.unwrap().map(|v| v.version);
        let mut stores = Vec::new();
        for _ in 0..N_WRITERS {
            stores.push(store().await);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (writer, store) in stores.into_iter().enumerate() {
            let (key, expected) = (key.clone(), expected.clone());
            tasks.spawn(async move {
                let doc = format!("round {round} writer {writer}").into_bytes();
                let outcome = store
                    .cas(&key, expected.as_ref(), &doc, std::slice::from_ref(&doc))
                    .await
                    .unwrap();
                (doc, outcome)
            });
        }
        let mut winners = Vec::new();
        let mut conflicts = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined.unwrap() {
                (doc, CasOutcome::Written { version }) => winners.push((doc, version)),
                (_, CasOutcome::Conflict { current }) => conflicts.push(current),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one writer wins");
        let (doc, version) = winners.pop().unwrap();
        for current in conflicts {
            let current = current.expect("a conflict carries the current document");
            assert_eq!(
                (current.bytes, current.version),
                (doc.clone(), version.clone())
            );
        }
    }
    let history = store().await.history(&key, 0, 100).await.unwrap();
    assert_eq!(
        seqs(&history),
        [1, 2, 3, 4, 5],
        "one entry per round's winner"
    );
}

/// A writer that stored the pending entries on their own and died before writing the hot item
/// (done here by hand, with the raw SDK) loses nothing: readers see each entry once, and the
/// next writer stores them again (the same bytes under the same names) and goes on.
#[tokio::test]
async fn history_survives_a_writer_dying_between_moving_entries_out_and_the_hot_write() {
    let store = store().await;
    let key = format!("{}k", prefix("dying"));
    // Entries large enough that each CAS moves the previous one's out.
    let entry = |n: u32| format!("{n:>600}").into_bytes();
    let mut version = None;
    for n in 1..=3 {
        version = Some(written(
            store
                .cas(&key, version.as_ref(), b"doc", &[entry(n)])
                .await
                .unwrap(),
        ));
    }
    // The hot item holds entry 3 pending; 1 and 2 are stored.
    let hot = raw_hot(&key).await;
    assert_eq!(
        hot.pending.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [3],
        "{hot:?}"
    );

    // The dying writer: it stores the pending entry on its own, then never writes the hot item.
    store_history_by_hand(&key, &hot.pending).await;
    let all: Vec<Vec<u8>> = (1..=3).map(entry).collect();
    assert_eq!(entries(&store.history(&key, 0, 10).await.unwrap()), all);
    assert_eq!(
        seqs(&store.history_tail(&key, 10).await.unwrap()),
        [3, 2, 1]
    );

    // A fresh process (no cache) writes next: it moves entry 3 out again and adds 4.
    let next = DynamoStore::open(&server_url()).await.unwrap();
    let current = next.load(&key).await.unwrap().unwrap();
    written(
        next.cas(&key, Some(&current.version), b"doc", &[entry(4)])
            .await
            .unwrap(),
    );
    let all: Vec<Vec<u8>> = (1..=4).map(entry).collect();
    assert_eq!(entries(&next.history(&key, 0, 10).await.unwrap()), all);
    assert_eq!(seqs(&next.history(&key, 2, 10).await.unwrap()), [3, 4]);
    assert_eq!(seqs(&next.history_tail(&key, 3).await.unwrap()), [4, 3, 2]);
}

/// Writers abandoned at random points of their CAS (mid-way through moving entries out, between
/// that and the hot write, during it): the history holds exactly the entries of the CASes that
/// took effect, in order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_writers_abandoned_at_any_point() {
    let key = format!("{}counter", prefix("abandoned"));
    let store = store().await;
    // Cut-offs spread over twice the time a CAS that moves entries out takes on this server.
    let timing_key = format!("{key}-timing");
    let mut version = None;
    let started = std::time::Instant::now();
    for _ in 0..10 {
        let entry = vec![b'.'; 400];
        version = Some(written(
            store
                .cas(&timing_key, version.as_ref(), b"t", &[entry])
                .await
                .unwrap(),
        ));
    }
    let span_us = (started.elapsed().as_micros() as u64 / 10).max(1_000) * 2;
    let mut n_abandoned = 0;
    for attempt in 0u64..150 {
        let current = store.load(&key).await.unwrap();
        let count: u64 = current
            .as_ref()
            .map_or(0, |c| String::from_utf8_lossy(&c.bytes).parse().unwrap());
        let next = (count + 1).to_string().into_bytes();
        // Entries of ~400 bytes: every second CAS moves entries out first.
        let entry = [next.clone(), vec![b'.'; 400]].concat();
        let cutoff = Duration::from_micros((attempt * 7_919) % span_us);
        let cas = store.cas(
            &key,
            current.as_ref().map(|c| &c.version),
            &next,
            std::slice::from_ref(&entry),
        );
        match tokio::time::timeout(cutoff, cas).await {
            Ok(outcome) => {
                outcome.unwrap();
            }
            Err(_) => n_abandoned += 1,
        }
    }
    let count = settle(&store, &key).await;
    eprintln!("{count} CASes took effect, {n_abandoned} writers abandoned");
    assert!(count > 10 && n_abandoned > 10, "both kinds happened");
    let history = store.history(&key, 0, 1000).await.unwrap();
    assert_eq!(seqs(&history), (1..=count).collect::<Vec<u64>>());
    for (record, n) in history.iter().zip(1..) {
        assert!(
            record.bytes.starts_with(format!("{n}.").as_bytes()),
            "entry {n} holds {:?}",
            String::from_utf8_lossy(&record.bytes[..8.min(record.bytes.len())])
        );
    }
    let tail = store.history_tail(&key, 5).await.unwrap();
    assert_eq!(
        seqs(&tail),
        ((count - 4)..=count).rev().collect::<Vec<u64>>()
    );
}

/// Writes the counter at `key` once more, retrying until a CAS of its own is written, and
/// returns the count it wrote. A writer abandoned by its caller may still land: the server can
/// apply a request it had received after the caller has read the key again (seen under load, an
/// abandoned CAS landing after the next read). Once a CAS of ours has been written, every
/// request still in flight names an older version and is refused, so what is read after it is
/// final.
async fn settle(store: &DynamoStore, key: &str) -> u64 {
    loop {
        let current = store.load(key).await.unwrap().unwrap();
        let count: u64 = String::from_utf8_lossy(&current.bytes).parse().unwrap();
        let next = count + 1;
        let entry = [next.to_string().into_bytes(), vec![b'.'; 400]].concat();
        let outcome = store
            .cas(
                key,
                Some(&current.version),
                next.to_string().as_bytes(),
                std::slice::from_ref(&entry),
            )
            .await
            .unwrap();
        if let CasOutcome::Written { .. } = outcome {
            return next;
        }
    }
}

/// A context of 199 bytes: who, what, where, as a CI job writes it.
const CONTEXT_199: &str =
    "deploy 3f9c2ab7 of acme/shop to production by alice; GitHub Actions run \
     9876543210 attempt 1, job deploy-prod; https://github.com/acme/shop/actions/runs/9876543210 \
     (push to main, merge queue #421733)";

/// The write units of an uncontended acquire + release through the client, with a context just
/// under 200 bytes, on a key with an empty history and on one with 10,000 entries: at most 4 each
/// (DynamoDB bills 1 unit per started KB of the larger of the old and new item).
///
/// moto reports 1 unit per request whatever the item's size, so the bound is checked on the
/// units computed from the sizes of the items written (`estimated_write_units`), and the
/// reported figures are printed beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_units_per_acquire_and_release() {
    let store = store().await;
    let coord = baton_client::Coordinator::new(Arc::new(store.clone()));
    let options = baton_client::AcquireOptions {
        // Just under the 200 bytes the bound is stated for, as a CI job would write it.
        context: CONTEXT_199.to_owned(),
        ..Default::default()
    };
    let cycle = |key: String| {
        let (coord, options) = (&coord, &options);
        async move {
            let pending = baton_client::acquire::Pending::new(&key);
            let lease = baton_client::acquire::acquire(coord, &pending, options)
                .await
                .unwrap();
            baton_client::acquire::release(
                coord,
                &key,
                &lease.token,
                baton_core::Outcome::Succeeded,
            )
            .await
            .unwrap();
        }
    };
    let measure = |what: &'static str, key: String| {
        let (store, cycle) = (&store, &cycle);
        async move {
            let mut per_cycle = Vec::new();
            for _ in 0..40 {
                let (estimated, reported) = (store.estimated_write_units(), store.write_units());
                cycle(key.clone()).await;
                per_cycle.push((
                    store.estimated_write_units() - estimated,
                    store.write_units() - reported,
                ));
            }
            let doc_bytes = store.load(&key).await.unwrap().unwrap().bytes.len();
            let item_bytes = store.cached_item_bytes(&key).unwrap();
            let total: u64 = per_cycle.iter().map(|(units, _)| units).sum();
            eprintln!(
                "{what}: document {doc_bytes} bytes, hot item {item_bytes} bytes; write units \
                 per acquire+release by item size: {:?} (mean {:.2}); as moto reported: {:?}",
                per_cycle.iter().map(|(units, _)| units).collect::<Vec<_>>(),
                total as f64 / per_cycle.len() as f64,
                per_cycle
                    .iter()
                    .map(|(_, reported)| reported)
                    .collect::<Vec<_>>(),
            );
            (per_cycle, doc_bytes, item_bytes)
        }
    };

    let fresh = format!("{}empty", prefix("units"));
    let empty = measure("empty history", fresh).await;

    // A key with 10,000 history entries (real history records, as a release writes them).
    let long = format!("{}long", prefix("units"));
    cycle(long.clone()).await;
    let sample = store.history(&long, 0, 1).await.unwrap().remove(0).bytes;
    let mut current = store.load(&long).await.unwrap().unwrap();
    while store.history_tail(&long, 1).await.unwrap()[0].seq < 10_000 {
        let batch = vec![sample.clone(); 25];
        let version = written(
            store
                .cas(&long, Some(&current.version), &current.bytes, &batch)
                .await
                .unwrap(),
        );
        current.version = version;
    }
    // Move the last batch out of the hot item, as the next operation would anyway.
    written(
        store
            .cas(&long, Some(&current.version), &current.bytes, &[])
            .await
            .unwrap(),
    );
    let long_history = measure("10,000-entry history", long.clone()).await;
    assert!(store.history_tail(&long, 1).await.unwrap()[0].seq > 10_000);

    for (what, (per_cycle, doc_bytes, item_bytes)) in
        [("empty", &empty), ("10,000 entries", &long_history)]
    {
        let worst = per_cycle.iter().map(|(units, _)| *units).max().unwrap();
        assert!(
            worst <= 4,
            "{what}: an acquire+release cost up to {worst} write units (per cycle, by item size \
             and as reported: {per_cycle:?}); at most 4 allowed. The hot item is {item_bytes} \
             bytes, of which the core's document is {doc_bytes}: two writes of it cost \
             {} units alone",
            2 * baton_store::dynamodb::layout::write_units(*item_bytes)
        );
    }
}

/// The store's own share of the bound, whatever the core's document holds: with a document
/// of 600 bytes (a key with a short queue and a short context) and history entries of 300
/// bytes, an acquire (a write without history) and a release (a write with one entry) cost at
/// most 4 write units, 3 on average, on a key with an empty history and on one with 10,000
/// entries.
#[tokio::test]
async fn a_small_document_costs_at_most_4_units_per_acquire_and_release() {
    let store = store().await;
    let empty = format!("{}empty", prefix("small-doc"));
    let long = format!("{}long", prefix("small-doc"));
    let doc = |n: u32| format!("{n:>600}").into_bytes();
    let entry = |n: u32| format!("{n:>300}").into_bytes();
    // 10,000 entries on the long key, then its pending ones moved out.
    let mut version = written(store.cas(&long, None, &doc(0), &[]).await.unwrap());
    for round in 0..400 {
        let batch: Vec<Vec<u8>> = (0..25).map(|i| entry(round * 25 + i)).collect();
        version = written(
            store
                .cas(&long, Some(&version), &doc(0), &batch)
                .await
                .unwrap(),
        );
    }
    let long_version = written(
        store
            .cas(&long, Some(&version), &doc(0), &[])
            .await
            .unwrap(),
    );
    assert_eq!(store.history_tail(&long, 1).await.unwrap()[0].seq, 10_000);

    for (key, mut version) in [(empty, None), (long, Some(long_version))] {
        let mut per_cycle = Vec::new();
        for n in 1..=30 {
            let before = store.estimated_write_units();
            // Acquire: the document changes (a ticket is added), no history.
            version = Some(written(
                store
                    .cas(&key, version.as_ref(), &doc(n), &[])
                    .await
                    .unwrap(),
            ));
            // Release: the document changes back, one history entry.
            version = Some(written(
                store
                    .cas(&key, version.as_ref(), &doc(0), &[entry(n)])
                    .await
                    .unwrap(),
            ));
            per_cycle.push(store.estimated_write_units() - before);
        }
        let mean = per_cycle.iter().sum::<u64>() as f64 / per_cycle.len() as f64;
        eprintln!("{key}: write units per cycle {per_cycle:?} (mean {mean:.2})");
        assert!(
            per_cycle.iter().all(|units| *units <= 4),
            "{key}: {per_cycle:?}"
        );
        assert!(mean <= 3.0, "{key}: mean {mean}");
        let history = store.history_tail(&key, 30).await.unwrap();
        assert_eq!(entries(&history)[0], entry(30), "nothing lost on the way");
    }
}

/// With no region anywhere in the chain (and no local endpoint), opening says what to set
/// rather than failing obscurely at the first request. Runs this test binary again with a bare
/// environment.
#[tokio::test]
async fn missing_region_is_a_clear_error() {
    // The region check runs in `open`, before anything is sent; it needs a clean environment,
    // which a child process gives.
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "open_without_region_child", "--nocapture"])
        .env_clear()
        .env("BATON_TEST_CHILD", "1")
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "the child test did not run: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// The child half of [`missing_region_is_a_clear_error`]; does nothing when run directly.
#[tokio::test]
async fn open_without_region_child() {
    if std::env::var_os("BATON_TEST_CHILD").is_none() {
        return;
    }
    let error = DynamoStore::open("dynamodb://some-table")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("AWS_REGION"), "{error}");
}

/// A server that takes the request and never answers: a CAS is ambiguous (it may have been
/// applied) after the operation timeout, never a hang, and a read is unavailable. A port where
/// nothing listens: nothing was sent, so even a CAS is simply unavailable. Runs in a child
/// process, since the endpoint comes from the environment.
#[tokio::test]
async fn unanswered_writes_are_ambiguous_and_refused_connections_are_not() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Hold every connection open, reading nothing and answering nothing.
        let held: Vec<_> = silent.incoming().collect();
        drop(held);
    });
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "unanswered_child", "--nocapture"])
        .env("BATON_TEST_CHILD", "1")
        .env("BATON_TEST_SILENT_PORT", silent_port.to_string())
        .env("BATON_TEST_CLOSED_PORT", closed_port.to_string())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "the child test did not run: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// The child half of [`unanswered_writes_are_ambiguous_and_refused_connections_are_not`]; does
/// nothing when run directly.
#[tokio::test]
async fn unanswered_child() {
    if std::env::var_os("BATON_TEST_CHILD").is_none() {
        return;
    }
    let port = |name: &str| std::env::var(name).unwrap();
    // The endpoint is read when the store is opened: one store per endpoint.
    std::env::set_var(
        "AWS_ENDPOINT_URL",
        format!("http://127.0.0.1:{}", port("BATON_TEST_CLOSED_PORT")),
    );
    let refused = DynamoStore::open("dynamodb://some-table").await.unwrap();
    let error = refused.cas("k", None, b"x", &[]).await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    baton_store::conformance::error_classified(
        &error,
        baton_store::conformance::Classified::Heals,
        "cannot reach DynamoDB",
        "a closed port",
    );
    assert!(
        error.to_string().contains("cannot reach DynamoDB"),
        "{error}"
    );

    std::env::set_var(
        "AWS_ENDPOINT_URL",
        format!("http://127.0.0.1:{}", port("BATON_TEST_SILENT_PORT")),
    );
    let silent = DynamoStore::open("dynamodb://some-table").await.unwrap();
    let started = std::time::Instant::now();
    let error = silent.cas("k", None, b"x", &[]).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(error, StoreError::Ambiguous { .. }), "{error:?}");
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    let error = silent.load("k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
}

/// A moto of this test's own that enforces IAM, with users each missing permissions: every
/// refusal is `Denied`, naming the action the call needs and the table. (moto answers a refusal
/// with an XML body the SDK cannot read; the store recognises it by its status.) The checks run
/// in a child process, since the endpoint and the keys come from the environment.
#[tokio::test]
async fn a_missing_permission_names_the_action() {
    let server = IamServer::start();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "missing_permission_child", "--nocapture"])
        .env("BATON_TEST_CHILD", "1")
        .env("BATON_TEST_IAM_USERS", &server.users)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "the child test did not run: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// The child half of [`a_missing_permission_names_the_action`]; does nothing when run directly.
#[tokio::test]
async fn missing_permission_child() {
    let Ok(users) = std::env::var("BATON_TEST_IAM_USERS") else {
        return;
    };
    // Credentials are read when a store is opened: one store per user.
    let store_of = |user: &str, table: &str| {
        let (key_id, secret) = keys_of(&users, user);
        std::env::set_var("AWS_ACCESS_KEY_ID", key_id);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", secret);
        let url = format!("dynamodb://{table}");
        async move { DynamoStore::open(&url).await.unwrap() }
    };
    let denied = |error: StoreError, action: &str, table: &str| match &error {
        StoreError::Denied {
            action: named,
            resource,
            ..
        } => {
            let arn = format!("arn:aws:dynamodb:*:*:table/{table}");
            assert_eq!((named.as_str(), resource.as_str()), (action, arn.as_str()));
            let message = error.to_string();
            assert!(message.contains("not authorized"), "{message}");
        }
        other => panic!("expected Denied({action}), got {other:?}"),
    };
    let table = "baton-denied";

    // May read and query, not write, and not prepare the table.
    let reader = store_of("reader", table).await;
    assert_eq!(reader.load("k").await.unwrap(), None);
    assert!(reader.list("").await.unwrap().is_empty());
    denied(
        reader.cas("k", None, b"x", &[]).await.unwrap_err(),
        "dynamodb:PutItem",
        table,
    );
    denied(
        reader.init().await.unwrap_err(),
        "dynamodb:DescribeTable",
        table,
    );

    // May read and write the hot item, not store history items nor query.
    let writer = store_of("writer", table).await;
    let entry = vec![b'e'; 600];
    let version = written(
        writer
            .cas("k", None, b"x", std::slice::from_ref(&entry))
            .await
            .unwrap(),
    );
    denied(
        writer
            .cas("k", Some(&version), b"y", std::slice::from_ref(&entry))
            .await
            .unwrap_err(),
        "dynamodb:BatchWriteItem",
        table,
    );
    denied(writer.list("").await.unwrap_err(), "dynamodb:Query", table);
    denied(
        writer.history("k", 0, 10).await.unwrap_err(),
        "dynamodb:Query",
        table,
    );

    // May look at tables, not create one.
    let creator = store_of("creator", "baton-new").await;
    denied(
        creator.init().await.unwrap_err(),
        "dynamodb:CreateTable",
        "baton-new",
    );
}

/// History expires by the table's TTL: `init` turns it on for baton's attribute (and finds it
/// on the second time), every history item carries its expiry (`history_max_age` after it was
/// stored), and `history_keep`, which DynamoDB cannot honour without deleting, is refused.
#[tokio::test]
async fn history_items_expire_by_the_tables_ttl_which_init_turns_on() {
    let url = format!("{}?history_max_age=2d", server_url());
    let store = DynamoStore::open(&url).await.unwrap();
    let said = store.init().await.unwrap();
    assert!(said.contains("history entries expire 2d "), "{said}");
    let again = store.init().await.unwrap();
    assert!(
        again.contains("TTL is on for attribute `x`; nothing to do"),
        "{again}"
    );
    let ttl = raw_client()
        .await
        .describe_time_to_live()
        .table_name(table_name())
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some(layout::EXPIRES));

    // Enough writes that the pending entries are moved out into items of their own.
    let key = format!("{}k", prefix("expiry"));
    let mut version = None;
    for n in 0..40u32 {
        let entry = format!("entry {n} {}", "e".repeat(300)).into_bytes();
        version = Some(written(
            store
                .cas(&key, version.as_ref(), b"doc", &[entry])
                .await
                .unwrap(),
        ));
    }
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let items = raw_client()
        .await
        .query()
        .table_name(table_name())
        .key_condition_expression("pk = :p")
        .expression_attribute_values(":p", AttributeValue::S(layout::history_partition(&key)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    assert!(items.len() >= 20, "history items stored: {}", items.len());
    for item in &items {
        let Some(AttributeValue::N(expires)) = item.get(layout::EXPIRES) else {
            panic!("a history item without its expiry: {item:?}");
        };
        let expires: u64 = expires.parse().unwrap();
        let two_days = 2 * 24 * 3600;
        assert!(
            expires + 120 >= now_s + two_days && expires <= now_s + two_days,
            "expires at {expires}, now {now_s}"
        );
    }
    assert_eq!(store.history_tail(&key, 100).await.unwrap().len(), 40);

    let refused = DynamoStore::open(&format!("{}?history_keep=5", server_url())).await;
    match refused {
        Err(StoreError::BadUrl { reason, .. }) => {
            assert!(reason.contains("history_max_age"), "{reason}")
        }
        other => panic!("expected BadUrl, got {:?}", other.map(|_| ())),
    }
}

// ----- helpers -----------------------------------------------------------------------------

fn entries(records: &[HistoryRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|record| record.bytes.clone()).collect()
}

fn seqs(records: &[HistoryRecord]) -> Vec<u64> {
    records.iter().map(|record| record.seq).collect()
}

fn table_name() -> String {
    server_url()
        .split_once("://")
        .unwrap()
        .1
        .trim_end_matches('/')
        .to_owned()
}

async fn raw_client() -> aws_sdk_dynamodb::Client {
    let mut config = baton_store::aws::sdk_config().await;
    if config.region().is_none() {
        config = config
            .into_builder()
            .region(aws_sdk_dynamodb::config::Region::from_static("us-east-1"))
            .build();
    }
    aws_sdk_dynamodb::Client::new(&config)
}

/// `key`'s hot record as stored, read with the raw SDK.
async fn raw_hot(key: &str) -> Hot {
    let item = raw_client()
        .await
        .get_item()
        .table_name(table_name())
        .set_key(Some(layout::hot_key(key)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    layout::parse_hot(&item, "test").unwrap().1
}

/// Writes history items as a writer moving them out would, with the raw SDK.
async fn store_history_by_hand(key: &str, records: &[HistoryRecord]) {
    let client = raw_client().await;
    for record in records {
        client
            .put_item()
            .table_name(table_name())
            .set_item(Some(layout::history_item(key, record, u64::MAX / 2)))
            .send()
            .await
            .unwrap();
    }
    // Sanity: the item is there, as the store would have written it.
    let got = client
        .get_item()
        .table_name(table_name())
        .key(
            layout::PK,
            AttributeValue::S(layout::history_partition(key)),
        )
        .key(
            layout::SK,
            AttributeValue::S(layout::seq_sort_key(records[0].seq)),
        )
        .send()
        .await
        .unwrap();
    assert!(got.item.is_some());
}

/// A moto_server that enforces IAM after its first requests, which create the table
/// `baton-denied` (baton's key schema) and three users (`reader`: GetItem and Query; `writer`:
/// GetItem and PutItem; `creator`: DescribeTable). Killed on drop.
struct IamServer {
    child: std::process::Child,
    endpoint: String,
    /// `user key_id secret` lines.
    users: String,
}

/// The requests that set up [`IamServer`]: one table, and per user three (user, policy, key).
const IAM_SETUP: &str = r#"
import boto3, json, sys
kw = dict(endpoint_url=sys.argv[1], region_name="us-east-1",
          aws_access_key_id="test", aws_secret_access_key="test")
boto3.client("dynamodb", **kw).create_table(
    TableName="baton-denied", BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                          {"AttributeName": "sk", "AttributeType": "S"}],
    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
               {"AttributeName": "sk", "KeyType": "RANGE"}])
iam = boto3.client("iam", **kw)
users = {"reader": ["dynamodb:GetItem", "dynamodb:Query"],
         "writer": ["dynamodb:GetItem", "dynamodb:PutItem"],
         "creator": ["dynamodb:DescribeTable"]}
for user, actions in users.items():
    iam.create_user(UserName=user)
    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
    iam.put_user_policy(UserName=user, PolicyName="baton", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    print(user, key["AccessKeyId"], key["SecretAccessKey"])
"#;

impl IamServer {
    fn start() -> IamServer {
        let venv = std::env::var("BATON_TEST_MOTO_VENV").unwrap_or_else(|_| {
            panic!(
                "BATON_TEST_MOTO_VENV is not set: run `scripts/with-servers.sh --only moto cargo \
                 test -p baton-store --test conformance_dynamodb`"
            )
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(format!("{venv}/bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // The setup's 1 + 3 × 3 requests go through unchecked; every later one is checked.
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "10")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {venv}/bin/moto_server: {error}"));
        let mut server = IamServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            users: String::new(),
        };
        // Wait by connecting only: an HTTP request would count as one of the unchecked ones.
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto_server did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let output = std::process::Command::new(format!("{venv}/bin/python"))
            .args(["-c", IAM_SETUP, &server.endpoint])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "IAM setup failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        server.users = String::from_utf8(output.stdout).unwrap();
        server
    }
}

impl Drop for IamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The access key id and secret of `user` in [`IamServer`]'s `user key_id secret` lines.
fn keys_of(users: &str, user: &str) -> (String, String) {
    users
        .lines()
        .find_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [name, key_id, secret] if name == user => {
                    Some((key_id.to_owned(), secret.to_owned()))
                }
                _ => None,
            },
        )
        .unwrap_or_else(|| panic!("no keys for {user} in {users:?}"))
}

#[test]
fn the_context_of_the_write_unit_test_is_just_under_200_bytes() {
    assert_eq!(CONTEXT_199.len(), 199);
}

/// A table that does not exist is missing however the store is opened (only `baton init`
/// creates one), and nothing creates it; refused credentials will not heal. (A closed port,
/// which may heal, is checked in [`unanswered_child`], where the endpoint can be changed.)
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{failure_classified, Classified};
    use baton_store::url::OpenMode;
    let table = format!("baton-classified-{}", std::process::id());
    for mode in [OpenMode::Create, OpenMode::Existing] {
        failure_classified(
            &format!("dynamodb://{table}"),
            mode,
            Classified::Missing,
            "baton init",
        )
        .await;
    }
    let tables = raw_client().await.list_tables().send().await.unwrap();
    assert!(
        !tables.table_names().contains(&table),
        "nothing may create {table}"
    );
}
