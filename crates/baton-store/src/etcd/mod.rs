//! The etcd store: documents and history as etcd keys, a CAS as one etcd transaction, push
//! wake-ups from etcd watches.
//!
//! URL: `etcd://[user:password@]host[:port][,host[:port]…][/prefix][?tls=true&cacert=PATH]`
//! (the `url` module says every part). Keys (the `layout` module): `P/d/K` for documents,
//! `P/h/K\x00SEQ` for history, `P/r/K\x00NAME` for records, `P/u/K` for the due index, `P/a/K`
//! for the count of K's appending writes, `P/q/K\x00ID` for K's arrivals and `P/q/K` for their
//! stamp, under the URL's prefix `P` (default `/baton`). A record is one plain put or get,
//! outside any transaction.
//!
//! - **Version**: the document's `mod_revision`, in decimal. etcd raises it at every write of
//!   the key, so equality is exactly "nobody wrote since". After a `.`, the newest
//!   `create_revision` of the arrivals read with the document, in the same transaction.
//! - **CAS**: one transaction. `If(mod_revision(P/d/K) == expected)` (a create:
//!   `create_revision == 0`, the key does not exist; a version that read no arrival: and none
//!   pending) `Then(put the document, put each history entry, delete the arrivals read, by the
//!   names this store's read found, or all when it knows none and none is newer than those
//!   read; or put the stamp, for a version a push gave that knew none pending) Else(get the
//!   document and its arrivals)`: a conflict carries the current document in the same round
//!   trip, like etcd's own `concurrency.Mutex`. A load is a transaction of the same two gets,
//!   an append of an arrival the same with its put first, if its name is free
//!   (`create_revision == 0`).
//! - **History seq**: `expected_revision × 65536 + i` for the `i`-th entry (from 1) of a CAS
//!   that names `expected_revision` (0 for a create). No counter is read: a revision can be the
//!   expected one of at most one successful CAS, whose write makes a later revision the only one
//!   a further CAS can name, so seqs are unique and increase in append order. etcd allows 128
//!   operations per transaction branch (`--max-txn-ops`) and a nested transaction only what its
//!   enclosing branch leaves: up to 123 entries go beside the document's put, more go in nested
//!   transactions without conditions (so they always run), up to 3,782 entries per CAS.
//! - **Watch**: one etcd watch stream per store, one watch per key (the `watch` module).
//! - **Clock**: none ([`StoreClock::None`]). etcd's revisions are not time and its leases are
//!   not readable as a clock, so leases are judged by observation of heartbeats: an observer
//!   ends a lease only after seeing the same heartbeat for the lease's whole duration on its own
//!   monotonic clock. Clients' wall clocks may disagree by any amount. A waiter that starts
//!   looking at a key whose holder is already dead still waits a whole TTL from its first look.
//! - **Errors**: the connect timeout is 5 s and every request has 10 s. A CAS whose request may
//!   have reached etcd but got no answer (a timeout, a dropped connection, etcd's own "request
//!   timed out") is [`StoreError::Ambiguous`]: an etcd write that timed out may still commit,
//!   so the coordinator re-reads and recognises its own write. A failure to connect at all is
//!   [`StoreError::Unavailable`], saying which endpoints were tried; nothing was sent, so it is
//!   first retried on the other endpoints.
//!
//! Operating notes: every renewal writes the key's whole document as a new etcd revision, and
//! etcd keeps old revisions until it compacts, so run etcd with auto-compaction (for instance
//! `--auto-compaction-mode=periodic --auto-compaction-retention=1h`). A document deleted by
//! hand (`etcdctl del`) makes its key new again: its next history entries reuse seqs from 1 and
//! overwrite the old ones. baton itself never deletes anything. An arrival (a turn that asked
//! for `by_arrival`) is a key of its own, deleted when a write takes it in; etcd's index keeps a
//! deleted key until it compacts past it, and every read of the key's arrivals walks those too,
//! so arrivals are put in slots whose names come back turn after turn (`arrival_names`): a
//! key's arrivals range holds about as many names as it ever had arrivals pending at once, and
//! 16 more.

mod arrival_names;
mod cas;
mod errors;
mod layout;
pub mod url;
mod watch;
mod watch_seed;
mod watched_arrivals;

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, ConnectOptions, GetOptions, KvClient, SortOrder, SortTarget, Txn, TxnResponse,
};

use crate::key_range::successor_bytes;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, DueKey, HistoryRecord, Result,
    Store, StoreClock, StoreError, Version, Versioned, WatchHandle, WithDocs,
};
use errors::{classify, Effect, CANNOT_REACH};
use layout::Layout;
pub use url::{is_etcd_url, EtcdUrl};

/// How long connecting to an endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request may take once sent.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on a whole operation (connecting, then the request), enforced around the client:
/// tonic's balanced channel can hold a request while no endpoint is ready, which its own
/// timeouts do not see.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(16);

/// etcd's default `--max-txn-ops`: operations in a transaction's branch, where a nested
/// transaction's branches get what the enclosing branch leaves.
const MAX_TXN_OPS: usize = 128;

/// History seqs of a CAS are `expected_revision × SEQS_PER_REVISION + i`.
const SEQS_PER_REVISION: u64 = 65_536;

/// The largest reply accepted: a 10,000-entry history page of 1 KiB entries is ~10 MiB.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Below a `history_keep` of [`EXACT_KEEP_BELOW`](crate::history_retention::EXACT_KEEP_BELOW),
/// how many of a key's oldest history keys a CAS reads (keys only, in its own transaction) to
/// know where to cut; a longer excess is cut over the next writes. From there up, one write in
/// this many that append history cuts the excess: counting a key's history visits every entry
/// it holds, which made each release of a long-used key several times slower, and the cut is a
/// request of its own (a write through the cluster's log).
const TRIM_BATCH: i64 = 64;

/// The most of a key's oldest history keys a batched cut reads (keys only): a longer excess
/// (writes of many entries each) is cut by the next writer whose turn it is.
const CUT_READ_LIMIT: i64 = 4_096;

/// Keys per page when listing documents.
const LIST_PAGE: i64 = 1_000;

/// A [`Store`] on an etcd cluster. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    kv: KvClient,
    layout: Layout,
    url: EtcdUrl,
    /// `url.describe()`, computed once.
    description: String,
    /// The watch task, started by the first `watch`.
    watcher: Mutex<Option<watch::Watcher>>,
    /// The arrivals this store's reads and pushes found, for the CASes that take them.
    arrivals_read: Arc<cas::ArrivalsRead>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.inner.description)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Opens the store `url` names (`etcd://…`, see [`url`]).
    ///
    /// Without credentials this does no I/O (the first operation connects); with them it
    /// authenticates, so wrong credentials fail here.
    pub async fn open(url: &str) -> Result<EtcdStore> {
        Self::open_parsed(EtcdUrl::parse(url)?).await
    }

    /// Opens the store a parsed URL names.
    pub async fn open_parsed(url: EtcdUrl) -> Result<EtcdStore> {
        let description = url.describe();
        let unavailable = |reason: String| StoreError::Unavailable {
            store: description.clone(),
            reason,
        };
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            // Pings find a dead connection under an idle watch stream. etcd refuses pings more
            // often than every 5 s (`--grpc-keepalive-min-time`).
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            // etcd's simple tokens expire (5 minutes idle by default); a long `baton run`
            // must outlive them.
            .with_auto_token_refresh(true);
        if let Some((user, password)) = &url.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if let Some(files) = &url.tls {
            let unusable = |reason: String| StoreError::Unusable {
                store: description.clone(),
                reason,
            };
            options = options.with_tls(tls_options(files).map_err(unusable)?);
        }
        let connected = tokio::time::timeout(
            OPERATION_TIMEOUT,
            Client::connect(url.endpoint_urls(), Some(options)),
        )
        .await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(classify(&url, &description, error, Effect::Read)),
            Err(_) => {
                return Err(unavailable(format!(
                    "no answer from {} within {} s; check that etcd runs there and the URL",
                    url.endpoints.join(", "),
                    OPERATION_TIMEOUT.as_secs()
                )))
            }
        };
        let kv = client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                client,
                kv,
                layout: Layout::new(&url.prefix),
                url,
                description,
                watcher: Mutex::new(None),
                arrivals_read: Arc::default(),
            }),
        })
    }

    /// One transaction, through [`Self::request`].
    async fn txn(&self, effect: Effect, transaction: Txn) -> Result<TxnResponse> {
        self.request(effect, |mut kv| {
            let transaction = transaction.clone();
            async move { kv.txn(transaction).await }
        })
        .await
    }

    /// Runs a request (made afresh by `make` for each try) within [`OPERATION_TIMEOUT`],
    /// mapping its errors.
    ///
    /// A try that could not connect sent nothing, so it is tried again, writes included: with
    /// several endpoints, tonic's balancer may hand a request to one that is down while another
    /// is up. Tries stop at `3 × endpoints`, all within the same bound.
    async fn request<T, F>(&self, effect: Effect, mut make: impl FnMut(KvClient) -> F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let url = &self.inner.url;
        let n_tries = 3 * url.endpoints.len();
        let tries = async {
            let mut n_tried = 0;
            loop {
                n_tried += 1;
                let error = match make(self.inner.kv.clone()).await {
                    Ok(value) => return Ok(value),
                    Err(error) => classify(url, &self.inner.description, error, effect),
                };
                let never_sent = matches!(&error, StoreError::Unavailable { reason, .. }
                    if reason.starts_with(CANNOT_REACH));
                if !never_sent || n_tried >= n_tries {
                    return Err(error);
                }
                // Give a refused endpoint's reconnection a moment, so the balancer can tell the
                // endpoints apart.
                tokio::time::sleep(Duration::from_millis(20 * n_tried as u64)).await;
            }
        };
        match tokio::time::timeout(OPERATION_TIMEOUT, tries).await {
            Ok(result) => result,
            Err(_) => {
                let reason = format!(
                    "no answer from {} within {} s",
                    url.endpoints.join(", "),
                    OPERATION_TIMEOUT.as_secs()
                );
                Err(match effect {
                    Effect::Write => StoreError::Ambiguous {
                        store: self.inner.description.clone(),
                        reason,
                    },
                    Effect::Read => StoreError::Unavailable {
                        store: self.inner.description.clone(),
                        reason: format!("{reason}; check that etcd runs there and the URL"),
                    },
                })
            }
        }
    }

    fn backend(&self, message: String) -> StoreError {
        StoreError::Backend {
            store: self.inner.description.clone(),
            source: message.into(),
        }
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn describe(&self) -> String {
        self.inner.description.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: true,
            watch_documents: true,
            watch_tagged: false,
            conflict_returns_current: true,
            clock: false,
            clock_uncertain_ms: 0,
            due_index: true,
            locked_update: false,
            update_when_contended: false,
            watch_complete: false,
            arrivals: true,
            // A write that lost on a hot key costs a round through consensus and a read again;
            // an arrival loses to nobody. Its key's name comes back turn after turn
            // (`arrival_names`), so the deleted ones etcd keeps until it compacts do not pile
            // up under a key's arrivals and slow every read of them.
            arrivals_by_default: true,
        }
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        self.read_key(key, None).await
    }

    async fn append_arrival(&self, key: &str, bytes: &[u8]) -> Result<Option<Versioned>> {
        self.read_key(key, Some(bytes)).await
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        let expected = match self.resolve_expected(key, expected, history.len()).await? {
            ControlFlow::Continue(expected) => expected,
            ControlFlow::Break(conflict) => return Ok(conflict),
        };
        let expected_revision = expected.revision;
        let writes = self.cas_writes(key, &expected, bytes, history, due_ms)?;
        let transaction = self.cas_transaction(key, &expected, writes);
        let response = self.txn(Effect::Write, transaction).await?;
        self.outcome_of_write(key, expected_revision, history.len(), response)
            .await
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        let Some(first_seq) = after_seq.checked_add(1) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let layout = &self.inner.layout;
        let options = GetOptions::new()
            .with_range(layout.history_end(key))
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let start = layout.history_key(key, first_seq);
        let mut response = self
            .request(Effect::Read, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await?;
        Ok(self.history_records(key, response.take_kvs()))
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let layout = &self.inner.layout;
        let options = GetOptions::new()
            .with_range(layout.history_end(key))
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let start = layout.history_key(key, 0);
        let mut response = self
            .request(Effect::Read, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await?;
        Ok(self.history_records(key, response.take_kvs()))
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        _docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        // etcd orders a range by key only: read every entry under the prefix (one per key that
        // has a due time; keys without one have none) and sort them here.
        let layout = &self.inner.layout;
        let start = layout.due_key(prefix);
        let options = GetOptions::new().with_range(range_end(&start));
        let mut response = self
            .request(Effect::Read, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await?;
        let mut due: Vec<DueKey> = response
            .take_kvs()
            .iter()
            .filter_map(|kv| {
                let key = layout.key_of_due(kv.key())?;
                let due_ms = std::str::from_utf8(kv.value()).ok()?.parse().ok()?;
                Some(DueKey {
                    key,
                    due_ms,
                    doc: None,
                })
            })
            .collect();
        due.sort_unstable_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        due.truncate(limit);
        Ok(Some(due))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let layout = &self.inner.layout;
        let start = layout.docs_with_prefix(prefix);
        // The end of the prefix range, as etcd computes it for `--prefix`; the start ends in
        // `/d/…` so some byte can be raised.
        let end = range_end(&start);
        let mut keys = Vec::new();
        let mut from = start;
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_keys_only()
                .with_limit(LIST_PAGE);
            let mut response = self
                .request(Effect::Read, |mut kv| {
                    let (from, options) = (from.clone(), options.clone());
                    async move { kv.get(from, Some(options)).await }
                })
                .await?;
            let more = response.more();
            let page = response.take_kvs();
            let Some(last) = page.last() else {
                break;
            };
            // The next page starts just after the last key.
            from = [last.key(), b"\x00"].concat();
            keys.extend(page.iter().filter_map(|kv| layout.key_of_doc(kv.key())));
            if !more {
                break;
            }
        }
        debug_assert!(keys.iter().all(|key| key.starts_with(prefix)));
        Ok(keys)
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        let watcher = {
            let mut watcher = self
                .inner
                .watcher
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // A task whose runtime has shut down (tests run one runtime per test) is replaced.
            match watcher.as_ref() {
                Some(running) if running.is_running() => running.clone(),
                _ => watcher
                    .insert(watch::Watcher::start(
                        self.inner.client.clone(),
                        self.inner.layout.clone(),
                        self.inner.arrivals_read.clone(),
                    ))
                    .clone(),
            }
        };
        watcher.subscribe(key.to_owned()).await
    }

    async fn clock(&self) -> Result<StoreClock> {
        Ok(StoreClock::None)
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        let record_key = self.inner.layout.record_key(key, name);
        let bytes = bytes.to_vec();
        self.request(Effect::Write, |mut kv| {
            let (record_key, bytes) = (record_key.clone(), bytes.clone());
            async move { kv.put(record_key, bytes, None).await }
        })
        .await?;
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let record_key = self.inner.layout.record_key(key, name);
        let mut response = self
            .request(Effect::Read, |mut kv| {
                let record_key = record_key.clone();
                async move { kv.get(record_key, None).await }
            })
            .await?;
        Ok(response
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| kv.into_key_value().1))
    }
}

impl EtcdStore {
    fn history_records(&self, key: &str, kvs: Vec<etcd_client::KeyValue>) -> Vec<HistoryRecord> {
        kvs.into_iter()
            .filter_map(|kv| {
                let seq = self.inner.layout.seq_of_history_key(key, kv.key())?;
                let (_, bytes) = kv.into_key_value();
                Some(HistoryRecord { seq, bytes })
            })
            .collect()
    }
}

/// The end of the range of every etcd key that starts with `start` (etcd's
/// `GetPrefixRangeEnd`); `\0` when there is no successor, which etcd reads as "every key from
/// `start` up".
fn range_end(start: &[u8]) -> Vec<u8> {
    successor_bytes(start).unwrap_or_else(|| vec![0])
}

/// TLS settings from the URL's files.
fn tls_options(files: &url::TlsFiles) -> std::result::Result<etcd_client::TlsOptions, String> {
    let read = |what: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|error| format!("cannot read the {what} {}: {error}", path.display()))
    };
    let mut options = etcd_client::TlsOptions::new();
    if let Some(path) = &files.ca_cert {
        options = options.ca_certificate(etcd_client::Certificate::from_pem(read(
            "CA certificate (cacert=)",
            path,
        )?));
    }
    if let (Some(cert), Some(key)) = (&files.client_cert, &files.client_key) {
        options = options.identity(etcd_client::Identity::from_pem(
            read("client certificate (cert=)", cert)?,
            read("client key (key=)", key)?,
        ));
    }
    Ok(options)
}
