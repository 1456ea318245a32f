//! What one coordinator knows of its keys: each key's document and version as last read or
//! written (so a warm client's uncontended write is one CAS), its observer (on a store without
//! a clock, leases are judged by watching documents change), and how many writes lost a race.
//!
//! Every executor of the coordinator and the coordinator's reads share one of these. A cached
//! document is a starting point, never an answer: the CAS that follows proves it current.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use baton_core::arrival::Arrival;
use baton_core::{decode, Doc, Observer};
use baton_store::{Store, Version, Versioned};

use crate::error::ClientError;
use crate::time::mono_ms;

/// A key's document as a coordinator last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Cached {
    /// Its version (`None`: the key has no document, or a server wrote it).
    pub(crate) version: Option<Version>,
    /// The document (`None`: the key has never been used). Shared with the cache: every write
    /// starts from the cached document, and a deep copy of a long-used key's cost as much as
    /// encoding it.
    pub(crate) doc: Option<Arc<Doc>>,
    /// The key's arrivals read or pushed with it ([`Versioned::arrivals`]), oldest first, for
    /// the next write to take in: none after a write. One that cannot be read is left out,
    /// and the write removes it all the same (its owner enqueues by a write of its own).
    pub(crate) arrivals: Arc<[Arrival]>,
    /// When it was seen, on this process's monotonic clock ([`mono_ms`]).
    pub(crate) seen_ms: u64,
}

impl Cached {
    /// `doc` at `version`, with no arrivals known, seen now.
    pub(crate) fn new(version: Option<Version>, doc: Option<Arc<Doc>>) -> Cached {
        Cached {
            version,
            doc,
            arrivals: Arc::new([]),
            seen_ms: mono_ms(),
        }
    }
}

/// The keys a coordinator has seen.
#[derive(Debug, Default)]
pub(crate) struct Known {
    cache: Mutex<HashMap<String, Cached>>,
    observers: Mutex<HashMap<String, Observer>>,
    /// CAS conflicts so far (a server's metrics).
    conflicts: AtomicU64,
}

impl Known {
    /// Reads `key` from `store` (not the cache), decoded and remembered.
    pub(crate) async fn load(&self, store: &dyn Store, key: &str) -> Result<Cached, ClientError> {
        let cached = match store.load(key).await? {
            Some(versioned) => self.decode(key, versioned)?,
            None => Cached::new(None, None),
        };
        self.remember_read(key, cached.clone());
        Ok(cached)
    }

    /// A document read or pushed, decoded, and shown to the key's observer.
    pub(crate) fn decode(&self, key: &str, versioned: Versioned) -> Result<Cached, ClientError> {
        let cached = cached_of(key, versioned)?;
        if let (Some(doc), Ok(mut observers)) = (&cached.doc, self.observers.lock()) {
            observers
                .entry(key.to_string())
                .or_default()
                .observe(doc, mono_ms());
        }
        Ok(cached)
    }

    /// The key as last seen, if it was.
    pub(crate) fn cached(&self, key: &str) -> Option<Cached> {
        self.cache.lock().ok()?.get(key).cloned()
    }

    /// Takes `doc` at `version` as the key's latest, with no arrivals known (a write's).
    pub(crate) fn remember(&self, key: &str, version: Option<Version>, doc: Option<Arc<Doc>>) {
        self.remember_read(key, Cached::new(version, doc));
    }

    /// Takes a read of the key (its document, and the arrivals read with it) as its latest.
    pub(crate) fn remember_read(&self, key: &str, cached: Cached) {
        if let (Some(doc), Ok(mut observers)) = (&cached.doc, self.observers.lock()) {
            observers
                .entry(key.to_string())
                .or_default()
                .observe(doc, mono_ms());
        }
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key.to_string(), cached);
        }
    }

    /// Takes a document pushed to a follower of `key` ([`crate::follow`]) as its latest, with
    /// the arrivals it carries (its version names them: the next write must take them in, or
    /// it would remove them unqueued), unless it is surely older than the one cached
    /// ([`surely_older`]): a subscription made before a write of this process's own may still
    /// hold wake-ups from before it. Whether it was taken.
    pub(crate) fn remember_pushed(
        &self,
        key: &str,
        pushed: Versioned,
    ) -> Result<bool, ClientError> {
        // Shown to the observer only if taken (`remember_read`): a document surely older
        // than the cached one would set its sightings back.
        let pushed = cached_of(key, pushed)?;
        let cached = self.cached(key).and_then(|cached| cached.doc);
        let older = pushed.doc.as_deref().zip(cached.as_deref());
        if older.is_some_and(|(doc, cached)| surely_older(doc, cached)) {
            return Ok(false);
        }
        self.remember_read(key, pushed);
        Ok(true)
    }

    /// Forgets the key's document: the next write reads it.
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(key);
        }
    }

    /// The observer of `key` (a copy).
    pub(crate) fn observer(&self, key: &str) -> Observer {
        self.observers
            .lock()
            .map(|o| o.get(key).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Counts a write that lost to a concurrent one.
    pub(crate) fn conflicted(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// How many writes lost to concurrent ones.
    pub(crate) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}

/// `versioned` decoded, with the arrivals read or pushed with it, oldest first; one that cannot
/// be read is left out (the write removes it all the same, and its owner enqueues by a write of
/// its own).
fn cached_of(key: &str, versioned: Versioned) -> Result<Cached, ClientError> {
    let doc = decoded(key, &versioned.bytes)?;
    let arrivals = versioned
        .arrivals
        .iter()
        .filter_map(|bytes| match Arrival::decode(bytes) {
            Ok(arrival) => Some(arrival),
            Err(error) => {
                tracing::debug!(key, %error, "an arrival left out; its owner enqueues itself");
                None
            }
        })
        .collect();
    Ok(Cached {
        version: Some(versioned.version),
        doc: Some(Arc::new(doc)),
        arrivals,
        seen_ms: mono_ms(),
    })
}

/// `key`'s document from its stored bytes; bytes that are no document are [`ClientError::Corrupt`].
fn decoded(key: &str, bytes: &[u8]) -> Result<Doc, ClientError> {
    decode(bytes).map_err(|source| ClientError::Corrupt {
        key: key.to_string(),
        source,
    })
}

/// Whether `doc` was surely written before `than`: it counts fewer arrivals, ends or fences,
/// which only grow. Writes that move none of them (a renewal, a claim) cannot be told apart:
/// taking one of those late costs a conflict at most.
fn surely_older(doc: &Doc, than: &Doc) -> bool {
    doc.next_arrival < than.next_arrival || doc.finishes < than.finishes || doc.fence < than.fence
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(next_arrival: u64, finishes: u64, fence: u64) -> Doc {
        Doc {
            next_arrival,
            finishes,
            fence,
            ..Doc::default()
        }
    }

    #[test]
    fn a_document_with_fewer_arrivals_ends_or_fences_is_surely_older() {
        let seen = doc(5, 3, 7);
        assert!(surely_older(&doc(4, 3, 7), &seen));
        assert!(surely_older(&doc(5, 2, 7), &seen));
        assert!(surely_older(&doc(5, 3, 6), &seen));
        assert!(!surely_older(&doc(5, 3, 7), &seen), "a renewal, say");
        assert!(!surely_older(&doc(6, 3, 7), &seen));
        assert!(!surely_older(&doc(5, 4, 8), &seen));
    }
}
