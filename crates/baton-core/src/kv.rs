//! Shared values (`baton kv`): one small document per name, changed only by compare-and-swap.
//!
//! A value's document ([`ValueDoc`]) lives under its own name in the store
//! ([`crate::names::value_key`]), never beside a key's queue. [`write()`] is the only rule: it
//! judges a set or a delete against the document as read and returns the next document, or
//! refuses. The client writes the result by CAS and, on a conflict, judges again against the
//! document that won, so a condition (`--if-version`, `--if-absent`, `--fence`) holds at the
//! moment of the write, never only at the moment of a read.
//!
//! - **Versions** count every write of the name, deletes included, and are never reused: a
//!   value deleted and set again does not get back a version a stale reader still holds.
//! - **Fences** (`--fence F`): the document keeps the highest fence that ever wrote it, through
//!   deletes, and refuses a lower one. A holder paused past its lease carries an older fence
//!   than its successor, so it cannot overwrite what the successor wrote (storage-side fencing).
//!   A write without a fence is not judged by fences (an operator's hand edit), and leaves the
//!   highest one as it was.
//! - **Expiry** (`--ttl`) is judged on the wall clock of whoever reads or writes: a TTL is for
//!   housekeeping, never for safety, so clocks that disagree by seconds shift it by seconds. An
//!   expired value reads as absent; its document stays until the next write (stores that delete
//!   nothing keep it).
//! - **Retries**: each write carries an id the client makes before its first attempt, and the
//!   document remembers the last [`WRITES_REMEMBERED`] ids with the version each wrote, so a
//!   write whose answer was lost is recognised when retried instead of being applied twice.

use serde::{Deserialize, Serialize};

use crate::limits::{check_context, check_key, InvalidInput};

/// The largest value, in bytes of UTF-8.
pub const VALUE_MAX_BYTES: usize = 64 * 1024;
/// Write ids remembered per value, to recognise a retried write.
pub const WRITES_REMEMBERED: usize = 8;
/// The format of a value's document.
pub const FORMAT: u64 = 1;

/// A shared value's document, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueDoc {
    /// [`FORMAT`].
    pub format: u64,
    /// Counts every write of the name (1 for the first).
    pub version: u64,
    /// The value; `None` once deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The value was checked to be JSON when it was set (`--json`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub json: bool,
    /// When the value expires (wall clock ms of the writer plus its TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_wall_ms: Option<u64>,
    /// When this version was written (the writer's wall clock).
    pub written_wall_ms: u64,
    /// Who wrote this version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    /// The highest fence that ever wrote the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// The ids of the last writes, newest last, with the version each wrote.
    #[serde(default)]
    pub writes: Vec<(String, u64)>,
}

/// A value as a reader sees it: present and not expired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The value.
    pub value: &'a str,
    /// Its version.
    pub version: u64,
    /// Whether it was set as JSON.
    pub json: bool,
    /// When it expires, if it does.
    pub expires_wall_ms: Option<u64>,
    /// When it was written.
    pub written_wall_ms: u64,
    /// Who wrote it.
    pub context: &'a str,
    /// The highest fence that wrote it.
    pub fence: Option<u64>,
}

impl ValueDoc {
    /// The value as of `wall_ms`: `None` when deleted or expired.
    pub fn entry(&self, wall_ms: u64) -> Option<Entry<'_>> {
        let value = self.value.as_deref()?;
        if self.expires_wall_ms.is_some_and(|at| wall_ms >= at) {
            return None;
        }
        Some(Entry {
            value,
            version: self.version,
            json: self.json,
            expires_wall_ms: self.expires_wall_ms,
            written_wall_ms: self.written_wall_ms,
            context: &self.context,
            fence: self.fence,
        })
    }

    /// The version a condition is judged against as of `wall_ms` (`None`: absent).
    pub fn live_version(&self, wall_ms: u64) -> Option<u64> {
        self.entry(wall_ms).map(|e| e.version)
    }

    /// The version an earlier attempt of write `id` wrote, if it is remembered.
    pub fn written_by(&self, id: &str) -> Option<u64> {
        self.writes
            .iter()
            .find(|(seen, _)| seen == id)
            .map(|(_, version)| *version)
    }

    /// Whether the id of every write since version `seen` is remembered. Versions count every
    /// write, one each, and the newest writes' ids are kept, so the ids remembered are those
    /// of the last `writes.len()` versions.
    pub fn remembers_writes_since(&self, seen: u64) -> bool {
        self.version.saturating_sub(seen) <= self.writes.len() as u64
    }
}

/// When a write may happen. Serialised (for `baton serve`) as `"any"`, `"absent"` or
/// `{"version": 3}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Always.
    #[default]
    Any,
    /// Only while the value's version is this one (`--if-version V`).
    Version(u64),
    /// Only while there is no value (`--if-absent`; an expired value is absent).
    Absent,
}

/// A set (`value: Some`) or a delete (`value: None`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    /// Made by the client before its first attempt; the same for every retry.
    pub id: String,
    /// The new value, or `None` to delete.
    pub value: Option<String>,
    /// The value is JSON (checked by [`check_write`]).
    pub json: bool,
    /// When it may happen.
    pub condition: Condition,
    /// How long the value lives, from the write.
    pub ttl_ms: Option<u64>,
    /// The writer's fence (`--fence`).
    pub fence: Option<u64>,
    /// Who writes.
    pub context: String,
    /// Set once an attempt's answer was lost: the value's version before this write's first
    /// attempt (0: never written). Every attempt that landed landed above it, so if more
    /// writes landed since than the document remembers ids for, this write's own may be among
    /// the forgotten: it is refused as [`Refused::Uncertain`] rather than applied a second
    /// time or reported unwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_version: Option<u64>,
}

/// Why a write was refused. Nothing was written. Serialised (for `baton serve`'s answers) as
/// `{"kind": "lost", "detail": {...}}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Refused {
    /// `--if-version` or `--if-absent` did not hold.
    #[error("{}", lost_message(*.condition, *.current))]
    Lost {
        /// The condition.
        condition: Condition,
        /// The current version (`None`: absent).
        current: Option<u64>,
    },
    /// A higher fence wrote the name.
    #[error(
        "fence {given} is older than fence {highest}, which already wrote this value \
         (a newer holder has taken over): nothing written"
    )]
    StaleFence {
        /// The fence given.
        given: u64,
        /// The highest that wrote.
        highest: u64,
    },
    /// A delete of a name that has no value.
    #[error("no such value")]
    Missing,
    /// An earlier attempt of this write may have landed (its answer was lost), and more
    /// writes landed since than the value remembers: whether it was applied cannot be told.
    /// Nothing was written now.
    #[error(
        "the store did not confirm an earlier attempt of this write, and the value went from \
         version {seen} to {current} since, more writes than it remembers ({WRITES_REMEMBERED}): \
         baton cannot tell whether this write was applied, and wrote nothing now; read the \
         value (`baton kv get`) before writing again"
    )]
    Uncertain {
        /// The version before the first attempt.
        seen: u64,
        /// The version now.
        current: u64,
    },
}

fn lost_message(condition: Condition, current: Option<u64>) -> String {
    let now = match current {
        Some(version) => format!("the current version is {version}"),
        None => "there is no value".to_owned(),
    };
    match condition {
        Condition::Version(wanted) => {
            format!("{now}, not {wanted} (--if-version): nothing written")
        }
        Condition::Absent => format!("{now} (--if-absent): nothing written"),
        Condition::Any => now,
    }
}

/// Checks a value's name (the rules of keys) and a write's input: size, JSON, context, TTL.
pub fn check_write(name: &str, write: &Write) -> Result<(), InvalidInput> {
    check_name(name)?;
    check_context(&write.context)?;
    if let Some(value) = &write.value {
        if value.len() > VALUE_MAX_BYTES {
            return Err(InvalidInput(format!(
                "the value is {} bytes; values are at most {VALUE_MAX_BYTES} bytes (64 KiB): \
                 keep larger things elsewhere and store where they are",
                value.len()
            )));
        }
        if write.json {
            serde_json::from_str::<serde::de::IgnoredAny>(value)
                .map_err(|e| InvalidInput(format!("the value is not JSON (--json): {e}")))?;
        }
    }
    if write.ttl_ms == Some(0) {
        return Err(InvalidInput("--ttl must be longer than zero".into()));
    }
    Ok(())
}

/// Checks a value's name: the rules of keys.
pub fn check_name(name: &str) -> Result<(), InvalidInput> {
    check_key(name).map_err(|e| InvalidInput(e.0.replace("the key", "the name")))
}

/// Judges `write` against the document as read (`None`: never written) at `wall_ms`, and
/// returns the document to write.
pub fn write(current: Option<&ValueDoc>, write: &Write, wall_ms: u64) -> Result<ValueDoc, Refused> {
    if let (Some(seen), Some(doc)) = (write.seen_version, current) {
        // The caller looked for its id first ([`ValueDoc::written_by`]); this judges the case
        // where it could not have been seen.
        if doc.written_by(&write.id).is_none() && !doc.remembers_writes_since(seen) {
            return Err(Refused::Uncertain {
                seen,
                current: doc.version,
            });
        }
    }
    let live = current.and_then(|doc| doc.live_version(wall_ms));
    let holds = match write.condition {
        Condition::Any => true,
        Condition::Version(wanted) => live == Some(wanted),
        Condition::Absent => live.is_none(),
    };
    if !holds {
        return Err(Refused::Lost {
            condition: write.condition,
            current: live,
        });
    }
    let highest = current.and_then(|doc| doc.fence);
    if let (Some(given), Some(highest)) = (write.fence, highest) {
        if given < highest {
            return Err(Refused::StaleFence { given, highest });
        }
    }
    if write.value.is_none() && live.is_none() {
        return Err(Refused::Missing);
    }
    let version = current.map_or(0, |doc| doc.version) + 1;
    let mut writes = current.map(|doc| doc.writes.clone()).unwrap_or_default();
    writes.push((write.id.clone(), version));
    let excess = writes.len().saturating_sub(WRITES_REMEMBERED);
    writes.drain(..excess);
    Ok(ValueDoc {
        format: FORMAT,
        version,
        value: write.value.clone(),
        json: write.json && write.value.is_some(),
        expires_wall_ms: write
            .ttl_ms
            .filter(|_| write.value.is_some())
            .map(|ttl| wall_ms.saturating_add(ttl)),
        written_wall_ms: wall_ms,
        context: write.context.clone(),
        fence: highest.max(write.fence),
        writes,
    })
}

/// A value's document that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Written by a newer baton.
    #[error("the value was written by a newer baton (format {0}); upgrade baton on this machine")]
    NewerFormat(u64),
    /// Not a value's document.
    #[error("the value's document is corrupt ({0}): inspect the store")]
    Corrupt(String),
}

/// Encodes a value's document.
pub fn encode(doc: &ValueDoc) -> Vec<u8> {
    // A plain struct with string keys always serialises.
    serde_json::to_vec(doc).unwrap_or_default()
}

/// Decodes a value's document.
pub fn decode(bytes: &[u8]) -> Result<ValueDoc, DecodeError> {
    #[derive(Deserialize)]
    struct Format {
        format: u64,
    }
    let format: Format =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::Corrupt(e.to_string()))?;
    if format.format > FORMAT {
        return Err(DecodeError::NewerFormat(format.format));
    }
    serde_json::from_slice(bytes).map_err(|e| DecodeError::Corrupt(e.to_string()))
}
