//! The floor on etcd: each client a task with a connection of its own. The enqueue is one
//! transaction that reads the last entry of the key's queue (by creation) and puts the client's
//! own after it, so its place is the transaction's revision and the entry it read is the one
//! before it; a client that read none holds. A waiter holds when the entry before its own is
//! deleted after its place: the release is one delete, and etcd's watch, its own wake-up, tells
//! the waiters. With others on the key, every client watches the whole queue from before its
//! first enqueue, as every waiter of a baton key watches its document: a watch made after the
//! enqueue would start at a revision etcd has passed, and such a watch catches up only at etcd's
//! next sweep of its lagging watchers, every 100 ms. A client alone never waits and watches
//! nothing (its unread watch would fill). Nobody here leaves the queue but by holding, so the
//! entry before a waiter's is gone only once every earlier one is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use etcd_client::{
    EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
    WatchResponse, WatchStream,
};

use super::{cycle_together, Checks, Cycling, Round};
use crate::peers::contenders::etcd_endpoints;

/// Where every key of the floor lives.
pub(super) const PREFIX: &str = "baton-bench-hot-floor/";

/// What the clients of a round sent, where a floor counts it: every request, and the
/// transactions whose compare failed.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) requests: AtomicU64,
    pub(super) lost: AtomicU64,
    /// Arrivals taken in, the document writes they waited for in all, and the most one did.
    pub(super) arrivals: AtomicU64,
    pub(super) waited: AtomicU64,
    pub(super) waited_most: AtomicU64,
    /// The largest document a client read or was sent, in bytes (0: none counted).
    pub(super) document_bytes_most: AtomicU64,
}

impl Counts {
    /// A round of `rate` grants a second in `turns` turns, with these counts for each turn.
    pub(super) fn round(&self, rate: f64, turns: u64) -> Round {
        let per_turn =
            |count: &AtomicU64| count.load(Ordering::Relaxed) as f64 / turns.max(1) as f64;
        let arrivals = self.arrivals.load(Ordering::Relaxed);
        let waited = self.waited.load(Ordering::Relaxed);
        Round {
            rate,
            requests_per_grant: Some(per_turn(&self.requests)),
            lost_per_grant: Some(per_turn(&self.lost)),
            arrival_wait: (arrivals > 0).then(|| {
                let most = self.waited_most.load(Ordering::Relaxed);
                (waited as f64 / arrivals as f64, most as f64)
            }),
            document_bytes_most: Some(self.document_bytes_most.load(Ordering::Relaxed))
                .filter(|bytes| *bytes > 0),
        }
    }

    /// A document of `bytes` read or sent to a client.
    pub(super) fn document(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.document_bytes_most.fetch_max(bytes, Ordering::Relaxed);
    }

    /// An arrival taken in after `writes` writes of the document.
    pub(super) fn waited(&self, writes: u64) {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        self.waited.fetch_add(writes, Ordering::Relaxed);
        self.waited_most.fetch_max(writes, Ordering::Relaxed);
    }
}

/// A connection to the etcd of `url` (`etcd://host:port[,host:port…]/…`).
async fn connect(url: &str) -> Result<etcd_client::Client> {
    let endpoints = etcd_endpoints(url)?;
    let each: Vec<&str> = endpoints.split(',').collect();
    etcd_client::Client::connect(each, None)
        .await
        .with_context(|| format!("cannot connect to etcd at {endpoints}"))
}

/// A prefix for one run's keys (`PID-NANOS/`), which no other run shares: its keys are
/// `PREFIX`, then this, then the round's.
pub(super) fn run_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    format!("{}-{nanos}/", std::process::id())
}

/// Removes the keys of the run whose prefix is `run`.
pub(super) async fn remove(url: &str, run: &str) -> Result<()> {
    let mut client = connect(url).await?;
    client
        .delete(
            format!("{PREFIX}{run}"),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .context("removing the floor's keys")?;
    Ok(())
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it.
pub(super) async fn one_round(
    url: &str,
    key: &str,
    n: usize,
    duration: std::time::Duration,
) -> Result<f64> {
    let queue = format!("{PREFIX}{key}/");
    let mut clients = Vec::with_capacity(n);
    for client in 0..n {
        let (connection, watches) = connect_watching(url, &queue, true, n).await?;
        clients.push(Client {
            connection,
            watches,
            entry: format!("{queue}{client:04}"),
            queue: queue.clone(),
        });
    }
    Ok(cycle_together(clients, duration).await?.0)
}

/// A client's connection and, with others on the key (`n` clients in all), its watch of `key`
/// (with `prefix`: of every key under it). A client alone watches nothing: its unread watch would
/// fill.
pub(super) async fn connect_watching(
    url: &str,
    key: &str,
    prefix: bool,
    n: usize,
) -> Result<(etcd_client::Client, Option<WatchStream>)> {
    let mut connection = connect(url).await?;
    let watches = match n {
        1 => None,
        _ => Some(watching(&mut connection, key, prefix).await?),
    };
    Ok((connection, watches))
}

/// A watch of `key` (with `prefix`: every key under it), from now on, once etcd says it is made.
async fn watching(
    connection: &mut etcd_client::Client,
    key: &str,
    prefix: bool,
) -> Result<WatchStream> {
    let options = match prefix {
        true => WatchOptions::new().with_prefix(),
        false => WatchOptions::new(),
    };
    let mut watches = connection
        .watch(key, Some(options))
        .await
        .context("the queue's watch")?;
    while !next_message(&mut watches).await?.created() {}
    Ok(watches)
}

/// The watch's next message; an error if etcd cancelled the watch (compaction, say).
pub(super) async fn next_message(watches: &mut WatchStream) -> Result<WatchResponse> {
    let response = watches
        .message()
        .await
        .context("the queue's watch")?
        .context("the watch stream ended")?;
    if response.canceled() {
        bail!(
            "etcd cancelled the queue's watch (compacted to {}): {}",
            response.compact_revision(),
            response.cancel_reason()
        );
    }
    Ok(response)
}

/// One client: its connection, its watch of the queue (none when alone), and its entry's key in
/// the queue.
struct Client {
    connection: etcd_client::Client,
    watches: Option<WatchStream>,
    queue: String,
    entry: String,
}

#[async_trait]
impl Cycling for Client {
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let last = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        let enqueue = Txn::new().and_then([
            TxnOp::get(self.queue.as_str(), Some(last)),
            TxnOp::put(self.entry.as_str(), "", None),
        ]);
        let response = self.connection.txn(enqueue).await.context("the enqueue")?;
        let mine = response
            .header()
            .map(|header| header.revision())
            .context("the enqueue's revision")?;
        let before = match response.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(read)) => read.kvs().first().map(|kv| kv.key().to_vec()),
            other => bail!("the enqueue's read answered {other:?}"),
        };
        if let Some(before) = before {
            self.wait_for_deletion(before, mine).await?;
        }
        let held = Instant::now();
        checks.hold(mine);
        self.connection
            .delete(self.entry.as_str(), None)
            .await
            .context("the release")?;
        Ok(held)
    }
}

impl Client {
    /// Waits until `before`, the entry ahead of this client's (put at revision `mine`), is
    /// deleted after `mine`: an earlier deletion of that key was its owner's turn before.
    async fn wait_for_deletion(&mut self, before: Vec<u8>, mine: i64) -> Result<()> {
        let Some(watches) = &mut self.watches else {
            bail!("a client alone found an entry before its own: the floor is wrong");
        };
        loop {
            let response = next_message(watches).await?;
            let deleted = response.events().iter().any(|event| {
                event.event_type() == EventType::Delete
                    && event
                        .kv()
                        .is_some_and(|kv| kv.key() == before.as_slice() && kv.mod_revision() > mine)
            });
            if deleted {
                return Ok(());
            }
        }
    }
}
