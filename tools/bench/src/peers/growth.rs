//! B6: what an operation costs as what the store holds grows, baton against itself, small and
//! large measured in alternating rounds.
//!
//! - Queue: a key held (a lease of an hour) with 10, 100 or 900 tickets queued behind it
//!   (each enqueued by a waiter that then went away; their waiter leases last an hour; past
//!   the first 16 they wait in the key's backlog). The operation is a try-acquire (`--timeout
//!   0`): enqueue, see the turn is not there, withdraw: two writes of the document. 900, not
//!   1,000, as when every ticket was in the document (whose limit, 256 KiB, held 924), so that
//!   the figures compare with the runs before the backlog held turns.
//! - Jobs: a submit to a key with 1,000 queued jobs next to one to an empty key
//!   ([`crate::backlog`]).
//! - History: acquire + release of a key with 100,000 history entries (the store told to keep
//!   them) next to a key with none.
//! - Keys: acquire + release of a key in a store of 100,000 keys next to one in a store of a
//!   few, and `status` of one key and of a prefix of ten keys in each (two SQLite files).
//!
//! History and keys are filled through the library, one acquire + release per entry or key:
//! about half a minute on SQLite, far longer over a network, so they run on SQLite.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::Outcome;
use serde::Serialize;

use crate::setup::fresh_key;
use crate::stats::Summary;

/// The longest queue measured: the most tickets that fit in one document, rounded down.
pub const LONG_QUEUE: usize = 900;

/// A lease or waiter lease that outlasts any run.
const HOUR: Duration = Duration::from_secs(3600);

/// One comparison: the same operation on the small and on the large case.
#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    /// What grows and to what.
    pub what: String,
    /// The small case.
    pub small: String,
    /// The operation on the small case.
    pub small_ms: Summary,
    /// The operation on the large case.
    pub large_ms: Summary,
}

async fn open(url: &str) -> Result<Coordinator> {
    let store = crate::setup::open_store(url).await?;
    Ok(Coordinator::new(store))
}

fn options(timeout: Option<Duration>) -> AcquireOptions {
    AcquireOptions {
        ttl: HOUR,
        waiter_ttl: HOUR,
        timeout,
        max_live: 5000,
        context: "baton-bench peers B6".into(),
        // The queue is counted in the document: an arrival would wait beside it for a write
        // to take it in, and nobody writes while the tickets are queued.
        by_arrival: Some(false),
        ..AcquireOptions::default()
    }
}

/// Runs `op` on `small` and `large` alternately, `rounds` times each.
async fn alternate<F, Fut>(rounds: usize, mut op: F) -> Result<(Summary, Summary)>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for is_large in [round % 2 == 1, round % 2 == 0] {
            let started = Instant::now();
            op(is_large).await?;
            let took = started.elapsed();
            if is_large {
                large.push(took);
            } else {
                small.push(took);
            }
        }
    }
    Ok((
        Summary::of(&small).context("no rounds")?,
        Summary::of(&large).context("no rounds")?,
    ))
}

/// A key held for an hour with `queued` tickets behind it.
async fn queued_key(url: &str, queued: usize) -> Result<String> {
    let key = fresh_key(&format!("b6-queue-{queued}"));
    let holder = open(url).await?;
    acquire(&holder, &Pending::new(&key), &options(None))
        .await
        .context("cannot take the key")?;
    let coord = Arc::new(open(url).await?);
    for n in 0..queued {
        let (waiting, waiting_key) = (coord.clone(), key.clone());
        let waiter = tokio::spawn(async move {
            acquire(&waiting, &Pending::new(&waiting_key), &options(None)).await
        });
        // Queued once the document has one more ticket; then the waiter goes away, leaving it.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // In the window, or counted in the backlog.
            let tickets = coord.read(&key).await?.doc.map_or(0, |d| {
                d.tickets.len() + d.backlog.map_or(0, |b| b.len() as usize)
            });
            if tickets >= n + 2 {
                break;
            }
            if waiter.is_finished() {
                let ended = waiter.await.context("a waiter panicked")?;
                bail!("ticket {n} of {queued} was not queued: {ended:?}");
            }
            if Instant::now() > deadline {
                bail!("ticket {n} of {queued} was not queued within a minute");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        waiter.abort();
    }
    Ok(key)
}

/// A try-acquire of a held key: enqueue and withdraw. Fails unless it timed out.
async fn try_acquire(coord: &Coordinator, key: &str) -> Result<()> {
    match acquire(coord, &Pending::new(key), &options(Some(Duration::ZERO))).await {
        Ok(_) => bail!("{key} was granted while held"),
        Err(baton_client::ClientError::TimedOut { .. }) => Ok(()),
        Err(error) => Err(error).context("try-acquire"),
    }
}

/// Queue growth: 10 against 100 and 900 queued tickets.
pub async fn queue(url: &str, rounds: usize) -> Result<Vec<Growth>> {
    let coord = open(url).await?;
    let ten = queued_key(url, 10).await?;
    let mut out = Vec::new();
    for queued in [100, LONG_QUEUE] {
        let large = queued_key(url, queued).await?;
        let (small_ms, large_ms) = alternate(rounds, |is_large| {
            let key = if is_large { &large } else { &ten };
            let coord = &coord;
            async move { try_acquire(coord, key).await }
        })
        .await?;
        out.push(Growth {
            what: format!("try-acquire, {queued} tickets queued"),
            small: "10 queued".into(),
            small_ms,
            large_ms,
        });
    }
    Ok(out)
}

/// Jobs: a submit to a key with 1,000 queued jobs next to one to an empty key.
pub async fn jobs(url: &str, rounds: usize) -> Result<Growth> {
    let common = crate::Common {
        store: Some(url.to_string()),
        baton: None,
        json: false,
    };
    let report = crate::backlog::backlog(&common, 1000, rounds).await?;
    Ok(Growth {
        what: "job submit, 1,000 jobs queued".into(),
        small: "empty key".into(),
        small_ms: report.empty_ms,
        large_ms: report.deep_ms,
    })
}

async fn cycle(coord: &Coordinator, key: &str) -> Result<()> {
    let lease = acquire(coord, &Pending::new(key), &options(Some(HOUR)))
        .await
        .with_context(|| format!("cannot acquire {key}"))?;
    release(coord, key, &lease.token, Outcome::Succeeded)
        .await
        .with_context(|| format!("cannot release {key}"))?;
    Ok(())
}

/// History: acquire + release of a key with `entries` history entries next to a fresh key's.
/// `url` must keep them (`history_keep`).
pub async fn history(url: &str, entries: usize, rounds: usize) -> Result<Growth> {
    let coord = open(url).await?;
    let long = fresh_key("b6-history");
    for n in 0..entries {
        cycle(&coord, &long)
            .await
            .with_context(|| format!("history entry {n}"))?;
    }
    let short = fresh_key("b6-no-history");
    let (small_ms, large_ms) = alternate(rounds, |is_large| {
        let key = if is_large { &long } else { &short };
        let coord = &coord;
        async move { cycle(coord, key).await }
    })
    .await?;
    Ok(Growth {
        what: format!("acquire + release, {entries} history entries"),
        small: "fresh key".into(),
        small_ms,
        large_ms,
    })
}

/// Keys: acquire + release and `status` in a store of `keys` keys next to one of ten
/// (`small_url` and `large_url`: two stores of the same kind).
pub async fn keys(
    small_url: &str,
    large_url: &str,
    keys: usize,
    rounds: usize,
) -> Result<Vec<Growth>> {
    let (small, large) = (open(small_url).await?, open(large_url).await?);
    // Ten keys under one prefix in both, the rest of the large store under another.
    for n in 0..10 {
        cycle(&small, &format!("b6/prefix/{n:02}")).await?;
        cycle(&large, &format!("b6/prefix/{n:02}")).await?;
    }
    for n in 10..keys {
        cycle(&large, &format!("b6/other/{n:07}"))
            .await
            .with_context(|| format!("key {n} of {keys}"))?;
    }
    let store = |is_large: bool| if is_large { &large } else { &small };
    let (small_ms, large_ms) = alternate(rounds, |is_large| {
        let coord = store(is_large);
        async move { cycle(coord, "b6/prefix/05").await }
    })
    .await?;
    let mut out = vec![Growth {
        what: format!("acquire + release, {keys} keys in the store"),
        small: "10 keys".into(),
        small_ms,
        large_ms,
    }];
    for (what, prefix, expect) in [
        ("status of one key", "b6/prefix/05", 1),
        ("status of a prefix of 10 keys", "b6/prefix/", 10),
    ] {
        let (small_ms, large_ms) = alternate(rounds, |is_large| {
            let coord = store(is_large);
            async move {
                let found = baton_client::status::read_all(coord, prefix).await?;
                if found.len() != expect {
                    bail!("{what}: {} keys instead of {expect}", found.len());
                }
                Ok(())
            }
        })
        .await?;
        out.push(Growth {
            what: format!("{what}, {keys} keys in the store"),
            small: "10 keys".into(),
            small_ms,
            large_ms,
        });
    }
    Ok(out)
}
