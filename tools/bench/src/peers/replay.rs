//! Not a lock: the store's floor for baton's own writes. A client takes one real turn on each
//! key through the library, keeps the bytes the store then held (the document an acquire
//! wrote, the one its release wrote and the history entry it appended), and from then on only
//! writes those bytes back by CAS, an acquire's and a release's a cycle, through the same store
//! code baton uses: no core, no coordinator, no lease, no heartbeat.
//!
//! What baton's B1 and B2 cost beyond this is the client's work; what this costs beyond the
//! store's own peer is the writes themselves (the document, the version check, the history,
//! the wake-up). It excludes nobody and wakes nobody it knows of, so it is measured only where
//! each client has its key to itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use baton_store::{CasOutcome, Store, Version};

use super::contenders::{Baton, Contender, Locker};

/// Makes clients that replay baton's writes on `url`.
pub struct BatonWrites {
    /// The store URL.
    pub url: String,
}

/// The bytes one real turn left on a key, and the version the key is at.
struct Recorded {
    acquire: Vec<u8>,
    release: Vec<u8>,
    history: Vec<Vec<u8>>,
    version: Version,
}

struct ReplayLocker {
    url: String,
    store: Arc<dyn Store>,
    keys: HashMap<String, Recorded>,
    requests: u64,
}

/// A client that replays baton's writes on `store` (whose URL is `url`: the turn that
/// records them takes a connection of its own).
pub fn locker(url: String, store: Arc<dyn Store>) -> Box<dyn Locker> {
    Box::new(ReplayLocker {
        url,
        store,
        keys: HashMap::new(),
        requests: 0,
    })
}

#[async_trait]
impl Contender for BatonWrites {
    fn name(&self) -> String {
        "floor: baton's two writes replayed through the store, no client work".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        let store = crate::setup::open_store(&self.url).await?;
        Ok(locker(self.url.clone(), store))
    }
}

impl ReplayLocker {
    /// Takes and gives back `key` once through the library, as B1's baton client does,
    /// reading what each step wrote.
    async fn record(&self, key: &str) -> Result<Recorded> {
        let baton = Baton {
            url: self.url.clone(),
            ttl: Duration::from_secs(30),
        };
        let mut client = baton.client().await?;
        client.lock(key).await?;
        let acquire = self.document(key).await?.1;
        client.unlock(key).await?;
        let (version, release) = self.document(key).await?;
        let history = self
            .store
            .history_tail(key, 1)
            .await
            .with_context(|| format!("cannot read the history of {key}"))?
            .into_iter()
            .map(|record| record.bytes)
            .collect();
        Ok(Recorded {
            acquire,
            release,
            history,
            version,
        })
    }

    async fn document(&self, key: &str) -> Result<(Version, Vec<u8>)> {
        let versioned = self
            .store
            .load(key)
            .await
            .with_context(|| format!("cannot read {key}"))?
            .with_context(|| format!("{key} has no document after a turn"))?;
        Ok((versioned.version, versioned.bytes))
    }

    /// Writes the recorded acquire's (`acquire`) or release's document over `key`'s.
    async fn write(&mut self, key: &str, acquire: bool) -> Result<()> {
        let recorded = self
            .keys
            .get_mut(key)
            .with_context(|| format!("{key} was never recorded"))?;
        let (bytes, history): (&[u8], &[Vec<u8>]) = if acquire {
            (&recorded.acquire, &[])
        } else {
            (&recorded.release, &recorded.history)
        };
        self.requests += 1;
        let written = self
            .store
            .cas_due(key, Some(&recorded.version), bytes, history, None)
            .await
            .with_context(|| format!("cannot write {key}"))?;
        match written {
            CasOutcome::Written { version } => recorded.version = version,
            CasOutcome::Conflict { .. } => {
                bail!("another client wrote {key}: keys are not shared here")
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Locker for ReplayLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        if !self.keys.contains_key(key) {
            let recorded = self.record(key).await?;
            self.keys.insert(key.to_string(), recorded);
        }
        self.write(key, true).await
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        self.write(key, false).await
    }

    /// The replayed writes only: the turn that recorded them is not counted.
    fn requests(&self) -> u64 {
        self.requests
    }
}
