//! The [`Store`] trait: the contract between baton's coordinator and every storage backend.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{Result, StoreError};

/// The largest record [`Store::put_record`] takes, in bytes: a job's parameters (JSON up to
/// 256 KiB) or a run's report (up to 32 KiB of output tail and a few fields), with room for
/// their framing. Below DynamoDB's 400 KB item with its keys, so every store keeps a record as
/// one value.
pub const RECORD_MAX_BYTES: usize = 320 * 1024;

/// The longest record name, in bytes (see [`check_record_name`]).
pub const RECORD_NAME_MAX_BYTES: usize = 200;

/// An opaque version of a stored document: whatever the store compares in its CAS (a counter
/// for SQL stores, a mod revision for etcd, an ETag for S3). Only equality is meaningful.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version(pub String);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A document as stored: its bytes and the version a CAS must name to replace them, and, on
/// a store that keeps them, the key's arrivals read with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// The version to pass as `expected` to [`Store::cas`]. Where the store keeps arrivals
    /// ([`Capabilities::arrivals`]), it names the arrivals read too: a CAS naming it writes only
    /// while the document is as read, and takes (removes) exactly the arrivals read, leaving
    /// any appended since pending; one that read none writes only while none are pending.
    pub version: Version,
    /// The document, exactly as the last successful CAS wrote it.
    pub bytes: Vec<u8>,
    /// The key's arrivals ([`Store::append_arrival`]) as read with the document, oldest first;
    /// always empty on a store without [`Capabilities::arrivals`], and in a wake-up's document
    /// where the store carries none ([`Wake::document`]).
    pub arrivals: Vec<Vec<u8>>,
}

/// What a [`Store::cas`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// The document was written (and the history appended); this is its new version.
    Written {
        /// The version of the document just written.
        version: Version,
    },
    /// The expected version was stale: nothing was written and no history was appended.
    Conflict {
        /// The current document, where the store can return it in the same round trip
        /// (`None` when it cannot, or when the key has no document).
        current: Option<Versioned>,
    },
}

/// One entry of a key's history log, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryRecord {
    /// Position in the key's log: strictly increasing in append order, starting at 1.
    pub seq: u64,
    /// The entry, as the core encoded it.
    pub bytes: Vec<u8>,
}

/// A reading of the store's own clock.
///
/// baton's core never reads a clock; the coordinator hands it the store's time where the store
/// has a clock every participant agrees on, and falls back to observation of heartbeats where it
/// has none (ARCHITECTURE.md, *Bird's-eye view*, on time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreClock {
    /// The store has a clock all participants share.
    Time {
        /// Milliseconds on that clock. Only differences are meaningful. Never ahead of the
        /// store's time.
        now_ms: u64,
        /// How far behind the store's time `now_ms` may be, beyond the store's
        /// [`Capabilities::clock_uncertain_ms`]: a server's reading paired with its reply's
        /// arrival is behind by the reply's transit, at most the round trip of the request that
        /// carried it (seconds, when a network held the reply back). 0 where the clock is read
        /// directly (SQLite's host clock). Who acts on a deadline set by *another* participant
        /// before the store ends it needs this bound ([`crate`]'s users: the client's fresh
        /// grants); who only waits for a deadline does not.
        behind_ms: u64,
        /// Names the clock: when it changes (a reboot of the SQLite host, say), every deadline
        /// measured on the previous clock is void.
        epoch: String,
    },
    /// The store has no clock: leases are judged by observation of unchanged heartbeats.
    None,
}

/// What a store can do beyond the required contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// [`Store::watch`] pushes wake-ups.
    pub watch: bool,
    /// A watch misses nothing: after any gap in which a change may have gone untold (a lost
    /// connection), it wakes its watcher to read again. A waiter then needs no timed reads to
    /// catch a missed wake-up (`baton serve`'s feeds; a store's own pushes are only trusted
    /// to be prompt).
    pub watch_complete: bool,
    /// Wake-ups carry the document each change wrote (up to the size the store's channel
    /// takes: larger documents wake with [`Wake::read_again`]).
    pub watch_documents: bool,
    /// [`Store::watch_tagged`] passes by the writes that name other tags only.
    pub watch_tagged: bool,
    /// A failed CAS returns the current document in [`CasOutcome::Conflict`].
    pub conflict_returns_current: bool,
    /// [`Store::clock`] returns [`StoreClock::Time`].
    pub clock: bool,
    /// How far behind the store's time a [`StoreClock::Time`] reading may be (it is never
    /// ahead): 0 where the server reports milliseconds, 1000 where it reports whole seconds
    /// (an S3 server's `Date`). The core ends a phase only this long after its deadline.
    pub clock_uncertain_ms: u64,
    /// [`Store::cas_due`] keeps a due index and [`Store::due_keys`] reads it.
    pub due_index: bool,
    /// [`Store::update`] runs a computation under the store's write lock: a writer reads,
    /// computes and writes with no other writer in between, so it never loses a CAS. Where
    /// the lock is local (SQLite's file lock, taken in microseconds), this spares a hot key the
    /// conflicts, retries and backoffs that optimistic writers pay.
    pub locked_update: bool,
    /// [`Store::update`] holds a lock on the key in the server for a few round trips
    /// (PostgreSQL's row lock): too dear for every write, it spares a write that already lost
    /// a CAS on a hot key from losing again, since writers then queue on the lock instead of
    /// racing. It runs nothing and answers `None` for a key that has no document yet.
    pub update_when_contended: bool,
    /// [`Store::append_arrival`] keeps arrivals beside a key's document: appended without a
    /// compare of the document, so an enqueue on a busy key never loses to another writer;
    /// read with the document ([`Versioned::arrivals`]); and removed by the next CAS that read
    /// them, which takes exactly those its version names and leaves later ones pending
    /// (`baton_core::arrival`).
    pub arrivals: bool,
    /// A turn on a key seen held (with no room for it) does better to arrive
    /// ([`Store::append_arrival`]) than to write its enqueue, unless it says otherwise: where a
    /// write that lost on a hot key costs a round through consensus and a read again (etcd). Where
    /// a write is one script on one server (Redis), losing costs little: there turns by arrival
    /// lose no write, yet 16 clients on one key made half the grants a second that writing their
    /// enqueues made (BENCHMARKS.md). Only with `arrivals`.
    pub arrivals_by_default: bool,
}

/// What a [`Store::update`] writes: as [`Store::cas_due`] does, and the records first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replacement {
    /// The new document.
    pub bytes: Vec<u8>,
    /// Entries appended to the key's log.
    pub history: Vec<Vec<u8>>,
    /// The key's place in the due index ([`Store::cas_due`]).
    pub due_ms: Option<u64>,
    /// Records written (as [`Store::put_record`] would) in the same transaction.
    pub records: Vec<(String, Vec<u8>)>,
    /// Whom the write wakes: `None`, every watcher of the key; else the watchers of the whole
    /// key and those watching one of these tags ([`Store::watch_tagged`]). A store may wake
    /// more (every watcher, as one that keeps no tags does), never fewer.
    pub wake: Option<Vec<String>>,
    /// Tags named for the last time (their tickets ended): woken by this write where
    /// [`Replacement::wake`] names them, and never again, so the store may forget who watches
    /// them.
    pub ended_tags: Vec<String>,
}

/// What the computation of a [`Store::update`] decided, from the document it was shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Write this, in the same transaction as the read.
    Write(Replacement),
    /// Leave the key as it is.
    Keep,
}

/// The computation a [`Store::update`] runs under the store's write lock: given the key's
/// current document (`None`: it has none), what to write. Every writer of the store waits for
/// it, so it must be quick and must not block. It runs at most once.
pub type Compute = Box<dyn FnOnce(Option<&Versioned>) -> Change + Send>;

/// What a [`Store::update`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Updated {
    /// The computation's document was written: this is its version.
    Written {
        /// The version of the document just written.
        version: Version,
    },
    /// The computation kept the key as it was (or never ran: see [`Store::update`]).
    Kept,
}

/// A key in the due index: when it next needs a worker ([`Store::cas_due`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueKey {
    /// The key.
    pub key: String,
    /// When, on the clock jobs are judged by.
    pub due_ms: u64,
    /// The key's document as this read found it, for the first keys where the store reads
    /// them in the same round trip ([`Store::due_keys`]'s [`WithDocs`]); `None`: read the key. A
    /// worker's claim starts from it as from a cached document, so the CAS proves it current.
    pub doc: Option<Versioned>,
}

/// Which keys a [`Store::due_keys`] read returns with their documents: the first `first` of
/// those due by `due_by_ms` (on the clock of [`DueKey::due_ms`]): the keys a worker is about
/// to claim from, not those waiting for a backoff or a `--not-before`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WithDocs {
    /// At most this many documents (0: none).
    pub first: usize,
    /// Only of keys due by then.
    pub due_by_ms: u64,
}

impl WithDocs {
    /// No documents: the keys alone.
    pub const NONE: WithDocs = WithDocs {
        first: 0,
        due_by_ms: 0,
    };

    /// Whether the `n`th key read (from 0), due at `due_ms`, comes with its document.
    pub fn wants(&self, n: usize, due_ms: u64) -> bool {
        n < self.first && due_ms <= self.due_by_ms
    }
}

/// What a watch learned: the key changed, and, where the store delivers it with the wake-up,
/// the document as that change left it (`None`: read the key to learn what changed; also what a
/// spurious wake-up or a reconnection says).
#[derive(Clone, Debug, Default)]
pub struct Wake {
    /// The document the change wrote, as [`Store::load`] would have returned it right then.
    /// Where the store keeps arrivals it may carry those pending at it (etcd's, Redis's and the
    /// memory store's do), its version then naming them as a load's: whoever writes from it
    /// must take them in, since the CAS removes them. etcd's and Redis's name them even when
    /// none was pending: a CAS naming such a version takes none and leaves any appended since
    /// pending, where a version that read none loses to them.
    pub document: Option<Arc<Versioned>>,
    /// How many changes of the key this wake-up tells of: 1, more where the store knows that
    /// some went by untold (a SQLite waiter sees the gap in the versions), [`Wake::UNTOLD`]
    /// where it cannot know, 0 for the same document again with other arrivals pending at it
    /// (an append).
    pub changes: u64,
    /// How many changes the channel has told of so far, this wake-up's included (counted by
    /// [`Wake::send`], modulo 2^64). A watch channel keeps only the latest wake-up; a waiter
    /// that must let a number of writes go by counts those that came while it slept from this.
    pub told: u64,
    /// The write named the tag this channel watches ([`Store::watch_tagged`]): it concerns
    /// the watcher, who looks at once.
    pub named: bool,
}

impl Wake {
    /// The count of a wake-up after which an unknown number of changes may have gone untold
    /// (a reconnection, a full queue): more than any waiter waits for, so every waiter looks.
    pub const UNTOLD: u64 = 1 << 32;

    /// A wake-up that only says "something changed".
    pub fn read_again() -> Wake {
        Wake {
            document: None,
            changes: 1,
            told: 0,
            named: false,
        }
    }

    /// A wake-up carrying the document written.
    pub fn with(document: Versioned) -> Wake {
        Wake {
            document: Some(Arc::new(document)),
            changes: 1,
            told: 0,
            named: false,
        }
    }

    /// A wake-up after which changes may have gone untold: every waiter reads.
    pub fn untold() -> Wake {
        Wake {
            changes: Wake::UNTOLD,
            ..Wake::read_again()
        }
    }

    /// This wake-up, telling of `changes` changes.
    pub fn of_changes(self, changes: u64) -> Wake {
        Wake { changes, ..self }
    }

    /// This wake-up, for a watcher whose tag the write named.
    pub fn naming(self) -> Wake {
        Wake {
            named: true,
            ..self
        }
    }

    /// Sends this wake-up on `sender`, adding its changes to those the channel told before.
    pub fn send(self, sender: &tokio::sync::watch::Sender<Wake>) {
        sender.send_modify(|latest| {
            let told = latest.told.wrapping_add(self.changes);
            *latest = Wake { told, ..self };
        });
    }
}

/// A subscription to changes of one key: [`WatchHandle::changed`] resolves after the key's
/// document changes. Spurious wake-ups are allowed; missed ones are not.
pub struct WatchHandle {
    receiver: tokio::sync::watch::Receiver<Wake>,
    /// [`Wake::told`] of the last wake-up taken.
    told: u64,
    /// [`Wake::named`] of the last wake-up taken.
    named: bool,
}

impl WatchHandle {
    /// Wraps a receiver to which the store sends a [`Wake`] at every change of the key (only
    /// the latest is kept: a slow watcher sees the newest document, never a backlog), with
    /// [`Wake::send`].
    pub fn new(receiver: tokio::sync::watch::Receiver<Wake>) -> Self {
        let told = receiver.borrow().told;
        Self {
            receiver,
            told,
            named: false,
        }
    }

    /// Waits for the next change, and returns the document it wrote when the store delivered
    /// it (a waiter then needs no read; it may be older than a document the caller wrote
    /// since, so it is an optimisation, never a proof). Returns an error when the store has
    /// gone away.
    pub async fn changed(&mut self) -> Result<Option<Versioned>> {
        self.receiver
            .changed()
            .await
            .map_err(|_| crate::StoreError::Closed)?;
        let wake = self.receiver.borrow_and_update();
        self.told = wake.told;
        self.named = wake.named;
        Ok(wake.document.as_deref().cloned())
    }

    /// How many changes the store has told this handle of, modulo 2^64, as of the last
    /// [`WatchHandle::changed`]: one wake-up may stand for several ([`Wake::told`]).
    pub fn told(&self) -> u64 {
        self.told
    }

    /// Whether the last wake-up taken came from a write that named this handle's tag
    /// ([`Store::watch_tagged`]).
    pub fn named(&self) -> bool {
        self.named
    }
}

/// The storage contract. Implementations move bytes; they never interpret a document.
///
/// Keys are UTF-8 strings of 1..=256 bytes with no control characters (the core checks this
/// before any store sees a key). Every store must round-trip any such key exactly, escaping it
/// however its backend needs; callers never escape.
///
/// Besides its document and history, a key may have *records*, named by baton (see
/// [`check_record_name`]): each is one value written whole, outside any CAS, that never shows in
/// the key's document, history or `list`, nor under another key.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// A one-line description of where this store keeps its data, without secrets (shown by
    /// `baton status`).
    fn describe(&self) -> String;

    /// What this store can do beyond the required contract.
    fn capabilities(&self) -> Capabilities;

    /// The current document of `key`, or `None` if it has never been written.
    async fn load(&self, key: &str) -> Result<Option<Versioned>>;

    /// Writes `bytes` as the document of `key` if its current version is `expected` (`None`:
    /// only if the key has no document), and appends `history` to the key's log in the same
    /// transaction. On a stale `expected`, writes nothing and appends nothing. Where the store
    /// keeps arrivals, a version that read none is stale too once one is pending (not a
    /// wake-up's that knew none pending, [`Wake::document`]), and a write removes the arrivals
    /// its version read, no others ([`Versioned::version`]); a first write leaves them all. The
    /// key
    /// leaves the due index ([`Store::cas_due`] with `None`).
    async fn cas(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
    ) -> Result<CasOutcome> {
        self.cas_due(key, expected, bytes, history, None).await
    }

    /// [`Store::cas`], and in the same transaction sets when the key next needs a worker
    /// (`due_ms`, on the clock jobs are judged by: the store's where it has one, else wall
    /// time; `None`: never, until the next write) in the store's *due index*, which
    /// [`Store::due_keys`] reads. Stores without an index
    /// ([`Capabilities::due_index`] false) ignore `due_ms`.
    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome>;

    /// [`Store::cas_due`], waking only whom `wake` names (`None`: everyone): the watchers of
    /// the whole key and those watching one of these tags ([`Store::watch_tagged`]), as
    /// [`Replacement::wake`] does for an update. A store may wake more, never fewer; the
    /// default wakes everyone.
    async fn cas_waking(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
        _wake: Option<&[String]>,
    ) -> Result<CasOutcome> {
        self.cas_due(key, expected, bytes, history, due_ms).await
    }

    /// Appends `bytes` to `key`'s arrivals, without a compare of the document (so it never
    /// conflicts), and returns the key as it stands right after: its document with every
    /// pending arrival, this one among them (`None`: the key has no document yet; the arrival
    /// stays pending until a CAS naming a version that read it). A store keeps each append
    /// once: etcd's, sent again after an error that said it was not sent, finds itself already
    /// there, by its bytes (baton's name their ticket: two appends of equal bytes may be kept
    /// as one), unless a write took it in meanwhile, and then the copy names a ticket the
    /// document holds and is taken in as nothing. A client appends once: after a lost answer
    /// its owner writes the enqueue itself, and a copy that lands after all is taken in by the
    /// core as nothing.
    ///
    /// Only on a store with [`Capabilities::arrivals`]; the others answer an error.
    async fn append_arrival(&self, _key: &str, _bytes: &[u8]) -> Result<Option<Versioned>> {
        Err(StoreError::Backend {
            store: self.describe(),
            source: "this store keeps no arrivals beside a key's document".into(),
        })
    }

    /// Reads `key`'s document, runs `compute` on it and writes what it returns, all in one
    /// transaction under the store's write lock ([`Capabilities::locked_update`]): no other
    /// write to the key comes between the read and the write. Watchers are woken as by a CAS.
    ///
    /// A store without the capability ([`Capabilities::locked_update`] or
    /// [`Capabilities::update_when_contended`]), or one that cannot lock this key, runs
    /// nothing and answers `Ok(None)`: use [`Store::cas`].
    /// On an error the computation may or may not have run, and nothing was written.
    async fn update(&self, _key: &str, _compute: Compute) -> Result<Option<Updated>> {
        Ok(None)
    }

    /// Up to `limit` keys whose names start with `prefix` that have a due time, earliest first
    /// (ties by key), or `None` when this store keeps no due index: then a caller must read
    /// the keys [`Store::list`] gives. Its cost does not grow with keys that have no due time.
    /// Stores that can read documents with the index in the same round trip return those
    /// `docs` asks for with them ([`DueKey::doc`]), which spares a worker's claim the load of
    /// the key it takes; the others leave `doc` empty.
    async fn due_keys(
        &self,
        _prefix: &str,
        _limit: usize,
        _docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        Ok(None)
    }

    /// Up to `limit` entries of `key`'s log with `seq > after_seq`, oldest first.
    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>>;

    /// The newest `limit` entries of `key`'s log, newest first.
    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>>;

    /// Every key with a document whose name starts with `prefix` (byte-wise, no wildcards),
    /// sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;

    /// A subscription to changes of `key`, or `None` when this store cannot push.
    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>>;
    /// A subscription to the changes of `key` that concern `tag` (a waiter's ticket): woken
    /// by every write whose [`Replacement::wake`] is `None` or names `tag`; writes that name
    /// other tags only may pass it by ([`WatchHandle::named`] tells a wake-up that named it).
    /// A store that keeps who watches in the backend may enter the tag with this store
    /// object's next write to `key` instead of a write of its own (a waiter watches before
    /// its enqueue): until then, writes naming only other tags may pass it by; watching `key`
    /// again enters it at once. The default is [`Store::watch`], which passes nothing by.
    async fn watch_tagged(&self, key: &str, _tag: &str) -> Result<Option<WatchHandle>> {
        self.watch(key).await
    }

    /// A subscription to changes of every key starting with `prefix` (`""`: every key), or
    /// `None` when this store cannot push them. A wake-up only says that something under the
    /// prefix changed. An idle worker waits on this instead of polling.
    async fn watch_prefix(&self, _prefix: &str) -> Result<Option<WatchHandle>> {
        Ok(None)
    }

    /// The store's clock, or [`StoreClock::None`] when it has none.
    async fn clock(&self) -> Result<StoreClock>;

    /// Writes record `name` of `key`: a value kept beside the key, outside its hot document
    /// (a job's parameters, a run's report), up to [`RECORD_MAX_BYTES`]. Replaces a record of
    /// the same name (callers write the same bytes again when they retry). Not part of any
    /// CAS: callers write a record before the document change that refers to it, so a writer
    /// that dies in between leaves only an unreferenced record.
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()>;

    /// Record `name` of `key`, or `None` if it was never written.
    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>>;

    /// Prepares the store for use (`baton init`) and says what it did, in one line.
    ///
    /// For stores that must be set up with more rights than everyday use needs (a DynamoDB
    /// table), this is the only place that creates anything; opening such a store never does.
    /// The default does nothing: the stores that keep a schema create or migrate it when they
    /// are opened, which has happened by the time this runs. Idempotent.
    async fn init(&self) -> Result<String> {
        Ok(format!(
            "{} is ready: opening it created or checked everything it needs",
            self.describe()
        ))
    }
}

/// Checks a record name, as every store does before it touches its backend: 1 to
/// [`RECORD_NAME_MAX_BYTES`] bytes of `A-Z a-z 0-9 _ . / -`, in `/`-separated segments none of
/// which is empty, `.` or `..` (`params/j-0123abcd`, `run/j-0123abcd/3`).
///
/// baton makes these names itself, so a bad one is a bug of the caller, refused as
/// [`StoreError::Backend`] rather than stored. The segment rule lets object stores keep a name
/// as part of an object's name: they refuse empty and relative segments (and would otherwise
/// read `a//b` and `a/b` as one name).
pub fn check_record_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > RECORD_NAME_MAX_BYTES {
        return Err(refused_record(format!(
            "a record name must be 1 to {RECORD_NAME_MAX_BYTES} bytes long, not {}",
            name.len()
        )));
    }
    if let Some(bad) = name.chars().find(|c| !is_record_name_char(*c)) {
        return Err(refused_record(format!(
            "the record name {name:?} holds {bad:?}; a record name is made of A-Z, a-z, 0-9, \
             `_`, `.`, `/` and `-`"
        )));
    }
    if let Some(bad) = name
        .split('/')
        .find(|segment| matches!(*segment, "" | "." | ".."))
    {
        return Err(refused_record(format!(
            "the record name {name:?} has the segment {bad:?}; the `/`-separated segments of a \
             record name may not be empty, `.` or `..`"
        )));
    }
    Ok(())
}

/// Checks what [`Store::put_record`] is given: a good name ([`check_record_name`]) and a value
/// of at most [`RECORD_MAX_BYTES`].
pub fn check_record(name: &str, bytes: &[u8]) -> Result<()> {
    check_record_name(name)?;
    if bytes.len() > RECORD_MAX_BYTES {
        return Err(refused_record(format!(
            "record {name:?} is {} bytes; a record holds at most {RECORD_MAX_BYTES}",
            bytes.len()
        )));
    }
    Ok(())
}

fn is_record_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// The error for a record refused before any store was asked.
fn refused_record(reason: String) -> StoreError {
    StoreError::Backend {
        store: "record check".to_owned(),
        source: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_are_checked() {
        let longest = "n".repeat(RECORD_NAME_MAX_BYTES);
        for good in [
            "params/j-0123abcd",
            "run/j-0123abcd/3",
            "a",
            "A_z.9-/x",
            ".hidden/..x/x..",
            longest.as_str(),
        ] {
            assert!(check_record_name(good).is_ok(), "{good:?} must be accepted");
        }
        let too_long = "n".repeat(RECORD_NAME_MAX_BYTES + 1);
        for bad in [
            "",
            too_long.as_str(),
            "with space",
            "é",
            "a\nb",
            "a:b",
            "a%2F",
            "/leading",
            "trailing/",
            "double//slash",
            ".",
            "..",
            "a/./b",
            "a/../b",
        ] {
            let error = check_record_name(bad).err();
            assert!(
                matches!(error, Some(StoreError::Backend { .. })),
                "{bad:?} must be refused, got {error:?}"
            );
        }
    }

    #[test]
    fn record_sizes_are_checked() {
        assert!(check_record("n", &[]).is_ok());
        assert!(check_record("n", &vec![0; RECORD_MAX_BYTES]).is_ok());
        let error = check_record("n", &vec![0; RECORD_MAX_BYTES + 1]).err();
        let message = error.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            matches!(error, Some(StoreError::Backend { .. })) && message.contains("at most"),
            "{error:?}"
        );
        assert!(check_record("bad name", &[]).is_err());
    }
}
