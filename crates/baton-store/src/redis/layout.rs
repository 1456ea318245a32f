//! Where a key's document, history and records live among Redis's keys, and how they read back.
//!
//! Every name starts with the store's namespace (`baton:` unless the URL's `namespace` says
//! otherwise), so baton can share a database with other data. For a baton key `K`:
//!
//! | Redis key | type | holds |
//! |---|---|---|
//! | `baton:doc:K` | hash | `v` version, `d` document, `n` writes so far, `s` last history seq |
//! | `baton:hist:K` | stream | the history log: entry ID `<seq>-0`, one field `e` with the entry |
//! | `baton:keys` | sorted set | every key with a document, score 0, for `list` |
//! | `baton:due` | sorted set | keys with a due time, scored by it (the due index) |
//! | `baton:rec:K` | hash | K's records: field = record name, value = the record's bytes |
//! | `baton:arr:K` | list | K's pending arrivals, oldest first |
//!
//! and the pub/sub channel `baton:wake:DB:K` carries K's name, new version and document after
//! each write to it; `baton:wake:DB` the bare name of every key written. `K` is taken byte for byte (Redis keys are binary), so no key needs
//! escaping and none can reach another's names: the fixed part comes first. Namespaces should
//! not be prefixes of one another.

use ::redis::Value;

use crate::key_range::successor_bytes;
use crate::{HistoryRecord, Version, Versioned};

/// The Redis names of the store's data (see the module's *Key layout*).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Names {
    pub namespace: String,
    /// `<namespace>wake:<db>`: pub/sub is shared by every database of a server, so the database
    /// number keeps stores on different databases from waking each other.
    pub channel: String,
}

impl Names {
    pub fn new(namespace: &str, db: i64) -> Names {
        Names {
            namespace: namespace.to_owned(),
            channel: format!("{namespace}wake:{db}"),
        }
    }

    /// `<channel>:K`: the channel of K's wake-ups, which only K's watchers subscribe to.
    pub fn key_channel(&self, key: &str) -> String {
        format!("{}:{key}", self.channel)
    }

    pub fn doc(&self, key: &str) -> String {
        format!("{}doc:{key}", self.namespace)
    }

    pub fn history(&self, key: &str) -> String {
        format!("{}hist:{key}", self.namespace)
    }

    pub fn keys(&self) -> String {
        format!("{}keys", self.namespace)
    }

    /// `<namespace>due`: the due index, keys scored by when they next need a worker.
    pub fn due(&self) -> String {
        format!("{}due", self.namespace)
    }

    /// `<namespace>arr:K`: the list of K's pending arrivals, oldest first.
    pub fn arrivals(&self, key: &str) -> String {
        format!("{}arr:{key}", self.namespace)
    }

    /// `<namespace>rec:K`: the hash of K's records, one field per record name.
    pub fn records(&self, key: &str) -> String {
        format!("{}rec:{key}", self.namespace)
    }
}

/// The `ZRANGEBYLEX` bounds of the keys that start with `prefix`, byte-wise: from `[prefix`
/// (inclusive) to `(successor` (exclusive), where the successor
/// ([`crate::key_range::successor_bytes`]) is the least byte string above every string that
/// starts with the prefix. Only the first byte of a bound is syntax; the rest is taken
/// literally.
pub(super) fn lex_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        return (b"-".to_vec(), b"+".to_vec());
    }
    let mut min = b"[".to_vec();
    min.extend_from_slice(prefix.as_bytes());
    match successor_bytes(prefix.as_bytes()) {
        Some(successor) => {
            let mut max = b"(".to_vec();
            max.extend_from_slice(&successor);
            (min, max)
        }
        // Only 0xFF bytes (impossible in UTF-8): every string from the prefix up.
        None => (min, b"+".to_vec()),
    }
}

/// The document with the arrivals read after it, its version naming how many
/// ([`crate::arrivals_seen`]).
pub(super) fn versioned_with(
    version: Vec<u8>,
    bytes: Vec<u8>,
    arrivals: Vec<Vec<u8>>,
) -> Versioned {
    let version = String::from_utf8_lossy(&version);
    Versioned {
        version: crate::arrivals_seen::compose(&version, arrivals.len() as u64),
        bytes,
        arrivals,
    }
}

/// Versions are written by the CAS script as ASCII; anything else is kept, lossily, as text
/// that will simply not match.
pub(super) fn version_of(version: Vec<u8>) -> Version {
    Version(String::from_utf8_lossy(&version).into_owned())
}

/// One `[id, [field, value, …]]` stream entry as a record: seq from the ID `<seq>-0`, bytes
/// from the field `e`.
pub(super) fn history_record(entry: &Value) -> Option<HistoryRecord> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let [id, fields] = parts.as_slice() else {
        return None;
    };
    let id = bytes(id)?;
    let seq = std::str::from_utf8(&id)
        .ok()?
        .split_once('-')?
        .0
        .parse()
        .ok()?;
    let entry_bytes = match fields {
        Value::Array(fields) => fields
            .chunks(2)
            .find(|pair| pair.first().and_then(bytes).as_deref() == Some(b"e"))
            .and_then(|pair| pair.get(1))
            .and_then(bytes)?,
        Value::Map(fields) => fields
            .iter()
            .find(|(name, _)| bytes(name).as_deref() == Some(b"e"))
            .and_then(|(_, value)| bytes(value))?,
        _ => return None,
    };
    Some(HistoryRecord {
        seq,
        bytes: entry_bytes,
    })
}

/// The bytes of a string reply.
pub(super) fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) => Some(text.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        _ => None,
    }
}

/// A non-negative integer reply, or a string of digits (TIME answers with strings).
pub(super) fn integer(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => std::str::from_utf8(&bytes(value)?).ok()?.parse().ok(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn lex_ranges_are_byte_wise_and_literal() {
        let cases: &[(&str, &[u8], &[u8])] = &[
            ("", b"-", b"+"),
            ("a", b"[a", b"(b"),
            ("100%", b"[100%", b"(100&"),
            ("star*", b"[star*", b"(star+"),
            ("[x", b"[[x", b"([y"),
            ("é", "[é".as_bytes(), &[b'(', 0xC3, 0xAA]),
            (
                "x\u{10FFFF}",
                "[x\u{10FFFF}".as_bytes(),
                &[b'(', b'x', 0xF4, 0x8F, 0xBF, 0xC0],
            ),
        ];
        for (prefix, min, max) in cases {
            assert_eq!(
                lex_range(prefix),
                (min.to_vec(), max.to_vec()),
                "{prefix:?}"
            );
        }
    }

    #[test]
    fn history_entries_parse_in_both_protocols() {
        let bulk = |text: &[u8]| Value::BulkString(text.to_vec());
        let resp2 = Value::Array(vec![
            bulk(b"42-0"),
            Value::Array(vec![bulk(b"e"), bulk(&[0, 255])]),
        ]);
        let resp3 = Value::Array(vec![
            bulk(b"7-0"),
            Value::Map(vec![(bulk(b"e"), bulk(b"x"))]),
        ]);
        assert_eq!(
            history_record(&resp2),
            Some(HistoryRecord {
                seq: 42,
                bytes: vec![0, 255]
            })
        );
        assert_eq!(
            history_record(&resp3),
            Some(HistoryRecord {
                seq: 7,
                bytes: b"x".to_vec()
            })
        );
        assert_eq!(
            history_record(&Value::Array(vec![bulk(b"x-0"), Value::Array(vec![])])),
            None
        );
        assert_eq!(history_record(&Value::Nil), None);
    }
}
