//! Keys on which this coordinator lost a CAS lately. Where a locked update costs round trips
//! ([`super::locked::LockWhen::Contended`]), a write to such a key takes the lock at once
//! instead of first losing another CAS: on a hot key every optimistic attempt meets a writer
//! that holds the row, and loses to it.
//!
//! A heuristic, never a rule: whichever way a write goes, the store decides it by the same
//! compare of versions, so a key wrongly thought hot or cold costs round trips, nothing else.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long after a lost CAS a key counts as hot. After it, one write tries a CAS again: on a
/// key that is still hot it loses, and the key is hot for as long again.
pub(crate) const HOT_FOR: Duration = Duration::from_secs(1);

/// The most keys remembered; a coordinator that writes to more hot keys at once than this
/// (a server) forgets the ones that cooled first, then all.
const HOT_KEYS_MAX: usize = 1024;

/// Keys and when a CAS on each last lost.
#[derive(Debug, Default)]
pub(crate) struct HotKeys(Mutex<HashMap<String, Instant>>);

impl HotKeys {
    /// A CAS on `key` lost just now.
    pub(crate) fn lost_on(&self, key: &str) {
        let mut keys = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.len() >= HOT_KEYS_MAX && !keys.contains_key(key) {
            keys.retain(|_, lost| lost.elapsed() < HOT_FOR);
            if keys.len() >= HOT_KEYS_MAX {
                keys.clear();
            }
        }
        keys.insert(key.to_owned(), Instant::now());
    }

    /// Whether a CAS on `key` lost within [`HOT_FOR`].
    pub(crate) fn is_hot(&self, key: &str) -> bool {
        let keys = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(key).is_some_and(|lost| lost.elapsed() < HOT_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_hot_only_after_a_lost_cas_on_it() {
        let hot = HotKeys::default();
        assert!(!hot.is_hot("a"));
        hot.lost_on("a");
        assert!(hot.is_hot("a"));
        assert!(!hot.is_hot("b"), "another key stays cold");
    }

    #[test]
    fn a_key_cools_after_a_while() {
        let hot = HotKeys::default();
        hot.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert("a".to_owned(), Instant::now() - HOT_FOR);
        assert!(!hot.is_hot("a"));
    }

    #[test]
    fn the_keys_remembered_are_bounded() {
        let hot = HotKeys::default();
        for n in 0..HOT_KEYS_MAX * 3 {
            hot.lost_on(&format!("key-{n}"));
        }
        let remembered = hot.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        assert!(remembered <= HOT_KEYS_MAX, "{remembered} keys remembered");
        assert!(
            hot.is_hot(&format!("key-{}", HOT_KEYS_MAX * 3 - 1)),
            "the last key lost on is remembered"
        );
    }
}
