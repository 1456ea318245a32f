//! `list` by prefix, and keys of every shape through every operation.

use super::support::{entries, ok, written};
use super::KEY_MAX_BYTES;
use crate::{Store, Version};

/// The names written under the listing check's base: prefixes of one another, SQL and glob
/// wildcards, quotes, multi-byte characters and the edges of UTF-8's ranges.
const LISTED_NAMES: [&str; 20] = [
    "a",
    "ab",
    "abc",
    "a/b",
    "a b",
    "quote'\"",
    "100%",
    "100%/x",
    "1000",
    "under_score",
    "underXscore",
    "star*",
    "starry",
    "déploiement/生产",
    "déploiement/生产/2",
    "déploiement/staging",
    "edge\u{D7FF}x",
    "edge\u{E000}",
    "max\u{10FFFF}",
    "maxy",
];

/// The prefixes (after the base) the listing check lists, each against [`LISTED_NAMES`].
const LIST_PREFIXES: [&str; 19] = [
    "",
    "a",
    "ab",
    "a/",
    "a ",
    "quote'",
    "quote'\"",
    "100%",
    "100",
    "under_",
    "under",
    "star*",
    "star",
    "déploiement/",
    "déploiement/生产",
    "déploiement/生",
    "edge\u{D7FF}",
    "max\u{10FFFF}",
    "nothing-here",
];

/// `list` returns exactly the keys with a document that start with the prefix, byte-wise and
/// sorted, whatever characters the keys hold; `%`, `_` and `*` are not wildcards.
pub async fn list_by_prefix(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}list_by_prefix/");
    for name in LISTED_NAMES {
        let key = format!("{base}{name}");
        written(store.cas(&key, None, name.as_bytes(), &[]).await, &key);
    }
    // A key watched or refused but never written has no document and must not be listed.
    let never_written = format!("{base}a-never-written");
    let _ = ok("watch", store.watch(&never_written).await);
    let _ = ok(
        "refused cas",
        store
            .cas(&never_written, Some(&Version("1".to_owned())), b"x", &[])
            .await,
    );

    let check = |listed: Vec<String>, sub_prefix: &str| {
        let wanted = format!("{base}{sub_prefix}");
        let mut expected: Vec<String> = LISTED_NAMES
            .iter()
            .map(|name| format!("{base}{name}"))
            .filter(|key| key.starts_with(&wanted))
            .collect();
        expected.sort();
        assert_eq!(listed, expected, "list({wanted:?})");
    };
    for sub_prefix in LIST_PREFIXES {
        check(
            ok("list", store.list(&format!("{base}{sub_prefix}")).await),
            sub_prefix,
        );
    }
}

/// Keys with unusual characters, and one of the longest allowed length, round-trip exactly
/// through `cas`, `load`, `list` and `history`.
pub async fn keys_round_trip(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}keys_round_trip/");
    let mut keys: Vec<String> = [
        "plain",
        "with/slashes/",
        "//double//",
        "with space",
        " leading and trailing ",
        "quotes'\"`",
        "sql'); DROP TABLE baton_docs; --",
        "100%_*?[]{}\\",
        "déploiement/生产",
        "emoji 🦀",
        "dots/../..",
        "colon:semi;comma,",
        "+plus=equals&amp#hash",
    ]
    .iter()
    .map(|name| format!("{base}{name}"))
    .collect();
    // The longest allowed key, in multi-byte characters where they fit.
    let mut longest = base.clone();
    while longest.len() + 'é'.len_utf8() <= KEY_MAX_BYTES {
        longest.push('é');
    }
    while longest.len() < KEY_MAX_BYTES {
        longest.push('e');
    }
    keys.push(longest);

    for key in &keys {
        let entry = format!("entry of {key}").into_bytes();
        written(
            store
                .cas(key, None, key.as_bytes(), std::slice::from_ref(&entry))
                .await,
            key,
        );
        let loaded = ok("load", store.load(key).await);
        assert_eq!(
            loaded.map(|loaded| loaded.bytes),
            Some(key.as_bytes().to_vec()),
            "{key:?} must load what was written to it"
        );
        assert_eq!(
            entries(&ok("history", store.history(key, 0, 10).await)),
            vec![entry],
            "{key:?} must keep its own history"
        );
        assert!(
            ok("list", store.list(key).await).contains(key),
            "{key:?} must be listed under itself"
        );
    }
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(
        ok("list", store.list(&base).await),
        expected,
        "every key must be listed exactly as written"
    );
}
