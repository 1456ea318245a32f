//! Wake-ups for the Redis store: one pub/sub subscriber per store.
//!
//! Every CAS publishes the key it wrote, with the new version and document, on the namespace's
//! channel. One background task per store holds a subscriber connection to that channel and
//! hands each message's document to the watchers of the key it names; every
//! [`crate::WatchHandle`] of a key follows that key's channel.
//!
//! Pub/sub delivers at most once: a message published while the subscriber is disconnected is
//! gone. So the task, each time its subscription is (re)confirmed, bumps *every* counter once:
//! a waiter then re-reads its key, and a change made while nobody listened is not missed (only
//! a spurious wake-up is paid). A connection that goes silent is checked with a PING, so a
//! half-open TCP connection is noticed too. Waiters also poll, so a subscriber that cannot
//! connect only makes them slower.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use ::redis::aio::{PubSub, PubSubStream};
use ::redis::{Client, Msg, Value};
use futures_core::Stream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::wakes::WakeRouter;
use crate::{Version, Versioned, Wake};

/// After this long without a message, the subscriber PINGs to learn whether it is still
/// connected.
const PING_AFTER_SILENCE: Duration = Duration::from_secs(15);

/// The first wait before reconnecting; it doubles up to [`RECONNECT_DELAY_MAX`].
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(5);

/// The channels of the watched keys and prefixes. A std mutex: taken briefly, never across an
/// `.await`.
type Counters = Mutex<WakeRouter>;

/// A running subscriber: the counters, and the task that feeds them (aborted on drop).
pub(super) struct Watcher {
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Watcher {
    /// Starts the subscriber task for `channel`. Needs a tokio runtime.
    pub(super) fn start(client: Client, channel: String, description: String) -> Watcher {
        let counters = Arc::new(Mutex::new(WakeRouter::default()));
        // The task holds the counters weakly: it ends when the store is dropped.
        let task = tokio::spawn(follow(
            client,
            channel,
            description,
            Arc::downgrade(&counters),
        ));
        Watcher { counters, task }
    }

    /// A receiver that changes after each write to `key` (and after each reconnection).
    pub(super) fn subscribe(&self, key: &str) -> watch::Receiver<Wake> {
        let mut router = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        router.subscribe_key(key)
    }

    /// A receiver that changes after each write to a key under `prefix`.
    pub(super) fn subscribe_prefix(&self, prefix: &str) -> watch::Receiver<Wake> {
        let mut router = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        router.subscribe_prefix(prefix)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Subscribes, follows the messages, and starts over after any failure, until the store is
/// dropped.
async fn follow(client: Client, channel: String, description: String, counters: Weak<Counters>) {
    let mut reconnect_delay = RECONNECT_DELAY_MIN;
    loop {
        match tokio::time::timeout(CONNECT_TIMEOUT, subscribe(&client, &channel)).await {
            Ok(Ok(pubsub)) => {
                reconnect_delay = RECONNECT_DELAY_MIN;
                // Whatever was published before the subscription was confirmed is lost.
                if !bump_all(&counters) || !listen(pubsub, &counters).await {
                    return;
                }
                tracing::debug!(store = %description, "subscriber connection lost; resubscribing");
            }
            Ok(Err(error)) => {
                tracing::debug!(store = %description, %error, "cannot subscribe; waiters poll");
            }
            Err(_elapsed) => {
                tracing::debug!(store = %description, "subscribing timed out; waiters poll");
            }
        }
        if counters.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(reconnect_delay).await;
        reconnect_delay = (reconnect_delay * 2).min(RECONNECT_DELAY_MAX);
    }
}

/// Bumps counters for each message until the connection is lost (true) or the store is gone
/// (false).
async fn listen(pubsub: PubSub, counters: &Weak<Counters>) -> bool {
    let (mut sink, stream) = pubsub.split();
    let mut stream = Box::pin(stream);
    loop {
        tokio::select! {
            message = next_message(&mut stream) => match message {
                Some(message) => {
                    if !bump(counters, &message) {
                        return false;
                    }
                }
                None => return true,
            },
            _ = tokio::time::sleep(PING_AFTER_SILENCE) => {
                let pong = tokio::time::timeout(RESPONSE_TIMEOUT, sink.ping::<Value>()).await;
                if !matches!(pong, Ok(Ok(_))) {
                    return true;
                }
            }
        }
    }
}

async fn subscribe(client: &Client, channel: &str) -> ::redis::RedisResult<PubSub> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

/// The next message, or `None` once the connection is gone.
fn next_message(stream: &mut Pin<Box<PubSubStream>>) -> impl Future<Output = Option<Msg>> + '_ {
    std::future::poll_fn(move |context| stream.as_mut().poll_next(context))
}

/// Wakes the watchers of the key a message names. False when the store is gone.
fn bump(counters: &Weak<Counters>, message: &Msg) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let (key, wake) = parse_payload(message.get_payload_bytes());
    // Keys are UTF-8; anything else was not published by baton.
    if let Ok(key) = std::str::from_utf8(key) {
        let router = counters.lock().unwrap_or_else(PoisonError::into_inner);
        router.wake(key, wake);
    }
    true
}

/// The key a message names and what its watchers learn: `KEY \n VERSION \n DOCUMENT` delivers
/// the document (any bytes, newlines included); a bare key (a large document, or an older baton)
/// only says the key changed.
fn parse_payload(payload: &[u8]) -> (&[u8], Wake) {
    let mut parts = payload.splitn(3, |byte| *byte == b'\n');
    let key = parts.next().unwrap_or_default();
    match (parts.next(), parts.next()) {
        (Some(version), Some(document)) if !version.is_empty() => {
            match std::str::from_utf8(version) {
                Ok(version) => (
                    key,
                    Wake::with(Versioned {
                        version: Version(version.to_owned()),
                        bytes: document.to_vec(),
                    }),
                ),
                Err(_) => (key, Wake::read_again()),
            }
        }
        _ => (key, Wake::read_again()),
    }
}

/// Wakes every watcher once. False when the store is gone.
fn bump_all(counters: &Weak<Counters>) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let router = counters.lock().unwrap_or_else(PoisonError::into_inner);
    router.wake_all();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_a_document_delivers_it_byte_for_byte() {
        let (key, wake) = parse_payload(b"deploy/prod\n7-1795350872000123\n{\"a\":\n1}\xff");
        assert_eq!(key, b"deploy/prod");
        let document = wake.document.expect("a document");
        assert_eq!(document.version.0, "7-1795350872000123");
        assert_eq!(document.bytes, b"{\"a\":\n1}\xff");
    }

    #[test]
    fn an_empty_document_is_a_document() {
        let (_, wake) = parse_payload(b"k\n3-1\n");
        assert_eq!(wake.document.expect("a document").bytes, b"");
    }

    #[test]
    fn a_bare_key_only_says_the_key_changed() {
        for payload in [&b"k"[..], b"k\n\nx", b"k\n3-1"] {
            let (key, wake) = parse_payload(payload);
            assert_eq!(key, b"k");
            assert!(wake.document.is_none(), "{payload:?}");
        }
    }

    #[test]
    fn the_script_carries_documents_up_to_the_limit() {
        assert!(super::super::CAS_SCRIPT.contains(&format!(
            "if #ARGV[3] <= {} then",
            super::super::PUSHED_DOCUMENT_MAX
        )));
    }
}
