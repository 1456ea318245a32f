//! The CAS of a key's hot object, in the steps every store's `cas_due` takes: what the expected
//! version stands for (the cached or read record, or a conflict found without writing), the
//! conditional PUT, and what its answer means.

use std::ops::ControlFlow;

use object_store::{ObjectStore, PutMode, PutPayload, PutResult, UpdateVersion};

use super::errors::Call;
use super::{is_sendable, S3Store};
use crate::deferred::Hot;
use crate::{CasOutcome, Result, StoreError, Version, Versioned};

impl S3Store {
    /// The record a CAS naming `expected` plans from, with its ETag: none for a create, else
    /// the cached record if it has that ETag, else the one read. A stale version (or one this
    /// store never handed out) breaks with the conflict to answer, with no write needed.
    pub(super) async fn resolve_expected(
        &self,
        key: &str,
        expected: Option<&Version>,
    ) -> Result<ControlFlow<CasOutcome, Option<(Version, Hot)>>> {
        let Some(version) = expected else {
            return Ok(ControlFlow::Continue(None));
        };
        // Not an ETag: not a version this store handed out, so stale by definition.
        if !is_sendable(version) {
            return Ok(ControlFlow::Break(CasOutcome::Conflict { current: None }));
        }
        if let Some(hot) = self.cached(key, version) {
            return Ok(ControlFlow::Continue(Some((version.clone(), hot))));
        }
        Ok(match self.read_hot(key).await? {
            None => ControlFlow::Break(CasOutcome::Conflict { current: None }),
            Some((found, hot)) if &found != version => ControlFlow::Break(CasOutcome::Conflict {
                current: Some(Versioned {
                    version: found,
                    bytes: hot.doc,
                    arrivals: Vec::new(),
                }),
            }),
            Some(current) => ControlFlow::Continue(Some(current)),
        })
    }

    /// PUTs `next` as `key`'s hot object, on condition that there is none (`current` is
    /// `None`) or that its ETag is still `current`'s.
    pub(super) async fn put_hot(
        &self,
        key: &str,
        current: Option<&Version>,
        next: &Hot,
    ) -> Result<object_store::Result<PutResult>> {
        let path = self.path(&self.inner.layout.hot(key))?;
        let mode = match current {
            None => PutMode::Create,
            Some(version) => PutMode::Update(UpdateVersion {
                e_tag: Some(version.0.clone()),
                version: None,
            }),
        };
        Ok(self
            .inner
            .writes
            .put_opts(&path, PutPayload::from(next.encode()), mode.into())
            .await)
    }

    /// What the PUT of `next` came to: written under its new ETag (remembered), or a conflict;
    /// an answer without an ETag may or may not have been applied.
    pub(super) fn outcome_of_write(
        &self,
        key: &str,
        answer: object_store::Result<PutResult>,
        next: Hot,
    ) -> Result<CasOutcome> {
        match answer {
            Ok(result) => match result.e_tag {
                Some(etag) => {
                    let version = Version(etag);
                    self.remember(key, version.clone(), next);
                    Ok(CasOutcome::Written { version })
                }
                None => {
                    self.forget(key);
                    Err(StoreError::Ambiguous {
                        store: self.inner.context.store.clone(),
                        reason: "the server answered a conditional write without an ETag".into(),
                    })
                }
            },
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => {
                self.forget(key);
                Ok(CasOutcome::Conflict { current: None })
            }
            Err(error) => {
                self.forget(key);
                Err(self.classify(Call::PutHot, error))
            }
        }
    }
}
