//! Shared values: `get`, `set`, `del` and `list` on names, each value a document of its own.
//!
//! A write reads the value's document, asks [`baton_core::kv::write`] for the next one, and
//! writes it by CAS; on a conflict it judges again against the document that won, so
//! `--if-version`, `--if-absent` and `--fence` hold at the moment of the write. A write whose
//! answer was lost (`StoreError::Ambiguous`) re-reads and recognises its own id among the last
//! writes ([`baton_core::kv::WRITES_REMEMBERED`]) instead of writing twice.

use std::time::Duration;

use baton_core::kv::{self, Condition, ValueDoc, Write};
use baton_core::names;
use baton_store::{CasOutcome, Store, StoreError, Versioned};

use crate::remote::{RemoteStore, RunError, MAX_LOST_ANSWERS};
use crate::time::wall_ms;
use crate::turn::ids::new_attempt_id;
use crate::{ClientError, Coordinator};

/// Conflicting writes in a row before a write gives up.
const MAX_CONFLICTS: u32 = 64;

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

/// Writes `write` to `name` by CAS: judged again after each conflict, recognised after an
/// ambiguous answer.
async fn write(coord: &Coordinator, name: &str, write: Write) -> Result<u64, ClientError> {
    kv::check_write(name, &write).map_err(|e| refused(name, e.into()))?;
    if let Some(server) = coord.server() {
        return write_through(server, name, &write).await;
    }
    write_directly(coord, name, &write).await
}

/// Writes `write` to `name` in the store by CAS. A write id found among the value's last
/// writes is this write's own (ids are made fresh for each), landed earlier unseen: its
/// version is the answer, whether or not this call saw an attempt's answer lost (a server
/// runs a client's retry as a first attempt of its own). After a lost answer the write
/// carries the version its first attempt was judged against ([`Write::seen_version`], unless
/// the caller set an earlier one), so that the core refuses it as uncertain when more writes
/// landed since than the value remembers, rather than applying it twice.
pub async fn write_directly(
    coord: &Coordinator,
    name: &str,
    write: &Write,
) -> Result<u64, ClientError> {
    kv::check_write(name, write).map_err(|e| refused(name, e.into()))?;
    let store = coord.store();
    let key = names::value_key(name);
    let mut write = write.clone();
    let mut read = store.load(&key).await?;
    for conflicts in 0..MAX_CONFLICTS {
        let doc = decoded(name, read.as_ref())?;
        if let Some(version) = doc.as_ref().and_then(|doc| doc.written_by(&write.id)) {
            return Ok(version);
        }
        let based_on = doc.as_ref().map_or(0, |doc| doc.version);
        let next = kv::write(doc.as_ref(), &write, wall_ms()).map_err(|refusal| {
            ClientError::ValueRefused {
                name: name.to_owned(),
                refusal,
            }
        })?;
        let expected = read.as_ref().map(|r| &r.version);
        match store.cas(&key, expected, &kv::encode(&next), &[]).await {
            Ok(CasOutcome::Written { .. }) => return Ok(next.version),
            Ok(CasOutcome::Conflict { current }) => {
                if conflicts > 2 {
                    let cap_ms = (1u64 << conflicts.min(6)).min(50);
                    let ms = rand::random_range(0..=cap_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    read = store.load(&key).await?;
                } else {
                    read = match current {
                        Some(current) => Some(current),
                        None => store.load(&key).await?,
                    };
                }
            }
            Err(StoreError::Ambiguous { .. }) => {
                write.seen_version.get_or_insert(based_on);
                read = store.load(&key).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(ClientError::Contention {
        key: name.to_owned(),
        attempts: MAX_CONFLICTS,
    })
}

/// Sends `write` to a server, again when its answer is lost: the server recognises the id of
/// an attempt that ran. The value's version is read first, so that a retry can carry it
/// ([`Write::seen_version`]): the answer to the first attempt may be lost on the way back,
/// after which nothing this side learns dates from before that attempt.
async fn write_through(
    server: &RemoteStore,
    name: &str,
    write: &Write,
) -> Result<u64, ClientError> {
    let read = server.load(&names::value_key(name)).await?;
    let seen_version = decoded(name, read.as_ref())?.map_or(0, |doc| doc.version);
    let mut write = write.clone();
    let mut lost = 0;
    loop {
        match server.write_value(name, &write).await {
            Ok(version) => return Ok(version),
            Err(RunError::Ambiguous { error, .. }) => {
                write.seen_version.get_or_insert(seen_version);
                lost += 1;
                if lost >= MAX_LOST_ANSWERS {
                    return Err(error.into());
                }
            }
            Err(RunError::ValueRefused(refusal)) => {
                return Err(ClientError::ValueRefused {
                    name: name.to_owned(),
                    refusal,
                })
            }
            Err(RunError::Refused(refusal)) => return Err(refused(name, refusal)),
            Err(RunError::Failed(error)) => return Err(error.into()),
        }
    }
}

fn check(name: &str) -> Result<(), ClientError> {
    kv::check_name(name).map_err(|e| refused(name, e.into()))
}

fn refused(name: &str, refusal: baton_core::Refusal) -> ClientError {
    ClientError::Refused {
        key: name.to_owned(),
        refusal,
    }
}

fn decoded(name: &str, read: Option<&Versioned>) -> Result<Option<ValueDoc>, ClientError> {
    read.map(|r| kv::decode(&r.bytes))
        .transpose()
        .map_err(|source| ClientError::ValueCorrupt {
            name: name.to_owned(),
            source,
        })
}
