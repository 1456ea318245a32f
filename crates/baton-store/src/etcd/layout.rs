//! Where baton's documents, history and records live among etcd's keys.
//!
//! Under the URL's prefix `P` (default `/baton`), with baton's key `K` as its UTF-8 bytes, as-is:
//!
//! ```text
//! P/d/K                      the document of K (the etcd value is the document's bytes)
//! P/h/K \x00 SEQ             one history entry of K; SEQ is the entry's seq as 20 decimal digits
//! P/r/K \x00 NAME            record NAME of K (the etcd value is the record's bytes)
//! P/u/K                      K's place in the due index: when it next needs a worker, as
//!                            decimal milliseconds (absent: never)
//! P/a/K                      K's count of writes that appended history: the etcd key's
//!                            version (its value is empty), so a write learns it in O(1)
//! P/q/K \x00 ID              one pending arrival of K (the value is its bytes); ID is a slot
//!                            `sN` free when it was put, or (a crowded key's, or an older
//!                            baton's) a name unique to the append; arrivals are read in the
//!                            order etcd created them
//! P/q/K                      K's arrivals stamp (its value is empty): put by a write that takes
//!                            no arrival from a pushed version that knew none pending, so that
//!                            a watch of `[P/q/K, P/q/K\x01)` tells of that write's revision
//!                            too; no read of the arrivals (`[P/q/K\x00, P/q/K\x01)`) meets
//!                            it; it stays once put, one small key per such key
//! ```
//!
//! Documents, history and records are separate branches, so listing documents (a range on
//! `P/d/` + prefix) never meets a history entry or a record. A history key ends K with a NUL
//! byte, which no baton key can contain (control characters are refused), so K's history range
//! `[P/h/K\x00, P/h/K\x01)` holds K's entries only: not those of `K/x` or `Kx`, whose keys
//! continue K with a byte above NUL. Twenty digits hold every u64, so the byte order of history
//! keys is the order of their seqs. A record's key ends K with a NUL byte too, so
//! `P/r/K\x00NAME` names exactly one (K, NAME): K is everything up to the first NUL, and record
//! names hold none either. etcd's range reads are ordered by key bytes, which for UTF-8 is code
//! point order: the order `list` promises.

/// The etcd keys of one store (one prefix).
#[derive(Clone, Debug)]
pub struct Layout {
    /// `P/d/`.
    docs_root: Vec<u8>,
    /// `P/h/`.
    history_root: Vec<u8>,
    /// `P/r/`.
    records_root: Vec<u8>,
    /// `P/u/`.
    due_root: Vec<u8>,
    /// `P/a/`.
    appends_root: Vec<u8>,
    /// `P/q/`.
    arrivals_root: Vec<u8>,
}

/// The digits of a seq in a history key: enough for `u64::MAX`.
const SEQ_DIGITS: usize = 20;

impl Layout {
    /// The layout under `prefix` (no trailing `/`).
    pub fn new(prefix: &str) -> Layout {
        Layout {
            docs_root: format!("{prefix}/d/").into_bytes(),
            history_root: format!("{prefix}/h/").into_bytes(),
            records_root: format!("{prefix}/r/").into_bytes(),
            due_root: format!("{prefix}/u/").into_bytes(),
            appends_root: format!("{prefix}/a/").into_bytes(),
            arrivals_root: format!("{prefix}/q/").into_bytes(),
        }
    }

    /// `P/d/K`.
    pub fn doc_key(&self, key: &str) -> Vec<u8> {
        [self.docs_root.as_slice(), key.as_bytes()].concat()
    }

    /// `P/d/` + `prefix`: the start of the documents `list(prefix)` returns.
    pub fn docs_with_prefix(&self, prefix: &str) -> Vec<u8> {
        self.doc_key(prefix)
    }

    /// The baton key of a document's etcd key; `None` for a key not under `P/d/` or not UTF-8
    /// (not written by baton).
    pub fn key_of_doc(&self, etcd_key: &[u8]) -> Option<String> {
        let key = etcd_key.strip_prefix(self.docs_root.as_slice())?;
        String::from_utf8(key.to_vec()).ok()
    }

    /// `P/u/K`: K's entry in the due index.
    pub fn due_key(&self, key: &str) -> Vec<u8> {
        [self.due_root.as_slice(), key.as_bytes()].concat()
    }

    /// `P/a/K`: K's count of writes that appended history (the key's etcd version).
    pub fn appends_key(&self, key: &str) -> Vec<u8> {
        [self.appends_root.as_slice(), key.as_bytes()].concat()
    }

    /// The baton key of a due-index entry; `None` for a key not under `P/u/` or not UTF-8.
    pub fn key_of_due(&self, etcd_key: &[u8]) -> Option<String> {
        let key = etcd_key.strip_prefix(self.due_root.as_slice())?;
        String::from_utf8(key.to_vec()).ok()
    }

    /// `P/h/K\x00`: every history key of K starts with it.
    fn history_start(&self, key: &str) -> Vec<u8> {
        [self.history_root.as_slice(), key.as_bytes(), b"\x00"].concat()
    }

    /// `P/h/K\x00SEQ`.
    pub fn history_key(&self, key: &str, seq: u64) -> Vec<u8> {
        let mut history_key = self.history_start(key);
        history_key.extend_from_slice(format!("{seq:0SEQ_DIGITS$}").as_bytes());
        history_key
    }

    /// `P/h/K\x01`: just past every history key of K.
    pub fn history_end(&self, key: &str) -> Vec<u8> {
        [self.history_root.as_slice(), key.as_bytes(), b"\x01"].concat()
    }

    /// `P/q/K\x00ID`: the arrival of K put under the name `id`.
    pub fn arrival_key(&self, key: &str, id: &str) -> Vec<u8> {
        [self.arrivals_start(key).as_slice(), id.as_bytes()].concat()
    }

    /// `P/q/K\x00`: every arrival key of K starts with it.
    pub fn arrivals_start(&self, key: &str) -> Vec<u8> {
        [self.arrivals_root.as_slice(), key.as_bytes(), b"\x00"].concat()
    }

    /// `P/q/K`: K's arrivals stamp, just before every arrival key of K and in no other key's
    /// arrivals range or watch (an arrival key holds a NUL right after its key, which no baton
    /// key holds).
    pub fn arrivals_stamp(&self, key: &str) -> Vec<u8> {
        [self.arrivals_root.as_slice(), key.as_bytes()].concat()
    }

    /// `P/q/K\x01`: just past every arrival key of K (not those of `K/x` or `Kx`).
    pub fn arrivals_end(&self, key: &str) -> Vec<u8> {
        [self.arrivals_root.as_slice(), key.as_bytes(), b"\x01"].concat()
    }

    /// `P/r/K\x00NAME`: record NAME of K.
    pub fn record_key(&self, key: &str, name: &str) -> Vec<u8> {
        [
            self.records_root.as_slice(),
            key.as_bytes(),
            b"\x00",
            name.as_bytes(),
        ]
        .concat()
    }

    /// The seq of one of K's history keys; `None` for a key baton did not write.
    pub fn seq_of_history_key(&self, key: &str, etcd_key: &[u8]) -> Option<u64> {
        let digits = etcd_key.strip_prefix(self.history_start(key).as_slice())?;
        if digits.len() != SEQ_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_their_inverses() {
        let layout = Layout::new("/baton");
        assert_eq!(layout.doc_key("deploy/prod"), b"/baton/d/deploy/prod");
        assert_eq!(
            layout.key_of_doc(b"/baton/d/deploy/prod").as_deref(),
            Some("deploy/prod")
        );
        assert_eq!(layout.key_of_doc(b"/baton/h/deploy/prod"), None);
        assert_eq!(layout.appends_key("deploy/prod"), b"/baton/a/deploy/prod");
        let history_key = layout.history_key("a/b", 42);
        assert_eq!(history_key, b"/baton/h/a/b\x0000000000000000000042");
        assert_eq!(layout.seq_of_history_key("a/b", &history_key), Some(42));
        assert_eq!(layout.seq_of_history_key("a", &history_key), None);
        let largest = layout.history_key("k", u64::MAX);
        assert_eq!(layout.seq_of_history_key("k", &largest), Some(u64::MAX));
    }

    /// Records are apart from documents and history, and from each other's keys: `a`'s record
    /// `b/c` is not `a/b`'s record `c`, and no record key is a document or history key.
    #[test]
    fn record_keys_are_their_own() {
        let layout = Layout::new("/baton");
        assert_eq!(
            layout.record_key("deploy/prod", "params/j-1"),
            b"/baton/r/deploy/prod\x00params/j-1"
        );
        let pairs = [
            ("a", "b/c"),
            ("a/b", "c"),
            ("a", "b"),
            ("ab", "b"),
            ("a b", "b"),
            ("ä/%*", "b"),
        ];
        let record_keys: Vec<Vec<u8>> = pairs
            .iter()
            .map(|(key, name)| layout.record_key(key, name))
            .collect();
        for (i, record_key) in record_keys.iter().enumerate() {
            assert!(
                record_keys[i + 1..].iter().all(|other| other != record_key),
                "{:?}",
                pairs[i]
            );
            assert_eq!(layout.key_of_doc(record_key), None);
            for key in ["a", "a/b", "ab"] {
                assert_eq!(layout.seq_of_history_key(key, record_key), None);
                assert!(!record_key.starts_with(&layout.doc_key(key)));
            }
        }
    }

    /// A key's arrivals stamp is in the range its arrivals watch covers and in no read of
    /// arrivals, its own or another key's (`a`'s stamp is not among `a/b`'s or `ab`'s arrivals,
    /// nor theirs among `a`'s).
    #[test]
    fn the_arrivals_stamp_is_watched_and_never_read() {
        let layout = Layout::new("/p");
        assert_eq!(layout.arrivals_stamp("a/b"), b"/p/q/a/b");
        let read = |key: &str, etcd_key: &[u8]| {
            layout.arrivals_start(key).as_slice() <= etcd_key
                && etcd_key < layout.arrivals_end(key).as_slice()
        };
        let watched = |key: &str, etcd_key: &[u8]| {
            layout.arrivals_stamp(key).as_slice() <= etcd_key
                && etcd_key < layout.arrivals_end(key).as_slice()
        };
        let keys = ["a", "a/b", "ab", "a b", "a/", "é", "éé"];
        for key in keys {
            let stamp = layout.arrivals_stamp(key);
            assert!(watched(key, &stamp) && !read(key, &stamp), "{key}");
            assert!(watched(key, &layout.arrival_key(key, "s0")), "{key}");
            for other in keys.into_iter().filter(|other| *other != key) {
                assert!(!watched(other, &stamp), "{key}'s stamp in {other}'s watch");
                let arrival = layout.arrival_key(other, "s0");
                assert!(
                    !watched(key, &arrival),
                    "{other}'s arrival in {key}'s watch"
                );
            }
        }
    }

    /// A key that is a prefix of another (`a` of `a/b`, `ab`, `a b`) owns a history range that
    /// holds none of the other's entries, and seqs sort as numbers.
    #[test]
    fn history_ranges_never_overlap() {
        let layout = Layout::new("/p");
        let within = |key: &str, etcd_key: &[u8]| {
            layout.history_key(key, 0).as_slice() <= etcd_key
                && etcd_key < layout.history_end(key).as_slice()
        };
        for (key, other) in [
            ("a", "a/b"),
            ("a", "ab"),
            ("a", "a b"),
            ("a/", "a//"),
            ("é", "éé"),
        ] {
            for seq in [0, 1, 9, 10, u64::MAX] {
                assert!(within(key, &layout.history_key(key, seq)), "{key} {seq}");
                assert!(
                    !within(key, &layout.history_key(other, seq)),
                    "{key} {other}"
                );
                assert!(
                    !within(other, &layout.history_key(key, seq)),
                    "{other} {key}"
                );
            }
        }
        let mut seqs = [3u64, 10, 2, 100, 1, u64::MAX, 65_536];
        let mut keys: Vec<Vec<u8>> = seqs
            .iter()
            .map(|seq| layout.history_key("k", *seq))
            .collect();
        keys.sort();
        seqs.sort();
        let sorted: Vec<u64> = keys
            .iter()
            .map(|key| layout.seq_of_history_key("k", key).unwrap_or(0))
            .collect();
        assert_eq!(sorted, seqs);
    }
}
