//! What every store's conformance file needs around the suite: the test server's URL from the
//! environment `scripts/with-servers.sh` sets, key prefixes no other run has used, URLs with
//! one more parameter, free loopback ports, the wall clock and the pushes a watch delivers.
//!
//! Each test file compiles this module on its own and uses a part of it.
#![allow(dead_code)] // each test binary uses only some of the helpers

use std::net::TcpListener;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_store::{CasOutcome, Version, Versioned, WatchHandle};

/// The URL of the test server of `store` (`POSTGRES`, `REDIS`, `ETCD`, `S3`, `DYNAMODB`), from
/// `BATON_TEST_<STORE>_URL`. Panics when it is not set, saying how to start the server: a test
/// that needs a server never silently skips.
pub fn server_url(store: &str) -> String {
    let variable = format!("BATON_TEST_{store}_URL");
    let server = match store {
        "S3" | "DYNAMODB" => "moto".to_owned(),
        other => other.to_ascii_lowercase(),
    };
    std::env::var(&variable).unwrap_or_else(|_| {
        panic!(
            "{variable} is not set: these tests need a {server} server. Run them with \
             `scripts/with-servers.sh --only {server} cargo test -p baton-store --test \
             conformance_{}` (it starts the server on loopback and exports the URL), or \
             `bash scripts/test.sh` for everything",
            store.to_ascii_lowercase()
        )
    })
}

/// A key prefix no other run has used, for the behaviour `name` of the store tagged `store`:
/// tests on a shared server keep apart by prefix.
pub fn prefix(store: &str, name: &str) -> String {
    baton_store::conformance::unique_prefix(&format!("{store}-{name}"))
}

/// `url` with one more query parameter `name=value`.
pub fn with_parameter(url: &str, parameter: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{parameter}")
}

/// Nanoseconds since the Unix epoch: a suffix for names no other run has used.
pub fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

/// This host's wall clock, ms since the Unix epoch.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A loopback port nothing listens on (free when this returns; a test binds it or uses it as a
/// closed port).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|error| panic!("no free loopback port: {error}"))
}

/// The version a CAS that must have written wrote (panics, naming what it got, when it did not).
pub fn written(outcome: CasOutcome) -> Version {
    match outcome {
        CasOutcome::Written { version } => version,
        other => panic!("expected a write, got {other:?}"),
    }
}

/// The next document `watch` delivers that `wanted` accepts, skipping others; panics after 5 s.
pub async fn until_pushed(
    watch: &mut WatchHandle,
    what: &str,
    wanted: impl Fn(&Versioned) -> bool,
) -> Versioned {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let woken = tokio::time::timeout_at(deadline, watch.changed()).await;
        let pushed = woken
            .unwrap_or_else(|_| panic!("no push of {what} within 5 s"))
            .unwrap();
        if let Some(pushed) = pushed.filter(|pushed| wanted(pushed)) {
            return pushed;
        }
    }
}
