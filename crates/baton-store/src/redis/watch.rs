//! Wake-ups for the Redis store: one pub/sub subscriber per store.
//!
//! Every CAS publishes the key it wrote, with the new version and document, on the key's own
//! channel (`<namespace>wake:<db>:KEY`), and the bare key on the namespace's channel. A
//! waiter watches by its ticket ([`crate::Store::watch_tagged`]) on two channels instead: the
//! key's channel, a newline and its ticket's id, where a CAS naming that ticket publishes, and
//! the key's channel and a newline, where a CAS naming no one does. So a write on a key many
//! wait for reaches the processes it concerns, not every waiter. One
//! background task per store holds a subscriber connection and hands each message's document
//! to the watchers of the key it names. The connection is subscribed to the channels of the
//! watched keys, and to the namespace's only while a prefix is watched: a process receives the
//! writes it waits for, not every write of the namespace. A `watch` returns once Redis has
//! confirmed its key's subscription; the channels of keys no longer watched are left at the
//! next `watch`.
//!
//! Pub/sub delivers at most once: a message published while the subscriber is disconnected is
//! gone. So the task, each time its subscriptions are (re)confirmed, bumps *every* counter once:
//! a waiter then re-reads its key, and a change made while nobody listened is not missed (only
//! a spurious wake-up is paid). A connection that goes silent is checked with a PING, so a
//! half-open TCP connection is noticed too. Waiters also poll, so a subscriber that cannot
//! connect only makes them slower.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use ::redis::aio::{PubSubSink, PubSubStream};
use ::redis::{Client, Msg, Value};
use futures_core::Stream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::layout::Names;
use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::wakes::WakeRouter;
use crate::{Version, Versioned, Wake};

/// After this long without a message, the subscriber PINGs to learn whether it is still
/// connected.
const PING_AFTER_SILENCE: Duration = Duration::from_secs(15);

/// The first wait before reconnecting; it doubles up to [`RECONNECT_DELAY_MAX`].
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(5);

/// What the watchers and the subscriber task share. A std mutex: taken briefly, never across
/// an `.await`.
#[derive(Default)]
struct Shared {
    router: WakeRouter,
    /// The live connection's subscribing half; `None` while (re)connecting, when the task
    /// subscribes to every watched channel itself and then wakes every watcher.
    sink: Option<PubSubSink>,
    /// The channels the live connection is subscribed to, or is being subscribed to.
    subscribed: BTreeSet<String>,
    /// Messages received, for tests: how many writes woke this process.
    received: u64,
}

type Counters = Mutex<Shared>;

/// What a watcher follows: one key, or every key under a prefix.
#[derive(Clone, Copy, Debug)]
pub(super) enum Watched<'a> {
    Key(&'a str),
    /// A key's writes that name this tag, or no one.
    Tagged(&'a str, &'a str),
    Prefix(&'a str),
}

/// A running subscriber: the state shared with the task, and the task (aborted on drop).
pub(super) struct Watcher {
    counters: Arc<Counters>,
    names: Names,
    /// Serialises subscriptions, so that a second watcher of a key never returns before Redis
    /// has confirmed the first one's `SUBSCRIBE`.
    subscribing: tokio::sync::Mutex<()>,
    task: JoinHandle<()>,
}

impl Watcher {
    /// Starts the subscriber task. Needs a tokio runtime.
    pub(super) fn start(client: Client, names: Names, description: String) -> Watcher {
        let counters = Arc::new(Mutex::new(Shared::default()));
        // The task holds the counters weakly: it ends when the store is dropped.
        let task = tokio::spawn(follow(
            client,
            names.clone(),
            description,
            Arc::downgrade(&counters),
        ));
        Watcher {
            counters,
            names,
            subscribing: tokio::sync::Mutex::new(()),
            task,
        }
    }

    /// Messages received since the subscriber started, for tests.
    pub(super) fn received(&self) -> u64 {
        let shared = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        shared.received
    }

    /// A receiver that changes after each write to the watched key (or under the prefix), and
    /// after each reconnection; `None` when Redis refused the subscription (the waiter polls).
    pub(super) async fn subscribe(&self, watched: Watched<'_>) -> Option<watch::Receiver<Wake>> {
        let _one_at_a_time = self.subscribing.lock().await;
        let (receiver, sink, new, gone) = {
            let mut shared = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
            let receiver = match watched {
                Watched::Key(key) => shared.router.subscribe_key(key),
                Watched::Tagged(key, tag) => shared.router.subscribe_tagged(key, tag),
                Watched::Prefix(prefix) => shared.router.subscribe_prefix(prefix),
            };
            let Some(sink) = shared.sink.clone() else {
                // Connecting: the task subscribes to this key's channel with the others.
                return Some(receiver);
            };
            let needed = channels_of(&shared.router, &self.names);
            let new: Vec<String> = needed.difference(&shared.subscribed).cloned().collect();
            let gone: Vec<String> = shared.subscribed.difference(&needed).cloned().collect();
            shared.subscribed = needed;
            (receiver, sink, new, gone)
        };
        if !gone.is_empty() {
            // At worst a few messages nobody waits for.
            let _ = tokio::time::timeout(RESPONSE_TIMEOUT, sink.clone().unsubscribe(&gone)).await;
        }
        if new.is_empty() {
            return Some(receiver);
        }
        let confirmed = tokio::time::timeout(RESPONSE_TIMEOUT, sink.clone().subscribe(&new)).await;
        if matches!(confirmed, Ok(Ok(()))) {
            return Some(receiver);
        }
        // Not subscribed: the next watcher of these keys tries again.
        let mut shared = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        for channel in &new {
            shared.subscribed.remove(channel);
        }
        None
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The channels a process subscribes to for its watchers: each watched key's own, those of
/// each watched tag and of its key's writes that name no one, and the namespace's while a
/// prefix is watched (a write under it is told there by its key).
fn channels_of(router: &WakeRouter, names: &Names) -> BTreeSet<String> {
    let mut channels: BTreeSet<String> = router
        .watched_keys()
        .map(|key| names.key_channel(key))
        .collect();
    for (key, tag) in router.watched_tagged() {
        let base = format!("{}\n", names.key_channel(&key));
        channels.insert(format!("{base}{tag}"));
        channels.insert(base);
    }
    if router.watches_a_prefix() {
        channels.insert(names.channel.clone());
    }
    channels
}

/// Subscribes, follows the messages, and starts over after any failure, until the store is
/// dropped.
async fn follow(client: Client, names: Names, description: String, counters: Weak<Counters>) {
    let mut reconnect_delay = RECONNECT_DELAY_MIN;
    loop {
        match tokio::time::timeout(CONNECT_TIMEOUT, subscribe(&client, &names, &counters)).await {
            Ok(Ok(Some(stream))) => {
                reconnect_delay = RECONNECT_DELAY_MIN;
                // Whatever was published before the subscriptions were confirmed is lost.
                if !bump_all(&counters) || !listen(stream, &counters, &names).await {
                    return;
                }
                tracing::debug!(store = %description, "subscriber connection lost; resubscribing");
            }
            Ok(Ok(None)) => return,
            Ok(Err(error)) => {
                tracing::debug!(store = %description, %error, "cannot subscribe; waiters poll");
            }
            Err(_elapsed) => {
                tracing::debug!(store = %description, "subscribing timed out; waiters poll");
            }
        }
        if !disconnected(&counters) {
            return;
        }
        tokio::time::sleep(reconnect_delay).await;
        reconnect_delay = (reconnect_delay * 2).min(RECONNECT_DELAY_MAX);
    }
}

/// Forgets the lost connection: watchers now leave subscribing to the task. False when the
/// store is gone.
fn disconnected(counters: &Weak<Counters>) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let mut shared = counters.lock().unwrap_or_else(PoisonError::into_inner);
    shared.sink = None;
    shared.subscribed.clear();
    true
}

/// Bumps counters for each message until the connection is lost (true) or the store is gone
/// (false).
async fn listen(stream: PubSubStream, counters: &Weak<Counters>, names: &Names) -> bool {
    let Some(mut sink) = counters.upgrade().and_then(|c| {
        let shared = c.lock().unwrap_or_else(PoisonError::into_inner);
        shared.sink.clone()
    }) else {
        return false;
    };
    let mut stream = Box::pin(stream);
    loop {
        tokio::select! {
            message = next_message(&mut stream) => match message {
                Some(message) => {
                    if !bump(counters, &message, names) {
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

/// A new subscriber connection, subscribed to the channels of every watcher registered so far
/// (later ones subscribe through its sink themselves); `None` when the store is gone.
async fn subscribe(
    client: &Client,
    names: &Names,
    counters: &Weak<Counters>,
) -> ::redis::RedisResult<Option<PubSubStream>> {
    let (mut sink, stream) = client.get_async_pubsub().await?.split();
    let Some(counters) = counters.upgrade() else {
        return Ok(None);
    };
    let channels = {
        let mut shared = counters.lock().unwrap_or_else(PoisonError::into_inner);
        let channels = channels_of(&shared.router, names);
        shared.sink = Some(sink.clone());
        shared.subscribed = channels.clone();
        channels
    };
    drop(counters);
    if !channels.is_empty() {
        sink.subscribe(&channels.into_iter().collect::<Vec<_>>())
            .await?;
    }
    Ok(Some(stream))
}

/// The next message, or `None` once the connection is gone.
fn next_message(stream: &mut Pin<Box<PubSubStream>>) -> impl Future<Output = Option<Msg>> + '_ {
    std::future::poll_fn(move |context| stream.as_mut().poll_next(context))
}

/// Wakes the watchers a message is for: one on a key's channel, the key's whole-key watchers;
/// one on a tag's channel, that tag's (or, on the channel of writes naming no one, every tag's);
/// one on the namespace's (subscribed to only while a prefix is watched), the prefixes' (the
/// key's own came on its channel, with the document). False when the store is gone.
fn bump(counters: &Weak<Counters>, message: &Msg, names: &Names) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let (key, wake) = parse_payload(message.get_payload_bytes());
    // Keys are UTF-8; anything else was not published by baton.
    if let Ok(key) = std::str::from_utf8(key) {
        let mut shared = counters.lock().unwrap_or_else(PoisonError::into_inner);
        shared.received += 1;
        let channel = message.get_channel_name();
        if channel == names.channel {
            shared.router.wake_prefixes(key);
        } else if let Some((_, tag)) = channel.split_once('\n') {
            shared.router.wake_tag(key, tag, wake);
        } else {
            shared.router.wake_untagged(key, wake);
        }
    }
    true
}

/// The key a message names and what its watchers learn: `KEY \n VERSION \n DOCUMENT` delivers
/// the document (any bytes, newlines included); a bare key (a large document, or an older baton)
/// only says the key changed. A VERSION of `V.N HEX…` carries the N arrivals pending after the
/// write, each in hex, oldest first (none after `V.0`), named by the version as a load's are:
/// a CAS naming it takes those and leaves any appended since pending. A VERSION without the
/// suffix (an older baton's) knew none.
fn parse_payload(payload: &[u8]) -> (&[u8], Wake) {
    let mut parts = payload.splitn(3, |byte| *byte == b'\n');
    let key = parts.next().unwrap_or_default();
    let pushed = match (parts.next(), parts.next()) {
        (Some(version), Some(document)) if !version.is_empty() => std::str::from_utf8(version)
            .ok()
            .and_then(|version| pushed(version, document)),
        _ => None,
    };
    (key, pushed.map_or_else(Wake::read_again, Wake::with))
}

/// The document a message's VERSION line and DOCUMENT make ([`parse_payload`]); `None` when the
/// line is not what the CAS script writes.
fn pushed(line: &str, document: &[u8]) -> Option<Versioned> {
    let mut fields = line.split(' ');
    let version = fields.next()?;
    let arrivals = fields
        .map(|field| hex::decode(field).ok())
        .collect::<Option<Vec<_>>>()?;
    let counted = match version.rsplit_once('.') {
        Some((_, count)) => count.parse::<usize>().ok() == Some(arrivals.len()),
        None => arrivals.is_empty(),
    };
    if !counted {
        return None;
    }
    Some(Versioned {
        version: Version(version.to_owned()),
        bytes: document.to_vec(),
        arrivals,
    })
}

/// Wakes every watcher once. False when the store is gone.
fn bump_all(counters: &Weak<Counters>) -> bool {
    let Some(counters) = counters.upgrade() else {
        return false;
    };
    let shared = counters.lock().unwrap_or_else(PoisonError::into_inner);
    shared.router.wake_all();
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
    fn a_version_naming_arrivals_carries_them_oldest_first() {
        let (_, wake) = parse_payload(b"k\n9-17.2 610a 00ff\n{}");
        let document = wake.document.expect("a document");
        assert_eq!(document.version.0, "9-17.2");
        assert_eq!(document.arrivals, [b"a\n".to_vec(), vec![0, 255]]);
        assert_eq!(document.bytes, b"{}");
        let (_, wake) = parse_payload(b"k\n9-17.0\n{}");
        let document = wake.document.expect("a document");
        assert_eq!(document.version.0, "9-17.0", "knew none: kept, not dropped");
        assert!(document.arrivals.is_empty());
    }

    #[test]
    fn arrivals_that_do_not_add_up_only_say_the_key_changed() {
        for line in [
            "9-17.2 610a",
            "9-17.1 61 62",
            "9-17 61",
            "9-17.1 6",
            "9-17.x 61",
            "9-17.1 zz",
        ] {
            let payload = format!("k\n{line}\n{{}}");
            let (key, wake) = parse_payload(payload.as_bytes());
            assert_eq!(key, b"k");
            assert!(wake.document.is_none(), "{line}");
        }
    }

    #[test]
    fn the_script_carries_documents_up_to_the_limit() {
        assert!(super::super::CAS_SCRIPT.contains(&format!(
            "local pushed_max = {}\n",
            super::super::PUSHED_DOCUMENT_MAX
        )));
    }
}
