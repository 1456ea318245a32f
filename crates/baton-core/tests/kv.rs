//! Shared values: conditions, fences, expiry, deletes and retried writes.
#![allow(clippy::unwrap_used)]

use baton_core::kv::{self, check_write, Condition, Refused, ValueDoc, Write};

fn set(id: &str, value: &str) -> Write {
    Write {
        id: id.into(),
        value: Some(value.into()),
        json: false,
        condition: Condition::Any,
        ttl_ms: None,
        fence: None,
        context: "ci #1".into(),
        seen_version: None,
    }
}

fn del(id: &str) -> Write {
    Write {
        value: None,
        ..set(id, "")
    }
}

fn apply(doc: Option<&ValueDoc>, write: &Write, wall: u64) -> Result<ValueDoc, Refused> {
    let next = kv::write(doc, write, wall)?;
    // Every written document survives its encoding.
    assert_eq!(kv::decode(&kv::encode(&next)).as_ref(), Ok(&next));
    Ok(next)
}

#[test]
fn versions_count_every_write_and_are_never_reused_after_a_delete() {
    let v1 = apply(None, &set("a", "1"), 10).unwrap();
    assert_eq!(v1.version, 1);
    let v2 = apply(Some(&v1), &set("b", "2"), 11).unwrap();
    assert_eq!(v2.entry(11).map(|e| (e.value, e.version)), Some(("2", 2)));
    let gone = apply(Some(&v2), &del("c"), 12).unwrap();
    assert_eq!(gone.entry(12), None);
    assert_eq!(gone.version, 3);
    let back = apply(Some(&gone), &set("d", "4"), 13).unwrap();
    assert_eq!(back.version, 4);
}

#[test]
fn if_version_holds_only_for_the_live_version() {
    let v1 = apply(None, &set("a", "1"), 10).unwrap();
    let stale = Write {
        condition: Condition::Version(7),
        ..set("b", "x")
    };
    assert_eq!(
        apply(Some(&v1), &stale, 11),
        Err(Refused::Lost {
            condition: Condition::Version(7),
            current: Some(1)
        })
    );
    let fresh = Write {
        condition: Condition::Version(1),
        ..set("b", "x")
    };
    assert_eq!(apply(Some(&v1), &fresh, 11).unwrap().version, 2);
    // Nothing to match when there is no value.
    assert!(matches!(
        apply(None, &fresh, 11),
        Err(Refused::Lost { current: None, .. })
    ));
}

#[test]
fn if_absent_holds_when_never_written_deleted_or_expired() {
    let absent = Write {
        condition: Condition::Absent,
        ..set("a", "1")
    };
    let v1 = apply(None, &absent, 10).unwrap();
    assert!(matches!(
        apply(Some(&v1), &absent, 11),
        Err(Refused::Lost {
            current: Some(1),
            ..
        })
    ));
    let gone = apply(Some(&v1), &del("b"), 12).unwrap();
    assert_eq!(apply(Some(&gone), &absent, 13).unwrap().version, 3);
    let short = Write {
        ttl_ms: Some(100),
        ..set("c", "1")
    };
    let expiring = apply(None, &short, 1000).unwrap();
    assert!(apply(Some(&expiring), &absent, 1099).is_err());
    assert_eq!(apply(Some(&expiring), &absent, 1100).unwrap().version, 2);
}

#[test]
fn a_value_expires_at_its_ttl_on_the_readers_wall_clock() {
    let write = Write {
        ttl_ms: Some(5000),
        ..set("a", "1")
    };
    let doc = apply(None, &write, 1000).unwrap();
    assert_eq!(doc.expires_wall_ms, Some(6000));
    assert!(doc.entry(5999).is_some());
    assert_eq!(doc.entry(6000), None);
    // A later write without a TTL lives for ever.
    let doc = apply(Some(&doc), &set("b", "2"), 2000).unwrap();
    assert_eq!(doc.entry(u64::MAX).map(|e| e.value), Some("2"));
}

#[test]
fn a_lower_fence_is_refused_and_the_highest_is_kept_through_deletes() {
    let fenced = |id: &str, fence: u64| Write {
        fence: Some(fence),
        ..set(id, id)
    };
    let doc = apply(None, &fenced("a", 10), 1).unwrap();
    let doc = apply(Some(&doc), &fenced("b", 12), 2).unwrap();
    assert_eq!(
        apply(Some(&doc), &fenced("c", 11), 3),
        Err(Refused::StaleFence {
            given: 11,
            highest: 12
        })
    );
    // The same fence may write again (one holder, several writes).
    let doc = apply(Some(&doc), &fenced("d", 12), 4).unwrap();
    // A write without a fence is not judged by fences and keeps the highest.
    let doc = apply(Some(&doc), &set("e", "hand edit"), 5).unwrap();
    assert_eq!(doc.fence, Some(12));
    let deleted = apply(
        Some(&doc),
        &Write {
            fence: Some(13),
            ..del("f")
        },
        6,
    )
    .unwrap();
    assert_eq!(deleted.fence, Some(13));
    assert!(matches!(
        apply(Some(&deleted), &fenced("g", 12), 7),
        Err(Refused::StaleFence { .. })
    ));
}

#[test]
fn deleting_nothing_is_refused_as_missing() {
    assert_eq!(apply(None, &del("a"), 1), Err(Refused::Missing));
    let doc = apply(None, &set("b", "1"), 1).unwrap();
    let gone = apply(Some(&doc), &del("c"), 2).unwrap();
    assert_eq!(apply(Some(&gone), &del("d"), 3), Err(Refused::Missing));
}

#[test]
fn a_retried_write_is_recognised_by_its_id_among_the_last_few() {
    let mut doc = apply(None, &set("first", "0"), 1).unwrap();
    assert_eq!(doc.written_by("first"), Some(1));
    for i in 0..kv::WRITES_REMEMBERED {
        doc = apply(Some(&doc), &set(&format!("w{i}"), "x"), 2).unwrap();
    }
    assert_eq!(doc.written_by("first"), None);
    assert_eq!(doc.written_by("w0"), Some(2));
    assert_eq!(doc.writes.len(), kv::WRITES_REMEMBERED);
}

#[test]
fn input_is_checked_before_anything_is_written() {
    let ok = set("a", "1");
    assert!(check_write("ci/version", &ok).is_ok());
    assert!(check_write("", &ok).unwrap_err().0.contains("name"));
    assert!(check_write("bad\nname", &ok).is_err());
    let big = set("a", &"x".repeat(kv::VALUE_MAX_BYTES + 1));
    assert!(check_write("n", &big).unwrap_err().0.contains("at most"));
    assert!(check_write("n", &set("a", &"x".repeat(kv::VALUE_MAX_BYTES))).is_ok());
    let not_json = Write {
        json: true,
        ..set("a", "{oops")
    };
    assert!(check_write("n", &not_json)
        .unwrap_err()
        .0
        .contains("not JSON"));
    let json = Write {
        json: true,
        ..set("a", r#"{"sha":"abc"}"#)
    };
    assert!(check_write("n", &json).is_ok());
}

#[test]
fn a_newer_format_or_garbage_is_an_error_not_a_panic() {
    assert!(matches!(
        kv::decode(br#"{"format":99}"#),
        Err(kv::DecodeError::NewerFormat(99))
    ));
    assert!(kv::decode(b"\xff").is_err());
    assert!(kv::decode(br#"{"format":1}"#).is_err());
}

/// A write whose answer was lost is retried carrying the version from before its first
/// attempt. Landed and remembered: the caller finds its id. Not landed, with every write since
/// remembered: applied now. More writes since than remembered: refused as uncertain, neither
/// applied again nor reported unwritten.
#[test]
fn a_retried_write_is_applied_only_when_every_write_since_its_first_attempt_is_remembered() {
    let mut doc = apply(None, &set("w0", "0"), 10).unwrap();
    let seen = doc.version;
    // The first attempt of "mine" (at version 2) landed, unseen; 8 others landed after it.
    let mine = Write {
        condition: Condition::Version(seen),
        ..set("mine", "mine")
    };
    doc = apply(Some(&doc), &mine, 11).unwrap();
    for n in 0..kv::WRITES_REMEMBERED {
        doc = apply(Some(&doc), &set(&format!("o{n}"), "other"), 12).unwrap();
    }
    assert_eq!(doc.written_by("mine"), None, "forgotten");
    let retry = Write {
        seen_version: Some(seen),
        ..mine.clone()
    };
    assert_eq!(
        apply(Some(&doc), &retry, 13),
        Err(Refused::Uncertain {
            seen,
            current: seen + 1 + kv::WRITES_REMEMBERED as u64
        })
    );
    // Without the version it carries, the same retry is judged as new: "nothing written".
    assert!(matches!(
        apply(Some(&doc), &mine, 13),
        Err(Refused::Lost { .. })
    ));

    // Its first attempt did not land, and every write since is remembered: applied.
    let mut doc = apply(None, &set("w0", "0"), 10).unwrap();
    let seen = doc.version;
    for n in 0..kv::WRITES_REMEMBERED - 1 {
        doc = apply(Some(&doc), &set(&format!("o{n}"), "other"), 12).unwrap();
    }
    let retry = Write {
        seen_version: Some(seen),
        ..set("mine", "mine")
    };
    let written = apply(Some(&doc), &retry, 13).unwrap();
    assert_eq!(written.written_by("mine"), Some(written.version));
}
