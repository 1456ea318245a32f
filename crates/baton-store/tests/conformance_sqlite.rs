//! The conformance suite against the SQLite store, one test per behaviour, and what only a file
//! shared by many processes can show: racing openers, schema versions, garbage files, reopening.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use baton_store::sqlite::SqliteStore;
use baton_store::{
    conformance, CasOutcome, Change, Replacement, Store, StoreError, Versioned, WatchHandle,
    WithDocs,
};
use baton_testkit::files::ReadOnlyFile;
use tempfile::TempDir;

mod common;
use common::wall_ms;

const PREFIX: &str = "sqlite-conformance/";

/// A store on a fresh file in a fresh directory (removed when the `TempDir` drops).
async fn fresh_store() -> (TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("baton.db"))
        .await
        .unwrap();
    (dir, store)
}

baton_store::conformance_tests!(
    fresh_store(),
    |_: &str| PREFIX.to_owned(),
    keep: |keep: u64| async move {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}?history_keep={keep}", dir.path().join("baton.db").display());
        let store = SqliteStore::open_url(&url).await.unwrap();
        (dir, store)
    },
);

/// The next wake-up of `handle`, within 2 s of `after`, with the document it carries.
async fn pushed_within_2s(handle: &mut WatchHandle, after: &str) -> Versioned {
    tokio::time::timeout(Duration::from_secs(2), handle.changed())
        .await
        .unwrap_or_else(|_| panic!("woken within 2 s of {after}"))
        .unwrap()
        .expect("the wake-up carries the document")
}

/// Racing stores that each have their own connection to one file, as separate processes do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let open = || async { SqliteStore::open(&path).await.unwrap() };
    conformance::increments_through_separate_stores(open, PREFIX, 50).await;
}

#[tokio::test]
async fn describe_names_the_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dirs/baton.db");
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
    assert!(
        path.is_file(),
        "open must create the file and its directories"
    );

    let by_url = baton_store::url::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    assert_eq!(by_url.describe(), store.describe());
    let by_url = baton_store::url::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert_eq!(by_url.describe(), store.describe());
}

#[tokio::test]
async fn empty_document_round_trips() {
    let (_dir, store) = fresh_store().await;
    let CasOutcome::Written { version } = store.cas("empty", None, b"", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let loaded = store.load("empty").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.bytes), (version, Vec::new()));
}

/// A CAS waits for another process's short write transaction instead of failing.
#[tokio::test]
async fn cas_waits_out_a_short_write_transaction() {
    let (_dir, store) = fresh_store().await;
    let other = rusqlite::Connection::open(store.path()).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    let outcome = store.cas("waited", None, b"x", &[]).await.unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
    holder.join().unwrap();
}

#[tokio::test]
async fn reopening_keeps_documents_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let (document, history) = {
        let store = SqliteStore::open(&path).await.unwrap();
        let CasOutcome::Written { version } = store
            .cas("deploy/prod", None, b"first", &[b"h1".to_vec()])
            .await
            .unwrap()
        else {
            panic!("create must write");
        };
        store
            .cas("deploy/prod", Some(&version), b"second", &[b"h2".to_vec()])
            .await
            .unwrap();
        (
            store.load("deploy/prod").await.unwrap(),
            store.history("deploy/prod", 0, 10).await.unwrap(),
        )
    };
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.load("deploy/prod").await.unwrap(), document);
    assert_eq!(
        reopened.history("deploy/prod", 0, 10).await.unwrap(),
        history
    );
    assert_eq!(history.len(), 2);
    assert_eq!(
        reopened.list("").await.unwrap(),
        vec!["deploy/prod".to_owned()]
    );
}

/// A store closed leaves its WAL for the next opener (a checkpoint at every close cost a
/// short-lived process three `fsync`s), and in a process that runs one command the WAL stays
/// short however many writes go through it: every lone opener reads all of it.
#[tokio::test]
async fn closing_leaves_a_short_wal_for_the_next_opener() {
    baton_store::sqlite::one_command_per_process();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let wal = dir.path().join("baton.db-wal");
    let mut version = None;
    {
        let store = SqliteStore::open(&path).await.unwrap();
        for n in 0..600u32 {
            let document = format!("document {n}");
            let outcome = store
                .cas(
                    "deploy/prod",
                    version.as_ref(),
                    document.as_bytes(),
                    &[b"h".to_vec()],
                )
                .await
                .unwrap();
            let CasOutcome::Written { version: written } = outcome else {
                panic!("write {n} lost its CAS alone");
            };
            version = Some(written);
        }
    }
    let wal_len = std::fs::metadata(&wal)
        .expect("the WAL outlives the store that wrote it")
        .len();
    // 600 writes of a page or more each; checkpoints at 128 pages keep the file to about that
    // many frames (4 KiB and a 24-byte header each).
    assert!(
        wal_len <= 160 * (4096 + 24),
        "the WAL grew to {wal_len} bytes"
    );
    let reopened = SqliteStore::open(&path).await.unwrap();
    let loaded = reopened.load("deploy/prod").await.unwrap().unwrap();
    assert_eq!(loaded.bytes, b"document 599");
}

/// A file at the version after this baton's (4) is refused.
#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute(
            "UPDATE baton_meta SET value = '5' WHERE name = 'schema_version'",
            [],
        )
        .unwrap();
    drop(connection);

    let error = SqliteStore::open(&path).await.unwrap_err();
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

/// The schema of version 1 (before records), exactly as baton wrote it, with one key.
const SCHEMA_V1_WITH_ONE_KEY: &str = "
    CREATE TABLE baton_meta (name TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE baton_docs (key TEXT PRIMARY KEY, version INTEGER NOT NULL, doc BLOB NOT NULL);
    CREATE TABLE baton_history (
        key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry BLOB NOT NULL,
        PRIMARY KEY (key, seq)
    );
    INSERT INTO baton_meta (name, value) VALUES ('schema_version', '1');
    INSERT INTO baton_docs (key, version, doc) VALUES ('deploy/prod', 7, X'646F63');
    INSERT INTO baton_history (key, seq, entry) VALUES ('deploy/prod', 1, X'6831');
";

/// A file written by the baton before records (schema version 1) is migrated when opened, by
/// several stores at once: its documents and history stay, records and the due index work, and
/// the file says version 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_1_file_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(SCHEMA_V1_WITH_ONE_KEY)
        .unwrap();

    let opening: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { SqliteStore::open(&path).await })
        })
        .collect();
    let mut stores = Vec::new();
    for opened in opening {
        stores.push(opened.await.unwrap().unwrap());
    }
    let store = &stores[0];
    let loaded = store.load("deploy/prod").await.unwrap().unwrap();
    assert_eq!(
        (loaded.version.0.as_str(), loaded.bytes.as_slice()),
        ("7", &b"doc"[..])
    );
    let history = store.history("deploy/prod", 0, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].bytes, b"h1");

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
    assert_eq!(
        store.list("").await.unwrap(),
        vec!["deploy/prod".to_owned()]
    );
    let version: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM baton_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, "4");
}

/// A file at this baton's schema version but without the watcher tables (an older baton of
/// the same version wrote it: the tables are outside the versioned schema) gets them when
/// opened, and a write by another connection wakes a watcher through them.
#[tokio::test]
async fn a_file_at_this_version_without_the_watcher_tables_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    drop(SqliteStore::open(&path).await.unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE baton_watchers; DROP TABLE baton_watch_tags;")
        .unwrap();

    let watching = SqliteStore::open(&path).await.unwrap();
    let tables: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'
             AND name IN ('baton_watchers', 'baton_watch_tags')",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 2, "opening the file created both watcher tables");
    let mut handle = watching.watch("k").await.unwrap().unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    writer.cas("k", None, b"1", &[]).await.unwrap();
    let pushed = pushed_within_2s(&mut handle, "the other connection's commit").await;
    assert_eq!(pushed.bytes, b"1");
}

#[tokio::test]
async fn garbage_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let garbage = b"this is not a database, it is a shopping list\n".repeat(100);
    std::fs::write(&path, &garbage).unwrap();

    let error = SqliteStore::open(&path).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Unusable { .. }),
        "expected Unusable, got {error:?}"
    );
    assert!(message.contains("not a SQLite database"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        garbage,
        "the file must be left as it was"
    );
}

#[tokio::test]
async fn a_directory_in_place_of_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Unusable { .. }),
        "expected Unusable, got {error:?}"
    );
}

/// Set in the environment of a child process: the store file the child works on.
const CHILD_DB_ENV: &str = "BATON_STORE_TEST_CHILD_DB";
/// Set in the environment of a child process: the wall-clock millisecond at which all children
/// open the store together.
const CHILD_START_AT_MS_ENV: &str = "BATON_STORE_TEST_CHILD_START_AT_MS";
const N_CHILD_PROCESSES: usize = 12;
const INCREMENTS_PER_CHILD: usize = 10;
const CHILD_COUNTER_KEY: &str = "processes/counter";

/// The runtime a child process of these tests runs its store on.
fn child_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The child of [`many_processes_open_one_fresh_file`]: opens the store and increments the
/// counter. Without the environment variable (a normal test run) it has nothing to do.
#[test]
fn child_process_increments() {
    let Some(path) = std::env::var_os(CHILD_DB_ENV) else {
        return;
    };
    let start_at_ms: u64 = std::env::var(CHILD_START_AT_MS_ENV)
        .unwrap()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(start_at_ms.saturating_sub(wall_ms())));
    child_runtime().block_on(async {
        let store = SqliteStore::open(Path::new(&path)).await.unwrap();
        conformance::increment(&store, CHILD_COUNTER_KEY, INCREMENTS_PER_CHILD).await;
    });
}

/// Many processes opening one fresh file at the same moment all succeed (WAL switch and schema
/// creation are safe under the race), and their CAS increments all count.
#[test]
fn many_processes_open_one_fresh_file() {
    let dir = tempfile::tempdir().unwrap();
    // Directories that do not exist yet: the children race to create them too.
    let path: PathBuf = dir.path().join("not/yet/there/baton.db");
    let exe = std::env::current_exe().unwrap();
    let start_at_ms = wall_ms() + 500;
    let children: Vec<_> = (0..N_CHILD_PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_increments",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB_ENV, &path)
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

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        let expected = N_CHILD_PROCESSES * INCREMENTS_PER_CHILD;
        let counter = store.load(CHILD_COUNTER_KEY).await.unwrap().unwrap();
        assert_eq!(counter.bytes, expected.to_string().into_bytes());
        let history = store
            .history(CHILD_COUNTER_KEY, 0, expected + 10)
            .await
            .unwrap();
        let seqs: Vec<u64> = history.iter().map(|record| record.seq).collect();
        assert_eq!(seqs, (1..=expected as u64).collect::<Vec<_>>());
    });
}

/// A file system without shared memory (network, 9p) cannot run WAL: SQLite then keeps the
/// rollback journal, and baton must refuse the file with a message that says what to do. The
/// `unix-dotfile` VFS has no shared memory, like such a file system.
#[tokio::test]
async fn a_file_system_where_wal_cannot_work_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let error = SqliteStore::open_with_vfs(&path, Some("unix-dotfile"))
        .await
        .expect_err("WAL cannot work without shared memory");
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(message.contains("WAL"), "{message}");
    assert!(message.contains("local disk"), "{message}");
}

/// A write by another connection to the file (another process, in real use) wakes a watcher of
/// its key with the document it wrote, and a write to another key wakes nobody: the wake-up is
/// addressed by the writer (`doorbell.rs`), not read off the file, where every waiter of every
/// key would wake and read at each commit.
#[tokio::test]
async fn a_write_wakes_the_watchers_of_its_key_only_with_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let watching = SqliteStore::open(&path).await.unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    let mut handle = watching
        .watch("k")
        .await
        .unwrap()
        .expect("the store pushes");
    writer.cas("other", None, b"o", &[]).await.unwrap();
    writer.cas("k", None, b"1", &[]).await.unwrap();
    // The first wake-up is k's.
    let pushed = pushed_within_2s(&mut handle, "the other connection's commit").await;
    assert_eq!(
        (pushed.version.0.as_str(), pushed.bytes.as_slice()),
        ("1", &b"1"[..])
    );
}

/// A write wakes the watchers of the store object that wrote it in memory, with the document
/// and the count of writes, and sends datagrams only to other sockets: on a hot key two of
/// every three wake-ups went to the writer's own socket, each a send, a receive and a copy of
/// the document through the kernel.
#[tokio::test]
async fn a_write_wakes_its_own_stores_watchers_without_a_datagram() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let within = Duration::from_secs(2);
    let mut whole = store.watch("j").await.unwrap().unwrap();
    store.cas("j", None, b"1", &[]).await.unwrap();
    let pushed = tokio::time::timeout(within, whole.changed())
        .await
        .expect("the writer's own watcher of the whole key is woken")
        .unwrap()
        .expect("with the document it wrote");
    assert_eq!(
        (pushed.version.0.as_str(), pushed.bytes.as_slice()),
        ("1", &b"1"[..])
    );
    assert_eq!(whole.told(), 1);
    // By tag: a write naming t1 wakes t1's watcher here and passes t2's by.
    let mut t1 = store.watch_tagged("k", "t1").await.unwrap().unwrap();
    let mut t2 = store.watch_tagged("k", "t2").await.unwrap().unwrap();
    store.update("k", naming(&["t1"], &[])).await.unwrap();
    let pushed = tokio::time::timeout(within, t1.changed())
        .await
        .expect("the watcher of the tag the write named is woken")
        .unwrap()
        .expect("with the document");
    assert_eq!(pushed.bytes, b"doc");
    assert!(t1.named());
    assert_eq!(store.wake_ups_sent(), 0, "nothing went through the kernel");
    // Another store object has a socket of its own, as another process has: it is sent one.
    let other = SqliteStore::open(&path).await.unwrap();
    let mut theirs = other.watch("k").await.unwrap().unwrap();
    store.update("k", naming(&["t1"], &[])).await.unwrap();
    tokio::time::timeout(within, theirs.changed())
        .await
        .expect("the other store's watcher is woken")
        .unwrap();
    assert_eq!(store.wake_ups_sent(), 1);
    tokio::time::timeout(within, t1.changed())
        .await
        .expect("and the writer's own again")
        .unwrap();
    assert_eq!(t1.told(), 2);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), t2.changed())
            .await
            .is_err(),
        "writes naming t1 pass the watcher of t2 by"
    );
}

/// Set in the environment of a child process of the doorbell tests: the store file.
const CHILD_BELL_DB_ENV: &str = "BATON_STORE_TEST_CHILD_BELL_DB";
/// Set in the environment of a child process of the doorbell tests: what it does (`write`: write
/// `bell/k` once; `watch`: watch `bell/k` and exit).
const CHILD_BELL_DO_ENV: &str = "BATON_STORE_TEST_CHILD_BELL_DO";

/// The child of the doorbell tests. Without the environment variables (a normal test run) it
/// has nothing to do.
#[test]
fn child_process_rings_or_watches() {
    let (Some(path), Ok(what)) = (
        std::env::var_os(CHILD_BELL_DB_ENV),
        std::env::var(CHILD_BELL_DO_ENV),
    ) else {
        return;
    };
    child_runtime().block_on(async {
        let store = SqliteStore::open(Path::new(&path)).await.unwrap();
        match what.as_str() {
            "write" => {
                let current = store.load("bell/k").await.unwrap().map(|v| v.version);
                let outcome = store
                    .cas("bell/k", current.as_ref(), b"from the child", &[])
                    .await
                    .unwrap();
                assert!(matches!(outcome, CasOutcome::Written { .. }));
            }
            "watch" => {
                store.watch("bell/k").await.unwrap().unwrap();
            }
            other => panic!("unknown child task {other}"),
        }
    });
}

/// Runs [`child_process_rings_or_watches`] in a process of its own, to its end.
fn run_bell_child(path: &Path, what: &str) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_rings_or_watches",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_BELL_DB_ENV, path)
        .env(CHILD_BELL_DO_ENV, what)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Another process's write reaches a watcher with its document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_another_process_wakes_a_watcher_with_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let watching = SqliteStore::open(&path).await.unwrap();
    let mut handle = watching.watch("bell/k").await.unwrap().unwrap();
    let child_path = path.clone();
    tokio::task::spawn_blocking(move || run_bell_child(&child_path, "write"))
        .await
        .unwrap();
    let pushed = pushed_within_2s(&mut handle, "the child's commit").await;
    assert_eq!(pushed.bytes, b"from the child");
}

/// A watcher whose process is gone (killed, or exited without a word) is removed by the writes
/// that follow: the first finds its name held by nobody, the next removes its entry. Nothing
/// is left to grow in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_process_is_gone_is_removed_by_the_next_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let child_path = path.clone();
    tokio::task::spawn_blocking(move || run_bell_child(&child_path, "watch"))
        .await
        .unwrap();
    assert_eq!(store.watcher_names("bell/k").await.unwrap().len(), 1);
    let version = match store.cas("bell/k", None, b"1", &[]).await.unwrap() {
        CasOutcome::Written { version } => version,
        other => panic!("create must write: {other:?}"),
    };
    store
        .cas("bell/k", Some(&version), b"2", &[])
        .await
        .unwrap();
    assert_eq!(
        store.watcher_names("bell/k").await.unwrap(),
        Vec::<String>::new()
    );
}

/// An update that writes a document and wakes only the watchers of `wake`, telling them of
/// `ended` for the last time.
fn naming(wake: &[&str], ended: &[&str]) -> baton_store::Compute {
    let owned = |tags: &[&str]| tags.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let (wake, ended_tags) = (Some(owned(wake)), owned(ended));
    Box::new(move |_| {
        Change::Write(Replacement {
            bytes: b"doc".to_vec(),
            wake,
            ended_tags,
            ..Replacement::default()
        })
    })
}

/// A watcher by tag whose process is gone is removed too: a write naming other tags only
/// passes it by, but the write that ends its ticket (its own release, while it lives) forgets
/// its tag, after which it is sent every write, and once it is gone the next writes find it so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_by_tag_is_removed_once_its_ticket_ended_and_its_process_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.cas("bell/k", None, b"1", &[]).await.unwrap();
    // Another store object: a socket of its own, as another process has.
    let waiter = SqliteStore::open(&path).await.unwrap();
    let handle = waiter.watch_tagged("bell/k", "t1").await.unwrap().unwrap();
    // Its ticket ends while it lives: told, and its tag forgotten.
    waiter
        .update("bell/k", naming(&["t1"], &["t1"]))
        .await
        .unwrap();
    drop((handle, waiter));
    // The aborted doorbell task drops its socket when the runtime next runs it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.watcher_names("bell/k").await.unwrap().len(), 1);
    for _ in 0..2 {
        store.update("bell/k", naming(&["t2"], &[])).await.unwrap();
    }
    assert!(
        store.watcher_names("bell/k").await.unwrap().is_empty(),
        "a write naming t2 found the socket gone"
    );
}

/// A watch by tag of a key the store already watches is entered by the store's next write to
/// the key, in that write's transaction, or at once by the next watch of the key: a loop of
/// waits in one process writes no transaction of its own per wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_by_tag_is_entered_with_the_next_write_or_the_next_watch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let writer = SqliteStore::open(&path).await.unwrap();
    writer.cas("bell/k", None, b"1", &[]).await.unwrap();
    let waiter = SqliteStore::open(&path).await.unwrap();
    let _first = waiter.watch_tagged("bell/k", "t1").await.unwrap().unwrap();
    let mut second = waiter.watch_tagged("bell/k", "t2").await.unwrap().unwrap();
    let within = Duration::from_millis(300);
    writer.update("bell/k", naming(&["t2"], &[])).await.unwrap();
    assert!(
        tokio::time::timeout(within, second.changed())
            .await
            .is_err(),
        "t2 is not entered before the waiter's next write"
    );
    // The waiter's own write (its enqueue) enters t2.
    waiter.update("bell/k", naming(&[], &[])).await.unwrap();
    writer.update("bell/k", naming(&["t2"], &[])).await.unwrap();
    tokio::time::timeout(within * 10, second.changed())
        .await
        .expect("entered with the waiter's write")
        .unwrap();
    assert!(second.named());
    // A third tag, entered at once by watching again (no write of the waiter's came between).
    let mut third = waiter.watch_tagged("bell/k", "t3").await.unwrap().unwrap();
    drop(waiter.watch_tagged("bell/k", "t3").await.unwrap());
    writer.update("bell/k", naming(&["t3"], &[])).await.unwrap();
    tokio::time::timeout(within * 10, third.changed())
        .await
        .expect("entered by the second watch")
        .unwrap();
    assert!(third.named());
}

/// A store that no longer watches a key removes its entry at its next watch, so a long-lived
/// process (`baton serve`) is not sent every key it ever watched.
#[tokio::test]
async fn a_key_nobody_watches_any_more_is_removed_at_the_next_watch() {
    let (_dir, store) = fresh_store().await;
    let first = store.watch("first").await.unwrap().unwrap();
    assert_eq!(store.watcher_names("first").await.unwrap().len(), 1);
    drop(first);
    let _second = store.watch("second").await.unwrap().unwrap();
    assert_eq!(
        store.watcher_names("first").await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.watcher_names("second").await.unwrap().len(), 1);
}

/// With `history_max_age`, the CAS that appends trims the entries older than the age (by the
/// wall clock they were written at), keeping their seqs for the rest.
#[tokio::test]
async fn history_older_than_the_age_is_trimmed_by_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite:{}?history_max_age=1s",
        dir.path().join("baton.db").display()
    );
    let store = SqliteStore::open_url(&url).await.unwrap();
    let old: Vec<Vec<u8>> = vec![b"old 1".to_vec(), b"old 2".to_vec()];
    let CasOutcome::Written { version } = store.cas("k", None, b"1", &old).await.unwrap() else {
        panic!("create must write");
    };
    std::thread::sleep(Duration::from_millis(1_200));
    // A write without history trims nothing: trimming rides on appends.
    let CasOutcome::Written { version } = store.cas("k", Some(&version), b"2", &[]).await.unwrap()
    else {
        panic!("must write");
    };
    assert_eq!(store.history("k", 0, 10).await.unwrap().len(), 2);
    store
        .cas("k", Some(&version), b"3", &[b"new".to_vec()])
        .await
        .unwrap();
    let kept = store.history("k", 0, 10).await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|record| (record.seq, record.bytes.clone()))
            .collect::<Vec<_>>(),
        [(3, b"new".to_vec())]
    );
}

/// Each way a SQLite store cannot be used is classified as the store sees it: no file there
/// (opened to be read) is missing and creates nothing; a file that is not a database, a
/// read-only file and a directory that cannot be made will not heal by themselves.
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{failure_classified, Classified};
    use baton_store::url::OpenMode;
    let dir = tempfile::tempdir().unwrap();
    let url = |path: &Path| format!("sqlite:{}", path.display());

    let missing = dir.path().join("typo/baton.db");
    failure_classified(
        &url(&missing),
        OpenMode::Existing,
        Classified::Missing,
        "baton init",
    )
    .await;
    assert!(
        !dir.path().join("typo").exists(),
        "reading must create nothing"
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"a shopping list\n".repeat(100)).unwrap();
    for mode in [OpenMode::Create, OpenMode::Existing] {
        failure_classified(&url(&garbage), mode, Classified::Permanent, "not a SQLite").await;
    }

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    failure_classified(
        &url(&empty),
        OpenMode::Existing,
        Classified::Missing,
        "check the path",
    )
    .await;
    assert_eq!(
        std::fs::read(&empty).unwrap(),
        b"",
        "reading must write nothing"
    );

    let read_only = dir.path().join("read-only.db");
    SqliteStore::open(&read_only).await.unwrap();
    let _read_only = ReadOnlyFile::new(&read_only);
    failure_classified(
        &url(&read_only),
        OpenMode::Create,
        Classified::Permanent,
        "read-only",
    )
    .await;

    let a_file = dir.path().join("a-file");
    std::fs::write(&a_file, b"").unwrap();
    let under_a_file = a_file.join("state/baton.db");
    failure_classified(
        &url(&under_a_file),
        OpenMode::Create,
        Classified::Permanent,
        "cannot create the directory",
    )
    .await;
}

/// The whole suite in turn on one store under one prefix: the checks compose.
#[tokio::test]
async fn run_all() {
    let store = fresh_store().await;
    conformance::run_all(conformance::Fixture::store(&store), PREFIX).await;
}
