//! Optimistic writes: load → `core::apply` → compare-and-swap, and on a conflict apply again to
//! the document the conflict returned.
//!
//! A warm client keeps each key's last document and version, so an uncontended operation costs
//! one round trip (the CAS); a stale cache costs a conflict, which returns the current document
//! where the store can (an enqueue that only queues its ticket first yields: the retry policy's
//! [`Conflicts::yield_one`]). An answer computed from a cached document is trusted only if it
//! writes (the CAS proves the cache was current); a refusal or an unchanged result from a
//! cached document is recomputed from a fresh read before it is reported.
//!
//! Shared values are written the same way ([`write_value_by_cas`]), each judged again against
//! the document that won a conflict, so `--if-version`, `--if-absent` and `--fence` hold at the
//! moment of the write.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use baton_core::kv::{self, ValueDoc, Write};
use baton_core::{names, Applied, Request};
use baton_store::{CasOutcome, Store, StoreError, Versioned};

use super::direct::{Direct, Lost, Prepared};
use super::{freezing, Executed, Executor};
use crate::error::ClientError;
use crate::known::Cached;
use crate::retry::{queues_only, AfterConflict, Conflicts, OPERATION_CONFLICTS, VALUE_CONFLICTS};
use crate::settings::{read_freezes, Freezes, SettingsChange, SettingsChanged};
use crate::time::{mono_ms, wall_ms};

/// Optimistic writes to a store.
#[derive(Debug)]
pub(crate) struct Optimistic(pub(super) Direct);

/// What [`Optimistic::run_from`] does when a CAS loses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnConflict {
    /// Computes again and retries, as the retry policy says.
    Retry,
    /// Stops and hands the document the conflict returned back to the caller.
    HandOver,
}

/// How [`Optimistic::run_from`] ended.
pub(super) enum Ran {
    /// With an answer (boxed: it carries a document, the other variant shares one).
    Done(Box<Executed>),
    /// A CAS lost ([`OnConflict::HandOver`]): the document it returned (`None`: read it), and
    /// what earlier attempts that may have landed left.
    HandedOver { current: Option<Cached>, lost: Lost },
}

/// How one CAS of an operation's write ended.
enum Wrote {
    /// Written: the answer.
    Done(Executed),
    /// Another write came first: the document it left, where the store returned it.
    Conflict(Option<Versioned>),
    /// The answer was lost: the write may have landed.
    Ambiguous(Applied),
}

impl Optimistic {
    /// Writes through `direct`.
    pub(crate) fn new(direct: Direct) -> Optimistic {
        Optimistic(direct)
    }

    /// Runs `request` on `key` by optimistic writes, starting from `current` (a fresh read
    /// when `None`; `fresh`: `current` is as fresh as a read), with what earlier attempts that
    /// may have landed left in `lost`; a lost CAS is retried or handed over (`on_conflict`).
    pub(super) async fn run_from(
        &self,
        key: &str,
        request: &mut Request,
        mut current: Option<Cached>,
        mut fresh: bool,
        mut lost: Lost,
        on_conflict: OnConflict,
    ) -> Result<Ran, ClientError> {
        let direct = &self.0;
        let mut conflicts = Conflicts::new(OPERATION_CONFLICTS);
        loop {
            let cached = match current.take() {
                Some(cached) => cached,
                None => {
                    fresh = true;
                    direct.known.load(direct.store.as_ref(), key).await?
                }
            };
            let prepared = direct.prepare(key, cached.doc.as_deref()).await?;
            let applied =
                match prepared.apply(key, cached.doc.as_deref(), &cached.arrivals, request) {
                    Ok(applied) => applied,
                    Err(_) if !fresh => continue,
                    Err(refusal) => {
                        return Err(ClientError::Refused {
                            key: key.to_string(),
                            refusal,
                        })
                    }
                };
            if !applied.changed {
                if !fresh {
                    continue;
                }
                return Ok(Ran::Done(Box::new(lost.unchanged(applied))));
            }
            let yields = queues_only(request, &applied);
            let sent = Instant::now();
            // Whom it wakes matters only to a store that passes by the waiters of other tickets.
            let wake = direct
                .store
                .capabilities()
                .watch_tagged
                .then(|| super::direct::to_wake(cached.doc.as_deref(), &applied.doc, request))
                .flatten();
            match self.write(key, &cached, &prepared, applied, wake).await? {
                Wrote::Done(executed) => return Ok(Ran::Done(Box::new(executed))),
                Wrote::Conflict(now) if on_conflict == OnConflict::HandOver => {
                    direct.known.conflicted();
                    let current = self.returned(key, now)?;
                    return Ok(Ran::HandedOver { current, lost });
                }
                Wrote::Conflict(now) => {
                    let took = yields.then(|| sent.elapsed());
                    current = self.after_conflict(key, now, &mut conflicts, took).await?;
                    fresh = current.is_some();
                }
                Wrote::Ambiguous(applied) => {
                    let (doc, basis) = (cached.doc.as_deref(), prepared.basis);
                    lost.ambiguous(request, doc, basis, applied.granted);
                    direct.known.forget(key);
                }
            }
        }
    }

    /// Writes `applied`, computed from `cached`, by CAS: the backlog segment it spilled first
    /// (a writer that dies in between leaves a segment the document never counts, or the very
    /// bytes a later writer writes again: `baton_core::backlog`), then the document, with its
    /// history entries and its place in the due index in the same write.
    async fn write(
        &self,
        key: &str,
        cached: &Cached,
        prepared: &Prepared,
        applied: Applied,
        wake: Option<Vec<String>>,
    ) -> Result<Wrote, ClientError> {
        let direct = &self.0;
        let replacement = prepared.replacement(key, &applied)?;
        for (name, record) in &replacement.records {
            direct.store.put_record(key, name, record).await?;
        }
        let written = direct
            .store
            .cas_waking(
                key,
                cached.version.as_ref(),
                &replacement.bytes,
                &replacement.history,
                replacement.due_ms,
                wake.as_deref(),
            )
            .await;
        match written {
            Ok(CasOutcome::Written { version }) => {
                Ok(Wrote::Done(direct.written(key, applied, version, prepared)))
            }
            Ok(CasOutcome::Conflict { current }) => Ok(Wrote::Conflict(current)),
            Err(StoreError::Ambiguous { .. }) => Ok(Wrote::Ambiguous(applied)),
            Err(error) => {
                direct.known.forget(key);
                Err(error.into())
            }
        }
    }

    /// After a conflict: the document to compute from next (`None`: read it), as the retry
    /// policy says ([`Conflicts::lost_one`]; [`Conflicts::yield_one`] for a write that only
    /// queued a ticket, whose CAS took `yielding`).
    async fn after_conflict(
        &self,
        key: &str,
        now: Option<Versioned>,
        conflicts: &mut Conflicts,
        yielding: Option<Duration>,
    ) -> Result<Option<Cached>, ClientError> {
        self.0.known.conflicted();
        let returned = self.returned(key, now)?;
        if let Some(took) = yielding.filter(|_| conflicts.may_yield()) {
            conflicts.yield_one(key, took).await?;
            return Ok(returned);
        }
        Ok(match conflicts.lost_one(key).await? {
            AfterConflict::Again => returned,
            AfterConflict::ReadAgain => None,
        })
    }

    /// The document a lost CAS returned (`now`), to compute from next: `None` when the store
    /// does not return it (read it then).
    fn returned(&self, key: &str, now: Option<Versioned>) -> Result<Option<Cached>, ClientError> {
        let direct = &self.0;
        let returns_current = direct.store.capabilities().conflict_returns_current;
        Ok(match now {
            Some(versioned) => Some(direct.known.decode(key, versioned)?),
            None if returns_current => Some(Cached::new(None, None)),
            None => None,
        })
    }

    /// [`Optimistic::run_from`] until it answers, every lost CAS retried.
    pub(super) async fn run_retrying(
        &self,
        key: &str,
        request: &mut Request,
        mut current: Option<Cached>,
        mut fresh: bool,
        mut lost: Lost,
    ) -> Result<Executed, ClientError> {
        loop {
            let ran = self
                .run_from(key, request, current, fresh, lost, OnConflict::Retry)
                .await?;
            match ran {
                Ran::Done(executed) => return Ok(*executed),
                // Not sent by a run that retries; were it, the run would go on from there.
                Ran::HandedOver {
                    current: returned,
                    lost: left,
                } => (current, fresh, lost) = (returned, true, left),
            }
        }
    }
}

#[async_trait]
impl Executor for Optimistic {
    async fn run(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        let direct = &self.0;
        let current = direct.known.cached(key);
        let ran = self
            .run_retrying(key, request, current, false, Lost::of(request))
            .await;
        direct.settings.prefetch(&direct.store, mono_ms());
        ran
    }

    async fn write_value(&self, name: &str, write: &Write) -> Result<u64, ClientError> {
        write_value_by_cas(self.0.store.as_ref(), name, write).await
    }

    async fn change_settings(
        &self,
        change: SettingsChange,
    ) -> Result<SettingsChanged, ClientError> {
        let direct = &self.0;
        freezing::change(self, &direct.store, &direct.settings, change).await
    }

    async fn freezes(&self) -> Result<Freezes, ClientError> {
        read_freezes(self.0.store.as_ref()).await
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
        Ok(self.0.store.put_record(key, name, bytes).await?)
    }
}

/// Writes `write` to shared value `name` in `store` by CAS. A write id found among the value's
/// last writes is this write's own (ids are made fresh for each), landed earlier unseen: its
/// version is the answer, whether or not this call saw an attempt's answer lost (a server runs
/// a client's retry as a first attempt of its own). After a lost answer the write carries the
/// version its first attempt was judged against ([`Write::seen_version`], unless the caller
/// set an earlier one), so that the core refuses it as uncertain when more writes landed since
/// than the value remembers, rather than applying it twice.
pub(crate) async fn write_value_by_cas(
    store: &dyn Store,
    name: &str,
    write: &Write,
) -> Result<u64, ClientError> {
    kv::check_write(name, write).map_err(|e| ClientError::refused(name, e))?;
    let key = names::value_key(name);
    let mut write = write.clone();
    let mut conflicts = Conflicts::new(VALUE_CONFLICTS);
    let mut read = store.load(&key).await?;
    loop {
        let doc = decoded_value(name, read.as_ref())?;
        if let Some(version) = doc.as_ref().and_then(|doc| doc.written_by(&write.id)) {
            return Ok(version);
        }
        let based_on = doc.as_ref().map_or(0, |doc| doc.version);
        let next = kv::write(doc.as_ref(), &write, wall_ms()).map_err(|refusal| {
            ClientError::ValueRefused {
                name: name.to_owned(),
                refusal,
            }
        })?;
        let expected = read.as_ref().map(|r| &r.version);
        match store.cas(&key, expected, &kv::encode(&next), &[]).await {
            Ok(CasOutcome::Written { .. }) => return Ok(next.version),
            Ok(CasOutcome::Conflict { current }) => {
                read = match (conflicts.lost_one(name).await?, current) {
                    (AfterConflict::Again, Some(current)) => Some(current),
                    _ => store.load(&key).await?,
                };
            }
            Err(StoreError::Ambiguous { .. }) => {
                write.seen_version.get_or_insert(based_on);
                read = store.load(&key).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// A shared value's document as read (`None`: it has none).
pub(crate) fn decoded_value(
    name: &str,
    read: Option<&Versioned>,
) -> Result<Option<ValueDoc>, ClientError> {
    read.map(|r| kv::decode(&r.bytes))
        .transpose()
        .map_err(|source| ClientError::ValueCorrupt {
            name: name.to_owned(),
            source,
        })
}
