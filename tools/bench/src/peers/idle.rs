//! B9: B1 beside idle holders of other keys, as a store shared by many jobs has them.
//!
//! Each idle holder is a real `baton run KEY -- sleep` on a key of its own, which follows its
//! key once its turn outlasts the follow delay (on PostgreSQL a `LISTEN`, on Redis a
//! subscription). Whatever a write costs the processes that do not wait for it shows here: a
//! store that told every listener of every write made each of them wake and decode it, taking
//! the cores from the one client measured.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, Result};

use super::takeover::{await_held, kill_group, Holder};
use crate::setup::fresh_key;

/// How long the holders are given, once all hold, to follow their keys: well past the follow
/// delay (100 ms) and a subscription's round trips.
const FOLLOW_SETTLE: Duration = Duration::from_secs(1);

/// Idle holders, each of a key of its own; killed (their whole groups) when dropped.
pub struct IdleHolders(Vec<Child>);

impl IdleHolders {
    /// Starts `n` holders on `url` and returns once all hold and have had time to follow.
    pub async fn start(baton: &Path, url: &str, ttl: Duration, n: usize) -> Result<IdleHolders> {
        let holder = Holder::BatonRun { baton, url, ttl };
        let mut holders = IdleHolders(Vec::with_capacity(n));
        for i in 0..n {
            let child = holder.start(&fresh_key(&format!("b9-idle-{i}")))?;
            holders.0.push(child);
        }
        for child in &mut holders.0 {
            await_held(child).context("an idle holder")?;
        }
        tokio::time::sleep(FOLLOW_SETTLE).await;
        Ok(holders)
    }
}

impl Drop for IdleHolders {
    fn drop(&mut self) {
        for child in &mut self.0 {
            kill_group(child);
            let _ = child.wait();
        }
    }
}
