//! The CAS of a key's document as one etcd transaction, in the steps every store's `cas_due`
//! takes: what the expected version stands for (the revisions to compare, or a conflict found
//! without writing), the transaction's writes (document, history, due index, the arrivals
//! taken), and what its answer means; then the history trimmed to `history_keep`. And the
//! reads of a key's document with its arrivals, which a load, an append and a failed CAS make.
//!
//! A version names the document's `mod_revision` and, after a `.`, a revision up to which every
//! arrival created was seen with it (none: no suffix): a read's names the newest arrival it
//! read (read in one transaction, so at one revision, and arrivals are never created with an
//! older revision); a push's names the revision its watch knew the arrivals as of, even with
//! none pending. A version without one writes only while none is pending (every arrival key's
//! `create_revision` below 1). One with it takes exactly those it saw: etcd deletes by name or
//! range, not by creation revision, so the store remembers the names its reads and pushes found
//! ([`ArrivalsRead`]) and deletes those created up to the version's revision by name (none, for
//! a push that saw none: it puts the key's arrivals stamp instead, so that the watchers of the
//! arrivals learn of the write), comparing the document alone, which leaves later arrivals
//! pending. Without such a memory (a version read by another process, or too many arrivals for one
//! transaction) it compares every arrival's `create_revision` with the version's and deletes
//! the range, as a version that read all.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Mutex, PoisonError};

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};

use super::arrival_names;
use super::errors::Effect;
use super::{EtcdStore, CUT_READ_LIMIT, MAX_TXN_OPS, SEQS_PER_REVISION, TRIM_BATCH};
use crate::arrivals_seen;
use crate::history_retention::EXACT_KEEP_BELOW;
use crate::{CasOutcome, Result, Version, Versioned};

/// Operations in a CAS's top branch besides its history entries: `trim_reads`' (two at most),
/// the document's put, the due index's op and the arrivals' delete (or their stamp's put).
const TOP_OPS: usize = 5;

/// What a CAS's expected version stands for: the conditions it writes under, the revision its
/// history seqs are numbered from (0 for a create) and the arrivals it takes.
pub(super) struct Expected {
    conditions: Vec<Compare>,
    pub(super) revision: u64,
    takes: Takes,
}

/// The arrivals a CAS removes.
enum Takes {
    /// None: a first write, or a version that saw none (and compares that none is pending).
    None,
    /// None, for a version (a push's) that knew none pending as of its revision: later ones
    /// stay. The write puts the key's arrivals stamp, so that the watchers of its arrivals
    /// learn of its revision as they do of a write that took some ([`super::watch`]).
    NoneOfThoseSeen,
    /// Every arrival of the key, compared to be no newer than the version's revision.
    All,
    /// These keys, the arrivals a read or a push saw (the document's compare says no write took
    /// them since).
    These(Vec<Vec<u8>>),
}

/// The most arrivals a CAS takes by name, in a nested transaction beside at most
/// `MAX_TXN_OPS - TOP_OPS - MAX_TAKEN_BY_NAME` history entries (etcd allows a nested branch
/// what the enclosing one leaves); more, or more history, and it takes them all.
const MAX_TAKEN_BY_NAME: usize = 32;

/// What this store's reads and pushes last found of each key's arrivals: a CAS naming a version
/// seen at the same document takes the arrivals up to the version's revision by these names,
/// and an append chooses its slot among those these do not hold.
#[derive(Default)]
pub(super) struct ArrivalsRead {
    by_key: Mutex<HashMap<String, KeyArrivals>>,
}

/// One read's (or push's) arrivals of a key: its document's revision (0: the key had none),
/// the revision they are known as of, and each arrival's `create_revision` and key, oldest
/// first.
struct KeyArrivals {
    doc_revision: i64,
    read_revision: i64,
    arrivals: Vec<(i64, Vec<u8>)>,
}

/// Keys whose arrivals are remembered at most: past it the memory starts again (a CAS then
/// compares every arrival, which is correct, only liable to lose to a later append).
const REMEMBERED_KEYS: usize = 4_096;

impl ArrivalsRead {
    /// Remembers what a read (or a push) of `key` found: the document at `doc_revision` and
    /// these arrivals (maybe none), pending at it, known as of `read_revision`. What an earlier
    /// read knew as of a later revision stays: a push can come after a read that saw more.
    pub(super) fn remember(
        &self,
        key: &str,
        doc_revision: i64,
        read_revision: i64,
        arrivals: Vec<(i64, Vec<u8>)>,
    ) {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        if by_key
            .get(key)
            .is_some_and(|known| known.read_revision > read_revision)
        {
            return;
        }
        if by_key.len() >= REMEMBERED_KEYS && !by_key.contains_key(key) {
            by_key.clear();
        }
        let read = KeyArrivals {
            doc_revision,
            read_revision,
            arrivals,
        };
        by_key.insert(key.to_owned(), read);
    }

    /// Forgets what was remembered of `key` as of before `read_revision`: a read that found
    /// none names none in its version, so nothing needs remembering, and a key left in the
    /// memory only crowds out others.
    fn forget(&self, key: &str, read_revision: i64) {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        if by_key
            .get(key)
            .is_some_and(|known| known.read_revision <= read_revision)
        {
            by_key.remove(key);
        }
    }

    /// The keys of `key`'s arrivals last known pending (maybe none): what an append's slot
    /// must not be.
    pub(super) fn pending(&self, key: &str) -> Vec<Vec<u8>> {
        let by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        by_key.get(key).map_or_else(Vec::new, |read| {
            read.arrivals.iter().map(|(_, name)| name.clone()).collect()
        })
    }

    /// The keys of `key`'s arrivals a version read at `doc_revision` that saw every one
    /// created up to `newest` read (maybe none): known when this store read the key at that
    /// document as of `newest` or later, for at most [`MAX_TAKEN_BY_NAME`] arrivals.
    fn names(&self, key: &str, doc_revision: i64, newest: i64) -> Option<Vec<Vec<u8>>> {
        let by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let read = by_key.get(key)?;
        if read.doc_revision != doc_revision || read.read_revision < newest {
            return None;
        }
        let names: Vec<Vec<u8>> = read
            .arrivals
            .iter()
            .filter(|(created, _)| *created <= newest)
            .map(|(_, name)| name.clone())
            .collect();
        (names.len() <= MAX_TAKEN_BY_NAME).then_some(names)
    }
}

/// The most history entries one CAS can write: `n` nested groups of `MAX_TXN_OPS - TOP_OPS - n`
/// entries, at the best `n`.
const MAX_HISTORY_PER_CAS: usize =
    ((MAX_TXN_OPS - TOP_OPS) / 2) * (MAX_TXN_OPS - TOP_OPS - (MAX_TXN_OPS - TOP_OPS) / 2);

/// Whether the answer of an append that found its slot taken holds this very arrival there:
/// the same try, applied once already, sent again after an error that said it was not (the
/// bytes name the turn's ticket, so no other append's are equal).
fn holds(response: &TxnResponse, name: &[u8], arrival: &[u8]) -> bool {
    response.op_responses().into_iter().any(|op| match op {
        TxnOpResponse::Get(get) => get
            .kvs()
            .iter()
            .any(|kv| kv.key() == name && kv.value() == arrival),
        _ => false,
    })
}

impl EtcdStore {
    /// What a CAS naming `expected` and appending `n_history` entries writes under: the
    /// document is absent (a first write, which leaves any arrivals pending), or at that
    /// revision with the arrivals it read still there to take (none pending, for a version
    /// that read none). A version this store never handed out breaks with the conflict to
    /// answer, with no write.
    pub(super) async fn resolve_expected(
        &self,
        key: &str,
        expected: Option<&Version>,
        n_history: usize,
    ) -> Result<ControlFlow<CasOutcome, Expected>> {
        let layout = &self.inner.layout;
        let doc_key = layout.doc_key(key);
        let Some(version) = expected else {
            return Ok(ControlFlow::Continue(Expected {
                conditions: vec![Compare::create_revision(doc_key, CompareOp::Equal, 0)],
                revision: 0,
                takes: Takes::None,
            }));
        };
        let (doc, seen) = arrivals_seen::split(version);
        let (Ok(revision), Ok(newest)) = (doc.parse::<i64>(), i64::try_from(seen)) else {
            return self.never_handed_out(key).await;
        };
        // Revision 0 is "no such key" to etcd's compare: never a document's version.
        if revision <= 0 || newest == i64::MAX {
            return self.never_handed_out(key).await;
        }
        let mut conditions = vec![Compare::mod_revision(doc_key, CompareOp::Equal, revision)];
        let by_name = (newest > 0 && n_history + TOP_OPS + MAX_TAKEN_BY_NAME <= MAX_TXN_OPS)
            .then(|| self.inner.arrivals_read.names(key, revision, newest))
            .flatten();
        let takes = match by_name {
            // Known complete up to `newest` with none pending (a push's): later ones stay.
            Some(names) if names.is_empty() => Takes::NoneOfThoseSeen,
            Some(names) => Takes::These(names),
            None => {
                // Over a range, a compare holds for every key in it, and for none as for a key
                // that does not exist (`create_revision` 0).
                conditions.push(
                    Compare::create_revision(
                        layout.arrivals_start(key),
                        CompareOp::Less,
                        newest + 1,
                    )
                    .with_range(layout.arrivals_end(key)),
                );
                if newest > 0 {
                    Takes::All
                } else {
                    Takes::None
                }
            }
        };
        Ok(ControlFlow::Continue(Expected {
            conditions,
            revision: revision as u64,
            takes,
        }))
    }

    /// The answer to a CAS naming a version this store never handed out: stale by definition.
    async fn never_handed_out(&self, key: &str) -> Result<ControlFlow<CasOutcome, Expected>> {
        Ok(ControlFlow::Break(CasOutcome::Conflict {
            current: self.read_key(key, None).await?,
        }))
    }

    /// The transaction of a CAS: `writes` if `expected` holds, else the key's reads.
    pub(super) fn cas_transaction(
        &self,
        key: &str,
        expected: &Expected,
        writes: Vec<TxnOp>,
    ) -> Txn {
        Txn::new()
            .when(expected.conditions.clone())
            .and_then(writes)
            .or_else(self.key_reads(key))
    }

    /// The reads of a key's document and its arrivals (oldest first), for one transaction.
    fn key_reads(&self, key: &str) -> [TxnOp; 2] {
        let layout = &self.inner.layout;
        let arrivals = GetOptions::new()
            .with_range(layout.arrivals_end(key))
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        [
            TxnOp::get(layout.doc_key(key), None),
            TxnOp::get(layout.arrivals_start(key), Some(arrivals)),
        ]
    }

    /// The key's document and pending arrivals, in one transaction, after appending `arrival`
    /// to them if given (in a slot free when it is put, [`arrival_names`]).
    pub(super) async fn read_key(
        &self,
        key: &str,
        arrival: Option<&[u8]>,
    ) -> Result<Option<Versioned>> {
        let Some(arrival) = arrival else {
            let reads = Txn::new().and_then(self.key_reads(key));
            return self.key_of(key, self.txn(Effect::Read, reads).await?);
        };
        for n_tried in 0..=arrival_names::SLOT_TRIES {
            let name = if n_tried < arrival_names::SLOT_TRIES {
                let pending = self.inner.arrivals_read.pending(key);
                let start = self.inner.layout.arrivals_start(key);
                let names = pending
                    .iter()
                    .filter_map(|name| name.strip_prefix(start.as_slice()));
                arrival_names::slot(arrival_names::free_slot(names))
            } else {
                arrival_names::unique()
            };
            let name = self.inner.layout.arrival_key(key, &name);
            let transaction = Txn::new()
                .when([Compare::create_revision(name.clone(), CompareOp::Equal, 0)])
                .and_then(
                    [TxnOp::put(name.clone(), arrival.to_vec(), None)]
                        .into_iter()
                        .chain(self.key_reads(key))
                        .collect::<Vec<_>>(),
                )
                .or_else(self.key_reads(key));
            // An append whose answer is lost may have landed (or land later): its caller writes
            // the enqueue itself instead, and the core takes that copy in as nothing.
            let response = self.txn(Effect::Write, transaction).await?;
            let landed = response.succeeded() || holds(&response, &name, arrival);
            // Taken: the answer says which slots are, for the next try.
            let read = self.key_of(key, response)?;
            if landed {
                return Ok(read);
            }
        }
        Err(self.backend("an arrival's own name was taken".into()))
    }

    /// The document and arrivals a transaction's last two reads found ([`Self::key_reads`]),
    /// remembered for the CAS that may name them and the next append's slot
    /// ([`ArrivalsRead`]).
    fn key_of(&self, key: &str, mut response: TxnResponse) -> Result<Option<Versioned>> {
        let read_revision = response.take_header().map_or(0, |header| header.revision());
        let mut reads: Vec<_> = response
            .op_responses()
            .into_iter()
            .filter_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .collect();
        let (Some(mut arrivals), Some(mut doc)) = (reads.pop(), reads.pop()) else {
            return Err(self.backend("etcd answered a read without the document".into()));
        };
        let doc = doc.take_kvs().into_iter().next();
        let arrivals = arrivals.take_kvs();
        let names: Vec<_> = arrivals
            .iter()
            .map(|kv| (kv.create_revision(), kv.key().to_vec()))
            .collect();
        let read = &self.inner.arrivals_read;
        if names.is_empty() {
            read.forget(key, read_revision);
        } else {
            // Without a document too (revision 0, which no CAS names): an append's next slot
            // must not be one of these.
            let doc_revision = doc.as_ref().map_or(0, |doc| doc.mod_revision());
            read.remember(key, doc_revision, read_revision, names);
        }
        let Some(doc) = doc else {
            return Ok(None);
        };
        let newest = arrivals.iter().map(|kv| kv.create_revision()).max();
        let version = arrivals_seen::compose(
            &doc.mod_revision().to_string(),
            newest.map_or(0, |revision| revision.max(0) as u64),
        );
        Ok(Some(Versioned {
            version,
            bytes: doc.into_key_value().1,
            arrivals: arrivals
                .into_iter()
                .map(|kv| kv.into_key_value().1)
                .collect(),
        }))
    }

    /// The operations of a CAS's transaction when its condition holds: what `trim_history`
    /// needs (`trim_reads`), the document's put, the arrivals' delete (or their stamp's put),
    /// the history's puts and the due index's op.
    pub(super) fn cas_writes(
        &self,
        key: &str,
        expected: &Expected,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<Vec<TxnOp>> {
        let layout = &self.inner.layout;
        let mut writes = Vec::new();
        if !history.is_empty() {
            writes.extend(self.trim_reads(key));
        }
        writes.push(TxnOp::put(layout.doc_key(key), bytes.to_vec(), None));
        match &expected.takes {
            Takes::None => {}
            Takes::NoneOfThoseSeen => {
                writes.push(TxnOp::put(layout.arrivals_stamp(key), Vec::new(), None));
            }
            Takes::All => {
                let range = DeleteOptions::new().with_range(layout.arrivals_end(key));
                writes.push(TxnOp::delete(layout.arrivals_start(key), Some(range)));
            }
            Takes::These(names) => {
                let deletes = names.iter().map(|name| TxnOp::delete(name.clone(), None));
                writes.push(TxnOp::txn(Txn::new().and_then(deletes.collect::<Vec<_>>())));
            }
        }
        writes.extend(self.history_puts(key, expected.revision, history)?);
        let due_key = layout.due_key(key);
        writes.push(match due_ms {
            Some(ms) => TxnOp::put(due_key, ms.to_string(), None),
            None => TxnOp::delete(due_key, None),
        });
        Ok(writes)
    }

    /// What a CAS that appends history reads in its transaction, first, so that it sees the
    /// key as it stood before its puts: below a `history_keep` of [`EXACT_KEEP_BELOW`], how
    /// many entries and the oldest keys, which `trim_history` cuts after the write (etcd's
    /// transactions cannot compute a range end from a count); from there up, the count of
    /// appending writes, raised by one, whose version tells the writer whether its turn to cut
    /// has come: a Get of one key, where counting the history visits every entry it holds.
    fn trim_reads(&self, key: &str) -> Vec<TxnOp> {
        let layout = &self.inner.layout;
        if self.trims_in_batches() {
            let appends = layout.appends_key(key);
            let options = GetOptions::new().with_keys_only();
            return vec![
                TxnOp::get(appends.clone(), Some(options)),
                TxnOp::put(appends, Vec::new(), None),
            ];
        }
        let options = GetOptions::new()
            .with_range(layout.history_end(key))
            .with_keys_only()
            .with_limit(TRIM_BATCH);
        vec![TxnOp::get(layout.history_key(key, 0), Some(options))]
    }

    /// What the CAS's transaction came to: written at the revision it committed at (its
    /// `n_appended` entries trimmed to `history_keep` first), or a conflict with the document
    /// the failed branch read.
    pub(super) async fn outcome_of_write(
        &self,
        key: &str,
        expected_revision: u64,
        n_appended: usize,
        mut response: TxnResponse,
    ) -> Result<CasOutcome> {
        if response.succeeded() {
            let revision = response
                .take_header()
                .map(|header| header.revision())
                .filter(|revision| *revision > 0)
                .ok_or_else(|| self.backend("etcd answered a write without a revision".into()))?;
            if n_appended > 0 {
                self.trim_history(key, expected_revision, n_appended, &response)
                    .await;
            }
            return Ok(CasOutcome::Written {
                version: Version(revision.to_string()),
            });
        }
        Ok(CasOutcome::Conflict {
            current: self.key_of(key, response)?,
        })
    }

    /// Right after a CAS that appended `n_appended` entries, deletes the key's oldest entries
    /// beyond `history_keep`. Below a `history_keep` of [`EXACT_KEEP_BELOW`], after every such
    /// write, from what its transaction read before its puts (the count and the oldest keys);
    /// from there up, after one such write in [`TRIM_BATCH`], from a read of its own
    /// (`cut_in_batches`).
    ///
    /// One DeleteRange without a condition, sent only when the key holds too many: it removes
    /// keys up to a cut that were the oldest when read, and writers only ever add newer ones,
    /// so it never leaves fewer than `history_keep`; two cuts remove two prefixes of the same
    /// order, so together no more than the longer one. A failure only leaves a few entries for
    /// a later writer to cut: it is logged, never the CAS's error.
    async fn trim_history(
        &self,
        key: &str,
        expected_revision: u64,
        n_appended: usize,
        response: &TxnResponse,
    ) {
        let Some(read) = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        }) else {
            return;
        };
        if self.trims_in_batches() {
            let appends_before = read.kvs().first().map_or(0, |kv| kv.version());
            if (appends_before + 1) % TRIM_BATCH == 0 {
                self.cut_in_batches(key).await;
            }
            return;
        }
        let n_before = usize::try_from(read.count()).unwrap_or(0);
        let keep = usize::try_from(self.inner.url.retention.keep).unwrap_or(usize::MAX);
        let n_over = (n_before + n_appended).saturating_sub(keep);
        if n_over == 0 {
            return;
        }
        // Oldest first: the keys read, then (when those were all there were) the new ones.
        let mut oldest: Vec<Vec<u8>> = read.kvs().iter().map(|kv| kv.key().to_vec()).collect();
        if oldest.len() == n_before {
            let base = expected_revision.saturating_mul(SEQS_PER_REVISION);
            let layout = &self.inner.layout;
            oldest
                .extend((1..=n_appended as u64).map(|index| layout.history_key(key, base + index)));
        }
        self.cut(key, &oldest, n_over).await;
    }

    /// Reads the key's history count and its oldest keys (at most [`CUT_READ_LIMIT`]) and cuts
    /// what exceeds `history_keep`: a longer excess is cut by the next writer whose turn it is.
    async fn cut_in_batches(&self, key: &str) {
        let layout = &self.inner.layout;
        let start = layout.history_key(key, 0);
        let options = GetOptions::new()
            .with_range(layout.history_end(key))
            .with_keys_only()
            .with_limit(CUT_READ_LIMIT);
        let read = self
            .request(Effect::Read, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await;
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(%error, key, "history not read for its cut; a later write cuts it");
                return;
            }
        };
        let count = u64::try_from(read.count()).unwrap_or(0);
        let n_over = count.saturating_sub(self.inner.url.retention.keep);
        let oldest: Vec<Vec<u8>> = read.kvs().iter().map(|kv| kv.key().to_vec()).collect();
        self.cut(key, &oldest, usize::try_from(n_over).unwrap_or(usize::MAX))
            .await;
    }

    /// Deletes the first `n` of `oldest` (all of them when it holds fewer), a range from the
    /// key's first possible history key, or nothing when `n` is 0.
    async fn cut(&self, key: &str, oldest: &[Vec<u8>], n: usize) {
        let last = n.min(oldest.len()).checked_sub(1);
        let Some(last_cut) = last.and_then(|last| oldest.get(last)) else {
            return;
        };
        // Just past the last key cut.
        let end = [last_cut.as_slice(), b"\x00"].concat();
        let start = self.inner.layout.history_key(key, 0);
        let deleted = self
            .request(Effect::Write, |mut kv| {
                let (start, end) = (start.clone(), end.clone());
                async move {
                    kv.delete(start, Some(DeleteOptions::new().with_range(end)))
                        .await
                }
            })
            .await;
        if let Err(error) = deleted {
            tracing::debug!(%error, key, "history not trimmed; the next write trims it");
        }
    }

    /// Whether this store cuts history in batches (a `history_keep` of [`EXACT_KEEP_BELOW`]
    /// or more) rather than after every appending write.
    fn trims_in_batches(&self) -> bool {
        self.inner.url.retention.keep >= EXACT_KEEP_BELOW
    }

    /// The operations that write `history` after a CAS naming `expected_revision`, nested so
    /// that no level has more than [`MAX_TXN_OPS`] (the document's put takes one at the top).
    fn history_puts(
        &self,
        key: &str,
        expected_revision: u64,
        history: &[Vec<u8>],
    ) -> Result<Vec<TxnOp>> {
        if history.len() >= SEQS_PER_REVISION as usize {
            return Err(self.backend(format!(
                "one CAS may append at most {} history entries, not {}",
                SEQS_PER_REVISION - 1,
                history.len()
            )));
        }
        let base = expected_revision
            .checked_mul(SEQS_PER_REVISION)
            .ok_or_else(|| {
                self.backend(format!(
                    "revision {expected_revision} is too large for history seqs"
                ))
            })?;
        let puts: Vec<TxnOp> = history
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                // index < 65,536 and base + 65,535 fits: base is a multiple of 65,536 ≤ u64::MAX.
                let seq = base + index as u64 + 1;
                TxnOp::put(self.inner.layout.history_key(key, seq), entry.clone(), None)
            })
            .collect();
        // The entries share the top branch with `trim_reads`' operations (two at most), the
        // document's put, the arrivals' op and the due index's op ([`TOP_OPS`]).
        if puts.len() + TOP_OPS <= MAX_TXN_OPS {
            return Ok(puts);
        }
        // Else `n_groups` nested transactions (no condition: they always run) of `group_len`
        // entries each. etcd allows a nested branch what the top branch leaves: the top holds
        // TOP_OPS + n_groups operations, so TOP_OPS + n_groups + group_len must stay within the
        // limit.
        let n_groups = (1..MAX_TXN_OPS)
            .find(|n_groups| TOP_OPS + n_groups + puts.len().div_ceil(*n_groups) <= MAX_TXN_OPS)
            .ok_or_else(|| {
                self.backend(format!(
                    "{} history entries do not fit in one etcd transaction (at most {})",
                    history.len(),
                    MAX_HISTORY_PER_CAS
                ))
            })?;
        let group_len = puts.len().div_ceil(n_groups);
        let mut groups = Vec::with_capacity(n_groups);
        let mut puts = puts.into_iter().peekable();
        while puts.peek().is_some() {
            let group: Vec<TxnOp> = puts.by_ref().take(group_len).collect();
            groups.push(TxnOp::txn(Txn::new().and_then(group)));
        }
        Ok(groups)
    }
}
