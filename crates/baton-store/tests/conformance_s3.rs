//! The conformance suite against moto's S3, one test per behaviour, and what only S3 shows: the
//! object layout, history moved out of the hot record (and a writer that dies halfway through
//! moving it), racing conditional writes, identical documents, a missing bucket, missing
//! credentials, an unreachable or silent endpoint, a hot object that is not baton's, and the
//! clock read from the server's `Date` (shared by separate handles; refused without a `Date`).
//!
//! The server comes from `BATON_TEST_S3_URL`, with the AWS variables scripts/servers/moto.sh
//! exports (`scripts/with-servers.sh --only moto cargo test -p baton-store --test
//! conformance_s3`). Every test writes under its own `conformance::unique_prefix`, so runs never
//! collide in the shared bucket.
#![cfg(feature = "s3")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant, UNIX_EPOCH};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use baton_store::deferred::Hot;
use baton_store::s3::{S3Store, POLICY};
use baton_store::{conformance, CasOutcome, HistoryRecord, Store, StoreClock, StoreError, Version};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

mod common;
use common::{free_port, wall_ms};

/// The shared test server's URL (panics, saying how to start it, when it is not set).
fn server_url() -> String {
    common::server_url("S3")
}

fn prefix(name: &str) -> String {
    common::prefix("s3", name)
}

/// The endpoint moto.sh exported.
fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL")
        .unwrap_or_else(|_| panic!("AWS_ENDPOINT_URL is not set: {}", server_url()))
}

async fn store() -> S3Store {
    S3Store::open(&server_url()).await.unwrap()
}

baton_store::conformance_tests!(store(), prefix);

/// Racing stores with connections and caches of their own, as separate processes have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_through_separate_stores() {
    conformance::increments_through_separate_stores(store, &prefix("separate"), 25).await;
}

/// Two handles, as two processes have them (connections and clocks of their own), read the
/// server's clock from its `Date`: `clock` works as a fresh handle's very first call (it then
/// asks for the `Date` itself), they share an epoch, every reading lies between a `Date` the
/// server sent anyone just before and one just after (each widened by the second a `Date`
/// truncates), and no reading is ahead of the server (moto runs on this host, so on this host's
/// clock). The bounds are taken around each reading rather than once, so a loaded machine that
/// takes seconds between two requests cannot fail the test while the clock is right.
#[tokio::test]
async fn handles_read_the_servers_clock_from_its_date() {
    let first = store().await;
    let second = store().await;
    let capabilities = first.capabilities();
    assert!(capabilities.clock, "{capabilities:?}");
    assert_eq!(capabilities.clock_uncertain_ms, 1_000);

    let before_ms = server_date_ms();
    let (first_ms, first_epoch) = time_of(first.clock().await);
    let (second_ms, second_epoch) = time_of(second.clock().await);
    let after_ms = wall_ms();
    let after_date_ms = server_date_ms();
    assert_eq!(
        first_epoch, second_epoch,
        "every process computes the epoch alike"
    );
    assert!(!first_epoch.is_empty());
    assert_between(
        first_ms,
        before_ms,
        after_date_ms,
        "the first handle's reading",
    );
    assert_between(
        second_ms,
        before_ms,
        after_date_ms,
        "the second handle's reading",
    );
    for reading in [first_ms, second_ms] {
        assert!(
            reading <= after_ms + 100,
            "a reading ({reading}) is ahead of the server's time ({after_ms})"
        );
    }

    // Later, after more requests (whose `Date`s replace the first readings), the readings have
    // moved on with the server's time and still lie between the server's `Date`s.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let key = format!("{}k", prefix("clocks"));
    let before_ms = server_date_ms();
    assert_eq!(first.load(&key).await.unwrap(), None);
    let (later_first_ms, _) = time_of(first.clock().await);
    let (later_second_ms, later_epoch) = time_of(second.clock().await);
    let after_date_ms = server_date_ms();
    assert_eq!(later_epoch, first_epoch);
    assert!(
        later_first_ms > first_ms && later_second_ms > second_ms,
        "1.2 s later, the readings went from {first_ms} and {second_ms} to {later_first_ms} and \
         {later_second_ms}"
    );
    assert_between(later_first_ms, before_ms, after_date_ms, "a later reading");
    assert_between(
        later_second_ms,
        before_ms,
        after_date_ms,
        "the other later reading",
    );
    assert!(
        later_first_ms <= wall_ms() + 100,
        "{later_first_ms} is ahead"
    );

    // A handle opened through the URL parser, whose first call is `clock`, is on the same clock.
    let before_ms = server_date_ms();
    let opened = baton_store::url::open(&server_url()).await.unwrap();
    let (opened_ms, opened_epoch) = time_of(opened.clock().await);
    let after_date_ms = server_date_ms();
    assert_eq!(opened_epoch, first_epoch);
    assert_between(
        opened_ms,
        before_ms,
        after_date_ms,
        "a reading through the URL parser",
    );
}

/// A server that answers without a `Date` cannot judge leases: `clock` says so, naming the
/// header, instead of answering with a made-up time.
#[tokio::test]
async fn a_server_without_a_date_header_is_incompatible() {
    let endpoint = serve_without_date();
    let store = S3Store::open_with_config(&server_url(), &config_for(&endpoint)).unwrap();
    // The server answers, so reads work; only the clock is missing.
    assert_eq!(store.load("k").await.unwrap(), None);
    let error = store.clock().await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Incompatible { .. }),
        "{error:?}"
    );
    assert!(
        message.contains("`Date`") && message.contains("lease expiry"),
        "{message}"
    );
    assert!(message.contains(&endpoint), "{message}");
}

/// The URL's path is the prefix of every object: hot records under `P/hot/E(K)`, history under
/// `P/history/E(K)/SEQ`; a store with another prefix sees none of them; the store describes
/// itself by its URL and endpoint.
#[tokio::test]
async fn objects_live_under_the_url_prefix() {
    let unique = prefix("layout").trim_end_matches('/').to_owned();
    let store_a = S3Store::open(&format!("s3://baton-test/{unique}/a/"))
        .await
        .unwrap();
    let store_b = S3Store::open(&format!("s3://baton-test/{unique}/b"))
        .await
        .unwrap();
    assert_eq!(
        store_a.describe(),
        format!("s3://baton-test/{unique}/a at {}", endpoint())
    );
    written(
        store_a
            .cas("deploy/prod 1", None, b"doc", &[b"entry".to_vec()])
            .await,
    );
    assert_eq!(store_b.load("deploy/prod 1").await.unwrap(), None);
    assert!(store_b.list("").await.unwrap().is_empty());
    assert_eq!(store_a.list("").await.unwrap(), ["deploy/prod 1"]);

    let raw = raw_client();
    let names = raw_names(&raw, &format!("{unique}/a/")).await;
    assert_eq!(names, [format!("{unique}/a/hot/deploy%2Fprod%201")]);
    let hot = raw_get(&raw, &names[0]).await;
    let hot = Hot::decode(&hot, "test").unwrap();
    assert_eq!(hot.doc, b"doc");
    assert_eq!(
        seqs(&hot.pending),
        [1],
        "a new entry rides in the hot record"
    );

    // Opened through the store URL parser, the store is the same.
    let opened = baton_store::url::open(&format!("s3://baton-test/{unique}/a"))
        .await
        .unwrap();
    assert_eq!(opened.describe(), store_a.describe());
    assert_eq!(opened.list("deploy/").await.unwrap(), ["deploy/prod 1"]);
}

/// Past the policy, pending entries move out to objects of their own, so the hot record stays
/// small; every read (paged, from the middle, newest first, from a cold store) sees each entry
/// once, in order.
#[tokio::test]
async fn history_moves_out_and_reads_back_in_order() {
    let store = store().await;
    let unique = prefix("moves");
    let key = format!("{unique}k");
    let n_entries = 3 * POLICY.max_pending + 5;
    let mut version = None;
    for n in 1..=n_entries {
        let entry = format!("entry {n}").into_bytes();
        version = Some(written(
            store
                .cas(
                    &key,
                    version.as_ref(),
                    format!("doc {n}").as_bytes(),
                    &[entry],
                )
                .await,
        ));
    }
    let raw = raw_client();
    let hot = Hot::decode(&raw_get(&raw, &hot_name(&key)).await, "test").unwrap();
    assert!(
        hot.pending.len() <= POLICY.max_pending,
        "{} entries pending",
        hot.pending.len()
    );
    let stored = raw_names(&raw, &history_prefix(&key)).await;
    assert_eq!(
        stored.len() + hot.pending.len(),
        n_entries,
        "every entry is stored or pending, not both: {stored:?}"
    );

    let expected: Vec<Vec<u8>> = (1..=n_entries)
        .map(|n| format!("entry {n}").into_bytes())
        .collect();
    let cold = S3Store::open(&server_url()).await.unwrap();
    for reader in [&store, &cold] {
        check_history(reader, &key, &expected).await;
    }
}

/// A writer dies after storing the entries it moves out and before writing the hot record:
/// the entries are then both stored and pending. Readers see each once, in order; the next
/// writer (knowing nothing of it) moves them out again, writing the same bytes; nothing is
/// lost.
#[tokio::test]
async fn a_writer_that_dies_halfway_through_moving_history_loses_nothing() {
    let store = store().await;
    let unique = prefix("dies");
    let key = format!("{unique}k");
    let mut version = None;
    let mut expected = Vec::new();
    for n in 1..=POLICY.max_pending {
        let entry = format!("entry {n}").into_bytes();
        expected.push(entry.clone());
        version = Some(written(
            store.cas(&key, version.as_ref(), b"doc", &[entry]).await,
        ));
    }
    let raw = raw_client();
    let hot = Hot::decode(&raw_get(&raw, &hot_name(&key)).await, "test").unwrap();
    assert_eq!(hot.pending.len(), POLICY.max_pending);
    // The dying writer's first step, as `cas` does it: each pending entry to its own object.
    // Its second step, the hot record without them, never happens.
    for record in &hot.pending[..POLICY.max_pending / 2] {
        raw_put(&raw, &history_name(&key, record.seq), record.bytes.clone()).await;
    }
    check_history(&store, &key, &expected).await;

    // The next writer, from a cold store, moves all of them out (again) with its own entry.
    let other = S3Store::open(&server_url()).await.unwrap();
    let current = other.load(&key).await.unwrap().unwrap();
    let entry = b"after the crash".to_vec();
    expected.push(entry.clone());
    written(
        other
            .cas(&key, Some(&current.version), b"doc", &[entry])
            .await,
    );
    let hot = Hot::decode(&raw_get(&raw, &hot_name(&key)).await, "test").unwrap();
    assert_eq!(seqs(&hot.pending), [POLICY.max_pending as u64 + 1]);
    check_history(&store, &key, &expected).await;
    check_history(&other, &key, &expected).await;
}

/// Two writers with the same expected ETag, racing: exactly one wins, every time, and the
/// loser's entry is nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_with_one_etag_have_one_winner() {
    let unique = prefix("race");
    let key = format!("{unique}k");
    let stores = [store().await, store().await, store().await, store().await];
    let mut version = written(stores[0].cas(&key, None, b"0", &[]).await);
    let mut winners = Vec::new();
    for round in 0..10 {
        let mut tasks = tokio::task::JoinSet::new();
        for (writer, store) in stores.iter().enumerate() {
            let (store, key, version) = (store.clone(), key.clone(), version.clone());
            tasks.spawn(async move {
                let entry = format!("round {round} writer {writer}").into_bytes();
                let outcome = store
                    .cas(&key, Some(&version), &entry, std::slice::from_ref(&entry))
                    .await
                    .unwrap();
                (entry, outcome)
            });
        }
        let mut won = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (entry, outcome) = joined.unwrap();
            match outcome {
                CasOutcome::Written { version: new } => won.push((entry, new)),
                CasOutcome::Conflict { .. } => {}
            }
        }
        assert_eq!(won.len(), 1, "round {round}: {} writers won", won.len());
        let (entry, new) = won.remove(0);
        let current = stores[0].load(&key).await.unwrap().unwrap();
        assert_eq!((&current.version, &current.bytes), (&new, &entry));
        winners.push(entry);
        version = new;
    }
    let log = stores[1].history(&key, 0, 100).await.unwrap();
    assert_eq!(
        entries(&log),
        winners,
        "only the winners' entries, in order"
    );
}

/// The same document written twice still gets a new ETag (the generation changes the body), so
/// the first write's ETag is stale afterwards.
#[tokio::test]
async fn identical_documents_get_new_etags() {
    let store = store().await;
    let key = format!("{}k", prefix("identical"));
    let first = written(store.cas(&key, None, b"same", &[]).await);
    let second = written(store.cas(&key, Some(&first), b"same", &[]).await);
    let third = written(store.cas(&key, Some(&second), b"same", &[]).await);
    assert_ne!(first, second);
    assert_ne!(second, third);
    assert_ne!(first, third);
    for stale in [&first, &second] {
        let outcome = store.cas(&key, Some(stale), b"same", &[]).await.unwrap();
        assert!(
            matches!(outcome, CasOutcome::Conflict { .. }),
            "{stale}: {outcome:?}"
        );
    }
    // From a cold store too (which must read the record to plan).
    let cold = S3Store::open(&server_url()).await.unwrap();
    let outcome = cold.cas(&key, Some(&first), b"same", &[]).await.unwrap();
    assert_eq!(
        outcome,
        CasOutcome::Conflict {
            current: Some(baton_store::Versioned {
                version: third,
                bytes: b"same".to_vec(),
                arrivals: Vec::new(),
            })
        },
        "a cold store that read the record answers with it"
    );
}

/// Many entries in one CAS ride in the hot record, and the next CAS moves them all out.
#[tokio::test]
async fn a_large_batch_of_history_in_one_cas() {
    let store = store().await;
    let key = format!("{}batch", prefix("batch"));
    let many: Vec<Vec<u8>> = (0..150)
        .map(|i| format!("entry {i:04}").into_bytes())
        .collect();
    let version = written(store.cas(&key, None, b"1", &many).await);
    written(
        store
            .cas(&key, Some(&version), b"2", &[b"last".to_vec()])
            .await,
    );
    let mut expected = many;
    expected.push(b"last".to_vec());
    check_history(&store, &key, &expected).await;
}

/// A bucket that does not exist: an error that says to create it.
#[tokio::test]
async fn a_missing_bucket_says_to_create_it() {
    let store = S3Store::open("s3://baton-no-such-bucket/p").await.unwrap();
    for error in [
        store.load("k").await.unwrap_err(),
        store.cas("k", None, b"x", &[]).await.unwrap_err(),
        store.list("").await.unwrap_err(),
        store.init().await.unwrap_err(),
    ] {
        let message = error.to_string();
        assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
        assert!(
            message.contains("baton-no-such-bucket") && message.contains("create it"),
            "{message}"
        );
    }
}

/// No credentials anywhere: an error naming where the chain looks.
#[tokio::test]
async fn no_credentials_names_the_chain() {
    let config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint())
        .build();
    let store = S3Store::open_with_config(&server_url(), &config).unwrap();
    let error = store.load("k").await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Unusable { .. }), "{error:?}");
    assert!(
        message.contains("AWS_ACCESS_KEY_ID") && message.contains("AWS_PROFILE"),
        "{message}"
    );
}

/// A port nobody listens on: every operation fails quickly with a clear error (nothing was
/// sent, so a write is not ambiguous).
#[tokio::test]
async fn an_unreachable_endpoint_fails_quickly() {
    let port = free_port();
    let store = S3Store::open_with_config(
        &server_url(),
        &config_for(&format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let started = Instant::now();
    for error in [
        store.load("k").await.unwrap_err(),
        store.cas("k", None, b"x", &[]).await.unwrap_err(),
        store.list("").await.unwrap_err(),
    ] {
        let message = error.to_string();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
        assert!(message.contains("cannot reach S3 at"), "{message}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// A server that accepts connections and never answers: a conditional write is ambiguous (it
/// may have been applied), a read is unavailable, both within the request timeout.
#[tokio::test]
async fn a_silent_server_makes_writes_ambiguous() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut connection in listener.incoming().flatten() {
            let mut buffer = [0u8; 1024];
            let _ = connection.set_read_timeout(Some(Duration::from_millis(100)));
            let _ = connection.read(&mut buffer);
            held.push(connection);
        }
    });
    let store = S3Store::open_with_config(
        &server_url(),
        &config_for(&format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let started = Instant::now();
    let error = store.cas("k", None, b"x", &[]).await.unwrap_err();
    assert!(matches!(error, StoreError::Ambiguous { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let error = store.load("k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
}

/// A hot object that is not a baton record (written by something else): an error saying so,
/// never a panic, on every operation that reads it.
#[tokio::test]
async fn a_foreign_object_is_incompatible() {
    let unique = prefix("foreign");
    let key = format!("{unique}k");
    let raw = raw_client();
    raw_put(&raw, &hot_name(&key), b"not a baton record".to_vec()).await;
    let store = store().await;
    for error in [
        store.load(&key).await.unwrap_err(),
        store
            .cas(&key, Some(&Version("\"abc\"".to_owned())), b"x", &[])
            .await
            .unwrap_err(),
        store.history(&key, 0, 10).await.unwrap_err(),
        store.history_tail(&key, 10).await.unwrap_err(),
    ] {
        assert!(
            matches!(error, StoreError::Incompatible { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("not a baton record"), "{error}");
    }
    // Listing still works; the key is listed, since its object is there.
    assert_eq!(store.list(&unique).await.unwrap(), [key]);
}

/// A moto of this test's own that enforces IAM, with three users each missing one permission:
/// every refusal is `Denied`, naming the action the call needs and the resource to allow it on.
#[tokio::test]
async fn a_missing_permission_names_the_action() {
    let server = IamServer::start();
    let bucket = "baton-denied";
    let url = format!("s3://{bucket}/locks");
    let store_of = |user: &str| {
        let (key_id, secret) = server.keys(user);
        let config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(&server.endpoint)
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                key_id, secret, None, None, "test",
            )))
            .build();
        S3Store::open_with_config(&url, &config).unwrap()
    };
    let objects = format!("arn:aws:s3:::{bucket}/locks/*");
    let denied = |error: StoreError, action: &str, resource: &str| match &error {
        StoreError::Denied {
            action: named,
            resource: on,
            ..
        } => {
            assert_eq!((named.as_str(), on.as_str()), (action, resource), "{error}");
            let message = error.to_string();
            assert!(
                message.contains(action) && message.contains(resource),
                "{message}"
            );
        }
        other => panic!("expected Denied({action}), got {other:?}"),
    };

    // May read and list, not write. `init` checks reading and listing, then the lifecycle
    // rule that expires history, which this role may not read.
    let reader = store_of("reader");
    denied(
        reader.init().await.unwrap_err(),
        "s3:GetLifecycleConfiguration",
        &format!("arn:aws:s3:::{bucket}"),
    );
    assert_eq!(reader.load("k").await.unwrap(), None);
    assert!(reader.list("").await.unwrap().is_empty());
    denied(
        reader.cas("k", None, b"x", &[]).await.unwrap_err(),
        "s3:PutObject",
        &objects,
    );

    // May write and list, not read.
    let writer = store_of("writer");
    written(writer.cas("k", None, b"x", &[b"e".to_vec()]).await);
    assert_eq!(writer.list("").await.unwrap(), ["k"]);
    denied(
        writer.load("k").await.unwrap_err(),
        "s3:GetObject",
        &objects,
    );
    denied(writer.init().await.unwrap_err(), "s3:GetObject", &objects);
    denied(
        writer.history("k", 0, 10).await.unwrap_err(),
        "s3:GetObject",
        &objects,
    );

    // May read and write objects, not list them.
    let no_list = store_of("nolist");
    assert_eq!(no_list.load("k").await.unwrap().unwrap().bytes, b"x");
    for error in [
        no_list.list("").await.unwrap_err(),
        no_list.init().await.unwrap_err(),
    ] {
        denied(error, "s3:ListBucket", &format!("arn:aws:s3:::{bucket}"));
    }
}

// ----- helpers -----------------------------------------------------------------------------

/// The time and epoch of a clock reading that must be the server's.
fn time_of(reading: Result<StoreClock, StoreError>) -> (u64, String) {
    match reading {
        Ok(StoreClock::Time { now_ms, epoch, .. }) => (now_ms, epoch),
        other => panic!("the S3 store has the server's clock, got {other:?}"),
    }
}

/// Checks a clock reading lies between the server's `Date`s taken before and after it. A
/// reading is a `Date` plus the local time since it arrived, so it is at most a second (the
/// `Date`'s truncation) behind the server's true time, and never ahead of it; the true time at
/// the reading lies between the `Date` before and the `Date` after plus their truncation. 50 ms
/// of slack covers the two clocks' granularity.
fn assert_between(reading: u64, before_ms: u64, after_ms: u64, what: &str) {
    assert!(
        reading + 1_050 >= before_ms && reading <= after_ms + 1_050,
        "{what} ({reading}) is outside the server's Dates around it ({before_ms} .. {after_ms}): \
         {} ms before the first, {} ms after the second",
        before_ms.saturating_sub(reading),
        reading.saturating_sub(after_ms)
    );
}

/// The `Date` of a plain, unsigned HTTP request to the server (any answer carries one), in ms
/// since the Unix epoch: what any client sees, independently of the store.
fn server_date_ms() -> u64 {
    let endpoint = endpoint();
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut connection = TcpStream::connect(authority).unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(connection, "GET / HTTP/1.0\r\nHost: {authority}\r\n\r\n").unwrap();
    let mut response = Vec::new();
    connection.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response);
    let date = response
        .lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("date")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("the server sent no Date: {response}"));
    let time = httpdate::parse_http_date(&date).unwrap();
    u64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// An HTTP server on loopback that answers every request with a 404 and no `Date` (which HTTP
/// requires of a server with a clock); returns its endpoint.
fn serve_without_date() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut connection in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match connection.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = connection.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// Reads `key`'s history every way and checks it is exactly `expected`, seqs from 1.
async fn check_history(store: &S3Store, key: &str, expected: &[Vec<u8>]) {
    let n = expected.len() as u64;
    let all = store.history(key, 0, expected.len() + 10).await.unwrap();
    assert_eq!(entries(&all), expected, "history of {key}");
    assert_eq!(seqs(&all), (1..=n).collect::<Vec<u64>>());
    for (after, limit) in [(0, 1), (0, 7), (3, 5), (n / 2, 100), (n - 1, 10), (n, 10)] {
        let page = store.history(key, after, limit).await.unwrap();
        let wanted: Vec<u64> = ((after + 1)..=n).take(limit).collect();
        assert_eq!(seqs(&page), wanted, "history after {after} limit {limit}");
    }
    for limit in [1, 2, 5, 17, expected.len(), expected.len() + 5] {
        let tail = store.history_tail(key, limit).await.unwrap();
        let wanted: Vec<u64> = (1..=n).rev().take(limit).collect();
        assert_eq!(seqs(&tail), wanted, "history_tail limit {limit}");
        let wanted_entries: Vec<Vec<u8>> = expected.iter().rev().take(limit).cloned().collect();
        assert_eq!(entries(&tail), wanted_entries);
    }
}

fn written(outcome: Result<CasOutcome, StoreError>) -> Version {
    match outcome.unwrap() {
        CasOutcome::Written { version } => version,
        other => panic!("the CAS must write: {other:?}"),
    }
}

fn entries(records: &[HistoryRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|record| record.bytes.clone()).collect()
}

fn seqs(records: &[HistoryRecord]) -> Vec<u64> {
    records.iter().map(|record| record.seq).collect()
}

/// The URL's prefix: every object name starts with it.
fn url_prefix() -> String {
    let url = server_url();
    let path = url
        .trim_start_matches("s3://")
        .split_once('/')
        .map(|(_, path)| path);
    path.unwrap_or("baton").trim_matches('/').to_owned()
}

/// A key as the layout escapes it (written out again here, so that this checks the layout).
fn escaped(key: &str) -> String {
    key.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

fn hot_name(key: &str) -> String {
    format!("{}/hot/{}", url_prefix(), escaped(key))
}

fn history_prefix(key: &str) -> String {
    format!("{}/history/{}/", url_prefix(), escaped(key))
}

fn history_name(key: &str, seq: u64) -> String {
    format!("{}{seq:020}", history_prefix(key))
}

/// An object_store client on the test bucket, with moto's endpoint and credentials, for
/// looking at (and tampering with) the objects behind the store.
fn raw_client() -> AmazonS3 {
    AmazonS3Builder::new()
        .with_bucket_name("baton-test")
        .with_region("us-east-1")
        .with_endpoint(endpoint())
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap()
}

async fn raw_names(raw: &AmazonS3, prefix: &str) -> Vec<String> {
    use object_store::list::{PaginatedListOptions, PaginatedListStore};
    let page = raw
        .list_paginated(Some(prefix), PaginatedListOptions::default())
        .await
        .unwrap();
    let mut names: Vec<String> = page
        .result
        .objects
        .into_iter()
        .map(|meta| meta.location.to_string())
        .collect();
    names.sort();
    names
}

async fn raw_get(raw: &AmazonS3, name: &str) -> Vec<u8> {
    let path = Path::parse(name).unwrap();
    raw.get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

async fn raw_put(raw: &AmazonS3, name: &str, bytes: Vec<u8>) {
    let path = Path::parse(name).unwrap();
    raw.put(&path, PutPayload::from(bytes)).await.unwrap();
}

/// An AWS configuration with moto's static credentials and `endpoint`.
fn config_for(endpoint: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "test", "test", None, None, "test",
        )))
        .build()
}

/// Runs `script` with the moto venv's Python, `argv[1]` the endpoint; its stdout.
fn moto_python(script: &str, args: &[&str]) -> String {
    let venv = std::env::var("BATON_TEST_MOTO_VENV").unwrap_or_else(|_| {
        panic!("BATON_TEST_MOTO_VENV is not set: run the test through scripts/with-servers.sh")
    });
    let output = std::process::Command::new(format!("{venv}/bin/python"))
        .arg("-c")
        .arg(script)
        .arg(endpoint())
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `init` sets the lifecycle rule that expires history on a bucket that has none, finds it the
/// second time, and leaves a bucket whose rules do not cover a store's history alone, saying
/// which rule to add; `history_keep`, which S3 cannot honour without deleting, is refused.
#[tokio::test]
async fn init_sets_or_checks_the_lifecycle_rule_that_expires_history() {
    let bucket = format!("baton-lifecycle-{}", std::process::id());
    let client = "import boto3, sys\n\
        s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
        aws_access_key_id='test', aws_secret_access_key='test')\n";
    moto_python(
        &format!("{client}s3.create_bucket(Bucket=sys.argv[2])"),
        &[&bucket],
    );
    let config = config_for(&endpoint());
    let open = |path: &str| S3Store::open_with_config(&format!("s3://{bucket}/{path}"), &config);

    let first = open("locks?history_max_age=60h").unwrap();
    let said = first.init().await.unwrap();
    assert!(said.contains("set a lifecycle rule"), "{said}");
    assert!(
        said.contains("locks/history/ expires after 3 days"),
        "{said}"
    );
    let again = first.init().await.unwrap();
    assert!(
        again.contains("expires after 3 days (lifecycle rule `baton-history-expiry`)"),
        "{again}"
    );
    let rules = moto_python(
        &format!(
            "{client}c = s3.get_bucket_lifecycle_configuration(Bucket=sys.argv[2])\n\
             for r in c['Rules']: print(r['ID'], r['Filter'].get('Prefix'), r['Status'], \
             r['Expiration']['Days'])"
        ),
        &[&bucket],
    );
    assert_eq!(
        rules.trim(),
        "baton-history-expiry locks/history/ Enabled 3"
    );

    let other = open("other").unwrap();
    let said = other.init().await.unwrap();
    assert!(said.contains("history is NOT expired"), "{said}");
    assert!(said.contains("<Prefix>other/history/</Prefix>"), "{said}");
    assert!(
        said.contains("<Days>90</Days>"),
        "90 days by default: {said}"
    );

    match open("locks?history_keep=5") {
        Err(StoreError::BadUrl { reason, .. }) => {
            assert!(reason.contains("history_max_age"), "{reason}")
        }
        other => panic!("expected BadUrl, got {:?}", other.map(|_| ())),
    }
}

/// A moto_server that enforces IAM after its first requests, which create the bucket
/// `baton-denied` and three users (`reader`: GetObject and ListBucket; `writer`: PutObject and
/// ListBucket; `nolist`: GetObject and PutObject). Killed on drop.
struct IamServer {
    child: std::process::Child,
    endpoint: String,
    /// `user key_id secret` lines.
    users: String,
}

/// The requests that set up [`IamServer`]: one bucket, and per user three (user, policy, key).
const IAM_SETUP: &str = r#"
import boto3, json, sys
kw = dict(endpoint_url=sys.argv[1], region_name="us-east-1",
          aws_access_key_id="test", aws_secret_access_key="test")
boto3.client("s3", **kw).create_bucket(Bucket="baton-denied")
iam = boto3.client("iam", **kw)
users = {"reader": ["s3:GetObject", "s3:ListBucket"],
         "writer": ["s3:PutObject", "s3:ListBucket"],
         "nolist": ["s3:GetObject", "s3:PutObject"]}
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
                 test -p baton-store --test conformance_s3`"
            )
        });
        let port = free_port();
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
        let started = Instant::now();
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

    /// The access key id and secret of `user`.
    fn keys(&self, user: &str) -> (String, String) {
        self.users
            .lines()
            .find_map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    [name, key_id, secret] if name == user => {
                        Some((key_id.to_owned(), secret.to_owned()))
                    }
                    _ => None,
                },
            )
            .unwrap_or_else(|| panic!("no keys for {user} in {:?}", self.users))
    }
}

impl Drop for IamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A closed port may heal; a bucket that does not exist or no credentials will not.
#[tokio::test]
async fn failures_are_classified() {
    use baton_store::conformance::{closed_port, error_classified, failure_classified, Classified};
    use baton_store::url::OpenMode;
    for mode in [OpenMode::Create, OpenMode::Existing] {
        failure_classified(
            "s3://baton-no-such-bucket/p",
            mode,
            Classified::Permanent,
            "create it",
        )
        .await;
    }
    let closed = format!("http://127.0.0.1:{}", closed_port());
    let store = S3Store::open_with_config(&server_url(), &config_for(&closed)).unwrap();
    let error = store.load("k").await.unwrap_err();
    error_classified(
        &error,
        Classified::Heals,
        "cannot reach S3",
        "a closed port",
    );

    let config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint())
        .build();
    let store = S3Store::open_with_config(&server_url(), &config).unwrap();
    let error = store.load("k").await.unwrap_err();
    error_classified(
        &error,
        Classified::Permanent,
        "AWS_PROFILE",
        "no credentials",
    );
}
