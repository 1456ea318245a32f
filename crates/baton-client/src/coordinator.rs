//! The load → apply → CAS loop.
//!
//! A warm client keeps each key's last document and version, so an uncontended operation costs
//! one round trip (the CAS); a stale cache costs a conflict, which returns the current document
//! where the store can. An answer computed from a cached document is trusted only if it writes
//! (the CAS proves the cache was current); a refusal or an unchanged result from a cached
//! document is recomputed from a fresh read before it is reported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::backlog::Segment;
use baton_core::freeze::Paused;
use baton_core::lease::Basis;
use baton_core::notify::{self, Rule, Settings};
use baton_core::op::Refusal;
use baton_core::{
    apply_with, decode, encode, Applied, Clock, Doc, Inputs, Observer, Reply, Request,
};
use baton_store::url::OpenMode;
use baton_store::{CasOutcome, Replacement, Store, StoreClock, StoreError, Version, Versioned};

use crate::error::ClientError;
use crate::notify::{spawn_delivery, SettingsCache, SETTINGS_FRESH_MS};
use crate::remote::{RemoteStore, RunError, MAX_LOST_ANSWERS};
use crate::time::{mono_ms, wall_ms, BootClock, LocalClock};
use crate::turn::{Now, WriteAnswer};
use locked::Locked;

mod locked;

/// How many conflicting writes in a row before giving up.
const MAX_CONFLICTS: u32 = 200;

/// The result of an operation that was accepted and written (or needed no write).
#[derive(Clone, Debug)]
pub struct Executed {
    /// What the operation did.
    pub reply: Reply,
    /// The key's document after it.
    pub doc: Doc,
    /// The version this operation wrote (`None`: it wrote nothing, or a server wrote it).
    pub version: Option<Version>,
    /// The tickets this operation's write ended, as its history entries record them (empty
    /// when it wrote nothing, or a server wrote it).
    pub ended: Vec<baton_core::Finished>,
    /// Grants made by it, in order: (ticket id, fence). When the answer needed no write (a
    /// retry recognised), the grants of this call's attempts that may have landed unseen.
    pub granted: Vec<(String, u64)>,
    /// When the document this operation wrote was computed, on the local clock: every phase
    /// it set (a lease, a claim, a waiter lease) stands until [`Basis`] says. When the answer
    /// needed no write (the core recognised a retry whose first attempt had landed unseen),
    /// the earliest basis of this call's attempts that may have landed; `None` when there were
    /// none, or when the request came already marked as a retry ([`Request::finishes_seen`]):
    /// the answer then describes what some earlier write did, at a time this call cannot know
    /// (an enqueue retried after an outage, whose first write may have landed late), and no
    /// deadline may be derived from it.
    pub basis: Option<Basis>,
}

impl Executed {
    /// The answer as a turn reads it ([`WriteAnswer`]), for `op` as sent.
    pub fn answer<'a>(&'a self, op: &'a baton_core::Op) -> WriteAnswer<'a> {
        WriteAnswer {
            op,
            reply: &self.reply,
            granted: &self.granted,
            basis: self.basis,
        }
    }
}

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

/// A key's document as this coordinator last saw it.
#[derive(Clone, Debug)]
struct Cached {
    version: Option<Version>,
    doc: Option<Doc>,
}

/// What a write read besides the key's document ([`Coordinator::prepare`]): owned, so that a
/// locked update can carry it into the store's lock.
struct Prepared {
    /// When the document this write computes was computed, on the local clock.
    basis: Basis,
    store_clock: StoreClock,
    uncertain_ms: u64,
    observer: Observer,
    mono_ms: u64,
    wall: u64,
    /// The backlog segment the document read asked for, and that segment.
    wanted: Option<(u64, u64)>,
    segment: Option<Segment>,
    settings: Arc<Settings>,
    paused: Option<Paused>,
}

impl Prepared {
    /// The core's clock, as read for this write.
    fn clock(&self) -> Clock<'_> {
        core_clock(
            &self.store_clock,
            self.uncertain_ms,
            &self.observer,
            self.mono_ms,
            self.wall,
        )
    }

    /// The core's answer to `request` on `doc`, with its events noted on their tickets in the
    /// very write that makes them.
    fn apply(&self, key: &str, doc: Option<&Doc>, request: &Request) -> Result<Applied, Refusal> {
        let clock = self.clock();
        let inputs = Inputs {
            segment: self.segment.as_ref(),
            paused: self.paused.as_ref(),
        };
        let mut applied = apply_with(doc, request, &clock, inputs)?;
        let rules: Vec<&Rule> = self.settings.watching(key).collect();
        notify::record(doc, &mut applied, &rules, self.wall);
        Ok(applied)
    }

    /// The bytes that carry `applied`: the document, its history entries, its place in the due
    /// index and the backlog segment it spilled (written before the document that counts it).
    fn replacement(&self, key: &str, applied: &Applied) -> Result<Replacement, ClientError> {
        let bytes = encode(&applied.doc).map_err(|source| ClientError::TooLarge {
            key: key.to_string(),
            source,
        })?;
        let clock = self.clock();
        Ok(Replacement {
            bytes,
            history: applied.finished.iter().map(|f| f.encode()).collect(),
            due_ms: baton_core::job::due_ms(&applied.doc, clock.job_now_ms(), self.wall),
            records: applied
                .segment_out
                .iter()
                .map(|segment| (segment.record_name(), segment.encode()))
                .collect(),
        })
    }
}

/// What an operation's attempts whose writes may have landed unseen leave for its answer.
#[derive(Debug, Default)]
struct Lost {
    /// The request came already marked as a retry: an earlier call's attempt may have landed,
    /// at a time this call cannot know.
    retried_from_earlier_call: bool,
    /// The earliest basis of this call's attempts that may have landed.
    maybe_landed: Option<Basis>,
    /// The grants those attempts made.
    maybe_granted: Vec<(String, u64)>,
}

impl Lost {
    fn of(request: &Request) -> Lost {
        Lost {
            retried_from_earlier_call: request.finishes_seen.is_some(),
            ..Lost::default()
        }
    }

    /// A write that may have landed: the request is retried marked with what it saw
    /// (`doc`'s finish count), so that the core recognises its own attempt, or refuses it as
    /// uncertain if more tickets ended since than it remembers.
    fn ambiguous(
        &mut self,
        request: &mut Request,
        doc: Option<&Doc>,
        basis: Basis,
        granted: Vec<(String, u64)>,
    ) {
        if request.finishes_seen.is_none() {
            request.finishes_seen = Some(doc.map_or(0, |doc| doc.finishes));
        }
        self.maybe_landed = Some(earlier(self.maybe_landed, basis));
        self.maybe_granted.extend(granted);
    }

    /// The answer of an operation that needed no write, computed from a fresh document.
    fn unchanged(self, applied: Applied) -> Executed {
        let (basis, granted) = if self.retried_from_earlier_call {
            (None, Vec::new())
        } else {
            (self.maybe_landed, self.maybe_granted)
        };
        Executed {
            reply: applied.reply,
            doc: applied.doc,
            version: None,
            ended: Vec::new(),
            granted,
            basis,
        }
    }
}

/// Runs operations on keys of one store.
#[derive(Debug)]
pub struct Coordinator {
    store: Arc<dyn Store>,
    cache: Mutex<HashMap<String, Cached>>,
    observers: Mutex<HashMap<String, Observer>>,
    local: Arc<dyn LocalClock>,
    /// The notification rules, cached ([`crate::notify`]).
    settings: Arc<SettingsCache>,
    /// Whether a write that leaves events due starts their delivery (not in the coordinator
    /// of a delivery itself).
    delivers: bool,
    /// The servers that run this coordinator's operations, when its store is reached through
    /// `baton serve` ([`Coordinator::through_server`]).
    server: Option<Arc<RemoteStore>>,
    /// CAS conflicts so far (a server's metrics).
    conflicts: AtomicU64,
}

impl Coordinator {
    /// A coordinator over `store`, keeping local deadlines on the boot-time clock.
    pub fn new(store: Arc<dyn Store>) -> Coordinator {
        Coordinator::with_local_clock(store, Arc::new(BootClock))
    }

    /// A coordinator over `store` keeping local deadlines on `local` (tests: a clock that
    /// jumps as after a suspend).
    pub fn with_local_clock(store: Arc<dyn Store>, local: Arc<dyn LocalClock>) -> Coordinator {
        Coordinator {
            store,
            cache: Mutex::new(HashMap::new()),
            observers: Mutex::new(HashMap::new()),
            local,
            settings: Arc::default(),
            delivers: true,
            server: None,
            conflicts: AtomicU64::new(0),
        }
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
    /// store, and sends each operation there instead of writing documents
    /// ([`Coordinator::execute`]).
    pub fn through_server(server: Arc<RemoteStore>) -> Coordinator {
        Coordinator {
            server: Some(server.clone()),
            ..Coordinator::new(server)
        }
    }

    /// The servers that run this coordinator's writes, if its store is reached through them.
    pub fn server(&self) -> Option<&RemoteStore> {
        self.server.as_deref()
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

    /// The coordinator of a delivery: it records events like any other, sharing the rules
    /// `settings` holds, but starts no deliveries of its own.
    pub(crate) fn delivering(store: Arc<dyn Store>, settings: Arc<SettingsCache>) -> Coordinator {
        Coordinator {
            settings,
            delivers: false,
            ..Coordinator::new(store)
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
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The store this coordinator writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The keys under `prefix` that have a document, sorted: baton's own documents (shared
    /// values, [`baton_core::names`]) are not keys and are left out.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, ClientError> {
        let started = std::time::Instant::now();
        let listed = self.store.list(prefix).await;
        let ms = started.elapsed().as_millis();
        let mut keys = listed.inspect_err(|error| {
            tracing::info!("list keys {prefix:?}: failed: {error} ({ms} ms)");
        })?;
        keys.retain(|key| !baton_core::names::is_internal(key));
        tracing::info!("list keys {prefix:?}: {} keys ({ms} ms)", keys.len());
        Ok(keys)
    }

    /// Runs `request` on `key` until it is written, refused, or fails.
    ///
    /// After an ambiguous failure (the write may have landed) the request is retried with
    /// [`Request::finishes_seen`] set, and it stays set in `request` when this returns, with
    /// an error too: a caller that retries the same request later (after an outage) must carry
    /// what the first attempt saw, or a retry after many tickets ended could recreate a ticket
    /// that already ended.
    ///
    /// Every operation baton performs passes here, so this is where `-v` logs it, once: the
    /// operation, the key, what came of it and how long it took.
    pub async fn execute(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        let started = std::time::Instant::now();
        let result = self.execute_untraced(key, request).await;
        tracing::info!(
            "{} {}: {} ({} ms)",
            request.op.name(),
            key.escape_debug(),
            said(&result),
            started.elapsed().as_millis()
        );
        result
    }

    async fn execute_untraced(
        &self,
        key: &str,
        request: &mut Request,
    ) -> Result<Executed, ClientError> {
        baton_core::limits::check_key(key).map_err(|e| ClientError::Refused {
            key: key.to_string(),
            refusal: e.into(),
        })?;
        if let Some(server) = &self.server {
            return self.execute_through(server, key, request).await;
        }
        if self.store.capabilities().operations_only {
            // Bytes cannot be written through a server: only a coordinator made by
            // `through_server` can send operations there. Refused before anything is read.
            return Err(ClientError::Store(StoreError::Incompatible {
                store: self.store.describe(),
                reason: "operations through baton serve need Coordinator::through_server".into(),
            }));
        }
        self.settings.prefetch(&self.store, mono_ms());
        let mut current = self.cached(key);
        let mut lost = Lost::of(request);
        let mut fresh = false;
        if self.store.capabilities().locked_update {
            match self
                .execute_locked(key, request, current.take(), &mut lost)
                .await?
            {
                Locked::Done(executed) => return Ok(executed),
                Locked::Fallback { seen, read } => (current, fresh) = (seen, read),
            }
        }
        self.execute_cas(key, request, current, fresh, lost).await
    }

    /// [`Coordinator::execute`] by optimistic writes: apply to the cached (or a fresh)
    /// document, CAS, and on a conflict apply again to the document the conflict returned.
    async fn execute_cas(
        &self,
        key: &str,
        request: &mut Request,
        mut current: Option<Cached>,
        mut fresh: bool,
        mut lost: Lost,
    ) -> Result<Executed, ClientError> {
        let mut conflicts = 0u32;
        loop {
            let cached = match current.take() {
                Some(cached) => cached,
                None => {
                    fresh = true;
                    self.load(key).await?
                }
            };
            let prepared = self.prepare(key, cached.doc.as_ref()).await?;
            let applied = match prepared.apply(key, cached.doc.as_ref(), request) {
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
                return Ok(lost.unchanged(applied));
            }
            let replacement = prepared.replacement(key, &applied)?;
            // A backlog segment before the document that counts it: a writer that dies in
            // between leaves a segment the document never counts, or the very bytes a later
            // writer writes again (`baton_core::backlog`).
            for (name, record) in &replacement.records {
                self.store.put_record(key, name, record).await?;
            }
            // The due index moves with the document, in the same write.
            match self
                .store
                .cas_due(
                    key,
                    cached.version.as_ref(),
                    &replacement.bytes,
                    &replacement.history,
                    replacement.due_ms,
                )
                .await
            {
                Ok(CasOutcome::Written { version }) => {
                    return Ok(self.written(key, applied, version, &prepared));
                }
                Ok(CasOutcome::Conflict { current: now }) => {
                    conflicts += 1;
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                    if conflicts >= MAX_CONFLICTS {
                        return Err(ClientError::Contention {
                            key: key.to_string(),
                            attempts: conflicts,
                        });
                    }
                    let returns_current = self.store.capabilities().conflict_returns_current;
                    current = match now {
                        Some(versioned) => Some(self.decode(key, versioned)?),
                        None if returns_current => Some(Cached {
                            version: None,
                            doc: None,
                        }),
                        None => None,
                    };
                    fresh = current.is_some();
                    if conflicts > 2 {
                        let cap_ms = (1u64 << conflicts.min(6)).min(50);
                        let ms = rand::random_range(0..=cap_ms);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        // The document the conflict returned is stale after the sleep on a busy
                        // key: retrying with it loses again, nearly always, and the client
                        // starves (measured in BENCHMARKS.md). Read afresh instead.
                        current = None;
                    }
                }
                Err(StoreError::Ambiguous { .. }) => {
                    lost.ambiguous(
                        request,
                        cached.doc.as_ref(),
                        prepared.basis,
                        applied.granted,
                    );
                    self.forget(key);
                    current = None;
                }
                Err(e) => {
                    self.forget(key);
                    return Err(e.into());
                }
            }
        }
    }

    /// What a write reads besides the key's document before it computes (`doc`: the document
    /// it will compute from, or the one it expects to find): the clocks, the backlog segment the
    /// document asks for, the settings.
    async fn prepare(&self, key: &str, doc: Option<&Doc>) -> Result<Prepared, ClientError> {
        // Taken before the clock is read: the deadlines this write sets count from here.
        let basis_local_ms = self.local_ms();
        let store_clock = self.store.clock().await?;
        let basis = Basis {
            basis_local_ms,
            behind_ms: match &store_clock {
                StoreClock::Time { behind_ms, .. } => *behind_ms,
                StoreClock::None => 0,
            },
        };
        let wall = wall_ms();
        let wanted = doc.and_then(Doc::segment_wanted);
        let segment = self.wanted_segment(key, doc).await?;
        // The rules and freezes, from a copy at most `SETTINGS_FRESH_MS` old.
        let settings = self
            .settings
            .settings(&self.store, mono_ms(), SETTINGS_FRESH_MS)
            .await?;
        let paused = baton_core::freeze::in_force(&settings.freezes, key, wall);
        Ok(Prepared {
            basis,
            store_clock,
            uncertain_ms: self.store.capabilities().clock_uncertain_ms,
            observer: self.observer(key),
            mono_ms: mono_ms(),
            wall,
            wanted,
            segment,
            settings,
            paused,
        })
    }

    /// The answer of a write that landed at `version`: remembered as the key's latest, with
    /// the delivery of the events it left due started.
    fn written(
        &self,
        key: &str,
        applied: Applied,
        version: Version,
        prepared: &Prepared,
    ) -> Executed {
        self.remember(key, Some(version.clone()), Some(applied.doc.clone()));
        let due = applied
            .doc
            .outbox
            .as_ref()
            .is_some_and(|o| o.deliverable(prepared.wall));
        if due && self.delivers {
            spawn_delivery(self.store.clone(), self.settings.clone(), key);
        }
        Executed {
            reply: applied.reply,
            doc: applied.doc,
            version: Some(version),
            ended: applied.finished,
            granted: applied.granted,
            basis: Some(prepared.basis),
        }
    }

    /// [`Coordinator::execute`] through a server, which runs the request with its own
    /// coordinator. The same rules hold on this side of the wire:
    ///
    /// - the phases a write set are counted from before the request was sent, less how long
    ///   before the server received it they may have started ([`crate::remote::Ran::started_before_ms`]);
    /// - a request whose answer was lost may have run: it is sent again with
    ///   [`Request::finishes_seen`] from before the first attempt (this key's finish count,
    ///   read first when this coordinator has never seen the key), and its answer is then
    ///   dated by the first attempt's send, with no grants of its own.
    async fn execute_through(
        &self,
        server: &RemoteStore,
        key: &str,
        request: &mut Request,
    ) -> Result<Executed, ClientError> {
        let retried_from_earlier_call = request.finishes_seen.is_some();
        let mut maybe_landed: Option<Basis> = None;
        let mut lost = 0u32;
        loop {
            let finishes = match self.cached(key) {
                _ if request.finishes_seen.is_some() => None,
                Some(Cached { doc, .. }) => Some(doc.map_or(0, |doc| doc.finishes)),
                None => Some(self.load(key).await?.doc.map_or(0, |doc| doc.finishes)),
            };
            let sent = Basis {
                basis_local_ms: self.local_ms(),
                behind_ms: 0,
            };
            match server.run(key, request).await {
                Ok(ran) => {
                    self.remember(key, None, Some(ran.doc.clone()));
                    let (basis, granted) = match ran.started_before_ms {
                        Some(behind_ms) => (Some(Basis { behind_ms, ..sent }), ran.granted),
                        None if retried_from_earlier_call => (None, Vec::new()),
                        None => (maybe_landed, ran.granted),
                    };
                    return Ok(Executed {
                        reply: ran.reply,
                        doc: ran.doc,
                        version: None,
                        ended: Vec::new(),
                        granted,
                        basis,
                    });
                }
                Err(RunError::Ambiguous {
                    error,
                    finishes_seen,
                }) => {
                    // The server's own count was taken after this call's first attempt may
                    // have landed: this side's, from before it, comes first.
                    if request.finishes_seen.is_none() {
                        request.finishes_seen = finishes.or(finishes_seen);
                    }
                    maybe_landed = Some(earlier(maybe_landed, sent));
                    self.forget(key);
                    lost += 1;
                    if lost >= MAX_LOST_ANSWERS {
                        return Err(error.into());
                    }
                }
                Err(RunError::Refused(refusal)) => {
                    return Err(ClientError::Refused {
                        key: key.to_string(),
                        refusal,
                    })
                }
                Err(RunError::ValueRefused(refused)) => {
                    return Err(ClientError::ValueRefused {
                        name: key.to_string(),
                        refusal: refused,
                    })
                }
                Err(RunError::Failed(error)) => {
                    self.forget(key);
                    return Err(error.into());
                }
            }
        }
    }

    /// The backlog segment `doc` asks for ([`Doc::segment_wanted`]), read from the store.
    async fn wanted_segment(
        &self,
        key: &str,
        doc: Option<&Doc>,
    ) -> Result<Option<Segment>, ClientError> {
        let Some((generation, number)) = doc.and_then(Doc::segment_wanted) else {
            return Ok(None);
        };
        let name = baton_core::backlog::segment_record(generation, number);
        let corrupt = |reason: String| ClientError::Corrupt {
            key: key.to_owned(),
            source: baton_core::DecodeError::Corrupt(reason),
        };
        let bytes = self.store.get_record(key, &name).await?.ok_or_else(|| {
            corrupt(format!(
                "its backlog counts segment {generation}/{number}, and the store has no record \
                 {name}"
            ))
        })?;
        Segment::decode(&bytes, generation, number)
            .map(Some)
            .map_err(corrupt)
    }

    /// Reads `key` from the store (not the cache), with the store's clock.
    pub async fn read(&self, key: &str) -> Result<KeySnapshot, ClientError> {
        let started = std::time::Instant::now();
        let read_from_ms = self.local_ms();
        let read = async {
            let cached = self.load(key).await?;
            let clock = self.store.clock().await?;
            Ok(KeySnapshot {
                doc: cached.doc,
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
        let cached = self.decode(key, pushed)?;
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
        let cached = self.decode(key, pushed)?;
        if cached.doc.as_ref().is_some_and(skip) {
            return Ok(None);
        }
        self.taken(key, cached).await.map(Some)
    }

    /// A pushed document taken as the key's latest: cached, with the store clock read now.
    async fn taken(&self, key: &str, cached: Cached) -> Result<KeySnapshot, ClientError> {
        self.remember(key, cached.version.clone(), cached.doc.clone());
        let read_from_ms = self.local_ms();
        let clock = self.store.clock().await?;
        Ok(KeySnapshot {
            doc: cached.doc,
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
        let cached = self.decode(key, read)?;
        self.remember(key, cached.version, cached.doc);
        Ok(())
    }

    /// The document of `key` this coordinator last read or wrote, if any: possibly stale, so a
    /// hint (what to read ahead), never an answer.
    pub fn cached_doc(&self, key: &str) -> Option<Doc> {
        self.cached(key).and_then(|cached| cached.doc)
    }

    /// The version of `key` this coordinator last read or wrote, if any.
    pub fn cached_version(&self, key: &str) -> Option<Version> {
        self.cached(key).and_then(|cached| cached.version)
    }

    /// When a store has no clock: milliseconds on this process's monotonic clock, on which
    /// [`Observer`] deadlines are expressed.
    pub fn mono_ms(&self) -> u64 {
        mono_ms()
    }

    /// This coordinator's observer of `key` (a copy).
    pub fn observer(&self, key: &str) -> Observer {
        self.observers
            .lock()
            .map(|o| o.get(key).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    async fn load(&self, key: &str) -> Result<Cached, ClientError> {
        let cached = match self.store.load(key).await? {
            Some(versioned) => self.decode(key, versioned)?,
            None => Cached {
                version: None,
                doc: None,
            },
        };
        self.remember(key, cached.version.clone(), cached.doc.clone());
        Ok(cached)
    }

    fn decode(&self, key: &str, versioned: Versioned) -> Result<Cached, ClientError> {
        let doc = decode(&versioned.bytes).map_err(|source| ClientError::Corrupt {
            key: key.to_string(),
            source,
        })?;
        if let Ok(mut observers) = self.observers.lock() {
            observers
                .entry(key.to_string())
                .or_default()
                .observe(&doc, mono_ms());
        }
        Ok(Cached {
            version: Some(versioned.version),
            doc: Some(doc),
        })
    }

    fn cached(&self, key: &str) -> Option<Cached> {
        self.cache.lock().ok()?.get(key).cloned()
    }

    fn remember(&self, key: &str, version: Option<Version>, doc: Option<Doc>) {
        if let (Some(doc), Ok(mut observers)) = (&doc, self.observers.lock()) {
            observers
                .entry(key.to_string())
                .or_default()
                .observe(doc, mono_ms());
        }
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key.to_string(), Cached { version, doc });
        }
    }

    fn forget(&self, key: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(key);
        }
    }
}

/// What came of an operation, in a few words for `-v`: `queued, 2 ahead`, `held, fence
/// 17`, `ended succeeded`, `failed: …`.
fn said(result: &Result<Executed, ClientError>) -> String {
    let executed = match result {
        Ok(executed) => executed,
        Err(error) => return format!("failed: {error}"),
    };
    let mut words = match &executed.reply {
        Reply::Ticket(baton_core::op::TicketView::Live(ticket)) => match ticket.state {
            baton_core::TicketState::Held => format!("held, fence {}", ticket.fence),
            baton_core::TicketState::Queued => format!("queued, {} ahead", ticket.position),
        },
        Reply::Ticket(baton_core::op::TicketView::Finished {
            outcome, forced, ..
        }) => {
            let forced = if *forced { " (forced)" } else { "" };
            format!("ended {outcome}{forced}")
        }
        Reply::Cancelled(tickets) => format!("{} tickets ended", tickets.len()),
        Reply::NoJob { .. } => "no job to claim".to_owned(),
        Reply::Nothing => "done".to_owned(),
    };
    let own_id = match &executed.reply {
        Reply::Ticket(baton_core::op::TicketView::Live(ticket)) => Some(ticket.id.as_str()),
        _ => None,
    };
    for (id, fence) in executed
        .granted
        .iter()
        .filter(|g| Some(g.0.as_str()) != own_id)
    {
        words.push_str(&format!("; granted {id} (fence {fence})"));
    }
    words
}

/// Of two write bases, the one whose phases end first (the lag counted in).
fn earlier(first: Option<Basis>, second: Basis) -> Basis {
    let start = |b: &Basis| b.basis_local_ms.saturating_sub(b.behind_ms);
    let earliest = first.map_or(start(&second), |f| start(&f).min(start(&second)));
    Basis {
        basis_local_ms: earliest,
        behind_ms: 0,
    }
}

/// The core's clock from a reading of the store's (`uncertain_ms`: the store's
/// [`baton_store::Capabilities::clock_uncertain_ms`]), or from `observer` at `mono_ms` on a
/// store without a clock.
pub(crate) fn core_clock<'a>(
    store_clock: &'a StoreClock,
    uncertain_ms: u64,
    observer: &'a Observer,
    mono_ms: u64,
    wall_ms: u64,
) -> Clock<'a> {
    match store_clock {
        StoreClock::Time { now_ms, epoch, .. } => Clock::Store {
            now_ms: *now_ms,
            uncertain_ms,
            epoch,
            wall_ms,
        },
        StoreClock::None => Clock::Observed {
            observer,
            mono_ms,
            wall_ms,
        },
    }
}
