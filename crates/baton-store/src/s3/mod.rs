//! The S3 store: one object per key changed by conditional PUT, history entries as objects of
//! their own, on any S3-compatible server that honours `If-None-Match` and `If-Match`.
//!
//! URL: `s3://BUCKET[/PREFIX]` (the `url` module); the prefix defaults to `baton`. Credentials,
//! region and endpoint come from aws-config's chain (`crate::aws`), so baton finds what the AWS
//! CLI finds: `AWS_*` variables, profiles with SSO and `credential_process`, web identity
//! (GitHub's OIDC login), container and instance roles. `AWS_ENDPOINT_URL_S3` or
//! `AWS_ENDPOINT_URL` points it at an S3-compatible server, addressed path-style (and over plain
//! HTTP when the endpoint says `http://`); AWS itself is addressed virtual-host style.
//!
//! # Layout
//!
//! ```text
//! P/hot/E(K)               the hot record of K: deferred::Hot::encode() (the core's document,
//!                          a generation, and the history entries not yet stored on their own)
//! P/history/E(K)/SEQ       one history entry of K; SEQ is 20 decimal digits
//! P/records/E(K)/NAME      record NAME of K (`P/records/~/HEX(K)/NAME` where that name would
//!                          pass S3's 1,024 bytes)
//! ```
//!
//! `E` escapes every byte but ASCII letters, digits, `-` and `_` as `%XX` (the `layout` module
//! says why that keeps names exact, keeps key prefixes name prefixes, and keeps `a`'s history
//! apart from `a/b`'s).
//!
//! # Operations
//!
//! - **Version**: the hot object's ETag. Every write bumps the record's generation, so every
//!   write changes the body and its ETag (S3's ETag is a hash of the body: two identical bodies
//!   would let a stale `If-Match` through).
//! - **CAS** (`deferred::plan`): PUT the entries the plan moves out of the hot record (each to
//!   its own name, unconditionally: a second writer of the same entry writes the same bytes),
//!   and only then PUT the new hot record with `If-Match: <expected ETag>` (`If-None-Match: *`
//!   for a new key). 412 Precondition Failed (or S3's 409 for a concurrent conditional write) is
//!   a conflict: nothing of this CAS exists anywhere, since its new entries ride in the hot
//!   record that was refused. The plan needs the record the expected version names: a small
//!   per-store cache keeps the last record read or written per key with its ETag, so a warm
//!   client's CAS is one PUT; otherwise the record is read first (and a different ETag there is a
//!   conflict answered with the current document, without a PUT). A conditional PUT that got no
//!   answer (a timeout, a reset connection, a 5xx) is [`StoreError::Ambiguous`]: it may have
//!   been applied, so the coordinator re-reads and recognises its own write. object_store does
//!   not retry these PUTs: a retry of a PUT that was applied would fail its `If-Match` and look
//!   like somebody else's write.
//! - **History**: the hot record first, then a LIST of `P/history/E(K)/` from `start-after` the
//!   wanted seq, then a GET per entry (in parallel), merged by `deferred::merge_after` and
//!   `merge_tail`; in that order, an entry moved out in between is still pending in the record
//!   read or already listed. Only entries below the record's first pending seq are taken from
//!   the listing, so a read is a snapshot as of the record it read, and a read of entries that
//!   are all still pending (a `log --follow` poll) costs one GET.
//! - **List**: one LIST of `P/hot/E(prefix)` (paged by 1,000).
//! - **Records**: one plain PUT (retried like a history entry's: writing the same bytes twice
//!   is harmless) or GET of the record's object; no condition, no cache, never listed.
//! - **Watch**: none: S3 cannot push. Waiters poll.
//! - **Clock**: the S3 server's, from the `Date` header every S3 response carries (the `clock`
//!   module). Each response's `Date` is recorded with the local instant it arrived, and
//!   [`Store::clock`] is that reading plus the local monotonic time since, so it costs no round
//!   trip (only a process's first reading, before anything was sent, costs a HEAD of
//!   `P/init-probe`, whose 404 carries a `Date` too). Deadlines are stored on it, as on
//!   PostgreSQL and Redis, so clients' wall clocks play no part in expiry and may disagree by
//!   any amount (though AWS refuses requests signed more than 15 minutes off). The epoch is a
//!   fixed name, the same in every process on the bucket.
//!
//!   A `Date` has whole seconds, so a reading is behind the server's time by up to a second
//!   (plus the response's transit), never ahead. The store says so (`clock_uncertain_ms:
//!   1000`), and the core ends a phase only once a reading is that far past the deadline. That
//!   makes one-second readings safe: a holder's deadline may be set from a reading a second
//!   behind, but another client ends the lease only when its own reading, itself never ahead of
//!   the server, is a second past that deadline, so no lease ends before its full TTL has passed
//!   on the server's clock since the holder read it (less one response's transit, as with any
//!   clock read from replies, which the holder's safety margin of at least 300 ms covers: it
//!   counts its lease from before that reading). The price is lateness, never earliness: a
//!   lease left to run out ends up to about 2 s after its TTL (a second of uncertainty in the
//!   holder's reading, a second of margin). The servers behind an endpoint must agree on the
//!   time, as NTP keeps them (AWS's do). A server that sends no `Date` cannot hold baton's
//!   leases: [`Store::clock`] says so ([`StoreError::Incompatible`]).
//! - **Deletes**: never. object_store has no conditional delete, and deleting a hot record would
//!   lose the key's fence counter; an idle key costs one small object.
//!
//! # Errors
//!
//! Connecting may take 5 s and a request 10 s; reads are retried (at most 3 times, within 5 s).
//! A 403 is [`StoreError::Denied`] naming the action the call needs (`s3:GetObject`,
//! `s3:PutObject` on `arn:aws:s3:::BUCKET/PREFIX/*`, `s3:ListBucket` on `arn:aws:s3:::BUCKET`);
//! a missing bucket, refused credentials, no credentials at all, a wrong region and a skewed
//! clock each have an error that says what to do. A hot object that is not a baton record is
//! [`StoreError::Incompatible`].
//!
//! # Permissions
//!
//! The least a policy must allow (docs/stores.md shows it whole):
//!
//! - `s3:GetObject` and `s3:PutObject` on `arn:aws:s3:::BUCKET/PREFIX/*` (hot records,
//!   history entries and records);
//! - `s3:ListBucket` on `arn:aws:s3:::BUCKET`, which may be limited to baton's objects with the
//!   condition `"StringLike": {"s3:prefix": "PREFIX/*"}` (`list` and history reads). Without
//!   it, S3 answers 403 instead of 404 for a key's first read, which baton reports as a denied
//!   `s3:GetObject` and says so.
//!
//! Nothing else: baton never deletes, never creates the bucket, never reads its location.
//! `baton init` alone also reads the bucket's lifecycle configuration and, on a bucket without
//! one, puts the rule that expires history ([`lifecycle`]: `s3:GetLifecycleConfiguration`,
//! `s3:PutLifecycleConfiguration`).
//!
//! Operating notes: with bucket versioning on, every renewal keeps a noncurrent version; add a
//! lifecycle rule that expires noncurrent versions under the prefix. The lifecycle rule that
//! `baton init` sets expires old history objects (`P/history/`); no rule may expire hot records
//! (`P/hot/`): a key whose hot record is
//! deleted loses its fence counter and starts its history again at seq 1, overwriting the old
//! entries as they are moved out. Records (`P/records/`) hold jobs' parameters and runs'
//! reports: expire them, if at all, long after any job could still be queued.

mod builder;
mod cas;
mod clock;
mod credentials;
mod errors;
mod history;
mod layout;
pub mod lifecycle;
pub mod url;

pub use url::is_s3_url;

use std::collections::HashMap;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use object_store::aws::AmazonS3;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

use crate::deferred::{self, Hot, Policy};
use crate::server_clock::ServerClock;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, HistoryRecord, Result, Store,
    StoreClock, StoreError, Version, Versioned, WatchHandle,
};
use errors::{Call, Context};
use layout::Layout;
pub use url::S3Url;

/// When a CAS moves pending history out of the hot record: the record stays a few KiB above
/// the document however long the key's history.
pub const POLICY: Policy = Policy {
    max_pending: 16,
    max_pending_bytes: 16 * 1024,
};

/// How many object requests one operation has in flight at once (moving entries out, reading
/// history).
const PARALLEL_REQUESTS: usize = 16;

/// Object names per LIST page (S3's maximum).
const LIST_PAGE: usize = 1_000;

/// How many keys' hot records the store remembers; past it, it forgets them all (a client
/// works on a handful of keys at a time).
const CACHED_KEYS_MAX: usize = 256;

/// A [`Store`] on an S3 bucket. Cheap to clone; clones share the connections and the cache.
#[derive(Clone)]
pub struct S3Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// For GET, LIST and the PUTs of history entries: object_store retries these.
    reads: AmazonS3,
    /// For the conditional PUTs of hot records: never retried by object_store (see the module
    /// documentation). Shares `reads`' connections.
    writes: AmazonS3,
    layout: Layout,
    /// Error messages' knowledge of the store, and its description.
    context: Context,
    /// The last hot record read or written per key, with its ETag.
    cache: Mutex<HashMap<String, (Version, Hot)>>,
    /// The server's time from the last response's `Date` (every response of `reads` and
    /// `writes` records it, through [`DateConnector`]).
    clock: Arc<ServerClock>,
    /// Where the bucket's lifecycle configuration is (`baton init`).
    lifecycle: lifecycle::Target,
    /// How long history objects live: the lifecycle rule's days.
    history_max_age: Duration,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("store", &self.inner.context.store)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// Opens the store `url` names (`s3://BUCKET[/PREFIX]`), with the environment's AWS
    /// configuration (`crate::aws::sdk_config`) and `AWS_ENDPOINT_URL_S3` when set.
    ///
    /// This does no request: credentials are resolved, and the bucket first reached, by the first
    /// operation.
    pub async fn open(url: &str) -> Result<S3Store> {
        let (url, retention) = take_retention(url)?;
        let parsed = S3Url::parse(&url)?;
        let config = crate::aws::sdk_config().await;
        // The S3-specific override, which the SdkConfig does not carry (the S3 SDK client would
        // read it from the service configuration).
        let ignore_configured = std::env::var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            .is_ok_and(|value| value.eq_ignore_ascii_case("true"));
        let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
            .ok()
            .filter(|endpoint| !endpoint.is_empty() && !ignore_configured)
            .or_else(|| config.endpoint_url().map(str::to_owned));
        Self::build(parsed, &config, endpoint, retention.expiring_max_age())
    }

    /// Opens the store `url` names with the given AWS configuration: its credentials, region
    /// and `endpoint_url`. For tests, and for callers that load the configuration themselves.
    pub fn open_with_config(url: &str, config: &SdkConfig) -> Result<S3Store> {
        let (url, retention) = take_retention(url)?;
        let endpoint = config.endpoint_url().map(str::to_owned);
        Self::build(
            S3Url::parse(&url)?,
            config,
            endpoint,
            retention.expiring_max_age(),
        )
    }

    /// Sets or checks the lifecycle rule that expires history ([`lifecycle`]), and says so.
    async fn ensure_history_expiry(&self) -> Result<String> {
        let inner = &self.inner;
        let prefix = inner.layout.history_root();
        let days = lifecycle::days(inner.history_max_age);
        match lifecycle::ensure(&inner.lifecycle, prefix, days).await {
            Ok(lifecycle::Outcome::InPlace { id, days }) => Ok(format!(
                "history under {prefix} expires after {days} days (lifecycle rule `{id}`)"
            )),
            Ok(lifecycle::Outcome::Set { days }) => Ok(format!(
                "set a lifecycle rule: history under {prefix} expires after {days} days \
                 (history_max_age)"
            )),
            Ok(lifecycle::Outcome::Missing { rule_xml }) => Ok(format!(
                "history is NOT expired: the bucket has lifecycle rules and none for {prefix}, \
                 and baton does not replace them; add this rule to the bucket's lifecycle \
                 configuration: {rule_xml}"
            )),
            Err(failure) if failure.status == Some(403) => Err(StoreError::Denied {
                store: inner.context.store.clone(),
                action: failure.action.to_owned(),
                resource: inner.context.bucket_arn.clone(),
                reason: format!(
                    "{} (history expires by a lifecycle rule that `baton init` sets or checks)",
                    failure.reason
                ),
            }),
            Err(failure) => Err(StoreError::Unavailable {
                store: inner.context.store.clone(),
                reason: format!(
                    "{}: {} (the lifecycle rule that expires history)",
                    failure.action, failure.reason
                ),
            }),
        }
    }

    fn classify(&self, call: Call, error: object_store::Error) -> StoreError {
        self.inner.context.classify(call, error)
    }

    fn backend(&self, message: String) -> StoreError {
        StoreError::Backend {
            store: self.inner.context.store.clone(),
            source: message.into(),
        }
    }

    /// An object name as object_store's path (which refuses empty, `.` and `..` segments and
    /// control characters: the layout never makes them).
    fn path(&self, name: &str) -> Result<Path> {
        Path::parse(name)
            .map_err(|error| self.backend(format!("object name `{name}` is not valid: {error}")))
    }

    fn cached(&self, key: &str, version: &Version) -> Option<Hot> {
        let cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(cached, _)| cached == version)
            .map(|(_, hot)| hot.clone())
    }

    fn remember(&self, key: &str, version: Version, hot: Hot) {
        let mut cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHED_KEYS_MAX && !cache.contains_key(key) {
            cache.clear();
        }
        cache.insert(key.to_owned(), (version, hot));
    }

    fn forget(&self, key: &str) {
        let mut cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache.remove(key);
    }

    /// Reads `key`'s hot record and its ETag (remembered for the next CAS); `None` when the key
    /// has none.
    async fn read_hot(&self, key: &str) -> Result<Option<(Version, Hot)>> {
        let path = self.path(&self.inner.layout.hot(key))?;
        let result = match self.inner.reads.get(&path).await {
            Ok(result) => result,
            Err(error) if errors::is_missing_object(&error) => return Ok(None),
            Err(error) => return Err(self.classify(Call::Get, error)),
        };
        let etag = result.meta.e_tag.clone().ok_or_else(|| {
            self.backend("the server answered a GET without an ETag, which baton needs".into())
        })?;
        let bytes = result
            .bytes()
            .await
            .map_err(|error| self.classify(Call::Get, error))?;
        let hot = Hot::decode(&bytes, &self.inner.context.store)?;
        let version = Version(etag);
        self.remember(key, version.clone(), hot.clone());
        Ok(Some((version, hot)))
    }
}

/// Whether `version` can be sent as an `If-Match` value: an ETag is visible ASCII. Anything
/// else was not handed out by this store (and object_store panics on a header it cannot send).
fn is_sendable(version: &Version) -> bool {
    !version.0.is_empty()
        && version.0.len() <= 1024
        && version.0.bytes().all(|byte| (0x21..=0x7e).contains(&byte))
}

/// The first seq of `hot` not yet stored on its own: the first pending entry's, or the next
/// seq when nothing is pending. Every lower seq was stored before `hot` was written.
fn first_unstored(hot: &Hot) -> u64 {
    hot.pending
        .first()
        .map_or(hot.next_seq.max(1), |record| record.seq)
}

#[async_trait]
impl Store for S3Store {
    fn describe(&self) -> String {
        self.inner.context.store.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: false,
            watch_documents: false,
            watch_tagged: false,
            // A 412 carries no body; only a CAS that had to read the record first knows it.
            conflict_returns_current: false,
            clock: true,
            // A `Date` has whole seconds (see the module documentation).
            clock_uncertain_ms: clock::UNCERTAIN_MS,
            due_index: false,
            locked_update: false,
            update_when_contended: false,
            watch_complete: false,
            arrivals: false,
            arrivals_by_default: false,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        Ok(self.read_hot(key).await?.map(|(version, hot)| Versioned {
            version,
            bytes: hot.doc,
            arrivals: Vec::new(),
        }))
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
        let plan = deferred::plan(current.as_ref().map(|(_, hot)| hot), bytes, history, POLICY);
        // The entries moved out must be durable before the record that no longer holds them.
        self.store_entries(key, &plan.flush).await?;
        let answer = self
            .put_hot(
                key,
                current.as_ref().map(|(version, _)| version),
                &plan.next,
            )
            .await?;
        self.outcome_of_write(key, answer, plan.next)
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The record first (see `deferred`): then the listing holds whatever it moved out.
        let Some((_, hot)) = self.read_hot(key).await? else {
            return Ok(Vec::new());
        };
        let below_seq = first_unstored(&hot);
        let stored = if after_seq.saturating_add(1) >= below_seq {
            Vec::new()
        } else {
            self.stored_entries(key, after_seq, below_seq, limit)
                .await?
        };
        Ok(deferred::merge_after(stored, Some(&hot), after_seq, limit))
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some((_, hot)) = self.read_hot(key).await? else {
            return Ok(Vec::new());
        };
        let below_seq = first_unstored(&hot);
        let wanted = limit.saturating_sub(hot.pending.len());
        let stored = if wanted == 0 || below_seq <= 1 {
            Vec::new()
        } else {
            // The newest `wanted` stored seqs are `below_seq - wanted ..= below_seq - 1`.
            let after_seq = below_seq.saturating_sub(1).saturating_sub(wanted as u64);
            self.stored_entries(key, after_seq, below_seq, wanted)
                .await?
        };
        Ok(deferred::merge_tail(stored, Some(&hot), limit))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let layout = &self.inner.layout;
        let list_prefix = layout.hot_prefix(prefix);
        let mut keys = Vec::new();
        let mut options = PaginatedListOptions {
            max_keys: Some(LIST_PAGE),
            ..PaginatedListOptions::default()
        };
        loop {
            let page = self
                .inner
                .reads
                .list_paginated(Some(&list_prefix), options.clone())
                .await
                .map_err(|error| self.classify(Call::List, error))?;
            keys.extend(
                page.result
                    .objects
                    .iter()
                    .filter_map(|meta| layout.key_of_hot(meta.location.as_ref()))
                    .filter(|key| key.starts_with(prefix)),
            );
            match page.page_token {
                Some(token) => options.page_token = Some(token),
                None => break,
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    async fn watch(&self, _key: &str) -> Result<Option<WatchHandle>> {
        Ok(None)
    }

    /// One PUT through the retrying client: a record's write is idempotent (the same bytes
    /// under the same name), so a retry of one that landed does no harm.
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        let path = self.path(&self.inner.layout.record(key, name))?;
        self.inner
            .reads
            .put(&path, PutPayload::from(bytes.to_vec()))
            .await
            .map_err(|error| self.classify(Call::PutEntry, error))?;
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let path = self.path(&self.inner.layout.record(key, name))?;
        let result = match self.inner.reads.get(&path).await {
            Ok(result) => result,
            Err(error) if errors::is_missing_object(&error) => return Ok(None),
            Err(error) => return Err(self.classify(Call::Get, error)),
        };
        let bytes = result
            .bytes()
            .await
            .map_err(|error| self.classify(Call::Get, error))?;
        Ok(Some(bytes.to_vec()))
    }

    /// The last response's `Date` plus the local time since; before the process's first
    /// response, one HEAD of the probe name, which exists only to carry a `Date` (a 404 is the
    /// expected answer).
    async fn clock(&self) -> Result<StoreClock> {
        if let Some(now) = self.inner.clock.now() {
            return Ok(now);
        }
        let probe = self.path(self.inner.layout.probe())?;
        let probed = self.inner.reads.head(&probe).await;
        // Any answer with a `Date` will do, whatever its status (even a 403: the operation
        // that needs the permission reports it).
        if let Some(now) = self.inner.clock.now() {
            return Ok(now);
        }
        match probed {
            Ok(_) => {}
            Err(error) if errors::is_missing_object(&error) => {}
            // No answer at all (or no credentials to ask with): that is the error to report.
            Err(error) => return Err(self.classify(Call::Get, error)),
        }
        Err(StoreError::Incompatible {
            store: self.inner.context.store.clone(),
            reason: format!(
                "the server at {} does not send a `Date` header (RFC 9110), which baton needs \
                 for lease expiry: leases on S3 are judged on the server's clock; use an \
                 S3-compatible server (and proxy) that sends one, as AWS S3 does",
                self.inner.context.endpoint
            ),
        })
    }

    /// Checks what can be checked without writing: the bucket exists, baton may list its
    /// prefix and read its objects, and the server sends a `Date`. It creates nothing: a bucket is the account owner's choice
    /// (region, encryption, lifecycle), and `s3:CreateBucket` is not a right baton should need.
    async fn init(&self) -> Result<String> {
        let probe_list = PaginatedListOptions {
            max_keys: Some(1),
            ..PaginatedListOptions::default()
        };
        self.inner
            .reads
            .list_paginated(Some(&self.inner.layout.hot_prefix("")), probe_list)
            .await
            .map_err(|error| self.classify(Call::List, error))?;
        // Not a key's record (one may exist): a name outside them, which never does.
        let probe = self.path(self.inner.layout.probe())?;
        match self.inner.reads.get(&probe).await {
            Ok(_) => {}
            Err(error) if errors::is_missing_object(&error) => {}
            Err(error) => return Err(self.classify(Call::Get, error)),
        }
        // Those answers carried the server's `Date` (or did not, which `clock` reports).
        self.clock().await?;
        let expiry = self.ensure_history_expiry().await?;
        Ok(format!(
            "{} is ready: the bucket exists, baton may list and read it, and the server sends \
             the `Date` leases are judged by (writes are checked by the first acquire; baton \
             never creates buckets)\n{expiry}",
            self.describe()
        ))
    }
}

/// Takes the retention parameters out of an S3 URL: S3 keeps history by age only (a lifecycle
/// rule; baton deletes nothing), so `history_keep` is refused.
fn take_retention(url: &str) -> Result<(String, crate::history_retention::HistoryRetention)> {
    let (rest, retention) = crate::history_retention::HistoryRetention::take_from_url(url)?;
    if retention.keep != crate::history_retention::KEEP_DEFAULT {
        return Err(StoreError::BadUrl {
            url: url.to_owned(),
            reason: "S3 keeps history by age only, through a bucket lifecycle rule that `baton \
                     init` sets (baton asks for no delete permission there): give \
                     `history_max_age`, not `history_keep`"
                .to_owned(),
        });
    }
    Ok((rest, retention))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised() {
        assert!(is_s3_url("s3://b/p"));
        assert!(is_s3_url("S3://b"));
        assert!(!is_s3_url("s3:b"));
        assert!(!is_s3_url("sqlite:/x"));
    }

    #[test]
    fn only_etags_are_sent() {
        assert!(is_sendable(&Version("\"0123abcd\"".to_owned())));
        assert!(is_sendable(&Version("not-a-version".to_owned())));
        for bad in ["", "a b", "line\nbreak", "é"] {
            assert!(!is_sendable(&Version(bad.to_owned())), "{bad:?}");
        }
    }
}
