//! The conformance suite against a real PostgreSQL server, one test per behaviour, and what only
//! a shared server shows: many processes setting up a fresh schema at once, schema versions, the
//! statements a CAS costs, the clock carried by replies, `LISTEN` across stores and across a lost
//! connection, the races a one-statement CAS must get right, and connection failures.
//!
//! The server comes from `BATON_TEST_POSTGRES_URL` (`bash scripts/test.sh` starts one; so does
//! `source scripts/servers/postgres.sh; start_postgres` after defining the helpers test.sh
//! defines). The conformance tests share the URL's own schema and keep apart by key prefix; tests
//! of setting up the tables each make a fresh schema, `baton_test_<pid>_<nanos>`, and point the
//! store at it with `options=-csearch_path=…` in the URL, so baton's tables are created there.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_store::postgres::PostgresStore;
use baton_store::{
    conformance, CasOutcome, Change, Replacement, Store, StoreClock, StoreError, Updated, Version,
    Versioned, WithDocs,
};
use sqlx::{Connection, Executor, PgConnection, Row};

mod common;
use common::{nanos, wall_ms, with_parameter, written};

/// The shared test server's URL (panics, saying how to start it, when it is not set).
fn server_url() -> String {
    common::server_url("POSTGRES")
}

fn prefix(name: &str) -> String {
    common::prefix("pg", name)
}

/// A new, empty schema, and a URL whose connections create and find baton's tables in it.
async fn fresh_schema() -> (String, String) {
    let schema = format!("baton_test_{}_{}", std::process::id(), nanos());
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .await
        .unwrap();
    let url = with_parameter(&server_url(), &format!("options=-csearch_path%3D{schema}"));
    (schema, url)
}

async fn shared_store() -> PostgresStore {
    PostgresStore::open(&server_url()).await.unwrap()
}

/// A store whose sessions show `application_name` in `pg_stat_activity`.
async fn store_named(application_name: &str) -> PostgresStore {
    let url = with_parameter(
        &server_url(),
        &format!("application_name={application_name}"),
    );
    PostgresStore::open(&url).await.unwrap()
}

baton_store::conformance_tests!(shared_store(), prefix, keep: |keep: u64| async move {
    PostgresStore::open(&with_parameter(&server_url(), &format!("history_keep={keep}")))
        .await
        .unwrap()
});

/// Racing stores that each have their own pool, as separate processes do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_pools() {
    conformance::increments_through_separate_stores(shared_store, &prefix("pools"), 50).await;
}

/// Set in the environment of a child process: the store URL the child opens.
const CHILD_URL_ENV: &str = "BATON_STORE_TEST_CHILD_POSTGRES_URL";
/// Set in the environment of a child process: the wall-clock millisecond at which all children
/// open the store together.
const CHILD_START_AT_MS_ENV: &str = "BATON_STORE_TEST_CHILD_START_AT_MS";
const N_CHILD_PROCESSES: usize = 12;
const INCREMENTS_PER_CHILD: usize = 10;
const CHILD_COUNTER_KEY: &str = "processes/counter";

/// The child of [`many_processes_set_up_one_fresh_schema_at_once`]: opens the store and
/// increments the counter. Without the environment variable (a normal test run) it has nothing
/// to do.
#[test]
fn child_process_increments() {
    let Ok(url) = std::env::var(CHILD_URL_ENV) else {
        return;
    };
    let start_at_ms: u64 = std::env::var(CHILD_START_AT_MS_ENV)
        .unwrap()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(start_at_ms.saturating_sub(wall_ms())));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = PostgresStore::open(&url).await.unwrap();
        conformance::increment(&store, CHILD_COUNTER_KEY, INCREMENTS_PER_CHILD).await;
    });
}

/// Many processes opening a fresh schema at the same moment all succeed (the advisory lock makes
/// them take turns creating the tables), and their CAS increments all count.
#[test]
fn many_processes_set_up_one_fresh_schema_at_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (schema, url) = runtime.block_on(fresh_schema());
    let exe = std::env::current_exe().unwrap();
    let start_at_ms = wall_ms() + 1000;
    let children: Vec<_> = (0..N_CHILD_PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_increments",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_URL_ENV, &url)
                .env(CHILD_START_AT_MS_ENV, start_at_ms.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "a child failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child test did not run:\n{stdout}"
        );
    }

    runtime.block_on(async {
        let store = PostgresStore::open(&url).await.unwrap();
        let expected = N_CHILD_PROCESSES * INCREMENTS_PER_CHILD;
        let counter = store.load(CHILD_COUNTER_KEY).await.unwrap().unwrap();
        assert_eq!(counter.bytes, expected.to_string().into_bytes());
        let history = store
            .history(CHILD_COUNTER_KEY, 0, expected + 10)
            .await
            .unwrap();
        let seqs: Vec<u64> = history.iter().map(|record| record.seq).collect();
        assert_eq!(seqs, (1..=expected as u64).collect::<Vec<_>>());

        // The tables are in the fresh schema, where the URL's search_path put them.
        let mut admin = PgConnection::connect(&server_url()).await.unwrap();
        let tables: Vec<String> = sqlx::query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1
             ORDER BY table_name",
        )
        .bind(&schema)
        .fetch_all(&mut admin)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
        assert_eq!(
            tables,
            ["baton_docs", "baton_history", "baton_meta", "baton_records"]
        );
    });
}

/// Many stores, each with its own pool, opening one fresh schema at once within one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_pools_set_up_one_fresh_schema_at_once() {
    let (_schema, url) = fresh_schema().await;
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let url = url.clone();
        opening.spawn(async move { PostgresStore::open(&url).await });
    }
    while let Some(opened) = opening.join_next().await {
        let store = opened.unwrap().unwrap();
        assert!(store.load("k").await.unwrap().is_none());
    }
}

/// The schema of version 1 (before records), exactly as baton created it, with one key.
const SCHEMA_V1_WITH_ONE_KEY: &str = "
    CREATE TABLE baton_meta (name text PRIMARY KEY, value text NOT NULL);
    CREATE TABLE baton_docs (
        key text COLLATE \"C\" PRIMARY KEY,
        version bigint NOT NULL,
        doc bytea NOT NULL,
        history_seq bigint NOT NULL DEFAULT 0
    ) WITH (fillfactor = 70);
    CREATE TABLE baton_history (
        key text COLLATE \"C\" NOT NULL,
        seq bigint NOT NULL,
        entry bytea NOT NULL,
        PRIMARY KEY (key, seq)
    );
    INSERT INTO baton_meta (name, value) VALUES ('schema_version', '1');
    INSERT INTO baton_docs (key, version, doc, history_seq)
        VALUES ('deploy/prod', 7, '\\x646f63', 1);
    INSERT INTO baton_history (key, seq, entry) VALUES ('deploy/prod', 1, '\\x6831');
";

/// Tables set up by the baton before records (schema version 1) are migrated when stores open
/// them, many at once: documents and history stay (a CAS goes on numbering the history), records
/// and the due index work, and the schema says version 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_1_tables_are_migrated() {
    let (_schema, url) = fresh_schema().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(SCHEMA_V1_WITH_ONE_KEY)
        .execute(&mut admin)
        .await
        .unwrap();

    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = url.clone();
        opening.spawn(async move { PostgresStore::open(&url).await });
    }
    let mut stores = Vec::new();
    while let Some(opened) = opening.join_next().await {
        stores.push(opened.unwrap().unwrap());
    }
    let store = &stores[0];
    let loaded = store.load("deploy/prod").await.unwrap().unwrap();
    assert_eq!(
        (loaded.version.0.as_str(), loaded.bytes.as_slice()),
        ("7", &b"doc"[..])
    );
    let CasOutcome::Written { .. } = store
        .cas(
            "deploy/prod",
            Some(&loaded.version),
            b"doc2",
            &[b"h2".to_vec()],
        )
        .await
        .unwrap()
    else {
        panic!("a CAS naming the migrated document's version must write");
    };
    let history: Vec<(u64, Vec<u8>)> = store
        .history("deploy/prod", 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|record| (record.seq, record.bytes))
        .collect();
    assert_eq!(history, [(1, b"h1".to_vec()), (2, b"h2".to_vec())]);

    store
        .put_record("deploy/prod", "params/j-1", b"p")
        .await
        .unwrap();
    for other in &stores {
        assert_eq!(
            other.get_record("deploy/prod", "params/j-1").await.unwrap(),
            Some(b"p".to_vec())
        );
    }
    assert_eq!(
        store.due_keys("", 10, WithDocs::NONE).await.unwrap(),
        Some(Vec::new())
    );
    let current = store.load("deploy/prod").await.unwrap().unwrap();
    store
        .cas_due("deploy/prod", Some(&current.version), b"doc", &[], Some(9))
        .await
        .unwrap();
    let with_docs = WithDocs {
        first: 1,
        due_by_ms: 9,
    };
    let due = store.due_keys("", 10, with_docs).await.unwrap().unwrap();
    assert_eq!(
        due.iter()
            .map(|d| (d.key.as_str(), d.due_ms))
            .collect::<Vec<_>>(),
        [("deploy/prod", 9)]
    );
    assert_eq!(
        due[0].doc,
        store.load("deploy/prod").await.unwrap(),
        "this store reads the documents asked for with the index"
    );
    let version: String =
        sqlx::query_scalar("SELECT value FROM baton_meta WHERE name = 'schema_version'")
            .fetch_one(&mut admin)
            .await
            .unwrap();
    assert_eq!(version, "4");
}

/// Tables at the version after this baton's (4) are refused.
#[tokio::test]
async fn newer_schema_is_refused() {
    let (_schema, url) = fresh_schema().await;
    drop(PostgresStore::open(&url).await.unwrap());
    let mut admin = PgConnection::connect(&url).await.unwrap();
    admin
        .execute("UPDATE baton_meta SET value = '5' WHERE name = 'schema_version'")
        .await
        .unwrap();

    let error = PostgresStore::open(&url).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Incompatible { .. }),
        "expected Incompatible, got {error:?}"
    );
    assert!(
        message.contains("newer") && message.contains("upgrade baton"),
        "{message}"
    );
}

#[tokio::test]
async fn a_search_path_without_an_existing_schema_is_unusable_with_a_hint() {
    let url = with_parameter(
        &server_url(),
        &format!("options=-csearch_path%3Dbaton_never_created_{}", nanos()),
    );
    let error = PostgresStore::open(&url).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(message.contains("CREATE SCHEMA"), "{message}");
}

/// A closed port on loopback: refused connections are retried until the connect timeout, then
/// reported with the cause, in well under 10 s, and without the URL's password.
#[tokio::test]
async fn an_unreachable_server_is_unavailable_within_the_connect_timeout() {
    let port = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap().port()
    };
    let url = format!("postgres://baton:hunter2@127.0.0.1:{port}/baton");
    let started = Instant::now();
    let error = PostgresStore::open(&url).await.unwrap_err();
    let elapsed = started.elapsed();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("refused"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");

    let error = baton_store::url::open(&url).await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
}

/// A server that accepts the TCP connection and then never answers: the connect timeout ends
/// the wait, never a hang.
#[tokio::test]
async fn a_server_that_never_answers_is_unavailable_after_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let error = PostgresStore::open(&format!("postgres://baton@127.0.0.1:{port}/baton"))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(10)).contains(&elapsed),
        "took {elapsed:?}"
    );
    assert!(error.to_string().contains("no answer"), "{error}");
    drop(silent);
}

/// The server closes the store's idle connections (a restart, an idle timeout, an operator):
/// the next read goes through on a new connection.
#[tokio::test]
async fn reads_survive_connections_the_server_closed() {
    let application_name = format!("baton-test-closed-{}", nanos());
    let store = store_named(&application_name).await;
    let key = format!("{}k", prefix("closed"));
    store.cas(&key, None, b"1", &[]).await.unwrap();

    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    let n_terminated: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&application_name)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(n_terminated >= 1, "the store keeps its connection");
    // The terminated backends are gone once pg_stat_activity no longer shows them.
    let started = Instant::now();
    loop {
        let n_left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(&application_name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
        if n_left == 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert_eq!(store.load(&key).await.unwrap().unwrap().bytes, b"1");
    assert_eq!(store.list(&key).await.unwrap(), vec![key.clone()]);
}

#[tokio::test]
async fn describe_never_shows_the_password() {
    // The test server trusts every connection, so any password opens it.
    let url = server_url().replacen("postgres@", "postgres:hunter2@", 1);
    assert!(url.contains("hunter2"), "the URL should have a user: {url}");
    let store = PostgresStore::open(&url).await.unwrap();
    let description = store.describe();
    assert!(
        description.starts_with("postgres://postgres@127.0.0.1:"),
        "{description}"
    );
    assert!(!description.contains("hunter2"), "{description}");

    let by_url = baton_store::url::open(&url.replacen("postgres://", "postgresql://", 1))
        .await
        .unwrap();
    assert_eq!(by_url.describe(), description);

    let error = PostgresStore::open(&with_parameter(&url, "sslmode=bogus"))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::BadUrl { .. }), "{error:?}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

/// The test server has no TLS: `sslmode=require` must fail to connect, saying so; `disable`
/// must work.
#[tokio::test]
async fn sslmode_from_the_url_is_honoured() {
    let started = Instant::now();
    let error = PostgresStore::open(&with_parameter(&server_url(), "sslmode=require"))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(
        message.contains("TLS") && message.contains("sslmode"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let store = PostgresStore::open(&with_parameter(&server_url(), "sslmode=disable"))
        .await
        .unwrap();
    conformance::create_if_absent(&store, &prefix("sslmode-disable")).await;
    assert!(
        store.describe().ends_with("sslmode=disable"),
        "{}",
        store.describe()
    );
}

/// A warm, uncontended CAS is one statement; so is a load and a CAS that loses.
#[tokio::test]
async fn each_operation_is_one_statement() {
    let store = shared_store().await;
    let key = format!("{}k", prefix("statements"));
    let count = |before: u64| store.n_statements() - before;

    let before = store.n_statements();
    assert_eq!(store.load(&key).await.unwrap(), None);
    assert_eq!(count(before), 1, "a load");

    let before = store.n_statements();
    let CasOutcome::Written { version } =
        store.cas(&key, None, b"1", &[b"h".to_vec()]).await.unwrap()
    else {
        panic!("create must write");
    };
    assert_eq!(count(before), 1, "a create");

    let before = store.n_statements();
    let outcome = store
        .cas(&key, Some(&version), b"2", &[b"h".to_vec(), b"i".to_vec()])
        .await
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
    assert_eq!(count(before), 1, "an update");

    let before = store.n_statements();
    let outcome = store.cas(&key, Some(&version), b"3", &[]).await.unwrap();
    assert!(
        matches!(&outcome, CasOutcome::Conflict { current: Some(current) } if current.bytes == b"2"),
        "{outcome:?}"
    );
    assert_eq!(count(before), 1, "a conflict, with the current document");
}

/// After a load, `clock()` is an estimate from the time the reply carried: it costs no
/// statement, advances with local time, and stays within a few ms of the server's clock.
#[tokio::test]
async fn the_clock_comes_with_the_replies() {
    let store = shared_store().await;
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    store.load(&format!("{}k", prefix("clock"))).await.unwrap();
    let n_statements = store.n_statements();

    // (reading, how far behind the server's time it may be)
    let read = |clock: StoreClock| match clock {
        StoreClock::Time {
            now_ms,
            behind_ms,
            epoch,
        } => {
            assert_eq!(epoch, "postgres-server-time");
            (now_ms, behind_ms)
        }
        StoreClock::None => panic!("the PostgreSQL store has a clock"),
    };
    let (first_ms, _) = read(store.clock().await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (before_ms, _) = read(store.clock().await.unwrap());
    let server_ms: i64 =
        sqlx::query_scalar("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            .fetch_one(&mut admin)
            .await
            .unwrap();
    let (after_ms, after_behind_ms) = read(store.clock().await.unwrap());
    assert_eq!(
        store.n_statements(),
        n_statements,
        "clock() sent a statement"
    );

    assert!(
        (100..200).contains(&(before_ms - first_ms)),
        "the estimate must advance with local time: {first_ms} then {before_ms}"
    );
    let server_ms = u64::try_from(server_ms).unwrap();
    // Never ahead of the server's time; behind it by at most the stated `behind_ms` (the reply's
    // transit, which a loaded machine stretches). 5 ms for the whole milliseconds on each side.
    assert!(
        before_ms.saturating_sub(5) <= server_ms && server_ms <= after_ms + after_behind_ms + 5,
        "the server read {server_ms} between estimates {before_ms} and {after_ms} \
         (+ {after_behind_ms} behind)"
    );
}

/// A write through another store (another pool, another listener: another process, in real
/// use) wakes a watcher.
#[tokio::test]
async fn a_write_through_another_store_wakes_a_watcher() {
    let watching = shared_store().await;
    let writer = shared_store().await;
    let key = format!("{}k", prefix("other-store"));
    let mut handle = watching.watch(&key).await.unwrap().expect("LISTEN works");
    writer.cas(&key, None, b"1", &[]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), handle.changed())
        .await
        .expect("woken within 2 s of the other store's commit")
        .unwrap();
}

/// A process is told of the writes to the keys it watches, not of every write in the database:
/// each key has its own channel (on one shared channel, 20 idle holders made every acquire +
/// release four times as long). A key no longer watched is left at the next `watch`.
#[tokio::test]
async fn a_process_is_told_only_of_the_keys_it_watches() {
    let watching = shared_store().await;
    let writer = shared_store().await;
    let watched = format!("{}ключ {}", prefix("told-only"), nanos());
    let other = format!("{}other", prefix("told-only"));
    let left = format!("{}left", prefix("told-only"));
    drop(watching.watch(&left).await.unwrap().expect("LISTEN works"));
    let mut handle = watching
        .watch(&watched)
        .await
        .unwrap()
        .expect("LISTEN works");
    let before = watching.notifications_received().await;
    let mut versions = [None, None];
    for _ in 0..30 {
        for (key, version) in [&other, &left].into_iter().zip(&mut versions) {
            let outcome = writer.cas(key, version.as_ref(), b"x", &[]).await.unwrap();
            *version = Some(written(outcome));
        }
    }
    let written = written(writer.cas(&watched, None, b"1", &[]).await.unwrap());
    assert_eq!(
        next_pushed(&mut handle, &written).await.as_deref(),
        Some(&b"1"[..]),
        "the watched key's write wakes its watcher with the document"
    );
    let told = watching.notifications_received().await - before;
    assert!(
        (1..=3).contains(&told),
        "{told} notifications for 1 write to the watched key among 60 to others"
    );
}

/// A channel whose watchers have all gone is left at its first notification, not kept until
/// the process watches something else: the server signals every backend that listens on any
/// channel at every notifying commit in the database, so a process with nothing to wait for (a
/// worker busy with its jobs) should listen on nothing.
#[tokio::test]
async fn a_channel_nobody_watches_is_left_at_its_first_notification() {
    let watching = shared_store().await;
    let writer = shared_store().await;
    let under = format!("{}{}/", prefix("left-at-first"), nanos());
    let key = format!("{under}k");
    drop(watching.watch(&key).await.unwrap().expect("LISTEN works"));
    drop(
        watching
            .watch_prefix(&under)
            .await
            .unwrap()
            .expect("LISTEN works"),
    );
    let before = watching.notifications_received().await;
    let mut version = Some(written(writer.cas(&key, None, b"x", &[]).await.unwrap()));
    // The key's channel was left at the prefix's watch; the first write's notification on the
    // shared one leaves that. The listener carries out one thing at a time, so the marker's
    // LISTEN below returns after that UNLISTEN, however slowly a loaded machine runs it.
    let waited = std::time::Instant::now();
    while watching.notifications_received().await == before {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the first write's notification never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let marker = format!("{}marker", prefix("left-at-first"));
    let mut handle = watching
        .watch(&marker)
        .await
        .unwrap()
        .expect("LISTEN works");
    for _ in 1..20 {
        let outcome = writer.cas(&key, version.as_ref(), b"x", &[]).await.unwrap();
        version = Some(written(outcome));
    }
    // Notifications come in commit order: once the marker's has come, the others have.
    let written = written(writer.cas(&marker, None, b"m", &[]).await.unwrap());
    assert!(next_pushed(&mut handle, &written).await.is_some());
    let told = watching.notifications_received().await - before;
    assert!(
        told <= 8,
        "{told} notifications for 20 writes to a key and prefix no longer watched (and 1 marker)"
    );
}

/// A baton that listened only on the shared channel (before wake-ups went by key) is still
/// woken by every write, told the key to read again.
#[tokio::test]
async fn a_listener_on_the_shared_channel_is_told_every_key_written() {
    let store = shared_store().await;
    let key = format!("{}k{}", prefix("shared-channel"), nanos());
    let mut older = sqlx::postgres::PgListener::connect(&server_url())
        .await
        .unwrap();
    older.listen("baton_changed").await.unwrap();
    store.cas(&key, None, b"1", &[]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while older.recv().await.unwrap().payload() != key {}
    })
    .await
    .expect("the bare key arrives on the shared channel within 5 s");
}

/// A wake-up carries a document of up to `PUSHED_DOCUMENT_MAX` bytes, any bytes, under the
/// longest key and beside the longest version: `NOTIFY`'s 8,000-byte limit holds (base64 and
/// its line breaks). One byte more wakes the watcher without the document. (In hex, a key
/// with 16 queued tickets would wake every waiter to read.)
#[tokio::test]
async fn a_wake_up_carries_documents_up_to_the_limit_under_the_longest_key() {
    let store = shared_store().await;
    let mut key = prefix("pushed-max");
    while key.len() < baton_store::conformance::KEY_MAX_BYTES {
        key.push('k');
    }
    let mut handle = store.watch(&key).await.unwrap().expect("LISTEN works");
    store.cas(&key, None, b"1", &[]).await.unwrap();
    // The longest version a bigint counter reaches (19 digits), set by hand.
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    sqlx::query("UPDATE baton_docs SET version = 9223372036854775000 WHERE key = $1")
        .bind(&key)
        .execute(&mut admin)
        .await
        .unwrap();
    let mut version = store.load(&key).await.unwrap().unwrap().version;
    let limit = baton_store::postgres::PUSHED_DOCUMENT_MAX;
    let largest: Vec<u8> = (0..limit).map(|i| (i * 7 % 256) as u8).collect();
    let outcome = store
        .cas(&key, Some(&version), &largest, &[])
        .await
        .unwrap();
    version = written(outcome);
    assert_eq!(version.0.len(), 19, "{version:?}");
    assert_eq!(
        next_pushed(&mut handle, &version).await.as_deref(),
        Some(&largest[..]),
        "a document of {limit} bytes rides with its wake-up"
    );
    let over: Vec<u8> = vec![b'x'; limit + 1];
    let outcome = store.cas(&key, Some(&version), &over, &[]).await.unwrap();
    version = written(outcome);
    assert_eq!(
        next_pushed(&mut handle, &version).await,
        None,
        "a larger one wakes without it"
    );
}

/// The first wake-up that is `version`'s write or carries no document (any write's, a
/// reconnection's), skipping those of earlier writes: its document, or `None`.
async fn next_pushed(handle: &mut baton_store::WatchHandle, version: &Version) -> Option<Vec<u8>> {
    loop {
        let woken = tokio::time::timeout(Duration::from_secs(5), handle.changed())
            .await
            .expect("woken within 5 s of the commit")
            .unwrap();
        match woken {
            Some(pushed) if &pushed.version == version => return Some(pushed.bytes),
            Some(_) => continue,
            None => return None,
        }
    }
}

/// The listening connection is killed: its waiters are woken (whatever happened while it was
/// down is for them to read), and it comes back and delivers later changes.
#[tokio::test]
async fn a_lost_listener_reconnects_and_wakes_its_waiters() {
    let application_name = format!("baton-test-listener-{}", nanos());
    let store = store_named(&application_name).await;
    let key = format!("{}k", prefix("lost-listener"));
    let mut handle = store.watch(&key).await.unwrap().expect("LISTEN works");

    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    let n_terminated: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(&application_name)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(n_terminated, 1, "one listening connection");
    tokio::time::timeout(Duration::from_secs(10), handle.changed())
        .await
        .expect("the waiter is woken when the listener reconnects")
        .unwrap();

    let writer = shared_store().await;
    writer.cas(&key, None, b"1", &[]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), handle.changed())
        .await
        .expect("the reconnected listener delivers later changes")
        .unwrap();
}

/// A CAS whose connection dies while the statement runs may or may not have committed:
/// Ambiguous, never a plain error. The store then goes on with other connections.
#[tokio::test]
async fn a_write_whose_connection_dies_is_ambiguous() {
    let application_name = format!("baton-test-ambiguous-{}", nanos());
    let store = store_named(&application_name).await;
    let key = format!("{}k", prefix("ambiguous"));
    let CasOutcome::Written { version } = store.cas(&key, None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };

    // Another session holds the row, so the CAS waits on the server until it is killed.
    let mut holder = hold_row(&key).await;
    let cas = tokio::spawn({
        let (store, key, version) = (store.clone(), key.clone(), version.clone());
        async move { store.cas(&key, Some(&version), b"2", &[]).await }
    });
    terminate_when_waiting_on_a_lock(&application_name).await;
    let error = cas.await.unwrap().unwrap_err();
    assert!(matches!(error, StoreError::Ambiguous { .. }), "{error:?}");
    holder.execute("ROLLBACK").await.unwrap();

    assert_eq!(store.load(&key).await.unwrap().unwrap().bytes, b"1");
    let outcome = store.cas(&key, Some(&version), b"2", &[]).await.unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
}

/// The races a one-statement CAS must get right: a competing write that commits while the CAS
/// waits for the row (or for the key's insert) beats it, and the conflict still carries the
/// winner, though the statement's snapshot predates it.
#[tokio::test]
async fn a_conflict_with_a_write_committed_meanwhile_carries_the_winner() {
    let store = shared_store().await;
    let key = format!("{}k", prefix("race"));

    // Update: the competitor has updated the row but not committed when the CAS starts.
    let CasOutcome::Written { version } = store.cas(&key, None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let mut competitor = PgConnection::connect(&server_url()).await.unwrap();
    competitor.execute("BEGIN").await.unwrap();
    sqlx::query("UPDATE baton_docs SET version = version + 1, doc = 'winner' WHERE key = $1")
        .bind(&key)
        .execute(&mut competitor)
        .await
        .unwrap();
    let n_statements = store.n_statements();
    let cas = tokio::spawn({
        let (store, key, version) = (store.clone(), key.clone(), version.clone());
        async move {
            store
                .cas(&key, Some(&version), b"loser", &[b"lost".to_vec()])
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    competitor.execute("COMMIT").await.unwrap();
    let outcome = cas.await.unwrap().unwrap();
    assert_eq!(
        store.n_statements() - n_statements,
        2,
        "the CAS, then a read for the winner its snapshot could not see"
    );
    let winner = store.load(&key).await.unwrap().unwrap();
    assert_eq!(winner.bytes, b"winner");
    assert_eq!(
        outcome,
        CasOutcome::Conflict {
            current: Some(winner)
        }
    );
    assert!(store.history(&key, 0, 10).await.unwrap().is_empty());

    // Create: the competitor has inserted the key but not committed when the CAS starts.
    let key = format!("{key}-created");
    competitor.execute("BEGIN").await.unwrap();
    sqlx::query("INSERT INTO baton_docs (key, version, doc) VALUES ($1, 7, 'winner')")
        .bind(&key)
        .execute(&mut competitor)
        .await
        .unwrap();
    let cas = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move { store.cas(&key, None, b"loser", &[b"lost".to_vec()]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    competitor.execute("COMMIT").await.unwrap();
    let outcome = cas.await.unwrap().unwrap();
    assert_eq!(
        outcome,
        CasOutcome::Conflict {
            current: Some(Versioned {
                version: Version("7".to_owned()),
                bytes: b"winner".to_vec(),
                arrivals: Vec::new(),
            })
        }
    );
    assert!(store.history(&key, 0, 10).await.unwrap().is_empty());
}

/// A worker's look at the due index goes through the partial due index, whatever the planner's
/// statistics say: never through the primary key or a scan of the table, whose cost grows with
/// every key that ever had a job (measured: 11 ms a look next to 10,000 finished keys, when
/// the statistics had been taken while most keys were due, against 0.1 ms).
#[tokio::test]
async fn the_due_index_is_read_through_its_index_however_stale_the_statistics() {
    let (schema, url) = fresh_schema().await;
    let store = PostgresStore::open(&url).await.unwrap();
    let keys: Vec<String> = (0..2_000).map(|i| format!("env/k-{i:04}")).collect();
    let mut versions = Vec::new();
    for key in &keys {
        let outcome = store.cas_due(key, None, b"doc", &[], Some(5)).await;
        match outcome.unwrap() {
            CasOutcome::Written { version } => versions.push(version),
            CasOutcome::Conflict { .. } => panic!("a fresh key conflicted"),
        }
    }
    // Statistics taken while every key was due, then every key's jobs done but two.
    let mut admin = PgConnection::connect(&url).await.unwrap();
    admin.execute("ANALYZE baton_docs").await.unwrap();
    for (key, version) in keys.iter().zip(&versions).skip(2) {
        store
            .cas_due(key, Some(version), b"doc", &[], None)
            .await
            .unwrap();
    }
    for prefix in ["", "env/"] {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN {}",
            baton_store::postgres::DUE_KEYS_PAGE
        )))
        .bind(prefix)
        .bind(256_i64)
        .bind(8_i64)
        .bind(i64::MAX)
        .bind(i64::MIN)
        .bind("")
        .fetch_all(&mut admin)
        .await
        .unwrap();
        let plan = plan.join("\n");
        assert!(
            plan.contains("baton_docs_due") && !plan.contains("Seq Scan") && !plan.contains("pkey"),
            "prefix {prefix:?}: the look must use the due index alone:\n{plan}"
        );
    }
    let due = store
        .due_keys("env/", 10, WithDocs::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        due.into_iter().map(|d| d.key).collect::<Vec<_>>(),
        keys[..2].to_vec()
    );
    admin
        .execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .await
        .unwrap();
}

/// A look's documents are those of the first keys under its prefix that are due, across pages
/// of the due index, each as a load reads it; the keys outside the prefix, past the first few,
/// or not yet due come without theirs.
#[tokio::test]
async fn a_looks_documents_are_the_first_due_under_its_prefix() {
    let (schema, url) = fresh_schema().await;
    let store = PostgresStore::open(&url).await.unwrap();
    let keys = [
        ("o/1", 1),
        ("p/a", 2),
        ("o/2", 3),
        ("p/b", 4),
        ("p/c", 5),
        ("p/d", 6),
    ];
    for (key, due_ms) in keys {
        let doc = format!("doc of {key}");
        let outcome = store.cas_due(key, None, doc.as_bytes(), &[], Some(due_ms));
        written(outcome.await.unwrap());
    }
    let with_docs = |limit: usize, first: usize, due_by_ms: u64| {
        let store = &store;
        async move {
            let docs = WithDocs { first, due_by_ms };
            let due = store.due_keys("p/", limit, docs).await.unwrap().unwrap();
            let mut seen = Vec::new();
            for key in due {
                if let Some(doc) = &key.doc {
                    assert_eq!(Some(doc), store.load(&key.key).await.unwrap().as_ref());
                }
                seen.push((key.key, key.doc.is_some()));
            }
            seen
        }
    };
    let seen = |list: &[(&str, bool)]| -> Vec<(String, bool)> {
        list.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect()
    };
    assert_eq!(
        with_docs(10, 2, 100).await,
        seen(&[("p/a", true), ("p/b", true), ("p/c", false), ("p/d", false)]),
        "the first two under the prefix, not counting the keys outside it"
    );
    assert_eq!(
        with_docs(10, 3, 4).await,
        seen(&[("p/a", true), ("p/b", true), ("p/c", false), ("p/d", false)]),
        "none that is not due yet"
    );
    // A limit of 2 reads pages of 1, 2 and 4 keys: the first holds no key under the prefix.
    assert_eq!(
        with_docs(2, 2, 100).await,
        seen(&[("p/a", true), ("p/b", true)]),
        "across pages"
    );
    assert_eq!(
        with_docs(10, 0, 100).await,
        seen(&[
            ("p/a", false),
            ("p/b", false),
            ("p/c", false),
            ("p/d", false)
        ]),
        "none asked for"
    );
    let mut admin = PgConnection::connect(&url).await.unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .await
        .unwrap();
}

/// Every CAS statement is planned once per connection, and the plan reused, however the tables'
/// statistics stand: the server weighs a generic plan against plans made for each call's
/// parameters, and one statement whose parts a parameter switched off (no entries, no age)
/// lost that weighing once the tables had statistics, and was planned again on every call,
/// which took longer than running it.
#[tokio::test]
async fn cas_statements_are_planned_once_however_the_statistics_stand() {
    let (schema, url) = fresh_schema().await;
    // Statistics of a long history, most of it one key's (as a busy lock's would be).
    let writer = PostgresStore::open(&url).await.unwrap();
    let entries: Vec<Vec<u8>> = (0..2_000)
        .map(|i| format!("entry {i}").into_bytes())
        .collect();
    writer.cas("busy", None, b"doc", &entries).await.unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    admin.execute("ANALYZE").await.unwrap();
    for retention in ["history_keep=10000", "history_max_age=1h"] {
        let store = PostgresStore::open(&with_parameter(&url, retention))
            .await
            .unwrap();
        // A key written as a lock is: writes without entries, and with.
        let key = format!("hot/{retention}");
        let mut version = None;
        for i in 0..30_usize {
            let entries = if i % 2 == 0 {
                vec![]
            } else {
                vec![b"ended".to_vec()]
            };
            let outcome = store.cas(&key, version.as_ref(), b"doc", &entries).await;
            let CasOutcome::Written { version: written } = outcome.unwrap() else {
                panic!("a write of a key nobody else writes conflicted");
            };
            version = Some(written);
        }
        let plans = store.prepared_plans().await.unwrap();
        let cas: Vec<_> = plans
            .iter()
            .filter(|(statement, ..)| statement.starts_with("WITH written AS"))
            .filter(|(_, generic, custom)| generic + custom >= 15)
            .collect();
        assert!(
            !cas.is_empty(),
            "{retention}: no CAS statement ran 15 times:\n{plans:#?}"
        );
        for (statement, generic, custom) in cas {
            assert!(
                *custom <= 5,
                "{retention}: planned for {custom} calls and generic for {generic}:\n{statement}"
            );
        }
    }
    admin
        .execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .await
        .unwrap();
}

/// A write trims the entries it pushed out of its `history_keep`, and every 64 seqs all older
/// ones: what a writer with a larger `history_keep` left is gone within 64 entries of one with
/// a smaller.
#[tokio::test]
async fn a_smaller_history_keep_trims_what_a_larger_left_within_64_entries() {
    let key = format!("{}keep", prefix("sweep"));
    let larger = PostgresStore::open(&with_parameter(&server_url(), "history_keep=100"))
        .await
        .unwrap();
    let smaller = PostgresStore::open(&with_parameter(&server_url(), "history_keep=5"))
        .await
        .unwrap();
    let entries: Vec<Vec<u8>> = (1..=100).map(|i| format!("{i}").into_bytes()).collect();
    let CasOutcome::Written { mut version } =
        larger.cas(&key, None, b"doc", &entries).await.unwrap()
    else {
        panic!("a create of a fresh key conflicted");
    };
    let mut lengths = Vec::new();
    for i in 101..=164 {
        let entry = vec![format!("{i}").into_bytes()];
        version = written(
            smaller
                .cas(&key, Some(&version), b"doc", &entry)
                .await
                .unwrap(),
        );
        lengths.push(smaller.history(&key, 0, 1_000).await.unwrap().len());
    }
    // Each write takes one out (the 100 stay 100) until seq 128 sweeps down to 5.
    assert_eq!(lengths[..27], [100; 27], "before the sweep");
    assert_eq!(lengths[27..], [5; 37], "from the sweep at seq 128 on");
    let kept = smaller.history_tail(&key, 10).await.unwrap();
    let seqs: Vec<u64> = kept.iter().map(|record| record.seq).collect();
    assert_eq!(seqs, [164, 163, 162, 161, 160]);
}

/// With `history_max_age`, the CAS that appends trims the entries older than the age (by the
/// server's clock when they were written), keeping their seqs for the rest.
#[tokio::test]
async fn history_older_than_the_age_is_trimmed_by_the_next_append() {
    let store = PostgresStore::open(&with_parameter(&server_url(), "history_max_age=1s"))
        .await
        .unwrap();
    let key = format!("{}aged", prefix("aged"));
    let old: Vec<Vec<u8>> = vec![b"old 1".to_vec(), b"old 2".to_vec()];
    let CasOutcome::Written { version } = store.cas(&key, None, b"1", &old).await.unwrap() else {
        panic!("create must write");
    };
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    store
        .cas(&key, Some(&version), b"2", &[b"new".to_vec()])
        .await
        .unwrap();
    let kept = store.history(&key, 0, 10).await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|record| (record.seq, record.bytes.clone()))
            .collect::<Vec<_>>(),
        [(3, b"new".to_vec())]
    );
}

/// Retention parameters are baton's: sqlx never sees them, and a bad one says what is expected.
#[tokio::test]
async fn retention_parameters_are_checked_and_hidden_from_sqlx() {
    let error = PostgresStore::open(&with_parameter(&server_url(), "history_keep=none"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, StoreError::BadUrl { reason, .. } if reason.contains("history_keep")),
        "{error:?}"
    );
}

/// Each way a PostgreSQL store cannot be used is classified as the store sees it: a closed port
/// may heal; a role or a database that does not exist, or a search_path without a schema, will
/// not; a schema without baton's tables, opened to be read, is missing, and stays without them.
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{closed_port, failure_classified, Classified};
    use baton_store::url::OpenMode;
    let closed = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
    failure_classified(&closed, OpenMode::Create, Classified::Heals, "refused").await;

    let server = server_url();
    let (_, host_and_path) = server.split_once('@').unwrap();
    let no_role = format!("postgres://baton_no_such_role_{}@{host_and_path}", nanos());
    failure_classified(
        &no_role,
        OpenMode::Create,
        Classified::Permanent,
        "check the user",
    )
    .await;
    let (host, _) = host_and_path.split_once('/').unwrap();
    let no_database = format!("postgres://postgres@{host}/baton_no_such_db_{}", nanos());
    failure_classified(
        &no_database,
        OpenMode::Create,
        Classified::Permanent,
        "does not exist",
    )
    .await;
    let no_schema = with_parameter(
        &server,
        &format!("options=-csearch_path%3Dbaton_never_created_{}", nanos()),
    );
    failure_classified(
        &no_schema,
        OpenMode::Create,
        Classified::Permanent,
        "CREATE SCHEMA",
    )
    .await;

    let (schema, empty) = fresh_schema().await;
    failure_classified(
        &empty,
        OpenMode::Existing,
        Classified::Missing,
        "baton init",
    )
    .await;
    let mut admin = PgConnection::connect(&server).await.unwrap();
    let n_tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(&schema)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(n_tables, 0, "reading must create no table in {schema}");
    // Once created (by a writer, or `baton init`), the same URL opens for reading.
    PostgresStore::open(&empty).await.unwrap();
    baton_store::url::open_in(&empty, OpenMode::Existing)
        .await
        .unwrap();
}

/// A locked update costs four statements (`BEGIN`, the locking read, the CAS, `COMMIT`), and
/// for a key without a row, three, running nothing: there is nothing to lock.
#[tokio::test]
async fn an_update_is_four_statements_and_runs_only_for_a_key_with_a_row() {
    let store = shared_store().await;
    let key = format!("{}k", prefix("update-statements"));
    let write = |bytes: &'static [u8]| -> baton_store::Compute {
        Box::new(move |_: Option<&Versioned>| {
            Change::Write(Replacement {
                bytes: bytes.to_vec(),
                ..Replacement::default()
            })
        })
    };

    let before = store.n_statements();
    assert_eq!(store.update(&key, write(b"never")).await.unwrap(), None);
    assert_eq!(
        store.n_statements() - before,
        3,
        "an update of a key without a row"
    );
    assert_eq!(store.load(&key).await.unwrap(), None, "it wrote nothing");

    let CasOutcome::Written { .. } = store.cas(&key, None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let before = store.n_statements();
    let updated = store.update(&key, write(b"2")).await.unwrap();
    assert!(
        matches!(updated, Some(Updated::Written { .. })),
        "{updated:?}"
    );
    assert_eq!(
        store.n_statements() - before,
        4,
        "an update of a key with a row"
    );
    assert_eq!(store.load(&key).await.unwrap().unwrap().bytes, b"2");
}

/// An update waiting for a row another session holds, whose connection dies there, had not
/// sent its `COMMIT`: it is `Unavailable` (nothing written), not `Ambiguous`, and its
/// computation never ran.
#[tokio::test]
async fn an_update_cut_off_before_its_commit_wrote_nothing() {
    let application_name = format!("baton-test-update-cut-{}", nanos());
    let store = store_named(&application_name).await;
    let key = format!("{}k", prefix("update-cut"));
    let CasOutcome::Written { .. } = store.cas(&key, None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let mut holder = hold_row(&key).await;
    let ran = Arc::new(AtomicBool::new(false));
    let update = tokio::spawn({
        let (store, key, ran) = (store.clone(), key.clone(), ran.clone());
        async move {
            let compute = Box::new(move |_: Option<&Versioned>| {
                ran.store(true, Ordering::SeqCst);
                Change::Write(Replacement {
                    bytes: b"2".to_vec(),
                    ..Replacement::default()
                })
            });
            store.update(&key, compute).await
        }
    });
    terminate_when_waiting_on_a_lock(&application_name).await;
    let error = update.await.unwrap().unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(!ran.load(Ordering::SeqCst), "the computation never ran");
    holder.execute("ROLLBACK").await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().unwrap().bytes, b"1");
}

/// A session of its own that holds `key`'s row locked until it rolls back.
async fn hold_row(key: &str) -> PgConnection {
    let mut holder = PgConnection::connect(&server_url()).await.unwrap();
    holder.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM baton_docs WHERE key = $1 FOR UPDATE")
        .bind(key)
        .execute(&mut holder)
        .await
        .unwrap();
    holder
}

/// Ends the one session of `application_name` that waits for a lock, once it does.
async fn terminate_when_waiting_on_a_lock(application_name: &str) {
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    let started = Instant::now();
    loop {
        let n_terminated: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(application_name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
        if n_terminated == 1 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the statement never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client stopped inside its update's transaction (here its computation blocks its thread,
/// which runs a runtime of its own, as a stopped process would) holds the key's row only until
/// the server ends the idle session: another store's CAS on the key then writes, long before the
/// stopped client goes on, and the stopped update answers that nothing was written.
#[tokio::test]
async fn a_client_stopped_inside_an_update_frees_the_row() {
    let stall = Duration::from_millis(baton_store::postgres::IDLE_IN_TRANSACTION_MS)
        + Duration::from_secs(4);
    let other = shared_store().await;
    let key = format!("{}k", prefix("update-stalled"));
    let CasOutcome::Written { version } = other.cas(&key, None, b"1", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let (in_compute, computing) = std::sync::mpsc::channel();
    let stalled_done = Arc::new(AtomicBool::new(false));
    let stopped = std::thread::spawn({
        let (key, stalled_done) = (key.clone(), stalled_done.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let store = shared_store().await;
                let compute = Box::new(move |_: Option<&Versioned>| {
                    in_compute.send(()).unwrap();
                    std::thread::sleep(stall);
                    stalled_done.store(true, Ordering::SeqCst);
                    Change::Write(Replacement {
                        bytes: b"stalled".to_vec(),
                        ..Replacement::default()
                    })
                });
                store.update(&key, compute).await
            })
        }
    });
    tokio::task::spawn_blocking(move || computing.recv().unwrap())
        .await
        .unwrap();
    let outcome = other
        .cas(&key, Some(&version), b"other", &[])
        .await
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
    assert!(
        !stalled_done.load(Ordering::SeqCst),
        "the CAS waited for the stopped client to go on"
    );
    let updated = tokio::task::spawn_blocking(move || stopped.join().unwrap())
        .await
        .unwrap();
    let error = updated.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert_eq!(other.load(&key).await.unwrap().unwrap().bytes, b"other");
}
