//! Finding work: which keys a worker serves ([`KeyPatterns`]), which of them have a job ready
//! (the due index, else every key), claiming the one waiting longest, and waking an idle worker
//! when a served key may have new work.

use std::sync::Arc;
use std::time::Duration;

use baton_core::{Doc, Op, Request};

use super::claim::{claim, ClaimOptions, Job};
use crate::coordinator::{Coordinator, KeySnapshot};
use crate::error::ClientError;
/// Which keys a worker serves: exact keys, and prefixes ending in `/`; none means every key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPatterns(pub(super) Vec<String>);

impl KeyPatterns {
    /// Patterns as given on the command line.
    pub fn new(patterns: Vec<String>) -> KeyPatterns {
        KeyPatterns(patterns)
    }

    /// Whether `key` is served.
    pub fn matches(&self, key: &str) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|p| {
                if p.ends_with('/') {
                    key.starts_with(p.as_str())
                } else {
                    key == p
                }
            })
    }

    /// What the due index says of the served keys, or `None` where the store keeps none (then
    /// read every served key). Each pattern is one read of the index (an exact key is a prefix
    /// whose other keys are dropped), at most [`DUE_SCAN`] keys each.
    async fn look_at_due_index(&self, coord: &Coordinator) -> Result<Option<DueLook>, ClientError> {
        let store = coord.store();
        if !store.capabilities().due_index {
            return Ok(None);
        }
        // Job time, as the writers computed the due times: the store's clock, else wall time.
        // A reading may lag the clock a writer read (by its `behind_ms`, or by the skew of two
        // machines' wall clocks): a key due within that slack counts as due now, or a job
        // submitted a millisecond "after" this reading would wait for the next look.
        let (now_ms, slack_ms) = match store.clock().await? {
            baton_store::StoreClock::Time {
                now_ms, behind_ms, ..
            } => (
                now_ms,
                behind_ms.saturating_add(store.capabilities().clock_uncertain_ms),
            ),
            baton_store::StoreClock::None => (crate::time::wall_ms(), WALL_SKEW_SLACK_MS),
        };
        let patterns: Vec<&str> = if self.0.is_empty() {
            vec![""]
        } else {
            self.0.iter().map(String::as_str).collect()
        };
        let due_by = now_ms.saturating_add(slack_ms);
        // The documents of the first keys due come along: a claim starts from them, as from
        // a cache, and needs no read of its own.
        let docs = baton_store::WithDocs {
            first: DUE_DOCS,
            due_by_ms: due_by,
        };
        let mut due: Vec<baton_store::DueKey> = Vec::new();
        let mut more_due = false;
        for pattern in patterns {
            let found = store
                .due_keys(pattern, DUE_SCAN, docs)
                .await?
                .unwrap_or_default();
            // A full scan whose last key is due: more keys may be due beyond it.
            more_due |= found.len() >= DUE_SCAN && found.last().is_some_and(|d| d.due_ms <= due_by);
            due.extend(
                found
                    .into_iter()
                    .filter(|d| pattern.is_empty() || pattern.ends_with('/') || d.key == pattern),
            );
        }
        due.sort_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        due.dedup_by(|a, b| a.key == b.key);
        let next_in = due
            .first()
            .map(|d| Duration::from_millis(d.due_ms.saturating_sub(due_by)));
        let keys = due.into_iter().take_while(|d| d.due_ms <= due_by).collect();
        Ok(Some(DueLook {
            keys,
            next_in,
            more_due,
        }))
    }

    /// Every key that exists and is served, sorted.
    async fn keys(&self, coord: &Coordinator) -> Result<Vec<String>, ClientError> {
        let mut keys = Vec::new();
        if self.0.is_empty() {
            keys = coord.keys("").await?;
        }
        for pattern in &self.0 {
            if pattern.ends_with('/') {
                keys.extend(coord.keys(pattern).await?);
            } else {
                keys.push(pattern.clone());
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// A key whose head is a job a worker may claim now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyKey {
    /// The key.
    pub key: String,
    /// Since when its head job could have run (this machine's wall clock, at worst the clocks
    /// of the processes that wrote the key): submitted, ready, and its key free. The key whose
    /// head has waited longest is served first, so keys take turns.
    pub ready_since_wall_ms: u64,
}

/// How many keys a look at the due index reads per prefix: the earliest due. A worker claims
/// one job per look, so it needs only enough keys to get past those other workers take at the
/// same moment; every key read costs the store (on PostgreSQL, 256 keys a look were most of
/// its work per job). More due keys than this wait for a later look (they are served earliest
/// first, so none waits forever), and a look that found this many due and claimed none looks
/// again at once ([`LOOKS_PER_CLAIM`]).
pub const DUE_SCAN: usize = 32;

/// How many looks at the due index one [`look_for_job`] makes when each found a full scan of
/// keys due ([`DUE_SCAN`]) and every one of them was taken by other workers first.
const LOOKS_PER_CLAIM: usize = 4;

/// How far apart the wall clocks of two machines may be for a job's due time (on a store
/// without a clock) to count as now: a later look finds it anyway; this only spares a wait.
const WALL_SKEW_SLACK_MS: u64 = 1_000;

/// How many documents of the first keys due a look at the due index reads with it, where the
/// store can ([`baton_store::WithDocs`]): enough for a worker that loses the first few keys to
/// other workers' claims to claim a later one without a read of its own.
const DUE_DOCS: usize = 8;

/// A look at the due index.
struct DueLook {
    /// The served keys due now, earliest first: the key waiting longest for a worker first;
    /// the first few with their documents where the store read them along.
    keys: Vec<baton_store::DueKey>,
    /// When the earliest served key is due, from now (zero: due now).
    next_in: Option<Duration>,
    /// A prefix had more keys due now than the look read ([`DUE_SCAN`]).
    more_due: bool,
}

/// The served keys whose head job may be claimed now, longest waiting first.
pub async fn ready_keys(
    coord: &Coordinator,
    patterns: &KeyPatterns,
) -> Result<Vec<ReadyKey>, ClientError> {
    let keys = match patterns.look_at_due_index(coord).await? {
        Some(look) => look.keys.into_iter().map(|d| d.key).collect(),
        None => patterns.keys(coord).await?,
    };
    let mut ready = Vec::new();
    for key in keys {
        let snapshot = coord.read(&key).await?;
        let Some((doc, expired)) = as_expired_now(coord, &key, &snapshot) else {
            continue;
        };
        let now_ms = match snapshot.clock {
            baton_store::StoreClock::Time { now_ms, .. } => now_ms,
            baton_store::StoreClock::None => snapshot.wall_ms,
        };
        let head = match baton_core::job::claimable_head(&doc, now_ms, snapshot.wall_ms) {
            Ok(head) => head,
            // Nothing to claim, but a run ran out of lease: a claim's write ends it (and
            // starts its backoff), or it would hold its key until someone wrote.
            Err(_) if expired => {
                ready.push(ReadyKey {
                    key,
                    ready_since_wall_ms: 0,
                });
                continue;
            }
            Err(_) => continue,
        };
        // Job time to this machine's wall clock: the same instant, `now - ready_at` ago.
        let ready_wall_ms = head
            .job
            .as_deref()
            .and_then(|j| j.ready_at_ms)
            .map_or(0, |at| {
                snapshot.wall_ms.saturating_sub(now_ms.saturating_sub(at))
            });
        // Since when the head could run: submitted, past its time, and the key free for it
        // (its last run's end). Not since its submit alone: a key with a long backlog would
        // then always have the longest-waiting head and starve every other key.
        let since = head
            .enqueued_wall_ms
            .max(ready_wall_ms)
            .max(doc.summary.last_finished_wall_ms);
        ready.push(ReadyKey {
            key,
            ready_since_wall_ms: since,
        });
    }
    ready.sort_by(|a, b| (a.ready_since_wall_ms, &a.key).cmp(&(b.ready_since_wall_ms, &b.key)));
    Ok(ready)
}

/// `key`'s document as it will be once what has ended by now is expired, and whether anything
/// has: a run whose worker died holds its key until someone writes, and a claim is that write
/// (its own expiry step ends the run first).
fn as_expired_now(coord: &Coordinator, key: &str, snapshot: &KeySnapshot) -> Option<(Doc, bool)> {
    let doc = snapshot.doc.as_ref()?;
    let observer = coord.observer(key);
    let uncertain_ms = coord.store().capabilities().clock_uncertain_ms;
    let clock = crate::time::core_clock(
        &snapshot.clock,
        uncertain_ms,
        &observer,
        coord.mono_ms(),
        snapshot.wall_ms,
    );
    let tick = Request::new(String::new(), Op::Tick);
    // The freeze the document last recorded stands (a writer's copy of the settings decides).
    let inputs = baton_core::Inputs {
        paused: doc.paused.as_ref(),
        ..Default::default()
    };
    match baton_core::apply_with(Some(doc), &tick, &clock, inputs) {
        Ok(applied) => Some((applied.doc, applied.changed)),
        Err(_) => Some((doc.clone(), false)),
    }
}

/// What a worker's look for work found.
#[derive(Debug)]
pub enum Look {
    /// A job, claimed.
    Claimed(Box<Job>),
    /// Nothing to claim now.
    Idle {
        /// How long until a served key next needs a worker, by the due index (zero: one does
        /// now, though it could not be claimed yet; `None`: no served key has work, or the
        /// store keeps no index). An idle worker waits no longer than this, so a backoff or a
        /// `--not-before` that ends is noticed then, push or no push.
        next_due_in: Option<Duration>,
    },
}

/// Claims the head job of the served key that has waited longest, trying the next key when
/// another worker was first; `None` when no served key has a job to claim now.
pub async fn claim_next(
    coord: &Arc<Coordinator>,
    patterns: &KeyPatterns,
    options: &ClaimOptions,
) -> Result<Option<Job>, ClientError> {
    Ok(match look_for_job(coord, patterns, options).await? {
        Look::Claimed(job) => Some(*job),
        Look::Idle { .. } => None,
    })
}

/// [`claim_next`], saying also when to look again if there is nothing to claim: one read of
/// the due index serves both. A look whose keys were all taken by other workers while more
/// were due than it read looks again, up to [`LOOKS_PER_CLAIM`] times.
pub async fn look_for_job(
    coord: &Arc<Coordinator>,
    patterns: &KeyPatterns,
    options: &ClaimOptions,
) -> Result<Look, ClientError> {
    let mut looks = 0;
    loop {
        looks += 1;
        let (look, more_due) = look_once(coord, patterns, options).await?;
        if matches!(look, Look::Claimed(_)) || !more_due || looks >= LOOKS_PER_CLAIM {
            return Ok(look);
        }
    }
}

/// One look: the served keys in order of service, each tried by a claim until one gives a job;
/// and whether more keys were due than the look read.
async fn look_once(
    coord: &Arc<Coordinator>,
    patterns: &KeyPatterns,
    options: &ClaimOptions,
) -> Result<(Look, bool), ClientError> {
    // With a due index, its order is the order of service (a key's due time is since when
    // its head job could run): try the keys in it, each read only by its own claim. Without
    // one, read every served key to find the ready ones and their order.
    let look = match patterns.look_at_due_index(coord).await? {
        Some(look) => look,
        None => DueLook {
            keys: ready_keys(coord, patterns)
                .await?
                .into_iter()
                .map(|r| baton_store::DueKey {
                    key: r.key,
                    due_ms: r.ready_since_wall_ms,
                    doc: None,
                })
                .collect(),
            next_in: None,
            more_due: false,
        },
    };
    let (next_due_in, more_due) = (look.next_in, look.more_due);
    let mut keys: Vec<(String, Option<baton_store::Versioned>)> =
        look.keys.into_iter().map(|d| (d.key, d.doc)).collect();
    let races = coord.claim_races();
    if races.lately(coord.mono_ms()) {
        spread(&mut keys);
    }
    for i in 0..keys.len() {
        let (key, doc) = std::mem::take(&mut keys[i]);
        let read_version = doc.as_ref().map(|d| d.version.clone());
        if let Some(doc) = doc {
            coord.take_read(&key, doc)?;
        }
        if let Some(job) = claim(coord, &key, options).await? {
            return Ok((Look::Claimed(Box::new(job)), more_due));
        }
        // Lost to another writer, not merely not ready yet (a key due within the reading's
        // slack): the key changed since the index showed it.
        let lost = read_version.is_some_and(|read| coord.cached_version(&key) != Some(read));
        if lost {
            races.lost(coord.mono_ms());
            spread(&mut keys[i + 1..]);
        }
    }
    Ok((Look::Idle { next_due_in }, more_due))
}

/// How many of the next keys a worker tries in a random order after losing a key to another
/// worker, and from the start of its looks while it loses keys
/// ([`crate::claim_races::ClaimRaces`]).
const LOSER_SPREAD: usize = 8;

/// After a claim found nothing on a key the due index had just shown due (another worker took
/// it a moment earlier): the workers that read the same index are going down the same list,
/// and in the same order they would collide again key after key, each collision a wasted
/// write. The next few keys, all due now, are tried in a random order instead; service stays
/// in due order to within those few keys.
fn spread<T>(rest: &mut [T]) {
    let n = rest.len().min(LOSER_SPREAD);
    for i in (1..n).rev() {
        rest.swap(i, rand::random_range(0..=i));
    }
}

/// Wakes an idle worker when a served key may have new work: a push from the store for each
/// pattern (a prefix, an exact key, or every key) where the store pushes, else nothing — then
/// [`WorkWaker::wait`] is the poll interval alone. A wake-up is a hint to look again
/// ([`claim_next`]), never a claim.
///
/// A worker with no room for another job needs no wake-up: [`WorkWaker::rest`] drops the
/// subscriptions until its next [`WorkWaker::wait`]. On PostgreSQL that is more than a message
/// saved: the server signals every connection that listens at every write that notifies, and
/// busy workers listening cost it a fifth to a quarter of its CPU in a jobs run
/// (BENCHMARKS.md).
pub struct WorkWaker {
    store: Arc<dyn baton_store::Store>,
    patterns: Vec<String>,
    handles: Vec<baton_store::WatchHandle>,
    /// Dropped by [`WorkWaker::rest`]: subscribed again by the next wait.
    resting: bool,
}

impl WorkWaker {
    /// Subscribes to the store's push for the served keys, where it has one.
    pub async fn new(
        coord: &Coordinator,
        patterns: &KeyPatterns,
    ) -> Result<WorkWaker, ClientError> {
        let patterns = if patterns.0.is_empty() {
            vec![String::new()]
        } else {
            patterns.0.clone()
        };
        let mut waker = WorkWaker {
            store: coord.store().clone(),
            patterns,
            handles: Vec::new(),
            resting: false,
        };
        waker.subscribe().await?;
        Ok(waker)
    }

    async fn subscribe(&mut self) -> Result<(), ClientError> {
        let mut handles = Vec::new();
        for pattern in &self.patterns {
            // An exact key is a prefix too: a wake-up for a longer key is only spurious.
            if let Some(handle) = self.store.watch_prefix(pattern).await? {
                handles.push(handle);
            }
        }
        self.handles = handles;
        self.resting = false;
        Ok(())
    }

    /// Whether a push will wake [`WorkWaker::wait`] (else it waits the poll interval).
    pub fn pushes(&self) -> bool {
        !self.handles.is_empty() || self.resting
    }

    /// Stops the pushes while the worker has no room for a job: the next
    /// [`WorkWaker::wait`] subscribes again.
    pub fn rest(&mut self) {
        if !self.handles.is_empty() {
            self.handles.clear();
            self.resting = true;
        }
    }

    /// Resolves at the next push that may mean new work, or after `poll`, whichever is first.
    /// After [`WorkWaker::rest`] it subscribes again and resolves at once: what changed while
    /// it rested was not pushed, so the worker looks again before it waits.
    pub async fn wait(&mut self, poll: Duration) {
        if self.resting {
            if self.subscribe().await.is_err() {
                // The store fails: the next look says so; until then, the poll.
                tokio::time::sleep(poll).await;
            }
            return;
        }
        if self.handles.is_empty() {
            tokio::time::sleep(poll).await;
            return;
        }
        let changes = self.handles.iter_mut().map(|h| Box::pin(h.changed()));
        let any_change = first_of(changes);
        // A closed store is noticed by the next look; until then, the poll.
        let _ = tokio::time::timeout(poll, any_change).await;
    }
}

/// The first of several futures to finish (without another dependency for `select_all`).
async fn first_of<F: std::future::Future + Unpin>(futures: impl Iterator<Item = F>) {
    let mut futures: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for future in &mut futures {
            if std::pin::Pin::new(future).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_shuffles_only_the_first_few_keys() {
        for _ in 0..100 {
            let mut keys: Vec<usize> = (0..10).collect();
            spread(&mut keys);
            let mut first: Vec<usize> = keys[..LOSER_SPREAD].to_vec();
            first.sort_unstable();
            assert_eq!(first, (0..LOSER_SPREAD).collect::<Vec<_>>());
            assert_eq!(
                keys[LOSER_SPREAD..],
                (LOSER_SPREAD..10).collect::<Vec<_>>()[..]
            );
        }
        let mut short = vec![7];
        spread(&mut short);
        assert_eq!(short, [7]);
    }
}
