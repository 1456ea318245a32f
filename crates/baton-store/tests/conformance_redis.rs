//! The conformance suite against the Redis store, one test per behaviour, on the server
//! `BATON_TEST_REDIS_URL` names; then what only Redis shows, some of it on servers of the test's
//! own (started from `redis-server` on a free loopback port, stopped at the end): passwords,
//! TLS, a killed subscriber, a restart, a write whose reply never comes.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_store::redis::RedisStore;
use baton_store::{conformance, CasOutcome, Store, StoreError, Version, WatchHandle};
use tempfile::TempDir;

mod common;
use common::{free_port, until_pushed, with_parameter, written};

/// The shared test server's URL (panics, saying how to start it, when it is not set).
fn server_url() -> String {
    common::server_url("REDIS")
}

fn prefix(name: &str) -> String {
    common::prefix("redis", name)
}

async fn shared_store() -> RedisStore {
    RedisStore::open(&server_url()).await.unwrap()
}

/// A store on the shared server in a namespace of its own, so that `list("")` sees only this
/// test's keys.
async fn store_in_fresh_namespace() -> (RedisStore, String) {
    let namespace = conformance::unique_prefix("ns").replace('/', ":");
    let url = format!(
        "{}/?namespace={namespace}",
        server_url().trim_end_matches('/')
    );
    (RedisStore::open(&url).await.unwrap(), url)
}

baton_store::conformance_tests!(shared_store(), prefix, keep: |keep: u64| async move {
    RedisStore::open(&with_parameter(&server_url(), &format!("history_keep={keep}")))
        .await
        .unwrap()
});

/// Racing stores that each have their own connection, as separate processes do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_connections() {
    conformance::increments_through_separate_stores(shared_store, &prefix("separate"), 50).await;
}

/// `ZRANGEBYLEX` bounds start with `[`, `(`, `-` or `+`: keys that themselves start with those
/// characters, or hold glob characters, list exactly, in a namespace where `list("")` sees only
/// them.
#[tokio::test]
async fn list_takes_range_and_glob_characters_literally() {
    let (store, _) = store_in_fresh_namespace().await;
    let keys = [
        "[a",
        "[a]",
        "(b",
        "-",
        "-c",
        "+",
        "+d",
        "*",
        "*e",
        "?",
        "?f",
        "%",
        "%_",
        "_",
        "\\",
        "^",
        "a b",
        "a'b\"c",
        "é",
        "é/生产",
        "🦀",
        "x\u{10FFFF}",
        "x\u{10FFFF}y",
        "y",
    ];
    for key in keys {
        let outcome = store.cas(key, None, key.as_bytes(), &[]).await.unwrap();
        assert!(
            matches!(outcome, CasOutcome::Written { .. }),
            "{key}: {outcome:?}"
        );
    }
    let mut sorted: Vec<String> = keys.iter().map(|key| key.to_string()).collect();
    sorted.sort();
    assert_eq!(store.list("").await.unwrap(), sorted);
    for prefix in [
        "[",
        "[a",
        "(",
        "-",
        "+",
        "*",
        "?",
        "%",
        "%_",
        "_",
        "\\",
        "a",
        "a'",
        "é",
        "🦀",
        "x\u{10FFFF}",
        "z",
    ] {
        let expected: Vec<String> = sorted
            .iter()
            .filter(|key| key.starts_with(prefix))
            .cloned()
            .collect();
        assert_eq!(
            store.list(prefix).await.unwrap(),
            expected,
            "list({prefix:?})"
        );
    }
}

/// Two namespaces, and two databases, on one server never see each other's keys.
#[tokio::test]
async fn namespaces_and_databases_are_separate() {
    let (one, one_url) = store_in_fresh_namespace().await;
    let (two, _) = store_in_fresh_namespace().await;
    one.cas("k", None, b"one", &[b"h".to_vec()]).await.unwrap();
    assert_eq!(two.load("k").await.unwrap(), None);
    assert!(two.list("").await.unwrap().is_empty());
    assert!(two.history("k", 0, 10).await.unwrap().is_empty());
    assert!(one_url.contains("namespace="), "{one_url}");
    assert!(one.describe().contains("namespace="), "{}", one.describe());

    let other_database = RedisStore::open(&one_url.replacen("/?", "/1?", 1))
        .await
        .unwrap();
    assert_eq!(other_database.load("k").await.unwrap(), None);
    assert!(other_database.list("").await.unwrap().is_empty());
    assert!(
        other_database.describe().contains("/1?"),
        "{}",
        other_database.describe()
    );
}

#[tokio::test]
async fn url_open_chooses_the_redis_store() {
    let url = server_url();
    let store = baton_store::url::open(&url).await.unwrap();
    assert_eq!(
        store.describe(),
        RedisStore::open(&url).await.unwrap().describe()
    );
    assert!(
        store.describe().starts_with("redis://127.0.0.1:"),
        "{}",
        store.describe()
    );
    let key = format!("{}k", prefix("url"));
    assert!(matches!(
        store.cas(&key, None, b"x", &[]).await.unwrap(),
        CasOutcome::Written { .. }
    ));
}

#[tokio::test]
async fn empty_document_round_trips() {
    let store = shared_store().await;
    let key = format!("{}empty", prefix("empty"));
    let CasOutcome::Written { version } = store.cas(&key, None, b"", &[]).await.unwrap() else {
        panic!("create must write");
    };
    let loaded = store.load(&key).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.bytes), (version, Vec::new()));
}

/// A CAS from one store object (another process, in real use) wakes a watcher of another: the
/// wake-up travels through the server.
#[tokio::test]
async fn a_write_through_another_connection_wakes_a_watcher() {
    let watching = shared_store().await;
    let writer = shared_store().await;
    let key = format!("{}k", prefix("cross-watch"));
    let mut handle = watching.watch(&key).await.unwrap().unwrap();
    settle(&mut handle).await;
    writer.cas(&key, None, b"1", &[]).await.unwrap();
    woken(&mut handle, "the other store's write").await;
}

/// A process is told of the writes to the keys it watches, not of every write in the
/// namespace: each key has its own channel (on the namespace's one channel, 20 idle holders
/// made every acquire + release almost three times as long). A key no longer watched is left
/// at the next `watch`.
#[tokio::test]
async fn a_process_is_told_only_of_the_keys_it_watches() {
    let watching = shared_store().await;
    let writer = shared_store().await;
    let watched = format!("{}ключ k", prefix("told-only"));
    let (other, left) = (prefix("told-only-other"), prefix("told-only-left"));
    let mut first = watching.watch(&left).await.unwrap().unwrap();
    settle(&mut first).await;
    drop(first);
    let mut handle = watching.watch(&watched).await.unwrap().unwrap();
    settle(&mut handle).await;
    let before = watching.messages_received();
    let mut versions = [None, None];
    for _ in 0..30 {
        for (key, version) in [&other, &left].into_iter().zip(&mut versions) {
            let outcome = writer.cas(key, version.as_ref(), b"x", &[]).await.unwrap();
            *version = Some(written(outcome));
        }
    }
    let version = written(writer.cas(&watched, None, b"1", &[]).await.unwrap());
    let pushed = tokio::time::timeout(Duration::from_secs(10), handle.changed())
        .await
        .expect("woken within 10 s")
        .unwrap()
        .expect("the wake-up carries the document");
    assert!(
        conformance::pushed_as_written(&pushed, &version),
        "{} for {version}",
        pushed.version
    );
    assert_eq!(pushed.bytes, b"1");
    let told = watching.messages_received() - before;
    assert_eq!(told, 1, "for 1 write to the watched key among 60 to others");
}

/// A baton that subscribed only to the namespace's channel (before wake-ups went by key) is
/// still woken by every write, told the key to read again.
#[tokio::test]
async fn a_subscriber_of_the_namespace_channel_is_told_every_key_written() {
    let store = shared_store().await;
    let key = prefix("namespace-channel");
    let client = redis::Client::open(server_url()).unwrap();
    let mut older = client.get_async_pubsub().await.unwrap();
    older.subscribe("baton:wake:0").await.unwrap();
    store.cas(&key, None, b"1", &[]).await.unwrap();
    let mut messages = older.on_message();
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(message) = next_of(&mut messages).await {
            if message.get_payload_bytes() == key.as_bytes() {
                return;
            }
        }
        panic!("the subscriber's stream ended");
    })
    .await
    .expect("the bare key arrives on the namespace's channel within 10 s");
}

/// A closed port fails the open quickly, as Unavailable, saying what to check.
#[tokio::test]
async fn an_unreachable_server_is_unavailable_quickly() {
    let port = free_port();
    let started = Instant::now();
    let error = RedisStore::open(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("refused"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
}

#[tokio::test]
async fn bad_urls_are_refused_without_showing_the_password() {
    for url in [
        "redis://:hunter2@127.0.0.1:1/not-a-number",
        "redis://:hunter2@127.0.0.1:1?db=2",
        "redis://:hunter2@127.0.0.1:1?namespace=",
    ] {
        let error = RedisStore::open(url).await.unwrap_err();
        assert!(
            matches!(error, StoreError::BadUrl { .. }),
            "{url}: {error:?}"
        );
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }
}

/// A server with a password: without it, or with a wrong one, the open fails naming
/// authentication; with it (percent-encoded in the URL) everything works, the subscriber too,
/// and `describe` never shows it.
#[tokio::test]
async fn passwords_come_from_the_url() {
    let password = "p@ss:w/rd";
    let server = PrivateServer::start(&["--requirepass", password]);
    let plain = server.url();
    let wrong = format!("redis://:wrong@127.0.0.1:{}", server.port);
    for url in [&plain, &wrong] {
        let error = RedisStore::open(url).await.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, StoreError::Unusable { .. }),
            "{url}: {error:?}"
        );
        assert!(message.contains("authentication"), "{url}: {message}");
        assert!(message.contains("redis://:PASSWORD@"), "{url}: {message}");
        assert!(!message.contains("wrong"), "{url}: {message}");
    }

    let url = format!("redis://:p%40ss%3Aw%2Frd@127.0.0.1:{}", server.port);
    let store = RedisStore::open(&url).await.unwrap();
    assert_eq!(
        store.describe(),
        format!("redis://127.0.0.1:{}", server.port)
    );
    let by_url = baton_store::url::open(&url).await.unwrap();
    assert!(!by_url.describe().contains("p%40ss") && !by_url.describe().contains("ss:w"));
    let key = "guarded";
    let mut handle = store.watch(key).await.unwrap().unwrap();
    settle(&mut handle).await;
    conformance::create_if_absent(&store, "pw/").await;
    by_url.cas(key, None, b"x", &[]).await.unwrap();
    woken(&mut handle, "a write on a server with a password").await;
}

/// `rediss://` with the server's CA trusted works; without it, the open fails on the
/// certificate.
#[tokio::test]
async fn tls_with_a_trusted_certificate_authority() {
    let certificates = tempfile::tempdir().unwrap();
    make_certificates(certificates.path());
    let file = |name: &str| certificates.path().join(name).display().to_string();
    let port = free_port();
    let server = PrivateServer::start_on(
        port,
        &[
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
        ],
    );
    let url = format!("rediss://127.0.0.1:{}", server.port);
    let ca = std::fs::read(certificates.path().join("ca.crt")).unwrap();
    let store = RedisStore::open_with_root_certificates(&url, Some(ca))
        .await
        .unwrap();
    assert_eq!(store.describe(), url);
    conformance::create_if_absent(&store, "tls/").await;
    conformance::watch_wakes(&store, "tls/").await;

    let error = RedisStore::open_with_root_certificates(&url, None)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(error.to_string().contains("certificate"), "{error}");
}

/// A subscriber connection killed by the server is replaced, every watcher is woken once (a
/// message may have been missed meanwhile), and later writes wake again.
#[tokio::test]
async fn watchers_survive_a_killed_subscriber() {
    let server = PrivateServer::start(&[]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    let mut handle = store.watch("k").await.unwrap().unwrap();
    let version = match store.cas("k", None, b"1", &[]).await.unwrap() {
        CasOutcome::Written { version } => version,
        other => panic!("{other:?}"),
    };
    woken(&mut handle, "the first write").await;
    settle(&mut handle).await;

    let killed = command(&server.url(), &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    assert_eq!(
        killed,
        redis::Value::Int(1),
        "one subscriber connection per store"
    );
    woken(&mut handle, "resubscribing after the kill").await;
    settle(&mut handle).await;
    store.cas("k", Some(&version), b"2", &[]).await.unwrap();
    woken(&mut handle, "a write after resubscribing").await;
}

/// A restarted server (with its append-only file) keeps documents and history; the store
/// reconnects by itself, and watchers are woken and keep working.
#[tokio::test]
async fn a_restarted_server_is_reconnected() {
    let mut server = PrivateServer::start(&[]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    let mut handle = store.watch("k").await.unwrap().unwrap();
    settle(&mut handle).await;
    store.cas("k", None, b"1", &[b"h1".to_vec()]).await.unwrap();
    let before = store.load("k").await.unwrap().unwrap();
    settle(&mut handle).await;

    server.restart();
    // The first operations may meet the dropped connection; within seconds they succeed.
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        match store.load("k").await {
            Ok(loaded) => break loaded,
            Err(error) if Instant::now() < deadline => {
                assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("not reconnected: {error}"),
        }
    };
    assert_eq!(after, Some(before.clone()));
    woken(&mut handle, "resubscribing after the restart").await;
    settle(&mut handle).await;
    store
        .cas("k", Some(&before.version), b"2", &[b"h2".to_vec()])
        .await
        .unwrap();
    woken(&mut handle, "a write after the restart").await;
    let seqs: Vec<u64> = store
        .history("k", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2]);
}

/// A CAS whose reply does not come in time is ambiguous — and indeed it lands later.
#[tokio::test]
async fn a_cas_without_a_reply_is_ambiguous() {
    let server = PrivateServer::start(&[]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    // Scripts count as writes: the server holds the CAS until the pause ends.
    command(&server.url(), &["CLIENT", "PAUSE", "8000", "WRITE"]).await;
    let started = Instant::now();
    let error = store.cas("k", None, b"late", &[]).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(error, StoreError::Ambiguous { .. }), "{error:?}");
    command(&server.url(), &["CLIENT", "UNPAUSE"]).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.load("k").await.unwrap() {
            Some(loaded) => {
                assert_eq!(loaded.bytes, b"late");
                break;
            }
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None => panic!("the paused CAS never landed"),
        }
    }
    // The connection is still in order afterwards.
    let current = store.load("k").await.unwrap().unwrap();
    let outcome = store
        .cas("k", Some(&current.version), b"next", &[])
        .await
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Written { .. }), "{outcome:?}");
}

/// Versions carry the server's time: after the server lost its data, a version a client still
/// holds from before cannot match a new document that happens to be the same write count.
#[tokio::test]
async fn versions_stay_distinct_after_data_loss() {
    let server = PrivateServer::start(&[]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    let CasOutcome::Written { version: old } = store.cas("k", None, b"1", &[]).await.unwrap()
    else {
        panic!("create must write");
    };
    command(&server.url(), &["FLUSHALL"]).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let CasOutcome::Written { version: new } = store.cas("k", None, b"2", &[]).await.unwrap()
    else {
        panic!("create after the loss must write");
    };
    assert_ne!(old, new);
    let outcome = store.cas("k", Some(&old), b"stale", &[]).await.unwrap();
    assert!(
        matches!(outcome, CasOutcome::Conflict { .. }),
        "{outcome:?}"
    );
    let outcome = store
        .cas("k", Some(&Version(String::new())), b"x", &[])
        .await
        .unwrap();
    assert!(
        matches!(outcome, CasOutcome::Conflict { .. }),
        "{outcome:?}"
    );
}

/// A key's history stream can outlive its document hash (the hash evicted, or deleted by hand):
/// the next write that appends continues after the stream's last entry instead of failing on an
/// entry ID that is not increasing, and writes nothing else when it cannot.
#[tokio::test]
async fn history_continues_after_the_document_alone_was_lost() {
    let (store, url) = store_in_fresh_namespace().await;
    let namespace = url.rsplit_once("namespace=").unwrap().1.to_owned();
    let key = "k";
    let first = written(
        store
            .cas(key, None, b"1", &[b"a".to_vec(), b"b".to_vec()])
            .await
            .unwrap(),
    );
    written(
        store
            .cas(key, Some(&first), b"2", &[b"c".to_vec()])
            .await
            .unwrap(),
    );
    command(&url, &["DEL", &format!("{namespace}doc:{key}")]).await;

    let again = written(store.cas(key, None, b"3", &[b"d".to_vec()]).await.unwrap());
    assert_eq!(store.load(key).await.unwrap().unwrap().bytes, b"3");
    written(
        store
            .cas(key, Some(&again), b"4", &[b"e".to_vec(), b"f".to_vec()])
            .await
            .unwrap(),
    );
    assert_eq!(
        history_of(&store, key).await,
        ["1:a", "2:b", "3:c", "4:d", "5:e", "6:f"]
    );
}

/// A document whose count of history entries lags its stream (restored by hand from an older
/// copy) appends after the stream's last entry too, and so does one whose stream was then
/// emptied by hand (which still refuses every ID up to its last).
#[tokio::test]
async fn history_continues_when_the_document_counts_fewer_entries_than_its_stream() {
    let (store, url) = store_in_fresh_namespace().await;
    let namespace = url.rsplit_once("namespace=").unwrap().1.to_owned();
    let key = "k";
    let mut version = written(
        store
            .cas(key, None, b"1", &[b"a".to_vec(), b"b".to_vec()])
            .await
            .unwrap(),
    );
    command(&url, &["HSET", &format!("{namespace}doc:{key}"), "s", "1"]).await;

    version = written(
        store
            .cas(key, Some(&version), b"2", &[b"c".to_vec(), b"d".to_vec()])
            .await
            .unwrap(),
    );
    version = written(
        store
            .cas(key, Some(&version), b"3", &[b"e".to_vec()])
            .await
            .unwrap(),
    );
    assert_eq!(
        history_of(&store, key).await,
        ["1:a", "2:b", "3:c", "4:d", "5:e"]
    );

    let stream = format!("{namespace}hist:{key}");
    command(&url, &["XTRIM", &stream, "MAXLEN", "0"]).await;
    command(&url, &["HSET", &format!("{namespace}doc:{key}"), "s", "2"]).await;
    written(
        store
            .cas(key, Some(&version), b"4", &[b"f".to_vec()])
            .await
            .unwrap(),
    );
    assert_eq!(history_of(&store, key).await, ["6:f"]);
}

// ----- helpers ------------------------------------------------------------------------------

/// A key's whole history, each entry as `seq:text`.
async fn history_of(store: &RedisStore, key: &str) -> Vec<String> {
    let records = store.history(key, 0, 100).await.unwrap();
    records
        .into_iter()
        .map(|record| format!("{}:{}", record.seq, String::from_utf8_lossy(&record.bytes)))
        .collect()
}

/// The next item of a stream (the tests have no stream combinators).
async fn next_of<S: futures_core::Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|context| std::pin::Pin::new(&mut *stream).poll_next(context)).await
}

/// Waits for a wake-up, or fails naming what should have caused it.
async fn woken(handle: &mut WatchHandle, cause: &str) {
    tokio::time::timeout(Duration::from_secs(10), handle.changed())
        .await
        .unwrap_or_else(|_| panic!("no wake-up after {cause}"))
        .unwrap();
}

/// Lets pending wake-ups (the subscriber's first subscription wakes every watcher once) pass.
async fn settle(handle: &mut WatchHandle) {
    while tokio::time::timeout(Duration::from_millis(500), handle.changed())
        .await
        .is_ok()
    {}
}

/// One command on a connection of its own.
async fn command(url: &str, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query_async(&mut connection).await.unwrap()
}

/// A redis-server of this test's own on loopback, its data in a temporary directory; killed
/// when dropped.
struct PrivateServer {
    port: u16,
    args: Vec<String>,
    dir: TempDir,
    child: Child,
}

impl PrivateServer {
    fn start(extra_args: &[&str]) -> PrivateServer {
        let port = free_port();
        let mut args = vec!["--port".to_owned(), port.to_string()];
        args.extend(extra_args.iter().map(|arg| arg.to_string()));
        Self::start_with(port, args)
    }

    /// For servers whose listening port is given in `args` (TLS).
    fn start_on(port: u16, args: &[&str]) -> PrivateServer {
        Self::start_with(port, args.iter().map(|arg| arg.to_string()).collect())
    }

    fn start_with(port: u16, args: Vec<String>) -> PrivateServer {
        let dir = tempfile::tempdir().unwrap();
        let child = spawn_redis(dir.path(), &args);
        let mut server = PrivateServer {
            port,
            args,
            dir,
            child,
        };
        server.wait_until_listening();
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGTERM: it writes its append-only file) and starts it again on the
    /// same port and directory.
    fn restart(&mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid, which we have not yet waited for.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.child.wait().unwrap();
        self.child = spawn_redis(self.dir.path(), &self.args);
        self.wait_until_listening();
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "redis-server exited ({status}):\n{}",
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_redis(dir: &Path, args: &[String]) -> Child {
    Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--dir",
        ])
        .arg(dir)
        .args(["--logfile"])
        .arg(dir.join("redis.log"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run redis-server ({error}): install it (`apt-get install redis-server`) \
                 or run `bash scripts/test.sh`, which does"
            )
        })
}

/// A throwaway CA and a server certificate for 127.0.0.1 signed by it, made with openssl.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|error| panic!("cannot run openssl ({error}): install openssl"));
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=baton test CA",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

/// Redis keeps history by count only: `history_max_age` is refused, saying so.
#[tokio::test]
async fn history_max_age_is_refused() {
    let error = RedisStore::open(&format!(
        "{}/?history_max_age=30d",
        server_url().trim_end_matches('/')
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(&error, StoreError::BadUrl { reason, .. } if reason.contains("by count only")),
        "{error:?}"
    );
}

/// A closed port may heal; a wrong password will not.
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{closed_port, failure_classified, Classified};
    use baton_store::url::OpenMode;
    let closed = format!("redis://127.0.0.1:{}", closed_port());
    failure_classified(&closed, OpenMode::Existing, Classified::Heals, "refused").await;
    let server = PrivateServer::start(&["--requirepass", "right"]);
    let wrong = format!("redis://:wrong@127.0.0.1:{}", server.port);
    for mode in [OpenMode::Create, OpenMode::Existing] {
        failure_classified(&wrong, mode, Classified::Permanent, "authentication").await;
    }
}

/// A pushed document carries the arrivals pending after its write, with a version naming them
/// as a load's does, so that a holder granted by that write takes them in with its release
/// instead of losing its CAS to them: a CAS naming a push's version takes the arrivals it
/// carried and leaves those appended after it pending, even when it carried none, where the
/// writer's own version loses to them. Appends push nothing (waiters listen by ticket).
#[tokio::test]
async fn a_push_carries_the_arrivals_pending_after_its_write() {
    let store = shared_store().await;
    let key = format!("{}k", prefix("pushed-arrivals"));
    written(store.cas(&key, None, b"d1", &[]).await.unwrap());
    let mut watch = store.watch(&key).await.unwrap().expect("Redis watches");
    store.append_arrival(&key, b"a1").await.unwrap();
    let read = store.load(&key).await.unwrap().unwrap();
    store.append_arrival(&key, b"a\n2\xff").await.unwrap();
    written(
        store
            .cas(&key, Some(&read.version), b"d2", &[])
            .await
            .unwrap(),
    );
    let two = until_pushed(&mut watch, "d2", |p| p.bytes == b"d2").await;
    assert_eq!(two.arrivals, [b"a\n2\xff"], "a2, appended after the read");

    store.append_arrival(&key, b"a3").await.unwrap();
    written(
        store
            .cas(&key, Some(&two.version), b"d3", &[])
            .await
            .unwrap(),
    );
    let three = until_pushed(&mut watch, "d3", |p| p.bytes == b"d3").await;
    assert_eq!(
        three.arrivals,
        [b"a3"],
        "a3, appended after the push, stays"
    );

    let own = written(
        store
            .cas(&key, Some(&three.version), b"d4", &[])
            .await
            .unwrap(),
    );
    let four = until_pushed(&mut watch, "d4", |p| p.bytes == b"d4").await;
    assert!(four.arrivals.is_empty(), "{:?}", four.arrivals);
    assert_ne!(four.version, own, "it names the arrivals it knew of: none");
    store.append_arrival(&key, b"a4").await.unwrap();
    let stale = store.cas(&key, Some(&own), b"lost", &[]).await.unwrap();
    assert!(
        matches!(stale, CasOutcome::Conflict { .. }),
        "the writer's own version knew of no arrival: {stale:?}"
    );
    written(
        store
            .cas(&key, Some(&four.version), b"d5", &[])
            .await
            .unwrap(),
    );
    let end = store.load(&key).await.unwrap().unwrap();
    assert_eq!(
        (end.bytes, end.arrivals),
        (b"d5".to_vec(), vec![b"a4".to_vec()]),
        "a4 stays pending for the next writer"
    );
}

/// A wake-up whose arrivals would take it past the size a push carries
/// (`redis::PUSHED_DOCUMENT_MAX`: the document, the version and each arrival in hex) goes bare,
/// for its watchers to read; up to that size it carries them. Each case: the document's size,
/// given the one arrival left pending (`None`: sized to the limit exactly), and whether the
/// push carries it.
#[tokio::test]
async fn a_push_goes_bare_where_its_arrivals_would_overfill_it() {
    let store = shared_store().await;
    let key = format!("{}k", prefix("bare-for-arrivals"));
    written(store.cas(&key, None, b"d1", &[]).await.unwrap());
    let mut watch = store.watch(&key).await.unwrap().expect("Redis watches");
    let arrival = vec![b'x'; 1_000];
    for (extra, carried) in [(0, true), (1, false)] {
        // Known to the writer: the first arrival, which its write takes; the second stays.
        store.append_arrival(&key, b"taken").await.unwrap();
        let read = store.load(&key).await.unwrap().unwrap();
        store.append_arrival(&key, &arrival).await.unwrap();
        let size = baton_store::redis::PUSHED_DOCUMENT_MAX
            - next_version_len(&read.version, 1)
            - (1 + 2 * arrival.len())
            + extra;
        let document = vec![b'd'; size];
        written(
            store
                .cas(&key, Some(&read.version), &document, &[])
                .await
                .unwrap(),
        );
        let woken = tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a wake-up within 5 s")
            .unwrap();
        let case = format!("{extra} byte over");
        assert_eq!(woken.is_some(), carried, "{case}");
        if let Some(pushed) = woken {
            assert_eq!(
                (pushed.bytes, pushed.arrivals),
                (document, vec![arrival.clone()])
            );
        }
        let settle = store.load(&key).await.unwrap().unwrap();
        assert_eq!(
            settle.arrivals.len(),
            1,
            "{case}: the write took the one it knew of"
        );
        written(
            store
                .cas(&key, Some(&settle.version), b"settled", &[])
                .await
                .unwrap(),
        );
        // The settling write's own wake-up.
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a wake-up within 5 s")
            .unwrap();
    }
}

/// The length of the version the next write after one read at `read` names, with `left`
/// arrivals pending: `N-SECONDSMICROS.LEFT`, N one more than the read's.
fn next_version_len(read: &Version, left: usize) -> usize {
    let (writes, rest) = read.0.split_once('-').expect("N-TIME");
    let time = rest.split('.').next().unwrap_or(rest);
    let next = writes.parse::<u64>().expect("a write count") + 1;
    format!("{next}-{time}.{left}").len()
}
