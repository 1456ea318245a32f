//! The floor on etcd of a lock kept in one document with arrivals beside it: the queue in one
//! etcd key written by compare-and-swap, as in `etcd_document.rs`, but a client that finds the
//! key held enqueues by putting an arrival, a key of its own with no compare, which no write can
//! make lose. The holder's release takes in the arrivals it knows of (in the order etcd created
//! them), removing them in the same transaction, so the next holder finds its place in the
//! document; only the holder writes a held document, so a release does not lose either. A client
//! that finds the key free with no arrival anywhere claims it by compare-and-swap of the
//! document (and of the arrivals' absence); one whose arrival waits on a free key takes in every
//! arrival it knows of, its own among them.
//!
//! Every client watches the document and the arrivals (one prefix) from before its first turn,
//! and knows the arrivals as of the last revision the watch (or a lost write's read) showed it:
//! what it does not know yet came after everything it knows, so taking in what it knows keeps
//! arrival order. A client alone never waits and watches nothing; it claims and releases, two
//! writes a turn, as in `etcd_document.rs`. No lease, fence, heartbeat, history, or guard
//! against a late copy of an arrival: what it measures is the best this shape can do.
//!
//! The document is `NEXT;WRITES;PLACE/CLIENT,…` (then `;PAD`, filler, with `--pad-document`):
//! the next place to hand out, the writes of the document so far, and the queue, the first
//! holding. An arrival is the key `a/CLIENT` under the round's prefix; its value is the writes
//! of the document its client had seen, so that the write that takes it in counts how many it
//! waited for.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, WatchStream,
};

use super::etcd::{connect_watching, next_message, Counts, PREFIX};
use super::{cycle_together, Checks, Cycling, Round};

/// How the clients of a round use the key.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    /// Clients watch the document alone and read the arrivals (with the document, one
    /// transaction) where they need them: the holder before its release, and a waiter whose
    /// arrival may be pending on a free key.
    pub(super) reads: bool,
    /// Bytes of filler in every write of the document (a fourth field, after a third `;`).
    pub(super) pad: usize,
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it, and the
/// requests they sent for each of their turns.
pub(super) async fn one_round(
    url: &str,
    key: &str,
    n: usize,
    duration: std::time::Duration,
    shape: Shape,
) -> Result<Round> {
    let base = format!("{PREFIX}{key}/");
    let document = format!("{base}d");
    let counts = Arc::new(Counts::default());
    let pad: Arc<str> = "p".repeat(shape.pad).into();
    let reads = shape.reads;
    let mut clients = Vec::with_capacity(n);
    for id in 0..n {
        let (connection, watches) = match reads {
            true => connect_watching(url, &document, false, n).await?,
            false => connect_watching(url, &base, true, n).await?,
        };
        clients.push(Client {
            connection,
            watches,
            id,
            reads,
            pad: pad.clone(),
            document: document.clone(),
            arrivals: format!("{base}a/"),
            known: Known::default(),
            counts: counts.clone(),
        });
    }
    let (rate, turns) = cycle_together(clients, duration).await?;
    Ok(counts.round(rate, turns))
}

/// The key as a client last saw it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Known {
    /// The document's mod revision (0: it has none yet).
    revision: i64,
    /// The next place to hand out.
    next: i64,
    /// The document's writes so far.
    writes: u64,
    /// Places and their clients, the first holding.
    queue: Vec<(i64, usize)>,
    /// Arrivals not taken in yet: by creation revision, their client and the document writes
    /// it had seen.
    pending: BTreeMap<i64, (usize, u64)>,
    /// The revision `pending` is as of: the watch's events up to it are in it.
    as_of: i64,
}

impl Known {
    /// The document of a key's value.
    fn parse_document(&mut self, revision: i64, bytes: &[u8]) -> Result<()> {
        let text = std::str::from_utf8(bytes).context("the document is not UTF-8")?;
        let (next, rest) = text.split_once(';').context("the document has no `;`")?;
        let (writes, rest) = rest.split_once(';').context("the document has one `;`")?;
        // A fourth field is filler (`Shape::pad`).
        let queue = rest.split(';').next().unwrap_or_default();
        let mut places = Vec::new();
        for entry in queue.split(',').filter(|entry| !entry.is_empty()) {
            let (place, client) = entry.split_once('/').context("a place has no `/`")?;
            places.push((place.parse()?, client.parse()?));
        }
        self.revision = revision;
        self.next = next.parse().context("the document's next place")?;
        self.writes = writes.parse().context("the document's writes")?;
        self.queue = places;
        Ok(())
    }

    /// The document's bytes, `pad` a fourth field (after a third `;`) when there is any.
    fn encode(&self, pad: &str) -> String {
        let places: Vec<String> = self
            .queue
            .iter()
            .map(|(place, client)| format!("{place}/{client}"))
            .collect();
        let mut document = format!("{};{};{}", self.next, self.writes, places.join(","));
        if !pad.is_empty() {
            document.push(';');
            document.push_str(pad);
        }
        document
    }

    /// Moves every pending arrival to the queue's end, oldest first, each with the next place:
    /// returns their creation revisions, clients and the writes each had seen.
    fn take_in(&mut self) -> Vec<(i64, (usize, u64))> {
        let taken: Vec<_> = std::mem::take(&mut self.pending).into_iter().collect();
        for (_, (client, _)) in &taken {
            self.queue.push((self.next, *client));
            self.next += 1;
        }
        taken
    }
}

/// One client: its connection, its watch of the key (none when alone), and the key as it last
/// saw it.
struct Client {
    connection: etcd_client::Client,
    watches: Option<WatchStream>,
    id: usize,
    /// Whether it reads the arrivals where it needs them instead of watching them.
    reads: bool,
    /// The filler every write of the document carries.
    pad: Arc<str>,
    document: String,
    arrivals: String,
    known: Known,
    counts: Arc<Counts>,
}

#[async_trait]
impl Cycling for Client {
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let id = self.id;
        let mut arrived: Option<i64> = None;
        let mine = loop {
            if let Some(&(place, _)) = self.known.queue.first().filter(|(_, c)| *c == id) {
                break place;
            }
            let free = self.known.queue.is_empty();
            match arrived {
                None if free && self.known.pending.is_empty() => {
                    self.write(true, |known| {
                        known.queue.push((known.next, id));
                        known.next += 1;
                    })
                    .await?;
                }
                None => arrived = Some(self.arrive().await?),
                Some(revision) if free && self.reads && self.known.as_of < revision => {
                    self.known = self.read_key().await?;
                }
                Some(revision) if free && self.known.as_of >= revision => {
                    if self.known.pending.is_empty() {
                        bail!(
                            "arrival {revision} is neither pending nor queued: the floor is wrong"
                        );
                    }
                    self.write(false, |_| {}).await?;
                }
                Some(_) => self.next_event().await?,
            }
        };
        let held = Instant::now();
        checks.hold(mine);
        if self.reads {
            self.known = self.read_key().await?;
        }
        while !self
            .write(false, |known| {
                known.queue.retain(|(_, client)| *client != id);
            })
            .await?
        {
            if self.known.queue.first().map(|(_, client)| *client) != Some(id) {
                bail!("client {id} lost its turn before releasing it: the floor is wrong");
            }
        }
        Ok(held)
    }
}

impl Client {
    /// Puts this client's arrival: returns its creation revision.
    async fn arrive(&mut self) -> Result<i64> {
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{}", self.arrivals, self.id);
        let response = self
            .connection
            .put(key, self.known.writes.to_string(), None)
            .await
            .context("an arrival")?;
        Ok(response.header().context("an arrival's header")?.revision())
    }

    /// One compare-and-swap of the document: `change` applied to the known document after every
    /// known arrival is taken in, compared with the known document's revision, each arrival
    /// taken in removed (compared first with the one known). With `alone_on_it`, also compared
    /// with there being no arrival at all. Returns whether it was written; either way the key is
    /// then known as it stands.
    async fn write(&mut self, alone_on_it: bool, change: impl Fn(&mut Known)) -> Result<bool> {
        let mut next = self.known.clone();
        let taken = next.take_in();
        next.writes += 1;
        change(&mut next);
        let mut compares = vec![Compare::mod_revision(
            self.document.as_str(),
            CompareOp::Equal,
            self.known.revision,
        )];
        let mut writes = vec![TxnOp::put(
            self.document.as_str(),
            next.encode(&self.pad),
            None,
        )];
        for (created, (client, _)) in &taken {
            let key = format!("{}{client}", self.arrivals);
            compares.push(Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                *created,
            ));
            writes.push(TxnOp::delete(key, None));
        }
        if alone_on_it {
            let none = Compare::create_revision(self.arrivals.as_str(), CompareOp::Equal, 0);
            compares.push(none.with_prefix());
        }
        let transaction = Txn::new()
            .when(compares)
            .and_then(writes)
            .or_else(self.key_reads());
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        let response = self.connection.txn(transaction).await.context("a write")?;
        let revision = response.header().context("a write's header")?.revision();
        if response.succeeded() {
            for (_, (_, seen)) in &taken {
                self.counts.waited(next.writes.saturating_sub(*seen));
            }
            next.revision = revision;
            self.known = next;
            return Ok(true);
        }
        self.counts.lost.fetch_add(1, Ordering::Relaxed);
        self.known = self.read_back(revision, response.op_responses())?;
        Ok(false)
    }

    /// The reads of the key's document and arrivals, in this order ([`Self::read_back`]).
    fn key_reads(&self) -> [TxnOp; 2] {
        let arrivals = GetOptions::new().with_prefix();
        [
            TxnOp::get(self.document.as_str(), None),
            TxnOp::get(self.arrivals.as_str(), Some(arrivals)),
        ]
    }

    /// The key as it stands: its document and arrivals, read in one transaction.
    async fn read_key(&mut self) -> Result<Known> {
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        let reads = Txn::new().and_then(self.key_reads());
        let response = self.connection.txn(reads).await.context("a read")?;
        let revision = response.header().context("a read's header")?.revision();
        self.read_back(revision, response.op_responses())
    }

    /// The key as a lost write read it at `revision`: its document, then its arrivals.
    fn read_back(&self, revision: i64, reads: Vec<TxnOpResponse>) -> Result<Known> {
        let mut known = Known {
            as_of: revision,
            ..Known::default()
        };
        let mut reads = reads.into_iter();
        let (Some(TxnOpResponse::Get(document)), Some(TxnOpResponse::Get(arrivals))) =
            (reads.next(), reads.next())
        else {
            bail!("a lost write's reads answered something else");
        };
        if let Some(kv) = document.kvs().first() {
            self.counts.document(kv.value().len());
            known.parse_document(kv.mod_revision(), kv.value())?;
        }
        for kv in arrivals.kvs() {
            known
                .pending
                .insert(kv.create_revision(), self.arrival_of(kv)?);
        }
        Ok(known)
    }

    /// Waits for the watch's next events and learns from them.
    async fn next_event(&mut self) -> Result<()> {
        let Some(watches) = &mut self.watches else {
            bail!("a client alone had to wait: the floor is wrong");
        };
        let response = next_message(watches).await?;
        // A transaction's events come in one message, the document's first: what the arrivals
        // are known as of moves only once all of them are in.
        let as_of = self.known.as_of;
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            if kv.key() == self.document.as_bytes() {
                if kv.mod_revision() > self.known.revision {
                    self.counts.document(kv.value().len());
                    self.known.parse_document(kv.mod_revision(), kv.value())?;
                }
            } else if kv.mod_revision() > as_of {
                match event.event_type() {
                    EventType::Put => {
                        let arrival = self.arrival_of(kv)?;
                        self.known.pending.insert(kv.create_revision(), arrival);
                    }
                    EventType::Delete => {
                        let client = self.client_of(kv)?;
                        self.known.pending.retain(|_, (c, _)| *c != client);
                    }
                }
            }
            // Watching the document alone, a client knows arrivals only as of its last read.
            if !self.reads {
                self.known.as_of = self.known.as_of.max(kv.mod_revision());
            }
        }
        Ok(())
    }

    /// The client of the arrival `kv` and the document writes it had seen.
    fn arrival_of(&self, kv: &KeyValue) -> Result<(usize, u64)> {
        let seen = kv.value_str().context("an arrival is not UTF-8")?;
        let seen = seen.parse().context("an arrival's writes seen")?;
        Ok((self.client_of(kv)?, seen))
    }

    /// The client whose arrival `kv` is.
    fn client_of(&self, kv: &KeyValue) -> Result<usize> {
        let key = kv.key_str().context("an arrival's key is not UTF-8")?;
        let client = key
            .strip_prefix(self.arrivals.as_str())
            .with_context(|| format!("{key:?} is not an arrival"))?;
        client.parse().with_context(|| format!("{key:?}'s client"))
    }
}

#[cfg(test)]
mod tests {
    use super::Known;

    #[test]
    fn a_document_reads_back_as_written_and_takes_in_arrivals_oldest_first() -> anyhow::Result<()> {
        let mut doc = Known {
            revision: 7,
            next: 12,
            writes: 30,
            queue: vec![(10, 3), (11, 0)],
            pending: [(40, (5, 29)), (38, (2, 28))].into_iter().collect(),
            as_of: 41,
        };
        assert_eq!(doc.take_in(), [(38, (2, 28)), (40, (5, 29))]);
        assert_eq!(doc.queue, [(10, 3), (11, 0), (12, 2), (13, 5)]);
        for pad in ["", "ppp"] {
            let mut read = Known::default();
            read.parse_document(9, doc.encode(pad).as_bytes())?;
            assert_eq!(
                (read.next, read.writes, &read.queue, read.revision),
                (14, 30, &doc.queue, 9)
            );
        }
        assert_eq!(doc.encode("ppp"), "14;30;10/3,11/0,12/2,13/5;ppp");
        let mut empty = Known::default();
        empty.parse_document(3, b"4;2;")?;
        assert_eq!((empty.next, empty.writes, empty.queue.len()), (4, 2, 0));
        Ok(())
    }
}
