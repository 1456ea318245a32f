//! History entries stored as objects of their own: written when a CAS moves them out of the
//! hot record, listed and read back by seq.

use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use tokio::task::JoinSet;

use super::errors::{self, Call};
use super::layout::Layout;
use super::{S3Store, LIST_PAGE, PARALLEL_REQUESTS};
use crate::{HistoryRecord, Result};

impl S3Store {
    /// Stores `records` as history objects of `key`, all at once (each write is idempotent:
    /// the same bytes to the same name).
    pub(super) async fn store_entries(&self, key: &str, records: &[HistoryRecord]) -> Result<()> {
        let mut tasks = JoinSet::new();
        for record in records {
            if tasks.len() >= PARALLEL_REQUESTS {
                self.joined_put(tasks.join_next().await).await?;
            }
            let path = self.path(&self.inner.layout.history(key, record.seq))?;
            let payload = PutPayload::from(record.bytes.clone());
            let s3 = self.inner.reads.clone();
            tasks.spawn(async move { s3.put(&path, payload).await.map(drop) });
        }
        while let Some(joined) = tasks.join_next().await {
            self.joined_put(Some(joined)).await?;
        }
        Ok(())
    }

    async fn joined_put(
        &self,
        joined: Option<std::result::Result<object_store::Result<()>, tokio::task::JoinError>>,
    ) -> Result<()> {
        match joined {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(error))) => Err(self.classify(Call::PutEntry, error)),
            Some(Err(error)) => Err(self.backend(format!("a history write failed: {error}"))),
        }
    }

    /// Stored history entries of `key` with `after_seq < seq < below_seq`, at most `limit`,
    /// oldest first. Entries that vanish between the LIST and the GET (deleted by hand or by a
    /// lifecycle rule) are left out.
    pub(super) async fn stored_entries(
        &self,
        key: &str,
        after_seq: u64,
        below_seq: u64,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>> {
        let wanted = self.list_stored(key, after_seq, below_seq, limit).await?;
        self.get_stored(wanted).await
    }

    /// The names of `key`'s stored entries with `after_seq < seq < below_seq`, at most
    /// `limit`, by seq: LIST pages from `after_seq`'s name on.
    async fn list_stored(
        &self,
        key: &str,
        after_seq: u64,
        below_seq: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Path)>> {
        let layout = &self.inner.layout;
        let prefix = layout.history_prefix(key);
        let mut wanted: Vec<(u64, Path)> = Vec::new();
        let mut options = PaginatedListOptions {
            offset: Some(layout.history(key, after_seq)),
            ..PaginatedListOptions::default()
        };
        'pages: loop {
            options.max_keys = Some(limit.saturating_sub(wanted.len()).clamp(1, LIST_PAGE));
            let page = self
                .inner
                .reads
                .list_paginated(Some(&prefix), options.clone())
                .await
                .map_err(|error| self.classify(Call::List, error))?;
            let mut names: Vec<(u64, Path)> = page
                .result
                .objects
                .into_iter()
                .filter_map(|meta| {
                    let seq = Layout::seq_of_history(&prefix, meta.location.as_ref())?;
                    Some((seq, meta.location))
                })
                .collect();
            names.sort_by_key(|(seq, _)| *seq);
            for (seq, path) in names {
                if seq <= after_seq {
                    continue;
                }
                if seq >= below_seq || wanted.len() >= limit {
                    break 'pages;
                }
                wanted.push((seq, path));
            }
            match page.page_token {
                Some(token) if wanted.len() < limit => options.page_token = Some(token),
                _ => break,
            }
        }
        Ok(wanted)
    }

    /// GETs the `wanted` entries, [`PARALLEL_REQUESTS`] at a time; one gone meanwhile is left
    /// out. Oldest first.
    async fn get_stored(&self, wanted: Vec<(u64, Path)>) -> Result<Vec<HistoryRecord>> {
        let mut records = Vec::with_capacity(wanted.len());
        let mut tasks = JoinSet::new();
        let mut wanted = wanted.into_iter();
        loop {
            while tasks.len() < PARALLEL_REQUESTS {
                let Some((seq, path)) = wanted.next() else {
                    break;
                };
                let s3 = self.inner.reads.clone();
                tasks.spawn(async move {
                    let bytes = match s3.get(&path).await {
                        Ok(result) => result.bytes().await.map(|bytes| Some(bytes.to_vec())),
                        Err(error) if errors::is_missing_object(&error) => Ok(None),
                        Err(error) => Err(error),
                    };
                    (seq, bytes)
                });
            }
            let Some(joined) = tasks.join_next().await else {
                break;
            };
            match joined {
                Ok((seq, Ok(Some(bytes)))) => records.push(HistoryRecord { seq, bytes }),
                Ok((_, Ok(None))) => {}
                Ok((_, Err(error))) => return Err(self.classify(Call::Get, error)),
                Err(error) => return Err(self.backend(format!("a history read failed: {error}"))),
            }
        }
        records.sort_by_key(|record| record.seq);
        Ok(records)
    }
}
