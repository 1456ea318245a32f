//! The Redis store: `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?namespace=NAME]`, or `rediss://…`
//! for TLS.
//!
//! # Files
//!
//! `url.rs` parses the URL (namespace, TLS), `layout.rs` names the Redis keys of a baton key
//! and reads replies back, `errors.rs` maps the client's errors, `cas.lua` is the CAS and
//! `watch.rs` the subscriber.
//!
//! # Operations
//!
//! - A CAS is one Lua script (`cas.lua`, sent as `EVALSHA`, loaded again after a `NOSCRIPT`):
//!   it compares the version, writes the document, appends the history (seq from the hash's
//!   counter, so strictly increasing per key), adds the key to the set, publishes the wake-up,
//!   and returns the current document on a stale version — with the server's `TIME` in every
//!   reply. One round trip, atomic. A version is the write count and the server's time in
//!   microseconds, so a server that lost its data never hands out a version a client still
//!   holds from before.
//! - A load is one pipelined round trip: `HMGET` of the version and document, `LRANGE` of the
//!   key's arrivals, and `TIME`; an append of an arrival is the same with an `RPUSH` first. A
//!   version names the document's and how many arrivals were read with it: the CAS script
//!   takes (`LTRIM`s) that many from the head of the list, leaving later ones pending, and a
//!   version that read none writes only while none is pending. A wake-up carries the arrivals
//!   its write left pending, in hex, its version naming them even when none (`V.0`): a holder
//!   granted by that write releases from it past any arrival appended since, instead of losing
//!   to it (appends publish nothing: waiters listen by ticket, and only a write wakes one).
//! - `list(prefix)` is `ZRANGEBYLEX [prefix (successor` on the key set, where the successor is
//!   the least byte string above every string that starts with the prefix: byte-wise, and no
//!   character of a key is a wildcard.
//! - A record is one `HSET` (replacing the field) or `HGET` on the key's record hash, outside
//!   any CAS: `doc:K` stays small, and `list` (on the key set) never meets a record.
//! - History is `XRANGE`/`XREVRANGE` on the stream, trimmed by the CAS script's `XADD … MAXLEN`
//!   to the URL's `history_keep` (default [`HISTORY_KEPT_MAX`], baton's limit; Redis keeps
//!   everything in memory): exactly below [`EXACT_TRIM_BELOW`] entries, approximately (`~`,
//!   whole stream nodes at a time: a little more kept, never less) from there up, where exact
//!   trimming would rewrite a node at every append. Entries carry no time, so
//!   `history_max_age` is refused.
//! - `watch` has one subscriber connection per store (`watch.rs`), which resubscribes after a
//!   drop and then wakes every waiter once, since a message may have been missed meanwhile.
//! - The clock is the server's `TIME`, read from the replies the store receives anyway
//!   ([`ServerClock`]).
//!
//! Commands go through one multiplexed [`ConnectionManager`], which reconnects after a drop;
//! connecting and each reply are bounded by [`CONNECT_TIMEOUT`] and [`RESPONSE_TIMEOUT`], and
//! every operation by [`OPERATION_TIMEOUT`]. A CAS whose reply does not come is
//! [`StoreError::Ambiguous`]: the coordinator re-reads to learn whether it landed.
//!
//! A single server (or the primary behind one address) is supported; Redis Cluster is not, since
//! a script touches three keys that a cluster would place on different nodes.
//!
//! # TLS
//!
//! `rediss://` verifies the server against the Mozilla roots (webpki-roots), or, when the
//! environment variable `SSL_CERT_FILE` names a PEM file, against the certificates in it instead
//! (for a server with a private CA). `rediss://…#insecure` is refused by this build.
//!
//! # Durability
//!
//! Redis keeps data in memory; what survives a restart depends on its configuration. At open the
//! store reads `appendonly`, `save`, `maxmemory` and `maxmemory-policy` (where `CONFIG` is
//! allowed) and warns when a restart would lose every queue or when keys may be evicted.

mod errors;
mod layout;
pub mod url;
mod watch;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, RedisError, Script, Value};
use async_trait::async_trait;

use crate::boot_clock::BootInstant;
use crate::history_retention::{HistoryRetention, KEEP_PARAMETER, MAX_AGE_PARAMETER};
use crate::server_clock::ServerClock;
use crate::{
    check_record, check_record_name, Capabilities, CasOutcome, DueKey, HistoryRecord, Result,
    Store, StoreClock, StoreError, Version, Versioned, WatchHandle, WithDocs,
};
use errors::{redis_error, timed_out, Access};
use layout::{bytes, history_record, integer, lex_range, version_of, versioned_with, Names};
use url::parse_url;
pub use url::{DEFAULT_NAMESPACE, NAMESPACE_MAX_BYTES};

/// How long connecting to the server may take before the store is [`StoreError::Unavailable`].
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a reply may take once a request is sent. A CAS without a reply in time is
/// [`StoreError::Ambiguous`].
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The bound on a whole operation, reconnecting included: no call waits longer.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// History entries kept per key when the URL sets no `history_keep`: baton's limit.
pub const HISTORY_KEPT_MAX: u64 = crate::history_retention::KEEP_DEFAULT;

/// A `history_keep` from which trimming is approximate (`MAXLEN ~`): Redis then drops whole
/// stream nodes (100 entries by default), so a little more is kept, never less. Below it a
/// node would never fill, so trimming is exact (`MAXLEN =`).
pub const EXACT_TRIM_BELOW: u64 = crate::history_retention::EXACT_KEEP_BELOW;

/// The epoch of the server's clock. It is wall time, which a restart keeps, so it never changes:
/// a restart with persistence must not end every lease.
pub const CLOCK_EPOCH: &str = "redis-server-time";

/// The CAS script. Its SHA-1 is computed once per store; the server caches it after the first
/// load.
const CAS_SCRIPT: &str = include_str!("cas.lua");

/// The largest document a wake-up carries (bytes), counted with the arrivals it carries in hex
/// (`cas.lua`). Every subscriber of a namespace receives every wake-up, and Redis disconnects a
/// subscriber whose unread messages pile up past its `client-output-buffer-limit`; a long-used
/// key's document is about 640 bytes.
pub const PUSHED_DOCUMENT_MAX: usize = 8_192;

/// A [`Store`] on a Redis server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Reconnects by itself after a drop; multiplexed, so concurrent operations share it.
    connection: ConnectionManager,
    /// For the subscriber's own connection (pub/sub takes a connection to itself).
    client: Client,
    names: Names,
    cas_script: Script,
    clock: ServerClock,
    /// Started by the first `watch`.
    watcher: Mutex<Option<Arc<watch::Watcher>>>,
    /// The URL without password and without query parameters other than `namespace`.
    description: String,
    /// The CAS script's trimming argument: `=N` (exact) or `~N` (approximate), N the
    /// `history_keep`.
    history_trim: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.description)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The store's one subscriber, started on first use.
    fn watcher(&self) -> Arc<watch::Watcher> {
        let mut watcher = self
            .inner
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let watcher = watcher.get_or_insert_with(|| {
            Arc::new(watch::Watcher::start(
                self.inner.client.clone(),
                self.inner.names.clone(),
                self.inner.description.clone(),
            ))
        });
        Arc::clone(watcher)
    }

    /// Messages this store's subscriber has received since it started (0 before the first
    /// `watch`): how many writes woke this process. For tests that a process is told of the
    /// keys it watches only.
    #[doc(hidden)]
    pub fn messages_received(&self) -> u64 {
        let watcher = self
            .inner
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        watcher.as_ref().map_or(0, |watcher| watcher.received())
    }

    /// Whether `url` names a Redis store (`redis:` or `rediss:`, in any case).
    pub fn handles(url: &str) -> bool {
        url::is_redis_url(url)
    }

    /// Opens the store at `url` (`redis://…` or `rediss://…`), checking that the server answers
    /// and accepts the credentials, and warning when its configuration would lose data.
    ///
    /// For `rediss://`, the server's certificate is checked against the PEM certificates in the
    /// file `SSL_CERT_FILE` names when that variable is set, else against the Mozilla roots.
    pub async fn open(url: &str) -> Result<RedisStore> {
        let is_tls = url
            .get(..9)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"));
        let root_certificates = match std::env::var_os("SSL_CERT_FILE") {
            Some(path) if is_tls => match std::fs::read(&path) {
                Ok(pem) => Some(pem),
                Err(error) => {
                    return Err(StoreError::Unusable {
                        store: parse_url(url).map(|t| t.description).unwrap_or_default(),
                        reason: format!(
                            "cannot read the certificates in SSL_CERT_FILE={}: {error}",
                            std::path::Path::new(&path).display()
                        ),
                    })
                }
            },
            _ => None,
        };
        Self::open_with_root_certificates(url, root_certificates).await
    }

    /// [`RedisStore::open`] with the PEM root certificates to trust for `rediss://` given
    /// (`None`: the Mozilla roots), whatever the environment says.
    pub async fn open_with_root_certificates(
        url: &str,
        root_certificates: Option<Vec<u8>>,
    ) -> Result<RedisStore> {
        let (url, history_trim) = take_history_trim(url)?;
        let url = url.as_str();
        let target = parse_url(url).map_err(|reason| StoreError::BadUrl {
            url: crate::url::redact_password(url),
            reason,
        })?;
        let description = target.description.clone();
        let client = client_for(url, &target, root_certificates)?;
        let db = client.get_connection_info().redis_settings().db();
        let names = Names::new(&target.namespace, db);
        let connection = connect(&client, &description).await?;

        let store = RedisStore {
            inner: Arc::new(Inner {
                connection,
                client,
                names,
                cas_script: Script::new(CAS_SCRIPT),
                clock: ServerClock::new(CLOCK_EPOCH),
                watcher: Mutex::new(None),
                description,
                history_trim,
            }),
        };
        store.check_server().await?;
        Ok(store)
    }

    /// The first round trip: reads the clock (which also proves the credentials), loads the CAS
    /// script so the first CAS is one round trip, and reads the persistence settings to warn
    /// about. `CONFIG` is often disabled on managed servers: then the check is skipped quietly.
    async fn check_server(&self) -> Result<()> {
        let mut pipeline = ::redis::pipe();
        pipeline.ignore_errors().cmd("TIME");
        pipeline.cmd("SCRIPT").arg("LOAD").arg(CAS_SCRIPT);
        for parameter in ["appendonly", "save", "maxmemory", "maxmemory-policy"] {
            pipeline.cmd("CONFIG").arg("GET").arg(parameter);
        }
        let mut connection = self.inner.connection.clone();
        let sent = BootInstant::now();
        let replies: Vec<::redis::RedisResult<Value>> = self
            .bounded(Access::Read, pipeline.query_async(&mut connection))
            .await?;
        let mut replies = replies.into_iter();
        match replies.next() {
            Some(Ok(time)) => self.observe_time(&time, sent)?,
            Some(Err(error)) => return Err(self.error(error, Access::Read)),
            None => return Err(self.unexpected("TIME", &Value::Nil)),
        }
        if let Some(Err(error)) = replies.next() {
            // EVALSHA loads it again on NOSCRIPT; a server that refuses SCRIPT LOAD will also
            // refuse EVAL, and the first CAS will say so.
            tracing::debug!(%error, "SCRIPT LOAD failed");
        }
        let mut settings = HashMap::new();
        for reply in replies {
            match reply {
                Ok(value) => {
                    if let Some((name, setting)) = config_pair(value) {
                        settings.insert(name, setting);
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "CONFIG GET refused; persistence not checked");
                    return Ok(());
                }
            }
        }
        for warning in persistence_warnings(&self.inner.description, &settings) {
            tracing::warn!("{warning}");
        }
        Ok(())
    }

    /// Runs `operation`, bounded by [`OPERATION_TIMEOUT`], mapping its error.
    async fn bounded<T>(
        &self,
        access: Access,
        operation: impl std::future::Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(OPERATION_TIMEOUT, operation).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.error(error, access)),
            Err(_elapsed) => Err(timed_out(&self.inner.description, access)),
        }
    }

    fn error(&self, error: RedisError, access: Access) -> StoreError {
        redis_error(&self.inner.description, error, access)
    }

    fn unexpected(&self, command: &str, value: &Value) -> StoreError {
        StoreError::Backend {
            store: self.inner.description.clone(),
            source: format!("unexpected reply to {command}: {}", brief(value)).into(),
        }
    }

    /// Records the reply `[seconds, microseconds]` of `TIME`.
    /// Records the server's time from a `TIME` reply to a request sent at `sent`.
    fn observe_time(&self, time: &Value, sent: BootInstant) -> Result<()> {
        let Value::Array(parts) = time else {
            return Err(self.unexpected("TIME", time));
        };
        match parts.as_slice() {
            [seconds, microseconds] => self.observe_time_parts(seconds, microseconds, sent),
            _ => Err(self.unexpected("TIME", time)),
        }
    }

    fn observe_time_parts(
        &self,
        seconds: &Value,
        microseconds: &Value,
        sent: BootInstant,
    ) -> Result<()> {
        let (Some(seconds), Some(microseconds)) = (integer(seconds), integer(microseconds)) else {
            return Err(self.unexpected(
                "TIME",
                &Value::Array(vec![seconds.clone(), microseconds.clone()]),
            ));
        };
        let ms = seconds
            .saturating_mul(1000)
            .saturating_add(microseconds / 1000);
        // Paired with the reply's arrival (now), not its sending: see `ServerClock`.
        self.inner.clock.observe(ms, sent, BootInstant::now());
        Ok(())
    }
}

/// Takes baton's own parameters, which neither `parse_url` nor the client know, from `url`:
/// the URL left, and the stream's `MAXLEN` argument for the history's `keep` (exact below
/// [`EXACT_TRIM_BELOW`], approximate above). Redis keeps history by count only.
fn take_history_trim(url: &str) -> Result<(String, String)> {
    let (url, retention) = HistoryRetention::take_from_url(url)?;
    if retention.max_age.is_some() {
        return Err(StoreError::BadUrl {
            url: crate::url::redact_password(&url),
            reason: format!(
                "Redis keeps history by count only (`{KEEP_PARAMETER}=N`): its stream \
                 entries carry no time, so `{MAX_AGE_PARAMETER}` is not supported here"
            ),
        });
    }
    let history_trim = if retention.keep < EXACT_TRIM_BELOW {
        format!("={}", retention.keep)
    } else {
        format!("~{}", retention.keep)
    };
    Ok((url, history_trim))
}

/// The client for `url`, trusting `root_certificates` (PEM) for TLS where given.
fn client_for(
    url: &str,
    target: &url::Target,
    root_certificates: Option<Vec<u8>>,
) -> Result<Client> {
    if target.tls && rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls panics at the first TLS connection unless exactly one crypto provider is
        // compiled in or one is installed; install ring unless the program chose already.
        // An error means another thread installed one first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    match root_certificates {
        Some(root_cert) if target.tls => Client::build_with_tls(
            url,
            ::redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            },
        ),
        _ => Client::open(url),
    }
    .map_err(|error| StoreError::BadUrl {
        url: target.description.clone(),
        reason: error.to_string(),
    })
}

/// The connection manager of `client`, connected within [`CONNECT_TIMEOUT`].
async fn connect(client: &Client, description: &str) -> Result<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        // A few quick retries: an unreachable server must fail the open within the connect
        // timeout, and a dropped connection is retried again at the next operation anyway.
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        ConnectionManager::new_with_config(client.clone(), config),
    )
    .await
    {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(redis_error(description, error, Access::Read)),
        Err(_elapsed) => Err(StoreError::Unavailable {
            store: description.to_owned(),
            reason: format!(
                "no connection within {} s: check the host and port, and that a firewall \
                 lets the connection through",
                CONNECT_TIMEOUT.as_secs()
            ),
        }),
    }
}

impl RedisStore {
    /// The key's document and pending arrivals, after appending `arrival` to them if given:
    /// one pipelined round trip of `RPUSH` (the append), `HMGET` of the version and document,
    /// `LRANGE` of the arrivals and `TIME`. Not one atomic step, and it need not be: the
    /// arrivals are read *after* the document, and a CAS naming the version they make matches
    /// only while the document is still the one read (no write took arrivals since) and as
    /// many are pending as were read (none appended since), so exactly those read.
    async fn read_key(&self, key: &str, arrival: Option<&[u8]>) -> Result<Option<Versioned>> {
        let names = &self.inner.names;
        let mut pipeline = ::redis::pipe();
        if let Some(arrival) = arrival {
            pipeline
                .cmd("RPUSH")
                .arg(names.arrivals(key))
                .arg(arrival)
                .ignore();
        }
        pipeline
            .cmd("HMGET")
            .arg(names.doc(key))
            .arg("v")
            .arg("d")
            .cmd("LRANGE")
            .arg(names.arrivals(key))
            .arg(0)
            .arg(-1)
            .cmd("TIME");
        let mut connection = self.inner.connection.clone();
        let sent = BootInstant::now();
        // An append whose answer is lost may have landed (or land later): its caller writes
        // the enqueue itself instead, and the core takes that copy in as nothing.
        let access = if arrival.is_some() {
            Access::Write
        } else {
            Access::Read
        };
        let (fields, arrivals, time): (Value, Value, Value) = self
            .bounded(access, pipeline.query_async(&mut connection))
            .await?;
        self.observe_time(&time, sent)?;
        let Value::Array(fields) = fields else {
            return Err(self.unexpected("HMGET", &fields));
        };
        let Value::Array(arrivals) = arrivals else {
            return Err(self.unexpected("LRANGE", &arrivals));
        };
        let Some(arrivals) = arrivals.iter().map(bytes).collect::<Option<Vec<_>>>() else {
            return Err(self.unexpected("LRANGE", &Value::Array(arrivals)));
        };
        match fields.as_slice() {
            [Value::Nil, _] => Ok(None),
            [version, document] => match (bytes(version), bytes(document)) {
                (Some(version), Some(document)) => {
                    Ok(Some(versioned_with(version, document, arrivals)))
                }
                _ => Err(self.unexpected("HMGET", &Value::Array(fields.clone()))),
            },
            _ => Err(self.unexpected("HMGET", &Value::Array(fields.clone()))),
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    fn describe(&self) -> String {
        self.inner.description.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            watch: true,
            watch_documents: true,
            watch_tagged: true,
            conflict_returns_current: true,
            clock: true,
            clock_uncertain_ms: 0,
            due_index: true,
            locked_update: false,
            update_when_contended: false,
            watch_complete: false,
            arrivals: true,
            arrivals_by_default: false,
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
        document: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        self.cas_waking(key, expected, document, history, due_ms, None)
            .await
    }

    async fn cas_waking(
        &self,
        key: &str,
        expected: Option<&Version>,
        document: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
        wake: Option<&[String]>,
    ) -> Result<CasOutcome> {
        let names = &self.inner.names;
        let mut invocation = self.inner.cas_script.prepare_invoke();
        invocation
            .key(names.doc(key))
            .key(names.history(key))
            .key(names.keys())
            .key(names.due())
            .key(names.arrivals(key))
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.map(|version| version.0.as_str()).unwrap_or(""))
            .arg(document)
            .arg(key)
            .arg(&names.channel)
            .arg(&self.inner.history_trim)
            .arg(due_ms.map(|ms| ms.to_string()).unwrap_or_default());
        // Tags are ticket ids: no newlines, no `*`.
        invocation.arg(wake.map_or_else(|| "*".to_string(), |tags| tags.join("\n")));
        for entry in history {
            invocation.arg(entry.as_slice());
        }
        let mut connection = self.inner.connection.clone();
        let sent = BootInstant::now();
        let reply: Value = self
            .bounded(Access::Write, invocation.invoke_async(&mut connection))
            .await?;
        let Value::Array(parts) = &reply else {
            return Err(self.unexpected("the CAS script", &reply));
        };
        match parts.as_slice() {
            [written, seconds, microseconds, rest @ ..] => {
                self.observe_time_parts(seconds, microseconds, sent)?;
                match (integer(written), rest) {
                    (Some(1), [version]) => match bytes(version) {
                        Some(version) => Ok(CasOutcome::Written {
                            version: version_of(version),
                        }),
                        None => Err(self.unexpected("the CAS script", &reply)),
                    },
                    (Some(0), []) => Ok(CasOutcome::Conflict { current: None }),
                    (Some(0), [version, document, arrivals @ ..]) => {
                        let arrivals: Option<Vec<Vec<u8>>> = arrivals.iter().map(bytes).collect();
                        match (bytes(version), bytes(document), arrivals) {
                            (Some(version), Some(document), Some(arrivals)) => {
                                Ok(CasOutcome::Conflict {
                                    current: Some(Versioned {
                                        version: version_of(version),
                                        bytes: document,
                                        arrivals,
                                    }),
                                })
                            }
                            _ => Err(self.unexpected("the CAS script", &reply)),
                        }
                    }
                    _ => Err(self.unexpected("the CAS script", &reply)),
                }
            }
            _ => Err(self.unexpected("the CAS script", &reply)),
        }
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        // Entry IDs are `<seq>-0`; nothing lies beyond u64::MAX.
        let Some(first_seq) = after_seq.checked_add(1) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut command = ::redis::cmd("XRANGE");
        command
            .arg(self.inner.names.history(key))
            .arg(format!("{first_seq}-0"))
            .arg("+")
            .arg("COUNT")
            .arg(limit);
        self.read_history(command, "XRANGE").await
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut command = ::redis::cmd("XREVRANGE");
        command
            .arg(self.inner.names.history(key))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit);
        self.read_history(command, "XREVRANGE").await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let (min, max) = lex_range(prefix);
        let mut command = ::redis::cmd("ZRANGEBYLEX");
        command.arg(self.inner.names.keys()).arg(min).arg(max);
        let mut connection = self.inner.connection.clone();
        let members: Vec<Vec<u8>> = self
            .bounded(Access::Read, command.query_async(&mut connection))
            .await?;
        let mut keys = Vec::with_capacity(members.len());
        for member in members {
            match String::from_utf8(member) {
                Ok(key) => keys.push(key),
                // baton writes only UTF-8 keys: a member that is not was put there by hand.
                Err(error) => tracing::warn!(
                    member = ?error.as_bytes(),
                    "{}: skipping a member of {} that is not UTF-8",
                    self.inner.description,
                    self.inner.names.keys()
                ),
            }
        }
        debug_assert!(keys.iter().all(|key| key.starts_with(prefix)));
        Ok(keys)
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        _docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        // The index is one sorted set for every key of the namespace, ordered by due time:
        // read it a page at a time, earliest first, keeping the keys under `prefix`. The first
        // page is as many keys as asked for, each next one twice the last, up to `PAGE_MAX`.
        const PAGE_MAX: isize = 256;
        let mut size = isize::try_from(limit)
            .unwrap_or(PAGE_MAX)
            .clamp(1, PAGE_MAX);
        let mut due = Vec::new();
        let mut start: isize = 0;
        let mut connection = self.inner.connection.clone();
        while due.len() < limit {
            let mut command = ::redis::cmd("ZRANGE");
            command
                .arg(self.inner.names.due())
                .arg(start)
                .arg(start + size - 1)
                .arg("WITHSCORES");
            let page: Vec<(Vec<u8>, f64)> = self
                .bounded(Access::Read, command.query_async(&mut connection))
                .await?;
            let n_read = page.len();
            for (member, score) in page {
                // baton writes only UTF-8 keys; a member that is not was put there by hand.
                let Ok(key) = String::from_utf8(member) else {
                    continue;
                };
                if key.starts_with(prefix) && due.len() < limit {
                    // Scores are whole milliseconds, exact in a double up to 2^53.
                    due.push(DueKey {
                        key,
                        due_ms: score.max(0.0) as u64,
                        doc: None,
                    });
                }
            }
            if n_read < size.unsigned_abs() {
                break;
            }
            start += size;
            size = size.saturating_mul(2).min(PAGE_MAX);
        }
        Ok(Some(due))
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        let watched = watch::Watched::Key(key);
        Ok(self
            .watcher()
            .subscribe(watched)
            .await
            .map(WatchHandle::new))
    }

    async fn watch_tagged(&self, key: &str, tag: &str) -> Result<Option<WatchHandle>> {
        let watched = watch::Watched::Tagged(key, tag);
        Ok(self
            .watcher()
            .subscribe(watched)
            .await
            .map(WatchHandle::new))
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<Option<WatchHandle>> {
        let watched = watch::Watched::Prefix(prefix);
        Ok(self
            .watcher()
            .subscribe(watched)
            .await
            .map(WatchHandle::new))
    }

    async fn clock(&self) -> Result<StoreClock> {
        if let Some(now) = self.inner.clock.now() {
            return Ok(now);
        }
        // Only before the first reply with a time (open reads one, so hardly ever).
        let mut connection = self.inner.connection.clone();
        let sent = BootInstant::now();
        let time: Value = self
            .bounded(
                Access::Read,
                ::redis::cmd("TIME").query_async(&mut connection),
            )
            .await?;
        self.observe_time(&time, sent)?;
        self.inner
            .clock
            .now()
            .ok_or_else(|| self.unexpected("TIME", &time))
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        check_record(name, bytes)?;
        let mut command = ::redis::cmd("HSET");
        command
            .arg(self.inner.names.records(key))
            .arg(name)
            .arg(bytes);
        let mut connection = self.inner.connection.clone();
        // The reply counts the fields added (0 when one was replaced): nothing to check.
        let _: Value = self
            .bounded(Access::Write, command.query_async(&mut connection))
            .await?;
        Ok(())
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        check_record_name(name)?;
        let mut command = ::redis::cmd("HGET");
        command.arg(self.inner.names.records(key)).arg(name);
        let mut connection = self.inner.connection.clone();
        let reply: Value = self
            .bounded(Access::Read, command.query_async(&mut connection))
            .await?;
        match reply {
            Value::Nil => Ok(None),
            Value::BulkString(record) => Ok(Some(record)),
            other => Err(self.unexpected("HGET", &other)),
        }
    }
}

impl RedisStore {
    async fn read_history(&self, command: ::redis::Cmd, name: &str) -> Result<Vec<HistoryRecord>> {
        let mut connection = self.inner.connection.clone();
        let reply: Value = self
            .bounded(Access::Read, command.query_async(&mut connection))
            .await?;
        let Value::Array(entries) = &reply else {
            return Err(self.unexpected(name, &reply));
        };
        entries
            .iter()
            .map(|entry| history_record(entry).ok_or_else(|| self.unexpected(name, entry)))
            .collect()
    }
}

/// The `[name, value]` reply of `CONFIG GET name` (an array in RESP2, a map in RESP3).
fn config_pair(value: Value) -> Option<(String, String)> {
    let pair = match value {
        Value::Array(items) => match <[Value; 2]>::try_from(items) {
            Ok([name, setting]) => (name, setting),
            Err(_) => return None,
        },
        Value::Map(mut items) if items.len() == 1 => items.pop()?,
        _ => return None,
    };
    let text =
        |value: &Value| bytes(value).map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    Some((text(&pair.0)?, text(&pair.1)?))
}

/// What to warn about in the server's persistence settings (`CONFIG GET` replies by name):
/// nothing persisted, or baton's keys open to eviction. Missing settings warn about nothing.
fn persistence_warnings(description: &str, settings: &HashMap<String, String>) -> Vec<String> {
    let setting = |name: &str| settings.get(name).map(String::as_str);
    let mut warnings = Vec::new();
    if setting("appendonly") == Some("no")
        && setting("save").is_some_and(|save| save.trim().is_empty())
    {
        warnings.push(format!(
            "{description} persists nothing (appendonly no, save \"\"): a restart of Redis loses \
             every queue, lease and history entry. Fences stay increasing anyway (a grant's fence \
             is at least the granting client's wall-clock milliseconds × 1000), but queued jobs \
             and waiters are lost; to keep them, enable the append-only file: \
             `redis-cli CONFIG SET appendonly yes` and `appendonly yes` in redis.conf"
        ));
    }
    let limited = setting("maxmemory").is_some_and(|bytes| bytes != "0");
    if let Some(policy) = setting("maxmemory-policy") {
        if limited && policy.starts_with("allkeys-") {
            warnings.push(format!(
                "{description} may evict baton's keys when it is full (maxmemory-policy \
                 {policy}): an evicted key loses its queue; set `maxmemory-policy noeviction` \
                 (or a volatile-* policy: baton's keys have no TTL)"
            ));
        }
    }
    warnings
}

/// A reply, shortened for an error message (a document can be 256 KiB).
fn brief(value: &Value) -> String {
    let mut text = format!("{value:?}");
    if text.len() > 200 {
        let mut end = 200;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn warns_when_nothing_persists_or_keys_may_be_evicted() {
        let settings = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let warnings = |pairs: &[(&str, &str)]| persistence_warnings("redis://h", &settings(pairs));

        let nothing = warnings(&[("appendonly", "no"), ("save", "")]);
        assert_eq!(nothing.len(), 1);
        assert!(nothing[0].contains("persists nothing"), "{}", nothing[0]);
        assert!(
            nothing[0].contains("Fences stay increasing"),
            "{}",
            nothing[0]
        );
        assert!(
            nothing[0].contains("CONFIG SET appendonly yes"),
            "{}",
            nothing[0]
        );

        assert!(warnings(&[("appendonly", "yes"), ("save", "")]).is_empty());
        assert!(warnings(&[("appendonly", "no"), ("save", "3600 1")]).is_empty());
        assert!(warnings(&[]).is_empty(), "CONFIG refused: nothing to say");

        let evicting = warnings(&[
            ("maxmemory", "1000000"),
            ("maxmemory-policy", "allkeys-lru"),
        ]);
        assert_eq!(evicting.len(), 1);
        assert!(evicting[0].contains("noeviction"), "{}", evicting[0]);
        assert!(warnings(&[("maxmemory", "0"), ("maxmemory-policy", "allkeys-lru")]).is_empty());
        assert!(warnings(&[("maxmemory", "100"), ("maxmemory-policy", "volatile-lru")]).is_empty());
    }

    #[test]
    fn config_replies_parse_in_both_protocols() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        assert_eq!(
            config_pair(Value::Array(vec![bulk("save"), bulk("")])),
            Some(("save".to_owned(), String::new()))
        );
        assert_eq!(
            config_pair(Value::Map(vec![(bulk("appendonly"), bulk("no"))])),
            Some(("appendonly".to_owned(), "no".to_owned()))
        );
        assert_eq!(config_pair(Value::Array(vec![])), None);
    }
}
