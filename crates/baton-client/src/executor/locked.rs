//! Operations on a store with locked updates ([`baton_store::Store::update`]): the core's apply
//! runs inside the store's write transaction, on the document read in it, so the write never
//! loses a CAS. Where a locked update cannot serve (a store without a clock, another backlog
//! segment wanted, a write whose answer was lost, a key with nothing to lock yet) the
//! optimistic path takes over from what it saw; shared values, settings and records are
//! written optimistically.
//!
//! On a hot key, optimistic writers lose CASes to each other, retry and back off; a releasing
//! holder that backs off stalls the whole queue behind it (BENCHMARKS.md, B3). Under the lock
//! each write costs one transaction whatever the contention. Where the lock is local and cheap
//! (SQLite: [`LockWhen::Always`]) every write takes it; where it costs round trips
//! (PostgreSQL's row lock: [`LockWhen::Contended`]) a write first tries a CAS, then one more
//! from the document the conflict returned, and takes the lock only once that lost too; this
//! coordinator's next writes to a key where a write lost and still had to be made take it at
//! once for a while ([`HotKeys`]). The rules are the core's, as on the CAS path: only where the core's work
//! happens moves.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use baton_core::kv::Write;
use baton_core::op::Refusal;
use baton_core::{decode, Applied, Doc, Request};
use baton_store::{Change, StoreClock, StoreError, Updated, Versioned};

use super::direct::{waking_only_changed, Direct, Lost, Prepared};
use super::hot::HotKeys;
use super::optimistic::{OnConflict, Optimistic, Ran};
use super::{Executed, Executor};
use crate::error::ClientError;
use crate::known::Cached;
use crate::settings::{Freezes, SettingsChange, SettingsChanged};
use crate::time::mono_ms;

/// CASes a write on a key not known to be hot sends before it takes the lock
/// ([`LockWhen::Contended`]): the second from the document the first one's conflict returned.
/// One lost write is mostly a release that meets a waiter's enqueue it had not seen (a turn
/// shorter than [`crate::follow::FOLLOW_AFTER`] does not follow its key), which that document
/// settles in one more statement; under the lock it took four (`BEGIN`, `SELECT … FOR
/// UPDATE`, the write, `COMMIT`). A loss marks the key hot all the same, unless the
/// operation then had nothing to write: a claim that lost its job to another worker's claim.
const CAS_TRIES: usize = 2;

/// Which writes take the store's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockWhen {
    /// Every write ([`baton_store::Capabilities::locked_update`]: SQLite's lock is local).
    Always,
    /// A write that lost a CAS ([`baton_store::Capabilities::update_when_contended`]:
    /// PostgreSQL's row lock costs round trips).
    Contended,
}

/// Locked updates, with optimistic writes where they cannot serve.
#[derive(Debug)]
pub(crate) struct Locked {
    cas: Optimistic,
    when: LockWhen,
    /// Keys on which a CAS lost lately ([`LockWhen::Contended`]).
    hot: HotKeys,
}

impl Locked {
    /// Writes through `direct`, taking the store's lock for the writes `when` says.
    pub(crate) fn new(direct: Direct, when: LockWhen) -> Locked {
        Locked {
            cas: Optimistic::new(direct),
            when,
            hot: HotKeys::default(),
        }
    }

    fn direct(&self) -> &Direct {
        &self.cas.0
    }
}

#[async_trait]
impl Executor for Locked {
    async fn run(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        let ran = self.run_write(key, request).await;
        let direct = self.direct();
        direct.settings.prefetch(&direct.store, mono_ms());
        ran
    }

    async fn write_value(&self, name: &str, write: &Write) -> Result<u64, ClientError> {
        self.cas.write_value(name, write).await
    }

    async fn change_settings(
        &self,
        change: SettingsChange,
    ) -> Result<SettingsChanged, ClientError> {
        self.cas.change_settings(change).await
    }

    async fn freezes(&self) -> Result<Freezes, ClientError> {
        self.cas.freezes().await
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
        self.cas.put_record(key, name, bytes).await
    }
}

impl Locked {
    /// The write of [`Executor::run`]: optimistic attempts while the key is not hot, then
    /// under the store's lock.
    async fn run_write(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        let direct = self.direct();
        let mut lost = Lost::of(request);
        let mut cached = direct.known.cached(key);
        if self.when == LockWhen::Contended && !self.hot.is_hot(key) {
            let mut fresh = false;
            for attempt in 0..CAS_TRIES {
                // Only from a document the conflict returned: else the lock reads it.
                if attempt > 0 && cached.is_none() {
                    break;
                }
                let ran = self
                    .cas
                    .run_from(key, request, cached, fresh, lost, OnConflict::HandOver)
                    .await?;
                match ran {
                    Ran::Done(executed) => {
                        // A write after a lost one: writers meet on this key. A lost write
                        // that then had nothing to write (a claim whose job another worker
                        // took) says only that the key moved on.
                        if fresh && executed.version.is_some() {
                            self.hot.lost_on(key);
                        }
                        return Ok(*executed);
                    }
                    Ran::HandedOver {
                        current,
                        lost: left,
                    } => (cached, lost, fresh) = (current, left, true),
                }
            }
            self.hot.lost_on(key);
        }
        match self.run_locked(key, request, cached, &mut lost).await? {
            Update::Done(executed) => Ok(*executed),
            Update::Fallback { seen, read } => {
                self.cas
                    .run_retrying(key, request, seen.map(|s| *s), read, lost)
                    .await
            }
        }
    }
}

/// How a locked update ended.
enum Update {
    /// With an answer. (Both variants are boxed: a document in each makes them large.)
    Done(Box<Executed>),
    /// Without one: the CAS path takes over from `seen` (`read`: as read under the lock, as
    /// fresh as a load), or from a fresh read when `None`.
    Fallback {
        seen: Option<Box<Cached>>,
        read: bool,
    },
}

/// What the computation found under the store's lock, for the answer.
enum Found {
    /// It wrote `applied`, computed from `before`.
    Write {
        applied: Applied,
        before: Option<Arc<Doc>>,
    },
    /// The core needed no write.
    Unchanged { seen: Cached, applied: Applied },
    /// The core refused the request.
    Refused { seen: Cached, refusal: Refusal },
    /// The document asks for another backlog segment than the one read beforehand: the CAS
    /// path reads it and computes again.
    OtherSegment { seen: Cached },
    /// The document could not be read, or the result not written.
    Failed(ClientError),
}

impl Locked {
    /// Runs `request` on `key` in one [`baton_store::Store::update`], starting from `cached`
    /// where the document under the lock is still that version (no decode needed).
    async fn run_locked(
        &self,
        key: &str,
        request: &mut Request,
        cached: Option<Cached>,
        lost: &mut Lost,
    ) -> Result<Update, ClientError> {
        let direct = self.direct();
        let prepared = direct
            .prepare(key, cached.as_ref().and_then(|c| c.doc.as_deref()))
            .await?;
        if matches!(prepared.store_clock, StoreClock::None) {
            // Without a clock, leases are judged by observing documents as they are read: the
            // CAS path reads them where the observer sees them.
            return Ok(Update::Fallback {
                seen: cached.map(Box::new),
                read: false,
            });
        }
        let prepared = Arc::new(prepared);
        let found: Arc<Mutex<Option<Found>>> = Arc::default();
        let compute = {
            let (key, request) = (key.to_owned(), request.clone());
            let (prepared, found) = (prepared.clone(), found.clone());
            Box::new(move |current: Option<&Versioned>| {
                let (what, change) = compute(&key, &request, &prepared, cached, current);
                *found.lock().unwrap_or_else(PoisonError::into_inner) = Some(what);
                change
            })
        };
        let updated = direct.store.update(key, compute).await;
        let found = found.lock().unwrap_or_else(PoisonError::into_inner).take();
        match updated {
            Err(StoreError::Ambiguous { .. }) => {
                // Only a computation that wrote can have landed.
                if let Some(Found::Write { applied, before }) = found {
                    lost.ambiguous(request, before.as_deref(), prepared.basis, applied.granted);
                }
                direct.known.forget(key);
                Ok(Update::Fallback {
                    seen: None,
                    read: false,
                })
            }
            updated => self.settle(key, updated, found, &prepared, lost),
        }
    }

    /// What the store's answer and the computation's finding come to: the answer, a refusal,
    /// or the optimistic path from what was seen.
    fn settle(
        &self,
        key: &str,
        updated: Result<Option<Updated>, StoreError>,
        found: Option<Found>,
        prepared: &Prepared,
        lost: &mut Lost,
    ) -> Result<Update, ClientError> {
        let direct = self.direct();
        match (updated, found) {
            (Ok(Some(Updated::Written { version })), Some(Found::Write { applied, .. })) => Ok(
                Update::Done(Box::new(direct.written(key, applied, version, prepared))),
            ),
            (Ok(Some(Updated::Kept)), Some(Found::Unchanged { seen, applied })) => {
                direct.known.remember(key, seen.version, seen.doc);
                Ok(Update::Done(Box::new(
                    std::mem::take(lost).unchanged(applied),
                )))
            }
            (Ok(Some(Updated::Kept)), Some(Found::Refused { seen, refusal })) => {
                direct.known.remember(key, seen.version, seen.doc);
                Err(ClientError::Refused {
                    key: key.to_owned(),
                    refusal,
                })
            }
            (Ok(Some(Updated::Kept)), Some(Found::OtherSegment { seen })) => Ok(Update::Fallback {
                seen: Some(Box::new(seen)),
                read: true,
            }),
            (Ok(Some(Updated::Kept)), Some(Found::Failed(error))) => {
                direct.known.forget(key);
                Err(error)
            }
            (Ok(None), _) => Ok(Update::Fallback {
                seen: None,
                read: false,
            }),
            (Err(error), _) => {
                direct.known.forget(key);
                Err(error.into())
            }
            (Ok(Some(updated)), _) => {
                direct.known.forget(key);
                Err(ClientError::Store(StoreError::Backend {
                    store: direct.store.describe(),
                    source: format!(
                        "the store's update answered {updated:?}, which is not what its \
                         computation asked for"
                    )
                    .into(),
                }))
            }
        }
    }
}

/// The core's work under the store's lock: `request` applied to `current` (decoded, or taken
/// from `cached` when that is its version), and what to write.
fn compute(
    key: &str,
    request: &Request,
    prepared: &Prepared,
    cached: Option<Cached>,
    current: Option<&Versioned>,
) -> (Found, Change) {
    let doc = match (current, cached) {
        (None, _) => None,
        (Some(current), Some(Cached { version, doc, .. }))
            if version.as_ref() == Some(&current.version) =>
        {
            doc
        }
        (Some(current), _) => match decode(&current.bytes) {
            Ok(doc) => Some(Arc::new(doc)),
            Err(source) => {
                let error = ClientError::Corrupt {
                    key: key.to_owned(),
                    source,
                };
                return (Found::Failed(error), Change::Keep);
            }
        },
    };
    // Stores that lock keep no arrivals (none is ever read here).
    let seen = Cached::new(current.map(|current| current.version.clone()), doc);
    if seen.doc.as_deref().and_then(Doc::segment_wanted) != prepared.wanted {
        return (Found::OtherSegment { seen }, Change::Keep);
    }
    let applied = match prepared.apply(key, seen.doc.as_deref(), &seen.arrivals, request) {
        Ok(applied) => applied,
        Err(refusal) => return (Found::Refused { seen, refusal }, Change::Keep),
    };
    if !applied.changed {
        return (Found::Unchanged { seen, applied }, Change::Keep);
    }
    match prepared.replacement(key, &applied) {
        Ok(replacement) => {
            // Under the lock the document written over is the one computed from: only those
            // whose tickets the write changed need waking.
            let before = seen.doc;
            let replacement =
                waking_only_changed(replacement, before.as_deref(), &applied.doc, request);
            (Found::Write { applied, before }, Change::Write(replacement))
        }
        Err(error) => (Found::Failed(error), Change::Keep),
    }
}
