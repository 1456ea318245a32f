//! Where a key's records live in the table, and how an item becomes a record and back.
//!
//! The table has a string partition key `pk` and a string sort key `sk`:
//!
//! | item | `pk` | `sk` | other attributes |
//! |---|---|---|---|
//! | hot record of key K | `d` | K | `v` (S): the version; `h` (B): [`Hot::encode`], deflated |
//! | history entry SEQ of K | `h/` K | SEQ, 20 decimal digits | `e` (B): the entry |
//! | record NAME of K | `r/` K | NAME | `r` (B): the record |
//!
//! Every hot record shares the partition `d`, so `list(prefix)` is one Query (`begins_with` on
//! the sort key, which DynamoDB orders by UTF-8 bytes — the contract's order) and never a Scan.
//! Each write goes to its own sort key, which DynamoDB can split a busy partition on. A key's
//! history is its own partition, so `history` is a Query on a range of zero-padded sequence
//! numbers (the padding makes string order numeric order). A key's records are a partition of
//! their own too, apart from its history's (`r/` and `h/` differ before K starts) and from the
//! hot records' `d`, so `list` never meets one; a record is one item, read and written by its
//! primary key, never queried. The partition key is K with a fixed part in front, so no key
//! needs escaping and `r/a` + `b/c` is not `r/a/b` + `c`: the sort key keeps the name apart.
//! A record of [`crate::RECORD_MAX_BYTES`] with the longest key and name fits in an item.
//!
//! Attribute names are one or two letters on purpose: DynamoDB bills a write by the item's
//! size, names included. For the same reason the hot record is deflated (raw DEFLATE, RFC 1951):
//! a document with a live ticket and a 200-byte context, or with a history entry waiting to be
//! stored, is 1.1 to 1.2 KB as written and 0.6 to 0.8 KB deflated, which is the difference between
//! two write units and one for every acquire and every release.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::deferred::Hot;
use crate::{HistoryRecord, StoreError, Version};

/// The partition key attribute.
pub const PK: &str = "pk";
/// The sort key attribute.
pub const SK: &str = "sk";
/// The hot record's version (a string: `GENERATION-NONCE`).
pub const VERSION: &str = "v";
/// The hot record itself: [`Hot::encode`], deflated.
pub const HOT: &str = "h";

/// The largest hot record inflated: far above any record baton writes (a 256 KiB document and
/// a few pending entries), low enough that a corrupt or hostile item cannot exhaust memory.
const HOT_INFLATED_MAX: u64 = 4 * 1024 * 1024;
/// A history item's entry.
pub const ENTRY: &str = "e";
/// A history item's expiry, in epoch seconds (N): the table's TTL attribute, which `baton
/// init` enables, so DynamoDB deletes old history itself (baton asks for no delete permission).
pub const EXPIRES: &str = "x";
/// A record item's bytes.
pub const RECORD: &str = "r";

/// The partition of every hot record.
pub const HOT_PARTITION: &str = "d";

/// DynamoDB's largest item (400 KB, names and values together).
pub const ITEM_MAX_BYTES: usize = 400 * 1024;

/// One write capacity unit covers a write of an item up to this size.
pub const WRITE_UNIT_BYTES: usize = 1024;

/// The partition of `key`'s history.
pub fn history_partition(key: &str) -> String {
    format!("h/{key}")
}

/// The partition of `key`'s records.
pub fn records_partition(key: &str) -> String {
    format!("r/{key}")
}

/// The primary key of record `name` of `key`.
pub fn record_key(key: &str, name: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), AttributeValue::S(records_partition(key))),
        (SK.to_owned(), AttributeValue::S(name.to_owned())),
    ])
}

/// The item of record `name` of `key`.
pub fn record_item(key: &str, name: &str, bytes: &[u8]) -> HashMap<String, AttributeValue> {
    let mut item = record_key(key, name);
    item.insert(
        RECORD.to_owned(),
        AttributeValue::B(Blob::new(bytes.to_vec())),
    );
    item
}

/// A record item read back: its bytes. An item baton did not write is an error that says so.
pub fn parse_record(
    item: &HashMap<String, AttributeValue>,
    store: &str,
) -> Result<Vec<u8>, StoreError> {
    match item.get(RECORD) {
        Some(AttributeValue::B(blob)) => Ok(blob.as_ref().to_vec()),
        _ => Err(not_ours(store, item, "it has no binary attribute `r`")),
    }
}

/// The sort key of history entry `seq`: 20 digits, enough for every `u64`.
pub fn seq_sort_key(seq: u64) -> String {
    format!("{seq:020}")
}

/// The primary key of `key`'s hot record.
pub fn hot_key(key: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), AttributeValue::S(HOT_PARTITION.to_owned())),
        (SK.to_owned(), AttributeValue::S(key.to_owned())),
    ])
}

/// The hot record item of `key` at `version`.
pub fn hot_item(key: &str, version: &Version, hot: &Hot) -> HashMap<String, AttributeValue> {
    let mut item = hot_key(key);
    item.insert(VERSION.to_owned(), AttributeValue::S(version.0.clone()));
    item.insert(
        HOT.to_owned(),
        AttributeValue::B(Blob::new(deflate(&hot.encode()))),
    );
    item
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(bytes.len() / 2 + 16),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// The inflated bytes, or `None` if they are not a DEFLATE stream or inflate past the bound.
fn inflate(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(bytes)
        .take(HOT_INFLATED_MAX + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 <= HOT_INFLATED_MAX).then_some(out)
}

/// The item of one history entry of `key`, expiring at `expires_s` (epoch seconds).
pub fn history_item(
    key: &str,
    record: &HistoryRecord,
    expires_s: u64,
) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (EXPIRES.to_owned(), AttributeValue::N(expires_s.to_string())),
        (PK.to_owned(), AttributeValue::S(history_partition(key))),
        (SK.to_owned(), AttributeValue::S(seq_sort_key(record.seq))),
        (
            ENTRY.to_owned(),
            AttributeValue::B(Blob::new(record.bytes.clone())),
        ),
    ])
}

/// A hot record item read back: its version and record. `store` names the store for errors;
/// an item baton did not write is an error that says so, never a panic.
pub fn parse_hot(
    item: &HashMap<String, AttributeValue>,
    store: &str,
) -> Result<(Version, Hot), StoreError> {
    let version = match item.get(VERSION) {
        Some(AttributeValue::S(version)) => Version(version.clone()),
        _ => return Err(not_ours(store, item, "it has no string attribute `v`")),
    };
    let bytes = match item.get(HOT) {
        Some(AttributeValue::B(blob)) => blob.as_ref(),
        _ => return Err(not_ours(store, item, "it has no binary attribute `h`")),
    };
    let Some(bytes) = inflate(bytes) else {
        return Err(not_ours(
            store,
            item,
            "its attribute `h` is not a deflated record",
        ));
    };
    Ok((version, Hot::decode(&bytes, store)?))
}

/// A history item read back.
pub fn parse_history(
    item: &HashMap<String, AttributeValue>,
    store: &str,
) -> Result<HistoryRecord, StoreError> {
    let seq = match item.get(SK) {
        Some(AttributeValue::S(sort_key)) => sort_key.parse::<u64>().ok(),
        _ => None,
    };
    let Some(seq) = seq else {
        return Err(not_ours(
            store,
            item,
            "its sort key is not a sequence number",
        ));
    };
    match item.get(ENTRY) {
        Some(AttributeValue::B(blob)) => Ok(HistoryRecord {
            seq,
            bytes: blob.as_ref().to_vec(),
        }),
        _ => Err(not_ours(store, item, "it has no binary attribute `e`")),
    }
}

/// The key (sort key) of a hot record item, as `list` reads it.
pub fn key_of_hot(item: &HashMap<String, AttributeValue>) -> Option<&str> {
    match item.get(SK) {
        Some(AttributeValue::S(key)) => Some(key),
        _ => None,
    }
}

fn not_ours(store: &str, item: &HashMap<String, AttributeValue>, why: &str) -> StoreError {
    let where_ = match (item.get(PK), item.get(SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => {
            format!("the item (pk {pk:?}, sk {sk:?})")
        }
        _ => "an item".to_owned(),
    };
    StoreError::Incompatible {
        store: store.to_owned(),
        reason: format!(
            "{where_} is not a baton record ({why}): was it written by something else? Give \
             baton a table of its own"
        ),
    }
}

/// The size DynamoDB bills for `item`: the UTF-8 length of each attribute name plus its
/// value's size (strings by UTF-8 length, binaries by length, numbers about one byte per two
/// significant digits plus one).
pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_bytes(value))
        .sum()
}

fn value_bytes(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(text) => text.len(),
        AttributeValue::B(blob) => blob.as_ref().len(),
        AttributeValue::N(number) => {
            let digits = number.chars().filter(char::is_ascii_digit).count();
            digits.div_ceil(2) + 1
        }
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        // baton writes no other types; count them generously rather than not at all.
        AttributeValue::Ss(texts) => texts.iter().map(String::len).sum(),
        AttributeValue::Ns(numbers) => numbers.iter().map(String::len).sum(),
        AttributeValue::Bs(blobs) => blobs.iter().map(|blob| blob.as_ref().len()).sum(),
        AttributeValue::L(values) => 3 + values.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + item_bytes(map) + map.len(),
        _ => 0,
    }
}

/// The write capacity units a write of an item of `bytes` costs: one per started KB, at least
/// one.
pub fn write_units(bytes: usize) -> u64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_sort_keys_sort_as_numbers() {
        let seqs = [0, 1, 9, 10, 99, 100, 12_345, u64::MAX - 1, u64::MAX];
        let keys: Vec<String> = seqs.iter().map(|seq| seq_sort_key(*seq)).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "{keys:?}");
        assert!(keys.iter().all(|key| key.len() == 20));
    }

    #[test]
    fn items_round_trip_and_foreign_items_are_refused() {
        let hot = Hot {
            generation: 3,
            next_seq: 5,
            doc: b"doc".to_vec(),
            pending: vec![HistoryRecord {
                seq: 4,
                bytes: b"four".to_vec(),
            }],
        };
        let version = Version("3-00ff".to_owned());
        let item = hot_item("deploy/prod", &version, &hot);
        let parsed = parse_hot(&item, "t");
        assert!(
            matches!(&parsed, Ok((v, h)) if *v == version && *h == hot),
            "{parsed:?}"
        );
        assert_eq!(key_of_hot(&item), Some("deploy/prod"));

        let record = HistoryRecord {
            seq: 42,
            bytes: vec![0, 255],
        };
        let parsed = parse_history(&history_item("k", &record, 1), "t");
        assert!(matches!(&parsed, Ok(r) if *r == record), "{parsed:?}");

        let mut foreign = hot_key("k");
        foreign.insert("v".to_owned(), AttributeValue::N("1".to_owned()));
        let error = parse_hot(&foreign, "t").err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("not a baton record")),
            "{error:?}"
        );
        let mut corrupt = hot_key("k");
        corrupt.insert(VERSION.to_owned(), AttributeValue::S("1-0".to_owned()));
        corrupt.insert(
            HOT.to_owned(),
            AttributeValue::B(Blob::new(b"junk".to_vec())),
        );
        assert!(parse_hot(&corrupt, "t").is_err());
        // Deflated, but not a record; and a record that inflates past the bound.
        corrupt.insert(
            HOT.to_owned(),
            AttributeValue::B(Blob::new(deflate(b"junk"))),
        );
        assert!(parse_hot(&corrupt, "t").is_err());
        let bomb = deflate(&vec![0; HOT_INFLATED_MAX as usize + 1]);
        assert!(bomb.len() < 10_000, "zeros deflate well: {}", bomb.len());
        corrupt.insert(HOT.to_owned(), AttributeValue::B(Blob::new(bomb)));
        let error = parse_hot(&corrupt, "t").err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("not a deflated")),
            "{error:?}"
        );
        assert!(parse_history(&hot_key("k"), "t").is_err());
    }

    #[test]
    fn records_round_trip_and_fit_in_an_item() {
        let item = record_item("deploy/prod", "params/j-1", &[0, 255]);
        assert_eq!(
            item.get(PK),
            Some(&AttributeValue::S("r/deploy/prod".to_owned()))
        );
        assert_eq!(
            item.get(SK),
            Some(&AttributeValue::S("params/j-1".to_owned()))
        );
        assert!(matches!(parse_record(&item, "t"), Ok(bytes) if bytes == [0, 255]));
        assert!(parse_record(&hot_key("k"), "t").is_err());

        // Record partitions never meet history partitions or the hot records' partition.
        for key in ["a", "a/b", "d", "h/a", "r"] {
            assert_ne!(records_partition(key), history_partition(key));
            assert_ne!(records_partition(key), HOT_PARTITION);
            for other in ["a", "a/b", "r/a", "h"] {
                assert_ne!(records_partition(key), history_partition(other));
            }
        }

        let largest = record_item(
            &"é".repeat(128),
            &"n".repeat(crate::RECORD_NAME_MAX_BYTES),
            &vec![0; crate::RECORD_MAX_BYTES],
        );
        assert!(
            item_bytes(&largest) <= ITEM_MAX_BYTES,
            "{}",
            item_bytes(&largest)
        );
    }

    #[test]
    fn sizes_follow_dynamodb_billing() {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("d".to_owned())),
            ("sk".to_owned(), AttributeValue::S("é".to_owned())),
            ("e".to_owned(), AttributeValue::B(Blob::new(vec![0; 10]))),
        ]);
        assert_eq!(item_bytes(&item), 2 + 1 + 2 + 2 + 1 + 10);
        assert_eq!(write_units(0), 1);
        assert_eq!(write_units(1024), 1);
        assert_eq!(write_units(1025), 2);
    }
}
