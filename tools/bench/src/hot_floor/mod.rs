//! `hot-floor`: what a first-come lock kept in a store, whose releaser wakes the next in line,
//! makes of one hot key with N clients against one client alone: the floor under B3 on SQLite,
//! PostgreSQL, Redis and etcd (BENCHMARKS.md). Not a lock anyone should use.
//!
//! Each does what any such lock cannot skip, and nothing else: a client enqueues in one write
//! (a row of a queue table, which says whether it is first), waits for the releaser's word,
//! and releases in a second write, which reads the next in line and tells it: two writes a
//! grant, as baton's. None has the rest: no document, lease, fence, heartbeat or history; a
//! client told takes the word as its grant without a read. One client alone cycles through the
//! same two writes and never waits. What N clients make against one here, no lock of this
//! shape can beat on that store; what baton makes against this is baton's.
//!
//! Every round checks, in this process, that no two clients held at once and that grants
//! followed arrival (the queue's sequence numbers): a floor that did not lock would be no floor.

mod etcd;
mod etcd_arrivals;
mod etcd_document;
mod postgres;
mod redis;
mod sqlite;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use serde::Serialize;

use crate::peers::table::median;
use crate::setup::{describe_load, load_average_1m};

/// How long a waiter waits for the releaser's word before it reads the queue itself (a
/// datagram lost to a full queue; a notification is not lost, but a waiter checks all the same).
const WAIT_BEFORE_READING: Duration = Duration::from_millis(100);

/// The results of `hot-floor`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// `sqlite`, `postgres`, `redis`, `etcd`, `etcd-document` (the queue one key written by
    /// compare-and-swap), `etcd-arrivals` (that key, and arrivals beside it, watched) or
    /// `etcd-arrivals-read` (the arrivals read before a release instead).
    pub store: &'static str,
    /// Clients on the hot key in the contended rounds.
    pub clients: usize,
    /// Bytes of filler in every write of the document (`etcd-arrivals*`; 0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub document_pad_bytes: usize,
    /// Length of each round.
    pub duration_s: f64,
    /// Grants a second of one client alone, per round.
    pub alone: Vec<f64>,
    /// Grants a second of `clients` clients on one key, per round.
    pub contended: Vec<f64>,
    /// The median contended rate over the median lone rate.
    pub ratio: f64,
    /// Requests sent for each turn (alone, then contended, per round), where the floor counts
    /// them (the one-document floors on etcd).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alone_requests_per_grant: Vec<f64>,
    /// The same with `clients` on the key.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contended_requests_per_grant: Vec<f64>,
    /// Of those, writes that lost their compare-and-swap, with `clients` on the key.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contended_lost_per_grant: Vec<f64>,
    /// Where enqueues are arrivals (`etcd-arrivals*`), with `clients` on the key: the writes
    /// of the document an arrival waited for before one took it in, on average, per round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contended_arrival_wait_mean: Vec<f64>,
    /// ... and the most any arrival waited, per round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contended_arrival_wait_max: Vec<f64>,
    /// Where the floor counts it (`etcd-arrivals*`), with `clients` on the key: the largest
    /// document a client read or was sent, in bytes, per round: what `--pad-document` made it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contended_document_bytes_most: Vec<f64>,
}

/// What one round made: grants a second, and where the floor counts them, its requests and lost
/// writes for each turn.
struct Round {
    rate: f64,
    requests_per_grant: Option<f64>,
    lost_per_grant: Option<f64>,
    /// The document writes an arrival waited for: the mean and the most.
    arrival_wait: Option<(f64, f64)>,
    /// The largest document a client read or was sent, where the floor counts it.
    document_bytes_most: Option<u64>,
}

impl From<f64> for Round {
    fn from(rate: f64) -> Round {
        Round {
            rate,
            requests_per_grant: None,
            lost_per_grant: None,
            arrival_wait: None,
            document_bytes_most: None,
        }
    }
}

/// Where the floor runs.
pub enum On {
    /// A fresh SQLite file in a temporary directory.
    Sqlite,
    /// This PostgreSQL (tables and functions of its own, made again).
    Postgres(String),
    /// This Redis (keys of its own under `baton-bench-hot-floor/`, cleared first).
    Redis(String),
    /// This etcd (keys of its own under `baton-bench-hot-floor/`, removed at the end).
    Etcd(String),
    /// This etcd, the queue one key written by compare-and-swap, as baton keeps a key
    /// (`etcd_document.rs`).
    EtcdDocument(String),
    /// This etcd, the queue one key as baton keeps a key, enqueued into by arrivals beside it
    /// (`etcd_arrivals.rs`).
    EtcdArrivals {
        /// The etcd.
        url: String,
        /// Whether clients watch the document alone and read the arrivals where they need them,
        /// instead of watching the arrivals too.
        reads: bool,
        /// Bytes of filler every write of the document carries, as baton's tickets and fences
        /// make its document larger than the floor's few places: what each watcher is sent.
        pad: usize,
    },
}

/// Rounds of one client alone and of `clients` on one key, alternating which goes first.
pub async fn run(on: On, clients: usize, rounds: usize, duration: Duration) -> Result<Report> {
    let load_average_1m = load_average_1m();
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let path = dir.path().join("floor.db");
    // Runs share an etcd (the tests of its shapes run at once): each keeps its keys under a
    // prefix of its own and removes them when it ends.
    let run = match &on {
        On::Sqlite => sqlite::prepare(&path).map(|()| String::new())?,
        On::Postgres(url) => postgres::prepare(url).await.map(|()| String::new())?,
        On::Redis(url) => redis::prepare(url).await.map(|()| String::new())?,
        On::Etcd(_) | On::EtcdDocument(_) | On::EtcdArrivals { .. } => etcd::run_prefix(),
    };
    let (mut alone, mut contended) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let sizes = if round % 2 == 0 {
            [1, clients]
        } else {
            [clients, 1]
        };
        for n in sizes {
            let key = format!("{run}r{round}-n{n}");
            let round: Round = match &on {
                On::Sqlite => {
                    let path = path.clone();
                    tokio::task::spawn_blocking(move || sqlite::one_round(&path, &key, n, duration))
                        .await
                        .context("a round panicked")??
                        .into()
                }
                On::Postgres(url) => postgres::one_round(url, &key, n, duration).await?.into(),
                On::Redis(url) => redis::one_round(url, &key, n, duration).await?.into(),
                On::Etcd(url) => etcd::one_round(url, &key, n, duration).await?.into(),
                On::EtcdDocument(url) => etcd_document::one_round(url, &key, n, duration).await?,
                On::EtcdArrivals { url, reads, pad } => {
                    let shape = etcd_arrivals::Shape {
                        reads: *reads,
                        pad: *pad,
                    };
                    etcd_arrivals::one_round(url, &key, n, duration, shape).await?
                }
            };
            if n == 1 {
                alone.push(round);
            } else {
                contended.push(round);
            }
        }
    }
    if let On::Etcd(url) | On::EtcdDocument(url) | On::EtcdArrivals { url, .. } = &on {
        etcd::remove(url, &run).await?;
    }
    let rates = |rounds: &[Round]| rounds.iter().map(|round| round.rate).collect::<Vec<_>>();
    let counted = |rounds: &[Round], count: fn(&Round) -> Option<f64>| {
        rounds.iter().filter_map(count).collect::<Vec<_>>()
    };
    let (alone_rates, contended_rates) = (rates(&alone), rates(&contended));
    Ok(Report {
        load_average_1m,
        store: match on {
            On::Sqlite => "sqlite",
            On::Postgres(_) => "postgres",
            On::Redis(_) => "redis",
            On::Etcd(_) => "etcd",
            On::EtcdDocument(_) => "etcd-document",
            On::EtcdArrivals { reads: false, .. } => "etcd-arrivals",
            On::EtcdArrivals { reads: true, .. } => "etcd-arrivals-read",
        },
        document_pad_bytes: match on {
            On::EtcdArrivals { pad, .. } => pad,
            _ => 0,
        },
        clients,
        duration_s: duration.as_secs_f64(),
        ratio: median(&contended_rates) / median(&alone_rates),
        alone_requests_per_grant: counted(&alone, |round| round.requests_per_grant),
        contended_requests_per_grant: counted(&contended, |round| round.requests_per_grant),
        contended_lost_per_grant: counted(&contended, |round| round.lost_per_grant),
        contended_arrival_wait_mean: counted(&contended, |round| round.arrival_wait.map(|w| w.0)),
        contended_arrival_wait_max: counted(&contended, |round| round.arrival_wait.map(|w| w.1)),
        contended_document_bytes_most: counted(&contended, |round| {
            round.document_bytes_most.map(|bytes| bytes as f64)
        }),
        alone: alone_rates,
        contended: contended_rates,
    })
}

/// What the clients of a round share: the checks of mutual exclusion and order.
#[derive(Default)]
struct Checks {
    holders: AtomicU64,
    last_granted: AtomicI64,
    violations: AtomicU64,
}

impl Checks {
    /// The client whose place is `mine` holds, for no time: counted as a violation if another
    /// held meanwhile or a later place held before it.
    fn hold(&self, mine: i64) {
        if self.holders.fetch_add(1, Ordering::SeqCst) != 0
            || self.last_granted.fetch_max(mine, Ordering::SeqCst) > mine
        {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.holders.fetch_sub(1, Ordering::SeqCst);
    }

    /// An error if any grant was a violation.
    fn verdict(&self) -> Result<()> {
        let violations = self.violations.load(Ordering::Relaxed);
        if violations > 0 {
            bail!(
                "{violations} grants overlapped or passed an earlier arrival: the floor is wrong"
            );
        }
        Ok(())
    }
}

/// A client of the floors whose clients are tasks.
#[async_trait]
trait Cycling: Send + 'static {
    /// Enqueues, waits for its turn, holds for no time, releases: returns when it held.
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant>;
}

/// Runs `clients` as tasks, cycling from a common start for `duration`: grants a second made
/// inside it, and every turn taken (those that ended past it too).
async fn cycle_together<C: Cycling>(clients: Vec<C>, duration: Duration) -> Result<(f64, u64)> {
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let checks = Arc::new(Checks::default());
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let (start, checks) = (start.clone(), checks.clone());
            tokio::spawn(async move {
                start.wait().await;
                let deadline = Instant::now() + duration;
                let (mut granted, mut turns) = (0_u64, 0_u64);
                while Instant::now() < deadline {
                    turns += 1;
                    if client.cycle(&checks).await? <= deadline {
                        granted += 1;
                    }
                }
                anyhow::Ok((granted, turns))
            })
        })
        .collect();
    let (mut grants, mut turns) = (0, 0);
    for task in tasks {
        let (granted, taken) = task.await.context("a client panicked")??;
        grants += granted;
        turns += taken;
    }
    checks.verdict()?;
    Ok((grants as f64 / duration.as_secs_f64(), turns))
}

/// The report as a few lines of text.
pub fn print(report: &Report, out: &mut String) {
    use std::fmt::Write;
    let listed = |values: &[f64], decimals: usize| {
        values
            .iter()
            .map(|value| format!("{value:.decimals$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (rates, counts) = (|values| listed(values, 0), |values| listed(values, 2));
    let shape = match report.store {
        "etcd" => "a first-come lock, a key per entry, the next in line woken by etcd's watch",
        "etcd-document" => {
            "a first-come lock, the queue one key written by compare-and-swap, waiters woken by \
             its watch"
        }
        "etcd-arrivals" => {
            "a first-come lock, the queue one key written by compare-and-swap and enqueued into \
             by arrivals beside it, waiters woken by its watch"
        }
        "etcd-arrivals-read" => {
            "a first-come lock, the queue one key written by compare-and-swap and enqueued into \
             by arrivals beside it, which the holder reads before its release; waiters woken by \
             the key's watch"
        }
        _ => "a first-come lock, the next in line told by the releaser",
    };
    let padded = match report.document_pad_bytes {
        0 => String::new(),
        bytes => format!(", every write of the document padded with {bytes} bytes"),
    };
    let _ = writeln!(
        out,
        "hot-floor on {}: {shape}{padded}; {} s rounds, load average {}",
        report.store,
        report.duration_s,
        describe_load(report.load_average_1m)
    );
    let _ = writeln!(out, "grants/s, 1 client alone: {}", rates(&report.alone));
    let _ = writeln!(
        out,
        "grants/s, {} clients on one key: {}",
        report.clients,
        rates(&report.contended)
    );
    let _ = writeln!(
        out,
        "{} vs 1 client, medians: {:.2}x",
        report.clients, report.ratio
    );
    if !report.contended_requests_per_grant.is_empty() {
        let _ = writeln!(
            out,
            "requests/grant, 1 client alone: {}; {} clients: {} (of which lost writes: {})",
            counts(&report.alone_requests_per_grant),
            report.clients,
            counts(&report.contended_requests_per_grant),
            counts(&report.contended_lost_per_grant)
        );
    }
    if !report.contended_arrival_wait_mean.is_empty() {
        let _ = writeln!(
            out,
            "document writes an arrival waited, {} clients: mean {}; most {}",
            report.clients,
            counts(&report.contended_arrival_wait_mean),
            rates(&report.contended_arrival_wait_max)
        );
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
