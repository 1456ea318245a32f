//! The floor on etcd of a lock kept as baton keeps one: the whole queue in one etcd key (a
//! document), every change a compare-and-swap of it. A client enqueues by writing the document
//! with its place appended, holds when its place heads the queue, and releases by writing it
//! without its place; a write compares the key's mod revision with the one it computed from, and
//! one that lost has the current document back in the same transaction and tries again from it
//! at once, with no pause and no other read. Every waiter watches the key from before its first
//! enqueue, as a baton waiter watches its document, and is woken by the push of the release that
//! made it head. What sets this apart from `etcd.rs`'s floor is only that: one key written by
//! compare-and-swap, where there each entry is a key of its own put beside the others, which
//! cannot make a release lose. No lease, fence, heartbeat or history.
//!
//! The document is `NEXT;P1,P2,…`: the next place to hand out and the places waiting, the first
//! holding. A client alone never waits and watches nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchStream,
};

use super::etcd::{connect_watching, next_message, Counts, PREFIX};
use super::{cycle_together, Checks, Cycling, Round};

/// `n` clients cycling on `key` for `duration`: grants a second made inside it, and the
/// transactions they sent for each of their turns.
pub(super) async fn one_round(
    url: &str,
    key: &str,
    n: usize,
    duration: std::time::Duration,
) -> Result<Round> {
    let doc_key = format!("{PREFIX}{key}/document");
    let counts = Arc::new(Counts::default());
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let (connection, watches) = connect_watching(url, &doc_key, false, n).await?;
        clients.push(Client {
            connection,
            watches,
            key: doc_key.clone(),
            known: Known::default(),
            counts: counts.clone(),
        });
    }
    let (rate, turns) = cycle_together(clients, duration).await?;
    Ok(counts.round(rate, turns))
}

/// The document as a client last saw it, with its mod revision (0: the key has none yet).
#[derive(Clone, Debug, Default, PartialEq)]
struct Known {
    revision: i64,
    next: i64,
    places: Vec<i64>,
}

impl Known {
    /// The document of a key's value, at `revision`.
    fn parse(revision: i64, bytes: &[u8]) -> Result<Known> {
        let text = std::str::from_utf8(bytes).context("the document is not UTF-8")?;
        let (next, places) = text.split_once(';').context("the document has no `;`")?;
        let places = places
            .split(',')
            .filter(|place| !place.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("a place in the document")?;
        Ok(Known {
            revision,
            next: next.parse().context("the document's next place")?,
            places,
        })
    }

    fn encode(&self) -> String {
        let places: Vec<String> = self.places.iter().map(i64::to_string).collect();
        format!("{};{}", self.next, places.join(","))
    }
}

/// One client: its connection, its watch of the document (none when alone), and the document
/// as it last saw it.
struct Client {
    connection: etcd_client::Client,
    watches: Option<WatchStream>,
    key: String,
    known: Known,
    counts: Arc<Counts>,
}

#[async_trait]
impl Cycling for Client {
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let mine = self
            .write(|doc| {
                let place = doc.next;
                doc.next += 1;
                doc.places.push(place);
                Ok(place)
            })
            .await?;
        if self.known.places.first() != Some(&mine) {
            self.wait_until_first(mine).await?;
        }
        let held = Instant::now();
        checks.hold(mine);
        self.write(|doc| match doc.places.first() {
            Some(first) if *first == mine => {
                doc.places.remove(0);
                Ok(())
            }
            _ => bail!("place {mine} released while not first in {doc:?}: the floor is wrong"),
        })
        .await?;
        Ok(held)
    }
}

impl Client {
    /// Writes `change` of the known document by compare-and-swap, from the document a lost
    /// write returns until one lands: the known document is then the one written.
    async fn write<T>(&mut self, change: impl Fn(&mut Known) -> Result<T>) -> Result<T> {
        loop {
            let mut doc = self.known.clone();
            let made = change(&mut doc)?;
            let compare = Compare::mod_revision(self.key.as_str(), CompareOp::Equal, doc.revision);
            let transaction = Txn::new()
                .when([compare])
                .and_then([TxnOp::put(self.key.as_str(), doc.encode(), None)])
                .or_else([TxnOp::get(self.key.as_str(), None)]);
            self.counts.requests.fetch_add(1, Ordering::Relaxed);
            let response = self.connection.txn(transaction).await.context("a write")?;
            if response.succeeded() {
                let header = response.header().context("a write's header")?;
                doc.revision = header.revision();
                self.known = doc;
                return Ok(made);
            }
            self.counts.lost.fetch_add(1, Ordering::Relaxed);
            self.known = current(&response)?;
        }
    }

    /// Waits for the push of a document that `mine` heads.
    async fn wait_until_first(&mut self, mine: i64) -> Result<()> {
        let Some(watches) = &mut self.watches else {
            bail!("a client alone found a place before its own: the floor is wrong");
        };
        loop {
            let response = next_message(watches).await?;
            // The newest document pushed: only its holder takes a place off the queue, so once
            // `mine` heads one it heads every later one until this client releases.
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                if event.event_type() == EventType::Put && kv.mod_revision() >= self.known.revision
                {
                    self.known = Known::parse(kv.mod_revision(), kv.value())?;
                }
            }
            if self.known.places.first() == Some(&mine) {
                return Ok(());
            }
        }
    }
}

/// The document a failed compare-and-swap read in its other branch.
fn current(response: &TxnResponse) -> Result<Known> {
    match response.op_responses().into_iter().next() {
        Some(TxnOpResponse::Get(read)) => match read.kvs().first() {
            Some(kv) => Known::parse(kv.mod_revision(), kv.value()),
            None => Ok(Known::default()),
        },
        other => bail!("a lost write's read answered {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::Known;

    #[test]
    fn a_document_reads_back_as_written() -> anyhow::Result<()> {
        let doc = Known {
            revision: 7,
            next: 12,
            places: vec![9, 10, 11],
        };
        assert_eq!(Known::parse(7, doc.encode().as_bytes())?, doc);
        let empty = Known {
            revision: 3,
            next: 4,
            places: Vec::new(),
        };
        assert_eq!(Known::parse(3, empty.encode().as_bytes())?, empty);
        Ok(())
    }
}
