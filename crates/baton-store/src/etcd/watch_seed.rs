//! A key's seed: one read of its document and arrivals, in a task of its own, from which its
//! arrivals watch starts ([`super::watched_arrivals`]). The watch task goes on serving its
//! stream meanwhile and takes the answer from a channel.

use std::time::Duration;

use etcd_client::{
    GetOptions, KvClient, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::sync::mpsc;

use super::layout::Layout;
use super::watched_arrivals;

/// How many times a seed's read is tried, pausing about 15 s in all (a reconnection's seeds
/// may meet an etcd still electing its leader); a key whose seed fails is pushed without
/// arrivals until its document's watch is next made. A read that can never succeed (the
/// arrivals not readable with the store's role) is not tried for ever.
const SEED_TRIES: u32 = 8;

/// How long one try may take; the pause after a failed one, doubling up to the most.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);
const PAUSE: Duration = Duration::from_millis(100);
const PAUSE_MOST: Duration = Duration::from_secs(5);

/// A seed's read of a key's document and arrivals, back from its task, for the seed asked for
/// as `generation`; `None` when the read failed.
pub(super) struct Seeded {
    pub(super) key: String,
    pub(super) generation: u64,
    pub(super) read: Option<SeedRead>,
}

/// What a seed read, in one transaction: the revision it read at, the document's revision and
/// bytes (if any), and the arrivals, oldest first, each with its creation revision.
pub(super) struct SeedRead {
    pub(super) revision: i64,
    pub(super) doc: Option<(i64, Vec<u8>)>,
    pub(super) arrivals: Vec<(i64, watched_arrivals::Arrival)>,
}

/// Reads `key`'s document and arrivals in a task of its own, answering on `answer` as the seed
/// `generation`.
pub(super) fn spawn(
    kv: KvClient,
    layout: &Layout,
    key: &str,
    generation: u64,
    answer: mpsc::UnboundedSender<Seeded>,
) {
    let reads = Txn::new().and_then(vec![
        TxnOp::get(layout.doc_key(key), None),
        TxnOp::get(
            layout.arrivals_start(key),
            Some(
                GetOptions::new()
                    .with_range(layout.arrivals_end(key))
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        ),
    ]);
    let key = key.to_owned();
    tokio::spawn(async move {
        let read = read_seed(kv, reads).await;
        let _ = answer.send(Seeded {
            key,
            generation,
            read,
        });
    });
}

/// The key's document and arrivals as `reads` finds them; `None` when no try of
/// [`SEED_TRIES`] answered.
async fn read_seed(mut kv: KvClient, reads: Txn) -> Option<SeedRead> {
    let mut pause = PAUSE;
    for _ in 0..SEED_TRIES {
        match tokio::time::timeout(TRY_TIMEOUT, kv.txn(reads.clone())).await {
            Ok(Ok(response)) => return seed_of(response),
            Ok(Err(error)) => tracing::debug!(%error, "an etcd watch's seed not read"),
            Err(_) => tracing::debug!("an etcd watch's seed not read in time"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(PAUSE_MOST);
    }
    None
}

/// What a seed's transaction read: its document's get, then its arrivals'.
fn seed_of(mut response: TxnResponse) -> Option<SeedRead> {
    let revision = response.take_header()?.revision();
    let mut gets = response.op_responses().into_iter().map(|op| match op {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    });
    let (Some(Some(mut doc)), Some(Some(mut arrivals))) = (gets.next(), gets.next()) else {
        return None;
    };
    let doc = doc.take_kvs().into_iter().next().map(|kv| {
        let revision = kv.mod_revision();
        (revision, kv.into_key_value().1)
    });
    let arrivals = arrivals.take_kvs().into_iter().map(|kv| {
        let created = kv.create_revision();
        let (key, bytes) = kv.into_key_value();
        (created, watched_arrivals::Arrival { key, bytes })
    });
    Some(SeedRead {
        revision,
        doc,
        arrivals: arrivals.collect(),
    })
}
