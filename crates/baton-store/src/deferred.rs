//! History for stores that cannot write two records in one atomic step (S3), or that bill for
//! it (a DynamoDB transaction costs twice the write units of its items).
//!
//! The [`crate::Store`] contract says a CAS appends its history entries *atomically* with the
//! document: a history entry must never be lost, and never exist for a CAS that failed. These
//! stores keep one *hot record* per key that holds the core's document **and** the history
//! entries not yet stored on their own ([`Hot::pending`]). A CAS writes only the hot record, so
//! its entries are as durable as its document from the moment it succeeds, and nothing of a
//! failed CAS exists anywhere. A later writer moves pending entries out: it first stores them as
//! history records of their own (one per entry, named by its sequence number, so writing one
//! twice — two writers racing, or a writer retrying — writes the same bytes to the same name),
//! and only then writes a hot record without them. A writer that dies between the two steps
//! leaves the entries pending *and* stored, which readers merge by sequence number.
//!
//! [`plan`] decides, for one CAS, what to store first and what the new hot record is;
//! [`merge_after`] and [`merge_tail`] answer history reads from both places. Readers must read
//! the hot record **before** listing the stored records: an entry moved out in between is then
//! either still pending in what they read or already stored when they list (read the other way
//! round, an entry moved in between would be in neither).
//!
//! The hot record is small: pending entries are moved out as soon as they exceed the store's
//! [`Policy`], so its size does not grow with the key's past.

use crate::{HistoryRecord, StoreError};

/// The first bytes of an encoded [`Hot`] record, with its format number.
const MAGIC: &[u8; 10] = b"baton-hot\x01";

/// One key's hot record on a store with deferred history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hot {
    /// Bumped by every write, so that every write changes the stored bytes: S3 versions an
    /// object by its ETag, a hash of the body, and two writes of identical bodies would let a
    /// stale `If-Match` through. Also a natural version number for a conditional update.
    pub generation: u64,
    /// The sequence number the next history entry gets (the first is 1).
    pub next_seq: u64,
    /// The core's document, as the coordinator wrote it.
    pub doc: Vec<u8>,
    /// History entries written with the document but not yet stored on their own, oldest
    /// first, with consecutive sequence numbers ending at `next_seq - 1`.
    pub pending: Vec<HistoryRecord>,
}

/// When a store moves pending entries out of the hot record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Move them out when the hot record would hold more than this many entries.
    pub max_pending: usize,
    /// ... or more than this many bytes of entries.
    pub max_pending_bytes: usize,
}

/// What one CAS must do: store `flush` (each entry under its own sequence number, idempotently),
/// and only after all of them are durable, write `next` conditionally on the current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Entries of the current hot record to store on their own before writing `next`.
    pub flush: Vec<HistoryRecord>,
    /// The hot record to write.
    pub next: Hot,
}

/// Plans a CAS that replaces `current` (`None`: the key has no hot record yet) with `doc` and
/// appends `history`.
///
/// The new entries stay pending in the new record (they exist only if this CAS succeeds). The
/// current record's pending entries stay too unless keeping them with the new ones would break
/// `policy`; then all of them are moved out first. Only entries of `current` are ever moved out:
/// they were written by a CAS that succeeded, so their sequence numbers and bytes are final.
pub fn plan(current: Option<&Hot>, doc: &[u8], history: &[Vec<u8>], policy: Policy) -> Plan {
    let (generation, next_seq, pending) = match current {
        Some(hot) => (hot.generation, hot.next_seq.max(1), hot.pending.as_slice()),
        None => (0, 1, &[][..]),
    };
    let fresh: Vec<HistoryRecord> = history
        .iter()
        .zip(next_seq..)
        .map(|(bytes, seq)| HistoryRecord {
            seq,
            bytes: bytes.clone(),
        })
        .collect();
    let count = pending.len() + fresh.len();
    let bytes: usize = pending
        .iter()
        .chain(&fresh)
        .map(|record| record.bytes.len())
        .sum();
    let move_out =
        !pending.is_empty() && (count > policy.max_pending || bytes > policy.max_pending_bytes);
    let (flush, kept) = if move_out {
        (pending.to_vec(), Vec::new())
    } else {
        (Vec::new(), pending.to_vec())
    };
    let next = Hot {
        generation: generation.wrapping_add(1),
        next_seq: next_seq + fresh.len() as u64,
        doc: doc.to_vec(),
        pending: kept.into_iter().chain(fresh).collect(),
    };
    Plan { flush, next }
}

/// Up to `limit` entries with `seq > after_seq`, oldest first, from the stored records
/// (`stored`, in any order, read *after* `hot`) and the pending entries of `hot`.
pub fn merge_after(
    stored: Vec<HistoryRecord>,
    hot: Option<&Hot>,
    after_seq: u64,
    limit: usize,
) -> Vec<HistoryRecord> {
    let mut all = combine(stored, hot);
    all.retain(|record| record.seq > after_seq);
    all.truncate(limit);
    all
}

/// The newest `limit` entries, newest first, from the stored records (`stored`, in any order,
/// read *after* `hot`) and the pending entries of `hot`.
pub fn merge_tail(
    stored: Vec<HistoryRecord>,
    hot: Option<&Hot>,
    limit: usize,
) -> Vec<HistoryRecord> {
    let mut all = combine(stored, hot);
    all.reverse();
    all.truncate(limit);
    all
}

/// Both sources, sorted by sequence number, each entry once (an entry can be in both while it
/// is being moved out; its bytes are the same in both).
fn combine(stored: Vec<HistoryRecord>, hot: Option<&Hot>) -> Vec<HistoryRecord> {
    let mut all = stored;
    if let Some(hot) = hot {
        all.extend(hot.pending.iter().cloned());
    }
    all.sort_by_key(|record| record.seq);
    all.dedup_by_key(|record| record.seq);
    all
}

impl Hot {
    /// The record as bytes (for a store that keeps it as one blob, such as an S3 object):
    /// [`MAGIC`], then big-endian `generation` and `next_seq` (u64), the document (u32 length
    /// and bytes), the number of pending entries (u32) and each entry (u64 seq, u32 length,
    /// bytes).
    pub fn encode(&self) -> Vec<u8> {
        let entries: usize = self.pending.iter().map(|r| 12 + r.bytes.len()).sum();
        let mut out = Vec::with_capacity(MAGIC.len() + 24 + self.doc.len() + entries);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.next_seq.to_be_bytes());
        put_bytes(&mut out, &self.doc);
        out.extend_from_slice(&(self.pending.len() as u32).to_be_bytes());
        for record in &self.pending {
            out.extend_from_slice(&record.seq.to_be_bytes());
            put_bytes(&mut out, &record.bytes);
        }
        out
    }

    /// Reads a record [`Hot::encode`] wrote. `store` names the store for the error, which says
    /// what is wrong: a record of a newer baton, or bytes that are not a record at all.
    pub fn decode(bytes: &[u8], store: &str) -> Result<Hot, StoreError> {
        let incompatible = |reason: String| StoreError::Incompatible {
            store: store.to_owned(),
            reason,
        };
        let Some(rest) = bytes.strip_prefix(&MAGIC[..MAGIC.len() - 1]) else {
            return Err(incompatible(
                "a key's record is not a baton record (was the object written by something \
                 else?)"
                    .to_owned(),
            ));
        };
        let mut reader = Reader { rest };
        let format = reader.take(1).map(|b| b[0]);
        if format != Some(MAGIC[MAGIC.len() - 1]) {
            return Err(incompatible(format!(
                "a key's record has format {}, which this baton cannot read: upgrade baton",
                format.map_or_else(|| "(none)".to_owned(), |f| f.to_string())
            )));
        }
        let corrupt = || incompatible("a key's record is truncated or corrupt".to_owned());
        let generation = reader.u64().ok_or_else(corrupt)?;
        let next_seq = reader.u64().ok_or_else(corrupt)?;
        let doc = reader.bytes().ok_or_else(corrupt)?.to_vec();
        let count = reader.u32().ok_or_else(corrupt)? as usize;
        // Each entry takes at least 12 bytes: never reserve more than the input can hold.
        let mut pending = Vec::with_capacity(count.min(reader.rest.len() / 12));
        for _ in 0..count {
            let seq = reader.u64().ok_or_else(corrupt)?;
            let bytes = reader.bytes().ok_or_else(corrupt)?.to_vec();
            pending.push(HistoryRecord { seq, bytes });
        }
        if !reader.rest.is_empty() {
            return Err(corrupt());
        }
        Ok(Hot {
            generation,
            next_seq,
            doc,
            pending,
        })
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Reads big-endian fields off the front of a slice; `None` when too short.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEP_FOUR: Policy = Policy {
        max_pending: 4,
        max_pending_bytes: 1024,
    };

    fn entries(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    fn seqs(records: &[HistoryRecord]) -> Vec<u64> {
        records.iter().map(|r| r.seq).collect()
    }

    #[test]
    fn first_write_numbers_entries_from_one() {
        let plan = plan(None, b"doc", &entries(&["a", "b"]), KEEP_FOUR);
        assert!(plan.flush.is_empty());
        assert_eq!(plan.next.generation, 1);
        assert_eq!(plan.next.next_seq, 3);
        assert_eq!(seqs(&plan.next.pending), [1, 2]);
        assert_eq!(plan.next.doc, b"doc");
    }

    #[test]
    fn every_write_changes_the_generation_even_with_the_same_document() {
        let first = plan(None, b"same", &[], KEEP_FOUR).next;
        let second = plan(Some(&first), b"same", &[], KEEP_FOUR).next;
        assert_ne!(first.encode(), second.encode());
    }

    #[test]
    fn pending_entries_move_out_only_past_the_policy_and_only_committed_ones() {
        let mut hot = plan(None, b"d", &entries(&["1", "2", "3"]), KEEP_FOUR).next;
        let keep = plan(Some(&hot), b"d", &entries(&["4"]), KEEP_FOUR);
        assert!(keep.flush.is_empty(), "4 entries fit");
        hot = keep.next;
        let over = plan(Some(&hot), b"d", &entries(&["5", "6"]), KEEP_FOUR);
        assert_eq!(
            seqs(&over.flush),
            [1, 2, 3, 4],
            "the committed entries move out"
        );
        assert_eq!(
            seqs(&over.next.pending),
            [5, 6],
            "the new ones stay pending"
        );
        assert_eq!(over.next.next_seq, 7);
    }

    #[test]
    fn the_byte_bound_moves_entries_out_too() {
        let policy = Policy {
            max_pending: 100,
            max_pending_bytes: 10,
        };
        let hot = plan(None, b"d", &[vec![b'x'; 8]], policy).next;
        let next = plan(Some(&hot), b"d", &[vec![b'y'; 8]], policy);
        assert_eq!(seqs(&next.flush), [1]);
        assert_eq!(seqs(&next.next.pending), [2]);
    }

    #[test]
    fn reads_merge_both_places_once_each() {
        let stored = vec![
            HistoryRecord {
                seq: 2,
                bytes: b"b".to_vec(),
            },
            HistoryRecord {
                seq: 1,
                bytes: b"a".to_vec(),
            },
            // Being moved out: stored and still pending.
            HistoryRecord {
                seq: 3,
                bytes: b"c".to_vec(),
            },
        ];
        let hot = Hot {
            generation: 7,
            next_seq: 5,
            doc: Vec::new(),
            pending: vec![
                HistoryRecord {
                    seq: 3,
                    bytes: b"c".to_vec(),
                },
                HistoryRecord {
                    seq: 4,
                    bytes: b"d".to_vec(),
                },
            ],
        };
        assert_eq!(
            seqs(&merge_after(stored.clone(), Some(&hot), 0, 10)),
            [1, 2, 3, 4]
        );
        assert_eq!(seqs(&merge_after(stored.clone(), Some(&hot), 2, 1)), [3]);
        assert_eq!(seqs(&merge_tail(stored.clone(), Some(&hot), 3)), [4, 3, 2]);
        assert_eq!(seqs(&merge_tail(stored, None, 10)), [3, 2, 1]);
    }

    #[test]
    fn records_round_trip_and_bad_bytes_are_errors_not_panics() {
        let hot = plan(None, b"{\"doc\":1}", &entries(&["one", ""]), KEEP_FOUR).next;
        let bytes = hot.encode();
        assert_eq!(Hot::decode(&bytes, "s3").ok(), Some(hot));
        for cut in 0..bytes.len() {
            assert!(Hot::decode(&bytes[..cut], "s3").is_err(), "cut at {cut}");
        }
        let mut newer = bytes.clone();
        newer[MAGIC.len() - 1] = 2;
        let err = Hot::decode(&newer, "s3").err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("upgrade baton")));
        let mut trailing = bytes;
        trailing.push(0);
        assert!(Hot::decode(&trailing, "s3").is_err());
        // A huge entry count in a short record must not allocate for it.
        let mut huge = plan(None, b"", &[], KEEP_FOUR).next.encode();
        let at = huge.len() - 4;
        huge[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Hot::decode(&huge, "s3").is_err());
    }
}
