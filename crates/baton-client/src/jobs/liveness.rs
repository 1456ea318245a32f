//! Worker liveness: each worker says, under a record of the keys it serves, that it is alive,
//! so `baton jobs` and `baton wait` can tell a queue nobody serves.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::schedule::KeyPatterns;
use crate::coordinator::Coordinator;
use crate::error::ClientError;
/// Where a worker says it serves keys: the record `worker/seen` of the key named by each of its
/// patterns (a prefix such as `deploy/` is a key name too), or of [`EVERY_KEY`] when it serves
/// every key. Written when it starts and every [`SEEN_EVERY`], so `baton why` can tell a key no
/// worker has looked at.
pub const SEEN_RECORD: &str = "worker/seen";
/// The key under whose records a worker serving every key says so.
pub const EVERY_KEY: &str = "*";
/// How often a worker renews its [`SEEN_RECORD`]s.
pub const SEEN_EVERY: Duration = Duration::from_secs(30);

/// What a worker's [`SEEN_RECORD`] says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSeen {
    /// Who the worker is (its context: user@host pid N, or the CI's names).
    pub worker: String,
    /// When it wrote this (its wall clock).
    pub seen_wall_ms: u64,
}

/// Says that a worker serving `patterns` is alive (see [`SEEN_RECORD`]).
pub async fn worker_seen(
    coord: &Coordinator,
    patterns: &KeyPatterns,
    worker: &str,
) -> Result<(), ClientError> {
    let seen = WorkerSeen {
        worker: worker.to_owned(),
        seen_wall_ms: crate::time::wall_ms(),
    };
    let bytes = serde_json::to_vec(&seen).unwrap_or_default();
    let keys: Vec<&str> = if patterns.0.is_empty() {
        vec![EVERY_KEY]
    } else {
        patterns.0.iter().map(String::as_str).collect()
    };
    for key in keys {
        coord.put_record(key, SEEN_RECORD, &bytes).await?;
    }
    Ok(())
}

/// The latest worker that said it serves `key`: by the exact key, any prefix of it ending in
/// `/`, or every key.
pub async fn last_worker_seen(
    coord: &Coordinator,
    key: &str,
) -> Result<Option<WorkerSeen>, ClientError> {
    let mut names: Vec<&str> = vec![key, EVERY_KEY];
    names.extend(
        key.char_indices()
            .filter(|&(_, c)| c == '/')
            .map(|(i, _)| &key[..=i]),
    );
    let mut latest: Option<WorkerSeen> = None;
    for name in names {
        let Some(bytes) = coord.store().get_record(name, SEEN_RECORD).await? else {
            continue;
        };
        let Ok(seen) = serde_json::from_slice::<WorkerSeen>(&bytes) else {
            continue;
        };
        if latest
            .as_ref()
            .is_none_or(|l| l.seen_wall_ms < seen.seen_wall_ms)
        {
            latest = Some(seen);
        }
    }
    Ok(latest)
}
