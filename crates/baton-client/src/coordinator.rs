//! The coordinator: the one object through which the client reads and writes a store.
//!
//! It reads keys itself ([`Coordinator::read`], [`Coordinator::adopt`]: a document with the
//! store's clock) and keeps what it saw (`crate::known`); it writes through the transport it
//! was made with (`crate::executor`: optimistic CAS, SQLite's locked update, or `baton serve`),
//! chosen once here, so no feature asks which one it runs on. A write that leaves events due
//! starts their delivery ([`crate::notify`]), except in the coordinator of a delivery itself.

use std::sync::Arc;

use baton_core::kv::Write;
use baton_core::{Doc, Observer, Request};
use baton_store::url::OpenMode;
use baton_store::{Store, StoreClock, StoreError, Version, Versioned};

use crate::delivery::{spawn_delivery, Recorder};
use crate::error::ClientError;
use crate::executor::direct::Direct;
use crate::executor::locked::{LockWhen, Locked};
use crate::executor::optimistic::Optimistic;
use crate::executor::server::Server;
pub use crate::executor::Executed;
use crate::executor::{execute, list_keys, EventsDue, Executor};
use crate::known::{Cached, Known};
use crate::remote::RemoteStore;
use crate::settings::{Freezes, SettingsCache, SettingsChange, SettingsChanged, SETTINGS_FRESH_MS};
use crate::time::{mono_ms, wall_ms, BootClock, LocalClock};
use crate::turn::Now;

/// A key's document as read, with the store clock read alongside.
#[derive(Clone, Debug)]
pub struct KeySnapshot {
    /// The document (`None`: the key has never been used).
    pub doc: Option<Doc>,
    /// The store's clock at the read.
    pub clock: StoreClock,
    /// The caller's wall clock at the read.
    pub wall_ms: u64,
    /// The local clock ([`Coordinator::local_ms`]) before the read began: the store's clock
    /// above was read after it.
    pub read_from_ms: u64,
}

/// Runs operations on keys of one store.
#[derive(Debug)]
pub struct Coordinator {
    store: Arc<dyn Store>,
    /// What it last saw of each key, shared with its executor.
    known: Arc<Known>,
    local: Arc<dyn LocalClock>,
    /// The rules and freezes, cached ([`crate::settings`]), shared with its executor.
    settings: Arc<SettingsCache>,
    /// How its writes reach the store.
    executor: Arc<dyn Executor>,
    /// Its writes run the core here (not on a server): its waiters may wait in a key's
    /// backlog, since it can withdraw them from a segment there.
    direct: bool,
    /// Whether its workers have lately lost claims to other workers ([`crate::jobs`]).
    claims: crate::claim_races::ClaimRaces,
}

/// How a coordinator's writes reach its store.
enum Transport {
    /// Written to the store itself; `true`: writes that leave events due start their delivery.
    Direct { delivers: bool },
    /// Sent to `baton serve`.
    Server(Arc<RemoteStore>),
}

impl Coordinator {
    /// A coordinator over `store`, keeping local deadlines on the boot-time clock.
    pub fn new(store: Arc<dyn Store>) -> Coordinator {
        Coordinator::with_local_clock(store, Arc::new(BootClock))
    }

    /// A coordinator over `store` keeping local deadlines on `local` (tests: a clock that
    /// jumps as after a suspend).
    pub fn with_local_clock(store: Arc<dyn Store>, local: Arc<dyn LocalClock>) -> Coordinator {
        let transport = Transport::Direct { delivers: true };
        Coordinator::assemble(store, local, Arc::default(), transport)
    }

    /// A coordinator for the store at `url`: through `baton serve` for `http(s)://…` (with
    /// `token`, the server's), else the store itself.
    pub async fn open(url: &str, token: Option<String>) -> Result<Coordinator, StoreError> {
        Coordinator::open_in(url, token, OpenMode::Create).await
    }

    /// [`Coordinator::open`] in `mode`: with [`OpenMode::Existing`], a store that is not there
    /// is [`StoreError::Missing`] and nothing is created (for commands that only read). A
    /// server's store was opened by the server: the mode changes nothing there.
    pub async fn open_in(
        url: &str,
        token: Option<String>,
        mode: OpenMode,
    ) -> Result<Coordinator, StoreError> {
        if crate::remote::is_remote(url) {
            let server = RemoteStore::open(url, token).await?;
            return Ok(Coordinator::through_server(Arc::new(server)));
        }
        let store = baton_store::url::open_in(url, mode).await?;
        Ok(Coordinator::new(crate::traced::traced(store)))
    }

    /// A coordinator whose operations `server` runs: it reads through the server as from any
    /// store, and sends each write there instead of writing documents.
    pub fn through_server(server: Arc<RemoteStore>) -> Coordinator {
        let store: Arc<dyn Store> = server.clone();
        let transport = Transport::Server(server);
        Coordinator::assemble(store, Arc::new(BootClock), Arc::default(), transport)
    }

    /// The coordinator of a delivery: it records events like any other, sharing the rules
    /// `settings` holds, but starts no deliveries of its own.
    pub(crate) fn delivering(store: Arc<dyn Store>, settings: Arc<SettingsCache>) -> Coordinator {
        let transport = Transport::Direct { delivers: false };
        Coordinator::assemble(store, Arc::new(BootClock), settings, transport)
    }

    /// A coordinator over `store` writing through `transport`: the one place a transport is
    /// chosen (a store with locked updates gets them).
    fn assemble(
        store: Arc<dyn Store>,
        local: Arc<dyn LocalClock>,
        settings: Arc<SettingsCache>,
        transport: Transport,
    ) -> Coordinator {
        let known = Arc::new(Known::default());
        let direct = matches!(transport, Transport::Direct { .. });
        let executor: Arc<dyn Executor> = match transport {
            Transport::Server(server) => {
                Arc::new(Server::new(server, known.clone(), local.clone()))
            }
            Transport::Direct { delivers } => {
                let events_due = delivers.then(|| deliveries(&store, &settings));
                let direct = Direct::new(
                    store.clone(),
                    known.clone(),
                    settings.clone(),
                    local.clone(),
                    events_due,
                );
                let capabilities = store.capabilities();
                if capabilities.locked_update {
                    Arc::new(Locked::new(direct, LockWhen::Always))
                } else if capabilities.update_when_contended {
                    Arc::new(Locked::new(direct, LockWhen::Contended))
                } else {
                    Arc::new(Optimistic::new(direct))
                }
            }
        };
        Coordinator {
            store,
            known,
            local,
            settings,
            executor,
            direct,
            claims: crate::claim_races::ClaimRaces::default(),
        }
    }

    /// Whether its workers have lately lost claims to other workers: kept here, as the one
    /// object every worker slot of a process shares.
    pub(crate) fn claim_races(&self) -> &crate::claim_races::ClaimRaces {
        &self.claims
    }

    /// Whether its waiters may wait in a key's backlog ([`baton_core::backlog`]): its writes
    /// run the core here. Through a server they do not (a server that predates backlogged
    /// turns refuses the ask, and withdrawing from a segment is an operator's operation there).
    pub(crate) fn may_wait_in_backlog(&self) -> bool {
        self.direct
    }

    /// Now on the local clock that safety deadlines are kept on ([`LocalClock`]): the
    /// `holds_until_ms` of a lease, the bases of writes.
    pub fn local_ms(&self) -> u64 {
        self.local.now_ms()
    }

    /// Now on both of this process's clocks: the local clock ([`Coordinator::local_ms`]) and
    /// the wall clock a lease's end is shown on.
    pub fn now(&self) -> Now {
        Now {
            local_ms: self.local_ms(),
            wall_ms: wall_ms(),
        }
    }

    /// The shortest `--after` of the `waited` rules watching `key`, from this process's copy of
    /// the rules (at most [`SETTINGS_FRESH_MS`] old); `None` when no such rule watches it, or
    /// the rules cannot be read now (a waiter's regular refresh raises the event then).
    pub(crate) async fn waited_after_ms(&self, key: &str) -> Option<u64> {
        let settings = self
            .settings
            .settings(&self.store, mono_ms(), SETTINGS_FRESH_MS)
            .await
            .ok()?;
        settings
            .watching(key)
            .filter(|rule| rule.wants(baton_core::notify::EventKind::Waited))
            .filter_map(|rule| rule.after_ms)
            .min()
    }

    /// Drops the cached settings: the next write reads them (after this process changed them).
    pub fn forget_settings(&self) {
        self.settings.forget();
    }

    /// How many of this coordinator's writes lost to a concurrent one (each was computed
    /// again and retried).
    pub fn conflicts(&self) -> u64 {
        self.known.conflicts()
    }

    /// The store this coordinator reads (and, unless through a server, writes).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The keys under `prefix` that have a document, sorted: baton's own documents (shared
    /// values, [`baton_core::names`]) are not keys and are left out.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, ClientError> {
        list_keys(self.store.as_ref(), prefix).await
    }

    /// Runs `request` on `key` until it is written, refused, or fails
    /// (`crate::executor::Executor::run`: after an ambiguous failure `request` stays marked
    /// as a retry, with an error too, so a caller that retries it later carries what its first
    /// attempt saw). Every operation passes here, and `-v` logs it once.
    pub async fn execute(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        execute(self.executor.as_ref(), key, request).await
    }

    /// Writes shared value `name` (`write.value: None` deletes it): the version written.
    pub(crate) async fn write_value(&self, name: &str, write: &Write) -> Result<u64, ClientError> {
        self.executor.write_value(name, write).await
    }

    /// Sets or ends a freeze, and has the keys it covers say so ([`crate::freeze`]).
    pub(crate) async fn change_settings(
        &self,
        change: SettingsChange,
    ) -> Result<SettingsChanged, ClientError> {
        self.executor.change_settings(change).await
    }

    /// The freezes this caller may read, ended ones included.
    pub(crate) async fn freezes(&self) -> Result<Freezes, ClientError> {
        self.executor.freezes().await
    }

    /// Puts record `name` beside `key` (a job's submission, a run's report).
    pub async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
        self.executor.put_record(key, name, bytes).await
    }

    /// Reads `key` from the store (not the cache), with the store's clock.
    pub async fn read(&self, key: &str) -> Result<KeySnapshot, ClientError> {
        let started = std::time::Instant::now();
        let read_from_ms = self.local_ms();
        let read = async {
            let cached = self.known.load(self.store.as_ref(), key).await?;
            let clock = self.store.clock().await?;
            Ok(KeySnapshot {
                doc: cached.doc.map(Arc::unwrap_or_clone),
                clock,
                wall_ms: wall_ms(),
                read_from_ms,
            })
        };
        let result = read.await;
        let said = match &result {
            Ok(KeySnapshot { doc: None, .. }) => "never used".to_owned(),
            Ok(KeySnapshot { doc: Some(doc), .. }) => format!("{} live tickets", doc.tickets.len()),
            Err(error) => format!("failed: {error}"),
        };
        let ms = started.elapsed().as_millis();
        tracing::info!("read {}: {said} ({ms} ms)", key.escape_debug());
        result
    }

    /// Takes a document a watch delivered ([`baton_store::WatchHandle::changed`]) as the key's
    /// latest, as [`Coordinator::read`] would have returned it: into the cache (so the next
    /// operation is one CAS) and before the observer, with the store clock read now. A pushed
    /// document may be older than one this process wrote since; the CAS that follows finds out,
    /// so trusting it costs at most a conflict, never a wrong write.
    pub async fn adopt(&self, key: &str, pushed: Versioned) -> Result<KeySnapshot, ClientError> {
        let cached = self.known.decode(key, pushed)?;
        self.taken(key, cached).await
    }

    /// [`Coordinator::adopt`], unless `skip` says the document tells nothing (then it is not
    /// taken, and `None`).
    pub async fn adopt_unless(
        &self,
        key: &str,
        pushed: Versioned,
        skip: impl FnOnce(&Doc) -> bool,
    ) -> Result<Option<KeySnapshot>, ClientError> {
        let cached = self.known.decode(key, pushed)?;
        if cached.doc.as_deref().is_some_and(skip) {
            return Ok(None);
        }
        self.taken(key, cached).await.map(Some)
    }

    /// A pushed document taken as the key's latest: cached, with the store clock read now.
    async fn taken(&self, key: &str, cached: Cached) -> Result<KeySnapshot, ClientError> {
        self.known.remember_read(key, cached.clone());
        let read_from_ms = self.local_ms();
        let clock = self.store.clock().await?;
        Ok(KeySnapshot {
            doc: cached.doc.map(Arc::unwrap_or_clone),
            clock,
            wall_ms: wall_ms(),
            read_from_ms,
        })
    }

    /// Takes a document read along with something else (a worker's look at the due index) as
    /// the key's latest, into the cache: the next operation on the key starts from it, as from
    /// any cached document, so it costs one CAS if the document is still current and a
    /// conflict if not, never a wrong write.
    pub fn take_read(&self, key: &str, read: Versioned) -> Result<(), ClientError> {
        let cached = self.known.decode(key, read)?;
        self.known.remember_read(key, cached);
        Ok(())
    }

    /// Takes a document pushed to a holder that follows `key` into the cache, unless it is
    /// surely older than the one there ([`crate::follow`]).
    pub(crate) fn take_pushed(&self, key: &str, pushed: Versioned) -> Result<bool, ClientError> {
        self.known.remember_pushed(key, pushed)
    }

    /// The document of `key` this coordinator last read or wrote, if any: possibly stale, so a
    /// hint (what to read ahead), never an answer.
    pub fn cached_doc(&self, key: &str) -> Option<Doc> {
        self.known
            .cached(key)
            .and_then(|cached| cached.doc)
            .map(Arc::unwrap_or_clone)
    }

    /// The arrivals of `key` read with the document this coordinator last read (none when
    /// it last wrote the key, or took a push).
    pub(crate) fn cached_arrivals(&self, key: &str) -> Arc<[baton_core::arrival::Arrival]> {
        self.known
            .cached(key)
            .map_or_else(|| Arc::new([]) as Arc<[_]>, |cached| cached.arrivals)
    }

    /// The finishes of the document of `key` this coordinator last read, if the arrivals read
    /// with it hold ticket `id`'s: that document was written before the arrival was taken in,
    /// so any ticket of the turn ended after it ([`baton_core::Request::finishes_seen`]).
    pub(crate) fn finishes_with_arrival(&self, key: &str, id: &str) -> Option<u64> {
        let cached = self.known.cached(key)?;
        let pending = cached.arrivals.iter().any(|a| a.enqueue.id == id);
        pending.then(|| cached.doc.map_or(0, |doc| doc.finishes))
    }

    /// The document of `key` this coordinator last read or wrote, if it did so within
    /// `within_ms`.
    pub(crate) fn recent_doc(&self, key: &str, within_ms: u64) -> Option<Doc> {
        let cached = self.known.cached(key)?;
        if mono_ms().saturating_sub(cached.seen_ms) > within_ms {
            return None;
        }
        cached.doc.map(Arc::unwrap_or_clone)
    }

    /// Whether this coordinator's cache holds a sight of `key` (a read, a write, a push).
    pub(crate) fn knows(&self, key: &str) -> bool {
        self.known.cached(key).is_some()
    }

    /// Reads `key` into the cache, from which the next operation on it writes.
    pub(crate) async fn read_into_cache(&self, key: &str) -> Result<(), ClientError> {
        self.known.load(self.store.as_ref(), key).await.map(drop)
    }

    /// The version of `key` this coordinator last read or wrote, if any.
    pub fn cached_version(&self, key: &str) -> Option<Version> {
        self.known.cached(key).and_then(|cached| cached.version)
    }

    /// When a store has no clock: milliseconds on this process's monotonic clock, on which
    /// [`Observer`] deadlines are expressed.
    pub fn mono_ms(&self) -> u64 {
        mono_ms()
    }

    /// This coordinator's observer of `key` (a copy).
    pub fn observer(&self, key: &str) -> Observer {
        self.known.observer(key)
    }
}

/// Starts the delivery of a key's events after a write left them due, with a coordinator of
/// the delivery's own that records events but starts no deliveries.
fn deliveries(store: &Arc<dyn Store>, settings: &Arc<SettingsCache>) -> EventsDue {
    let (store, settings) = (store.clone(), settings.clone());
    Arc::new(move |key: &str| {
        let (for_delivery, shared) = (store.clone(), settings.clone());
        let recorder = move || Coordinator::delivering(for_delivery, shared);
        spawn_delivery(store.clone(), settings.clone(), key, recorder);
    })
}

#[async_trait::async_trait]
impl Recorder for Coordinator {
    async fn read_doc(&self, key: &str) -> Result<Option<Doc>, ClientError> {
        Ok(self.read(key).await?.doc)
    }

    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Vec<baton_store::HistoryRecord>, ClientError> {
        Ok(self.store.history_tail(key, limit).await?)
    }

    async fn record(&self, key: &str, request: &mut Request) -> Result<(), ClientError> {
        self.execute(key, request).await.map(|_| ())
    }
}
