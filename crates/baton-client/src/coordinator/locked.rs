//! [`Coordinator::execute`] on a store with locked updates
//! ([`baton_store::Capabilities::locked_update`]): the core's apply runs inside the store's
//! write transaction, on the document read in it, so the write never loses a CAS.
//!
//! On a hot key, optimistic writers lose CASes to each other, retry and back off; a releasing
//! holder that backs off stalls the whole queue behind it (BENCHMARKS.md, B3). Under the lock
//! each write costs one transaction whatever the contention. The rules are the core's, as on
//! the CAS path: only where the core's work happens moves.

use std::sync::{Arc, Mutex, PoisonError};

use baton_core::op::Refusal;
use baton_core::{decode, Applied, Doc, Request};
use baton_store::{Change, StoreClock, StoreError, Updated, Versioned};

use super::{Cached, Coordinator, Executed, Lost, Prepared};
use crate::error::ClientError;

/// How a locked update ended.
pub(super) enum Locked {
    /// With an answer.
    Done(Executed),
    /// Without one: the CAS path takes over from `seen` (`read`: as read under the lock, as
    /// fresh as a load), or from a fresh read when `None`.
    Fallback { seen: Option<Cached>, read: bool },
}

/// What the computation found under the store's lock, for the answer.
enum Found {
    /// It wrote `applied`, computed from `before`.
    Write {
        applied: Applied,
        before: Option<Doc>,
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

impl Coordinator {
    /// Runs `request` on `key` in one [`baton_store::Store::update`], starting from `cached`
    /// where the document under the lock is still that version (no decode needed).
    pub(super) async fn execute_locked(
        &self,
        key: &str,
        request: &mut Request,
        cached: Option<Cached>,
        lost: &mut Lost,
    ) -> Result<Locked, ClientError> {
        let prepared = self
            .prepare(key, cached.as_ref().and_then(|c| c.doc.as_ref()))
            .await?;
        if matches!(prepared.store_clock, StoreClock::None) {
            // Without a clock, leases are judged by observing documents as they are read: the
            // CAS path reads them where the observer sees them.
            return Ok(Locked::Fallback {
                seen: cached,
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
        let updated = self.store.update(key, compute).await;
        let found = found.lock().unwrap_or_else(PoisonError::into_inner).take();
        match (updated, found) {
            (Ok(Some(Updated::Written { version })), Some(Found::Write { applied, .. })) => {
                Ok(Locked::Done(self.written(key, applied, version, &prepared)))
            }
            (Ok(Some(Updated::Kept)), Some(Found::Unchanged { seen, applied })) => {
                self.remember(key, seen.version, seen.doc);
                Ok(Locked::Done(std::mem::take(lost).unchanged(applied)))
            }
            (Ok(Some(Updated::Kept)), Some(Found::Refused { seen, refusal })) => {
                self.remember(key, seen.version, seen.doc);
                Err(ClientError::Refused {
                    key: key.to_owned(),
                    refusal,
                })
            }
            (Ok(Some(Updated::Kept)), Some(Found::OtherSegment { seen })) => Ok(Locked::Fallback {
                seen: Some(seen),
                read: true,
            }),
            (Ok(Some(Updated::Kept)), Some(Found::Failed(error))) => {
                self.forget(key);
                Err(error)
            }
            (Ok(None), _) => Ok(Locked::Fallback {
                seen: None,
                read: false,
            }),
            (Err(StoreError::Ambiguous { .. }), found) => {
                // Only a computation that wrote can have landed.
                if let Some(Found::Write { applied, before }) = found {
                    lost.ambiguous(request, before.as_ref(), prepared.basis, applied.granted);
                }
                self.forget(key);
                Ok(Locked::Fallback {
                    seen: None,
                    read: false,
                })
            }
            (Err(error), _) => {
                self.forget(key);
                Err(error.into())
            }
            (Ok(Some(updated)), _) => {
                self.forget(key);
                Err(ClientError::Store(StoreError::Backend {
                    store: self.store.describe(),
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
        (Some(current), Some(Cached { version, doc }))
            if version.as_ref() == Some(&current.version) =>
        {
            doc
        }
        (Some(current), _) => match decode(&current.bytes) {
            Ok(doc) => Some(doc),
            Err(source) => {
                let error = ClientError::Corrupt {
                    key: key.to_owned(),
                    source,
                };
                return (Found::Failed(error), Change::Keep);
            }
        },
    };
    let seen = Cached {
        version: current.map(|current| current.version.clone()),
        doc,
    };
    if seen.doc.as_ref().and_then(Doc::segment_wanted) != prepared.wanted {
        return (Found::OtherSegment { seen }, Change::Keep);
    }
    let applied = match prepared.apply(key, seen.doc.as_ref(), request) {
        Ok(applied) => applied,
        Err(refusal) => return (Found::Refused { seen, refusal }, Change::Keep),
    };
    if !applied.changed {
        return (Found::Unchanged { seen, applied }, Change::Keep);
    }
    match prepared.replacement(key, &applied) {
        Ok(replacement) => (
            Found::Write {
                applied,
                before: seen.doc,
            },
            Change::Write(replacement),
        ),
        Err(error) => (Found::Failed(error), Change::Keep),
    }
}
