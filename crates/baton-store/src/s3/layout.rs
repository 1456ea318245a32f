//! Where baton's hot records, history and records live among a bucket's objects.
//!
//! Under the URL's prefix `P`, with baton's key `K` escaped to `E(K)`:
//!
//! ```text
//! P/hot/E(K)                 the hot record of K (deferred::Hot::encode: document, generation,
//!                            pending history)
//! P/history/E(K)/SEQ         one stored history entry of K (the object's body is the entry);
//!                            SEQ is the entry's seq as 20 decimal digits
//! P/records/E(K)/NAME        record NAME of K (the object's body is the record)
//! P/records/~/HEX(K)/NAME    the same, when the name above would pass S3's 1,024 bytes
//! ```
//!
//! `E` keeps ASCII letters, digits, `-` and `_`, and writes every other byte of the key's UTF-8
//! as `%XX` (upper-case hex). So:
//!
//! - names round-trip exactly: `%` only ever starts an escape, and decoding refuses anything `E`
//!   cannot produce;
//! - `E` escapes byte by byte, so `E(K1 + K2) = E(K1) + E(K2)`, and because an escape is always
//!   three characters starting with `%`, `E(P)` is a prefix of `E(K)` exactly when `P` is a prefix
//!   of `K`: `list(prefix)` is one LIST of `P/hot/E(prefix)`;
//! - `E(K)` never holds `/`, so `P/history/E(K)/` holds K's entries only: K's neighbour `K/x`
//!   continues `E(K)` with `%2F`, never with `/`; and `E(K)` is never an empty, `.` or `..`
//!   path segment, which object stores and HTTP paths treat specially;
//! - twenty digits hold every u64, so the byte order of a key's history objects (the order S3
//!   lists them in, and `start-after` follows) is the order of their seqs.
//!
//! A key of 256 bytes escapes to at most 768 characters; S3 allows 1,024 bytes per object name,
//! which leaves [`PREFIX_MAX_BYTES`] for the prefix.
//!
//! Records are never listed, so their names only need to be exact and apart: `E(K)` holds no
//! `/`, so `P/records/E(K)/` holds K's records only, and NAME (checked by
//! [`crate::check_record_name`]: `A-Z a-z 0-9 _ . / -`, no empty, `.` or `..` segment) is a
//! valid rest of an object name as it is. A long prefix, a long key of escaped bytes and a long
//! name together can pass 1,024 bytes (200 + 9 + 768 + 1 + 200); such a record goes under
//! `P/records/~/` with K in hexadecimal instead (at most 512 characters, so at most 924 bytes
//! in all). Which name a record gets depends only on the prefix, K and NAME, so every writer
//! and reader agrees; `E(K)` is never `~` (`E` escapes it), so the two forms never meet.

/// The longest prefix a URL may give: 768 escaped key bytes, `/history/`, `/`, 20 digits and
/// this fit in S3's 1,024-byte object names.
pub const PREFIX_MAX_BYTES: usize = 200;

/// The digits of a seq in a history object's name: enough for `u64::MAX`.
const SEQ_DIGITS: usize = 20;

/// S3's longest object name, in bytes.
pub const OBJECT_NAME_MAX_BYTES: usize = 1024;

/// The segment under `P/records/` of records whose key is written in hexadecimal.
const HEX_RECORDS: &str = "~";

const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// The object names of one store (one prefix).
#[derive(Clone, Debug)]
pub struct Layout {
    /// `P/hot/` (`hot/` for an empty prefix).
    hot_root: String,
    /// `P/history/`.
    history_root: String,
    /// `P/records/`.
    records_root: String,
    /// `P/init-probe`.
    probe: String,
}

impl Layout {
    /// The layout under `prefix` (no leading or trailing `/`; empty for the bucket's root).
    pub fn new(prefix: &str) -> Layout {
        let root = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Layout {
            hot_root: format!("{root}hot/"),
            history_root: format!("{root}history/"),
            records_root: format!("{root}records/"),
            probe: format!("{root}init-probe"),
        }
    }

    /// `P/init-probe`: a name outside the hot records and the history, never written, which
    /// `init` reads to check that reading is allowed, and which `clock` asks for (a HEAD) when
    /// it needs a server's `Date` before any other request was made.
    pub fn probe(&self) -> &str {
        &self.probe
    }

    /// `P/hot/E(K)`.
    pub fn hot(&self, key: &str) -> String {
        format!("{}{}", self.hot_root, escape(key))
    }

    /// `P/hot/E(prefix)`: the LIST prefix of the hot records of keys starting with `prefix`.
    pub fn hot_prefix(&self, prefix: &str) -> String {
        self.hot(prefix)
    }

    /// The key of a hot record's object name; `None` for a name baton did not write.
    pub fn key_of_hot(&self, name: &str) -> Option<String> {
        unescape(name.strip_prefix(self.hot_root.as_str())?)
    }

    /// `P/history/`: the prefix of every history object, which a lifecycle rule expires.
    pub fn history_root(&self) -> &str {
        &self.history_root
    }

    /// `P/history/E(K)/`: every history object of K starts with it, and nothing else does.
    pub fn history_prefix(&self, key: &str) -> String {
        format!("{}{}/", self.history_root, escape(key))
    }

    /// `P/history/E(K)/SEQ`.
    pub fn history(&self, key: &str, seq: u64) -> String {
        format!("{}{seq:0SEQ_DIGITS$}", self.history_prefix(key))
    }

    /// Record `name` of `key`: `P/records/E(K)/NAME`, or `P/records/~/HEX(K)/NAME` when that
    /// would be longer than S3 allows. `name` must have passed [`crate::check_record_name`].
    pub fn record(&self, key: &str, name: &str) -> String {
        let escaped = format!("{}{}/{name}", self.records_root, escape(key));
        if escaped.len() <= OBJECT_NAME_MAX_BYTES {
            return escaped;
        }
        format!("{}{HEX_RECORDS}/{}/{name}", self.records_root, hex(key))
    }

    /// The seq of one of K's history objects, given K's [`Layout::history_prefix`]; `None` for a
    /// name baton did not write.
    pub fn seq_of_history(history_prefix: &str, name: &str) -> Option<u64> {
        let digits = name.strip_prefix(history_prefix)?;
        if digits.len() != SEQ_DIGITS || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }
}

/// Whether `E` keeps `byte` as it is.
fn is_kept(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// The key's UTF-8 bytes in upper-case hexadecimal: two characters a byte, never `/`.
fn hex(key: &str) -> String {
    let mut hex = String::with_capacity(2 * key.len());
    for byte in key.bytes() {
        hex.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

/// `E(key)`: see the module's documentation.
pub fn escape(key: &str) -> String {
    let mut escaped = String::with_capacity(key.len());
    for byte in key.bytes() {
        if is_kept(byte) {
            escaped.push(char::from(byte));
        } else {
            escaped.push('%');
            escaped.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            escaped.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
        }
    }
    escaped
}

/// The key `escaped` names; `None` unless `escaped` is exactly what [`escape`] gives for some
/// UTF-8 key (upper-case hex only, no byte escaped that `E` keeps).
pub fn unescape(escaped: &str) -> Option<String> {
    let hex = |digit: u8| match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    };
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if is_kept(first) {
            bytes.push(first);
            rest = tail;
            continue;
        }
        let [b'%', high, low, tail @ ..] = rest else {
            return None;
        };
        let byte = (hex(*high)? << 4) | hex(*low)?;
        if is_kept(byte) {
            return None;
        }
        bytes.push(byte);
        rest = tail;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &[&str] = &[
        "plain",
        "deploy/production",
        "//double//",
        "dots/../..",
        ".",
        "..",
        "with space",
        "quotes'\"`",
        "100%_*?[]{}\\",
        "déploiement/生产",
        "emoji 🦀",
        "max\u{10FFFF}",
        "+plus=equals&amp#hash",
    ];

    #[test]
    fn names_round_trip() {
        let layout = Layout::new("baton/ci");
        for key in KEYS {
            let name = layout.hot(key);
            assert!(name.starts_with("baton/ci/hot/"), "{name}");
            assert_eq!(layout.key_of_hot(&name).as_deref(), Some(*key), "{name}");
            let escaped = escape(key);
            assert!(!escaped.contains('/') && escaped != "." && escaped != "..");
            assert_eq!(unescape(&escaped).as_deref(), Some(*key));
        }
        assert_eq!(escape("deploy/prod 1"), "deploy%2Fprod%201");
        assert_eq!(Layout::new("").hot("k"), "hot/k");
    }

    #[test]
    fn only_what_escape_gives_unescapes() {
        for bad in ["%", "%2", "%2f", "%41", "a b", "a/b", "%ZZ", "%FF", "é"] {
            assert_eq!(unescape(bad), None, "{bad}");
        }
    }

    /// `E(P)` is a prefix of `E(K)` exactly when `P` is a prefix of `K`, byte-wise.
    #[test]
    fn prefixes_stay_prefixes() {
        let candidates = [
            "a", "a/", "a/b", "ab", "a b", "a%", "a%2F", "é", "éé", "e", "%", "",
        ];
        for key in candidates.iter().filter(|key| !key.is_empty()) {
            for prefix in candidates {
                assert_eq!(
                    escape(key).starts_with(&escape(prefix)),
                    key.starts_with(prefix),
                    "key {key:?} prefix {prefix:?}"
                );
            }
        }
    }

    /// A key's history prefix holds none of another key's entries (`a` and `a/b`, `ab`, `a b`),
    /// and seqs sort as numbers.
    #[test]
    fn history_never_mixes_and_sorts_by_seq() {
        let layout = Layout::new("p");
        for (key, other) in [("a", "a/b"), ("a", "ab"), ("a", "a b"), ("a/", "a//")] {
            let prefix = layout.history_prefix(key);
            for seq in [0, 1, 9, 10, u64::MAX] {
                let own = layout.history(key, seq);
                assert_eq!(Layout::seq_of_history(&prefix, &own), Some(seq));
                let theirs = layout.history(other, seq);
                assert!(!theirs.starts_with(&prefix), "{theirs} under {prefix}");
                assert_eq!(Layout::seq_of_history(&prefix, &theirs), None);
            }
        }
        let mut seqs = [3u64, 10, 2, 100, 1, u64::MAX, 65_536];
        let mut names: Vec<String> = seqs.iter().map(|seq| layout.history("k", *seq)).collect();
        names.sort();
        seqs.sort();
        let prefix = layout.history_prefix("k");
        let sorted: Vec<Option<u64>> = names
            .iter()
            .map(|name| Layout::seq_of_history(&prefix, name))
            .collect();
        assert_eq!(sorted, seqs.map(Some));
        assert_eq!(
            Layout::seq_of_history(&prefix, &format!("{prefix}12")),
            None
        );
    }

    /// Records are apart from hot records, history and each other, and every record's name fits
    /// in an object name: the escaped form where it fits, the hexadecimal one where it does not.
    #[test]
    fn record_names_are_their_own_and_fit() {
        let layout = Layout::new("p");
        assert_eq!(
            layout.record("deploy/prod", "params/j-1"),
            "p/records/deploy%2Fprod/params/j-1"
        );
        let pairs = [
            ("a", "b/c"),
            ("a/b", "c"),
            ("a", "b"),
            ("ab", "b"),
            ("a b", "b"),
            ("ä/%*", "b"),
            ("~", "b"),
        ];
        let names: Vec<String> = pairs
            .iter()
            .map(|(key, name)| layout.record(key, name))
            .collect();
        for (i, name) in names.iter().enumerate() {
            assert!(names[i + 1..].iter().all(|other| other != name), "{name}");
            assert_eq!(layout.key_of_hot(name), None);
            assert!(name.starts_with("p/records/") && !name.starts_with("p/records/~/"));
        }

        let prefix = "p".repeat(PREFIX_MAX_BYTES);
        let layout = Layout::new(&prefix);
        let longest_name = "n".repeat(crate::RECORD_NAME_MAX_BYTES);
        let longest_key = "é".repeat(128);
        let long = layout.record(&longest_key, &longest_name);
        assert!(long.len() <= OBJECT_NAME_MAX_BYTES, "{}", long.len());
        assert_eq!(
            long,
            format!("{prefix}/records/~/{}/{longest_name}", "C3A9".repeat(128))
        );
        // The same key with a short name keeps the readable form.
        let short = layout.record(&longest_key, "n");
        assert_eq!(
            short,
            format!("{prefix}/records/{}/n", escape(&longest_key))
        );
        assert!(short.len() <= OBJECT_NAME_MAX_BYTES);
    }

    #[test]
    fn the_longest_key_fits_in_an_object_name() {
        let prefix = "p".repeat(PREFIX_MAX_BYTES);
        let key = "é".repeat(128);
        let name = Layout::new(&prefix).history(&key, u64::MAX);
        assert!(name.len() <= 1024, "{}", name.len());
    }
}
