//! Records beside a key's document: round trips, names, keys kept apart, and what is refused.

use super::support::{entries, ok, written};
use super::KEY_MAX_BYTES;
use crate::{Store, Versioned, RECORD_MAX_BYTES, RECORD_NAME_MAX_BYTES};

/// A record reads back exactly as written: every byte value, an empty one, and one of exactly
/// [`RECORD_MAX_BYTES`].
pub async fn record_round_trip(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_round_trip/k");
    let every_byte: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let largest: Vec<u8> = (0..RECORD_MAX_BYTES)
        .map(|i| (i % 251) as u8) // a prime period, so no run of bytes repeats a page
        .collect();
    for (name, bytes) in [
        ("every-byte", every_byte),
        ("empty", Vec::new()),
        ("largest", largest),
        (
            "json",
            br#"{"argv":["make","-j8"],"env":{"A":"\u00e9"}}"#.to_vec(),
        ),
    ] {
        ok("put_record", store.put_record(&key, name, &bytes).await);
        let read = ok("get_record", store.get_record(&key, name).await);
        assert!(
            read.as_deref() == Some(bytes.as_slice()),
            "record {name:?} of {} bytes must read back exactly (got {:?} bytes)",
            bytes.len(),
            read.map(|read| read.len())
        );
    }
}

/// A record never written reads as `None`: on a key never written, on a key with a document,
/// and beside a record of another name.
pub async fn record_absent(store: &dyn Store, prefix: &str) {
    let never_written = format!("{prefix}record_absent/never-written");
    assert_eq!(
        ok(
            "get_record",
            store.get_record(&never_written, "params/j-1").await
        ),
        None,
        "a record of a key never written"
    );

    let with_document = format!("{prefix}record_absent/with-document");
    written(
        store
            .cas(&with_document, None, b"doc", &[b"h".to_vec()])
            .await,
        "create",
    );
    assert_eq!(
        ok(
            "get_record",
            store.get_record(&with_document, "params/j-1").await
        ),
        None,
        "a key's document is not one of its records"
    );

    let with_records = format!("{prefix}record_absent/with-records");
    ok(
        "put_record",
        store.put_record(&with_records, "params/j-1", b"p").await,
    );
    for other in [
        "params/j-2",
        "params",
        "params/j-1/x",
        "params/j-",
        "run/j-1",
    ] {
        assert_eq!(
            ok("get_record", store.get_record(&with_records, other).await),
            None,
            "{other:?} was never written beside params/j-1"
        );
    }
}

/// A second write of a record replaces it, whether longer or shorter, and writing the same
/// bytes again (a retry) leaves them as they are.
pub async fn record_replaced(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_replaced/k");
    let name = "run/j-0123abcd/3";
    for bytes in [
        b"first".to_vec(),
        vec![7; 4096],
        b"short".to_vec(),
        b"short".to_vec(),
        Vec::new(),
        b"last".to_vec(),
    ] {
        ok("put_record", store.put_record(&key, name, &bytes).await);
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(bytes.clone()),
            "the last write of a record must be what reads back ({} bytes)",
            bytes.len()
        );
    }
}

/// Records of different keys are apart, even under the same name, and even where one key
/// continues another (`a`, `a/b`, `a b`) or where a key and a name could be read as another key
/// and name (`a` + `b/c`, `a/b` + `c`).
pub async fn records_of_keys_apart(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}records_of_keys_apart/");
    let pairs = [
        ("a", "params/j-1"),
        ("a/b", "params/j-1"),
        ("a b", "params/j-1"),
        ("ab", "params/j-1"),
        ("ä/%*", "params/j-1"),
        ("quote'\"`", "params/j-1"),
        ("a", "b/c"),
        ("a/b", "c"),
        ("a/b/c", "params/j-1"),
    ];
    let value = |key: &str, name: &str| format!("{name} of {key}").into_bytes();
    for (key, name) in pairs {
        let key = format!("{base}{key}");
        ok(
            "put_record",
            store.put_record(&key, name, &value(&key, name)).await,
        );
    }
    for (key, name) in pairs {
        let key = format!("{base}{key}");
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(value(&key, name)),
            "record {name:?} of {key:?} must be its own"
        );
    }
    for (key, name) in [("a/b", "b/c"), ("a", "c"), ("a/b/c", "c"), ("a/", "b/c")] {
        let key = format!("{base}{key}");
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            None,
            "{key:?} has no record {name:?}: another key's must not show through"
        );
    }
}

/// Names with `/`, `.`, `-` and `_`, and the longest name, work, also on the longest key.
pub async fn record_names(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}record_names/k");
    let longest_name: String = "abcdefghij/.-_"
        .chars()
        .cycle()
        .take(RECORD_NAME_MAX_BYTES - 1)
        .chain(std::iter::once('z'))
        .collect();
    let names = [
        "params/j-0123abcd",
        "run/j-0123abcd/3",
        "run/j-0123abcd/30",
        "a.b",
        ".x",
        "x.",
        "...",
        "..x/x..",
        "a/b/c/d/e/f",
        "UPPER_lower-09",
        "-",
        "_",
        longest_name.as_str(),
    ];
    for name in names {
        ok(
            "put_record",
            store.put_record(&key, name, name.as_bytes()).await,
        );
    }
    for name in names {
        assert_eq!(
            ok("get_record", store.get_record(&key, name).await),
            Some(name.as_bytes().to_vec()),
            "record {name:?} must read back"
        );
    }

    // The longest key, in multi-byte characters, with the longest name.
    let mut longest_key = format!("{prefix}record_names/");
    while longest_key.len() + 'é'.len_utf8() <= KEY_MAX_BYTES {
        longest_key.push('é');
    }
    while longest_key.len() < KEY_MAX_BYTES {
        longest_key.push('e');
    }
    for name in ["n", longest_name.as_str()] {
        let bytes = format!("{name} of the longest key").into_bytes();
        ok(
            "put_record",
            store.put_record(&longest_key, name, &bytes).await,
        );
        assert_eq!(
            ok("get_record", store.get_record(&longest_key, name).await),
            Some(bytes),
            "record {name:?} of a {KEY_MAX_BYTES}-byte key must read back"
        );
    }
}

/// Records stay beside a key's document: a key with records only has no document, no history
/// and is not listed; a key's document keeps its bytes and version (a CAS naming it still
/// writes), its history and its place in `list`, however its records change.
pub async fn records_apart_from_documents(store: &dyn Store, prefix: &str) {
    let base = format!("{prefix}records_apart_from_documents/");
    let records_only = format!("{base}records-only");
    check_records_only_make_no_document(store, &records_only).await;
    let with_document = format!("{base}with-document");
    check_records_leave_the_document_alone(store, &with_document).await;

    for list_prefix in [
        base.clone(),
        records_only.clone(),
        format!("{base}r"),
        format!("{base}w"),
    ] {
        let listed = ok("list", store.list(&list_prefix).await);
        assert!(
            !listed.contains(&records_only),
            "list({list_prefix:?}) must not show a key with records only"
        );
        assert_eq!(
            listed.iter().filter(|key| **key == with_document).count(),
            usize::from(with_document.starts_with(&list_prefix)),
            "list({list_prefix:?}) must show a key with a document once, records or not"
        );
    }
    assert_eq!(
        ok("list", store.list(&base).await),
        vec![with_document],
        "list must show documents only"
    );
}

/// Writing records to `key` (never written otherwise) gives it no document and no history.
async fn check_records_only_make_no_document(store: &dyn Store, key: &str) {
    ok(
        "put_record",
        store.put_record(key, "params/j-1", b"p").await,
    );
    ok("put_record", store.put_record(key, "run/j-1/1", b"r").await);
    assert_eq!(
        ok("load", store.load(key).await),
        None,
        "a key with records only has no document"
    );
    assert!(ok("history", store.history(key, 0, 10).await).is_empty());
    assert!(ok("history_tail", store.history_tail(key, 10).await).is_empty());
}

/// On `key`, given a document, records and CASes leave each other alone: a record write keeps
/// the document and its version, a CAS keeps the records, and history holds only CAS entries.
async fn check_records_leave_the_document_alone(store: &dyn Store, key: &str) {
    let version = written(
        store.cas(key, None, b"doc", &[b"h1".to_vec()]).await,
        "create",
    );
    ok(
        "put_record",
        store.put_record(key, "params/j-1", b"p").await,
    );
    ok(
        "put_record",
        store.put_record(key, "params/j-1", b"p2").await,
    );
    assert_eq!(
        ok("load", store.load(key).await),
        Some(Versioned {
            version: version.clone(),
            bytes: b"doc".to_vec(),
            arrivals: Vec::new(),
        }),
        "writing a record must not change the key's document or its version"
    );
    written(
        store
            .cas(key, Some(&version), b"doc2", &[b"h2".to_vec()])
            .await,
        "a CAS naming the version from before the records were written",
    );
    assert_eq!(
        entries(&ok("history", store.history(key, 0, 10).await)),
        vec![b"h1".to_vec(), b"h2".to_vec()],
        "records must not show in the key's history"
    );
    assert_eq!(
        ok("get_record", store.get_record(key, "params/j-1").await),
        Some(b"p2".to_vec()),
        "a CAS must not change the key's records"
    );
}

/// A bad record name or an oversize record is refused with an error (never a panic), and
/// nothing is written.
pub async fn bad_records_refused(store: &dyn Store, prefix: &str) {
    let key = format!("{prefix}bad_records_refused/k");
    let too_long = "n".repeat(RECORD_NAME_MAX_BYTES + 1);
    for bad in [
        "",
        too_long.as_str(),
        "with space",
        "é",
        "a\nb",
        "a:b",
        "%2F",
        "/leading",
        "trailing/",
        "double//slash",
        ".",
        "..",
        "a/../b",
    ] {
        assert!(
            store.put_record(&key, bad, b"x").await.is_err(),
            "put_record must refuse the name {bad:?}"
        );
        assert!(
            store.get_record(&key, bad).await.is_err(),
            "get_record must refuse the name {bad:?}"
        );
    }

    let oversize = vec![0u8; RECORD_MAX_BYTES + 1];
    assert!(
        store.put_record(&key, "oversize", &oversize).await.is_err(),
        "put_record must refuse {} bytes (at most {RECORD_MAX_BYTES})",
        oversize.len()
    );
    assert_eq!(
        ok("get_record", store.get_record(&key, "oversize").await),
        None,
        "a refused record must not be written"
    );
    ok(
        "put_record",
        store.put_record(&key, "oversize", b"small").await,
    );
    assert!(
        store.put_record(&key, "oversize", &oversize).await.is_err(),
        "put_record must refuse an oversize replacement"
    );
    assert_eq!(
        ok("get_record", store.get_record(&key, "oversize").await),
        Some(b"small".to_vec()),
        "a refused replacement must leave the record as it was"
    );
}
