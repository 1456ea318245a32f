//! Shared values: `get`, `set`, `del` and `list` on names, each value a document of its own.
//!
//! A write reads the value's document, asks [`baton_core::kv::write`] for the next one, and
//! writes it by CAS (through the coordinator's transport: `crate::executor`); on a conflict it
//! judges again against the document that won, so `--if-version`, `--if-absent` and `--fence`
//! hold at the moment of the write. A write whose answer was lost re-reads and recognises its
//! own id among the last writes ([`baton_core::kv::WRITES_REMEMBERED`]) instead of writing
//! twice.

use std::time::Duration;

use baton_core::kv::{self, Condition, ValueDoc, Write};
use baton_core::names;

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::executor::optimistic::{decoded_value as decoded, write_value_by_cas};
use crate::time::wall_ms;
use crate::turn::ids::new_attempt_id;

/// A value as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    /// Its name.
    pub name: String,
    /// The value.
    pub value: String,
    /// Its version (a write with `--if-version` names it).
    pub version: u64,
    /// Set as JSON.
    pub json: bool,
    /// When it expires (wall clock ms), if it does.
    pub expires_wall_ms: Option<u64>,
    /// When it was written (wall clock ms of its writer).
    pub written_wall_ms: u64,
    /// Who wrote it.
    pub context: String,
    /// The highest fence that wrote it.
    pub fence: Option<u64>,
}

impl Value {
    fn of(name: &str, doc: &ValueDoc, wall: u64) -> Option<Value> {
        let entry = doc.entry(wall)?;
        Some(Value {
            name: name.to_owned(),
            value: entry.value.to_owned(),
            version: entry.version,
            json: entry.json,
            expires_wall_ms: entry.expires_wall_ms,
            written_wall_ms: entry.written_wall_ms,
            context: entry.context.to_owned(),
            fence: entry.fence,
        })
    }
}

/// How to set a value.
#[derive(Clone, Debug, Default)]
pub struct SetOptions {
    /// Check that the value is JSON.
    pub json: bool,
    /// When the write may happen.
    pub condition: Condition,
    /// How long the value lives.
    pub ttl: Option<Duration>,
    /// The writer's fence: refused if a higher one wrote the value.
    pub fence: Option<u64>,
    /// Who writes (shown by `baton kv ls`).
    pub context: String,
}

/// Reads `name`: `None` when it has no value (never set, deleted or expired).
pub async fn get(coord: &Coordinator, name: &str) -> Result<Option<Value>, ClientError> {
    check(name)?;
    let read = coord.store().load(&names::value_key(name)).await?;
    let doc = decoded(name, read.as_ref())?;
    Ok(doc.and_then(|doc| Value::of(name, &doc, wall_ms())))
}

/// Sets `name` to `value`; returns the new version.
pub async fn set(
    coord: &Coordinator,
    name: &str,
    value: &str,
    options: &SetOptions,
) -> Result<u64, ClientError> {
    let ttl_ms = options
        .ttl
        .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    write(
        coord,
        name,
        Write {
            id: new_attempt_id(),
            value: Some(value.to_owned()),
            json: options.json,
            condition: options.condition,
            ttl_ms,
            fence: options.fence,
            context: options.context.clone(),
            seen_version: None,
        },
    )
    .await
}

/// Deletes `name` (refused as [`kv::Refused::Missing`] when it has no value); returns the
/// version the delete wrote.
pub async fn del(
    coord: &Coordinator,
    name: &str,
    condition: Condition,
    fence: Option<u64>,
    context: &str,
) -> Result<u64, ClientError> {
    write(
        coord,
        name,
        Write {
            id: new_attempt_id(),
            value: None,
            json: false,
            condition,
            ttl_ms: None,
            fence,
            context: context.to_owned(),
            seen_version: None,
        },
    )
    .await
}

/// Every value whose name starts with `prefix`, sorted by name.
pub async fn list(coord: &Coordinator, prefix: &str) -> Result<Vec<Value>, ClientError> {
    let store = coord.store();
    let mut values = Vec::new();
    for key in store.list(&names::value_prefix(prefix)).await? {
        let Some(name) = names::value_name(&key) else {
            continue;
        };
        let doc = decoded(name, store.load(&key).await?.as_ref())?;
        values.extend(doc.and_then(|doc| Value::of(name, &doc, wall_ms())));
    }
    values.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(values)
}

/// Writes `write` to `name` through the coordinator's transport: judged again after each
/// conflict, recognised after an ambiguous answer.
async fn write(coord: &Coordinator, name: &str, write: Write) -> Result<u64, ClientError> {
    kv::check_write(name, &write).map_err(|e| ClientError::refused(name, e))?;
    coord.write_value(name, &write).await
}

/// Writes `write` to `name` in the coordinator's store itself by CAS, whatever its transport
/// (`baton serve` runs the writes clients send it so): its own write is recognised among the
/// value's last writes after an ambiguous answer, never applied twice.
pub async fn write_directly(
    coord: &Coordinator,
    name: &str,
    write: &Write,
) -> Result<u64, ClientError> {
    write_value_by_cas(coord.store().as_ref(), name, write).await
}

fn check(name: &str) -> Result<(), ClientError> {
    kv::check_name(name).map_err(|e| ClientError::refused(name, e))
}
