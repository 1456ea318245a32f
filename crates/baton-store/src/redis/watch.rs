//! Wake-ups for the Redis store: one pub/sub subscriber per store.
//!
//! Every CAS publishes the key it wrote on the namespace's channel. One background task per
//! store holds a subscriber connection to that channel and bumps the counter of each key it
//! hears about; every [`crate::WatchHandle`] of a key follows that key's counter.
//!
//! Pub/sub delivers at most once: a message published while the subscriber is disconnected is
//! gone. So the task, each time its subscription is (re)confirmed, bumps *every* counter once:
//! a waiter then re-reads its key, and a change made while nobody listened is not missed (only
//! a spurious wake-up is paid). A connection that goes silent is checked with a PING, so a
//! half-open TCP connection is noticed too. Waiters also poll, so a subscriber that cannot
//! connect only makes them slower.

use std::collections::HashMap;
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

/// After this long without a message, the subscriber PINGs to learn whether it is still
/// connected.
const PING_AFTER_SILENCE: Duration = Duration::from_secs(15);

/// The first wait before reconnecting; it doubles up to [`RECONNECT_DELAY_MAX`].
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(5);

/// Each watched key's counter. A std mutex: taken briefly, never across an `.await`.
type Counters = Mutex<HashMap<String, watch::Sender<u64>>>;

/// A running subscriber: the counters, and the task that feeds them (aborted on drop).
pub(super) struct Watcher {
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Watcher {
    /// Starts the subscriber task for `channel`. Needs a tokio runtime.
    pub(super) fn start(client: Client, channel: String, description: String) -> Watcher {
        let counters = Arc::new(Mutex::new(HashMap::new()));
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
    pub(super) fn subscribe(&self, key: &str) -> watch::Receiver<u64> {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget keys nobody watches any more, so a long-lived store does not grow. A counter
        // with receivers is never dropped: a receiver whose sender is gone reports the store
        // closed.
        counters.retain(|_, sender| sender.receiver_count() > 0);
        counters
            .entry(key.to_owned())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
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
    // Payloads are keys, which are UTF-8; anything else was not published by baton.
    if let Ok(key) = std::str::from_utf8(message.get_payload_bytes()) {
        let counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = counters.get(key) {
            counter.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
    true
}

/// Wakes every watcher once. False when the store is gone.
fn bump_all(counters: &Weak<Counters>) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
    for counter in counters.values() {
        counter.send_modify(|n| *n = n.wrapping_add(1));
    }
    true
}
