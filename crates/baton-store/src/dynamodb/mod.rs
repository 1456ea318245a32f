//! The DynamoDB store: one table, a key's hot record as one item changed by conditional
//! writes, its history as one item per entry.
//!
//! URL: `dynamodb://TABLE`. Credentials, region and endpoint come from the standard AWS chain
//! ([`crate::aws`]); `AWS_ENDPOINT_URL` or `AWS_ENDPOINT_URL_DYNAMODB` point it at a
//! DynamoDB-compatible server (with one set and no region configured, the region defaults to
//! `us-east-1`, which local servers ignore). `baton init --store dynamodb://TABLE` creates the
//! table ([`DynamoStore::init`]); opening the store never does, so everyday use needs no
//! `dynamodb:CreateTable`.
//!
//! - **Layout** (the `layout` module): `pk` and `sk`, both strings. Hot records at
//!   (`d`, KEY), history entries at (`h/KEY`, zero-padded SEQ), records at (`r/KEY`, NAME). All hot records share one
//!   partition so that `list(prefix)` is one Query with `begins_with` on the sort key, in
//!   DynamoDB's UTF-8 byte order, never a Scan of the whole table. A global secondary index
//!   would spread the hot records, but an index is eventually consistent (a key just created
//!   could be missing from `list`) and an index that projects changing attributes bills every
//!   write twice; DynamoDB splits a busy partition between sort keys by itself.
//! - **Version**: a string attribute `v` = `GENERATION-NONCE`, new at every write (the nonce
//!   is 64 random bits), so a version cached before a table was restored from a backup never
//!   matches a different record.
//! - **CAS**: one `PutItem` of the hot item with `attribute_not_exists(pk)` (create) or
//!   `v = :expected`, and `ReturnValuesOnConditionCheckFailure = ALL_OLD`, so a conflict
//!   carries the current record in the same round trip. The store caches the last record it
//!   read or wrote per key: a CAS naming that version plans from it with no read; any other
//!   version is read first (a `GetItem`), and a stale one is answered as a conflict without a
//!   write. A conflict whose current record carries the very version this CAS wrote is the
//!   SDK's retry of a write that had succeeded: it is reported as written.
//! - **History** ([`crate::deferred`]): a CAS's entries ride in the hot item; a later CAS first
//!   stores them as items of their own (`BatchWriteItem`, idempotent: same seq, same bytes), then
//!   writes a hot item without them. No multi-item transaction, which would bill every item
//!   twice.
//! - **Cost**: DynamoDB bills a write by the item's size (1 write unit per started KB; a
//!   `PutItem` bills the larger of the old and the new item). The [`Policy`] keeps pending
//!   entries only while they fit in the write units the hot item costs anyway, and at most
//!   [`MAX_PENDING`] of them, so that an uncontended acquire + release costs two hot writes
//!   and at most two history items, however long the history: at most 4 units, 3 on average,
//!   while the hot item with one entry fits in 1 KB (a document of up to about 600 bytes with a
//!   short key and context). A larger document costs its own units twice per acquire + release.
//!   [`DynamoStore::write_units`] counts the units DynamoDB reports;
//!   [`DynamoStore::estimated_write_units`] computes them from the item sizes (local servers
//!   such as moto report 1 unit per request whatever its size).
//! - **Records**: one unconditional `PutItem` (replacing the item; writing the same bytes again
//!   is harmless) or one strongly consistent `GetItem`, outside any CAS. A record of
//!   [`crate::RECORD_MAX_BYTES`] is billed about 320 write units.
//! - **Watch**: none (DynamoDB cannot push); waiters poll.
//! - **Clock**: none ([`StoreClock::None`]): leases are judged by observation of unchanged
//!   heartbeats on each observer's monotonic clock, as on etcd, so clients' wall clocks may
//!   disagree by any amount. (Requests are signed with the client's wall clock, and AWS refuses
//!   signatures more than 15 minutes off.)
//! - **Errors**: a write given up after it was sent (a timeout, a dropped connection, a 5xx) is
//!   [`StoreError::Ambiguous`]; the coordinator re-reads and recognises its own write. A refused
//!   permission is [`StoreError::Denied`] naming the IAM action; a missing table says to run
//!   `baton init`.
//!
//! IAM actions used, all on the table's ARN: `dynamodb:GetItem`, `dynamodb:PutItem`,
//! `dynamodb:BatchWriteItem`, `dynamodb:Query`; and for `baton init` only,
//! `dynamodb:DescribeTable`, `dynamodb:CreateTable`, `dynamodb:DescribeTimeToLive` and
//! `dynamodb:UpdateTimeToLive` (history items expire by the table's TTL on attribute `x`,
//! `history_max_age` after they are stored, 90 days by default: baton deletes nothing).
//!
//! Limits: a hot item (the document, plus the entries of the last CAS) must fit in DynamoDB's
//! 400 KB item: the largest document (256 KiB) leaves about 140 KB for the history entries of
//! one CAS.

mod cas;
mod errors;
pub mod layout;
mod table;
pub mod url;

use std::collections::HashMap;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, ReturnConsumedCapacity, WriteRequest};
use aws_sdk_dynamodb::Client;

use crate::deferred::{self, Hot, Policy};
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, HistoryRecord, Result, Store,
    StoreClock, StoreError, Version, Versioned, WatchHandle,
};
use errors::{classify, Context, Effect};
use layout::{ITEM_MAX_BYTES, PK, SK, VERSION};
pub use url::is_dynamodb_url;
use url::parse_url;

/// At most this many history entries wait in a hot item, so that moving them out never costs
/// one operation more than two extra write units.
pub const MAX_PENDING: usize = 2;

/// `BatchWriteItem` takes at most 25 items.
const BATCH_MAX: usize = 25;

/// How often a batch's unprocessed items (DynamoDB throttling part of a batch) are sent again.
const BATCH_TRIES: u32 = 8;

/// Items per Query page asked for (DynamoDB also stops a page at 1 MB).
const PAGE_MAX: usize = 1_000;

/// Hot records remembered per store, so that a warm CAS needs no read. Cleared when full.
const CACHE_MAX_KEYS: usize = 1_024;

/// ... and their bytes (a document may be 256 KiB: a thousand of those would be too many).
const CACHE_MAX_BYTES: usize = 32 * 1024 * 1024;

/// The bytes of a hot item besides the document and the pending entries: names, partition,
/// the longest version (`u64-16 hex`), and the record's fixed fields.
const HOT_ITEM_OVERHEAD: usize = (PK.len() + 1) + SK.len() + (VERSION.len() + 37) + 1 + 34;

/// What [`Hot::encode`] adds per pending entry besides its bytes.
const PENDING_ENTRY_OVERHEAD: usize = 12;

/// A [`Store`] on one DynamoDB table. Cheap to clone; clones share the client.
#[derive(Clone)]
pub struct DynamoStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    table: String,
    /// `dynamodb://TABLE`.
    description: String,
    /// The last hot record read or written per key.
    cache: Mutex<HashMap<String, Arc<Current>>>,
    /// Write units DynamoDB reported, in thousandths.
    reported_milli_units: AtomicU64,
    /// Write units computed from the sizes of the items written.
    estimated_units: AtomicU64,
    /// How long a history item lives (its TTL attribute: now + this, when stored).
    history_max_age: std::time::Duration,
}

/// A key's hot record as stored.
#[derive(Debug)]
struct Current {
    version: Version,
    hot: Hot,
    /// The item's billed size.
    item_bytes: usize,
}

impl Current {
    fn versioned(&self) -> Versioned {
        Versioned {
            version: self.version.clone(),
            bytes: self.hot.doc.clone(),
            arrivals: Vec::new(),
        }
    }
}

impl fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.inner.table)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    /// Opens the store `url` names (`dynamodb://TABLE`). Loads the AWS configuration; sends
    /// nothing (the first operation does).
    pub async fn open(url: &str) -> Result<DynamoStore> {
        let (url, retention) = crate::history_retention::HistoryRetention::take_from_url(url)?;
        let url = url.as_str();
        if retention.keep != crate::history_retention::KEEP_DEFAULT {
            return Err(StoreError::BadUrl {
                url: url.to_owned(),
                reason: "DynamoDB keeps history by age only, through the table's TTL attribute \
                         (baton asks for no delete permission there): give `history_max_age`, \
                         not `history_keep`"
                    .to_owned(),
            });
        }
        let table = parse_url(url)?;
        let description = format!("dynamodb://{table}");
        let mut config = crate::aws::sdk_config().await;
        if config.region().is_none() {
            if !endpoint_overridden() {
                return Err(StoreError::Unusable {
                    store: description,
                    reason: "no AWS region configured; set AWS_REGION (or a region in the \
                             profile AWS_PROFILE names)"
                        .to_owned(),
                });
            }
            config = config
                .into_builder()
                .region(aws_sdk_dynamodb::config::Region::from_static("us-east-1"))
                .build();
        }
        Ok(DynamoStore {
            inner: Arc::new(Inner {
                client: Client::new(&config),
                table,
                description,
                cache: Mutex::new(HashMap::new()),
                reported_milli_units: AtomicU64::new(0),
                estimated_units: AtomicU64::new(0),
                history_max_age: retention.expiring_max_age(),
            }),
        })
    }

    /// The write capacity units DynamoDB reported for this store's writes so far.
    pub fn write_units(&self) -> f64 {
        self.inner.reported_milli_units.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// The write capacity units this store's writes cost by DynamoDB's billing rules, computed
    /// from the sizes of the items written: for checking a server's reports, and for servers
    /// that report none faithfully.
    pub fn estimated_write_units(&self) -> u64 {
        self.inner.estimated_units.load(Ordering::Relaxed)
    }

    /// The size DynamoDB bills for `key`'s hot item as this store last read or wrote it.
    pub fn cached_item_bytes(&self, key: &str) -> Option<usize> {
        self.cache_get(key).map(|current| current.item_bytes)
    }

    fn context(&self, action: &'static str, effect: Effect) -> Context<'_> {
        Context {
            store: &self.inner.description,
            table: &self.inner.table,
            action,
            effect,
        }
    }

    fn count_units(&self, what: &str, reported: f64, estimated: u64) {
        let reported_milli = (reported.max(0.0) * 1000.0).round() as u64;
        let total = self
            .inner
            .reported_milli_units
            .fetch_add(reported_milli, Ordering::Relaxed)
            + reported_milli;
        let estimated_total = self
            .inner
            .estimated_units
            .fetch_add(estimated, Ordering::Relaxed)
            + estimated;
        tracing::debug!(
            table = %self.inner.table,
            what,
            reported,
            estimated,
            total_reported = total as f64 / 1000.0,
            total_estimated = estimated_total,
            "dynamodb write units"
        );
    }

    fn cache_get(&self, key: &str) -> Option<Arc<Current>> {
        let cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache.get(key).cloned()
    }

    fn cache_put(&self, key: &str, current: Arc<Current>) {
        let mut cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held_bytes: usize = cache.values().map(|cached| cached.item_bytes).sum();
        let full = cache.len() >= CACHE_MAX_KEYS
            || held_bytes.saturating_add(current.item_bytes) > CACHE_MAX_BYTES;
        if full && !cache.contains_key(key) {
            cache.clear();
        }
        cache.insert(key.to_owned(), current);
    }

    fn cache_forget(&self, key: &str) {
        let mut cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache.remove(key);
    }

    /// Reads `key`'s hot record (strongly consistent) and remembers it.
    async fn read_hot(&self, key: &str) -> Result<Option<Arc<Current>>> {
        let output = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(layout::hot_key(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| classify(self.context("dynamodb:GetItem", Effect::Read), error))?;
        let Some(item) = output.item else {
            self.cache_forget(key);
            return Ok(None);
        };
        let current = Arc::new(self.parse_current(&item)?);
        self.cache_put(key, current.clone());
        Ok(Some(current))
    }

    fn parse_current(&self, item: &HashMap<String, AttributeValue>) -> Result<Current> {
        let (version, hot) = layout::parse_hot(item, &self.inner.description)?;
        Ok(Current {
            version,
            hot,
            item_bytes: layout::item_bytes(item),
        })
    }

    /// Stores history entries as items of their own. Idempotent: an entry's item is named by
    /// its sequence number and always holds the same bytes.
    async fn store_history(&self, key: &str, records: &[HistoryRecord]) -> Result<()> {
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let expires_s = now_s.saturating_add(self.inner.history_max_age.as_secs());
        for chunk in records.chunks(BATCH_MAX) {
            let mut requests = Vec::with_capacity(chunk.len());
            for record in chunk {
                let put = PutRequest::builder()
                    .set_item(Some(layout::history_item(key, record, expires_s)))
                    .build()
                    .map_err(|error| {
                        self.backend(format!("cannot build a history write: {error}"))
                    })?;
                requests.push(WriteRequest::builder().put_request(put).build());
            }
            let mut n_tries = 0;
            while !requests.is_empty() {
                n_tries += 1;
                if n_tries > BATCH_TRIES {
                    return Err(StoreError::Unavailable {
                        store: self.inner.description.clone(),
                        reason: format!(
                            "DynamoDB left {} history items unwritten after {BATCH_TRIES} tries \
                             (throttled); the table `{}` needs more capacity",
                            requests.len(),
                            self.inner.table
                        ),
                    });
                }
                if n_tries > 1 {
                    let backoff_ms = 25u64 << (n_tries - 2).min(6);
                    tokio::time::sleep(std::time::Duration::from_millis(backoff_ms)).await;
                }
                let sent_units: u64 = requests.iter().map(request_units).sum();
                let output = self
                    .inner
                    .client
                    .batch_write_item()
                    .request_items(&self.inner.table, requests.clone())
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map_err(|error| {
                        classify(
                            self.context("dynamodb:BatchWriteItem", Effect::Idempotent),
                            error,
                        )
                    })?;
                let reported: f64 = output
                    .consumed_capacity()
                    .iter()
                    .filter_map(|capacity| capacity.capacity_units())
                    .sum();
                requests = output
                    .unprocessed_items
                    .and_then(|mut unprocessed| unprocessed.remove(&self.inner.table))
                    .unwrap_or_default();
                let unsent_units: u64 = requests.iter().map(request_units).sum();
                self.count_units(
                    "history items",
                    reported,
                    sent_units.saturating_sub(unsent_units),
                );
            }
        }
        Ok(())
    }

    /// Up to `limit` stored history items of `key`: after `after_seq` oldest first, or (with
    /// `None`) the newest first.
    async fn query_history(
        &self,
        key: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>> {
        let mut records = Vec::new();
        let mut start = None;
        while records.len() < limit {
            let page = (limit - records.len()).min(PAGE_MAX);
            let mut query = self
                .inner
                .client
                .query()
                .table_name(&self.inner.table)
                .consistent_read(true)
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(
                    ":pk",
                    AttributeValue::S(layout::history_partition(key)),
                )
                .limit(i32::try_from(page).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take());
            query = match after_seq {
                Some(after_seq) => query
                    .key_condition_expression("#pk = :pk AND #sk > :after")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(
                        ":after",
                        AttributeValue::S(layout::seq_sort_key(after_seq)),
                    ),
                None => query
                    .key_condition_expression("#pk = :pk")
                    .scan_index_forward(false),
            };
            let output = query
                .send()
                .await
                .map_err(|error| classify(self.context("dynamodb:Query", Effect::Read), error))?;
            for item in output.items() {
                records.push(layout::parse_history(item, &self.inner.description)?);
            }
            match output.last_evaluated_key {
                Some(last) if !last.is_empty() => start = Some(last),
                _ => break,
            }
        }
        records.truncate(limit);
        Ok(records)
    }

    fn backend(&self, message: String) -> StoreError {
        StoreError::Backend {
            store: self.inner.description.clone(),
            source: message.into(),
        }
    }
}

/// The units a batch's put request costs.
fn request_units(request: &WriteRequest) -> u64 {
    request
        .put_request()
        .map_or(0, |put| layout::write_units(layout::item_bytes(put.item())))
}

/// When pending entries move out of `key`'s hot item holding a document of `doc_len` bytes:
/// when there would be more than [`MAX_PENDING`], or when they would make the item cost a
/// write unit more than the document alone.
pub fn policy(key: &str, doc_len: usize) -> Policy {
    let base = HOT_ITEM_OVERHEAD + key.len() + doc_len;
    let units_bytes = layout::write_units(base) as usize * layout::WRITE_UNIT_BYTES;
    let room = units_bytes.saturating_sub(base);
    Policy {
        max_pending: MAX_PENDING,
        max_pending_bytes: room.saturating_sub(PENDING_ENTRY_OVERHEAD * (MAX_PENDING + 1)),
    }
}

/// A version no other write of this table has: the record's generation and 64 random bits.
fn new_version(generation: u64) -> Version {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded randomly per process; the counter and the time separate calls.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    Version(format!("{generation}-{:016x}", hasher.finish()))
}

/// Whether the environment points the SDK at another endpoint (a local server).
fn endpoint_overridden() -> bool {
    ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

#[async_trait]
impl Store for DynamoStore {
    fn describe(&self) -> String {
        self.inner.description.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: false,
            watch_documents: false,
            watch_tagged: false,
            conflict_returns_current: true,
            clock: false,
            clock_uncertain_ms: 0,
            due_index: false,
            locked_update: false,
            update_when_contended: false,
            watch_complete: false,
            arrivals: false,
            arrivals_by_default: false,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        Ok(self.read_hot(key).await?.map(|current| current.versioned()))
    }

    /// No due index here: a worker lists the keys and reads each (ARCHITECTURE.md states the
    /// cost), so `_due_ms` is not stored.
    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        _due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        let current = match self.resolve_expected(key, expected).await? {
            ControlFlow::Continue(current) => current,
            ControlFlow::Break(conflict) => return Ok(conflict),
        };
        let plan = deferred::plan(
            current.as_ref().map(|current| &current.hot),
            bytes,
            history,
            policy(key, bytes.len()),
        );
        let version = new_version(plan.next.generation);
        let item = layout::hot_item(key, &version, &plan.next);
        let item_bytes = layout::item_bytes(&item);
        if item_bytes > ITEM_MAX_BYTES {
            return Err(self.backend(format!(
                "the record of key {key:?} would be {item_bytes} bytes (a {}-byte document and \
                 {} history entries of one operation), more than DynamoDB's {ITEM_MAX_BYTES}-byte \
                 item limit",
                bytes.len(),
                plan.next.pending.len()
            )));
        }
        if !plan.flush.is_empty() {
            self.store_history(key, &plan.flush).await?;
        }
        let answer = self.put_hot(item, expected).await;
        let old_bytes = current.as_ref().map_or(0, |current| current.item_bytes);
        let written = Current {
            version,
            hot: plan.next,
            item_bytes,
        };
        self.outcome_of_write(key, answer, written, old_bytes)
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 || after_seq == u64::MAX {
            return Ok(Vec::new());
        }
        // The hot record first, then the stored items (see `deferred`).
        let hot = self.read_hot(key).await?;
        let stored = self.query_history(key, Some(after_seq), limit).await?;
        Ok(deferred::merge_after(
            stored,
            hot.as_ref().map(|current| &current.hot),
            after_seq,
            limit,
        ))
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let hot = self.read_hot(key).await?;
        let stored = self.query_history(key, None, limit).await?;
        Ok(deferred::merge_tail(
            stored,
            hot.as_ref().map(|current| &current.hot),
            limit,
        ))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut start = None;
        loop {
            let mut query = self
                .inner
                .client
                .query()
                .table_name(&self.inner.table)
                .consistent_read(true)
                .projection_expression("#sk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(
                    ":pk",
                    AttributeValue::S(layout::HOT_PARTITION.to_owned()),
                )
                .set_exclusive_start_key(start.take());
            // DynamoDB refuses an empty string in a key condition: no prefix, no condition.
            query = if prefix.is_empty() {
                query.key_condition_expression("#pk = :pk")
            } else {
                query
                    .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                    .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
            };
            let output = query
                .send()
                .await
                .map_err(|error| classify(self.context("dynamodb:Query", Effect::Read), error))?;
            keys.extend(
                output
                    .items()
                    .iter()
                    .filter_map(layout::key_of_hot)
                    .filter(|key| key.starts_with(prefix))
                    .map(str::to_owned),
            );
            match output.last_evaluated_key {
                Some(last) if !last.is_empty() => start = Some(last),
                _ => break,
            }
        }
        // DynamoDB returns sort keys in UTF-8 byte order already; a server that does not must
        // not break the contract.
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    async fn watch(&self, _key: &str) -> Result<Option<WatchHandle>> {
        Ok(None)
    }

    async fn clock(&self) -> Result<StoreClock> {
        Ok(StoreClock::None)
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        let item = layout::record_item(key, name, bytes);
        let item_bytes = layout::item_bytes(&item);
        let output = self
            .inner
            .client
            .put_item()
            .table_name(&self.inner.table)
            .set_item(Some(item))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|error| {
                classify(self.context("dynamodb:PutItem", Effect::Idempotent), error)
            })?;
        let reported = output
            .consumed_capacity()
            .and_then(|capacity| capacity.capacity_units())
            .unwrap_or(0.0);
        self.count_units("record item", reported, layout::write_units(item_bytes));
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let output = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(layout::record_key(key, name)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| classify(self.context("dynamodb:GetItem", Effect::Read), error))?;
        output
            .item
            .map(|item| layout::parse_record(&item, &self.inner.description))
            .transpose()
    }

    async fn init(&self) -> Result<String> {
        let inner = &self.inner;
        let table = table::ensure(&inner.client, &inner.description, &inner.table).await?;
        let expiry = table::ensure_expiry(&inner.client, &inner.description, &inner.table).await?;
        let age = baton_core::duration::human(inner.history_max_age);
        Ok(format!(
            "{table}\n{expiry}: history entries expire {age} after they are stored \
             (history_max_age)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_unique_and_carry_the_generation() {
        let first = new_version(7);
        let second = new_version(7);
        assert_ne!(first, second);
        assert!(first.0.starts_with("7-"), "{first}");
        assert!(new_version(u64::MAX).0.len() <= 37);
    }

    /// Pending entries stay only while the item costs no more write units than without them.
    #[test]
    fn the_policy_keeps_entries_within_the_documents_write_units() {
        let small = policy("deploy/prod", 400);
        assert_eq!(small.max_pending, MAX_PENDING);
        let base = HOT_ITEM_OVERHEAD + "deploy/prod".len() + 400;
        assert_eq!(
            small.max_pending_bytes,
            1024 - base - PENDING_ENTRY_OVERHEAD * (MAX_PENDING + 1)
        );
        // A document that fills its last unit leaves no room.
        let full = policy("k", 1024 - HOT_ITEM_OVERHEAD - 1);
        assert_eq!(full.max_pending_bytes, 0);
        // A larger document has the rest of its last unit.
        let large = policy("k", 1500);
        assert!(large.max_pending_bytes > 0 && large.max_pending_bytes < 1024);
    }
}
