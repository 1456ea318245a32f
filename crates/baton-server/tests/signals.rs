//! A SIGTERM or SIGINT that arrives the moment the server says it is up stops it gracefully:
//! `serve` returns `Ok`, where a signal still at its default action would end the process.
//! A test binary of its own, because the signals are raised at the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

/// Far beyond a graceful stop with no request under way: a hang, not a slow machine.
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// Serves a fresh SQLite store and raises `signal` from inside `on_listening`, before the
/// line that says the server is up could be printed: `serve` must return `Ok`.
async fn serve_and_raise(signal: libc::c_int) {
    let dir = tempfile::tempdir().unwrap();
    let store = common::sqlite_store(&dir).await;
    let options = common::loopback_options(Duration::from_millis(100), Duration::from_secs(50));
    let state = baton_server::prepare(&options, store).unwrap();
    let mut listened = false;
    let served = baton_server::serve(&options, state, |_, _| {
        listened = true;
        // SAFETY: raise(3) only sends a signal to the calling thread.
        assert_eq!(unsafe { libc::raise(signal) }, 0, "raise({signal}) failed");
    });
    let served = tokio::time::timeout(STOP_DEADLINE, served)
        .await
        .expect("the server did not stop after the signal");
    assert!(listened, "serve returned before it listened: {served:?}");
    served.unwrap();
}

/// SIGTERM first, then SIGINT: each is the first of its kind in this process, so neither has
/// a handler that an earlier server left installed.
#[tokio::test]
async fn a_signal_as_soon_as_the_server_is_up_stops_it_gracefully() {
    serve_and_raise(libc::SIGTERM).await;
    serve_and_raise(libc::SIGINT).await;
}
