//! Routing a store's change notifications to its watchers: one channel per watched key, and one
//! per watched prefix (an idle worker's [`crate::Store::watch_prefix`]). Shared by the stores
//! whose servers push every change of a namespace on one connection (PostgreSQL's `LISTEN`,
//! Redis pub/sub), which route each notification by the key it names.

use std::collections::HashMap;

use tokio::sync::watch;

use crate::Wake;

/// The watchers of one store. Callers keep it behind a mutex taken briefly, never across an
/// `.await`.
#[derive(Debug, Default)]
pub(crate) struct WakeRouter {
    keys: HashMap<String, watch::Sender<Wake>>,
    /// Per key, one channel per watched tag ([`crate::Store::watch_tagged`]).
    tagged: HashMap<String, HashMap<String, watch::Sender<Wake>>>,
    /// Few (a worker process watches its patterns' prefixes): a list, checked at each change.
    prefixes: Vec<(String, watch::Sender<Wake>)>,
}

impl WakeRouter {
    /// A receiver that changes after each write to `key`.
    pub(crate) fn subscribe_key(&mut self, key: &str) -> watch::Receiver<Wake> {
        self.forget_unwatched();
        self.keys
            .entry(key.to_owned())
            .or_insert_with(|| watch::Sender::new(Wake::read_again()))
            .subscribe()
    }

    /// A receiver that changes after each write to `key` that names `tag` or names none
    /// ([`WakeRouter::wake_named`]).
    #[cfg(any(feature = "sqlite", feature = "redis"))]
    pub(crate) fn subscribe_tagged(&mut self, key: &str, tag: &str) -> watch::Receiver<Wake> {
        self.forget_unwatched();
        self.tagged
            .entry(key.to_owned())
            .or_default()
            .entry(tag.to_owned())
            .or_insert_with(|| watch::Sender::new(Wake::read_again()))
            .subscribe()
    }

    /// Whether anyone watches `key` by tag, and which tags.
    #[cfg(feature = "sqlite")]
    pub(crate) fn watched_tags(&self, key: &str) -> Vec<String> {
        self.tagged.get(key).map_or_else(Vec::new, |tags| {
            tags.iter()
                .filter(|(_, sender)| sender.receiver_count() > 0)
                .map(|(tag, _)| tag.clone())
                .collect()
        })
    }

    /// A receiver that changes after each write to any key starting with `prefix` (it learns
    /// that something changed, not what: read again).
    #[cfg(any(feature = "postgres", feature = "redis"))]
    pub(crate) fn subscribe_prefix(&mut self, prefix: &str) -> watch::Receiver<Wake> {
        self.forget_unwatched();
        if let Some((_, sender)) = self.prefixes.iter().find(|(p, _)| p == prefix) {
            return sender.subscribe();
        }
        let sender = watch::Sender::new(Wake::read_again());
        let receiver = sender.subscribe();
        self.prefixes.push((prefix.to_owned(), sender));
        receiver
    }

    /// Whether anyone watches `key` (a receiver of its channel is alive).
    pub(crate) fn watches_key(&self, key: &str) -> bool {
        self.keys
            .get(key)
            .is_some_and(|sender| sender.receiver_count() > 0)
    }

    /// The keys someone watches (a receiver of their channel is alive).
    #[cfg(any(feature = "postgres", feature = "redis"))]
    pub(crate) fn watched_keys(&self) -> impl Iterator<Item = &str> {
        self.keys
            .iter()
            .filter(|(_, sender)| sender.receiver_count() > 0)
            .map(|(key, _)| key.as_str())
    }

    /// Every key and tag someone watches by tag (a receiver of its channel is alive).
    #[cfg(feature = "redis")]
    pub(crate) fn watched_tagged(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (key, tags) in &self.tagged {
            for (tag, sender) in tags {
                if sender.receiver_count() > 0 {
                    out.push((key.clone(), tag.clone()));
                }
            }
        }
        out
    }

    /// Tells `key`'s watchers of the whole key, not those watching it by tag, that it changed
    /// (Redis tells those on channels of their own: [`WakeRouter::wake_tag`]).
    #[cfg(feature = "redis")]
    pub(crate) fn wake_untagged(&self, key: &str, wake: Wake) {
        if let Some(sender) = self.keys.get(key) {
            wake.send(sender);
        }
    }

    /// Tells `key`'s watchers of `tag` that a write naming it changed the key, or with `tag`
    /// empty, every watcher of `key` by tag (a write that names no one wakes everyone).
    #[cfg(feature = "redis")]
    pub(crate) fn wake_tag(&self, key: &str, tag: &str, wake: Wake) {
        let Some(by_tag) = self.tagged.get(key) else {
            return;
        };
        if tag.is_empty() {
            for sender in by_tag.values() {
                wake.clone().send(sender);
            }
        } else if let Some(sender) = by_tag.get(tag) {
            wake.naming().send(sender);
        }
    }

    /// Whether anyone watches a prefix.
    #[cfg(any(feature = "postgres", feature = "redis"))]
    pub(crate) fn watches_a_prefix(&self) -> bool {
        self.prefixes
            .iter()
            .any(|(_, sender)| sender.receiver_count() > 0)
    }

    /// Tells `key`'s watchers, and those of every prefix of it, that it changed.
    pub(crate) fn wake(&self, key: &str, wake: Wake) {
        self.wake_prefixes(key);
        self.wake_key(key, wake);
    }

    /// Tells the watchers of every prefix of `key` that it changed.
    pub(crate) fn wake_prefixes(&self, key: &str) {
        for (prefix, sender) in &self.prefixes {
            if key.starts_with(prefix.as_str()) {
                Wake::read_again().send(sender);
            }
        }
    }

    /// Tells `key`'s own watchers that it changed, those watching it by tag included.
    pub(crate) fn wake_key(&self, key: &str, wake: Wake) {
        for sender in self.tagged.get(key).into_iter().flat_map(HashMap::values) {
            wake.clone().send(sender);
        }
        if let Some(sender) = self.keys.get(key) {
            wake.send(sender);
        }
    }

    /// Tells `key`'s watchers of the whole key, and those watching one of `tags`, that a write
    /// naming those tags changed it; the watchers of other tags are passed by.
    #[cfg(feature = "sqlite")]
    pub(crate) fn wake_named(&self, key: &str, wake: Wake, tags: &[String]) {
        self.wake_prefixes(key);
        if let Some(by_tag) = self.tagged.get(key) {
            for tag in tags {
                if let Some(sender) = by_tag.get(tag) {
                    wake.clone().naming().send(sender);
                }
            }
        }
        if let Some(sender) = self.keys.get(key) {
            wake.send(sender);
        }
    }

    /// Wakes every watcher once, to read again (after a reconnection, say: what changed in
    /// between was not told, so every waiter looks).
    #[cfg(any(feature = "postgres", feature = "redis"))]
    pub(crate) fn wake_all(&self) {
        self.send_all(Wake::untold);
    }

    /// Wakes every watcher once, telling of one change that went untold: the waiters that
    /// the next write may grant look; those further back count it and wait for the writes
    /// told later, whose versions say how many went by (SQLite's wake-ups).
    #[cfg(feature = "sqlite")]
    pub(crate) fn nudge_all(&self) {
        self.send_all(Wake::read_again);
    }

    fn send_all(&self, wake: fn() -> Wake) {
        let senders = self
            .keys
            .values()
            .chain(self.tagged.values().flat_map(HashMap::values))
            .chain(self.prefixes.iter().map(|(_, s)| s));
        for sender in senders {
            wake().send(sender);
        }
    }

    /// Drops channels nobody watches any more, so a long-lived store does not grow. A channel
    /// with receivers is never dropped: a receiver whose sender is gone reports the store
    /// closed.
    fn forget_unwatched(&mut self) {
        self.keys.retain(|_, sender| sender.receiver_count() > 0);
        self.tagged.retain(|_, tags| {
            tags.retain(|_, sender| sender.receiver_count() > 0);
            !tags.is_empty()
        });
        self.prefixes
            .retain(|(_, sender)| sender.receiver_count() > 0);
    }
}

#[cfg(all(test, any(feature = "postgres", feature = "redis")))]
mod tests {
    use super::*;

    #[test]
    fn a_change_wakes_its_key_and_its_prefixes_only() {
        let mut router = WakeRouter::default();
        let mut key = router.subscribe_key("jobs/a");
        let mut under = router.subscribe_prefix("jobs/");
        let mut everything = router.subscribe_prefix("");
        let other = router.subscribe_prefix("locks/");
        router.wake("jobs/a", Wake::read_again());
        assert!(key.has_changed().unwrap_or(false));
        assert!(under.has_changed().unwrap_or(false));
        assert!(everything.has_changed().unwrap_or(false));
        assert!(!other.has_changed().unwrap_or(true));
        for receiver in [&mut key, &mut under, &mut everything] {
            receiver.borrow_and_update();
        }
        router.wake("jobs/b", Wake::read_again());
        assert!(!key.has_changed().unwrap_or(true), "another key");
        assert!(under.has_changed().unwrap_or(false));
        router.wake_all();
        assert!(key.has_changed().unwrap_or(false));
        assert!(other.has_changed().unwrap_or(false));
    }
}
